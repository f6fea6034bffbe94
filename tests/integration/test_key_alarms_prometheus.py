"""Alarms per key through a real Prometheus server, queried with the dashboard's expressions.

A stage's executor (no broker: the per-key series are the executor's and the metrics
server's, the same for a replay and a Kafka stage) alarms on 3 keys, then on keys beyond
``max_key_series`` and on a hostile key (10,000 characters, newlines, quotes); Debian's
``prometheus`` scrapes its ``/metrics`` every second, and the Grafana dashboard's per-key
queries (``deploy/grafana/shiftwatch.json``) are run over Prometheus's HTTP API. A missing
``prometheus`` binary skips the test outside CI and fails it under CI (``.ci/run`` installs
it). Then a Kafka stage (``shiftwatch run --metrics-port``, ``metrics.max_key_series: 2``)
serves the per-key series of the alarms it wrote to its output topic.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.parse import urlencode
from urllib.request import urlopen

import pytest
import yaml
from kafka_helpers import (
    create_topics,
    group_timing,
    produce,
    read_topic,
    sensor_records,
    start_stage_process,
    unique,
    values,
    wait_for,
    write_pipeline,
)
from prometheus_client.parser import text_string_to_metric_families
from system_binaries import need_binary

from shiftwatch.deploy.executor import StageExecutor
from shiftwatch.deploy.key_alarms import key_label
from shiftwatch.deploy.observability import MetricsServer
from shiftwatch.operators.contract import Operator

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "shiftwatch.json"
HOSTILE = 'pump "7"\nshiftwatch_alarms_total{stage="x"} 9\n' + "\\" * 10 + "k" * 9_944
SEL = 'pipeline="itest", stage="detect"'


class Above(Operator):
    """Alarms when value > 5."""

    name = "above"

    def process(self, record):
        return [self._output(record, value=record["value"], alarm=record["value"] > 5)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urlopen(url, timeout=3) as r:
            return r.status, r.read()
    except HTTPError as e:
        return e.code, e.read()
    except (URLError, OSError):
        return 0, b""


def _query(api: str, expr: str, at: float | None = None) -> list[dict]:
    params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
    status, body = _get(f"{api}/api/v1/query?{urlencode(params)}")
    assert status == 200, body[:500]
    return json.loads(body)["data"]["result"]


def _by(result: list[dict], *labels: str) -> dict:
    return {tuple(r["metric"].get(lab, "") for lab in labels) if len(labels) > 1
            else r["metric"].get(labels[0], ""): float(r["value"][1]) for r in result}


def _panel_expr(title_start: str, rng: str) -> str:
    dash = json.loads(DASHBOARD.read_text())
    [panel] = [p for p in dash["panels"] if p["title"].startswith(title_start)]
    [target] = panel["targets"]
    return (target["expr"].replace('pipeline=~"$pipeline"', 'pipeline=~"itest"')
            .replace('stage=~"$stage"', 'stage=~"detect"').replace("$__range", rng))


def _records(pairs, start: int) -> list[dict]:
    return [{"key": k, "value": float(v), "offset": start + i} for i, (k, v) in enumerate(pairs)]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def prometheus_binary() -> str:
    return need_binary("prometheus", package="prometheus")


def test_prometheus_shows_alarms_per_key_bounded(tmp_path, prometheus_binary):
    server = MetricsServer(port=0, address="127.0.0.1").start()
    m = server.stage("itest", "detect", max_key_series=3)
    ex = StageExecutor([Above()], observer=m)
    # Batch 1, before Prometheus's first scrape: 3 keys alarm (a 3 times, b 2, c once).
    ex.process(_records([("a", 9), ("b", 9), ("a", 7), ("c", 6), ("b", 8), ("a", 6),
                         ("c", 1), ("a", 0)], 0))
    scrape = tmp_path / "prometheus.yml"
    scrape.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "shiftwatch", "scrape_interval": "1s",
                            "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}]}]}))
    prom_port = _free_port()
    prom_log = open(tmp_path / "prometheus.log", "wb")
    prom = subprocess.Popen(
        [prometheus_binary, f"--config.file={scrape}", f"--storage.tsdb.path={tmp_path / 'db'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=prom_log, stderr=subprocess.STDOUT, cwd=tmp_path)
    api = f"http://127.0.0.1:{prom_port}"
    per_key = _panel_expr("Alarms per key", "1h")
    try:
        wait_for(lambda: _get(f"{api}/-/ready")[0] == 200, 30, "prometheus to start")
        # 3 keys, 3 series
        series = wait_for(lambda: _by(_query(api, f"shiftwatch_key_alarms_total{{{SEL}}}"), "key"),
                       30, "the key series in Prometheus")
        assert series == {"a": 3.0, "b": 2.0, "c": 1.0}
        # Prometheus first saw each counter at its value: increase() alone gives 0 for each
        # key; the dashboard's query counts a series born within the range with its value.
        wait_for(lambda: len(_query(api, f"shiftwatch_key_alarms_total{{{SEL}, key=\"a\"}}[30s]")
                          [0]["values"]) >= 3, 30, "three scrapes")
        plain = _by(_query(api, f"sum by (key) (increase(shiftwatch_key_alarms_total{{{SEL}}}"
                                f"[1h]))"), "key")
        assert plain == {"a": 0.0, "b": 0.0, "c": 0.0}
        assert _by(_query(api, per_key), "key") == {"a": 3.0, "b": 2.0, "c": 1.0}
        t_before = time.time()
        time.sleep(2.5)
        # Batch 2: a again; d, e and the hostile key are beyond the bound: _other.
        ex.process(_records([("d", 9), ("a", 9), (HOSTILE, 8), ("e", 7), ("d", 6), ("e", 0)],
                            100))
        assert key_label(HOSTILE) != HOSTILE and len(key_label(HOSTILE)) == 64
        want = {"a": 4.0, "b": 2.0, "c": 1.0, "_other": 4.0}
        wait_for(lambda: _by(_query(api, f"shiftwatch_key_alarms_total{{{SEL}}}"), "key") == want,
              30, f"the series {want}")
        folded = _query(api, _panel_expr("Keys folded", "1h"))
        assert _by(folded, "stage") == {"detect": 3.0}  # d, e and the hostile key
        assert _by(_query(api, per_key), "key") == want
        table = _query(api, _panel_expr("Top 20 keys", "1h"))
        assert _by(table, "stage", "operator", "key") == {
            ("detect", "above", k): v for k, v in want.items()}
        # Over a range that began before batch 2: a's series existed then, so it counts what
        # increase() says (1, with Prometheus's extrapolation to the range's edges); _other
        # was born within it and counts whole.
        at = time.time()
        since = _by(_query(api, _panel_expr("Alarms per key", f"{at - t_before:.0f}s"), at),
                    "key")
        assert set(since) == {"a", "b", "c", "_other"}
        assert 0.9 <= since["a"] <= 2.0 and since["b"] == since["c"] == 0.0
        assert since["_other"] == 4.0
        up = _by(_query(api, 'up{job="shiftwatch"}'), "job")
        assert up == {"shiftwatch": 1.0}  # the hostile key did not break a scrape
    finally:
        _stop(prom)
        prom_log.close()
        server.close()


def test_a_kafka_stage_serves_alarms_per_key(kafka_bootstrap, real_kafka, tmp_path):
    name = unique("keyalarms")
    records = sensor_records(900, keys=6, seed=3)
    create_topics(kafka_bootstrap, 2, f"{name}.raw")
    produce(kafka_bootstrap, f"{name}.raw", records)
    port = _free_port()
    path = write_pipeline(
        tmp_path / "p.yaml", name, kafka_bootstrap,
        [{"name": "detect", "input": f"{name}.raw", "output": f"{name}.alarms", "key": "sensor",
          "value": "temp", "operator": "river:ADWIN", "params": {"delta": 0.01},
          "consumer": group_timing(real_kafka)}],
        topics={"create": True, "partitions": 2},
        metrics={"address": "127.0.0.1", "max_key_series": 2})
    stage = start_stage_process(path, "--metrics-port", str(port), log=tmp_path / "stage.log")

    def key_series() -> dict[str, float]:
        status, body = _get(f"http://127.0.0.1:{port}/metrics")
        if status != 200:
            return {}
        return {s.labels["key"]: s.value for fam in text_string_to_metric_families(
            body.decode()) for s in fam.samples
            if s.name == "shiftwatch_key_alarms_total" and s.labels["stage"] == "detect"}

    def folded() -> float:
        body = _get(f"http://127.0.0.1:{port}/metrics")[1].decode()
        return sum(s.value for fam in text_string_to_metric_families(body) for s in fam.samples
                   if s.name == "shiftwatch_key_alarms_folded_keys")

    try:
        outs = values(read_topic(kafka_bootstrap, f"{name}.alarms", min_count=len(records)))
        per_key: dict[str, int] = {}
        for o in outs:
            if o.get("alarm"):
                per_key[o["key"]] = per_key.get(o["key"], 0) + 1
        assert len(per_key) > 2, per_key  # more alarming keys than series
        got = wait_for(lambda: (lambda g: g if sum(g.values()) == sum(per_key.values())
                                else None)(key_series()), 30,
                       "the key series to hold every alarm")
        shown = [k for k in got if k != "_other"]
        assert len(shown) == 2 and "_other" in got
        assert all(got[k] == per_key[k] for k in shown)
        assert got["_other"] == sum(n for k, n in per_key.items() if k not in shown)
        assert folded() == len(per_key) - 2
    finally:
        _stop(stage)
    assert stage.returncode == 0, (tmp_path / "stage.log").read_text()[-2000:]
