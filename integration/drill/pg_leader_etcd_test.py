"""A replica that follows the leader named in the HA manager's etcd.

A real PostgreSQL 15 primary P with a streaming standby S (pg_basebackup),
walship-agent AP beside P (member "p") and AS beside S (member "s"), a
one-member etcd holding the leader key /service/walship-test/leader as
Patroni's etcd3 DCS does, and one walship-replica R with
--agent=p=AP,s=AS --leader-etcd=ETCD --leader-key=KEY.

a. The key names s: R refuses AP itself (not_leader, counted and logged
   naming s, round after round) without a handshake there, AS refuses R
   (not_primary), and R holds nothing; the key reads
   (walship_replica_leader_key_readable 1).
b. The key names p: R follows AP and holds P's rows.
c. The key names s again: R's leader watch ends the session with AP within
   a few seconds, and R takes nothing more from AP while P commits.
d. The key deleted: R logs that etcd has no leader and still takes
   nothing.
e. The key names p: R catches up with P.
f. etcd killed during the session: R keeps following AP (its node is
   still a primary), warns that the key cannot be read, and the gauge says
   0.
g. R restarted with etcd still down: it follows nobody (not_leader,
   logged as an unreadable key) and holds nothing new while P commits.
h. etcd started again (its data kept): R follows AP and catches up.
i. --leader-etcd with an --agent entry without a member name, or without
   --leader-key: exit 1 (bad set-up) naming the flag.

The parts run in order in one test (each builds on the one before).

A second test gives the key to the agent instead: AP with
--leader-etcd/--leader-key/--member=p, and a replica R2 that knows only AP
and nothing of etcd.

j. The key names s: AP refuses R2 (not_leader, counted on both sides),
   says NOT_SERVING (walship_agent_source_up 0, walship_agent_leader_named
   0) and R2 holds nothing, although P is a primary. etcd has a member key
   for s only: AP warns that --member=p names no member there, and says so
   once p's key appears.
k. The key names p: R2 follows AP (named 1, source_up 1).
l. The key names s again: AP ends the session within a few seconds and
   refuses R2 from then on; R2 takes nothing more while P commits. With
   synchronous_standby_names = 'walship', a commit on P waits.
m. The key names p: the waiting commit completes, and R2 catches up.
n. etcd killed: the session goes on (readable 0); R2 restarted with etcd
   down is refused until etcd answers again, then catches up.
o. --leader-etcd without --member, or --member without --leader-etcd:
   the agent does not start, naming the flag.

Two more read the key over TLS, and as an etcd user (below).
"""
import base64
import json
import os
import re
import shutil
import ssl
import threading
import time
import unittest
import urllib.request

from integration.walshiptest import procs, waits
from integration.walshiptest import etcd as wetcd
from integration.walshiptest import ports as wports

from integration import harness
from integration.drill.pg_nodes_case import PgNodesCase

KEY = "/service/walship-test/leader"
MEMBERS = "/service/walship-test/members/"


