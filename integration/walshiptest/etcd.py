"""A private etcd member for tests and the benchmark (Debian's etcd-server),
and a put load through its v3 JSON gateway."""

import base64
import hashlib
import http.client
import json
import os
import threading

from integration.walshiptest import ports
from integration.walshiptest import procs
from integration.walshiptest import waits

ETCD = "/usr/bin/etcd"
# etcd 3.4's WAL segment size (fixed).
SEGMENT_BYTES = 64 * 1000 * 1000
VALUE_BYTES = 400 << 10


class Etcd(object):
    """A one-member etcd over `data_dir` on loopback ports of its own, its
    log in `logdir`, with etcd's flags `extra_args`; `on_close(fn)`, when
    given, is told how to stop it."""

    def __init__(self, logdir, data_dir, label, on_close=None, extra_args=()):
        self.logdir = logdir
        self.on_close = on_close
        self.data_dir = data_dir
        self.label = label
        self.extra_args = list(extra_args)
        self.client_port = ports.free_port()
        self.peer_port = ports.free_port()
        self.proc = None
        # With authentication on (enable_auth): root's password, and its
        # token for the calls below.
        self.root_password = None
        self.token = None

    def start(self):
        peer = "http://127.0.0.1:%d" % self.peer_port
        client = "http://127.0.0.1:%d" % self.client_port
        self.proc = procs.Proc(procs.Launcher(), self.label, [
            ETCD, "--name", "m0", "--data-dir", self.data_dir,
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", "m0=" + peer, "--initial-cluster-state", "new",
            "--snapshot-count", "100", "--logger", "zap", "--log-outputs", "stderr"]
            + self.extra_args,
            os.path.join(self.logdir, self.label + ".log"))
        if self.on_close is not None:
            self.on_close(self.stop)

        def healthy():
            if not self.proc.alive():
                raise AssertionError("%s exited %s:\n%s" % (self.label, self.proc.returncode(),
                                                           self.proc.tail(30)))
            try:
                return json.loads(self._call("GET", "/health")).get("health") == "true"
            except (OSError, ValueError, http.client.HTTPException):
                return False
        waits.wait_until(healthy, 30, "%s to be healthy" % self.label, interval=0.1)
        return self

    def stop(self):
        if self.proc is not None and self.proc.alive():
            self.proc.stop()

    def kill(self):
        self.proc.kill9()

    def _call(self, method, path, body=None, timeout=10, retry_auth=True):
        c = http.client.HTTPConnection("127.0.0.1", self.client_port, timeout=timeout)
        try:
            c.request(method, path, body=body,
                      headers={"Authorization": self.token} if self.token else {})
            r = c.getresponse()
            data = r.read().decode()
        finally:
            c.close()
        if r.status != 200 and self.root_password and retry_auth and "auth token" in data:
            # etcd forgets tokens when it restarts.
            self._login()
            return self._call(method, path, body, timeout, retry_auth=False)
        if r.status != 200:
            raise http.client.HTTPException("%s %s: %d %s" % (method, path, r.status, data))
        return data

    def _post(self, path, doc):
        return json.loads(self._call("POST", path, json.dumps(doc)))

    def _login(self):
        self.token = None
        self.token = self._post("/v3/auth/authenticate",
                                {"name": "root", "password": self.root_password})["token"]

    def enable_auth(self, root_password, readers, prefix=b"/"):
        """Users `readers` ({name: password}) allowed to read the keys that
        start with `prefix` (role "reader"), a root user, and authentication
        turned on; later calls here go as root."""
        self._post("/v3/auth/role/add", {"name": "root"})
        self._post("/v3/auth/user/add", {"name": "root", "password": root_password})
        self._post("/v3/auth/user/grant", {"user": "root", "role": "root"})
        self._post("/v3/auth/role/add", {"name": "reader"})
        self._post("/v3/auth/role/grant", {"name": "reader", "perm": {
            "permType": "READ", "key": base64.b64encode(prefix).decode(),
            "range_end": base64.b64encode(prefix[:-1] + bytes([prefix[-1] + 1])).decode()}})
        for name, password in readers.items():
            self._post("/v3/auth/user/add", {"name": name, "password": password})
            self._post("/v3/auth/user/grant", {"user": name, "role": "reader"})
        self._post("/v3/auth/enable", {})
        self.root_password = root_password
        self._login()

    def add_user(self, name, password):
        """A user without any role (it may authenticate, and read nothing)."""
        self._post("/v3/auth/user/add", {"name": name, "password": password})

    def change_password(self, name, password):
        """A new password for user `name` (tokens issued before no longer
        count: etcd's auth revision moves on)."""
        self._post("/v3/auth/user/changepw", {"name": name, "password": password})

    def put(self, key, value):
        """True once etcd acknowledged the put (raises otherwise)."""
        body = json.dumps({"key": base64.b64encode(key).decode(),
                           "value": base64.b64encode(value).decode()})
        return "header" in json.loads(self._call("POST", "/v3/kv/put", body))

    def delete(self, key):
        """True once etcd acknowledged the delete of `key` (raises otherwise)."""
        body = json.dumps({"key": base64.b64encode(key).decode()})
        return "header" in json.loads(self._call("POST", "/v3/kv/deleterange", body))

    def get(self, key):
        body = json.dumps({"key": base64.b64encode(key).decode()})
        kvs = json.loads(self._call("POST", "/v3/kv/range", body)).get("kvs") or []
        return base64.b64decode(kvs[0]["value"]) if kvs else None


def value_of(i, size=VALUE_BYTES):
    seed = hashlib.sha256(b"v%d" % i).digest()
    return (seed * (size // len(seed) + 1))[:size]


def wal_files(wal_dir):
    return sorted(n for n in os.listdir(wal_dir) if n.endswith(".wal"))


class Loader(object):
    """Puts key-000001, key-000002, ... on its own thread until stopped;
    `acked` holds the numbers etcd acknowledged."""

    def __init__(self, etcd, value_bytes=VALUE_BYTES):
        self.etcd = etcd
        self.value_bytes = value_bytes
        self.acked = []
        self.error = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        i = len(self.acked)
        while not self._stop.is_set():
            i += 1
            try:
                if self.etcd.put(b"key-%06d" % i, value_of(i, self.value_bytes)):
                    self.acked.append(i)
            except (OSError, http.client.HTTPException, ValueError) as e:
                self.error = e
                return

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(60)
