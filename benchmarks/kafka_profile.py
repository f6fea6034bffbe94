"""cProfile of a Kafka stage thread: ``python benchmarks/kafka_profile.py [N] [EVERY] [OP]``.

Starts tansu, produces N records over 100 keys, runs StageRunner (at-least-once, checkpoint
every EVERY records) in a thread under cProfile (the operator compiled first on a few
records, so Numba compilation is left out); prints the top entries by own and cumulative
time (the producer I/O thread is not profiled). Used for benchmarks/results/kafka.md.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kafka_throughput as kt

from shiftwatch.deploy.kafka.stage import StageRunner
from shiftwatch.deploy.pipeline import parse_pipeline

n = int(sys.argv[1]) if len(sys.argv) > 1 else 30000
every = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
op = sys.argv[3] if len(sys.argv) > 3 else "cs"
proc, bootstrap = kt.start_tansu()
try:
    topic = f"prof-{uuid.uuid4().hex[:6]}"
    kt.produce(bootstrap, topic, n, 100)
    name = f"b{uuid.uuid4().hex[:8]}"
    cfg = parse_pipeline(
        {
            "pipeline": name,
            "kafka": {"bootstrap_servers": bootstrap},
            "topics": {"create": True, "partitions": 1},
            "guarantee": "at-least-once",
            "checkpoint": {"every_records": every, "every_seconds": 10.0},
            "batch": {"max_records": 1000, "timeout_ms": 100},
            "consumer": {
                "max_poll_interval_ms": 3000,
                "session_timeout_ms": 3000,
                "heartbeat_interval_ms": 1000,
            },
            "metrics": {"interval_seconds": 1e6},
            "stages": [
                {"name": "s", "input": topic, "output": f"{name}.out", "operator": op, "params": {}}
            ],
        }
    )
    # Compile (Numba) and import what the operator needs before profiling, so one-time
    # start-up work does not count.
    cfg.stages[0].operators[0].build().process_batch(
        [{"key": "warm", "ts": float(i), "value": 0.01 * i} for i in range(300)])
    runner = StageRunner(cfg, cfg.stages[0])
    prof = cProfile.Profile()

    def target():
        prof.enable()
        try:
            runner.run()
        finally:
            prof.disable()

    th = threading.Thread(target=target)
    th.start()
    t0 = time.perf_counter()
    while runner.stats.records_in < n:
        time.sleep(0.01)
    dt = time.perf_counter() - t0
    runner.stop.set()
    th.join()
    prof.dump_stats("/tmp/kafka_profile.out")
    print(f"{n} records in {dt:.2f}s -> {n / dt:,.0f}/s (under cProfile)")
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
    print(s.getvalue())
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumtime").print_stats(30)
    print(s.getvalue())
finally:
    proc.kill()
    proc.wait()
