"""The ``cs`` fleet against a ``dict -> river ADWIN`` loop once every key has a history.

``python benchmarks/keyed_aged.py [KEYS VALUES [ROUNDS]]`` (default 100,000 keys, 200 values,
8 rounds): feeds every key VALUES N(0,1) values (to the fleet with and without ``locate``, and
to the ADWIN dict), then times 300,000 more records over the keys at random, in micro-batches
of 1,000, in ROUNDS rounds that alternate the three (so a shared machine's drift hits all
alike), and prints each one's median records/s and its median per-round ratio to ADWIN.
``benchmarks/keyed.py`` times keys that have had a few values (inside ``cs``'s 30-value
burn-in at 100,000 keys); this times them past it.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from river import drift

from shiftwatch.operators import Keyed, create

N = 300_000
BATCH = 1000


def feed_adwin(detectors: dict, records: list[dict]) -> None:
    for r in records:
        d = detectors.get(r["key"])
        if d is None:
            d = detectors[r["key"]] = drift.ADWIN()
        d.update(r["value"])


def feed_keyed(keyed: Keyed, records: list[dict]) -> int:
    out = 0
    for i in range(0, len(records), BATCH):
        out += len(keyed.process_batch(records[i:i + BATCH]))
    return out


def main() -> None:
    n_keys, values = ((int(a) for a in sys.argv[1:3]) if len(sys.argv) > 2
                      else (100_000, 200))
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    rng = np.random.default_rng(0)
    names = [f"sensor-{k}" for k in range(n_keys)]
    fleets = {"cs fleet": Keyed(create("cs")),
              "cs fleet, locate=False": Keyed(create("cs", locate=False))}
    adwin: dict = {}
    for w in range(values):
        batch = [{"key": names[k], "ts": float(w), "value": float(v)}
                 for k, v in enumerate(rng.normal(size=n_keys))]
        for keyed in fleets.values():
            feed_keyed(keyed, batch)
        feed_adwin(adwin, batch)
    keys, xs = rng.integers(0, n_keys, N), rng.normal(size=N)
    records = [{"key": names[k], "ts": float(values + i), "value": float(v)}
               for i, (k, v) in enumerate(zip(keys, xs, strict=True))]
    rates: dict[str, list[float]] = {"dict -> river ADWIN": [], **{k: [] for k in fleets}}
    for _ in range(rounds):
        t = time.perf_counter()
        feed_adwin(adwin, records)
        rates["dict -> river ADWIN"].append(N / (time.perf_counter() - t))
        for label, keyed in fleets.items():
            t = time.perf_counter()
            if feed_keyed(keyed, records) != N:
                raise RuntimeError("lost outputs")
            rates[label].append(N / (time.perf_counter() - t))
    peer = np.array(rates["dict -> river ADWIN"])
    print(f"{n_keys:,} keys after {values} values each; {rounds} alternating rounds of "
          f"{N:,} records")
    print()
    print("| operator | records/s (median) | range | vs ADWIN (median of rounds) |")
    print("| --- | ---: | ---: | ---: |")
    for label, r in rates.items():
        r = np.array(r)
        print(f"| {label} | {np.median(r):,.0f} | {r.min():,.0f}-{r.max():,.0f} | "
              f"{np.median(r / peer):.2f} |")


if __name__ == "__main__":
    main()
