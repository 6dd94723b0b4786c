"""Summaries of measured values for reports."""

import math


def percentiles(values, points=(50, 90, 99)):
    """Nearest-rank percentiles of the non-None values, plus n and max:
    {"n", "p50", "p90", "p99", "max"} by default; every statistic None
    (and n = 0) for an empty input."""
    vals = sorted(v for v in values if v is not None)
    out = {"n": len(vals)}
    for p in points:
        if not vals:
            out["p%d" % p] = None
        else:
            rank = max(1, int(math.ceil(p / 100.0 * len(vals))))
            out["p%d" % p] = vals[rank - 1]
    out["max"] = vals[-1] if vals else None
    return out
