"""The write load that records acknowledged commits, the lag sampler, and
the lag analysis and outputs (CSV, SVG chart)."""

import bisect
import csv
import os
import threading
import time

from integration.drill import chart
from integration.drill.drill_setup import ACKS_TABLE, agent_status
from integration.walshiptest import stats
from integration.walshiptest.lsn import fmt_lsn, parse_lsn
from integration.walshiptest.pg import SUPERUSER
from integration.walshiptest.procs import Proc, log


# ---------------------------------------------------------------------------
# Load

class Load(object):
    """drill-loader (acknowledged commits) plus pgbench TPC-B for volume."""

    def __init__(self, ctx, setup, cluster, seconds, start_seq, tag):
        self.ctx, self.setup, self.cluster = ctx, setup, cluster
        self.seconds, self.start_seq, self.tag = seconds, start_seq, tag
        self.acks_path = os.path.join(setup.out, "acks-%s.txt" % tag)
        self.loader = self.pgbench = None
        self.t_start = None
        setup.loads.append(self)

    def start(self):
        env = self.ctx.env
        self.t_start = time.time()
        self.loader = Proc(env, "loader-%s" % self.tag, [
            env.binaries["drill-loader"], "--conninfo=%s" % self.cluster.conninfo(),
            "--acks=%s" % self.acks_path, "--table=%s" % ACKS_TABLE,
            "--seconds=%d" % self.seconds, "--start-seq=%d" % self.start_seq],
            os.path.join(self.setup.logs, "loader-%s.log" % self.tag), as_user=False)
        self.pgbench = Proc(env, "pgbench-%s" % self.tag, [
            env.pg("pgbench"), "-n", "-c", str(self.ctx.p.pgbench_clients), "-j", "2",
            "-T", str(self.seconds), "-P", "5", "-h", self.setup.sock, "-p",
            str(self.cluster.port), "-U", SUPERUSER, "postgres"],
            os.path.join(self.setup.logs, "pgbench-%s.log" % self.tag), as_user=False)
        return self.t_start

    def running(self):
        return self.loader is not None and self.loader.alive()

    def wait(self, timeout):
        rc = self.loader.wait(timeout)
        self.pgbench.wait(10)
        return rc

    def stop(self):
        for p in (self.loader, self.pgbench):
            if p and p.alive():
                p.stop(timeout=10)

    def acks(self):
        """(seqs, ack_times, flush_lsns) in seq order; lsn None where unknown."""
        seqs, times, lsns = [], [], {}
        try:
            with open(self.acks_path) as f:
                for line in f:
                    part = line.split()
                    if len(part) == 3 and part[0] == "A":
                        seqs.append(int(part[1]))
                        times.append(int(part[2]) / 1e9)
                    elif len(part) == 3 and part[0] == "L":
                        lsns[int(part[1])] = parse_lsn(part[2])
        except OSError:
            pass
        return seqs, times, [lsns.get(s) for s in seqs]


# ---------------------------------------------------------------------------
# Sampling

class Sampler(threading.Thread):
    """Samples the primary's flush LSN, walship's positions and the standby's replay."""

    def __init__(self, ctx, setup):
        super().__init__(daemon=True)
        self.ctx, self.setup = ctx, setup
        self.rows = []
        self._halt = threading.Event()
        self._sessions = {}

    def _query(self, cluster, sql):
        if cluster is None or not cluster.running():
            return None
        s = self._sessions.get(id(cluster))
        if s is None:
            s = self._sessions[id(cluster)] = cluster.session()
        return parse_lsn(s.query(sql, timeout=1.0))

    def tick(self):
        # Followers first, the primary last: a position is never compared with
        # an older primary position, so lag is an upper bound, never negative.
        s = self.setup
        sr = self._query(s.standby, "SELECT pg_last_wal_replay_lsn()")
        st = agent_status(self.ctx, s.agent.control if s.agent and s.agent.running() else None)
        rep = st["replicas"].get(s.replica.name) if st and s.replica else None
        t = time.time()
        pf = self._query(s.primary, "SELECT pg_current_wal_flush_lsn()")
        self.rows.append({
            "t": t, "primary_flush": pf, "source_end": st["source_end"] if st else None,
            "replica_flushed": rep["flushed"] if rep else None,
            "standby_replay": sr, "agent_lag_ms": rep["lag_ms"] if rep else None,
            "connected": rep["connected"] if rep else None})

    def run(self):
        period = self.ctx.p.sample_period
        while not self._halt.is_set():
            t = time.time()
            try:
                self.tick()
            except Exception as e:  # noqa: BLE001 - sampling must not kill a drill
                log("sampler: %s", e)
            self._halt.wait(max(0.0, period - (time.time() - t)))

    def stop(self):
        self._halt.set()
        self.join(10)
        for s in self._sessions.values():
            s.close()