class PgLeaderEtcdTest(PgNodesCase):
    AREA = "le"

    # -- helpers ----------------------------------------------------------
    def standby(self, source):
        """A standby streaming from `source` (pg_basebackup -R), started."""
        c = self.basebackup(source, "standby")
        c.start(wait_for=("ready", "standby"))
        return c

    def replica_argv(self, agents, dest, metrics_port, leader_flags):
        return [self.env.binaries["walship-replica"], "--agent=%s" % agents,
                "--dest=%s" % dest, "--name=r1", "--insecure", "--log-level=info",
                "--metrics-listen=127.0.0.1:%d" % metrics_port] + leader_flags

    def start_replica(self, dest):
        """R with both agents by member name, the leader read from etcd."""
        self.replica_metrics_port = wports.free_port()
        return procs.Proc(self.env, "r1", self.replica_argv(
            self.agents, dest, self.replica_metrics_port, self.leader_flags),
            self.show(os.path.join(self.logs, "r1.log")))

    def set_leader(self, member):
        """Puts the leader key naming `member` or, with None, deletes it."""
        if member is None:
            self.assertTrue(self.etcd.delete(KEY.encode()))
        else:
            self.assertTrue(self.etcd.put(KEY.encode(), member.encode()))

    def set_sync(self, pg, name):
        """synchronous_standby_names = `name` on `pg`, in force on return."""
        pg.psql("ALTER SYSTEM SET synchronous_standby_names = '%s'" % name)
        pg.psql("SELECT pg_reload_conf()")
        waits.wait_until(lambda: pg.psql("SHOW synchronous_standby_names") == name, 30,
                         "synchronous_standby_names = '%s'" % name)

    def refusals(self, agent, reason="not_leader"):
        """R's refusals of `agent` (HOST:PORT) for `reason`; 0 when none."""
        return self.replica_metric("walship_replica_agent_refusals_total",
                                   '{agent="%s",reason="%s"}' % (agent, reason)) or 0

    def readable(self):
        return self.replica_metric("walship_replica_leader_key_readable")

    # -- the scenario -----------------------------------------------------
    def test_replica_follows_the_leader_key(self):
        p = self.primary()
        p.psql("CREATE TABLE t (x int PRIMARY KEY, pad text)")
        self.insert(p, 1, 100)
        s = self.standby(p)
        self.assertEqual(s.psql("SELECT pg_is_in_recovery()"), "t")
        ap_port, as_port = wports.free_port(), wports.free_port()
        ap, ap_metrics = self.start_agent(p, "agent-p", ap_port)
        as_, as_metrics = self.start_agent(s, "agent-s", as_port)
        ap_addr, as_addr = "127.0.0.1:%d" % ap_port, "127.0.0.1:%d" % as_port
        self.etcd = wetcd.Etcd(self.logs, os.path.join(self.env.mkdir("le", "etcd"), "data"),
                               "etcd", on_close=self.addCleanup).start()
        self.show(self.etcd.proc.log_path)
        self.agents = "p=%s,s=%s" % (ap_addr, as_addr)
        self.leader_flags = ["--leader-etcd=127.0.0.1:%d" % self.etcd.client_port,
                             "--leader-key=%s" % KEY]
        dest = os.path.join(self.dir, "r1")

        def ap_handshakes():
            return self.metric(ap_metrics, "walship_agent_handshakes_total", '{replica="r1"}')

        # a. The key names s: R refuses AP itself; AS is not a primary.
        self.set_leader("s")
        r = self.start_replica(dest)
        waits.wait_until(lambda: self.refusals(ap_addr) >= 2, 60,
                         "R to refuse AP (not_leader) twice")
        waits.wait_until(lambda: self.refusals(as_addr, "not_primary") >= 1, 30,
                         "AS to refuse R (not_primary)")
        text = procs.read_text(r.log_path)
        self.assertIn("etcd names s as the leader (key %s)" % KEY, text)
        self.assertRegex(text, r"agent %s \(1 of 2\): .*etcd names s as the leader \(key %s\)"
                         r".*trying %s next" % (re.escape(ap_addr), re.escape(KEY),
                                                re.escape(as_addr)))
        self.assertIsNone(ap_handshakes(), "AP accepted R")
        self.assertIsNone(self.durable(dest), "R holds WAL while etcd names s")
        self.assertEqual(self.readable(), 1)
        self.assertTrue(r.alive(), procs.read_text(r.log_path))

        # b. The key names p: R follows AP.
        since = len(procs.read_text(r.log_path))
        self.set_leader("p")
        end = self.insert(p, 101, 2000)
        self.wait_holds(dest, 1, end, "R to hold P's rows through AP")
        self.assertIn("following agent %s" % ap_addr, procs.read_text(r.log_path, since))
        self.assertEqual(self.replica_metric("walship_replica_agent_active",
                                             '{agent="%s"}' % ap_addr), 1)

        # c. The key names s again: the leader watch leaves AP, and R takes
        # nothing more from it while P commits.
        before = self.refusals(ap_addr)
        since = len(procs.read_text(r.log_path))
        self.set_leader("s")
        self.wait_log(r, "leader watch: etcd names s as the leader (key %s), not p: leaving "
                      "agent %s" % (KEY, ap_addr), since, "R's leader watch to leave AP")
        waits.wait_until(lambda: self.refusals(ap_addr) > before, 30,
                         "R to refuse AP (not_leader) after leaving it")
        held = self.durable(dest)
        handshakes = ap_handshakes()
        counted = self.refusals(ap_addr)
        end = self.insert(p, 2001, 4000)
        waits.wait_until(lambda: self.refusals(ap_addr) >= counted + 2, 60,
                         "two more refusals of AP")
        self.assertTrue(r.alive(), procs.read_text(r.log_path, since))
        self.assertEqual(self.durable(dest), held, "R took WAL while etcd names s")
        self.assertLess(held[1], end)
        self.assertEqual(ap_handshakes(), handshakes, "AP accepted R while etcd names s")

        # A member no --agent entry names: still nothing taken, and the log
        # says what to add.
        since = len(procs.read_text(r.log_path))
        self.set_leader("q")
        self.wait_log(r, "etcd names q as the leader (key %s), a member no --agent entry names"
                      % KEY, since, "R to warn of a leader it has no agent for")
        self.assertEqual(self.durable(dest), held, "R took WAL while etcd names q")

        # d. The key deleted: no leader, still nothing taken.
        since = len(procs.read_text(r.log_path))
        self.set_leader(None)
        self.wait_log(r, "etcd has no leader (key %s absent)" % KEY, since,
                      "R to see the key absent", timeout=60)
        self.assertTrue(r.alive(), procs.read_text(r.log_path, since))
        self.assertEqual(self.durable(dest), held, "R took WAL while etcd has no leader")
        self.assertEqual(self.readable(), 1)

        # e. The key names p again: R catches up.
        self.set_leader("p")
        end = self.insert(p, 4001, 5000)
        self.wait_holds(dest, 1, end, "R to catch up with P through AP")

        # f. etcd gone during the session: R stays with AP.
        since = len(procs.read_text(r.log_path))
        self.etcd.kill()
        self.wait_log(r, "leader watch: cannot read the leader key", since,
                      "R's leader watch to warn that etcd cannot be read")
        waits.wait_until(lambda: self.readable() == 0, 30,
                         "walship_replica_leader_key_readable to say 0")
        end = self.insert(p, 5001, 6000)
        self.wait_holds(dest, 1, end, "R to go on holding P's rows with etcd down")
        self.assertTrue(r.alive())
        self.assertNotIn("leaving agent", procs.read_text(r.log_path, since))
        self.assertEqual(self.replica_metric("walship_replica_agent_active",
                                             '{agent="%s"}' % ap_addr), 1)

        # g. R restarted with etcd down: it follows nobody.
        self.assertEqual(r.stop(), 0)
        held = self.durable(dest)
        handshakes = ap_handshakes()
        since = len(procs.read_text(r.log_path))
        r = self.start_replica(dest)
        end = self.insert(p, 6001, 7000)
        waits.wait_until(lambda: self.refusals(ap_addr) >= 2, 60,
                         "the restarted R to refuse AP (not_leader) twice")
        self.assertIn("cannot read the leader key %s from etcd" % KEY,
                      procs.read_text(r.log_path, since))
        self.assertGreaterEqual(self.refusals(as_addr), 1)
        self.assertEqual(self.readable(), 0)
        self.assertTrue(r.alive(), procs.read_text(r.log_path, since))
        self.assertEqual(self.durable(dest), held, "R took WAL with etcd down")
        self.assertLess(held[1], end)
        self.assertEqual(ap_handshakes(), handshakes, "AP accepted R with etcd down")

        # h. etcd back (its data kept: the key names p): R follows AP again.
        self.etcd.start()
        end = self.insert(p, 7001, 7500)
        self.wait_holds(dest, 1, end, "R to follow AP once etcd answers again")
        self.assertEqual(self.readable(), 1)
        self.assertIn("leader key: etcd names p as the leader (key %s)" % KEY,
                      procs.read_text(r.log_path, since))
        self.assertEqual(r.stop(), 0)

        # i. --leader-etcd needs a member name in every --agent entry, and
        # --leader-key.
        bad = [("127.0.0.1:%d,127.0.0.1:%d" % (ap_port, as_port), self.leader_flags, "--agent"),
               ("p=%s,%s" % (ap_addr, as_addr), self.leader_flags, "--agent"),
               (self.agents, self.leader_flags[:1], "--leader-key")]
        for agents, flags, named in bad:
            argv = self.replica_argv(agents, os.path.join(self.dir, "bad"), wports.free_port(),
                                     flags)
            res = self.env.run(argv, timeout=30, check=False)
            self.assertEqual(res.returncode, 1, (argv, res.stdout, res.stderr))
            self.assertIn(named, res.stdout + res.stderr, argv)

        self.assertEqual(ap.stop(), 0)
        self.assertEqual(as_.stop(), 0)

    # -- the key at the agent ------------------------------------------------
    def test_agent_serves_only_its_member(self):
        p = self.primary()
        p.psql("CREATE TABLE t (x int PRIMARY KEY, pad text)")
        self.insert(p, 1, 100)
        self.etcd = wetcd.Etcd(self.logs, os.path.join(self.env.mkdir("le", "etcd"), "data"),
                               "etcd", on_close=self.addCleanup).start()
        self.show(self.etcd.proc.log_path)
        leader = ["--leader-etcd=127.0.0.1:%d" % self.etcd.client_port, "--leader-key=%s" % KEY]
        self.set_leader("s")
        # Patroni's member keys beside the leader key: only s's so far.
        self.assertTrue(self.etcd.put((MEMBERS + "s").encode(), b'{"role": "replica"}'))
        ap_port = wports.free_port()
        ap, ap_metrics = self.start_agent(p, "agent-p", ap_port, leader + ["--member=p"])
        ap_addr = "127.0.0.1:%d" % ap_port
        self.agents, self.leader_flags = ap_addr, []
        dest = os.path.join(self.dir, "r2")

        def agent(name, labels=""):
            return self.metric(ap_metrics, name, labels)

        def refused():
            return agent("walship_agent_handshakes_refused_total", '{reason="not_leader"}') or 0

        def ap_log(since=0):
            return procs.read_text(ap.log_path, since)

        # j. The key names s: AP serves nobody although P is a primary.
        r = self.start_replica(dest)
        waits.wait_until(lambda: self.refusals(ap_addr) >= 2, 60,
                         "AP to refuse R2 (not_leader) twice")
        self.assertGreaterEqual(refused(), 2)
        self.assertIn("this agent's node is member p and etcd names s as the leader (key %s)"
                      % KEY, procs.read_text(r.log_path))
        self.assertEqual(agent("walship_agent_leader_named"), 0)
        self.assertEqual(agent("walship_agent_leader_key_readable"), 1)
        self.assertEqual(agent("walship_agent_source_up"), 0)
        self.assertIsNone(self.durable(dest), "R2 holds WAL while etcd names s")
        self.assertTrue(r.alive(), procs.read_text(r.log_path))

        # No member p in etcd: AP says --member may be wrong.
        self.assertIn("--member=p: etcd has no member of that name under %s (it has s)"
                      % MEMBERS, ap_log())

        # k. The key names p (and p's member key is there): R2 follows AP.
        since = len(ap_log())
        self.assertTrue(self.etcd.put((MEMBERS + "p").encode(), b'{"role": "primary"}'))
        waits.wait_until(lambda: "--member=p: etcd has that member under %s now" % MEMBERS
                         in ap_log(since), 30, "AP to find its member in etcd")
        self.set_leader("p")
        end = self.insert(p, 101, 2000)
        self.wait_holds(dest, 1, end, "R2 to hold P's rows through AP")
        self.assertEqual(agent("walship_agent_leader_named"), 1)
        self.assertEqual(agent("walship_agent_source_up"), 1)

        # l. The key names s: AP ends the session and takes no new one.
        since, before = len(ap_log()), self.refusals(ap_addr)
        self.set_leader("s")
        waits.wait_until(lambda: "ending the session: this agent's node is member p and etcd "
                         "names s as the leader" in ap_log(since), 30,
                         "AP to end R2's session")
        waits.wait_until(lambda: self.refusals(ap_addr) >= before + 2, 60,
                         "AP to refuse R2 twice after ending its session")
        held = self.durable(dest)
        end = self.insert(p, 2001, 4000)
        counted = self.refusals(ap_addr)
        waits.wait_until(lambda: self.refusals(ap_addr) >= counted + 2, 60,
                         "two more refusals of R2")
        self.assertEqual(self.durable(dest), held, "R2 took WAL while etcd names s")
        self.assertLess(held[1], end)
        self.assertTrue(r.alive(), procs.read_text(r.log_path))
        self.assertEqual(agent("walship_agent_source_up"), 0)
        # With walship synchronous, the fenced node completes no commit.
        self.set_sync(p, "walship")
        committed = threading.Event()

        def commit():
            p.psql("INSERT INTO t VALUES (4001, 'sync')", timeout=120)
            committed.set()
        threading.Thread(target=commit, daemon=True).start()
        self.assertFalse(committed.wait(5), "P completed a commit while its agent is fenced")

        # m. The key names p: R2 catches up, and the waiting commit completes.
        self.set_leader("p")
        self.assertTrue(committed.wait(60), "the commit to complete once AP serves R2")
        self.set_sync(p, "")
        end = self.insert(p, 4002, 5000)
        self.wait_holds(dest, 1, end, "R2 to catch up with P through AP")

        # n. etcd gone: the session goes on; a new one waits for etcd.
        since = len(ap_log())
        self.etcd.kill()
        waits.wait_until(lambda: agent("walship_agent_leader_key_readable") == 0, 30,
                         "walship_agent_leader_key_readable to say 0")
        end = self.insert(p, 5001, 6000)
        self.wait_holds(dest, 1, end, "R2 to go on holding P's rows with etcd down")
        self.assertNotIn("ending the session", ap_log(since))
        self.assertEqual(r.stop(), 0)
        held, before = self.durable(dest), refused()
        r = self.start_replica(dest)
        end = self.insert(p, 6001, 7000)
        waits.wait_until(lambda: refused() >= before + 2, 60,
                         "AP to refuse the restarted R2 with etcd down")
        self.assertIn("cannot read the leader key %s from etcd" % KEY, ap_log(since))
        self.assertEqual(self.durable(dest), held, "R2 took WAL with etcd down")
        self.assertLess(held[1], end)
        self.etcd.start()
        self.wait_holds(dest, 1, end, "R2 to follow AP once etcd answers again")
        self.assertEqual(r.stop(), 0)
        self.assertEqual(ap.stop(), 0)

        # o. A member name and the key go together.
        for flags, named in [(leader, "--member"), (["--member=p"], "--member")]:
            argv = [self.env.binaries["walship-agent"], "--wal-dir=%s" % p.pg_wal,
                    "--format=postgres", "--pg-conninfo=%s" % p.conninfo(), "--insecure"] + flags
            res = self.env.run(argv, timeout=30, check=False)
            self.assertNotEqual(res.returncode, 0, (argv, res.stdout, res.stderr))
            self.assertIn(named, res.stdout + res.stderr, argv)

    # -- etcd with users ----------------------------------------------------
    def test_leader_key_as_an_etcd_user(self):
        """etcd with authentication on: the replica and the agent read the
        key as a user with --leader-etcd-user/-password-file, with a new
        token once etcd let the first expire, after etcd restarted, and
        after the password changed in etcd and then in its file (no
        restart); a wrong password, a
        user without read access, or no user: the key is unreadable and
        the log says why; the two flags go together."""
        # Tokens unused for 2 s expire.
        etcd = wetcd.Etcd(self.logs, os.path.join(self.env.mkdir("le", "etcd-auth"), "data"),
                          "etcd-auth", on_close=self.addCleanup,
                          extra_args=["--auth-token-ttl", "2"]).start()
        self.show(etcd.proc.log_path)
        self.assertTrue(etcd.put(KEY.encode(), b"p"))
        etcd.enable_auth("root-secret", {"walship": "s3cret"})
        etcd.add_user("outsider", "other")
        secrets = self.env.mkdir("le", "secrets")
        files = {}
        for name, text in [("right", "s3cret\n"), ("wrong", "guess\n"), ("outsider", "other")]:
            files[name] = os.path.join(secrets, name)
            with open(files[name], "w") as f:
                f.write(text)
            self.env.chown(files[name])
        base = ["--leader-etcd=127.0.0.1:%d" % etcd.client_port, "--leader-key=%s" % KEY]
        agents = "p=127.0.0.1:%d,s=127.0.0.1:%d" % (wports.free_port(), wports.free_port())
        log = os.path.join(self.logs, "r1.log")

        def replica(flags):
            self.replica_metrics_port = wports.free_port()
            since = len(procs.read_text(log)) if os.path.exists(log) else 0
            return since, procs.Proc(self.env, "r1", self.replica_argv(
                agents, os.path.join(self.dir, "auth-dest"), self.replica_metrics_port,
                base + flags), self.show(log))

        names = "leader key: etcd names %s as the leader (key %s)"
        since, r = replica(["--leader-etcd-user=walship",
                            "--leader-etcd-password-file=%s" % files["right"]])
        self.wait_log(r, names % ("p", KEY), since, "R to read the key as walship")
        self.assertEqual(self.readable(), 1)
        self.assertIn("as etcd user walship", procs.read_text(log, since))
        self.assertIn("the password goes to etcd in plaintext", procs.read_text(log, since))
        # R paused past the token's lifetime: etcd no longer takes it, and R
        # asks for a new one.
        r.pause()
        time.sleep(5)
        self.assertTrue(etcd.put(KEY.encode(), b"s"))
        r.resume()
        self.wait_log(r, names % ("s", KEY), since, "R to read the key again with a new token")
        self.assertNotIn("cannot read the leader key", procs.read_text(log, since))
        # And after etcd restarted.
        etcd.kill()
        self.wait_log(r, "cannot read the leader key", since, "R to lose etcd")
        etcd.start()
        self.assertTrue(etcd.put(KEY.encode(), b"p"))
        waits.wait_until(lambda: procs.read_text(log, since).count(names % ("p", KEY)) >= 2, 30,
                         "R to read the key after etcd restarted")
        # The password rotated: etcd first (R's token and password no longer
        # count), then R's file, rewritten in place: R reads again without a
        # restart.
        etcd.change_password("walship", "n3w")
        self.assertTrue(etcd.put(KEY.encode(), b"s"))
        self.wait_log(r, "authenticating as walship: etcdserver: authentication failed", since,
                      "R to fail with the old password")
        waits.wait_until(lambda: self.readable() == 0, 30, "R's key to be unreadable")
        rotated = len(procs.read_text(log))
        with open(files["right"], "w") as f:
            f.write("n3w\n")
        self.wait_log(r, "leader key: --leader-etcd-password-file=%s changed on disk: read again"
                      % files["right"], rotated, "R to read its password file again")
        waits.wait_until(lambda: self.readable() == 1, 30, "R to read the key with the new password")
        self.assertTrue(etcd.put(KEY.encode(), b"p"))
        self.wait_log(r, names % ("p", KEY), rotated, "R to follow the key with the new password")
        self.assertEqual(r.stop(), 0)

        unreadable = "leader key: cannot read the leader key %s from etcd" % KEY
        for what, flags, cause in [
                ("a wrong password", ["--leader-etcd-user=walship",
                                      "--leader-etcd-password-file=%s" % files["wrong"]],
                 "authenticating as walship: etcdserver: authentication failed"),
                ("a user without read access", ["--leader-etcd-user=outsider",
                                                "--leader-etcd-password-file=%s"
                                                % files["outsider"]],
                 "permission denied"),
                ("no user", [], "user name is empty")]:
            since, r = replica(flags)
            self.wait_log(r, unreadable, since, "R (%s) to find the key unreadable" % what)
            self.assertIn(cause, procs.read_text(log, since), what)
            waits.wait_until(lambda: self.readable() == 0, 30,
                             "walship_replica_leader_key_readable of R (%s)" % what)
            self.assertEqual(r.stop(), 0)

        # The agent reads it the same way (an append-format agent: no
        # database needed to see what the key says).
        wal = self.env.mkdir("le", "auth-wal")
        agent_log = self.show(os.path.join(self.logs, "agent-auth.log"))
        a = procs.Proc(self.env, "agent-auth", [
            self.env.binaries["walship-agent"], "--wal-dir=%s" % wal, "--insecure",
            "--member=p", "--leader-etcd-user=walship",
            "--leader-etcd-password-file=%s" % files["right"]] + base, agent_log)
        waits.wait_until(lambda: "leader key (at start): etcd names p as the leader (key %s): "
                         "this agent's node, member p, serves replicas" % KEY
                         in procs.read_text(agent_log), 30, "the agent to read the key as walship")
        self.assertEqual(a.stop(), 0)

        for flags, named in [(["--leader-etcd-user=walship"], "--leader-etcd-password-file"),
                             (["--leader-etcd-password-file=%s" % files["right"]],
                              "--leader-etcd-user"),
                             (["--leader-etcd-user=walship", "--leader-etcd-password-file=%s"
                               % os.path.join(secrets, "none")], "--leader-etcd-password-file")]:
            argv = self.replica_argv(agents, os.path.join(self.dir, "bad"), wports.free_port(),
                                     base + flags)
            res = self.env.run(argv, timeout=30, check=False)
            self.assertEqual(res.returncode, 1, (argv, res.stdout, res.stderr))
            self.assertIn(named, res.stdout + res.stderr, argv)

    # -- etcd over TLS ------------------------------------------------------
    def test_leader_key_over_tls(self):
        """etcd serving TLS and asking for client certificates: the replica
        reads the key with --leader-etcd-ca/-cert/-key; with another CA, or
        without a client certificate, the key is unreadable (logged, gauge
        0) and no agent is followed; a client certificate rotated on disk is
        read again without a restart; half-given TLS flags are a bad
        set-up."""
        # etcd's own gateway dials etcd with etcd's certificate, so that one
        # serves both ends (a serving replica's shape).
        certs = harness.Certs(self.env.mkdir("le", "certs"), "--serving-replica=etcd", "r1")
        other = harness.Certs(self.env.mkdir("le", "other-ca"), "r1")
        for c in (certs, other):  # the replica runs as the test's user
            for name in [c.dir] + [os.path.join(c.dir, n) for n in os.listdir(c.dir)]:
                self.env.chown(name)
        port, peer = wports.free_port(), wports.free_port()
        client = "https://127.0.0.1:%d" % port
        etcd_log = self.show(os.path.join(self.logs, "etcd-tls.log"))
        etcd = procs.Proc(self.env, "etcd-tls", [
            wetcd.ETCD, "--name", "m0", "--data-dir", self.env.mkdir("le", "etcd-tls"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
            "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
            "--initial-cluster", "m0=http://127.0.0.1:%d" % peer,
            "--cert-file", os.path.join(certs.dir, "etcd.pem"),
            "--key-file", os.path.join(certs.dir, "etcd.key"),
            "--trusted-ca-file", certs.ca, "--client-cert-auth",
            "--logger", "zap", "--log-outputs", "stderr"], etcd_log)
        self.addCleanup(etcd.stop)
        ctx = ssl.create_default_context(cafile=certs.ca)
        ctx.load_cert_chain(os.path.join(certs.dir, "r1.pem"), os.path.join(certs.dir, "r1.key"))

        def put():
            body = json.dumps({"key": base64.b64encode(KEY.encode()).decode(),
                               "value": base64.b64encode(b"p").decode()}).encode()
            try:
                with urllib.request.urlopen(urllib.request.Request(
                        client + "/v3/kv/put", data=body, method="POST"),
                        timeout=5, context=ctx) as r:
                    return "header" in json.loads(r.read().decode())
            except OSError:
                self.assertTrue(etcd.alive(), procs.read_text(etcd_log)[-3000:])
                return False
        waits.wait_until(put, 30, "the TLS etcd to take the leader key", interval=0.2)

        # No agent listens at these ports: each session fails after the
        # key was read, which is all this test looks at.
        agents = "p=127.0.0.1:%d,s=127.0.0.1:%d" % (wports.free_port(), wports.free_port())
        tls = ["--leader-etcd-ca=%s" % certs.ca,
               "--leader-etcd-cert=%s" % os.path.join(certs.dir, "r1.pem"),
               "--leader-etcd-key=%s" % os.path.join(certs.dir, "r1.key")]
        cases = [("the right CA and a client certificate", tls, True, ""),
                 ("another CA", ["--leader-etcd-ca=%s" % other.ca] + tls[1:], False,
                  "certificate verify failed"),
                 ("no client certificate", tls[:1], False, "")]
        for what, flags, readable, cause in cases:
            self.replica_metrics_port = wports.free_port()
            log = os.path.join(self.logs, "r1.log")
            since = len(procs.read_text(log)) if os.path.exists(log) else 0
            r = procs.Proc(self.env, "r1", self.replica_argv(
                agents, os.path.join(self.dir, "tls-dest"), self.replica_metrics_port,
                ["--leader-etcd=127.0.0.1:%d" % port, "--leader-key=%s" % KEY] + flags),
                self.show(log))
            want = ("leader key: etcd names p as the leader (key %s)" % KEY if readable
                    else "leader key: cannot read the leader key %s from etcd" % KEY)
            self.wait_log(r, want, since, "R (%s) to log %r" % (what, want))
            waits.wait_until(lambda: self.readable() == (1 if readable else 0), 30,
                             "walship_replica_leader_key_readable of R (%s)" % what)
            self.assertIn("(TLS)", procs.read_text(log, since))
            self.assertIn(cause, procs.read_text(log, since))
            self.assertEqual(r.stop(), 0)

        # A client certificate rotated in place (written beside, renamed
        # over, as certificate managers do): R starts with one etcd does not
        # trust, and reads the key once the files hold one it does, without
        # a restart.
        rot = self.env.mkdir("le", "rotated")
        for n in ("r1.pem", "r1.key"):
            shutil.copy(os.path.join(other.dir, n), os.path.join(rot, n))
            self.env.chown(os.path.join(rot, n))
        self.replica_metrics_port = wports.free_port()
        log = os.path.join(self.logs, "r1.log")
        since = len(procs.read_text(log)) if os.path.exists(log) else 0
        r = procs.Proc(self.env, "r1", self.replica_argv(
            agents, os.path.join(self.dir, "tls-dest"), self.replica_metrics_port,
            ["--leader-etcd=127.0.0.1:%d" % port, "--leader-key=%s" % KEY,
             "--leader-etcd-ca=%s" % certs.ca,
             "--leader-etcd-cert=%s" % os.path.join(rot, "r1.pem"),
             "--leader-etcd-key=%s" % os.path.join(rot, "r1.key")]), self.show(log))
        self.wait_log(r, "leader key: cannot read the leader key %s from etcd" % KEY, since,
                      "R with a certificate etcd does not trust to find the key unreadable")
        for n in ("r1.pem", "r1.key"):
            shutil.copy(os.path.join(certs.dir, n), os.path.join(rot, n + ".new"))
            self.env.chown(os.path.join(rot, n + ".new"))
            os.rename(os.path.join(rot, n + ".new"), os.path.join(rot, n))
        self.wait_log(r, "changed on disk: read again", since, "R to read the new files")
        self.wait_log(r, "leader key: etcd names p as the leader (key %s)" % KEY, since,
                      "R to read the key with the rotated certificate")
        waits.wait_until(lambda: self.readable() == 1, 30, "the key to be readable")
        self.assertEqual(r.stop(), 0)

        for flags, named in [(tls[1:], "--leader-etcd-ca"), (tls[:2], "--leader-etcd-key"),
                             (["--leader-etcd-ca=%s" % os.path.join(self.dir, "none.pem")],
                              "--leader-etcd-ca")]:
            argv = self.replica_argv(agents, os.path.join(self.dir, "bad"), wports.free_port(),
                                     ["--leader-etcd=127.0.0.1:%d" % port,
                                      "--leader-key=%s" % KEY] + flags)
            res = self.env.run(argv, timeout=30, check=False)
            self.assertEqual(res.returncode, 1, (argv, res.stdout, res.stderr))
            self.assertIn(named, res.stdout + res.stderr, argv)


if __name__ == "__main__":
    unittest.main()
