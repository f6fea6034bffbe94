"""Keyed operators with many keys: throughput and memory per key against a plain River loop.

Run ``python benchmarks/keyed.py`` (``--quick`` for a smoke run). For 10 and 100,000 keys it
measures

* records/s through ``Keyed.process_batch`` in micro-batches of 1000 records spread uniformly
  at random over the keys (seeded), after every key has been created;
* memory per key: the tracemalloc delta of creating every key (one record each) / keys;

for (a) ``river:PageHinkley`` through the River adapter, (b) a minimal operator defined
here (an EWMA z-score detector), (c) ``cs`` with its defaults (a fleet: every key's state in
arrays, one compiled call per micro-batch), with ``locate=False``, and as one operator object
per key (``Keyed`` over a factory: the path before the fleet), (d) ``karcher`` on SPD(3)
records (fewer records: ``--karcher-records``), against the peers
measured in the same run: a plain ``dict[key] -> river.drift.PageHinkley`` loop and a plain
``dict[key] -> river.drift.ADWIN`` loop calling ``update`` directly (issue 13 compares ``cs``
with the ADWIN loop). The table goes to stdout; paste it into benchmarks/RESULTS.md.

``--warm-values N`` feeds every key N values before the timed passes (cs burns in on its
first 30: ``--warm-values 40`` measures keys past their burn-in).

``--steady`` adds the memory per key in a steady state: ``--steady-keys`` keys fed
``--steady-records`` values each (N(0,1), no change), for the ``cs`` fleet (tracemalloc
delta, and the fleet's own arrays) beside the ``dict -> river ADWIN`` peer.
``--only-cs`` skips the PageHinkley, EWMA and karcher rows.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import sys
import time
import tracemalloc
from datetime import date

import numpy as np
import river
from river import drift

from shiftwatch.operators import BadInput, Keyed, Operator, as_scalar, create

BATCH = 1000
REPEATS = 3  # throughput is the best of REPEATS passes over the stream (the machine is shared)


class EWMAZScore(Operator):
    """A minimal detector: alarm when ``|x - ewma| > threshold * ewm std``."""

    def __init__(self, alpha: float = 0.05, threshold: float = 4.0):
        self.alpha = alpha
        self.threshold = threshold
        self._reset()

    def _reset(self) -> None:
        self._mean = 0.0
        self._var = 1.0
        self._n = 0

    def process(self, record):
        try:
            x = record["value"]
        except (KeyError, TypeError):
            raise BadInput("record has no field 'value'") from None
        if type(x) is not float or x - x != 0.0:
            x = as_scalar(x)
        z = (x - self._mean) / math.sqrt(self._var)
        d = x - self._mean
        self._mean += self.alpha * d
        self._var = (1 - self.alpha) * (self._var + self.alpha * d * d)
        self._n += 1
        return [self._output(record, alarm=self._n > 10 and abs(z) > self.threshold,
                             statistic=z)]


def make_records(n_keys: int, n_records: int, seed: int = 0, warm_values: int = 1):
    rng = np.random.default_rng(seed)
    names = [f"sensor-{k}" for k in range(n_keys)]
    warm = [{"key": names[k], "ts": float(w - warm_values), "value": float(v)}
            for w in range(warm_values)
            for k, v in zip(rng.permutation(n_keys), rng.normal(size=n_keys), strict=True)]
    keys = rng.integers(0, n_keys, n_records)
    values = rng.normal(size=n_records)
    records = [{"key": names[k], "ts": float(i + 1), "value": float(v)}
               for i, (k, v) in enumerate(zip(keys, values, strict=True))]
    return warm, records


def spd_records(records, warm, seed: int = 0):
    """The same keys and ts with SPD(3) matrices as values (a pool of Wishart samples)."""
    rng = np.random.default_rng(seed + 1)
    g = rng.normal(size=(997, 3, 6))
    pool = (g @ g.transpose(0, 2, 1) / 6.0).tolist()

    def swap(recs, k0):
        return [{**r, "value": pool[(k0 + i) % len(pool)]} for i, r in enumerate(recs)]

    return swap(warm, 0), swap(records, 7)


def count_keys(warm) -> int:
    return len({r["key"] for r in warm})


def measure_keyed(make, warm, records):
    """(records/s, bytes per key) for a Keyed operator built by ``make``."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    keyed = make()
    for i in range(0, len(warm), BATCH):
        keyed.process_batch(warm[i:i + BATCH])
    gc.collect()
    per_key = (tracemalloc.get_traced_memory()[0] - before) / count_keys(warm)
    tracemalloc.stop()
    best = math.inf
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        n_out = 0
        for i in range(0, len(records), BATCH):
            n_out += len(keyed.process_batch(records[i:i + BATCH]))
        best = min(best, time.perf_counter() - t0)
        if n_out != len(records):
            raise RuntimeError("lost outputs")
    return len(records) / best, per_key


