"""The fault catalogue and the seeded schedule.

Fault i of a campaign is drawn from random.Random("SEED:i") alone, so any
one fault can be replayed without the ones before it (--only i). Even
indices go to the append world, odd ones to the PostgreSQL world (when both
run). Each fault has a family (the issue's kinds: process, network, disk,
power, source), a kind, a target and parameters; `apply` injects it and
heals it (restarts what it killed, lifts what it blocked) before returning
a one-line description.
"""

import collections
import os
import random
import time

from integration.chaos import nodes

FAMILIES = ("process", "network", "disk", "power", "source")

Fault = collections.namedtuple("Fault", "index world family kind target params")

# Errors a fault may legitimately end in instead of convergence (the
# replica stops and says so; README "Errors an operator may see").
REPORTABLE = {"remove-needed": ("gap",), "agent-over-dir": ("gap",)}


def draw(seed, index, world_names):
    """Fault `index` of campaign `seed`."""
    rng = random.Random("%d:%d" % (seed, index))
    world = world_names[index % len(world_names)]
    family = rng.choice(FAMILIES)
    pg = world == "postgres"
    replica = rng.choice(("r1", "r2"))
    kind, target, params = _KINDS[family](rng, pg, replica)
    return Fault(index, world, family, kind, target, params)


def _process(rng, pg, replica):
    kinds = ["kill9-agent", "stop-agent", "kill9-replica", "stop-replica",
             "kill-agent-starting", "kill-replica-handshake"]
    if pg:
        kinds += ["kill9-postmaster", "stop-postmaster"]
    kind = rng.choice(kinds)
    target = replica if "replica" in kind else kind.split("-", 1)[1].split("-")[0]
    return kind, target, {"pause": round(rng.uniform(0.0, 1.0), 2),
                          "stop_s": round(rng.uniform(1.0, 3.0), 2),
                          "after_ms": rng.randrange(0, 400)}


def _network(rng, pg, replica):
    kind = rng.choice(["cut", "blackhole", "half-open", "latency", "bandwidth"])
    return kind, replica, {"channel": rng.choice(("control", "data")),
                           "direction": rng.choice(("to-agent", "from-agent")),
                           "hold": round(rng.uniform(0.5, 3.0), 2),
                           "delay": round(rng.uniform(0.02, 0.4), 3),
                           "rate": rng.choice((64 << 10, 256 << 10, 1 << 20))}


def _disk(rng, pg, replica):
    kind = rng.choice(["disk-full", "eio-fdatasync", "eio-write", "torn-write",
                       "enospc-write"])
    if kind == "disk-full":
        replica = "r1"  # the replica on its own small tmpfs
    suffixes = [None, ".partial", "walship.state", "walship.sums"]
    if kind == "eio-fdatasync":
        suffixes.remove("walship.sums")  # appended, synced with its segment
    return kind, replica, {"hold": round(rng.uniform(0.5, 3.0), 2),
                           "suffix": rng.choice(suffixes)}


def _power(rng, pg, replica):
    return "power-loss", replica, {"down": round(rng.uniform(0.0, 1.5), 2)}


def _source(rng, pg, replica):
    if pg:
        kind = rng.choice(["pg-in-recovery", "pg-promote"])
        return kind, "postgres", {"hold": round(rng.uniform(0.5, 2.5), 2)}
    kind = rng.choice(["remove-needed", "remove-held", "agent-over-dir"])
    return kind, replica, {"needed": kind == "remove-needed",
                           "down": round(rng.uniform(0.2, 1.5), 2),
                           "shape": rng.choice(("empty", "newest", "oldest")),
                           "hold": round(rng.uniform(0.5, 2.5), 2)}


_KINDS = {"process": _process, "network": _network, "disk": _disk, "power": _power,
          "source": _source}


