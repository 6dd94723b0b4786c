"""TCP ports and the daemons' --port-file (KEY=HOST:PORT lines).

Prefer `--listen=127.0.0.1:0 --port-file=F` and read_port_file(F) to
free_port(): a port picked by binding and releasing can be taken by another
process before the daemon binds it. walship-agent writes a port file
(daemons.Agent); walship-replica logs the metrics port it got
(daemons.Replica.metrics_address()). free_port() is left for what cannot
take port 0: PostgreSQL clusters (pg.PgCluster; with listen_addresses empty
the port only names the unix socket), etcd and Patroni's REST API.

The kernel picks port 0's port at random, so two picks in a row can give
the same port while neither is bound yet (a test that picks ten ports for
one cluster met it: etcd and a Patroni REST API on one port). free_port()
never gives a port twice in one process.
"""

import socket
import threading

_given_lock = threading.Lock()
_given = set()


def parse_port_file(text):
    """'control=127.0.0.1:5\\ndata=127.0.0.1:6\\n' -> {"control": ..., "data": ...}.

    Lines without '=' are skipped; callers wait until the keys they need
    are there.
    """
    out = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep:
            out[key] = value
    return out


def read_port_file(path):
    """parse_port_file() of the file at `path`; None while it does not exist."""
    try:
        with open(path, "rb") as f:
            return parse_port_file(f.read().decode("utf-8", "replace"))
    except FileNotFoundError:
        return None


def port_of(addr):
    """'127.0.0.1:5432' -> 5432."""
    return int(addr.rsplit(":", 1)[1])


def free_port():
    """A TCP port free on 127.0.0.1 right now, and not given before by this
    process (see the module comment)."""
    with _given_lock:
        for _ in range(1000):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port not in _given:
                _given.add(port)
                return port
    raise RuntimeError("no TCP port left on 127.0.0.1 that this process has not given out")
