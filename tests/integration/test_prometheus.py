"""A real Prometheus server scrapes a running stage (``shiftwatch run --metrics-port``).

Starts Debian's ``prometheus`` binary on a free loopback port with a scrape config that points
at the stage, waits for scrapes, and queries Prometheus's HTTP API; everything it starts is
stopped at the end. A missing ``prometheus`` binary fails the test (``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
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
from system_binaries import need_binary


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


def _stop(proc: subprocess.Popen, sig=signal.SIGTERM, timeout: float = 30) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _query(prom: str, expr: str) -> dict[str, float]:
    """Instant query: {partition or "": value} of each series (empty if none yet)."""
    status, body = _get(f"{prom}/api/v1/query?{urlencode({'query': expr})}")
    if status != 200:
        return {}
    data = json.loads(body)["data"]["result"]
    return {r["metric"].get("partition", ""): float(r["value"][1]) for r in data}


@pytest.fixture
def prometheus_binary() -> str:
    return need_binary("prometheus", package="prometheus")


def test_prometheus_scrapes_a_running_stage(kafka_bootstrap, real_kafka, tmp_path,
                                            prometheus_binary):
    name = unique("prom")
    records = sensor_records(900, keys=6, seed=3)
    create_topics(kafka_bootstrap, 2, f"{name}.raw")
    produce(kafka_bootstrap, f"{name}.raw", records)
    metrics_port = _free_port()
    path = write_pipeline(
        tmp_path / "p.yaml", name, kafka_bootstrap,
        [{"name": "detect", "input": f"{name}.raw", "output": f"{name}.alarms", "key": "sensor",
          "value": "temp", "operator": "river:ADWIN", "params": {"delta": 0.01},
          "consumer": group_timing(real_kafka)}],
        topics={"create": True, "partitions": 2},
        metrics={"address": "127.0.0.1", "interval_seconds": 1.0})
    stage = start_stage_process(path, "--metrics-port", str(metrics_port),
                                log=tmp_path / "stage.log")
    prom_port = _free_port()
    scrape = tmp_path / "prometheus.yml"
    scrape.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "shiftwatch", "scrape_interval": "1s",
                            "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}]}))
    prom_log = open(tmp_path / "prometheus.log", "wb")
    prom = subprocess.Popen(
        [prometheus_binary, f"--config.file={scrape}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=prom_log, stderr=subprocess.STDOUT, cwd=tmp_path)
    api = f"http://127.0.0.1:{prom_port}"
    sel = f'pipeline="{name}", stage="detect"'
    try:
        wait_for(lambda: _get(f"{api}/-/ready")[0] == 200, 30, "prometheus to start")
        base = f"http://127.0.0.1:{metrics_port}"
        wait_for(lambda: _get(f"{base}/readyz")[0] == 200, 60,
                 "the stage to be ready (joined, assigned, restored)")
        assert _get(f"{base}/healthz")[0] == 200
        # Prometheus has scraped the stage once it holds every record as consumed.
        wait_for(lambda: _query(api, f"shiftwatch_records_in_total{{{sel}}}").get("")
                 == len(records), 60, f"Prometheus to see records_in == {len(records)}")
        lag = wait_for(lambda: _query(api, f"shiftwatch_consumer_lag_records{{{sel}}}"), 30,
                       "lag series in Prometheus")
        assert set(lag) == {"0", "1"}  # one series per owned partition
        wait_for(lambda: sum(_query(api, f"shiftwatch_consumer_lag_records{{{sel}}}").values())
                 == 0, 30, "lag 0 once everything is consumed")
        assert _query(api, f"shiftwatch_partitions_owned{{{sel}}}") == {"": 2.0}
        # The alarm counter agrees with the alarms the stage produced.
        outs = values(read_topic(kafka_bootstrap, f"{name}.alarms", min_count=len(records)))
        n_alarms = sum(1 for o in outs if o.get("alarm"))
        assert n_alarms > 0
        alarms = _query(api, f'shiftwatch_alarms_total{{{sel}, operator="river:ADWIN"}}')
        assert alarms == {"": float(n_alarms)}
        up = _query(api, 'up{job="shiftwatch"}')
        assert up == {"": 1.0}
    finally:
        _stop(stage)
        _stop(prom)
        prom_log.close()
    assert stage.returncode == 0, (tmp_path / "stage.log").read_text()[-2000:]
