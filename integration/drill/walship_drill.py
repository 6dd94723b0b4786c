#!/usr/bin/env python3
"""walship-drill: failover drills of walship with a real PostgreSQL 15.

    python3 -m integration.drill.walship_drill [--drills process-crash,host-loss,
        replica-crash,network-cut,switchover,patroni] [--quick] [--out DIR] [--seed N]

Each drill builds, on loopback and in a temp dir, a PostgreSQL primary, a
walship-agent beside it, a walship-replica, and a standby made with
`pg_basebackup -X none` that replays only what walship shipped (its
restore_command is `walship-replica restore`); runs a write load that records
every commit the primary acknowledged; injects a fault; and checks what the
standby holds against what was acknowledged. The Patroni drills
(patroni_drills.py) run a three-node Patroni + etcd cluster with an agent
beside every node, two replicas and the promotion gate instead. It writes report.md,
results.json, one lag CSV and one SVG chart per drill, and the daemons' logs,
into --out. Exit status: 0 every invariant held; 1 an invariant failed (or a
drill could not be carried out); 2 bad usage. See README.md beside this file.
"""

import argparse
import os
import random
import signal
import sys
import time

from integration.drill.drill_report import write_report
from integration.drill.drill_setup import Ctx, Params
from integration.drill.drill_steps import Result
from integration.drill.drills import DRILLS as CORE_DRILLS
from integration.drill.patroni_drills import DRILLS as PATRONI
from integration.walshiptest.pg import DEFAULT_USER, PgEnv
from integration.walshiptest.procs import log
from integration.walshiptest.waits import StepError


DRILLS = dict(CORE_DRILLS, **PATRONI)
PATRONI_DRILLS = ["patroni-host-loss", "patroni-lagging", "patroni-switchover", "patroni-async"]
ALL_DRILLS = ["process-crash", "host-loss", "replica-crash", "network-cut",
              "switchover"] + PATRONI_DRILLS
QUICK_DRILLS = ["process-crash", "host-loss"]


# ---------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drills", default=None,
                    help="comma-separated: %s; `patroni` names every Patroni drill "
                    "(default: all; --quick: %s)" % (
                        ",".join(ALL_DRILLS), ",".join(QUICK_DRILLS)))
    ap.add_argument("--quick", action="store_true",
                    help="small load and 1 MiB WAL segments; process-crash and host-loss")
    ap.add_argument("--out", default=None, help="report directory (default ./drill-out-TIME)")
    ap.add_argument("--seed", type=int, default=None, help="seed of the fault timings")
    ap.add_argument("--load-seconds", type=int, default=None, help="load before the fault")
    ap.add_argument("--segsize-mb", type=int, default=None, help="initdb --wal-segsize")
    ap.add_argument("--user", default=DEFAULT_USER,
                    help="OS user for PostgreSQL and walship when run as root")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = ap.parse_args(argv)
    drills = (args.drills.split(",") if args.drills else
              (QUICK_DRILLS if args.quick else ALL_DRILLS))
    if "patroni" in drills:  # every drill with Patroni
        i = drills.index("patroni")
        drills[i:i + 1] = PATRONI_DRILLS
    for d in drills:
        if d not in DRILLS:
            ap.error("unknown drill %r (known: %s)" % (d, ", ".join(ALL_DRILLS)))
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print("walship-drill seed %d (replay with --seed %d)" % (seed, seed))
    sys.stdout.flush()
    base = os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd())  # bazel run
    out = os.path.join(base, args.out or "drill-out-%s" % time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    params = Params(args.quick, args.load_seconds, args.segsize_mb)
    started = time.time()

    def on_signal(signum, _frame):
        raise SystemExit("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    results = []
    env = None
    try:
        env = PgEnv(user=args.user, keep=args.keep)
        ctx = Ctx(env, out, seed, params)
        for d in drills:
            log("==== drill %s", d)
            t = time.time()
            r = DRILLS[d](ctx)
            r.metrics["duration_s"] = round(time.time() - t, 1)
            results.append(r)
            log("==== drill %s: %s in %.0fs", d, "PASS" if r.ok else "FAIL", time.time() - t)
    except StepError as e:
        r = Result("set-up")
        r.error = str(e)
        results.append(r)
        log("drill set-up failed: %s", e)
    except (SystemExit, KeyboardInterrupt) as e:
        r = Result("interrupted")
        r.error = "interrupted (%s) during drill %s" % (e or "SIGINT", len(results) + 1)
        results.append(r)
        log("%s", r.error)
    finally:
        if env is not None:
            env.close()
    ok = write_report(out, seed, params, results, started, ["walship_drill.py"] + (
        argv if argv is not None else sys.argv[1:]))
    for r in results:
        m = r.metrics
        print("%-14s %s  acked_lost=%s wal_bytes_lost=%s rto_s=%s lag_p99_bytes=%s" % (
            r.name, "PASS" if r.ok else "FAIL", m.get("acked_lost"), m.get("wal_bytes_lost"),
            m.get("rto_s"), m.get("lag", {}).get("replica_bytes", {}).get("p99")))
    print("report: %s" % os.path.join(out, "report.md"))
    print("walship-drill seed %d: %s" % (seed, "PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
