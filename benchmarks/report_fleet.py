"""What the evaluation report costs at fleet scale: a replay of N records over N keys
through ``cs`` (one record per key, the worst case for per-key overhead), with and without
the report.

Runs, each in a fresh process under ``/usr/bin/time -v`` (wall time and peak RSS):

* ``operators only``: ``shiftwatch replay`` with the evaluating sink replaced by one that
  keeps nothing (source, ``cs``, ``outputs.jsonl`` and the dead letters: the operators' own
  work);
* ``--no-plots``: the replay as a user runs it, report.json, keys.jsonl and report.html;
* ``with plots``: the same plus series.png / statistic.png;
* ``--labels 500`` (``--labelled``): every key labelled (each label past its key's end).

Usage: ``python benchmarks/report_fleet.py [--keys 1000000] [--dir /tmp/report-fleet]
[--labelled]``; about a minute for a million keys. Prints one Markdown table row per run.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
from pathlib import Path

#: The evaluation-free replay: the CLI with EvaluationSink replaced by a sink that keeps
#: nothing.
NO_EVALUATION = """
import sys
import shiftwatch.sinks as sinks
from shiftwatch.deploy import cli

class NoEvaluation:
    wants_inputs = False
    def __init__(self, *a, **k):
        self.report = None; self.written = []; self.failed = {}
    def open(self): pass
    def write(self, records): pass
    def flush(self): pass
    def close(self): pass
    def summary(self): return {}

sinks.EvaluationSink = NoEvaluation
sys.exit(cli.main(sys.argv[1:]))
"""


def fleet_csv(path: Path, n: int) -> Path:
    if path.exists():
        return path
    rng = random.Random(1)
    with open(path, "w") as f:
        f.write("key,value\n")
        for i in range(n):
            f.write(f"k{i:07d},{rng.gauss(0, 1):.4f}\n")
    return path


def timed(argv: list[str], log: Path) -> dict:
    with open(log, "w") as out:
        subprocess.run(["/usr/bin/time", "-v", *argv], stdout=out, stderr=subprocess.STDOUT,
                       check=True)
    text = log.read_text()
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text).group(1)
    parts = [float(p) for p in wall.split(":")]
    seconds = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    user = float(re.search(r"User time \(seconds\): (\S+)", text).group(1))
    records = re.search(r"records in ([\d.]+) s", text)
    return {"wall": seconds, "rss_gb": rss / 1024 / 1024, "user": user,
            "through_last_record": float(records.group(1)) if records else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--dir", default="/tmp/report-fleet")
    p.add_argument("--labelled", action="store_true", help="also run with --labels 500")
    args = p.parse_args()
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    src = fleet_csv(work / f"fleet{args.keys}.csv", args.keys)
    script = work / "no_evaluation.py"
    script.write_text(NO_EVALUATION)
    common = [str(src), "--source-opt", "key=key", "--source-opt", "value=value",
              "--operator", "cs", "--no-progress", "--quiet"]
    runs = [("operators only", [sys.executable, str(script), "replay", *common]),
            ("--no-plots", [sys.executable, "-m", "shiftwatch.deploy.cli", "replay", *common,
                            "--no-plots"]),
            ("with plots", [sys.executable, "-m", "shiftwatch.deploy.cli", "replay", *common])]
    if args.labelled:
        runs.append(("--no-plots --labels 500", [sys.executable, "-m",
                                                 "shiftwatch.deploy.cli", "replay", *common,
                                                 "--no-plots", "--labels", "500"]))
    print("| run | wall s | through the last record s | user s | peak RSS GB | report.json | "
          "keys.jsonl | report.html |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for i, (name, argv) in enumerate(runs):
        out = work / f"run{i}"
        r = timed([*argv, "--out", str(out)], work / f"run{i}.log")

        def size(f: str, out: Path = out) -> str:
            path = out / f
            return f"{os.path.getsize(path) / 1e6:,.2f} MB" if path.exists() else "-"

        print(f"| {name} | {r['wall']:.1f} | {r['through_last_record'] or 0:.1f} | "
              f"{r['user']:.1f} | {r['rss_gb']:.2f} | {size('report.json')} | "
              f"{size('keys.jsonl')} | {size('report.html')} |", flush=True)


if __name__ == "__main__":
    main()
