"""``--exit-when-idle`` over a chain run in one process: a stage fed by another stage of the
run counts its idle time from when that stage last ran, so it cannot exit while its input is
still being made (it did, under load: the downstream stage of a two-stage chain exited after
2 s without input while the upstream stage was still joining its group, and the chain's
output topic stayed empty)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from shiftwatch.deploy.kafka import run as run_module


class FakeRunner:
    """Records when its chained stage saw the upstream stage active."""

    seen: dict[str, list[float]] = {}
    incomplete = None  # a StageRunner says why it stopped incomplete here

    def __init__(self, config, stage, stop=None, idle_exit_s=None, metrics=None,
                 reset_state=None):
        self.stage = stage
        self.upstream_active = lambda: float("-inf")

    def prepare(self):
        pass

    def run(self):
        if self.stage.name == "scale":
            time.sleep(0.6)  # making the chain's input
            return
        out = FakeRunner.seen.setdefault(self.stage.name, [])
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline:
            out.append(time.monotonic() - self.upstream_active())
            time.sleep(0.05)


def test_a_chained_stage_counts_idle_time_from_its_feeding_stage(monkeypatch):
    monkeypatch.setattr(run_module, "StageRunner", FakeRunner)
    stages = [SimpleNamespace(name="scale", input="raw", output="scaled"),
              SimpleNamespace(name="detect", input="scaled", output="alarms"),
              SimpleNamespace(name="other", input="elsewhere", output="x")]
    t0 = time.monotonic()
    assert run_module._run_stages(SimpleNamespace(), stages, threading.Event(), 2.0,
                                  None) == 0
    assert time.monotonic() - t0 >= 1.2
    detect = FakeRunner.seen["detect"]
    # while `scale` runs, `detect` sees it active now; afterwards, since it ended (~0.6 s)
    assert detect[0] < 0.05 and max(detect) > 0.4
    # a stage nothing of this run feeds counts from its own input only
    assert FakeRunner.seen["other"][0] == float("inf")
