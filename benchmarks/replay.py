"""Replay at the speed of the detectors (issue 39, item 4): ``shiftwatch replay`` of a keyed CSV
against hand loops measured in the same run.

Run ``python benchmarks/replay.py`` (1,000,000 records x 100 keys; ``--big`` adds 10,000,000 x
10,000 keys; ``--profile`` adds a cProfile of ``shiftwatch replay`` on ``--profile-records``
records through ``river:ADWIN``; ``--md FILE`` writes the tables as Markdown). It

* writes a seeded CSV (columns ``key,ts,value``; record ``i`` has ``ts = i`` and a key drawn
  uniformly at random; each key's level shifts 3 times, by 2 to 4 standard deviations, at
  random points, so the detectors alarm sometimes);
* runs every arm as its own process, one at a time, and reads its wall time, and its peak RSS
  and CPU time from ``/usr/bin/time`` (see :func:`run_process`) -- the process times include
  the interpreter's start and the imports for peers and replays alike; the peers also report
  the time of their loop alone, the replays their own ``N records in X s`` line:

  - ``csv``: ``csv.reader`` alone, ``float`` of the value;
  - ``adwin``: ``csv.reader`` -> ``dict[key]`` -> ``river.drift.ADWIN().update``, alarms
    counted; ``adwin+json``: the same, writing one JSON line per record with orjson, the
    fields ``river:ADWIN`` writes (``key, ts, offset, alarm, statistic`` = ADWIN's
    ``estimation``; an alarm's ``change_at``/``change_ts`` are not located: ``None``);
  - ``cs``, ``cs+json``: the same with
    ``shiftwatch.operators.confseq.detector.ConfSeqDetector`` (the ``cs`` operator's defaults)
    per key, ``update`` per value, the fields ``key, ts, offset, alarm, lower, upper``
    (``None`` for an infinite edge, as ``cs`` writes);
  - ``pandas``: ``pandas.read_csv`` of the whole file (if pandas is installed);
  - ``cs update_many``: one ``ConfSeqDetector``, ``update_many`` of 200,000 N(0,1) values;

* runs ``shiftwatch replay FILE --operator X --source-opt key=key --source-opt ts=ts --out DIR
  --no-plots --no-progress --quiet`` with every output and with ``--emit alarms`` for
  ``river:ADWIN``, ``cs`` and ``shape`` (best of ``--repeats`` runs; ``shape`` once).

Ratios (the targets of issue 39): the replay's records/s over the matching hand loop's, by
process wall time (also by process CPU time and by loop / replay's own time); > 1 means the
replay is faster. ``--render FILE`` prints the tables of a ``--json`` file (or of the
``partial*.json`` the run writes in ``--work`` after every measurement).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

SEED = 39
SHIFTS = 3  # level shifts per key
CS_ONE_KEY = 200_000
REPLAY_CMD = ("import sys; from shiftwatch.deploy.cli import main; "
              "sys.exit(main(sys.argv[1:]))")
# the profiled run follows an unprofiled one on a 1,000-record file (argv[2]) in the same
# process, so the imports and the compiled kernels' loading are not in the profile
PROFILE_CMD = ("import cProfile, sys; from shiftwatch.deploy.cli import main; "
               "a = sys.argv[3:]; i = a.index('--out'); "
               "main([a[0], sys.argv[2]] + a[2:i] + ['--out', a[i + 1] + '-warm'] + a[i + 2:]); "
               "p = cProfile.Profile(); p.enable(); rc = main(a); p.disable(); "
               "p.dump_stats(sys.argv[1]); sys.exit(rc)")


# ---- data --------------------------------------------------------------------------------

def write_csv(path: Path, records: int, keys: int, seed: int = SEED,
              chunk: int = 1_000_000) -> None:
    """``key,ts,value``; record i: ts i, a uniform key, N(level, 1) with SHIFTS shifts per key."""
    rng = np.random.default_rng(seed)
    shifts = np.sort(rng.integers(0, records, size=(keys, SHIFTS)), axis=1)
    steps = rng.uniform(2.0, 4.0, size=(keys, SHIFTS)) * rng.choice([-1.0, 1.0], (keys, SHIFTS))
    levels = np.concatenate([np.zeros((keys, 1)), np.cumsum(steps, axis=1)], axis=1)
    names = [f"k{k}" for k in range(keys)]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        f.write("key,ts,value\n")
        for start in range(0, records, chunk):
            t = np.arange(start, min(records, start + chunk))
            k = rng.integers(0, keys, size=t.shape[0])
            seg = (t[:, None] >= shifts[k]).sum(axis=1)
            v = levels[k, seg] + rng.standard_normal(t.shape[0])
            f.write("".join(f"{names[a]},{b},{c:.6g}\n"
                            for a, b, c in zip(k.tolist(), t.tolist(), v.tolist(),
                                                   strict=True)))
    tmp.replace(path)


# ---- peers (each run in a child process: --peer NAME) --------------------------------------

def _rows(path: str):
    f = open(path, newline="")
    r = csv.reader(f)
    next(r)
    return f, r


def peer_csv(path: str, out: str) -> dict:
    f, r = _rows(path)
    n, s = 0, 0.0
    t0 = time.perf_counter()
    for row in r:
        s += float(row[2])
        n += 1
    dt = time.perf_counter() - t0
    f.close()
    return {"n": n, "seconds": dt, "alarms": 0}


def _hand_loop(path: str, out: str | None, make, fields) -> dict:
    """csv -> dict[key] -> detector.update; ``fields(det)`` gives the output's extra fields."""
    import orjson
    dumps = orjson.dumps
    dets: dict = {}
    f, r = _rows(path)
    w = open(out, "wb", buffering=1 << 20) if out else None
    n = alarms = 0
    t0 = time.perf_counter()
    if w is None:
        for row in r:
            d = dets.get(row[0])
            if d is None:
                d = dets[row[0]] = make()
            d.update(float(row[2]))
            if d.drift_detected:
                alarms += 1
            n += 1
    else:
        write = w.write
        for row in r:
            key = row[0]
            d = dets.get(key)
            if d is None:
                d = dets[key] = make()
            d.update(float(row[2]))
            rec = {"key": key, "ts": float(row[1]), "offset": n, "alarm": False}
            if d.drift_detected:
                alarms += 1
                rec["alarm"] = True
                fields(d, rec)
                rec["change_at"] = None
                rec["change_ts"] = None
            else:
                fields(d, rec)
            write(dumps(rec) + b"\n")
            n += 1
        w.close()
    dt = time.perf_counter() - t0
    f.close()
    return {"n": n, "seconds": dt, "alarms": alarms, "keys": len(dets)}


