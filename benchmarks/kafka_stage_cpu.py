"""The Kafka stage's own CPU work without a broker: ``python benchmarks/kafka_stage_cpu.py OP``.

``StageRunner._process`` on 50,000 in-memory messages (100 keys) with a producer whose ``send``
returns a done future; microseconds per record without and with a checkpoint every 1,000
(best of 5 passes).
"""

from __future__ import annotations

import collections
import cProfile
import json
import pstats
import sys
import time

import numpy as np
from kafka import TopicPartition

from shiftwatch.deploy.kafka.stage import StageRunner
from shiftwatch.deploy.pipeline import parse_pipeline


class Fut:
    is_done = True

    def failed(self):
        return False


class Cons:
    def commit_async(self, *a, **k):
        pass

    def commit(self, *a, **k):
        pass


class Prod:
    def send(self, *a, **k):
        return Fut()


M = collections.namedtuple("M", "offset key value timestamp")
n = 50000
rng = np.random.default_rng(0)
x = rng.normal(size=n)
msgs = [
    M(
        i,
        f"k{i % 100}".encode(),
        json.dumps({"key": f"k{i % 100}", "ts": float(i), "value": float(x[i])}).encode(),
        1000 + i,
    )
    for i in range(n)
]
op = sys.argv[1] if len(sys.argv) > 1 else "cs"
cfg = parse_pipeline(
    {
        "pipeline": "p",
        "kafka": {"bootstrap_servers": "x:1"},
        "guarantee": "at-least-once",
        "checkpoint": {"every_records": 1000, "every_seconds": 1e6},
        "stages": [{"name": "s", "input": "in", "output": "out", "operator": op, "params": {}}],
    }
)
r = StageRunner(cfg, cfg.stages[0])
r._producer = Prod()
r.checkpointer.producer = r._producer
r.checkpointer.consumer = Cons()
task = r._new_task(0)
r._tasks[0] = task
tp = TopicPartition("in", 0)
r._process(tp, task, msgs[:1000])


def go(cp):
    task.next_offset = None
    t = time.perf_counter()
    for b in range(1000, n, 1000):
        r._process(tp, task, msgs[b : b + 1000])
        if cp:
            task.since_checkpoint = 10**6
            r.checkpointer.maybe_checkpoint()
            task.pendings.clear()
        else:
            task.dirty = [set()]
    return (time.perf_counter() - t) / (n - 1000) * 1e6


plain = min(go(False) for _ in range(5))  # best of 5: the machine is shared
checkpointed = min(go(True) for _ in range(5))
print(f"{op}: process only {plain:.1f} us/record; checkpoints {checkpointed:.1f} us/record")
if len(sys.argv) > 2:
    p = cProfile.Profile()
    p.enable()
    go(True)
    p.disable()
    pstats.Stats(p).sort_stats("tottime").print_stats(20)
