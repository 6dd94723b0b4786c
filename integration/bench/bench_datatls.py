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

from integration import harness as kit
from integration.bench.bench_catchup import (
    cpu_per_gib, end_of, round_name, rounds_after_warm_up, run_walship_catchup, settle,
    summarize, WARM_UP_NOTE)
from integration.bench.bench_procs import log, rm

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

    def data_path(agent, _before):
        for p in ("ktls", "userspace"):
            if agent.grep(r"data path " + p):
                return {"data_path": p}
        return {"data_path": "off"}
    res, dest = run_walship_catchup(ctx, src, transport, until, agent_args=data_tls,
                                    extra=data_path, replica_args=data_tls,
                                    tls=(certs.args("agent"), certs.args("r1")))
    rm(dest)
    return res


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