def _adwin_fields(d, rec: dict) -> None:
    rec["statistic"] = float(d.estimation)


def _cs_fields(d, rec: dict) -> None:
    lo, up = d.interval
    rec["lower"] = lo if math.isfinite(lo) else None
    rec["upper"] = up if math.isfinite(up) else None


def peer_adwin(path: str, out: str | None) -> dict:
    from river.drift import ADWIN
    return _hand_loop(path, out, ADWIN, _adwin_fields)


def peer_cs(path: str, out: str | None) -> dict:
    from shiftwatch.operators.confseq.detector import ConfSeqDetector
    ConfSeqDetector().update(0.0)  # bind the compiled kernel before the clock starts
    return _hand_loop(path, out, ConfSeqDetector, _cs_fields)


def peer_pandas(path: str, out: str | None) -> dict:
    import pandas as pd
    t0 = time.perf_counter()
    df = pd.read_csv(path)
    dt = time.perf_counter() - t0
    return {"n": len(df), "seconds": dt, "alarms": 0}


def peer_cs_many(path: str, out: str | None) -> dict:
    from shiftwatch.operators.confseq.detector import ConfSeqDetector
    xs = np.random.default_rng(SEED).standard_normal(CS_ONE_KEY)
    ConfSeqDetector().update_many(xs[:100])
    d = ConfSeqDetector()
    t0 = time.perf_counter()
    a = d.update_many(xs)
    dt = time.perf_counter() - t0
    return {"n": CS_ONE_KEY, "seconds": dt, "alarms": int(a.shape[0])}


