"""Capacity model inputs and one checked point: what the README "Sizing" section uses.

Run ``python benchmarks/sizing.py`` (starts tansu on a free port; ``--quick`` for a smoke run).
In one run it measures

1. **per operator**, without Kafka: records/s through ``Keyed(op).process_batch`` (100 keys,
   micro-batches of 1,000, after warm-up; one core), memory per key (tracemalloc delta of
   holding the keys after ``--per-key`` records each, divided by the keys) and changelog bytes
   per key (the serialised state a checkpoint writes for a changed key) and the time to
   serialise it;
2. **one stage process** (``StageRunner``, at-least-once, checkpoint every 1,000 records) on a
   1-partition topic: records/s, and the process's peak RSS;
3. **the checked point**: ``--processes`` stage processes (default 2) in one consumer group over
   a ``--partitions``-partition topic (default 4): aggregate records/s, against the model's
   prediction ``processes x (2)`` (the model assumes a core per process).

Workers are separate OS processes (``python benchmarks/sizing.py --worker ...``). They join
the group on an empty topic; once every partition is assigned the parent produces the input,
and each worker reports the wall-clock time of its first and last record. Aggregate rate =
records / (last record anywhere - first record anywhere). Results go to stdout and, as JSON,
to ``--json`` (default benchmarks/results/sizing.json); the table is pasted into
benchmarks/results/kafka.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import resource
import subprocess
import sys
import threading
import time
import tracemalloc
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

OPERATORS = ["cs", "river:ADWIN", "river:PageHinkley", "standardize"]


# ---- 1. operators alone ----------------------------------------------------------------

def operator_profile(name: str, keys: int, per_key: int) -> dict:
    from shiftwatch.deploy.kafka.checkpoint import state_bytes
    from shiftwatch.operators import Keyed, create

    rng = np.random.default_rng(0)
    n = keys * per_key
    x = rng.normal(size=n)
    recs = [{"key": f"k{i % keys}", "ts": float(i), "value": float(x[i]), "offset": i}
            for i in range(n)]
    Keyed(create(name)).process_batch(recs[:1000])  # imports, compilation: not per key
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    kop = Keyed(create(name))
    kop.process_batch(recs[:1000])
    for b in range(1000, n, 1000):
        kop.process_batch(recs[b:b + 1000])
    gc.collect()
    mem = (tracemalloc.get_traced_memory()[0] - base) / keys
    tracemalloc.stop()
    # throughput: a second pass through fresh operators, without tracemalloc
    best = 0.0
    for _ in range(2):
        kop = Keyed(create(name))
        kop.process_batch(recs[:1000])
        t0 = time.perf_counter()
        for b in range(1000, n, 1000):
            kop.process_batch(recs[b:b + 1000])
        best = max(best, (n - 1000) / (time.perf_counter() - t0))
    ops = [kop.existing(f"k{i}") for i in range(keys)]
    t0 = time.perf_counter()
    sizes = [len(state_bytes(op.state_dict())) for op in ops]
    ser = (time.perf_counter() - t0) / keys
    return {"operator": name, "records_per_s": best, "memory_bytes_per_key": mem,
            "changelog_bytes_per_key": float(np.mean(sizes)), "serialise_s_per_key": ser,
            "records_per_key": per_key}


# ---- 2./3. stage processes ---------------------------------------------------------------

def worker(args) -> None:
    """One stage process: run until stopped by ``--stop-file``; print one JSON line."""
    from shiftwatch.deploy.kafka.stage import StageRunner
    from shiftwatch.deploy.pipeline import parse_pipeline

    cfg = parse_pipeline({
        "pipeline": args.pipeline, "kafka": {"bootstrap_servers": args.bootstrap},
        "topics": {"create": False}, "guarantee": "at-least-once",
        "checkpoint": {"every_records": args.every, "every_seconds": 10.0},
        "batch": {"max_records": 1000, "timeout_ms": 100},
        "consumer": {"max_poll_interval_ms": 10000, "session_timeout_ms": 6000,
                     "heartbeat_interval_ms": 1000},
        "metrics": {"interval_seconds": 1e6},
        "stages": [{"name": "s", "input": args.topic, "output": f"{args.topic}.out",
                    "operator": args.operator, "params": {}}]})
    runner = StageRunner(cfg, cfg.stages[0])
    th = threading.Thread(target=runner.run)
    th.start()
    first = last = None
    seen = 0
    announced = False
    keys = 0
    last_write = 0.0
    while th.is_alive():
        got = runner.stats.records_in
        now = time.time()
        if got != seen:
            if first is None:
                first = now
            last, seen = now, got
        if now - last_write > 0.5:
            Path(args.stop_file + f".{os.getpid()}").write_text(str(seen))
            last_write = now
        if not announced and runner.stats.partitions:
            print(json.dumps({"assigned": runner.stats.partitions}), flush=True)
            announced = True
        if Path(args.stop_file).exists() and not runner.stop.is_set():
            keys = sum(len(op) for t in list(runner._tasks.values())
                       for op in t.executor.operators)
            runner.stop.set()
        time.sleep(0.002)
    th.join()
    print(json.dumps({"records": seen, "first": first, "last": last,
                      "checkpoints": runner.stats.checkpoints, "keys": keys,
                      "partitions": runner.stats.partitions,
                      "maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}),
          flush=True)


def run_stage_processes(bootstrap: str, operator: str, processes: int, partitions: int,
                        records: int, keys: int, every: int) -> dict:
    from kafka import KafkaAdminClient, KafkaProducer

    topic = f"size-{uuid.uuid4().hex[:6]}"
    pipeline = f"p{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics({topic: {"num_partitions": partitions, "replication_factor": 1},
                         f"{topic}.out": {"num_partitions": partitions,
                                          "replication_factor": 1},
                         f"{pipeline}.s.changelog": {"num_partitions": partitions,
                                                     "replication_factor": 1,
                                                     "configs": {"cleanup.policy": "compact"}},
                         f"{pipeline}.s.dlq": {"num_partitions": 1, "replication_factor": 1}})
    admin.close()
    stop_file = f"/tmp/{pipeline}.stop"
    procs = [subprocess.Popen(
        [sys.executable, __file__, "--worker", "--bootstrap", bootstrap, "--topic", topic,
         "--pipeline", pipeline, "--operator", operator, "--every", str(every),
         "--stop-file", stop_file], stdout=subprocess.PIPE, text=True)
        for _ in range(processes)]
    try:
        assigned: list = []
        for p in procs:  # every worker has partitions ...
            assigned.append(json.loads(p.stdout.readline())["assigned"])
        time.sleep(8.0)  # ... and the group has settled (a join rebalances the others)
        rng = np.random.default_rng(1)
        x = rng.normal(size=records)
        prod = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20,
                             batch_size=256 * 1024)
        for i in range(records):
            k = f"k{i % keys}"
            prod.send(topic, key=k.encode(),
                      value=json.dumps({"key": k, "ts": float(i), "value": float(x[i])}).encode())
        prod.flush()
        prod.close()
        deadline = time.time() + 600
        while time.time() < deadline:  # until the workers have seen every record
            time.sleep(0.5)
            if sum(int(f.read_text() or 0) for f in Path("/tmp").glob(
                    f"{pipeline}.stop.*")) >= records:
                break
        Path(stop_file).touch()
        reports = [json.loads(p.stdout.readlines()[-1]) for p in procs]
    finally:
        for p in procs:
            p.wait(timeout=120)
        Path(stop_file).unlink(missing_ok=True)
        for f in Path("/tmp").glob(f"{pipeline}.stop.*"):
            f.unlink()
    total = sum(r["records"] for r in reports)
    t0 = min(r["first"] for r in reports if r["first"])
    t1 = max(r["last"] for r in reports if r["last"])
    return {"operator": operator, "processes": processes, "partitions": partitions,
            "records": total, "seconds": t1 - t0, "records_per_s": total / (t1 - t0),
            "workers": reports}


# ---- the model ---------------------------------------------------------------------------

def plan(sensors: float, hz: float, stage_rate: float, memory_per_key: float,
         changelog_per_key: float, base_rss: float, utilisation: float = 0.7,
         every_records: int = 10_000, every_seconds: float = 10.0,
         partitions_per_process: int = 2, chunk_bytes: int = 512 * 1024) -> dict:
    """The README "Sizing" formula.

    R = sensors * hz records/s; processes P = ceil(R / (utilisation * stage_rate)) (one core
    each); partitions N = partitions_per_process * P; memory per process = base_rss +
    (sensors / P) * memory_per_key; checkpoint interval per partition
    T = min(every_records / (R / N), every_seconds); a key changes in an interval with
    probability q = 1 - exp(-hz * T); checkpoint traffic = sensors * q * changelog_per_key / T
    bytes/s in N / T group entries per second (one per partition and checkpoint), each cut
    into chunks of at most ``chunk_bytes`` (plus one marker per partition and interval).
    """
    rate = sensors * hz
    p = max(1, math.ceil(rate / (utilisation * stage_rate)))
    n = partitions_per_process * p
    interval = min(every_records / (rate / n), every_seconds)
    q = 1 - math.exp(-hz * interval)
    return {"records_per_s": rate, "processes": p, "partitions": n,
            "keys_per_process": sensors / p,
            "memory_per_process_bytes": base_rss + sensors / p * memory_per_key,
            "checkpoint_interval_s": interval, "changed_fraction": q,
            "checkpoint_bytes_per_s": sensors * q * changelog_per_key / interval,
            "checkpoint_messages_per_s": n / interval * (
                math.ceil(sensors / n * q * changelog_per_key / chunk_bytes) + 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap")
    ap.add_argument("--topic")
    ap.add_argument("--pipeline")
    ap.add_argument("--operator", default="cs")
    ap.add_argument("--every", type=int, default=1000)
    ap.add_argument("--stop-file")
    ap.add_argument("--records", type=int, default=60_000)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--per-key", type=int, default=1000)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-operators", action="store_true", help="only the stage processes")
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "sizing.json"))
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if args.quick:
        args.records, args.per_key = 10_000, 100
    out: dict = {"machine": f"{os.cpu_count()} cores ({platform.machine()}, shared), "
                 f"Python {platform.python_version()}", "operators": []}
    for name in (OPERATORS if not args.skip_operators else []):
        prof = operator_profile(name, 100, args.per_key)
        out["operators"].append(prof)
        print(f"{name}: {prof['records_per_s']:,.0f} records/s alone, "
              f"{prof['memory_bytes_per_key']:,.0f} B/key in memory, "
              f"{prof['changelog_bytes_per_key']:,.0f} B/key in the changelog, "
              f"{prof['serialise_s_per_key'] * 1e6:.0f} us to serialise", flush=True)
    from kafka_throughput import start_tansu

    proc, bootstrap = start_tansu()
    try:
        one = run_stage_processes(bootstrap, args.operator, 1, 1, args.records, args.keys,
                                  args.every)
        print(f"1 process, 1 partition: {one['records_per_s']:,.0f} records/s", flush=True)
        many = run_stage_processes(bootstrap, args.operator, args.processes, args.partitions,
                                   args.records, args.keys, args.every)
    finally:
        proc.kill()
        proc.wait()
    predicted = args.processes * one["records_per_s"]
    print(f"{args.processes} processes, {args.partitions} partitions: "
          f"{many['records_per_s']:,.0f} records/s measured, {predicted:,.0f} predicted "
          f"({many['records_per_s'] / predicted:.2f})")
    out.update(one_process=one, checked_point=many, predicted_records_per_s=predicted,
               command=" ".join(["python", "benchmarks/sizing.py", *sys.argv[1:]]))
    if not args.quick:
        Path(args.json).write_text(json.dumps(out, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