class Injector(object):
    """Applies faults to a world; `expected_dead` names daemons a fault ended."""

    def __init__(self, world, netns):
        self.world = world
        self.netns = netns
        self.expected_dead = set()

    def replica(self, f):
        return next(r for r in self.world.replicas if r.role == f.target)

    def apply(self, f):
        fn = getattr(self, "_" + f.family)
        return fn(f)

    # -- process ---------------------------------------------------------------
    def _process(self, f):
        w, p = self.world, f.params
        if f.kind == "kill9-agent":
            w.agent.kill()
            time.sleep(p["pause"])
            w.agent.start()
        elif f.kind == "stop-agent":
            nodes.pause_for(w.agent, p["stop_s"])
        elif f.kind == "kill-agent-starting":
            w.agent.kill()
            w.agent.spawn_only()
            time.sleep(p["after_ms"] / 1000.0)
            w.agent.kill()
            w.agent.start()
        elif f.kind == "kill9-replica":
            r = self.replica(f)
            r.kill()
            w.check_at_rest(r)
            time.sleep(p["pause"])
            r.start()
        elif f.kind == "stop-replica":
            nodes.pause_for(self.replica(f), p["stop_s"])
        elif f.kind == "kill-replica-handshake":
            r = self.replica(f)
            r.kill()
            r.start()
            time.sleep(p["after_ms"] / 1000.0)
            r.kill()
            w.check_at_rest(r)
            r.start()
        else:
            return w.postmaster_fault(f)
        return "%s %s" % (f.kind, _fmt(p))

    # -- network ---------------------------------------------------------------
    def _network(self, f):
        r, p = self.replica(f), f.params
        proxy = r.proxies[p["channel"]]
        port = r.port(p["channel"])
        host = r.host
        if f.kind == "latency":
            proxy.set_delay(p["delay"], "both")
            time.sleep(p["hold"])
            proxy.clear()
            return "latency %.0f ms on %s (fault proxy) for %.1fs" % (
                p["delay"] * 1000, p["channel"], p["hold"])
        if host is None:
            return self._network_by_proxy(f, r, proxy)
        if f.kind == "cut":
            host.cut(port)
            return "cut the %s connection (socket destroyed in the namespace)" % p["channel"]
        if f.kind == "blackhole":
            host.blackhole(port, p["direction"])
        elif f.kind == "half-open":
            host.half_open(port, p["hold"])
        elif f.kind == "bandwidth":
            host.limit_rate(p["rate"])
        time.sleep(p["hold"])
        host.clear()
        return "%s on %s %s for %.1fs (netns)" % (f.kind, p["channel"], _fmt(p), p["hold"])

    def _network_by_proxy(self, f, r, proxy):
        p = f.params
        if f.kind == "cut":
            proxy.cut(reset=True)
        elif f.kind in ("blackhole", "half-open"):
            proxy.stall_at(0, "s2c" if p["direction"] == "from-agent" else "c2s")
            time.sleep(p["hold"])
            if f.kind == "half-open":
                proxy.cut()
            proxy.release()
        elif f.kind == "bandwidth":
            proxy.set_delay(0.05, "s2c")
            time.sleep(p["hold"])
        proxy.clear()
        return "%s on %s (fault proxy) %s" % (f.kind, p["channel"], _fmt(p))

    # -- disk ------------------------------------------------------------------
    def _disk(self, f):
        r, p = self.replica(f), f.params
        if f.kind == "disk-full":
            filler = os.path.join(r.dest, ".chaos-filler")
            fd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o600)
            try:
                vfs = os.statvfs(r.dest)
                free = vfs.f_bavail * vfs.f_frsize
                os.posix_fallocate(fd, 0, max(free - 4096, 4096))
            except OSError:
                pass
            finally:
                os.close(fd)
            time.sleep(p["hold"])
            os.unlink(filler)
            return "filled %s's destination (tmpfs) for %.1fs" % (r.name, p["hold"])
        fid = r.faults.arm(f.kind, p["suffix"])
        fired = r.faults.wait_fired(fid, p["hold"] + 5)
        return "%s on %s %s" % (f.kind, p["suffix"] or "any file",
                                "fired" if fired else "armed (fires at its next write)")

    # -- power -------------------------------------------------------------------
    def _power(self, f):
        r, p = self.replica(f), f.params
        fid = r.faults.arm("power-loss")
        self.expected_dead.add(r.label)
        try:
            rc = r.proc.wait(timeout=15)
        except Exception:  # noqa: BLE001 - reported below
            rc = None
        if rc != nodes.POWER_LOSS_EXIT:
            raise AssertionError("%s: power loss armed (id %s) but the process %s" % (
                r.name, fid, "still runs" if rc is None else "exited %s" % rc))
        self.world.check_at_rest(r)
        time.sleep(p["down"])
        r.start()
        self.expected_dead.discard(r.label)
        return "power loss of %s's host, back after %.1fs" % (r.name, p["down"])

    # -- source ------------------------------------------------------------------
    def _source(self, f):
        w = self.world
        if f.kind.startswith("pg-"):
            return w.source_fault(f)
        if f.kind == "agent-over-dir":
            return w.agent_over_other_dir(f)
        return w.remove_while_down(f, self.replica(f))


def _fmt(params):
    return " ".join("%s=%s" % kv for kv in sorted(params.items()))


def replay_command(seed, index, quick):
    return "integration/chaos/run_chaos.sh --seed %d --only %d%s" % (
        seed, index, " --quick" if quick else "")


def describe(f):
    return "#%d %s %s/%s on %s" % (f.index, f.world, f.family, f.kind, f.target)

