"""Running walship-drill as a subprocess from a test, as an operator would."""

import os
import subprocess
import sys

# The repository root (in the runfiles tree under Bazel): the drill runs as
# `python3 -m integration.drill.walship_drill` from there.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_drill(args, out, timeout=780):
    """Runs the drill with `args` and --out `out` (plus --seed from
    WALSHIP_DRILL_SEED); returns (exit status, report.md text or "").

    The drill bounds every wait itself; `timeout` is a last resort below
    Bazel's "long" timeout (900 s): SIGTERM first (the drill then stops every
    process it started and still writes its report), SIGKILL a minute later;
    the status is then None."""
    argv = [sys.executable, "-m", "integration.drill.walship_drill"] + list(args) + [
        "--out", out]
    if os.environ.get("WALSHIP_DRILL_SEED"):
        argv += ["--seed", os.environ["WALSHIP_DRILL_SEED"]]
    print("running: %s" % " ".join(argv), flush=True)
    p = subprocess.Popen(argv, cwd=ROOT)
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.terminate()
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        rc = None
    report = ""
    path = os.path.join(out, "report.md")
    if os.path.exists(path):
        with open(path) as f:
            report = f.read()
        print(report, flush=True)
    return rc, report
