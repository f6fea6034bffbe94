"""Alarms per key as bounded Prometheus series (shiftwatch.deploy.key_alarms), no broker."""

from __future__ import annotations

import json
import threading
import unicodedata
from urllib.request import Request, urlopen

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from shiftwatch.deploy import Pipeline
from shiftwatch.deploy.cli import main
from shiftwatch.deploy.executor import StageExecutor
from shiftwatch.deploy.key_alarms import (
    EXACT_FOLDED_KEYS,
    MAX_KEY_LABEL_CHARS,
    KeyAlarmSeries,
    _FoldedKeys,
    key_label,
)
from shiftwatch.deploy.observability import MetricsServer
from shiftwatch.deploy.pipeline import PipelineError, parse_pipeline
from shiftwatch.operators.contract import Operator

KEYS = "shiftwatch_key_alarms_total"
HOSTILE = ('evil"} 1\nshiftwatch_alarms_total{stage="x"} 9\r\n\\"\x00\x1b[31m\u2028\u202e'
           + "é" * 3000 + "\n" * 3000 + '"' * 3943)


class Above(Operator):
    """Alarms when value > level."""

    def __init__(self, level=5.0, name="above"):
        self.level = level
        self.name = name
        self._reset()

    def process(self, record):
        return [self._output(record, value=record["value"], alarm=record["value"] > self.level)]


@pytest.fixture
def server():
    s = MetricsServer(port=0, address="127.0.0.1").start()
    yield s
    s.close()


def _body(server: MetricsServer, openmetrics: bool = False) -> str:
    req = Request(f"http://127.0.0.1:{server.port}/metrics")
    if openmetrics:
        req.add_header("Accept", "application/openmetrics-text; version=1.0.0")
    with urlopen(req, timeout=5) as r:
        return r.read().decode()


def _key_series(text: str, parse=text_string_to_metric_families) -> dict[tuple, float]:
    return {(s.labels["operator"], s.labels["key"]): s.value
            for fam in parse(text) for s in fam.samples if s.name == KEYS}


# ---- labels ---------------------------------------------------------------------------


def _printable(label: str) -> bool:
    return not any(unicodedata.category(c)[0] == "C" or unicodedata.category(c) in ("Zl", "Zp")
                   for c in label)


def test_labels_are_short_printable_and_keep_distinct_keys_apart():
    keys = ["pump-a", "a\nb", "a\\nb", "a\\\\nb", "a\tb", "a\x00b", "a\x1bb", "a\u2028b",
            "a\u202eb", "\ud800x", "x" * 64, "x" * 65, "x" * 10_000, "x" * 9_999 + "y",
            "_other", "__other", "_none", None, 7, "7 ", [1, "a"], HOSTILE, "Ω≈ç√", "emoji🙂",
            'quote"', "back\\slash"]
    labels = [key_label(k) for k in keys]
    assert len(set(labels)) == len(keys)  # no two keys share a label
    for k, lab in zip(keys, labels, strict=True):
        assert 0 < len(lab) <= MAX_KEY_LABEL_CHARS, (k, lab)
        assert _printable(lab), (k, lab)
        lab.encode("utf-8")  # no lone surrogate
    assert labels[:3] == ["pump-a", "a\\nb", "a\\\\nb"]
    assert key_label("Ω≈ç√") == "Ω≈ç√" and key_label('quote"') == 'quote"'
    assert "_other" not in labels
    assert [k for k, lab in zip(keys, labels, strict=True) if lab == "_none"] == [None]
    assert key_label(None) == "_none"
    long = key_label("x" * 10_000)
    assert long.startswith("x" * 50) and long[-9] == "~"


# ---- the bound ------------------------------------------------------------------------


