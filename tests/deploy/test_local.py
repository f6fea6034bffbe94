from __future__ import annotations

import numpy as np
import pytest

from shiftwatch.deploy import Pipeline
from shiftwatch.operators import create
from shiftwatch.operators.contract import Operator
from shiftwatch.operators.transforms import Standardize
from shiftwatch.records import BadInput, DeadLetter


class Collect:
    wants_inputs = True

    def __init__(self):
        self.records, self.inputs, self.closed, self.flushed = [], [], False, 0

    def open(self):
        pass

    def write(self, records):
        self.records.extend(records)

    def write_inputs(self, records):
        self.inputs.extend(records)

    def flush(self):
        self.flushed += 1

    def close(self):
        self.closed = True

    def summary(self):
        return {"n": len(self.records)}


class Doubler(Operator):
    """Emits value*2; rejects negative values."""

    def __init__(self):
        self._reset()

    def _reset(self):
        self._n = 0

    def process(self, record):
        if record["value"] < 0:
            raise BadInput("value is negative")
        self._n += 1
        return [self._output(record, value=2 * record["value"], n=self._n)]


def test_chain_offsets_and_dead_letters_from_source_and_operator():
    src = [{"key": "a", "value": 1.0}, DeadLetter("??", "unparseable", {"line": 3}),
           {"key": "b", "value": -1.0}, {"key": "a", "value": 2.0}]
    sink, dead = Collect(), Collect()
    summary = Pipeline(src, [Doubler(), Doubler()], [sink], dead_letters=dead,
                       progress=False, batch_size=2).run()
    assert [(r["offset"], r["value"], r["n"]) for r in sink.records] == [(0, 4.0, 1), (3, 8.0, 2)]
    assert summary.records_in == 4 and summary.outputs == 2 and summary.dead_letters == 2
    reasons = sorted(d["reason"] for d in dead.records)
    assert reasons == ["unparseable", "value is negative"]
    op_dead = [d for d in dead.records if d["reason"] == "value is negative"][0]
    assert op_dead["origin"] == {"offset": 2}
    assert op_dead["operator"] == "Doubler" and op_dead["key"] == "b"
    assert op_dead["raw"] == {"key": "b", "value": -1.0}
    assert sink.closed and dead.closed
    # the inputs tap sees the good input records with their offsets
    assert [r["offset"] for r in sink.inputs] == [0, 2, 3]


def test_keyed_by_default_one_state_per_key():
    src = [{"key": k, "value": 1.0} for k in "abab"]
    sink = Collect()
    Pipeline(src, [Doubler()], [sink], progress=False).run()
    assert sorted((r["key"], r["n"]) for r in sink.records) == [("a", 1), ("a", 2),
                                                                 ("b", 1), ("b", 2)]


def test_ctrl_c_processes_what_was_read_and_closes_sinks():
    def source():
        for i in range(10):
            if i == 6:
                raise KeyboardInterrupt
            yield {"value": float(i)}

    sink = Collect()
    summary = Pipeline(source(), [Doubler()], [sink], progress=False, batch_size=4).run()
    assert summary.interrupted
    assert [r["value"] for r in sink.records] == [2.0 * i for i in range(6)]
    assert sink.closed and "interrupted" in summary.line()


def test_non_record_items_become_dead_letters():
    sink, dead = Collect(), Collect()
    Pipeline([3.5, {"value": 1.0}], [Doubler()], [sink], dead_letters=dead,
             progress=False).run()
    assert len(sink.records) == 1 and "not a record" in dead.records[0]["reason"]


def test_speed_paces_by_ts():
    import time

    src = [{"ts": 100.0 + 0.1 * i, "value": 1.0} for i in range(6)]
    t0 = time.perf_counter()
    Pipeline(src, [Doubler()], [Collect()], progress=False, speed=2.0).run()
    elapsed = time.perf_counter() - t0
    # 0.5 s of event time at twice real time is 0.25 s of wall time
    assert 0.2 <= elapsed < 1.5