def commit_age(t, pos, ack_times, ack_lsns):
    """Age (ms) at time t of the oldest acknowledged commit beyond position pos."""
    if pos is None:
        return None
    i = bisect.bisect_right(ack_lsns, pos)
    if i >= len(ack_lsns) or ack_times[i] > t:
        return 0.0
    return (t - ack_times[i]) * 1000.0


def analyze_lag(rows, loads, t_from, t_to):
    """Per-row derived lag fields, and percentiles over [t_from, t_to]."""
    ack_t, ack_l = [], []
    for ld in loads:
        seqs, times, lsns = ld.acks()
        for tt, l in zip(times, lsns):
            if l is not None:
                ack_t.append(tt)
                ack_l.append(l)
    order = sorted(range(len(ack_l)), key=lambda i: ack_t[i])
    ack_t = [ack_t[i] for i in order]
    ack_l = [ack_l[i] for i in order]
    # Flush LSNs are non-decreasing in ack time; keep the sequence monotonic for bisect.
    for i in range(1, len(ack_l)):
        ack_l[i] = max(ack_l[i], ack_l[i - 1])
    for r in rows:
        pf, rf, sr = r["primary_flush"], r["replica_flushed"], r["standby_replay"]
        r["lag_bytes"] = (pf - rf) if pf is not None and rf is not None else None
        r["standby_lag_bytes"] = (pf - sr) if pf is not None and sr is not None else None
        r["lag_ms"] = commit_age(r["t"], rf, ack_t, ack_l)
        r["standby_lag_ms"] = commit_age(r["t"], sr, ack_t, ack_l)
    win = [r for r in rows if t_from <= r["t"] <= t_to]
    return {
        "window_s": [t_from, t_to],
        "samples": len(win),
        "replica_bytes": stats.percentiles([r["lag_bytes"] for r in win]),
        "replica_ms": stats.percentiles([r["lag_ms"] for r in win]),
        "standby_bytes": stats.percentiles([r["standby_lag_bytes"] for r in win]),
        "standby_ms": stats.percentiles([r["standby_lag_ms"] for r in win]),
        "agent_lag_ms": stats.percentiles([r["agent_lag_ms"] for r in win]),
    }


def write_lag_outputs(setup, rows, markers, title):
    """lag.csv and lag.svg in the drill's output dir; returns their names."""
    t0 = setup.t0 or (rows[0]["t"] if rows else time.time())
    cols = ["t", "t_rel", "primary_flush_lsn", "source_end_lsn", "replica_flushed_lsn",
            "standby_replay_lsn", "lag_bytes", "lag_ms", "standby_lag_bytes", "standby_lag_ms",
            "agent_lag_ms", "replica_connected"]
    with open(os.path.join(setup.out, "lag.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow(["%.3f" % r["t"], "%.3f" % (r["t"] - t0), fmt_lsn(r["primary_flush"]),
                        fmt_lsn(r["source_end"]), fmt_lsn(r["replica_flushed"]),
                        fmt_lsn(r["standby_replay"]), _opt(r.get("lag_bytes")),
                        _opt(r.get("lag_ms")), _opt(r.get("standby_lag_bytes")),
                        _opt(r.get("standby_lag_ms")), _opt(r["agent_lag_ms"]),
                        "" if r["connected"] is None else int(r["connected"])])
    times = [r["t"] - t0 for r in rows]
    svg = chart.lag_chart(title, times, [
        {"label": "lag (bytes)", "unit": "bytes", "series": [
            ("primary flush - replica flushed", [r.get("lag_bytes") for r in rows]),
            ("primary flush - standby replay", [r.get("standby_lag_bytes") for r in rows])]},
        {"label": "lag (ms)", "unit": "ms", "series": [
            ("oldest acked commit not on the replica", [r.get("lag_ms") for r in rows]),
            ("oldest acked commit not replayed", [r.get("standby_lag_ms") for r in rows])]},
    ], markers=[(t - t0, label, color) for t, label, color in markers])
    with open(os.path.join(setup.out, "lag.svg"), "w") as f:
        f.write(svg)
    return "lag.csv", "lag.svg"


def _opt(v):
    if v is None:
        return ""
    return "%.1f" % v if isinstance(v, float) else str(v)
