"""walship as the synchronous standby of a Patroni cluster.

A real three-node Patroni 3.0 + etcd 3.4 cluster of PostgreSQL 15
(integration/walshiptest/patroni.py), with the dynamic configuration of
docs/postgresql.md applied word for word: Patroni's synchronous modes off
and `synchronous_standby_names = 'walship'`. Patroni then leaves the
parameter alone (with its synchronous
mode on it would write its own members' names there, and walship, not a
Patroni member, could never be the synchronous standby).

1. On the leader the parameter is 'walship' and a commit waits (SyncRep)
   while no walship agent runs; it completes once an agent and a replica
   run beside the leader, and the leader lists the agent's feed as 'sync'.
2. A change of the dynamic configuration (Patroni rewrites postgresql.conf
   and reloads) keeps the parameter.
3. The leader's host is lost (Patroni, postmaster and agent killed
   together): the new leader has the same parameter, so its commits wait
   for walship too, and complete once an agent runs beside it.
"""

import os
import threading
import unittest

from integration.drill.patroni_doc import PatroniGuide
from integration.walshiptest.patroni import PatroniCluster
from integration.walshiptest import daemons, pg, procs, waits


class PatroniSyncTest(unittest.TestCase):
    def setUp(self):
        self.env = pg.PgEnv(base_dir="/tmp")
        self.addCleanup(self.env.close)
        self.cluster = PatroniCluster(self.env, "pat")
        self.addCleanup(self.cluster.close)
        self.cluster.start()
        # The guide's dynamic configuration, word for word.
        self.cluster.apply_dynamic_config(PatroniGuide().dcs)

    def start_walship(self, node, tag):
        """An agent beside `node` (a process of its host) and a replica."""
        d = self.env.mkdir("pat", tag)
        agent = daemons.Agent(
            node.pg_wal, d, label="%s-agent" % tag,
            extra_args=["--format=postgres", "--pg-conninfo=%s" % node.conninfo(),
                        "--pg-data=%s" % node.datadir, "--pg-slot=walship",
                        "--state-dir=%s" % self.env.mkdir("pat", tag, "state")],
            program=self.env.binaries["walship-agent"], launcher=self.env).start(timeout=30)
        node.host_procs.append(agent.proc)
        addrs = agent.control
        replica = procs.Proc(self.env, "%s-replica" % tag, [
            self.env.binaries["walship-replica"], "--agent=%s" % addrs,
            "--dest=%s" % os.path.join(d, "dest"), "--name=%s" % tag, "--insecure"],
            os.path.join(self.cluster.logs, "%s-replica.log" % tag))
        return agent, replica

    def commit_in_background(self, node, sql):
        """Runs `sql` on `node` in a thread; returns (thread, result dict)."""
        result = {}

        def run():
            result["out"] = self.cluster.psql(node, sql, timeout=120, check=False)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t, result

    def waiting_for_sync(self, node):
        out = self.cluster.psql(node, "SELECT count(*) FROM pg_stat_activity "
                                      "WHERE wait_event = 'SyncRep'", check=False)
        return out is not None and int(out) > 0

    def test_walship_is_the_synchronous_standby_through_a_failover(self):
        c = self.cluster
        leader = c.leader()
        waits.wait_until(lambda: c.psql(leader, "SHOW synchronous_standby_names") == "walship",
                         30, "the leader to name walship synchronous")

        # 1. No walship yet: the commit waits for it.
        t, res = self.commit_in_background(leader, "CREATE TABLE t (x int)")
        waits.wait_until(lambda: self.waiting_for_sync(leader), 30, "a commit waiting in SyncRep")
        self.assertTrue(t.is_alive())
        self.start_walship(leader, "w1")
        t.join(90)
        self.assertFalse(t.is_alive(), "the commit still waits with walship running")
        self.assertIsNotNone(res.get("out"), "the commit failed")
        self.assertEqual(c.psql(leader, "SELECT sync_state FROM pg_stat_replication "
                                        "WHERE application_name = 'walship'"), "sync")

        # 2. A dynamic configuration change keeps the parameter.
        c.edit_config({"postgresql.parameters.work_mem": "8MB"})
        waits.wait_until(lambda: c.psql(leader, "SHOW work_mem") == "8MB", 30,
                      "Patroni to apply work_mem")
        self.assertEqual(c.psql(leader, "SHOW synchronous_standby_names"), "walship")

        # 3. Host loss: the new leader waits for walship as well.
        leader.kill_host()
        new = c.wait_leader(90, not_node=leader)
        self.assertEqual(c.psql(new, "SHOW synchronous_standby_names"), "walship")
        t, res = self.commit_in_background(new, "INSERT INTO t VALUES (1)")
        waits.wait_until(lambda: self.waiting_for_sync(new), 30,
                      "a commit on the new leader waiting in SyncRep")
        self.start_walship(new, "w2")
        t.join(90)
        self.assertFalse(t.is_alive(), "the new leader's commit still waits with walship running")
        self.assertIsNotNone(res.get("out"), "the commit on the new leader failed")
        self.assertEqual(c.psql(new, "SELECT count(*) FROM t"), "1")


if __name__ == "__main__":
    unittest.main()