PEERS = {
    "csv": (peer_csv, False, "`csv.reader` alone, float of the value"),
    "pandas": (peer_pandas, False, "pandas `read_csv` of the whole file"),
    "adwin": (peer_adwin, False, "hand loop: csv -> `dict[key]` -> River `ADWIN.update`, "
                                 "alarms counted"),
    "adwin+json": (peer_adwin, True, "the same ADWIN hand loop, one JSON line per record "
                                     "(orjson)"),
    "cs": (peer_cs, False, "hand loop: csv -> `dict[key]` -> `ConfSeqDetector.update`, "
                           "alarms counted"),
    "cs+json": (peer_cs, True, "the same cs hand loop, one JSON line per record (orjson)"),
    "cs-many": (peer_cs_many, False, f"`ConfSeqDetector.update_many`, one key, "
                                     f"{CS_ONE_KEY:,} values"),
}


# ---- processes -----------------------------------------------------------------------------

TIME = shutil.which("time", path="/usr/bin:/bin")


def run_process(argv: list[str], log: Path) -> tuple[float, float, int, float]:
    """Run argv; return (wall seconds, peak RSS MB, exit status, CPU seconds: user + system),
    stdout+stderr to log.

    The peak RSS is read by ``/usr/bin/time`` when present: a child forked from this process
    inherits this process's high-water mark (Linux keeps ``maxrss`` across ``exec``), so
    ``os.wait4``'s ``ru_maxrss`` of a direct child is at least this process's size.
    """
    rss_file = log.with_suffix(".rss")
    if TIME:
        argv = [TIME, "-o", str(rss_file), "-f", "%M %U %S"] + argv
    with open(log, "w") as f:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    kb, cpu = ru.ru_maxrss, ru.ru_utime + ru.ru_stime
    if TIME:
        k, u, s = rss_file.read_text().strip().splitlines()[-1].split()
        kb, cpu = int(k), float(u) + float(s)
        rss_file.unlink()
    return wall, kb / 1024.0, p.returncode, cpu


def run_peer(name: str, csv_path: Path, work: Path, repeats: int) -> dict:
    best = None
    for i in range(repeats):
        out = work / f"peer-{name}.jsonl"
        log = work / f"peer-{name}.log"
        argv = [sys.executable, __file__, "--peer", name, "--file", str(csv_path)]
        if PEERS[name][1]:
            argv += ["--peer-out", str(out)]
        wall, rss, rc, cpu = run_process(argv, log)
        text = log.read_text()
        if rc != 0:
            raise SystemExit(f"peer {name} failed:\n{text}")
        res = json.loads(text.strip().splitlines()[-1])
        res.update(wall=wall, rss_mb=rss, runs=i + 1, cpu=cpu)
        out.unlink(missing_ok=True)
        if best is None or wall < best["wall"]:
            best = res | {"runs": i + 1}
        best["runs"] = i + 1
        print(f"  peer {name:12s} run {i + 1}: {res['n']:,} in {wall:.2f} s wall "
              f"(loop {res['seconds']:.2f} s, CPU {cpu:.2f} s), {rss:.0f} MB, "
              f"alarms {res['alarms']}", flush=True)
    return best


SUMMARY = re.compile(r"(\d+) records in ([\d.]+) s .*?(\d+) outputs, (\d+) alarms")


def run_replay(op: str, emit: str, csv_path: Path, work: Path, repeats: int) -> dict:
    best = None
    for i in range(repeats):
        out = work / f"replay-{op.replace(':', '_')}-{emit}"
        shutil.rmtree(out, ignore_errors=True)
        log = work / f"replay-{op.replace(':', '_')}-{emit}.log"
        argv = [sys.executable, "-c", REPLAY_CMD, "replay", str(csv_path), "--operator", op,
                "--source-opt", "key=key", "--source-opt", "ts=ts", "--out", str(out),
                "--no-plots", "--no-progress", "--quiet"]
        if emit == "alarms":
            argv += ["--emit", "alarms"]
        wall, rss, rc, cpu = run_process(argv, log)
        text = log.read_text()
        m = SUMMARY.search(text)
        if rc != 0 or m is None:
            raise SystemExit(f"replay {op} {emit} failed ({rc}):\n{text}")
        size = sum(p.stat().st_size for p in out.iterdir()) / 1e6
        res = {"n": int(m.group(1)), "seconds": float(m.group(2)), "alarms": int(m.group(4)),
               "wall": wall, "rss_mb": rss, "out_mb": size, "cpu": cpu}
        shutil.rmtree(out, ignore_errors=True)
        if best is None or wall < best["wall"]:
            best = res
        best["runs"] = i + 1
        print(f"  replay {op} --emit {emit} run {i + 1}: {res['n']:,} in {wall:.2f} s wall "
              f"(own {res['seconds']:.2f} s, CPU {cpu:.2f} s), {rss:.0f} MB, "
              f"alarms {res['alarms']}, "
              f"{size:.0f} MB written", flush=True)
    return best


