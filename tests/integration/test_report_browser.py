"""report.html in a real headless browser (Debian's chromium): loads without console errors
and draws the chart. Needs ``chromium``: ``.ci/run`` installs it; without it the tests skip
with the reason, and fail under ``CI`` (see ``system_binaries.need_binary``).
"""

from __future__ import annotations

import subprocess

import numpy as np
from system_binaries import need_binary

from shiftwatch.deploy import cli


def _chromium() -> str:
    return need_binary("chromium", "chromium-browser", package="chromium")


def _load(exe: str, page, shot) -> str:
    proc = subprocess.run(
        [exe, "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr", "--v=0",
         "--window-size=1200,900", f"--screenshot={shot}", "--virtual-time-budget=5000",
         f"file://{page}"], capture_output=True, text=True, timeout=90)
    return proc.stderr


def test_console_errors_are_seen(tmp_path):
    # The check below can fail: a page with a script error is caught.
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    log = _load(_chromium(), bad, tmp_path / "bad.png")
    assert any(":CONSOLE" in line and "undefinedFunction" in line for line in log.splitlines())


def test_report_html_loads_without_errors_and_draws_the_chart(tmp_path, capsys):
    rng = np.random.default_rng(2)
    x = np.r_[rng.normal(0, 1, 800), rng.normal(4, 1, 800)]
    src = tmp_path / "s.csv"
    src.write_text("v\n" + "".join(f"{v:.4f}\n" for v in x))
    out = tmp_path / "out"
    rc = cli.main(["replay", str(src), "--operator", "river:PageHinkley", "--source-opt",
                   "value=v", "--labels", "800", "--out", str(out), "--no-plots",
                   "--no-progress", "--quiet"])
    capsys.readouterr()
    assert rc == 0
    shot = tmp_path / "shot.png"
    log = _load(_chromium(), out / "report.html", shot)
    console = [line for line in log.splitlines() if ":CONSOLE" in line]
    assert console == []
    from matplotlib.image import imread

    img = imread(shot)[:, :, :3]
    h, w = img.shape[:2]
    # The first chart sits below the run table; its line is drawn in blue (#1f77b4).
    blue = (np.abs(img[:, :, 0] - 0x1F / 255) < 0.08) & (np.abs(img[:, :, 1] - 0x77 / 255)
                                                         < 0.08) & (img[:, :, 2] > 0.55)
    assert blue.sum() > 2000, f"{blue.sum()} chart pixels in a {w}x{h} screenshot"
    red = (img[:, :, 0] > 0.75) & (img[:, :, 1] < 0.3) & (img[:, :, 2] < 0.3)
    assert red.sum() > 20  # the alarm mark
