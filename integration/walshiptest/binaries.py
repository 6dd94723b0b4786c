"""Where the walship-built binaries and source files are: the one place that
names each binary's Bazel package (keep it so: a moved target is a one-line
change here and one in this directory's BUILD)."""

import os

from integration.walshiptest import waits

WORKSPACE = "walship"

# (Bazel package, binary name)
AGENT = ("agent", "walship-agent")
STATUS = ("status", "walship-status")
REPLICA = ("replica", "walship-replica")
REPLICA_FAULTY = ("integration/chaos", "walship-replica-faulty")
DRILL_LOADER = ("integration/drill", "drill-loader")
BENCHTOOL = ("integration/bench", "benchtool")

# The repository root (or the runfiles tree's workspace directory).
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class BinaryNotFound(waits.StepError, FileNotFoundError):
    """A binary is in none of the places find() looks."""


def candidates(target):
    """Where find() looks for `target`, in order."""
    pkg, name = target
    cands = []
    if os.environ.get("WALSHIP_BIN_DIR"):  # manual runs against a fixed build
        cands.append(os.path.join(os.environ["WALSHIP_BIN_DIR"], name))
    for var in ("TEST_SRCDIR", "RUNFILES_DIR"):
        if os.environ.get(var):
            cands.append(os.path.join(os.environ[var],
                                      os.environ.get("TEST_WORKSPACE", WORKSPACE), pkg, name))
    # py_binary under bazel run: the runfiles tree this file is in.
    idx = REPO.find(".runfiles" + os.sep)
    if idx >= 0:
        cands.append(os.path.join(REPO[:idx + len(".runfiles")], WORKSPACE, pkg, name))
    cands.append(os.path.join(REPO, "bazel-bin", pkg, name))
    return cands


def find(target):
    """Path of a built binary, e.g. find(AGENT): in $WALSHIP_BIN_DIR, the
    Bazel runfiles, or bazel-bin/ of this checkout. Raises BinaryNotFound."""
    pkg, name = target
    cands = candidates(target)
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise BinaryNotFound("%s not found (looked in %s); build it: bazel build //%s:%s"
                         % (name, ", ".join(cands), pkg, name))


def runfile(rel):
    """Path of a source file of this repository, in runfiles or the tree."""
    srcdir = os.environ.get("TEST_SRCDIR") or os.environ.get("RUNFILES_DIR")
    if srcdir:
        p = os.path.join(srcdir, os.environ.get("TEST_WORKSPACE", WORKSPACE), rel)
        if os.path.exists(p):
            return p
    return os.path.join(REPO, rel)