def profile_replay(csv_path: Path, work: Path, top: int = 15) -> str:
    import io
    import pstats
    out = work / "profile-out"
    shutil.rmtree(out, ignore_errors=True)
    stats_file = work / "replay.prof"
    warm = work / "replay-warm.csv"
    with open(csv_path) as src, open(warm, "w") as dst:
        dst.writelines(line for _, line in zip(range(1001), src, strict=False))
    argv = [sys.executable, "-c", PROFILE_CMD, str(stats_file), str(warm), "replay", str(csv_path),
            "--operator", "river:ADWIN", "--source-opt", "key=key", "--source-opt", "ts=ts",
            "--out", str(out), "--no-plots", "--no-progress", "--quiet"]
    wall, rss, rc, _ = run_process(argv, work / "profile.log")
    if rc != 0:
        raise SystemExit((work / "profile.log").read_text())
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(str(out) + "-warm", ignore_errors=True)
    text = [f"cProfile process wall {wall:.2f} s (a warm-up replay of 1,000 records, then the "
            f"profiled replay; profiled code runs slower than unprofiled)\n"]
    for key in ("cumulative", "tottime"):
        buf = io.StringIO()
        st = pstats.Stats(str(stats_file), stream=buf)
        st.strip_dirs().sort_stats(key).print_stats(top)
        body = buf.getvalue()
        body = body[body.find("   ncalls"):] if "   ncalls" in body else body
        text.append(f"### top {top} by {key}\n\n```text\n{body.rstrip()}\n```\n")
    return "\n".join(text)


# ---- the benchmark ---------------------------------------------------------------------------

def rate(r: dict, loop: bool = False) -> float:
    return r["n"] / (r["seconds"] if loop else r["wall"])


def cpu_rate(r: dict) -> float | None:
    return r["n"] / r["cpu"] if r.get("cpu") else None


def _f(x: float | None, fmt: str = ",.0f") -> str:
    return "-" if x is None else format(x, fmt)


def arm(records: int, keys: int, work: Path, repeats: int, operators: list[str],
        emits: list[str], peers: list[str], shape_repeats: int,
        partial: Path | None = None) -> dict:
    """One size: the CSV, then every peer, then every replay; after each measurement the
    results so far go to ``partial`` (JSON; ``--render`` makes Markdown of it)."""
    work.mkdir(parents=True, exist_ok=True)
    csv_path = work / f"replay-{records}x{keys}.csv"
    t0 = time.perf_counter()
    if not csv_path.exists():
        write_csv(csv_path, records, keys)
    print(f"{records:,} x {keys:,} keys: {csv_path} ({csv_path.stat().st_size / 1e6:.0f} MB, "
          f"{time.perf_counter() - t0:.1f} s)", flush=True)
    res: dict = {"records": records, "keys": keys, "peers": {}, "replay": {}}
    for name in peers:
        if name == "pandas":
            try:
                import pandas  # noqa: F401
            except ImportError:
                continue
        res["peers"][name] = run_peer(name, csv_path, work, 1 if name == "pandas" else repeats)
        if partial:
            partial.write_text(json.dumps(res, indent=1))
    for op in operators:
        for emit in emits:
            n = shape_repeats if op == "shape" else repeats
            res["replay"][f"{op} --emit {emit}"] = run_replay(op, emit, csv_path, work, n)
            if partial:
                partial.write_text(json.dumps(res, indent=1))
    return res


