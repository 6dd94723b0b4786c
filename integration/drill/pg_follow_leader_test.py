"""Agents that follow the cluster's roles, a replica that follows the leader.

A real PostgreSQL 15 primary P with a streaming standby S (pg_basebackup),
walship-agent AP beside P and AS beside S, on fixed control ports (an agent
restarted comes back at the same address), and one walship-replica R with
--agent=AS,AP: the standby's agent first.

1. an_agent_beside_a_standby_ships_nothing: AS answers R's handshakes with
   a retryable UNAVAILABLE REASON_NOT_PRIMARY; its status and metrics say
   so (walship_agent_pg_primary 0, refusals by reason not_primary), it has
   no session, and R logs the answer once and follows AP.
2. the_replica_follows_the_promoted_standby: R holds every committed row;
   AP is stopped (SIGSTOP) while S replays all P flushed, then S is shut
   down, P commits a tail of rows that only P has, and P's postmaster and
   AP are killed together (SIGKILL, a host loss). S comes back and is
   promoted (timeline 2) with AS running throughout: AS notices without a
   restart and ships timeline 2 with its history file; R continues there
   from AS. Every byte R held before the failover is still in R.
3. a_stale_primary_is_refused: P restarted as it was (not rewound: its
   tail past the fork point is back, on timeline 1) with a new agent AP2
   at AP's address. R, restarted with AP2 first in its list, is refused by
   AP2 (REASON_OLDER_TIMELINE, logged and counted) and goes on with AS;
   a second replica R2, stopped before the failover (on timeline 1, before
   the fork point) and started with AP2 first, passes over AP2 (a primary,
   but AS serves a newer timeline) and continues on timeline 2 from AS
   without a byte of P's tail;
   with AS down, R tries AP2 round after round and never takes a byte of
   it (no file of R changes), and R goes on with AS once it is back.
   With AS down, a copy of R2 as it was (before the fork point) reaches
   only AP2: given etcd's leader key naming S (--leader-etcd) it refuses
   AP2 (not_leader) and takes nothing; another copy without the key takes
   P's tail, the case the agents alone cannot tell.
4. restore_serves_the_whole_history: a cluster from a base backup of P,
   with `walship-replica restore` from R as its restore_command and
   recovery_target_timeline 'latest', replays to the last row committed
   on timeline 2: every row committed before the failover, every row of
   timeline 2, none of P's stale tail.

The four parts run in order in one test (each builds on the one before).

5. agents_running_throughout_follow_role_changes: see its docstring.
"""
import os
import re
import shutil
import signal
import unittest

from integration.walshiptest import daemons, procs, waits
from integration.walshiptest import etcd as wetcd
from integration.walshiptest import lsn as wlsn
from integration.walshiptest import pg as wpg
from integration.walshiptest import ports as wports

from integration import statefile
from integration.drill.pg_nodes_case import SEG, PgNodesCase


