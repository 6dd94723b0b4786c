"""SVG charts for the failover drill report (percentiles: walshiptest.stats).

Standard library only; no plotting library. One function matters:

  * lag_chart(...) -> an SVG document (str): replication lag over time, one
    panel per series (e.g. bytes and milliseconds) sharing the time axis,
    with vertical markers for events (the fault, the promotion).

Times are seconds on any common origin (the drill uses seconds since the
load started). A None value breaks the line: the series has no sample
there (the primary was down, the agent did not answer).
"""

import math
from xml.sax.saxutils import escape

from integration.walshiptest import stats

# Colors of the series and the default marker color.
_LINE_COLORS = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b"]
_MARKER_COLOR = "#d62728"


def nice_ticks(lo, hi, count=5):
    """About `count` round tick values covering [lo, hi] (lo < hi)."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / float(max(1, count))
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        step = m * mag
        if step >= raw:
            break
    start = math.floor(lo / step) * step
    ticks = []
    v = start
    while v <= hi + step * 1e-9:
        if v >= lo - step * 1e-9:
            ticks.append(round(v, 10))
        v += step
    return ticks


def human_bytes(v):
    """1536 -> '1.5 KiB'."""
    v = float(v)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(v) < 1024 or unit == "GiB":
            if unit == "B":
                return "%d B" % v
            return ("%.1f %s" % (v, unit)).replace(".0 ", " ")
        v /= 1024.0
    return "%d" % v


def _fmt(v, unit):
    if unit == "bytes":
        return human_bytes(v)
    if unit == "ms":
        return ("%g ms" % v) if v < 10000 else ("%.1f s" % (v / 1000.0))
    return "%g" % v


def lag_chart(title, times, panels, markers=(), width=860, panel_height=190):
    """An SVG chart of one or more series against time.

    times: list of sample times (seconds).
    panels: list of dicts {"label": str, "unit": "bytes"|"ms"|"",
            "series": [(name, values)]} where each values list is aligned
            with `times` (None = no sample).
    markers: list of (time, label[, color]) vertical lines.
    """
    left, right, top, gap, bottom = 78, 20, 58, 34, 40
    height = top + len(panels) * panel_height + (len(panels) - 1) * gap + bottom
    plot_w = width - left - right
    finite_t = [t for t in times if t is not None]
    t0 = min([0.0] + finite_t + [m[0] for m in markers])
    t1 = max([1.0] + finite_t + [m[0] for m in markers])
    if t1 - t0 < 1e-9:
        t1 = t0 + 1

    def x_of(t):
        return left + (t - t0) / (t1 - t0) * plot_w

    out = []
    out.append('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
               'viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">'
               % (width, height, width, height))
    out.append('<rect x="0" y="0" width="%d" height="%d" fill="white"/>' % (width, height))
    out.append('<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>'
               % (left, escape(title)))
    xticks = nice_ticks(t0, t1, 10)
    for i, panel in enumerate(panels):
        py = top + i * (panel_height + gap)
        vals = [v for _, series in panel["series"] for v in series if v is not None]
        vmax = max(vals) if vals else 1.0
        if vmax <= 0:
            vmax = 1.0
        # A short spike (a new replica copying from the slot) would flatten
        # everything else: past 4x the 95th percentile the scale stops and
        # higher values are drawn at the top edge, with a note.
        clipped = None
        p95 = stats.percentiles(vals, (95,))["p95"] if vals else None
        if p95 and vmax > 4 * p95:
            clipped, vmax = vmax, 2 * p95
        unit = panel.get("unit", "")
        scale = 1.0
        if unit == "bytes":  # ticks round in KiB or MiB, not in decimal bytes
            scale = 1024.0 ** min(3, max(0, int(math.log(max(vmax, 1.0), 1024))))
        yticks = [v * scale for v in nice_ticks(0, vmax * 1.05 / scale, 4)]
        vtop = max(yticks[-1], vmax)

        def y_of(v, py=py, vtop=vtop):
            return py + panel_height - (min(v, vtop) / vtop) * panel_height

        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>'
                   % (left, py, plot_w, panel_height))
        for yt in yticks:
            yy = y_of(yt)
            out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>'
                       % (left, yy, left + plot_w, yy))
            out.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>'
                       % (left - 4, yy + 4, escape(_fmt(yt, panel.get("unit", "")))))
        for xt in xticks:
            xx = x_of(xt)
            out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#f3f3f3"/>'
                       % (xx, py, xx, py + panel_height))
            if i == len(panels) - 1:
                out.append('<text x="%.1f" y="%d" text-anchor="middle">%g</text>'
                           % (xx, py + panel_height + 14, xt))
        if clipped is not None:
            out.append('<text x="%d" y="%d" text-anchor="end" fill="#666">clipped at the top '
                       '(max %s)</text>' % (left + plot_w - 4, py + 14,
                                            escape(_fmt(clipped, panel.get("unit", "")))))
        out.append('<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">%s</text>'
                   % (py + panel_height // 2, py + panel_height // 2, escape(panel["label"])))
        for k, (name, series) in enumerate(panel["series"]):
            color = _LINE_COLORS[k % len(_LINE_COLORS)]
            run = []
            runs = []
            for t, v in zip(times, series):
                if t is None or v is None:
                    if run:
                        runs.append(run)
                    run = []
                    continue
                run.append("%.1f,%.1f" % (x_of(t), y_of(v)))
            if run:
                runs.append(run)
            for r in runs:
                if len(r) == 1:
                    x, y = r[0].split(",")
                    out.append('<circle cx="%s" cy="%s" r="1.8" fill="%s"/>' % (x, y, color))
                else:
                    out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>'
                               % (color, " ".join(r)))
            lx = left + 8 + sum(40 + 6 * len(n) for n, _ in panel["series"][:k])
            out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>'
                       % (lx, py + 12, lx + 16, py + 12, color))
            out.append('<text x="%d" y="%d">%s</text>' % (lx + 20, py + 16, escape(name)))
        last_label_x = None
        row = 0
        for m in sorted(markers, key=lambda m: m[0]):
            mt, label = m[0], m[1]
            color = m[2] if len(m) > 2 else _MARKER_COLOR
            xx = x_of(mt)
            out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" '
                       'stroke-dasharray="5,3" stroke-width="1.5"/>'
                       % (xx, py, xx, py + panel_height, color))
            if i == 0:
                # Close labels go on alternate rows; labels near the right edge end at the line.
                row = (row + 1) % 3 if last_label_x is not None and xx - last_label_x < 80 else 0
                last_label_x = xx
                anchor = "end" if xx > width - right - 40 else "middle"
                out.append('<text x="%.1f" y="%d" fill="%s" text-anchor="%s">%s</text>'
                           % (xx, py - 4 - 11 * row, color, anchor, escape(label)))
    out.append('<text x="%d" y="%d" text-anchor="middle">seconds since the load started</text>'
               % (left + plot_w // 2, height - 8))
    out.append("</svg>")
    return "\n".join(out) + "\n"
