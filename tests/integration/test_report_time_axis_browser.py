"""report.html's time axis in a real headless browser (Debian's chromium): the tick labels
the page computes for a dated series, and no console errors. Fails, never skips, without
chromium (``.ci/run`` installs it)."""

from __future__ import annotations

import json
import re
import subprocess

from system_binaries import need_binary

from shiftwatch.sinks.evaluation import EvaluationSink

PROBE = """<script>
const probe = [[1767225600, 1767225600 + 6 * 3600, 7], [1767225600, 1767225600 + 40 * 86400, 7],
               [-1798761600, 1483228800, 7]];
const got = probe.map(([a, b, n]) => timeTicks(a, b, n).map(([t, s]) => timeText(t, s)));
const tm = D.keys[0].time;
got.push([interp(tm.x, tm.t, 10), interp(tm.t, tm.x, tm.t[0] + 3600 * 10.5)]);
const out = document.createElement("pre"); out.id = "probe";
out.textContent = JSON.stringify(got); document.body.appendChild(out);
</script></body></html>"""


def _chromium() -> str:
    return need_binary("chromium", "chromium-browser", package="chromium")


def test_time_axis_ticks_in_the_browser(tmp_path):
    sink = EvaluationSink(tmp_path / "ev", annotations=[100], plots=False)
    recs = [{"key": None, "offset": i, "ts": 1767225600.0 + 3600 * i, "value": float(i >= 100)}
            for i in range(200)]
    sink.write_inputs(recs)
    sink.write([{**r, "alarm": r["offset"] == 101, "statistic": 0.0} for r in recs])
    sink.close()
    page = (tmp_path / "ev" / "report.html").read_text()
    assert page.count("</body></html>") == 1
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body></html>", PROBE))
    proc = subprocess.run([_chromium(), "--headless", "--disable-gpu", "--no-sandbox",
                           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000",
                           "--dump-dom", f"file://{probe}"],
                          capture_output=True, text=True, timeout=90)
    assert [line for line in proc.stderr.splitlines() if ":CONSOLE" in line] == []
    found = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stdout[-2000:]
    hours, days, years, inverse = json.loads(found.group(1).replace("&quot;", '"'))
    assert hours == ["01-01 00:00", "01-01 01:00", "01-01 02:00", "01-01 03:00",
                     "01-01 04:00", "01-01 05:00", "01-01 06:00"]
    assert days == ["2026-01-01", "2026-01-08", "2026-01-15", "2026-01-22", "2026-01-29",
                    "2026-02-05"]
    assert years == ["1920", "1940", "1960", "1980", "2000"]
    assert inverse == [1767225600 + 3600 * 10, 10.5]