class PgFollowLeaderTest(PgNodesCase):
    AREA = "fl"

    # -- helpers ----------------------------------------------------------
    def start_replica(self, agents, dest, name="r1"):
        log_path = self.show(os.path.join(self.logs, "%s.log" % name))
        port = wports.free_port()
        if name == "r1":
            self.replica_metrics_port = port
        return procs.Proc(self.env, name, [
            self.env.binaries["walship-replica"],
            "--agent=%s" % ",".join("127.0.0.1:%d" % p for p in agents),
            "--dest=%s" % dest, "--name=%s" % name, "--insecure", "--log-level=info",
            "--metrics-listen=127.0.0.1:%d" % port], log_path)

    def status(self, control_port):
        """walship-status --json of the agent, parsed; None when it did not answer."""
        return daemons.try_agent_status("127.0.0.1:%d" % control_port, timeout=10)

    def rows(self, pg):
        return pg.psql("SELECT count(*), coalesce(max(x), 0) FROM t")

    # -- the scenario -----------------------------------------------------
    def test_agents_and_replica_follow_the_leader(self):
        p = self.primary()
        p.psql("CREATE TABLE t (x int PRIMARY KEY, pad text)")
        self.insert(p, 1, 100)
        # For part 4: recovers from R alone (no primary_conninfo).
        check = self.basebackup(p, "check", streaming=False)
        s = self.basebackup(p, "standby")
        s.start(wait_for=("ready", "standby"))
        self.assertEqual(s.psql("SELECT pg_is_in_recovery()"), "t")
        ap_port, as_port = wports.free_port(), wports.free_port()
        ap, ap_metrics = self.start_agent(p, "agent-p", ap_port)
        as_, as_metrics = self.start_agent(s, "agent-s", as_port)
        dest = os.path.join(self.dir, "r1")
        r = self.start_replica([as_port, ap_port], dest)
        # R2 stops before the failover: on timeline 1, before the fork point.
        dest2 = os.path.join(self.dir, "r2")
        r2 = self.start_replica([as_port, ap_port], dest2, name="r2")
        end = self.insert(p, 101, 2000)
        self.wait_holds(dest, 1, end, "R to hold the first rows through AP")
        self.wait_holds(dest2, 1, end, "R2 to hold the first rows through AP")
        self.assertEqual(r2.stop(), 0)

        self.part1_agent_beside_a_standby(r, as_port, as_metrics, ap_port)
        fork, before = self.part2_failover(p, s, ap, r, dest, as_port, ap_port)
        self.r2_end = self.insert(s, 12001, 12100)
        ap2 = self.part3_stale_primary(p, r, dest, fork, before, as_, as_port, ap_port, dest2)
        self.part4_restore(check, s, dest, as_port)
        self.assertEqual(ap2.stop(), 0)

    def part1_agent_beside_a_standby(self, r, as_port, as_metrics, ap_port):
        as_addr = "127.0.0.1:%d" % as_port
        text = procs.read_text(r.log_path)
        self.assertRegex(text, r"agent %s \(1 of 2\): .*UNAVAILABLE.*is in recovery, not a "
                         r"primary.*trying 127\.0\.0\.1:%d next" % (re.escape(as_addr), ap_port))
        self.assertIn("following agent 127.0.0.1:%d (2 of 2)" % ap_port, text)
        self.assertGreaterEqual(self.replica_metric(
            "walship_replica_agent_refusals_total",
            '{agent="%s",reason="not_primary"}' % as_addr) or 0, 1)
        self.assertEqual(self.replica_metric("walship_replica_agent_active",
                                             '{agent="127.0.0.1:%d"}' % ap_port), 1)
        self.assertEqual(self.metric(as_metrics, "walship_agent_pg_primary"), 0)
        self.assertEqual(self.metric(as_metrics, "walship_agent_source_up"), 0)
        self.assertGreaterEqual(self.metric(as_metrics, "walship_agent_handshakes_refused_total",
                                            '{reason="not_primary"}') or 0, 1)
        self.assertIsNone(self.metric(as_metrics, "walship_agent_handshakes_total",
                                      '{replica="r1"}'), "AS accepted a handshake")
        st = self.status(as_port)
        self.assertIsNotNone(st)
        self.assertIn("not a primary", st.get("source_error", ""), st)
        self.assertEqual(st.get("replicas", []), [], st)
        self.status_says_who_serves(as_addr, ap_port, 1)

    def status_says_who_serves(self, as_addr, ap_port, timeline):
        """walship-status given AS, AP (as member p) and an address nobody
        answers on: AS not serving, AP serving on `timeline` with R's row,
        exit status 2 for the silent one."""
        ap_addr = "127.0.0.1:%d" % ap_port
        silent = "127.0.0.1:%d" % wports.free_port()
        entries = [as_addr, "p=" + ap_addr, silent]
        rc, text = daemons.agents_status(entries, as_json=False)
        self.assertEqual(rc, 2, text)
        self.assertRegex(text, r"(?m)^agent %s: not serving: .*not a primary" % re.escape(as_addr))
        self.assertRegex(text, r"(?m)^agent p \(%s\): serving, timeline %d$"
                         % (re.escape(ap_addr), timeline))
        self.assertRegex(text, r"(?m)^agent %s: DID NOT ANSWER: " % re.escape(silent))
        self.assertRegex(text, r"(?m)^r1 +(streaming|caught_up)")
        self.assertIn("\nserving: p (%s), timeline %d (1 of 3 agents; 1 did not answer)\n"
                      % (ap_addr, timeline), text)
        rc, j = daemons.agents_status(entries, as_json=True)
        self.assertEqual(rc, 2)
        self.assertIsNotNone(j)
        self.assertEqual(j["serving"], [ap_addr], j)
        self.assertEqual([a["agent"] for a in j["agents"]], [as_addr, ap_addr, silent])
        self.assertEqual(j["agents"][1]["member"], "p")
        self.assertIn("r1", [r["name"] for r in j["agents"][1]["status"]["replicas"]])
        self.assertIn("error", j["agents"][2])

    def part2_failover(self, p, s, ap, r, dest, as_port, ap_port):
        """Returns (the fork point, R's files and durable LSN before it)."""
        # AP stops shipping; S replays everything P flushed, so the fork
        # point is at or past every byte R holds.
        ap.signal_group(signal.SIGSTOP)
        flushed = p.lsn()
        waits.wait_until(lambda: wlsn.parse_lsn(s.psql("SELECT pg_last_wal_replay_lsn()")) >= flushed,
                      30, "S to replay all P flushed", interval=0.05)
        self.assertEqual(s.stop("fast"), 0)
        rows_before = self.rows(p)
        # A tail only P has: committed on P after S left.
        tail_end = self.insert(p, 5001, 6000)
        self.assertEqual(p.psql("SELECT count(*) FROM t WHERE x > 5000"), "1000")
        # A host loss: the postmaster and its agent together.
        p.kill9()
        ap.kill9()
        before = statefile.replica_files(dest)
        held = self.durable(dest)
        procs.log("R holds %s on timeline %d; P's tail ends at %s", wlsn.fmt_lsn(held[1]), held[0],
               wlsn.fmt_lsn(tail_end))
        self.assertLess(held[1], tail_end)

        # S is promoted while AS runs: AS follows it without a restart.
        s.start(wait_for=("ready", "standby"))
        self.assertEqual(s.psql("SELECT pg_is_in_recovery()"), "t")
        self.assertEqual(s.psql("SELECT pg_promote(true, 60)"), "t")
        with open(os.path.join(s.pg_wal, "00000002.history")) as f:
            fork = wlsn.parse_lsn(f.read().split()[1])
        self.assertGreaterEqual(fork, held[1])
        self.assertLess(fork, tail_end)
        self.assertEqual(self.rows(s), rows_before)
        end = self.insert(s, 10001, 12000)
        self.wait_holds(dest, 2, end, "R to follow S onto timeline 2 through AS")
        text = procs.read_text(r.log_path)
        self.assertIn("following agent 127.0.0.1:%d (1 of 2) instead of 127.0.0.1:%d"
                      % (as_port, ap_port), text)
        self.assertTrue(r.alive())
        self.assertEqual(self.replica_metric("walship_replica_timeline"), 2)
        self.assertGreaterEqual(self.replica_metric("walship_replica_agent_switches_total"), 1)
        self.assertTrue(os.path.exists(os.path.join(dest, "00000002.history")))
        self.assert_acknowledged_kept(dest, before, held[1])
        # walship-status given both: AS serves timeline 2, AP's host is gone.
        as_addr, ap_addr = "127.0.0.1:%d" % as_port, "127.0.0.1:%d" % ap_port
        rc, text = daemons.agents_status([as_addr, ap_addr], as_json=False)
        self.assertEqual(rc, 2, text)
        self.assertIn("\nserving: %s, timeline 2 (1 of 2 agents; 1 did not answer)\n" % as_addr,
                      text)
        return fork, before

    def assert_acknowledged_kept(self, dest, before, held_lsn):
        """Every complete file R held before the failover is unchanged, and
        R's bytes of the segment it was in are the prefix of what it holds
        of that segment now (on either timeline)."""
        for name, (size, crc) in before.items():
            if name.startswith("walship.") or name.endswith(".partial"):
                continue
            self.assertEqual(statefile.replica_files(dest).get(name), (size, crc), name)
        segno = held_lsn // SEG
        old = os.path.join(dest, wlsn.segment_name(1, segno, SEG) + ".partial")
        if not os.path.exists(old) and os.path.exists(old[:-len(".partial")]):
            old = old[:-len(".partial")]
        want = held_lsn % SEG
        if want == 0:
            return
        prefixes = []
        for tli in (1, 2):
            for suffix in ("", ".partial"):
                path = os.path.join(dest, wlsn.segment_name(tli, segno, SEG) + suffix)
                if os.path.exists(path):
                    with open(path, "rb") as f:
                        prefixes.append(f.read(want))
        self.assertTrue(prefixes, "R holds no copy of segment %d" % segno)
        self.assertEqual(len(set(prefixes)), 1, "R's copies of segment %d differ in the "
                         "first %d bytes it had acknowledged" % (segno, want))
        self.assertEqual(len(prefixes[0]), want)

    def part3_stale_primary(self, p, r, dest, fork, before, as_, as_port, ap_port, dest2):
        """The old primary back as it was, with an agent at AP's address."""
        p.start()
        self.assertEqual(p.psql("SELECT pg_is_in_recovery()"), "f")
        self.assertEqual(p.psql("SELECT count(*) FROM t WHERE x > 5000"), "1000")
        self.assertEqual(p.timeline(), 1)
        ap2, ap2_metrics = self.start_agent(p, "agent-p2", ap_port)
        waits.wait_until(lambda: (self.status(ap_port) or {}).get("timeline") == 1, 30,
                      "AP2 to serve timeline 1")
        ap_addr = "127.0.0.1:%d" % ap_port
        older = r"agent %s \(1 of 2\): .*serves timeline 1, (an )?older" % re.escape(ap_addr)

        # R2, still on timeline 1 before the fork point, with the stale
        # agent first: it passes over AP2 (a primary, but AS serves a newer
        # timeline) and continues on timeline 2 from AS, without P's tail.
        tl1_before = {n: v for n, v in statefile.replica_files(dest2).items() if n.startswith("00000001")}
        # Two copies of R2 as it is, for the case the agents alone cannot
        # tell (part3_only_the_stale_primary).
        copies = [self.copy_dest(dest2, "r3"), self.copy_dest(dest2, "r4")]
        r2 = self.start_replica([ap_port, as_port], dest2, name="r2")
        self.wait_holds(dest2, 2, self.r2_end, "R2 to follow AS onto timeline 2")
        self.assertEqual({n: v for n, v in statefile.replica_files(dest2).items() if n.startswith("00000001")},
                         tl1_before, "R2 took timeline 1 bytes from the stale primary")
        self.assertRegex(procs.read_text(r2.log_path), older)
        self.assertIsNone(self.metric(ap2_metrics, "walship_agent_handshakes_total",
                                      '{replica="r2"}'), "AP2 accepted R2")
        self.assertEqual(r2.stop(), 0)

        # R restarted with the stale agent first: refused, typed, logged.
        self.assertEqual(r.stop(), 0)
        since = len(procs.read_text(r.log_path))
        r = self.start_replica([ap_port, as_port], dest)
        waits.wait_until(lambda: "following agent 127.0.0.1:%d (2 of 2)" % as_port
                      in procs.read_text(r.log_path, since), 30, "R to follow AS again")
        self.assertRegex(procs.read_text(r.log_path, since), older)

        # AS down: R tries AP2 round after round and takes nothing of it.
        self.assertEqual(as_.stop(), 0)
        key = '{agent="%s",reason="older_timeline"}' % ap_addr

        def refusals():
            return self.replica_metric("walship_replica_agent_refusals_total", key) or 0
        # Once AP2 has refused R again, R's session with AS has wound down.
        first = refusals()
        waits.wait_until(lambda: refusals() > first, 30, "a refusal of AP2 after AS went")
        at = statefile.replica_files(dest)
        first = refusals()
        waits.wait_until(lambda: refusals() >= first + 3, 60, "three more refusals of AP2")
        self.assertTrue(r.alive(), procs.read_text(r.log_path, since))
        self.assertEqual(statefile.replica_files(dest), at, "R changed its files while only AP2 was up")
        self.assertEqual([n for n in os.listdir(dest) if n.startswith("00000001")
                          and n not in before], [], "R took timeline 1 files from AP2")
        self.assertIsNone(self.metric(ap2_metrics, "walship_agent_handshakes_total",
                                      '{replica="r1"}'), "AP2 accepted R")
        # With AS silent, R asked AP2 itself, which refused it.
        self.assertRegex(procs.read_text(os.path.join(self.logs, "agent-p2.log")),
                         r"handshake from replica r1 .*replica holds timeline 2 .*this source "
                         r"serves timeline 1")
        self.assertGreaterEqual(self.metric(ap2_metrics, "walship_agent_handshakes_refused_total",
                                            '{reason="older_timeline"}') or 0, 1)
        # Logged once per change, not per attempt.
        self.assertLessEqual(len(re.findall(r"agent %s \(1 of 2\): " % re.escape(ap_addr),
                                            procs.read_text(r.log_path, since))), 2)
        self.r = r
        self.part3_only_the_stale_primary(ap_port, as_port, fork, ap2_metrics, *copies)
        return ap2

    def part3_only_the_stale_primary(self, ap_port, as_port, fork, ap2_metrics, dest3, dest4):
        """With AS down, a replica before the fork point reaches only AP2:
        given the HA manager's leader key (naming S), it takes nothing from
        AP2; without it, nothing tells it AP2 is stale and it takes P's tail
        (what postgresql.md says the agents alone cannot tell)."""
        etcd = wetcd.Etcd(self.logs, self.env.mkdir(self.AREA, "etcd"), "etcd",
                          on_close=self.addCleanup).start()
        key = "/service/fl/leader"
        etcd.put(key.encode(), b"s")
        ap_addr, as_addr = "127.0.0.1:%d" % ap_port, "127.0.0.1:%d" % as_port
        tl1 = {n: v for n, v in statefile.replica_files(dest3).items() if n.startswith("00000001")}
        r3 = self.start_replica_argv("r3", dest3, [
            "--agent=p=%s,s=%s" % (ap_addr, as_addr),
            "--leader-etcd=127.0.0.1:%d" % etcd.client_port, "--leader-key=%s" % key])
        waits.wait_until(lambda: (self.replica_metric(
            "walship_replica_agent_refusals_total",
            '{agent="%s",reason="not_leader"}' % ap_addr) or 0) >= 3, 60,
            "R3 to refuse AP2 (not_leader) three times")
        self.assertTrue(r3.alive(), procs.read_text(r3.log_path))
        self.assertEqual({n: v for n, v in statefile.replica_files(dest3).items()
                          if n.startswith("00000001")}, tl1, "R3 took the stale primary's tail")
        self.assertIsNone(self.metric(ap2_metrics, "walship_agent_handshakes_total",
                                      '{replica="r3"}'), "AP2 accepted R3")
        self.assertEqual(r3.stop(), 0)
        # The same replica without the key.
        r4 = self.start_replica_argv("r4", dest4, ["--agent=%s,%s" % (ap_addr, as_addr)])
        self.wait_holds(dest4, 1, fork + 1, "R4, without the key, to take the stale tail")
        self.assertEqual(r4.stop(), 0)
        etcd.stop()

    def copy_dest(self, dest, name):
        """A copy of replica directory `dest` as `name`, owned by the test's user."""
        copy = os.path.join(self.dir, name)
        shutil.copytree(dest, copy, symlinks=True)
        for root, dirs, files in os.walk(copy):
            for n in [root] + [os.path.join(root, f) for f in dirs + files]:
                self.env.chown(n)
        return copy

    def start_replica_argv(self, name, dest, agent_flags):
        """A replica `name` into `dest` with these --agent (and leader) flags;
        its metrics become replica_metric()'s."""
        self.replica_metrics_port = wports.free_port()
        return procs.Proc(self.env, name, [
            self.env.binaries["walship-replica"], "--dest=%s" % dest, "--name=%s" % name,
            "--insecure", "--log-level=info",
            "--metrics-listen=127.0.0.1:%d" % self.replica_metrics_port] + agent_flags,
            self.show(os.path.join(self.logs, "%s.log" % name)))

    def part4_restore(self, check, s, dest, as_port):
        """AS back; R holds the newest rows; a cluster recovers from R alone."""
        as2, _ = self.start_agent(s, "agent-s2", as_port)
        end = self.insert(s, 12101, 12500)
        self.wait_holds(dest, 2, end, "R to follow S again once AS is back")
        want = self.rows(s)
        check.configure({
            "restore_command": "%s restore --dest=%s %%f %%p" % (
                self.env.binaries["walship-replica"], dest),
            "recovery_target_timeline": "latest", "primary_conninfo": "",
            "hot_standby": "on"})
        check.touch("standby.signal")
        check.start(wait_for=("ready", "standby"), timeout=120)

        def replayed():
            return self.rows(check) == want
        waits.wait_until(replayed, 120, "the check cluster to replay to %s rows" % want)
        self.assertEqual(check.psql("SELECT count(*) FROM t WHERE x BETWEEN 5001 AND 6000"),
                         "0", "the stale primary's tail reached the replica")
        self.assertEqual(check.psql("SELECT count(*) FROM t WHERE x <= 2000"), "2000")
        self.assertEqual(self.r.stop(), 0)
        self.assertEqual(as2.stop(), 0)

    # -- agents that run throughout ----------------------------------------
    def test_agents_running_throughout_follow_role_changes(self):
        """5. A switchover, then a process crash, with every agent running
        throughout. P stops cleanly and comes back as a standby (of S, still
        a standby itself): AP, never restarted, ends R's session (its node
        is not a primary any more) and R goes round its agents. S is
        promoted (timeline 2): R follows AS there. Then S's postmaster alone
        is killed (AS stays up, its heartbeats go on) and P is promoted
        (timeline 3): R's leader watch sees AP serve a newer timeline, ends
        the session with AS, and R follows AP onto timeline 3."""
        p = self.primary()
        p.psql("CREATE TABLE t (x int PRIMARY KEY, pad text)")
        s = self.basebackup(p, "standby")
        s.start(wait_for=("ready", "standby"))
        ap_port, as_port = wports.free_port(), wports.free_port()
        ap, ap_metrics = self.start_agent(p, "agent-p", ap_port)
        as_, as_metrics = self.start_agent(s, "agent-s", as_port)
        dest = os.path.join(self.dir, "r1")
        r = self.start_replica([ap_port, as_port], dest)
        end = self.insert(p, 1, 2000)
        self.wait_holds(dest, 1, end, "R to hold the first rows through AP")
        ap_addr, as_addr = "127.0.0.1:%d" % ap_port, "127.0.0.1:%d" % as_port

        # Demotion: P stops cleanly (S receives all of it) and comes back as
        # a standby of S. AP, running throughout, ends R's session.
        self.assertEqual(p.stop("fast"), 0)
        checkpoint = wlsn.parse_lsn(p.controldata()["Latest checkpoint location"])
        waits.wait_until(lambda: wlsn.parse_lsn(s.psql("SELECT pg_last_wal_replay_lsn()"))
                      >= checkpoint, 30, "S to replay P's shutdown checkpoint", interval=0.05)
        since = len(procs.read_text(r.log_path))
        p.touch("standby.signal")
        p.configure({"primary_conninfo": "host=%s port=%d user=%s" % (
            self.sock, s.port, wpg.SUPERUSER), "recovery_target_timeline": "latest"})
        p.start(wait_for=("ready", "standby"))
        self.assertEqual(p.psql("SELECT pg_is_in_recovery()"), "t")
        waits.wait_until(lambda: re.search(r"agent %s \(1 of 2\): .*not a primary"
                                        % re.escape(ap_addr),
                                        procs.read_text(r.log_path, since)),
                      30, "AP to end R's session once P is in recovery")
        self.assertRegex(procs.read_text(os.path.join(self.logs, "agent-p.log")),
                         r"replica r1 \(session \d+\): ending the session: .*not a primary")
        waits.wait_until(lambda: self.metric(ap_metrics, "walship_agent_pg_primary") == 0, 10,
                      "AP's walship_agent_pg_primary to say 0")
        self.assertTrue(r.alive())

        # S promoted: R follows AS onto timeline 2.
        self.assertEqual(s.psql("SELECT pg_promote(true, 60)"), "t")
        end = self.insert(s, 2001, 4000)
        self.wait_holds(dest, 2, end, "R to follow S onto timeline 2 through AS")
        self.assertIn("following agent %s (2 of 2) instead of %s" % (as_addr, ap_addr),
                      procs.read_text(r.log_path, since))
        self.assertEqual(self.metric(as_metrics, "walship_agent_pg_timeline"), 2)
        self.assertEqual(self.metric(as_metrics, "walship_agent_pg_primary"), 1)

        # S's postmaster alone dies (AS stays up); P, caught up, is promoted.
        waits.wait_until(lambda: wlsn.parse_lsn(p.psql("SELECT pg_last_wal_replay_lsn()"))
                      >= s.lsn(), 30, "P to replay all S flushed", interval=0.05)
        held = self.durable(dest)
        since = len(procs.read_text(r.log_path))
        s.kill9_postmaster()
        waits.wait_until(lambda: "applying the crash rule" in procs.read_text(
            os.path.join(self.logs, "agent-s.log")), 30, "AS to see S down")
        self.assertEqual(p.psql("SELECT pg_promote(true, 60)"), "t")
        self.assertEqual(p.psql("SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)"),
                         "00000003")
        with open(os.path.join(p.pg_wal, "00000003.history")) as f:
            fork = wlsn.parse_lsn(f.read().splitlines()[-1].split()[1])
        self.assertGreaterEqual(fork, held[1])
        end = self.insert(p, 4001, 6000)
        self.wait_holds(dest, 3, end, "R to follow P onto timeline 3 through AP")
        text = procs.read_text(r.log_path, since)
        self.assertRegex(text, r"leader watch: agent %s serves timeline 3, newer than timeline "
                         r"2 of agent %s" % (re.escape(ap_addr), re.escape(as_addr)))
        self.assertIn("following agent %s (1 of 2) instead of %s" % (ap_addr, as_addr), text)
        self.assertTrue(os.path.exists(os.path.join(dest, "00000003.history")))
        self.assertEqual(self.replica_metric("walship_replica_timeline"), 3)
        # Nothing an agent asks its node while it is a standby fails there
        # (no ERROR a second in PostgreSQL's own log).
        for c in (p, s):
            self.assertNotIn("cannot be executed during recovery", procs.read_text(c.log_path),
                             c.name)
        self.assertEqual(r.stop(), 0)
        self.assertEqual(ap.stop(), 0)
        self.assertEqual(as_.stop(), 0)


if __name__ == "__main__":
    unittest.main()