def test_three_keys_three_series_then_the_rest_fold_into_other(server):
    m = server.stage("p", "s", max_key_series=3)
    m.alarms("op", 4, keys={"a": 2, "b": 1, "c": 1})
    assert _key_series(_body(server)) == {("op", "a"): 2, ("op", "b"): 1, ("op", "c"): 1}
    m.alarms("op", 6, keys={"d": 3, "a": 1, "e": 1, "f": 1})
    m.alarms("op2", 2, keys={"d": 1, "b": 1})
    m.alarms("op", 1, keys={"d": 1})
    assert _key_series(_body(server)) == {
        ("op", "a"): 3, ("op", "b"): 1, ("op", "c"): 1, ("op", "_other"): 6,
        ("op2", "b"): 1, ("op2", "_other"): 1}
    assert server.value("shiftwatch_key_alarms_folded_keys", stage="s") == 3.0  # d, e, f
    assert server.value("shiftwatch_alarms_total", stage="s") == 13.0
    assert server.value(KEYS, stage="s") == 13.0  # every alarm counted once per key series


def test_zero_key_series_counts_everything_as_other(server):
    m = server.stage("p", "s", max_key_series=0)
    m.alarms("op", 3, keys={"a": 2, "b": 1})
    assert _key_series(_body(server)) == {("op", "_other"): 3}
    assert server.value("shiftwatch_key_alarms_folded_keys") == 2.0
    with pytest.raises(ValueError, match="max_key_series"):
        server.stage("p", "t", max_key_series=-1)


def test_the_fold_count_is_exact_then_estimated():
    f = _FoldedKeys()
    for i in range(EXACT_FOLDED_KEYS):
        f.add(f"k{i}")
        f.add(f"k{i}")  # again: distinct keys are counted
    assert f.count == EXACT_FOLDED_KEYS
    for i in range(EXACT_FOLDED_KEYS, 60_000):
        f.add(f"k{i}")
    assert abs(f.count / 60_000 - 1) < 0.05, f.count
    assert f._exact is None and len(f._registers) == 16384  # 16 KiB, whatever the keys


def test_unhashable_and_odd_keys_do_not_raise():
    from prometheus_client import CollectorRegistry, Counter

    c = Counter("k", "", ["pipeline", "stage", "operator", "key"], registry=CollectorRegistry())
    s = KeyAlarmSeries(c, "p", "s", max_key_series=2)
    s.add("op", {("a", 1): 1, None: 2, 3.5: 1, "x": 0})
    assert s.keys == ['["a", 1]', "_none"] and s.folded_keys == 1.0


# ---- the exposition with a hostile key ------------------------------------------------


def test_a_hostile_key_gives_a_valid_exposition_in_both_formats(server):
    m = server.stage("p", "s")
    m.alarms("op", 2, keys={HOSTILE: 1, "ok": 1})
    text = _body(server)
    # Parsed back by both of prometheus_client's parsers, the series are what was counted,
    # and nothing of the key was read as another sample.
    for body, parse in ((text, text_string_to_metric_families),
                        (_body(server, openmetrics=True), openmetrics_families)):
        assert _key_series(body, parse) == {("op", key_label(HOSTILE)): 1.0, ("op", "ok"): 1.0}
        names = {s.name for fam in parse(body) for s in fam.samples}
        alarms = [s for fam in parse(body) for s in fam.samples
                  if s.name == "shiftwatch_alarms_total"]
        assert alarms and all(s.labels["stage"] == "s" for s in alarms)
        assert "shiftwatch_alarms_total" in names
    lines = [ln for ln in text.splitlines() if ln.startswith(KEYS + "{")]
    assert len(lines) == 2 and all(len(ln) < 300 for ln in lines)
    assert all(ln.startswith(("#", "shiftwatch_")) for ln in text.splitlines() if ln)


# ---- the executor: one call per operator and batch ------------------------------------


class _Spy:
    def __init__(self):
        self.calls = []

    def alarms(self, operator, n, keys=None):
        self.calls.append((operator, n, dict(keys or {})))

    def dead_letter(self, reason):
        pass


