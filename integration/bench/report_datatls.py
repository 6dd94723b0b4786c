"""The datatls section's part of the report (report.py): its targets and its
Markdown table. Pure functions of the results dict."""

from integration.bench.report_synccost import get_path, span

LABELS = [("plain-zerocopy", "plaintext, `--transport=zerocopy` (sendfile → splice)"),
          ("plain-copy", "plaintext, `--transport=copy` (one buffer each side)"),
          ("tls-userspace", "`--data-tls=on`, userspace TLS (copy + AES-GCM)")]


def targets(results):
    """Userspace TLS within 1.5x the copy transport's CPU per GiB, per side
    (the median of the per-round ratios); [] when the section did not run."""
    d = get_path(results, "sections", "datatls")
    if not d:
        return []
    out = []
    for side in ("agent", "replica"):
        ratios = sorted(r[side] for r in d.get("tls_over_copy_cpu_ratios", []))
        m = ratios[len(ratios) // 2] if ratios else None
        tls = get_path(d, "summary", "tls-userspace", side + "_cpu_s_per_gib", "median")
        cp = get_path(d, "summary", "plain-copy", side + "_cpu_s_per_gib", "median")
        out.append({
            "id": "datatls-cpu-" + side,
            "target": "userspace TLS on the data socket <= 1.5x the CPU per GiB of the copy "
                      "transport on the %s" % side,
            "pass": None if m is None else m <= 1.5,
            "measured": "%s vs %s CPU s/GiB: %sx (median of per-round ratios)" % (
                "n/a" if tls is None else "%.2f" % tls, "n/a" if cp is None else "%.2f" % cp,
                "n/a" if m is None else "%.2f" % m),
            "note": "same run, interleaved rounds"})
    return out


def markdown(results):
    d = get_path(results, "sections", "datatls")
    if not d:
        return []
    L = ["### TLS on the data socket: catch-up of %d MiB (page cache warm)" % (
        d["backlog_bytes"] // (1 << 20)), "",
        "| data socket | durable MB/s | agent CPU s/GiB | replica CPU s/GiB |",
        "|---|---:|---:|---:|"]
    for v, label in LABELS:
        s = get_path(d, "summary", v)
        if not s:
            continue
        L.append("| %s | %s | %s | %s |" % (label, span(s["mb_s"], "%.0f"),
                                            span(s["agent_cpu_s_per_gib"], "%.2f"),
                                            span(s["replica_cpu_s_per_gib"], "%.2f")))
    L.append("")
    L.append("Kernel TLS (SSL_sendfile / splice on a kTLS socket) %s." % (
        "was available (tcp_available_ulp lists tls)" if d.get("kernel_tls_ulp") else
        "was not available here (the kernel offers no tls ULP), so it is not measured"))
    L.append("")
    return L
