"""A replica that finds its agents in the HA manager's member keys.

A real PostgreSQL 15 primary P with a streaming standby S (pg_basebackup),
walship-agent AP beside P and AS beside S, a one-member etcd holding the
leader key /service/walship-test/leader and the member keys
/service/walship-test/members/NAME as Patroni's etcd3 DCS writes them (a
JSON object with the tags of the member's configuration), and one
walship-replica R given no --agent at all: --leader-etcd, --leader-key and
--agent-tag=walship_agent.

a. No member key yet: R follows nobody, says so (no agent to follow;
   walship_replica_agents_known 0) and holds nothing.
b. p's key tags AP, s's key carries no tag, the leader key names p: R
   learns AP without a restart, logs the agents it found and the member
   without the tag, and holds P's rows. Restarted while etcd is down, R
   warns that it cannot read the member keys, knows no agent and takes
   nothing; once etcd is back it follows AP again.
c. A failover: P stopped (S replays all of it), s's key tagged with AS,
   the key names s, S promoted. R leaves AP, finds AS in s's key, and
   follows S onto timeline 2.
d. --agent-tag without --leader-etcd: exit 1, naming the flag.

walship-status given the same flags (no --agent) says, in b, that p's agent
serves as the key says; in c, before the promotion, that the agent of the
member the key names does not serve; after it, that s's serves timeline 2.

Patroni itself writes these keys in the Patroni drills
(`walship-drill --drills patroni`, patroni_drill_quick_test), whose replicas
run the guide's command with --agent-tag.
"""
import json
import os
import unittest

from integration.walshiptest import daemons, procs, waits
from integration.walshiptest import etcd as wetcd
from integration.walshiptest import lsn as wlsn
from integration.walshiptest import ports as wports

from integration.drill.pg_nodes_case import PgNodesCase

SCOPE = "/service/walship-test/"
KEY = SCOPE + "leader"
MEMBERS = SCOPE + "members/"
TAG = "walship_agent"


def member_value(pg, role, agent=None):
    """A member key's value as Patroni 3.0 writes it (ha.py touch_member)."""
    value = {"conn_url": "postgres://127.0.0.1:%d/postgres" % pg.port,
             "api_url": "http://127.0.0.1:8008/patroni", "state": "running", "role": role,
             "version": "3.0.2", "timeline": 1}
    if agent is not None:
        value["tags"] = {"nofailover": False, TAG: agent}
    return json.dumps(value).encode()


