"""Every output of the ``cs`` kernel at another commit against this tree's, on seeded streams.

``python benchmarks/confseq_exactness.py REV`` loads ``operators/confseq/kernels.py`` as it is
at git revision ``REV`` (e.g. the commit before a change to the kernel), runs the same seeded
streams (20 seeds x 7 configurations x 20,000 values with 4 changes of random size each)
through a ``ConfSeqDetector`` with that kernel and with this tree's, and counts the steps
whose outputs (alarm, lower, upper, located lag and ts) differ in any bit. A change that may
differ only at near-ties (issue 13) reports here how many occurred.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import shiftwatch.operators.confseq.detector as confseq
from shiftwatch.operators.confseq.detector import ConfSeqDetector

CONFIGS = {"subgaussian, sigma=1": dict(cs="subgaussian", sigma=1.0),
           "subgaussian, scale-free": dict(cs="subgaussian"),
           "subgaussian, alpha=1e-6": dict(cs="subgaussian", alpha=1e-6),
           "hoeffding": dict(cs="hoeffding", lower=-6.0, upper=6.0),
           "hoeffding, alpha=0.2": dict(cs="hoeffding", lower=-6.0, upper=6.0, alpha=0.2),
           "subgaussian, pfa": dict(cs="subgaussian", sigma=1.0, pfa=True),
           "empirical-bernstein": dict(cs="empirical-bernstein", lower=-6.0, upper=6.0)}


def load_kernels(rev: str):
    root = Path(__file__).resolve().parent.parent
    for path in ("operators/confseq/kernels.py", "operators/confseq_kernels.py"):  # new, old
        shown = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=root,
                               capture_output=True, text=True)
        if shown.returncode == 0:
            break
    shown.check_returncode()
    src = shown.stdout
    path = Path(tempfile.mkdtemp()) / "confseq_kernels_at_rev.py"
    path.write_text(src.replace("cache=True", "cache=False"))
    spec = importlib.util.spec_from_file_location("confseq_kernels_at_rev", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python benchmarks/confseq_exactness.py REV")
    other = load_kernels(sys.argv[1]).cs_hull_run
    ours = confseq.cs_hull_run
    print("| configuration | steps | steps that differ | alarms |")
    print("| --- | ---: | ---: | ---: |")
    total = [0, 0, 0]
    for name, params in CONFIGS.items():
        steps = diff = alarms = 0
        for seed in range(20):
            rng = np.random.default_rng(1000 + seed)
            x = rng.normal(0.0, 1.0, 20_000)
            for c in rng.integers(0, x.size, 4):
                x[c:] += rng.choice([-1.0, 1.0]) * rng.uniform(0.05, 1.5)
            x = np.ascontiguousarray(np.clip(x, -5.9, 5.9))
            ts = np.arange(x.size, dtype=float)
            try:
                confseq.cs_hull_run = other
                a = ConfSeqDetector(**params)._run(x, ts=ts)
            finally:
                confseq.cs_hull_run = ours
            b = ConfSeqDetector(**params)._run(x, ts=ts)
            same = np.all((a == b) | (np.isnan(a) & np.isnan(b)), axis=0)
            diff += int((~same).sum())
            steps += x.size
            alarms += int(b[0].sum())
        print(f"| {name} | {steps:,} | {diff} | {alarms} |")
        total = [total[0] + steps, total[1] + diff, total[2] + alarms]
    print(f"| all | {total[0]:,} | {total[1]} | {total[2]} |")


if __name__ == "__main__":
    main()
