"""``karcher`` chains replayed on the columnar path and record by record (issue 39), beside the
detector alone, measured in the same run.

Run ``python benchmarks/replay_karcher.py`` (1,000,000 records x 100 keys; ``--records`` and
``--keys`` to change it; ``--md FILE`` writes the table). It

* writes two seeded CSVs: ``key,ts,a,b,c`` (three N(0, 1) channels per record, a uniform key;
  after the middle of the file channel b follows channel a, a change of correlation) and
  ``key,ts,value`` (channel a alone);
* replays ``window_covariance window=20 -> karcher`` and ``standardize -> window_covariance
  window=20 -> karcher`` on the first (the ``value`` the columns a, b, c) and ``embed d=3 ->
  window_covariance window=20 -> karcher`` on the second (``--chains`` picks some), each as
  its own process: on the columnar path (the default) and with ``SHIFTWATCH_RECORD_PATH=1``
  (record by record), every output written, ``--no-plots``; wall time and peak RSS from
  ``/usr/bin/time`` (:func:`replay.run_process`), best of ``--repeats``;
* measures the **detector alone** in this process, the floor a hand loop over the same rows
  would have: per key, the window covariances by NumPy (``sliding_window_view``, the
  operator's formula) and one ``KarcherDetector.update_many`` (the operator's defaults,
  resetting at each alarm; no locating) over them, no file, no outputs.

Ratios: the columnar path's records/s over the record path's, and over the detector alone.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from replay import REPLAY_CMD, run_process  # noqa: E402

SEED = 3939
CHAINS = {
    "window_covariance -> karcher": (
        "vec", ["--source-opt", "value=[a, b, c]", "--operator", "window_covariance",
                "--param", "window=20", "--operator", "karcher"]),
    "standardize -> window_covariance -> karcher": (
        "vec", ["--source-opt", "value=[a, b, c]", "--operator", "standardize", "--operator",
                "window_covariance", "--param", "window=20", "--operator", "karcher"]),
    "embed d=3 -> window_covariance -> karcher": (
        "num", ["--operator", "embed", "--param", "d=3", "--operator", "window_covariance",
                "--param", "window=20", "--operator", "karcher"]),
}
SUMMARY = re.compile(r"(\d+) records in ([\d.]+) s .*?(\d+) outputs, (\d+) alarms")


def write_csvs(work: Path, records: int, keys: int) -> tuple[Path, Path]:
    rng = np.random.default_rng(SEED)
    k = rng.integers(0, keys, records)
    x = rng.normal(size=(records, 3))
    x[records // 2:, 1] = 0.9 * x[records // 2:, 0] + 0.3 * x[records // 2:, 1]
    vec, num = work / "vec.csv", work / "num.csv"
    with open(vec, "w") as fv, open(num, "w") as fn:
        fv.write("key,ts,a,b,c\n")
        fn.write("key,ts,value\n")
        for s in range(0, records, 200_000):
            e = min(records, s + 200_000)
            rows = zip(k[s:e].tolist(), range(s, e), x[s:e].tolist(), strict=True)
            lines = [(f"k{kk},{t}", f"{a!r},{b!r},{c!r}", repr(a)) for kk, t, (a, b, c) in rows]
            fv.write("".join(f"{h},{v}\n" for h, v, _ in lines))
            fn.write("".join(f"{h},{a}\n" for h, _, a in lines))
    return vec, num


def replay(csv_path: Path, args: list[str], work: Path, record: bool, repeats: int) -> dict:
    import os

    best = None
    for _ in range(repeats):
        out = work / "out"
        shutil.rmtree(out, ignore_errors=True)
        argv = [sys.executable, "-c", REPLAY_CMD, "replay", str(csv_path), *args,
                "--source-opt", "key=key", "--source-opt", "ts=ts", "--out", str(out),
                "--no-plots", "--no-progress", "--quiet"]
        os.environ["SHIFTWATCH_RECORD_PATH"] = "1" if record else "0"
        try:
            wall, rss, rc, cpu = run_process(argv, work / "replay.log")
        finally:
            os.environ.pop("SHIFTWATCH_RECORD_PATH", None)
        text = (work / "replay.log").read_text()
        m = SUMMARY.search(text)
        if rc != 0 or m is None:
            raise SystemExit(f"replay failed ({rc}):\n{text}")
        res = {"n": int(m.group(1)), "wall": wall, "rss_mb": rss, "cpu": cpu,
               "outputs": int(m.group(3)), "alarms": int(m.group(4))}
        if best is None or wall < best["wall"]:
            best = res
    return best


def detector_alone(csv_path: Path, embed: bool, standardize: bool = False) -> dict:
    """The window covariances and ``update_many`` per key, from arrays (the file read
    before the clock starts)."""
    from numpy.lib.stride_tricks import sliding_window_view

    from shiftwatch.operators.riemannian.karcher import KarcherDetector

    cols = np.loadtxt(csv_path, delimiter=",", skiprows=1, dtype=str)
    keys = cols[:, 0]
    vals = cols[:, 2:].astype(np.float64)
    warm = np.eye(3) + np.zeros((700, 3, 3))  # (the compiled kernels loaded before the clock)
    KarcherDetector("spd", threshold="calibrated").update_many(warm)
    t0 = time.perf_counter()
    alarms = 0
    for key in np.unique(keys):
        x = vals[keys == key]
        if embed:  # (d=3, tau=1: the value and the two before it)
            x = sliding_window_view(x[:, 0], 3)[:, ::-1]
        if standardize:  # (the burn-in's mean and standard deviation, then frozen)
            b = x[:30]
            x = (x - b.mean(axis=0)) / np.maximum(b.std(axis=0, ddof=1), 1e-9)
        w = sliding_window_view(x, 20, axis=0).transpose(0, 2, 1)  # (n - 19, 20, d)
        c = w - w.mean(axis=1, keepdims=True)
        s = np.einsum("nij,nik->njk", c, c) / 19
        d = s.shape[1]
        tr = np.trace(s, axis1=1, axis2=2)
        s = 0.9 * s + (0.1 * tr / d + 1e-6)[:, None, None] * np.eye(d)
        det = KarcherDetector("spd", threshold="calibrated")  # (resets at alarms)
        _, a, _ = det.update_many(0.5 * (s + s.transpose(0, 2, 1)))
        alarms += int(a.sum())
    return {"n": len(keys), "seconds": time.perf_counter() - t0, "alarms": alarms}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--work", default="/tmp/shiftwatch-bench-replay-karcher")
    ap.add_argument("--md", help="write the table as Markdown to this file")
    ap.add_argument("--json", help="write the raw results as JSON to this file")
    ap.add_argument("--chains", help="only these chains (names as in the table, joined by ';')")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    vec, num = write_csvs(work, a.records, a.keys)
    files = {"vec": vec, "num": num}
    rows = []
    wanted = None if not a.chains else set(a.chains.split(";"))
    for name, (kind, args) in CHAINS.items():
        if wanted is not None and name not in wanted:
            continue
        col = replay(files[kind], args, work, False, a.repeats)
        rec = replay(files[kind], args, work, True, 1)
        alone = detector_alone(files[kind], kind == "num", name.startswith("standardize"))
        print(f"{name}: columnar {col}, record path {rec}, detector alone {alone}", flush=True)
        rows.append({"chain": name, "columnar": col, "record": rec, "alone": alone})
    lines = [f"{a.records:,} records x {a.keys} keys, every output written; records/s by "
             "process wall time (imports and report included; the detector alone: its loop)",
             "", "| chain | columnar | record path | detector alone | columnar / record path "
             "| columnar / detector alone | peak RSS columnar / record path |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        c, p, d = r["columnar"], r["record"], r["alone"]
        rc, rp, rd = c["n"] / c["wall"], p["n"] / p["wall"], d["n"] / d["seconds"]
        lines.append(f"| `{r['chain']}` | {rc:,.0f} | {rp:,.0f} | {rd:,.0f} | {rc / rp:.2f}x "
                     f"| {rc / rd:.2f}x | {c['rss_mb']:,.0f} / {p['rss_mb']:,.0f} MB |")
    text = "\n".join(lines)
    print(text)
    if a.md:
        Path(a.md).write_text(text + "\n")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