TARGETS = [  # (replay arm, peer, target ratio, what)
    ("river:ADWIN --emit all", "adwin+json", 1.0, "`river:ADWIN`, every output >= 1.0x the "
                                                  "hand loop writing the same JSON lines"),
    ("cs --emit all", "cs+json", 1.0, "`cs`, every output >= 1.0x the hand loop writing "
                                      "the same JSON lines"),
    ("river:ADWIN --emit alarms", "adwin", 0.5, "`river:ADWIN --emit alarms` >= 0.5x the bare "
                                                "hand loop"),
    ("cs --emit alarms", "cs", 1.0, "`cs --emit alarms` >= 1.0x the bare hand loop"),
]


def paired(records: int, keys: int, work: Path, pairs: int) -> str:
    """The targets measured in pairs: the peer, then the replay, ``pairs`` times over (so a
    drift of the machine's speed within the run falls on both arms of a pair alike); each
    pair's ratio (records/s of the replay over the peer's, process wall time) and their
    median, smallest and largest, as Markdown."""
    csv_path = work / f"replay-{records}x{keys}.csv"
    work.mkdir(parents=True, exist_ok=True)
    if not csv_path.exists():
        write_csv(csv_path, records, keys)
    rows = [f"### Paired runs, {records:,} records x {keys:,} keys ({pairs} pairs: peer, "
            "then replay)", "",
            "| target | ratio per pair (process wall) | median | min - max | met? (median) |",
            "| --- | --- | ---: | ---: | --- |"]
    for op_emit, peer, target, what in TARGETS:
        op, emit = op_emit.split(" --emit ")
        ratios = []
        for _ in range(pairs):
            p = run_peer(peer, csv_path, work, 1)
            r = run_replay(op, emit, csv_path, work, 1)
            ratios.append(p["wall"] / r["wall"])
        med = float(np.median(ratios))
        rows.append(f"| {what} | {', '.join(f'{x:.2f}x' for x in ratios)} | {med:.2f}x | "
                    f"{min(ratios):.2f}x - {max(ratios):.2f}x | "
                    f"{'met' if med >= target else 'missed'} |")
    return "\n".join(rows)


