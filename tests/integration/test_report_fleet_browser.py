"""A 10,000-key report.html in a real headless browser (Debian's chromium, issue 24 point 3):
the page is a few MB, opens on the table of keys with the alarmed ones first within a second
or two, without console errors; the run table, the sort, the search, and a mark's tooltip
(position and time). Needs ``chromium``: ``.ci/run`` installs it; without it the tests skip
with the reason, and fail under ``CI`` (see ``system_binaries.need_binary``).
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import numpy as np
import pytest
from system_binaries import need_binary

from shiftwatch.sinks.evaluation import EvaluationSink

N_KEYS = 10_000
N_RECORDS = 60
#: 25 keys spread over the fleet (not the first ones) alarm at their 40th record.
ALARMED = [f"k{k:05d}" for k in range(137, N_KEYS, 400)]
T0 = 1767225600  # 2026-01-01T00:00:00Z, one record a minute per key

PROBE = """<script>
// Timed while the page loads (timers below run in the browser's virtual time).
document.querySelector("#keys").offsetHeight;  // the table laid out
const loaded = performance.now();
charts.forEach(c => c.draw());  // the first key's charts, opened on load
const drawn = performance.now();
const rows = () => [...document.querySelectorAll("#keys tbody tr.row")];
const out = {loaded: loaded, drawn: drawn, n_rows: rows().length,
  first: rows().slice(0, 30).map(r => r.cells[0].textContent),
  first_alarm_cell: rows()[0].cells[3].textContent,
  heads: [...document.querySelectorAll("#keys thead th")].map(th => th.textContent),
  run_heads: [...document.querySelectorAll("#run th")].map(th => th.textContent)};
setTimeout(() => {
  out.notes = [...document.querySelectorAll("tr.detail .note")].map(n => n.textContent);
  const cv = document.querySelector("tr.detail canvas"), r = cv.getBoundingClientRect();
  const k = D.keys[0], x = 64 + k.alarms[0] / (k.n - 1) * (cv.clientWidth - 74);
  cv.dispatchEvent(new MouseEvent("mousemove", {clientX: r.left + x, clientY: r.top + 50,
    bubbles: true}));
  out.tip = document.querySelector("tr.detail .tip").textContent;
  document.querySelectorAll("#keys thead th")[0].click();  // sort by key, ascending
  out.sorted = rows().slice(0, 3).map(r => r.cells[0].textContent);
  const box = document.getElementById("search"); box.value = "k0999";
  box.dispatchEvent(new Event("input"));
  out.searched = rows().length; out.count = document.getElementById("count").textContent;
  box.value = ""; box.dispatchEvent(new Event("input"));
  document.getElementById("moreall").click();
  out.all_rows = rows().length;
  const pre = document.createElement("pre"); pre.id = "probe";
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
}, 50);
</script></body></html>"""


def _chromium() -> str:
    return need_binary("chromium", "chromium-browser", package="chromium")


@pytest.fixture(scope="module")
def fleet_page(tmp_path_factory):
    out = tmp_path_factory.mktemp("fleet") / "ev"
    sink = EvaluationSink(out, name="fleet", plots=False)
    sink.open()
    rng = np.random.default_rng(0)
    alarmed = set(ALARMED)
    keys = [f"k{k:05d}" for k in range(N_KEYS)]
    for i in range(N_RECORDS):
        values = rng.normal(size=N_KEYS)
        recs = [{"key": key, "offset": i * N_KEYS + j, "ts": T0 + 60.0 * i,
                 "value": float(values[j] + (5 if key in alarmed and i >= 38 else 0))}
                for j, key in enumerate(keys)]
        sink.write_inputs(recs)
        sink.write([{**r, "alarm": i == 40 and r["key"] in alarmed,
                     "statistic": float(abs(r["value"]))} for r in recs])
    sink.close()
    return out / "report.html"


def _open(page, tmp_path) -> tuple[dict, list[str], float]:
    probe = tmp_path / "probe.html"
    text = page.read_text()
    assert text.count("</body></html>") == 1
    probe.write_text(text.replace("</body></html>", PROBE))
    t0 = time.perf_counter()
    proc = subprocess.run([_chromium(), "--headless", "--disable-gpu", "--no-sandbox",
                           "--enable-logging=stderr", "--v=0", "--window-size=1400,1000",
                           "--virtual-time-budget=10000", "--dump-dom", f"file://{probe}"],
                          capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - t0
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    found = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, (proc.stdout[-2000:], console)
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&")), console, wall


def test_a_10000_key_report_opens_on_the_alarmed_keys_within_seconds(fleet_page, tmp_path):
    size = fleet_page.stat().st_size
    assert size < 5_000_000, f"{size:,} bytes"  # a few MB for 10,000 keys
    # The bound is on the page, not on the machine's load: the suite runs on 6 workers over
    # 2 cores, so a single opening can wait for the CPU. Like ``timeit``, the best of up to
    # three openings is timed; a page that is slow every time still fails.
    tries = []
    for _ in range(3):
        got, console, wall = _open(fleet_page, tmp_path)
        assert console == []
        tries.append((got["loaded"], got["drawn"], wall))
        print(f"\n10,000-key report.html: {size:,} bytes; table laid out {got['loaded']:.0f} "
              f"ms, first key's charts drawn {got['drawn']:.0f} ms after navigation; chromium "
              f"run {wall:.1f} s")
        if got["loaded"] < 2000 and got["drawn"] < 2500:
            break
    # every key is in the table: a page of rows at first, the rest as one scrolls
    assert got["n_rows"] == 200 and got["all_rows"] == N_KEYS
    assert got["first"][:len(ALARMED)] == ALARMED  # every alarmed key first
    assert got["first"][len(ALARMED)] == "k00000"
    assert got["loaded"] < 2000 and got["drawn"] < 2500, tries


def test_positions_come_with_their_time_in_the_table_notes_and_tooltips(fleet_page, tmp_path):
    got, console, _ = _open(fleet_page, tmp_path)
    assert console == []
    assert got["first_alarm_cell"] == "40 \u00b7 2026-01-01 00:40"
    assert "alarms: position 40, 2026-01-01T00:40:00Z" in got["notes"]
    assert got["tip"] == "alarm at position 40, 2026-01-01T00:40:00Z"


def test_the_run_table_sort_and_search(fleet_page, tmp_path):
    got, console, _ = _open(fleet_page, tmp_path)
    assert console == []
    heads = got["run_heads"]
    assert "" not in heads and heads.count("keys") == 1  # no empty header, keys once
    assert all(h.strip() for h in got["heads"])
    assert got["sorted"] == ["k00000", "k00001", "k00002"]
    assert got["searched"] == 10 and got["count"] == "10 of 10000 keys listed"
