"""The datatls section: catch-up of the append-format backlog with and
without TLS on the data socket, in the same interleaved rounds.

Variants (both daemons with mutual TLS on the control channel, certificates
from integration/make_test_certs.sh):
  plain-zerocopy   --data-tls=off --transport=zerocopy (sendfile, splice)
  plain-copy       --data-tls=off --transport=copy (one buffer each side)
  tls-userspace    --data-tls=on on a kernel without the tls ULP: OpenSSL
                   encrypts and decrypts through one buffer each side
                   (tls-ktls where the kernel offers kTLS: SSL_sendfile on
                   the agent, splice on the replica)
The target: userspace TLS within 1.5x the CPU per GiB of the copy transport
on both sides, as a ratio within the same run.
"""

import os
import time

from integration import harness as kit
from integration.bench.bench_catchup import (
    cpu_per_gib, end_of, round_name, rounds_after_warm_up, settle, start_watch, summarize,
    WARM_UP_NOTE)
from integration.bench.bench_procs import dir_bytes, log, read_json_line, rm, snapshot
from integration.walshiptest import daemons

VARIANTS = ["plain-zerocopy", "plain-copy", "tls-userspace"]


def _kernel_tls():
    try:
        with open("/proc/sys/net/ipv4/tcp_available_ulp") as f:
            return "tls" in f.read().split()
    except OSError:
        return False


def run_tls_catchup(ctx, certs, src, variant, until):
    """Agent + one replica over `src` with `variant`'s flags until the
    replica is durable at `until`; throughput, CPU and the path each used."""
    transport = "copy" if variant == "plain-copy" else "zerocopy"
    data_tls = ["--data-tls=" + ("off" if variant.startswith("plain") else "on")]
    dest = ctx.fresh_dir("dest-tls")
    agent = daemons.Agent(src, ctx.logdir, label="agent-%s" % os.path.basename(dest),
                          transport=transport, tls_args=certs.args("agent"),
                          extra_args=data_tls).start()
    try:
        a0 = snapshot(agent.pid)
        watch = start_watch(ctx, dest, until)
        t0 = time.monotonic()
        replica = daemons.Replica(agent, dest, "r1", ctx.logdir, transport=transport,
                                  tls_args=certs.args("r1"), extra_args=data_tls).start()
        rc, _ = watch.wait_rusage(900)
        w = read_json_line(watch.log_path)
        a1, r1 = snapshot(agent.pid), snapshot(replica.pid)
        if rc != 0 or not w.get("reached"):
            raise RuntimeError("walship did not reach %s: %s\nagent:\n%s\nreplica:\n%s" % (
                until, w, agent.tail(), replica.tail()))
        res = {"seconds": w["t_reached_ns"] / 1e9 - t0,
               "agent_cpu_s": a1["cpu_s"] - a0["cpu_s"], "replica_cpu_s": r1["cpu_s"],
               "agent_hwm": a1["hwm"], "replica_hwm": r1["hwm"]}
        path = "off"
        for p in ("ktls", "userspace"):
            if agent.grep(r"data path " + p):
                path = p
        res["data_path"] = path
        rs = replica.stop()
        if rs != 0:
            log("replica exited %s:\n%s", rs, replica.tail())
        res["shipped_bytes"] = dir_bytes(dest)
        rm(dest)
        return res
    finally:
        if agent.running():
            agent.stop()


def section_datatls(ctx, big):
    certs = kit.Certs(ctx.fresh_dir("certs"), "r1")
    nbytes, end = kit.total_size(big), end_of(big)
    runs = {v: [] for v in VARIANTS}
    for rnd, v in rounds_after_warm_up(VARIANTS, ctx.cfg.rounds):
        settle(ctx, nbytes)
        r = run_tls_catchup(ctx, certs, big, v, end)
        if r["shipped_bytes"] != nbytes:
            raise RuntimeError("%s: replica holds %d bytes, source %d" % (
                v, r["shipped_bytes"], nbytes))
        r["bytes"] = nbytes
        r["mb_s"] = nbytes / 1e6 / r["seconds"]
        cpu_per_gib(r, nbytes)
        log("datatls %s %-16s %7.1f MB/s  cpu/GiB agent %.2fs replica %.2fs  path %s",
            round_name(rnd), v, r["mb_s"], r["agent_cpu_s_per_gib"],
            r["replica_cpu_s_per_gib"], r["data_path"])
        if rnd >= 0:
            runs[v].append(r)
    # Per round: TLS's CPU per GiB over the copy transport's, each side.
    ratios = []
    for t, c in zip(runs["tls-userspace"], runs["plain-copy"]):
        ratios.append({side: t[side + "_cpu_s_per_gib"] / c[side + "_cpu_s_per_gib"]
                       for side in ("agent", "replica")})
    return {"backlog_bytes": nbytes, "runs": runs, "warm_up": WARM_UP_NOTE,
            "kernel_tls_ulp": _kernel_tls(), "tls_over_copy_cpu_ratios": ratios,
            "summary": summarize(runs, ["mb_s", "agent_cpu_s_per_gib", "replica_cpu_s_per_gib",
                                        "agent_hwm", "replica_hwm"])}
