"""CILA with default parameters on short class-incremental streams, against experience replay.

Streams (one pass, test-then-train, records carry ``task``): Split-Digits (the training part of
scikit-learn's digits, 5 tasks x 2 classes, the stream ``benchmarks/cila_replay.py write``
writes; ~1,260 records) and Split-mnist1d (the 4,000 training series, 5 tasks x 2 classes;
and its first 200 records per task, 1,000 records). Each task's records arrive once,
shuffled. Arms: ``cila`` with its default parameters, ``er`` (experience replay) with the
same buffer and otherwise the same defaults, ``finetune`` (no buffer) for reference, and
``cila`` with one probe step per training step (the default before ``probe_steps=20``).
Metric: prequential accuracy of ``y_pred`` on the second half of the stream, mean and 95%
t-interval over seeds; the CILA/ER ratio and difference are paired by seed.

Run: ``python benchmarks/cila_short.py --seeds 10`` (a few minutes on one thread); writes
``benchmarks/results/cila_short.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch
from cila import _records, load_digits_data, load_mnist1d_data, mean_ci, split_tasks

from shiftwatch.operators.learners.cila import CILA

RESULTS = Path(__file__).resolve().parent / "results"
ARMS = {"cila (defaults)": {}, "er (same buffer)": {"method": "er"},
        "finetune (no buffer)": {"method": "finetune", "buffer_size": 0},
        "cila, probe_steps=1 (old default)": {"probe_steps": 1}}


def stream(name: str, per_task: int | None, seed: int) -> list[dict]:
    loader = load_digits_data if name == "split-digits" else load_mnist1d_data
    rng = np.random.default_rng(seed)
    records: list[dict] = []
    for t, task in enumerate(split_tasks(loader(seed))):
        records += _records(*task["train"], t, rng)[:per_task]
    return records


def second_half(params: dict, records: list[dict], seed: int) -> float:
    op = CILA(**params, seed=seed)
    outs = op.process_batch(records)
    half = len(records) // 2
    return float(np.mean([o["y_pred"] == r["y"] for o, r in zip(outs[half:], records[half:],
                                                                     strict=True)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--out", default=str(RESULTS / "cila_short.md"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    lines = ["| stream | records | " + " | ".join(ARMS) + " | CILA / ER, paired | "
             "CILA - ER, paired (points) |", "| --- | ---: |" + " ---: |" * (len(ARMS) + 2)]
    for name, per_task in (("split-digits", None), ("split-mnist1d", 200),
                           ("split-mnist1d", None)):
        res: dict[str, list[float]] = {arm: [] for arm in ARMS}
        n = 0
        for seed in range(args.seeds):
            records = stream(name, per_task, seed)
            n = len(records)
            for arm, params in ARMS.items():
                res[arm].append(second_half(params, records, seed))
        cila, er = np.array(res["cila (defaults)"]), np.array(res["er (same buffer)"])
        cells = [f"{m:.3f} ± {h:.3f}" for m, h in (mean_ci(v) for v in res.values())]
        ratio, diff = mean_ci(cila / er), mean_ci(100 * (cila - er))
        lines.append(f"| {name} | {n} | " + " | ".join(cells)
                     + f" | {ratio[0]:.3f} ± {ratio[1]:.3f} | {diff[0]:+.1f} ± {diff[1]:.1f} |")
        print(lines[-1], f"({time.perf_counter() - t0:.0f} s)", flush=True)
    buffer = CILA().buffer_size
    text = "\n".join([
        "### cila on short class-incremental streams", "",
        f"Command: `python benchmarks/cila_short.py --seeds {args.seeds}`", "",
        f"Date: {dt.date.today().isoformat()}. Machine: {os.cpu_count()} cores "
        f"({platform.machine()}, shared with other jobs), Python {platform.python_version()}, "
        f"torch {torch.__version__} (1 intra-op thread), numpy {np.__version__}; "
        f"{time.perf_counter() - t0:.0f} s.", "",
        "One test-then-train pass over 5 tasks of two classes each (records carry `task`, "
        "shuffled within a task), default parameters (micro-batch 32, one step each, buffer "
        f"{buffer}); ER has the same buffer and defaults. Prequential accuracy of `y_pred` on "
        f"the second half of the stream, mean ± 95% CI over seeds 0..{args.seeds - 1}; ratio "
        "and difference paired by seed.", "", *lines, ""])
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