class PgMemberAgentsTest(PgNodesCase):
    AREA = "ma"

    def replica_argv(self, dest, flags):
        return [self.env.binaries["walship-replica"], "--dest=%s" % dest, "--name=r1",
                "--insecure", "--log-level=info",
                "--metrics-listen=127.0.0.1:%d" % self.replica_metrics_port] + flags

    def test_agents_from_member_keys(self):
        p = self.primary()
        p.psql("CREATE TABLE t (x int PRIMARY KEY, pad text)")
        self.insert(p, 1, 100)
        s = self.basebackup(p, "standby")
        s.start(wait_for=("ready", "standby"))
        ap_port, as_port = wports.free_port(), wports.free_port()
        ap, _ = self.start_agent(p, "agent-p", ap_port)
        self.start_agent(s, "agent-s", as_port)
        ap_addr, as_addr = "127.0.0.1:%d" % ap_port, "127.0.0.1:%d" % as_port
        etcd = wetcd.Etcd(self.logs, os.path.join(self.env.mkdir(self.AREA, "etcd"), "data"),
                          "etcd", on_close=self.addCleanup).start()
        self.show(etcd.proc.log_path)
        flags = ["--leader-etcd=127.0.0.1:%d" % etcd.client_port, "--leader-key=%s" % KEY,
                 "--agent-tag=%s" % TAG]
        dest = os.path.join(self.dir, "r1")

        # a. No member key: no agent to follow.
        self.assertTrue(etcd.put(KEY.encode(), b"p"))
        self.replica_metrics_port = wports.free_port()
        r = procs.Proc(self.env, "r1", self.replica_argv(dest, flags),
                       self.show(os.path.join(self.logs, "r1.log")))
        self.wait_log(r, "no agent to follow: agents: none (member keys under %s, tag %s)"
                      % (MEMBERS, TAG), 0, "R to say it knows no agent")
        waits.wait_until(lambda: (self.replica_metric(
            "walship_replica_session_failures_total", '{code="UNAVAILABLE"}') or 0) >= 2, 30,
            "R to retry")
        self.assertTrue(r.alive(), procs.read_text(r.log_path))
        self.assertIsNone(self.durable(dest), "R holds WAL without an agent")
        self.assertEqual(self.replica_metric("walship_replica_agents_known"), 0)

        # b. The member keys as Patroni writes them: R learns AP.
        since = len(procs.read_text(r.log_path))
        self.assertTrue(etcd.put((MEMBERS + "p").encode(), member_value(p, "primary", ap_addr)))
        self.assertTrue(etcd.put((MEMBERS + "s").encode(), member_value(s, "replica")))
        end = self.insert(p, 101, 2000)
        self.wait_holds(dest, 1, end, "R to hold P's rows through the agent p's key tags")
        text = procs.read_text(r.log_path, since)
        self.assertIn("agents: p=%s (member keys under %s, tag %s); members without the tag: s"
                      % (ap_addr, MEMBERS, TAG), text)
        self.assertIn("leader key: etcd names p as the leader (key %s)" % KEY, text)
        self.assertEqual(self.replica_metric("walship_replica_agent_active",
                                             '{agent="%s"}' % ap_addr), 1)
        self.assertEqual(self.replica_metric("walship_replica_agents_known"), 1)
        # walship-status given the same flags finds AP and agrees with the key.
        rc, text = daemons.agents_status([], as_json=False, extra=flags)
        self.assertEqual(rc, 0, text)
        self.assertIn("agents from the member keys under %s (tag %s): p=%s\n"
                      "members without the tag: s\n" % (MEMBERS, TAG, ap_addr), text)
        self.assertIn("agent p (%s): serving, timeline 1\n" % ap_addr, text)
        self.assertIn("\nserving: p (%s), timeline 1 (1 of 1 agents)\n"
                      "etcd names p as the leader (key %s)\n" % (ap_addr, KEY), text)
        self.assertNotIn("THE LEADER KEY", text)

        # b2. etcd down, R restarted: it knows no agent until etcd answers;
        # a session already running would go on (the leader key's rule).
        etcd.kill()
        self.assertEqual(r.stop(), 0)
        held = self.durable(dest)
        since = len(procs.read_text(r.log_path))
        r = procs.Proc(self.env, "r1", self.replica_argv(dest, flags), r.log_path)
        self.wait_log(r, "cannot read the member keys under %s: " % MEMBERS, since,
                      "R to warn that etcd cannot be read")
        self.wait_log(r, "no agent to follow: cannot read the member keys", since,
                      "R to say it knows no agent")
        self.assertIn("keeping the agents known (none)", procs.read_text(r.log_path, since))
        end = self.insert(p, 2001, 2500)
        waits.wait_until(lambda: (self.replica_metric(
            "walship_replica_session_failures_total", '{code="UNAVAILABLE"}') or 0) >= 2, 30,
            "R to retry while etcd is down")
        self.assertEqual(self.durable(dest), held, "R took WAL while etcd was down")
        etcd.start()
        self.wait_holds(dest, 1, end, "R to follow AP once etcd answers again")
        self.assertIn("agents: p=%s (member keys under %s, tag %s)" % (ap_addr, MEMBERS, TAG),
                      procs.read_text(r.log_path, since))

        # c. A failover: everything P wrote is on S, then S is promoted and
        # named, its key tagged with AS.
        flushed = p.lsn()
        waits.wait_until(
            lambda: wlsn.parse_lsn(s.psql("SELECT pg_last_wal_replay_lsn()")) >= flushed,
            30, "S to replay all P flushed", interval=0.05)
        self.assertEqual(p.stop("fast"), 0)
        self.assertEqual(ap.stop(), 0)
        since = len(procs.read_text(r.log_path))
        self.assertTrue(etcd.put((MEMBERS + "s").encode(), member_value(s, "replica", as_addr)))
        self.assertTrue(etcd.put(KEY.encode(), b"s"))
        # Before S is promoted walship-status says the named leader's agent
        # does not serve (and AP, stopped, does not answer).
        rc, j = daemons.agents_status([], as_json=True, extra=flags)
        self.assertEqual(rc, 2, j)
        self.assertEqual(j["serving"], [], j)
        self.assertEqual([(a["member"], "error" in a) for a in j["agents"]],
                         [("p", True), ("s", False)], j)
        self.assertEqual(j["leader"]["member"], "s", j)
        self.assertEqual(j["leader"]["disagreement"],
                         "THE LEADER KEY NAMES s, WHOSE AGENT s (%s) DOES NOT SERVE" % as_addr)
        self.assertEqual(s.psql("SELECT pg_promote(true, 60)"), "t")
        end = self.insert(s, 10001, 12000)
        self.wait_holds(dest, 2, end, "R to follow S onto timeline 2 through the agent s's key "
                        "tags", timeout=90)
        text = procs.read_text(r.log_path, since)
        self.assertIn("agents: p=%s, s=%s (member keys under %s, tag %s)"
                      % (ap_addr, as_addr, MEMBERS, TAG), text)
        self.assertIn("following agent %s (2 of 2) instead of %s" % (as_addr, ap_addr), text)
        self.assertEqual(self.replica_metric("walship_replica_timeline"), 2)
        self.assertEqual(self.replica_metric("walship_replica_agents_known"), 2)
        self.assertEqual(r.stop(), 0)
        rc, text = daemons.agents_status([], as_json=False, extra=flags)
        self.assertEqual(rc, 2, text)  # AP is gone
        self.assertIn("\nserving: s (%s), timeline 2 (1 of 2 agents; 1 did not answer)\n"
                      "etcd names s as the leader (key %s)\n" % (as_addr, KEY), text)
        self.assertNotIn("THE LEADER KEY", text)

        # d. A bad set-up stops the replica at start, naming the flag.
        argv = self.replica_argv(os.path.join(self.dir, "bad"), ["--agent-tag=%s" % TAG])
        res = self.env.run(argv, timeout=30, check=False)
        self.assertEqual(res.returncode, 1, (argv, res.stdout, res.stderr))
        self.assertIn("--agent-tag reads the agents from the HA manager's member keys: it "
                      "needs --leader-etcd", res.stdout + res.stderr)
        rc, _ = daemons.agents_status([], as_json=False, extra=["--agent-tag=%s" % TAG])
        self.assertEqual(rc, 1)


if __name__ == "__main__":
    unittest.main()