def test_the_executor_counts_per_key_per_batch_in_one_call():
    spy = _Spy()
    ex = StageExecutor([Above(5.0, name="a5"), Above(7.0, name="a7")], observer=spy)
    records = [{"key": f"k{i % 4}", "value": float(v), "offset": i}
               for i, v in enumerate([6, 8, 1, 9, 6, 6, 0, 8])]
    ex.process(records)
    assert spy.calls == [("a5", 6, {"k0": 2, "k1": 2, "k3": 2}),
                         ("a7", 3, {"k1": 1, "k3": 2})]
    ex.process([{"key": "k0", "value": 0.0, "offset": 99}])
    assert spy.calls[-2:] == [("a5", 0, {}), ("a7", 0, {})]


def test_a_replay_counts_every_alarm_under_its_key(server):
    items = [{"key": f"user-{i % 7}", "value": float(i % 10)} for i in range(700)]
    m = server.stage("replay", "keys", max_key_series=4)
    Pipeline(items, [Above()], batch_size=64, progress=False, metrics=m).run()
    got = _key_series(_body(server))
    want: dict[str, int] = {}
    for it in items:
        if it["value"] > 5:
            want[it["key"]] = want.get(it["key"], 0) + 1
    # Admitted: the keys of the first batches with alarms; within a batch in the order of the
    # keys' first records (the operators' outputs come grouped by key).
    order: list[str] = []
    for b in range(0, len(items), 64):
        batch = items[b:b + 64]
        alarming = {it["key"] for it in batch if it["value"] > 5}
        order += [k for k in dict.fromkeys(it["key"] for it in batch)
                  if k in alarming and k not in order]
    first = order[:4]
    assert {k for _, k in got} == {*first, "_other"}
    assert all(got[("above", k)] == want[k] for k in first)
    assert got[("above", "_other")] == sum(n for k, n in want.items() if k not in first)
    assert m.key_alarms.folded_keys == len(want) - 4


# ---- the option: pipeline file and replay --------------------------------------------


def _pipeline(metrics: dict) -> dict:
    return {"pipeline": "p", "metrics": metrics, "stages": [
        {"name": "d", "input": "a", "output": "b", "operator": "standardize"}]}


def test_the_pipeline_file_option_is_checked():
    assert parse_pipeline(_pipeline({})).metrics["max_key_series"] == 100
    assert parse_pipeline(_pipeline({"max_key_series": 0})).metrics["max_key_series"] == 0
    for bad in (-1, 2.5, "10", True):
        with pytest.raises(PipelineError, match=r"metrics\.max_key_series must be an integer"):
            parse_pipeline(_pipeline({"max_key_series": bad}))


def test_run_and_replay_pass_the_bound_to_the_stage_metrics(tmp_path, monkeypatch):
    from shiftwatch.deploy.kafka import run as kafka_run

    bounds = []

    class FakeRunner:
        incomplete = None

        def __init__(self, config, stage, metrics, **kw):
            self.stage = stage
            bounds.append(metrics.key_alarms.max_key_series)

        def prepare(self):
            pass

        def run(self):
            pass

    monkeypatch.setattr(kafka_run, "StageRunner", FakeRunner)
    config = parse_pipeline(_pipeline({"max_key_series": 7}))
    kafka_run._run_stages(config, config.stages, threading.Event(), None,
                          MetricsServer(port=None))
    assert bounds == [7]

    original = MetricsServer.stage
    monkeypatch.setattr(MetricsServer, "stage", lambda self, *a, **kw: bounds.append(
        kw.get("max_key_series")) or original(self, *a, **kw))
    src = tmp_path / "x.jsonl"
    src.write_text("".join(json.dumps({"value": float(i % 7)}) + "\n" for i in range(50)))
    argv = ["replay", str(src), "--operator", "river:ADWIN", "--out", str(tmp_path / "o"),
            "--no-plots", "--no-progress", "--quiet", "--metrics-port", "0"]
    assert main(argv) == 0
    assert main([*argv, "--max-key-series", "3"]) == 0
    assert bounds == [7, 100, 3]
    with pytest.raises(SystemExit):
        main([*argv, "--max-key-series", "-1"])
