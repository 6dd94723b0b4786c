"""The catch-up section: machine facts, backlogs, rounds, and one catch-up
run of the raw pipeline or walship."""

import os
import platform
import re
import subprocess
import time

from integration import harness as kit
from integration.bench.bench_procs import (
    GIB, MIB, dir_bytes, log, median_summary, read_json_line, read_text, rm, rotate, snapshot)
from integration.walshiptest import daemons


# ---------------------------------------------------------------------------
# Machine description


def machine_info(work):
    info = {"nproc": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
            info["cpu_model"] = m.group(1).strip() if m else "?"
    except OSError:
        info["cpu_model"] = "?"
    with open("/proc/meminfo") as f:
        mem = dict(l.split(":", 1) for l in f.read().splitlines())
    info["mem_total_mib"] = int(mem["MemTotal"].split()[0]) // 1024
    try:
        df = subprocess.run(["df", "-T", "-P", work], stdout=subprocess.PIPE, text=True,
                            timeout=10).stdout.splitlines()[-1].split()
        info["disk_device"], info["fs_type"] = df[0], df[1]
        dev = os.path.basename(df[0])
        base = re.sub(r"p?\d+$", "", dev) if not os.path.exists("/sys/block/" + dev) else dev
        rot = "/sys/block/%s/queue/rotational" % base
        if os.path.exists(rot):
            info["disk_rotational"] = read_text(rot).strip() == "1"
        model = "/sys/block/%s/device/model" % base
        info["disk_model"] = read_text(model).strip() if os.path.exists(model) else (
            "virtio block device" if base.startswith("vd") else "?")
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if parts[0] == df[0] and parts[1] == df[6]:
                    info["mount_options"] = parts[3]
    except (OSError, IndexError, subprocess.SubprocessError):
        pass
    info["loadavg_start"] = read_text("/proc/loadavg").split()[:3]
    return info


def busy_processes():
    """The five busiest processes right now (name, %CPU), for the report."""
    try:
        out = subprocess.run(["ps", "-eo", "pcpu,comm", "--sort=-pcpu", "--no-headers"],
                             stdout=subprocess.PIPE, text=True, timeout=10).stdout
        return [l.strip() for l in out.splitlines()[:5]]
    except (OSError, subprocess.SubprocessError):
        return []


# ---------------------------------------------------------------------------
# Append-format backlogs


def make_backlogs(ctx):
    """The big backlog (generated once) and prefixes of it (hard links)."""
    cfg = ctx.cfg
    big = ctx.fresh_dir("backlog-big")
    log("generating a %d MiB backlog of %d MiB segments in %s", cfg.backlog_bytes // MIB,
        cfg.segment_bytes // MIB, big)
    ctx.tool_json(["write", "--dir=" + big, "--rate=0", "--bytes=%d" % cfg.backlog_bytes,
                   "--min-record=%d" % MIB, "--max-record=%d" % MIB,
                   "--segment-bytes=%d" % cfg.segment_bytes, "--seed=%d" % ctx.seed])
    names = sorted(os.listdir(big))

    def prefix(label, nbytes):
        d = ctx.fresh_dir(label)
        for n in names[:max(1, nbytes // cfg.segment_bytes)]:
            os.link(os.path.join(big, n), os.path.join(d, n))
        return d

    small = prefix("backlog-small", cfg.small_backlog_bytes)
    fan = prefix("backlog-fanout", cfg.fanout_bytes)
    subprocess.run(["sync"], timeout=300)
    return big, small, fan


def round_name(rnd):
    return "warm-up" if rnd < 0 else "round %d" % (rnd + 1)


def rounds_after_warm_up(variants, rounds):
    """(round, variant) pairs: round -1 (the warm-up, see WARM_UP_NOTE) runs
    every variant in order, then each recorded round rotates them."""
    for rnd in range(-1, rounds):
        for v in (variants if rnd < 0 else rotate(variants, rnd)):
            yield rnd, v


# Catch-up sections start with one unrecorded run of every variant. In this
# VM the first run to write into memory the guest had not touched since boot
# (or since a big PostgreSQL load) paid up to 3x the CPU in the kernel's copy
# into the page cache (perf: __pi_memcpy under splice, 0.89 against 0.29
# CPU s/GiB), whichever variant came first.
WARM_UP_NOTE = ("each catch-up section first runs every variant once, unrecorded: the "
                "first writer into untouched guest memory paid up to 3x the CPU")


def settle(ctx, warm_bytes):
    """Before a run: writes back every dirty page, so no run pays for the
    writeback of the backlog's creation or of the run before it; then
    touches and frees `warm_bytes` (plus a tenth) of anonymous memory. This
    VM hands memory the guest frees back to its host, and the first write
    to such a page costs 2-5 CPU s/GiB in the host's fault handler against
    0.2-0.8 for a page freed a moment ago: whoever allocates page cache
    after an idle pause pays it. Warming first gives every variant the same
    start; the cost of each warming is kept (machine.warm_memory)."""
    subprocess.run(["sync"], timeout=300)
    if warm_bytes <= 0:
        return
    avail = 0
    for line in read_text("/proc/meminfo").splitlines():
        if line.startswith("MemAvailable:"):
            avail = int(line.split()[1]) * 1024
    mib = int(min(warm_bytes * 1.1, avail / 2) // MIB)
    r = ctx.tool_json(["warm-memory", "--mib=%d" % mib])
    ctx.warm_costs.append(r["s_per_gib"])


def end_of(wal_dir):
    names = kit.source_segments(wal_dir)
    return names[-1], os.path.getsize(os.path.join(wal_dir, names[-1]))


# ---------------------------------------------------------------------------
# One catch-up run of each kind


def run_raw_catchup(ctx, src, transport, verify=False):
    dest = ctx.fresh_dir("dest-raw")
    port_file = os.path.join(dest + ".port")
    recv = ctx.procs.start("raw-recv", [ctx.tool, "raw-recv", "--dest=" + dest,
                                        "--port-file=" + port_file, "--transport=" + transport]
                           + (["--verify"] if verify else []))
    kit.wait_until(lambda: os.path.exists(port_file) and read_text(port_file).strip(),
                       10, "raw-recv to listen", interval=0.01)
    addr = read_text(port_file).strip().split("=", 1)[1]
    t0 = time.monotonic()
    send = ctx.procs.start("raw-send", [ctx.tool, "raw-send", "--connect=" + addr,
                                        "--src=" + src, "--transport=" + transport]
                           + (["--verify"] if verify else []))
    rc_s, ru_s = send.wait_rusage(900)
    rc_r, ru_r = recv.wait_rusage(60)
    if rc_s != 0 or rc_r != 0:
        raise RuntimeError("raw pipeline failed: send %s recv %s\n%s\n%s" % (
            rc_s, rc_r, send.tail(15), recv.tail(15)))
    summary = read_json_line(recv.log_path)
    sent = read_json_line(send.log_path)
    t1 = summary["t_end_ns"] / 1e9
    nbytes = summary["bytes"]
    if dir_bytes(dest) != kit.total_size(src):
        raise RuntimeError("raw pipeline: %s holds %d bytes, source %d" % (
            dest, dir_bytes(dest), kit.total_size(src)))
    rm(dest)
    return {"bytes": nbytes, "seconds": t1 - t0, "mb_s": nbytes / 1e6 / (t1 - t0),
            "agent_cpu_s": ru_s.ru_utime + ru_s.ru_stime,
            "replica_cpu_s": ru_r.ru_utime + ru_r.ru_stime,
            "agent_hwm": sent["vmhwm_kb"] * 1024, "replica_hwm": summary["vmhwm_kb"] * 1024,
            "agent_read_bytes": sent["read_bytes"],
            "receive_thread_cpu_s": summary["receive_thread_cpu_s"],
            "flusher_thread_cpu_s": summary["flusher_thread_cpu_s"],
            "fdatasync": summary["fdatasync"]}


def start_watch(ctx, dest, until=None, seconds=900):
    """benchtool watch-state on `dest`; `until` = (segment, offset) to exit at."""
    wlog = dest + ".watch"
    args = [ctx.tool, "watch-state", "--dest=" + dest, "--log=" + wlog,
            "--seconds=%d" % seconds]
    if until:
        args += ["--until-segment=" + until[0], "--until-offset=%d" % until[1]]
    p = ctx.procs.start("watch", args)
    p.watch_log = wlog
    time.sleep(0.1)  # let it add its inotify watch
    return p


def read_watch_log(path):
    """[(segment, offset, complete, t_seconds)] from a watch-state log."""
    out = []
    with open(path) as f:
        for line in f:
            seg, off, complete, t = line.split()
            out.append((seg, int(off), complete == "1", int(t) / 1e9))
    return out


def run_walship_catchup(ctx, src, transport, until, agent_args=(), extra=None,
                        replica_args=(), data_address=None, tls=(None, None)):
    """Agent + one replica over `src` until the replica is durable at `until`.

    Returns throughput, CPU and RSS of both daemons. `extra(agent)` may add
    more to the result (the PostgreSQL backends' CPU). `replica_args` are
    more replica flags; `data_address(agent)`, if given, says where the
    replica connects for the data socket (a proxy in front of the agent's).
    `tls`: the agent's and the replica's --tls-* flags (None: --insecure)."""
    dest = ctx.fresh_dir("dest-ws")
    agent = daemons.Agent(src, ctx.logdir, label="agent-%s" % os.path.basename(dest),
                          transport=transport, extra_args=agent_args,
                          tls_args=tls[0]).start()
    try:
        a0 = snapshot(agent.pid)
        before = extra(agent, None) if extra else None
        watch = start_watch(ctx, dest, until)
        t0 = time.monotonic()
        replica = daemons.Replica(agent, dest, "r1", ctx.logdir, transport=transport,
                                  extra_args=replica_args, tls_args=tls[1],
                                  data_address=data_address and data_address(agent)).start()
        rc, _ = watch.wait_rusage(900)
        w = read_json_line(watch.log_path)
        a1, r1 = snapshot(agent.pid), snapshot(replica.pid)
        if rc != 0 or not w.get("reached"):
            raise RuntimeError("walship did not reach %s: %s\nagent:\n%s\nreplica:\n%s" % (
                until, w, agent.tail(), replica.tail()))
        t1 = w["t_reached_ns"] / 1e9
        res = {"seconds": t1 - t0,
               "agent_cpu_s": a1["cpu_s"] - a0["cpu_s"], "replica_cpu_s": r1["cpu_s"],
               "agent_hwm": a1["hwm"], "replica_hwm": r1["hwm"],
               "agent_read_bytes": a1["io"].get("read_bytes", 0) - a0["io"].get("read_bytes", 0),
               "agent_rchar": a1["io"].get("rchar", 0) - a0["io"].get("rchar", 0)}
        if extra:
            res.update(extra(agent, before))
        rs = replica.stop()
        if rs != 0:
            log("replica exited %s:\n%s", rs, replica.tail())
        res["shipped_bytes"] = dir_bytes(dest)
        return res, dest
    finally:
        if agent.running():
            agent.stop()


def cpu_per_gib(r, nbytes):
    g = nbytes / float(GIB)
    r["agent_cpu_s_per_gib"] = r["agent_cpu_s"] / g
    r["replica_cpu_s_per_gib"] = r["replica_cpu_s"] / g
    return r


# ---------------------------------------------------------------------------
# Section: append catch-up


def section_catchup(ctx, big, small):
    cfg = ctx.cfg
    big_bytes, small_bytes = kit.total_size(big), kit.total_size(small)
    big_end, small_end = end_of(big), end_of(small)
    # raw-*-verify: the raw pipeline plus walship's checksum passes: the
    # sender's over every frame before sending it, the receiver's over every
    # byte it received; the least a verifying pipeline does.
    variants = ["raw-zerocopy", "walship-zerocopy", "walship-copy", "raw-copy",
                "walship-zerocopy-small", "walship-copy-small", "raw-zerocopy-verify",
                "raw-copy-verify"]
    runs = {v: [] for v in variants}
    for rnd, v in rounds_after_warm_up(variants, cfg.rounds):
        transport = "copy" if "copy" in v.replace("zerocopy", "") else "zerocopy"
        is_small = v.endswith("-small")
        src, nbytes, end = (small, small_bytes, small_end) if is_small else (
            big, big_bytes, big_end)
        settle(ctx, nbytes)  # the destination's page cache
        if v.startswith("raw"):
            r = run_raw_catchup(ctx, src, transport, verify=v.endswith("-verify"))
        else:
            r, dest = run_walship_catchup(ctx, src, transport, end)
            if r["shipped_bytes"] != nbytes:
                raise RuntimeError("%s: replica holds %d bytes, source %d" % (
                    v, r["shipped_bytes"], nbytes))
            if rnd == 0 and not is_small:
                problems = kit.diff_dirs(src, dest) if cfg.quick else []
                if problems:
                    raise RuntimeError("replica differs: %s" % problems)
            rm(dest)
            r["bytes"] = nbytes
            r["mb_s"] = nbytes / 1e6 / r["seconds"]
        cpu_per_gib(r, nbytes)
        log("catchup %s %-24s %7.1f MB/s  cpu/GiB agent %.2fs replica %.2fs  "
            "hwm agent %.1f MiB replica %.1f MiB", round_name(rnd), v, r["mb_s"],
            r["agent_cpu_s_per_gib"], r["replica_cpu_s_per_gib"],
            r["agent_hwm"] / MIB, r["replica_hwm"] / MIB)
        if rnd >= 0:
            runs[v].append(r)
    return {"backlog_bytes": big_bytes, "small_backlog_bytes": small_bytes,
            "segment_bytes": cfg.segment_bytes, "runs": runs, "warm_up": WARM_UP_NOTE,
            "summary": summarize(runs, ["mb_s", "agent_cpu_s_per_gib", "replica_cpu_s_per_gib",
                                        "agent_hwm", "replica_hwm"])}


def summarize(runs, keys):
    return {v: {k: median_summary([r.get(k) for r in rs]) for k in keys}
            for v, rs in runs.items()}
