"""Interleaved A/B of the Kafka stage: this tree's deploy code against a git revision's.

``python benchmarks/kafka_ab.py [--before-ref HEAD] [--records 50000] [--rounds 4]
[--operators cs,river:ADWIN]``

The shared development machine's load drifts by a factor of two within minutes, so separate
runs of ``kafka_throughput.py`` cannot resolve a 10-20% change. This script starts tansu once,
produces the input once, loads the stage code twice in one process (``deploy/kafka/stage.py``,
``kafka_checkpoint.py``, ``kafka_changelog.py`` as in ``--before-ref``, read with
``git show``; everything else is this tree's) and then runs, in every round, a raw
kafka-python loop followed by each (code, operator, checkpoints) pass in turn. It prints the
median over rounds of each pass's records/s divided by the records/s of the raw-loop pass of
its round, wall clock and per CPU second (see ``kafka_throughput.py``).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kafka_throughput as kt

ROOT = Path(__file__).resolve().parents[1]
MODULES = ("kafka_changelog", "kafka_checkpoint", "kafka_stage")


def load_revision(ref: str) -> type:
    """StageRunner as of git revision ``ref`` (its three Kafka modules; the rest as here)."""
    saved = {m: sys.modules[f"shiftwatch.deploy.{m}"] for m in MODULES}
    try:
        for m in MODULES:
            name = f"shiftwatch.deploy.{m}"
            src = subprocess.run(["git", "show", f"{ref}:deploy/{m}.py"], cwd=ROOT, check=True,
                                 capture_output=True).stdout
            spec = importlib.util.spec_from_loader(name, loader=None)
            mod = importlib.util.module_from_spec(spec)
            mod.__file__ = f"{ref}:deploy/{m}.py"
            sys.modules[name] = mod
            exec(compile(src, mod.__file__, "exec"), mod.__dict__)
        return sys.modules["shiftwatch.deploy.kafka.stage"].StageRunner
    finally:
        sys.modules.update({f"shiftwatch.deploy.{m}": mod for m, mod in saved.items()})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before-ref", default="HEAD")
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--operators", default="cs,river:ADWIN")
    args = ap.parse_args()
    from shiftwatch.deploy.kafka.stage import StageRunner

    codes = {"before": load_revision(args.before_ref), "after": StageRunner}
    passes = [(code, op, every) for op in args.operators.split(",")
              for every in (10**9, 1000) for code in codes]
    proc, bootstrap = kt.start_tansu()
    ratios: dict[tuple, list[tuple[float, float]]] = {p: [] for p in passes}
    raws = []
    try:
        topic = f"ab-{uuid.uuid4().hex[:6]}"
        kt.produce(bootstrap, topic, args.records, args.keys)
        for r in range(args.rounds):
            raw, raw_cpu = kt.raw_loop(bootstrap, topic, args.records)
            raws.append(raw)
            for p in passes[::1 if r % 2 == 0 else -1]:  # alternate the order
                code, op, every = p
                kt.StageRunner = codes[code]
                rate, cpu_rate, _ = kt.stage_run(bootstrap, topic, args.records, op, {},
                                                 every, "at-least-once")
                ratios[p].append((rate / raw, cpu_rate / raw_cpu))
            print(f"round {r + 1}: raw {raw:,.0f}/s", file=sys.stderr)
    finally:
        proc.kill()
        proc.wait()
    print(f"A/B, {args.records:,} records, {args.keys} keys, {args.rounds} rounds; before = "
          f"deploy/kafka_*.py at {args.before_ref}; raw loop {min(raws):,.0f}-{max(raws):,.0f}"
          "/s\n")
    print("| operator | checkpoints | code | vs raw (median) | vs raw, CPU (median) | "
          "vs raw, each round |")
    print("| --- | --- | --- | ---: | ---: | --- |")
    for p in passes:
        code, op, every = p
        wall = [w for w, _ in ratios[p]]
        cpu = [c for _, c in ratios[p]]
        label = "none" if every > 10**6 else f"every {every:,}"
        print(f"| `{op}` | {label} | {code} | {statistics.median(wall):.2f} | "
              f"{statistics.median(cpu):.2f} | {', '.join(f'{w:.2f}' for w in wall)} |")


if __name__ == "__main__":
    main()
