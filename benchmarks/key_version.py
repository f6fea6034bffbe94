"""What a `river:ADWIN` key version costs in-process (issue 25): the changelog's work per
key at a checkpoint, without Kafka.

``python benchmarks/key_version.py``: 250 ADWIN keys fed 150 values each; then 20 passes of
4 new values per key followed by each key's ``state_patch`` against its previous version and
its bytes (``state_bytes``), as ``Checkpointer._key_version`` does. Prints microseconds per
key version (best and median pass) and bytes per version. ``--profile`` adds a cProfile of
the passes. Run the same script against another checkout (``pip install -e``) for a before.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np

from shiftwatch.deploy.kafka.checkpoint import state_bytes
from shiftwatch.operators import create


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=250)
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    ops = [create("river:ADWIN") for _ in range(args.keys)]
    for op in ops:
        op.process_batch([{"value": float(v)} for v in rng.normal(size=150)])
    tokens = [op.state_with_token()[1] for op in ops]

    def one_pass() -> tuple[float, float]:
        for op in ops:
            op.process_batch([{"value": float(v)} for v in rng.normal(size=4)])
        t = time.perf_counter()
        n = 0
        for i, op in enumerate(ops):
            patch, tokens[i] = op.state_patch(tokens[i])
            n += len(state_bytes(patch))
        return (time.perf_counter() - t) / len(ops) * 1e6, n / len(ops)

    res = [one_pass() for _ in range(args.passes)]
    print(f"us per key version: best {min(r[0] for r in res):.1f}, median "
          f"{float(np.median([r[0] for r in res])):.1f}; bytes per version "
          f"{float(np.median([r[1] for r in res])):.0f}")
    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(lambda: [one_pass() for _ in range(args.passes)])
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