def measure_peer(warm, records, outputs=False, detector=drift.PageHinkley):
    """A plain dict of River detectors (PageHinkley by default), updated directly.

    With ``outputs`` the loop also builds an output record per input (key, ts, alarm), the
    part of an operator's work the bare peer skips.
    """

    def run(detectors, batch, alarms):
        for r in batch:
            det = detectors.get(r["key"])
            if det is None:
                det = detectors[r["key"]] = detector()
            det.update(r["value"])
            if outputs:
                alarms.append({"key": r["key"], "ts": r["ts"], "alarm": det.drift_detected})
            else:
                alarms.append(det.drift_detected)

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    detectors: dict = {}
    for i in range(0, len(warm), BATCH):
        run(detectors, warm[i:i + BATCH], [])
    gc.collect()
    per_key = (tracemalloc.get_traced_memory()[0] - before) / count_keys(warm)
    tracemalloc.stop()
    best = math.inf
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for i in range(0, len(records), BATCH):
            run(detectors, records[i:i + BATCH], [])
        best = min(best, time.perf_counter() - t0)
    return len(records) / best, per_key


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--karcher-records", type=int, default=20_000)
    parser.add_argument("--keys", type=int, nargs="+", default=[10, 100_000])
    parser.add_argument("--only-cs", action="store_true", help="peers and cs rows only")
    parser.add_argument("--steady", action="store_true", help="steady-state memory per key")
    parser.add_argument("--steady-keys", type=int, default=2000)
    parser.add_argument("--steady-records", type=int, default=1000)
    parser.add_argument("--warm-values", type=int, default=1,
                        help="values per key before the timed passes (cs burns in 30)")
    args = parser.parse_args(argv)
    n_records = 20_000 if args.quick else args.records
    n_karcher = 2_000 if args.quick else args.karcher_records
    print(f"date {date.today()}, {os.cpu_count()} cores, {platform.machine()}, "
          f"Python {platform.python_version()}, numpy {np.__version__}, river {river.__version__}")
    print(f"{n_records} records per measurement ({n_karcher} for karcher; best of {REPEATS} "
          f"passes), micro-batches of {BATCH}; {args.warm_values} value(s) per key before "
          f"(bytes/key: after them)")
    # Load the compiled kernels first, so no row's bytes/key holds the JIT's own memory.
    Keyed(create("cs")).process_batch([{"key": "w", "value": float(i % 3)} for i in range(40)])
    rows = []
    for n_keys in args.keys:
        warm, records = make_records(n_keys, n_records, warm_values=args.warm_values)
        peer_rate, peer_mem = measure_peer(warm, records)
        adwin_rate, adwin_mem = measure_peer(warm, records, detector=drift.ADWIN)
        cases = {
            "river:PageHinkley (adapter)": lambda: Keyed(create("river:PageHinkley")),
            "EWMA z-score (minimal Operator)": lambda: Keyed(EWMAZScore()),
            "cs (defaults: fleet)": lambda: Keyed(create("cs")),
            "cs, locate=False (fleet)": lambda: Keyed(create("cs", locate=False)),
            "cs, one object per key (before the fleet)": lambda: Keyed(lambda: create("cs")),
        }
        if args.only_cs:
            cases = {k: v for k, v in cases.items() if k.startswith("cs")}
        if args.warm_values > 1:  # (its warm-up alone would take minutes at 100,000 keys)
            cases.pop("cs, one object per key (before the fleet)")
        rows.append((n_keys, "peer: dict -> river PageHinkley.update", peer_rate, peer_mem,
                     1.0, peer_rate / adwin_rate))
        rows.append((n_keys, "peer: dict -> river ADWIN.update", adwin_rate, adwin_mem,
                     adwin_rate / peer_rate, 1.0))
        rate, mem = measure_peer(warm, records, outputs=True)
        rows.append((n_keys, "PageHinkley peer + an output dict per record", rate, mem,
                     rate / peer_rate, rate / adwin_rate))
        for label, make in cases.items():
            rate, mem = measure_keyed(make, warm, records)
            rows.append((n_keys, label, rate, mem, rate / peer_rate, rate / adwin_rate))
        if args.only_cs:
            continue
        kwarm, krecords = spd_records(records[:n_karcher], warm)
        rate, mem = measure_keyed(lambda: Keyed(create("karcher")), kwarm, krecords)
        rows.append((n_keys, "karcher (defaults, SPD(3))", rate, mem, rate / peer_rate,
                     rate / adwin_rate))
    print()
    print("| keys | operator | records/s | bytes/key | vs PageHinkley peer | vs ADWIN peer |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for n_keys, label, rate, mem, ratio, ratio_adwin in rows:
        print(f"| {n_keys:,} | {label} | {rate:,.0f} | {mem:,.0f} | {ratio:.2f} | "
              f"{ratio_adwin:.2f} |")
    sys.stdout.flush()
    if args.steady:
        steady(args.steady_keys, args.steady_records)


def steady(n_keys: int, per_key: int) -> None:
    """Bytes per key after ``per_key`` values per key: the cs fleet vs dict -> river ADWIN."""
    rng = np.random.default_rng(1)
    names = [f"sensor-{k}" for k in range(n_keys)]
    rows = []
    for label in ("dict -> river ADWIN", "cs fleet (defaults)"):
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        if label.startswith("cs"):
            keyed = Keyed(create("cs"))
        else:
            dets: dict = {}
        for _ in range(per_key):
            batch = [{"key": k, "value": float(v)}
                     for k, v in zip(names, rng.normal(size=n_keys), strict=True)]
            if label.startswith("cs"):
                keyed.process_batch(batch)
            else:
                for r in batch:
                    d = dets.get(r["key"])
                    if d is None:
                        d = dets[r["key"]] = drift.ADWIN()
                    d.update(r["value"])
            del batch
        gc.collect()
        total = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        arrays = keyed._store.nbytes / n_keys if label.startswith("cs") else float("nan")
        hull = (float(keyed._store._size[:n_keys].mean()) if label.startswith("cs")
                else float("nan"))
        rows.append((label, total / n_keys, arrays, hull))
    print()
    print(f"Steady state: {n_keys:,} keys after {per_key:,} N(0,1) values each")
    print()
    print("| operator | bytes/key (tracemalloc) | of which fleet arrays | hull points/side |")
    print("| --- | ---: | ---: | ---: |")
    for label, total, arrays, hull in rows:
        a = "" if arrays != arrays else f"{arrays:,.0f}"
        h = "" if hull != hull else f"{hull:.1f}"
        print(f"| {label} | {total:,.0f} | {a} | {h} |")


if __name__ == "__main__":
    main()
