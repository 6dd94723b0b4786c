"""Mutual TLS on the control channel with the real daemons, certificates made
by integration/make_test_certs.sh (the README's recipe).

test_choice_is_required: with neither --tls-* nor --insecure each binary
refuses to start (usage exit status) and says what to give; with --insecure
each daemon starts and warns that the channel is plaintext.
test_mutual_tls_cluster: an agent with mTLS and an allow-list ships to a
replica with a certificate from the cluster CA (byte-identical copy;
walship-status with an operator certificate sees it). Refused, each with a
log line on the agent or the replica and a metric, and nothing written:
a replica whose certificate comes from another CA (UNAUTHENTICATED, it
keeps retrying), a replica claiming a name its certificate does not carry
(PERMISSION_DENIED, exit 3), a plaintext replica (no TLS handshake).
"""

import os
import subprocess
import unittest

from integration import harness as h


def run(argv):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    return p.returncode, p.stdout.decode() + p.stderr.decode()


class TlsTest(h.ClusterTestCase):

    def test_choice_is_required(self):
        c = self.cluster
        wal = c.dir("wal")
        for binary, args, status in (
                (h.AGENT, ["--wal-dir=" + wal], 2),
                (h.REPLICA, ["--agent=127.0.0.1:1", "--dest=" + c.dir("d"), "--name=r1"], 1),
                (h.STATUS, ["--agent=127.0.0.1:1"], 1)):
            rc, out = run([h.binary(binary)] + args)
            self.assertEqual(rc, status, "%s without TLS flags: %s" % (binary[1], out))
            self.assertIn("--tls-cert, --tls-key and --tls-ca for mutual TLS, or --insecure",
                          out)
        agent = c.agent(wal).start()  # the harness passes --insecure
        self.assertTrue(agent.grep(r"--insecure: the gRPC control channel is plaintext"))
        replica = c.replica(agent, "r1").start()
        replica.wait_log(r"--insecure: the gRPC control channel to .* is plaintext", 10)

    def test_mutual_tls_cluster(self):
        c = self.cluster
        certs = h.Certs(c.dir("certs"), "r1", "r2", "operator")
        stranger = h.Certs(c.dir("stranger"), "r2")
        wal = c.dir("wal")
        gen = c.generator(wal, segment_size=1 << 20)
        while gen.total_bytes < 3_000_000:
            gen.write()
        gen.close()
        agent = c.agent(wal, tls_args=certs.args("agent"),
                        status_tls_args=certs.args("operator"),
                        extra_args=["--allow-replicas=r1,r2,r3",
                                    "--metrics-listen=127.0.0.1:0"]).start()
        self.assertTrue(agent.grep(r"control on 127\.0\.0\.1:\d+ \(mutual TLS\)"))
        metrics = agent.metrics

        good = c.replica(agent, "r1", tls_args=certs.args("r1")).start()
        self.wait_caught_up(agent, wal, ["r1"], timeout=60)
        h.compare_dirs(wal, good.dest)

        # A certificate from another CA, for a name on the allow-list.
        foreign = c.replica(agent, "r2", tls_args=stranger.args("r2", trust=certs)).start()
        agent.wait_log(r"control port: refused a call: /walship\.v1\.Control/Handshake: "
                       r"the client's certificate /CN=r2 is not accepted", 20)
        foreign.wait_log(r"UNAUTHENTICATED: .*is not accepted.*retrying in", 20)
        self.assertTrue(foreign.running(), "a refused certificate is retried, not fatal")
        m = h.scrape(metrics)
        self.assertGreaterEqual(h.metric_total(m, "walship_agent_control_calls_rejected_total",
                                               reason="untrusted_certificate"), 1)

        # r1's certificate used to claim the name r3.
        impostor = c.replica(agent, "r3", tls_args=certs.args("r1")).start()
        h.wait_until(lambda: not impostor.running(), 20, "the impostor to exit")
        self.assertEqual(impostor.returncode(), 3)
        self.assertTrue(impostor.grep(r"PERMISSION_DENIED: .*replica name r3 is not a name "
                                      r"its client certificate carries \(r1\)"))
        self.assertTrue(agent.grep(r"refused: replica name r3 is not a name"))
        m = h.scrape(metrics)
        self.assertEqual(h.metric_total(m, "walship_agent_handshakes_refused_total",
                                        reason="identity_mismatch"), 1)

        # Plaintext against the TLS port: no handshake, so nothing at all.
        plain = c.replica(agent, "r2", dest=c.dir("dest-plain")).start()
        plain.wait_log(r"session ended: UNAVAILABLE: handshake with", 20)

        for r in (foreign, impostor, plain):
            names = [n for n in os.listdir(r.dest) if not n.startswith("walship.")]
            self.assertEqual(names, [], "%s wrote %s" % (r.label, names))
            self.assertFalse(os.path.exists(os.path.join(r.dest, "walship.state")),
                             "%s bound its directory to a stream" % r.label)

        st = h.status(agent)
        self.assertEqual([r["name"] for r in st["replicas"]], ["r1"])
        self.assertEqual(h.flushed(st, "r1"), h.wal_end(wal))
        # walship-status without a certificate of this CA gets a clear refusal.
        rc, out = run([h.binary(h.STATUS), "--agent=" + agent.control]
                      + stranger.args("r2", trust=certs))
        self.assertEqual(rc, 2, out)
        self.assertIn("is not accepted", out)


if __name__ == "__main__":
    unittest.main()
