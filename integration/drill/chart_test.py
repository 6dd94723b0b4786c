"""Tests for chart.py: the SVG chart, on fake data."""

import unittest
import xml.etree.ElementTree as ET

from integration.drill import chart


class TicksTest(unittest.TestCase):

    def test_round_ticks_cover_range(self):
        t = chart.nice_ticks(0, 97, 5)
        self.assertEqual(t[0], 0)
        self.assertGreaterEqual(t[-1], 80)
        steps = {round(b - a, 6) for a, b in zip(t, t[1:])}
        self.assertEqual(len(steps), 1)

    def test_human_bytes(self):
        self.assertEqual(chart.human_bytes(512), "512 B")
        self.assertEqual(chart.human_bytes(1536), "1.5 KiB")
        self.assertEqual(chart.human_bytes(3 * 1024 * 1024), "3 MiB")


class LagChartTest(unittest.TestCase):

    def test_valid_svg_with_gaps_and_markers(self):
        times = [i * 0.25 for i in range(80)]
        lag_b = [None if 40 <= i < 44 else (i % 7) * 1000 for i in range(80)]
        lag_ms = [float(i % 5) * 3 for i in range(80)]
        svg = chart.lag_chart(
            "process-crash <lag>", times,
            [{"label": "lag (bytes)", "unit": "bytes", "series": [("primary - replica", lag_b)]},
             {"label": "lag (ms)", "unit": "ms", "series": [("oldest unreplicated commit", lag_ms)]}],
            markers=[(10.0, "fault"), (12.5, "promoted", "#2ca02c")])
        root = ET.fromstring(svg)  # well-formed XML
        self.assertTrue(root.tag.endswith("svg"))
        self.assertIn("process-crash &lt;lag&gt;", svg)
        self.assertEqual(svg.count("<polyline"), 3)  # the gap splits one series
        self.assertEqual(svg.count('stroke-dasharray="5,3"'), 4)  # 2 markers x 2 panels
        self.assertIn(">fault<", svg)
        self.assertIn(">promoted<", svg)

    def test_empty_series(self):
        svg = chart.lag_chart("empty", [], [{"label": "x", "unit": "", "series": [("s", [])]}])
        ET.fromstring(svg)


if __name__ == "__main__":
    unittest.main()
