"""Streams for the CILA examples in the README, and the detector -> CILA pipeline.

``python benchmarks/cila_replay.py write runs/split-digits.jsonl`` writes Split-Digits as a
class-incremental JSON Lines log (``value``, ``y``, ``task``; 5 tasks x 2 classes, the
training part of each class, shuffled within a task) for ``shiftwatch replay``.

``python benchmarks/cila_replay.py detector`` runs the pipeline with unlabelled task
boundaries: Permuted-Digits (domain-incremental, no ``task`` field) through ``cila`` with an
inner ADWIN detector on the feature vector, and prints where the boundaries were found
against the true task starts, and the final accuracy against the same operator told the
task ids.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from cila import (
    COMMON,
    _accuracy,
    _records,
    load_digits_data,
    permuted_tasks,
    split_tasks,
)

from shiftwatch.deploy import Pipeline
from shiftwatch.operators import create


def write(path: str, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("w") as f:
        for t, task in enumerate(split_tasks(load_digits_data(seed))):
            for r in _records(*task["train"], t, rng):
                r["value"] = [round(v, 4) for v in r["value"]]
                f.write(json.dumps({"value": r["value"], "y": r["y"], "task": r["task"]}) + "\n")
                n += 1
    print(f"wrote {n} records to {out}")


class _Collect:
    """A minimal sink: keeps the outputs in memory."""

    wants_inputs = False

    def __init__(self) -> None:
        self.outputs: list = []

    def open(self) -> None:
        pass

    def write(self, records) -> None:
        self.outputs.extend(records)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def summary(self) -> dict:
        return {}


def detector(seed: int = 0) -> None:
    torch.set_num_threads(1)
    tasks = permuted_tasks(load_digits_data(seed), seed)
    rng = np.random.default_rng(seed)
    stream, starts = [], []
    for t, task in enumerate(tasks):
        starts.append(len(stream))
        stream += [{k: v for k, v in r.items() if k != "task"}
                   for r in _records(*task["train"], t, rng)]
    runs = {
        "detector (ADWIN delta 1e-9, min_task_length 200)": (
            create("cila", boundary="alarm", detector="river:ADWIN",
                   detector_params={"delta": 1e-9}, min_task_length=200, buffer_size=50,
                   steps=6, seed=seed, **COMMON), stream),
        "task ids given": (
            create("cila", buffer_size=50, steps=6, seed=seed, **COMMON),
            [{**r, "task": next(t for t in range(len(starts) - 1, -1, -1) if i >= starts[t])}
             for i, r in enumerate(stream)]),
    }
    for name, (op, records) in runs.items():
        sink = _Collect()
        summary = Pipeline(records, [op], [sink], keyed=False, progress=False).run()
        op.end_task()
        found = [i for i, o in enumerate(sink.outputs) if o.get("boundary")]
        acc = np.mean([_accuracy(op, *t["test"]) for t in tasks])
        print(f"{name}: boundaries at {found} (true task starts {starts[1:]}); "
              f"accuracy on all tasks after the stream {100 * acc:.1f}%; "
              f"lambda_t {[round(v, 2) for v in op.lambdas]}; {summary.line()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("path")
    sub.add_parser("detector")
    args = ap.parse_args()
    if args.cmd == "write":
        write(args.path)
    else:
        detector()


if __name__ == "__main__":
    main()
