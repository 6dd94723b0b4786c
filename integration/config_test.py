"""--config files and --print-config with the real daemons, and the packaged
samples in agent/packaging/ and replica/packaging/.

test_packaged_samples_load: each packaged *.toml loads (--print-config exits
0) and what --print-config prints loads again to the same text.
test_units_use_the_samples: the systemd units start the binaries with only
--config, and do not restart a replica that exited 3.
test_daemons_run_from_config_only: an agent and a replica started with nothing
but --config=FILE (mutual TLS included) converge, and the copy is
byte-identical.
test_bad_config_is_a_usage_error: an unknown key / a wrong type is refused
with the key and the file named, exit 2 (agent) and 1 (replica).
"""

import configparser
import os
import subprocess
import unittest

from integration import harness as h
from integration.walshiptest import daemons

def packaging_file(name):
    """agent/packaging/NAME or replica/packaging/NAME, by the daemon it is for."""
    return h.runfile(os.path.join("agent" if "agent" in name else "replica", "packaging", name))


def run(argv):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


class ConfigAgent(daemons.Agent):
    def __init__(self, config, *a, **kw):
        daemons.Agent.__init__(self, *a, **kw)
        self.config = config

    def argv(self):
        return [h.binary(h.AGENT), "--config=" + self.config]


class ConfigReplica(daemons.Replica):
    def __init__(self, config, *a, **kw):
        daemons.Replica.__init__(self, *a, **kw)
        self.config = config

    def argv(self):
        return [h.binary(h.REPLICA), "--config=" + self.config]


class ConfigTest(h.ClusterTestCase):

    def test_packaged_samples_load(self):
        tmp = self.cluster.dir("printed")
        for binary, sample, expect in (
                (h.AGENT, "walship-agent.toml", 'format = "postgres"'),
                (h.REPLICA, "walship-replica.toml", 'name = "replica-1"')):
            rc, out, err = run([h.binary(binary), "--config=" + packaging_file(sample),
                                "--print-config"])
            self.assertEqual(rc, 0, "%s does not load: %s" % (sample, err))
            self.assertIn(expect + "\n", out)
            again = write(os.path.join(tmp, sample), out)
            rc, out2, err = run([h.binary(binary), "--config=" + again, "--print-config"])
            self.assertEqual(rc, 0, "printed config of %s does not load: %s" % (sample, err))
            self.assertEqual(out2, out, "--print-config of %s does not round-trip" % sample)

    def test_units_use_the_samples(self):
        for name, user in (("walship-agent", "postgres"), ("walship-replica", "walship")):
            unit = configparser.ConfigParser(strict=False, interpolation=None)
            unit.optionxform = str
            unit.read(packaging_file(name + ".service"))
            svc = unit["Service"]
            self.assertEqual(svc["Type"], "simple")
            self.assertEqual(svc["User"], user)
            self.assertEqual(svc["Restart"], "on-failure")
            self.assertEqual(svc["ExecStart"],
                             "/usr/local/bin/%s --config=/etc/walship/%s.toml" % (name, name))
            self.assertEqual(unit["Install"]["WantedBy"], "multi-user.target")
        replica = configparser.ConfigParser(strict=False, interpolation=None)
        replica.read(packaging_file("walship-replica.service"))
        self.assertIn("3", replica["Service"]["RestartPreventExitStatus"].split())

    def test_daemons_run_from_config_only(self):
        c = self.cluster
        wal = c.dir("wal")
        gen = c.generator(wal, segment_size=1 << 20)
        while gen.total_bytes < 2_500_000:
            gen.write()
        gen.close()
        conf = c.dir("conf")
        certs = h.Certs(c.dir("certs"), "fromconf", "operator")
        port_file = os.path.join(c.logdir, "agent.ports")
        agent_conf = write(os.path.join(conf, "agent.toml"),
                           'wal-dir = "%s"\nlisten = "127.0.0.1:0"\n'
                           'data-listen = "127.0.0.1:0"\nport-file = "%s"\n'
                           'max-frame-bytes = 65536\nlog-level = "warn"\n'
                           % (wal, port_file) + certs.toml("agent"))
        agent = ConfigAgent(agent_conf, wal, c.logdir,
                            status_tls_args=certs.args("operator"))
        c.daemons.append(agent)
        agent.start()
        dest = c.dir("dest-fromconf")
        replica_conf = write(os.path.join(conf, "replica.toml"),
                             'agent = "%s"\ndest = "%s"\nname = "fromconf"\n'
                             'transport = "copy"\n' % (agent.control, dest)
                             + certs.toml("fromconf"))
        replica = ConfigReplica(replica_conf, agent, dest, "fromconf", c.logdir)
        c.daemons.append(replica)
        replica.start()
        self.wait_caught_up(agent, wal, ["fromconf"], timeout=60)
        h.compare_dirs(wal, dest)
        self.assertEqual(agent.grep(r"walship-agent info "), [],
                         "log-level = \"warn\" from the file not applied")
        self.assertTrue(replica.grep(r"walship-replica info "), "the replica logs at info")
        st = h.status(agent)
        self.assertEqual(h.replica_entry(st, "fromconf").get("transport"), "copy",
                         "transport from the replica's file not applied")

    def test_bad_config_is_a_usage_error(self):
        conf = self.cluster.dir("conf")
        for binary, status in ((h.AGENT, 2), (h.REPLICA, 1)):
            for text, key, why in (('bogus-key = 1\n', "bogus-key", "unknown key"),
                                   ('io-timeout-ms = "soon"\n', "io-timeout-ms",
                                    "expected an integer")):
                path = write(os.path.join(conf, "bad.toml"), text)
                rc, out, err = run([h.binary(binary), "--config=" + path])
                self.assertEqual(rc, status, "%s with %r: %s" % (binary[1], text, err))
                self.assertIn(path, err)
                self.assertIn('"%s"' % key, err)
                self.assertIn(why, err)


    def test_a_scheduler_slice_the_kernel_does_not_take_is_a_usage_error(self):
        wal = self.cluster.dir("slice-wal")
        for argv, status in (([h.binary(h.AGENT), "--wal-dir=" + wal, "--insecure",
                               "--sched-slice-us=50"], 2),
                             ([h.binary(h.REPLICA), "--agent=127.0.0.1:1",
                               "--dest=" + self.cluster.dir("slice-dest"), "--name=r",
                               "--insecure", "--sched-slice-us=100001"], 1)):
            rc, out, err = run(argv)
            self.assertEqual(rc, status, "%s: %s" % (argv, err))
            self.assertIn("--sched-slice-us must be 0 (the kernel's default) or between 100 "
                          "and 100000", err)

if __name__ == "__main__":
    unittest.main()