def test_bad_runner_parameters():
    with pytest.raises(ValueError, match="batch_size"):
        Pipeline([], [], batch_size=0)
    with pytest.raises(ValueError, match="speed"):
        Pipeline([], [], speed=-1)


def test_river_detector_through_runner_finds_shift():
    rng = np.random.default_rng(3)
    x = np.r_[rng.normal(0, 1, 400), rng.normal(4, 1, 400)]
    sink = Collect()
    Pipeline([{"value": float(v)} for v in x],
             [Standardize(burn_in=50), create("river:PageHinkley", threshold=20)], [sink],
             progress=False).run()
    alarms = [r["offset"] for r in sink.records if r["alarm"]]
    assert alarms and 400 <= alarms[0] < 440


def test_progress_bar_shows_records_rate_and_total(monkeypatch):
    import io
    import sys

    class Tty(io.StringIO):
        def isatty(self):
            return True

    class Src(list):
        length = 50
        name = "src"

    err = Tty()
    monkeypatch.setattr(sys, "stderr", err)
    Pipeline(Src({"value": 1.0} for _ in range(50)), [Doubler()], [Collect()],
             batch_size=10).run()
    text = err.getvalue()
    assert "50/50" in text and "rec/s" in text and "src" in text


def test_outputs_come_in_input_order_not_grouped_by_key():
    src = [{"key": k, "value": float(i)} for i, k in enumerate("abcabcab")]
    sink = Collect()
    Pipeline(src, [Doubler()], [sink], progress=False, batch_size=8).run()
    assert [r["offset"] for r in sink.records] == list(range(8))


class Counting(Operator):
    """Remembers every offset it processed (class-wide), interrupts at the ``at``-th record:
    with a real SIGINT (``signal``) or by raising KeyboardInterrupt itself."""

    seen: list = []

    def __init__(self, at=-1, how="signal"):
        self.at = at
        self.how = how
        self._reset()

    def _reset(self):
        self._n = 0

    def process(self, record):
        Counting.seen.append(record["offset"])
        self._n += 1
        if len(Counting.seen) == self.at:
            if self.how == "signal":
                import os
                import signal

                os.kill(os.getpid(), signal.SIGINT)
            else:
                raise KeyboardInterrupt
        return [self._output(record, n=self._n)]


@pytest.mark.parametrize("how", ["signal", "raise"])
def test_ctrl_c_inside_an_operator_counts_no_record_twice(how):
    Counting.seen = []
    src = [{"key": "abc"[i % 3], "value": 1.0} for i in range(100)]
    sink, dead = Collect(), Collect()
    pipe = Pipeline(src, [Counting(at=25, how=how)], [sink], dead_letters=dead,
                    progress=False, batch_size=10)
    summary = pipe.run()
    assert summary.interrupted
    # No record reached the operator twice (the old runner re-ran the interrupted batch).
    assert len(Counting.seen) == len(set(Counting.seen))
    state = {k: s["_n"] if "_n" in s else s for k, s in
             ((k, pipe.operators[0].existing(k).__dict__) for k in pipe.operators[0].keys)}
    assert sum(state.values()) == len(Counting.seen)
    if how == "signal":
        # The SIGINT waited for the batch: the state holds exactly the written batches
        # (three of ten records), and what was reported processed is what the state holds.
        assert sorted(Counting.seen) == [r["offset"] for r in sink.inputs] == list(range(30))
        assert sorted(r["offset"] for r in sink.records) == list(range(30))
        assert summary.outputs == 30
    else:
        # Raised inside the operator: the batch stops where it was, is not written and is
        # not run again.
        assert len(Counting.seen) == 25 and set(range(20)) <= set(Counting.seen) < set(
            range(30))
        assert [r["offset"] for r in sink.records] == list(range(20))