def markdown(res: dict) -> str:
    lines = [f"### {res['records']:,} records x {res['keys']:,} keys\n",
             "| what | runs | records/s (process wall) | records/s (process CPU) | "
             "records/s (loop / replay's own) | wall s | peak RSS MB | alarms |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    rows = [(PEERS[name][2], res["peers"][name]) for name in PEERS if name in res["peers"]]
    rows += [(f"`shiftwatch replay --operator {name}` ({r['out_mb']:,.0f} MB written)", r)
             for name, r in res["replay"].items()]
    for what, r in rows:
        lines.append(f"| {what} | {r['runs']} | {rate(r):,.0f} | {_f(cpu_rate(r))} | "
                     f"{rate(r, True):,.0f} | {r['wall']:.2f} | {r['rss_mb']:,.0f} | "
                     f"{r['alarms']:,} |")
    lines += ["", "| target | replay / peer (process wall) | (process CPU) | "
                  "(loop / replay's own) | met? (wall; CPU) | gap (wall) |",
              "| --- | ---: | ---: | ---: | --- | --- |"]
    for arm_name, peer, target, what in TARGETS:
        if arm_name not in res["replay"] or peer not in res["peers"]:
            continue
        r, p = res["replay"][arm_name], res["peers"][peer]
        ratio, ratio_loop = rate(r) / rate(p), rate(r, True) / rate(p, True)
        ratio_cpu = cpu_rate(r) / cpu_rate(p) if cpu_rate(r) and cpu_rate(p) else None
        met = "met" if ratio >= target else "missed"
        met_cpu = "-" if ratio_cpu is None else ("met" if ratio_cpu >= target else "missed")
        gap = "-" if ratio >= target else f"{target / ratio:.1f}x faster needed"
        cpu_text = "-" if ratio_cpu is None else f"{ratio_cpu:.2f}x"
        lines.append(f"| {what} | {ratio:.2f}x | {cpu_text} | {ratio_loop:.2f}x | "
                     f"{met}; {met_cpu} | {gap} |")
    if res["keys"] >= 10_000 and res["replay"]:
        peak = max(r["rss_mb"] for r in res["replay"].values())
        lines.append(f"| {res['records']:,} x {res['keys']:,} keys within 4 GB peak RSS | "
                     f"{peak:,.0f} MB | | | {'met' if peak <= 4096 else 'missed'} | |")
    return "\n".join(lines) + "\n"


def versions() -> str:
    import river

    import shiftwatch
    v = [f"Python {platform.python_version()}", f"numpy {np.__version__}",
         f"river {river.__version__}", f"shiftwatch {getattr(shiftwatch, '__version__', '?')}"]
    for mod in ("orjson", "pandas", "numba"):
        try:
            v.append(f"{mod} {__import__(mod).__version__}")
        except ImportError:
            pass
    return ", ".join(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--big", action="store_true", help="add 10,000,000 records x 10,000 keys")
    ap.add_argument("--big-operators", default="river:ADWIN,cs,shape")
    ap.add_argument("--big-emit", default="all,alarms")
    ap.add_argument("--big-repeats", type=int, default=1, help="runs per arm at 10M")
    ap.add_argument("--paired", type=int, default=0, metavar="N",
                    help="instead of the tables: each target as N pairs of runs (peer, "
                         "replay), at --records x --keys or with --big at 10M x 10k")
    ap.add_argument("--big-peers", default="csv,pandas,adwin,adwin+json,cs,cs+json")
    ap.add_argument("--operators", default="river:ADWIN,cs,shape")
    ap.add_argument("--repeats", type=int, default=2, help="runs per arm (the best is kept)")
    ap.add_argument("--shape-repeats", type=int, default=1)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--profile-records", type=int, default=200_000)
    ap.add_argument("--work", default="/tmp/shiftwatch-bench-replay")
    ap.add_argument("--only-big", action="store_true",
                    help="skip the --records x --keys arm (with --big)")
    ap.add_argument("--md", help="write the tables (and the profile) as Markdown to this file")
    ap.add_argument("--json", help="write the raw results as JSON to this file")
    ap.add_argument("--render", help="print the Markdown tables of a --json or partial file")
    ap.add_argument("--peer", help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    ap.add_argument("--peer-out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.peer:  # a child: one peer, its result as one JSON line
        print(json.dumps(PEERS[a.peer][0](a.file, a.peer_out)))
        return
    if a.render:
        data = json.loads(Path(a.render).read_text())
        print("\n".join(markdown(r) for r in (data if isinstance(data, list) else [data])))
        return
    work = Path(a.work)
    if a.paired:
        size = (10_000_000, 10_000) if a.big else (a.records, a.keys)
        text = paired(*size, work, a.paired)
        print(text)
        if a.md:
            Path(a.md).write_text(text + "\n")
        return
    partial = work / "partial.json"
    t0 = time.perf_counter()
    started = datetime.now(timezone.utc)
    results = [] if a.only_big else [arm(a.records, a.keys, work, a.repeats,
                                         a.operators.split(","), ["all", "alarms"],
                                         list(PEERS), a.shape_repeats, partial)]
    prof = None
    if a.profile:
        p_csv = work / f"replay-{a.profile_records}x100.csv"
        if not p_csv.exists():
            write_csv(p_csv, a.profile_records, 100)
        prof = profile_replay(p_csv, work)
    if a.big:
        results.append(arm(10_000_000, 10_000, work, a.big_repeats,
                           a.big_operators.split(","), a.big_emit.split(","),
                           a.big_peers.split(","), a.big_repeats, work / "partial-big.json"))
    total = time.perf_counter() - t0
    md = [f"Run {started:%Y-%m-%d %H:%M} UTC, {total / 60:.1f} min; "
          f"`python {' '.join(sys.argv)}`", f"{versions()}; {os.cpu_count()} cores", ""]
    md += [markdown(r) for r in results]
    if prof:
        md += [f"## Profile: `shiftwatch replay --operator river:ADWIN`, "
               f"{a.profile_records:,} records x 100 keys\n", prof]
    text = "\n".join(md)
    print(text)
    if a.md:
        Path(a.md).write_text(text)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
