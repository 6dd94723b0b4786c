"""Logs go to stderr; stdout carries only the output asked for.

test_status_json_is_json_when_a_warning_is_logged: walship-status --json
with a client certificate that expires within 14 days (short-lived
certificates are the norm with automated CAs) logs the rotation warning on
stderr, and its stdout still parses as one JSON document; the same for
--watch --json, one JSON object per line.
"""

import json
import os
import subprocess
import unittest

from integration import harness as h


def issue_short_lived(certs, name, days):
    """A client certificate `name` from `certs`' CA valid for `days` days;
    returns its --tls-* flags."""
    d = certs.dir
    key, csr, ext, pem = (os.path.join(d, name + s) for s in (".key", ".csr", ".ext", ".pem"))
    subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", csr,
                    "-subj", "/CN=" + name], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(ext, "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=clientAuth\nsubjectAltName=DNS:%s\n" % name)
    subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", certs.ca, "-CAkey",
                    os.path.join(d, "ca.key"), "-set_serial", "0x1234", "-days", str(days),
                    "-extfile", ext, "-out", pem], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    os.chmod(key, 0o600)
    return ["--tls-cert=" + pem, "--tls-key=" + key, "--tls-ca=" + certs.ca]


class LogStreamTest(h.ClusterTestCase):

    def test_status_json_is_json_when_a_warning_is_logged(self):
        c = self.cluster
        certs = h.Certs(c.dir("certs"), "operator")
        soon = issue_short_lived(certs, "soon", 7)
        wal = c.dir("wal")
        with open(os.path.join(wal, "seg-00000001"), "wb") as f:
            f.write(b"x" * 1000)
        agent = c.agent(wal, tls_args=certs.args("agent"),
                        status_tls_args=certs.args("operator")).start()
        for extra in ([], ["--watch", "--count=2", "--interval-ms=10"]):
            p = subprocess.run([h.binary(h.STATUS), "--agent=" + agent.control, "--json"]
                               + extra + soon, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               universal_newlines=True, timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
            # --json: one document; --watch --json: one per line.
            docs = p.stdout.splitlines() if extra else [p.stdout]
            for text in docs:
                try:
                    doc = json.loads(text)
                except ValueError as e:
                    self.fail("walship-status %s: stdout is not JSON (%s): %r"
                              % (" ".join(["--json"] + extra), e, p.stdout))
                st = doc["status"] if extra else doc
                self.assertEqual(st["source_format"], "append")
            self.assertEqual(len(docs), 2 if extra else 1, p.stdout)
            self.assertRegex(p.stderr, r"expires within 14 days",
                             "the warning was not logged on stderr")
        self.stop_all()


if __name__ == "__main__":
    unittest.main()
