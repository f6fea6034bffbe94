"""Prometheus metrics and health probes (shiftwatch.deploy.observability), no broker."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.request import urlopen

import pytest
from prometheus_client.parser import text_string_to_metric_families

from shiftwatch.deploy import Pipeline
from shiftwatch.deploy.cli import main
from shiftwatch.deploy.observability import (
    METRICS,
    REASON_CLASSES,
    MetricsServer,
    reason_class,
)
from shiftwatch.deploy.pipeline import PipelineError, parse_pipeline
from shiftwatch.operators.contract import Operator
from shiftwatch.records import BadInput, DeadLetter

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "shiftwatch.json"


class Above(Operator):
    """Alarms when value > level; rejects negative values (out of range)."""

    def __init__(self, level=5.0, name="above"):
        self.level = level
        self.name = name
        self._reset()

    def process(self, record):
        v = record["value"]
        if v < 0:
            raise BadInput(f"value {v} is outside [0, inf)")
        return [self._output(record, value=v, alarm=v > self.level)]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except HTTPError as e:
        return e.code, e.read()
    except URLError:  # not listening (yet)
        return 0, b""


def _scrape(server: MetricsServer) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics, parsed by prometheus_client's own parser."""
    status, body = _get(f"http://127.0.0.1:{server.port}/metrics")
    assert status == 200
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _labels(**kw) -> tuple:
    return tuple(sorted(kw.items()))


@pytest.fixture
def server():
    s = MetricsServer(port=0, address="127.0.0.1").start()
    yield s
    s.close()


def _stream(n_keys: int = 50, n: int = 400):
    """Records of many keys, some alarming, some rejected, some undecodable."""
    items = []
    for i in range(n):
        if i % 50 == 7:
            items.append(DeadLetter(raw=b"{x", reason="invalid JSON: Expecting value at col 2"))
        elif i % 40 == 3:
            items.append({"key": f"user-{i % n_keys}", "value": -1.0})
        else:
            items.append({"key": f"user-{i % n_keys}", "value": float(i % 10)})
    return items


def test_replay_counters_match_the_summary_in_the_exposition(server):
    items = _stream()
    m = server.stage("replay", "unit")
    summary = Pipeline(items, [Above(level=5.0, name="above5"), Above(level=7.0, name="above7")],
                       batch_size=64, progress=False, metrics=m).run()
    samples = _scrape(server)
    lv = _labels(pipeline="replay", stage="unit")
    good = [it for it in items if isinstance(it, dict) and it["value"] >= 0]
    assert samples[("shiftwatch_records_in_total", lv)] == len(items) == summary.records_in
    assert samples[("shiftwatch_records_out_total", lv)] == len(good) == summary.outputs
    for op, level in (("above5", 5.0), ("above7", 7.0)):
        want = sum(1 for it in good if it["value"] > level)
        alarms = _labels(pipeline="replay", stage="unit", operator=op)
        assert samples[("shiftwatch_alarms_total", alarms)] == want
    n_decode = sum(1 for it in items if isinstance(it, DeadLetter))
    n_range = sum(1 for it in items if isinstance(it, dict) and it["value"] < 0)
    dl = "shiftwatch_dead_letters_total"
    assert samples[(dl, _labels(pipeline="replay", stage="unit", reason="decode"))] == n_decode
    assert samples[(dl, _labels(pipeline="replay", stage="unit", reason="out_of_range"))] \
        == n_range
    assert n_decode and n_range and all(  # the stream really has alarms of both operators
        samples[("shiftwatch_alarms_total", _labels(pipeline="replay", stage="unit",
                                                    operator=op))] for op in ("above5",
                                                                              "above7"))
    assert n_decode + n_range == summary.dead_letters
    # One histogram observation per batch handed to the operators.
    n_batches = -(-(len(items) - n_decode) // 64)
    assert samples[("shiftwatch_batch_seconds_count", lv)] == n_batches
    assert samples[("shiftwatch_stage_ready", lv)] == 0.0  # the replay ended


def _series(text: str) -> set:
    return {(s.name, tuple(sorted(s.labels.items())))
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_label_values_hold_record_keys_only_in_the_bounded_key_series(server):
    items = _stream(n_keys=400, n=2000)
    m = server.stage("replay", "many-keys", max_key_series=30)
    Pipeline(items, [Above()], batch_size=100, progress=False, metrics=m).run()
    status, body = _get(f"http://127.0.0.1:{server.port}/metrics")
    text = body.decode()
    assert "user-" in text
    key_family = ("shiftwatch_key_alarms_total", "shiftwatch_key_alarms_created")
    assert all(line.startswith(key_family) for line in text.splitlines() if "user-" in line)
    series = _series(text)
    small = _series(_body_after(_stream(n_keys=5, n=2000)))
    # Beside the key series, the series depend on configuration (stage, operators, reason
    # classes), not on the keys; the key series are at most max_key_series + _other.
    assert ({x for x in series if x[0] not in key_family}
            == {x for x in small if x[0] not in key_family})
    keys = {dict(lab)["key"] for name, lab in series if name == "shiftwatch_key_alarms_total"}
    assert len(keys) == 31 and "_other" in keys
    alarming = {it["key"] for it in items if isinstance(it, dict) and it["value"] > 5}
    assert len(alarming) > 31
    assert m.key_alarms.folded_keys == len(alarming) - 30
    few = {it["key"] for it in _stream(n_keys=5, n=2000) if isinstance(it, dict)
           and it["value"] > 5}
    assert {dict(lab)["key"] for name, lab in small if name == "shiftwatch_key_alarms_total"} \
        == few and len(few) == 4


def _body_after(items) -> str:
    s = MetricsServer(port=0, address="127.0.0.1").start()
    try:
        Pipeline(items, [Above()], batch_size=100, progress=False,
                 metrics=s.stage("replay", "many-keys")).run()
        return _get(f"http://127.0.0.1:{s.port}/metrics")[1].decode()
    finally:
        s.close()


def test_reason_classes_are_bounded():
    reasons = ["invalid JSON: Expecting value at column 3", "message is not UTF-8 text",
               "record has no field 'temp'", "temp 'abc' is not a number",
               "value has shape (3,), expected a square matrix", "value 9 is outside [0, 1]",
               "label y=7 is not a class index in 0..2", "a brand new failure 123"]
    got = [reason_class(r) for r in reasons]
    assert got == ["decode", "decode", "missing_field", "not_a_number", "shape",
                   "out_of_range", "out_of_range", "other"]
    assert set(got) <= set(REASON_CLASSES)


def test_healthz_fails_after_consecutive_stalls_and_recovers(server):
    m = server.stage("p", "s", stalls_before_unhealthy=2, slow_batch_seconds=0.5)
    url = f"http://127.0.0.1:{server.port}"
    assert _get(url + "/healthz")[0] == 200
    m.batch(1.0)
    assert _get(url + "/healthz")[0] == 200
    m.batch(0.1)  # a normal batch resets the run of stalls
    m.batch(1.0)
    assert _get(url + "/healthz")[0] == 200
    m.batch(2.0)
    status, body = _get(url + "/healthz")
    assert status == 503
    assert json.loads(body)["stages"]["p/s"]["consecutive_stalls"] == 2
    assert _scrape(server)[("shiftwatch_slow_batches_total",
                            (("pipeline", "p"), ("stage", "s")))] == 3
    m.batch(0.1)
    assert _get(url + "/healthz")[0] == 200


def test_healthz_fails_when_the_loop_stops_turning(server):
    m = server.stage("p", "s", liveness_seconds=0.2)
    assert _get(f"http://127.0.0.1:{server.port}/healthz")[0] == 200
    import time

    time.sleep(0.3)
    assert _get(f"http://127.0.0.1:{server.port}/healthz")[0] == 503
    m.turn()
    assert _get(f"http://127.0.0.1:{server.port}/healthz")[0] == 200


def test_readyz_follows_assignment(server):
    url = f"http://127.0.0.1:{server.port}/readyz"
    assert _get(url)[0] == 503  # no stage yet
    a, b = server.stage("p", "a"), server.stage("p", "b")
    a.set_ready(True)
    assert _get(url)[0] == 503  # every stage must be ready
    b.set_ready(True)
    assert _get(url)[0] == 200
    a.set_ready(False)  # a rebalance
    status, body = _get(url)
    assert status == 503 and json.loads(body)["stages"] == {"p/a": False, "p/b": True}


def test_lag_series_follow_owned_partitions(server):
    m = server.stage("p", "s")
    m.partitions({0: 5, 1: 0, 2: None})
    s = _scrape(server)
    lv = (("pipeline", "p"), ("stage", "s"))
    assert s[("shiftwatch_partitions_owned", lv)] == 3
    assert s[("shiftwatch_consumer_lag_records", (("partition", "0"), *lv))] == 5
    assert ("shiftwatch_consumer_lag_records", (("partition", "2"), *lv)) not in s
    m.partitions({1: 4})  # partition 0 was revoked: its series goes away
    s = _scrape(server)
    assert ("shiftwatch_consumer_lag_records", (("partition", "0"), *lv)) not in s
    assert s[("shiftwatch_consumer_lag_records", (("partition", "1"), *lv))] == 4
    assert s[("shiftwatch_partitions_owned", lv)] == 1


def test_metrics_config_is_validated():
    base = {"pipeline": "p", "stages": [{"name": "d", "input": "a", "output": "b",
                                         "operator": "river:ADWIN"}]}
    cfg = parse_pipeline({**base, "metrics": {"port": 9400, "stalls_before_unhealthy": 2}})
    assert cfg.metrics["port"] == 9400 and cfg.metrics["stalls_before_unhealthy"] == 2
    assert parse_pipeline(base).metrics["port"] is None
    for bad, msg in (({"port": "x"}, "metrics.port"), ({"port": 70000}, "metrics.port"),
                     ({"stalls_before_unhealthy": 0}, "stalls_before_unhealthy"),
                     ({"prot": 1}, "unknown key 'prot'")):
        with pytest.raises(PipelineError, match=re.escape(msg)):
            parse_pipeline({**base, "metrics": bad})


def test_replay_cli_serves_metrics(tmp_path):
    src = tmp_path / "x.jsonl"
    src.write_text("".join(json.dumps({"value": float(i % 7)}) + "\n" for i in range(300)))
    rc = main(["replay", str(src), "--operator", "river:ADWIN", "--out", str(tmp_path / "o"),
               "--no-plots", "--no-progress", "--quiet", "--metrics-port", "0"])
    assert rc == 0


def test_replay_serves_metrics_while_it_runs(tmp_path):
    import socket
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    src = tmp_path / "x.jsonl"
    src.write_text("".join(json.dumps({"ts": i * 0.01, "value": float(i % 7)}) + "\n"
                           for i in range(400)))  # 4 s of data, replayed at real time
    proc = subprocess.Popen(
        [sys.executable, "-m", "shiftwatch.deploy.cli", "replay", str(src), "--operator",
         "river:ADWIN", "--out", str(tmp_path / "o"), "--no-plots", "--no-progress", "--quiet",
         "--speed", "1", "--source-opt", "ts=ts", "--metrics-port", str(port)], cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        seen = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            status, body = _get(f"http://127.0.0.1:{port}/metrics")
            if status == 200:
                for fam in text_string_to_metric_families(body.decode()):
                    for smp in fam.samples:
                        if smp.name == "shiftwatch_records_in_total" and smp.value > 0:
                            seen = smp
                if seen is not None:
                    assert _get(f"http://127.0.0.1:{port}/readyz")[0] == 200
                    break
            time.sleep(0.1)
        assert seen is not None, "no records_in > 0 scraped while the replay ran"
        assert seen.value < 400 and seen.labels == {"pipeline": "replay", "stage": "x"}
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_cli_import_does_not_load_prometheus_client():
    code = ("import sys; import shiftwatch.deploy.cli as c; c.build_parser(); "
            "print('prometheus_client' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


# ---- the Grafana dashboard -------------------------------------------------------------


def _exported_sample_names() -> set[str]:
    names = set()
    for name, (kind, _, _) in METRICS.items():
        if kind == "histogram":
            names |= {name + "_bucket", name + "_sum", name + "_count"}
        else:
            names.add(name)
    return names


def _panel_exprs(dash: dict) -> list[str]:
    out = []
    for panel in dash["panels"]:
        for sub in [panel, *panel.get("panels", [])]:
            out += [t["expr"] for t in sub.get("targets", []) if "expr" in t]
    return out


def test_dashboard_queries_name_exported_metrics():
    dash = json.loads(DASHBOARD.read_text())
    exprs = _panel_exprs(dash)
    assert len(exprs) >= 6
    exported = _exported_sample_names()
    used = set()
    for e in exprs:
        names = set(re.findall(r"\bshiftwatch_[a-z_]+\b", e))
        assert names, f"query names no shiftwatch metric: {e}"
        assert names <= exported, f"unknown metric in {e}: {names - exported}"
        assert 'pipeline=~"$pipeline"' in e and 'stage=~"$stage"' in e, e
        used |= names
    # The board covers what the issue lists.
    for want in ("shiftwatch_records_in_total", "shiftwatch_consumer_lag_records",
                 "shiftwatch_dead_letters_total", "shiftwatch_alarms_total",
                 "shiftwatch_last_checkpoint_age_seconds", "shiftwatch_batch_seconds_bucket",
                 "shiftwatch_key_alarms_total", "shiftwatch_key_alarms_folded_keys"):
        assert want in used
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert {"pipeline", "stage"} <= set(variables)
    for v in ("pipeline", "stage"):
        q = variables[v]["query"]
        q = q["query"] if isinstance(q, dict) else q
        assert set(re.findall(r"\bshiftwatch_[a-z_]+\b", q)) <= exported


def test_dashboard_metric_names_are_served(server):
    """The names the board queries are what a real scrape serves (not only the table)."""
    m = server.stage("p", "s", slow_batch_seconds=1.0)
    m.batch(0.01)
    m.alarms("op", 1, keys={"k": 1})
    m.alert("sent")
    m.dead_letter("invalid JSON")
    m.checkpoint(0.1)
    m.partitions({0: 1})
    m.rebalance()
    served = {s.name for fam in text_string_to_metric_families(
        _get(f"http://127.0.0.1:{server.port}/metrics")[1].decode()) for s in fam.samples}
    used = {n for e in _panel_exprs(json.loads(DASHBOARD.read_text()))
            for n in re.findall(r"\bshiftwatch_[a-z_]+\b", e)}
    assert used <= served, used - served
    assert _exported_sample_names() <= served


# ---- the probes in the deployment files ------------------------------------------------


def test_k8s_probes_use_the_metrics_port():
    import yaml

    doc = yaml.safe_load((ROOT / "deploy" / "k8s" / "detect-stage.yaml").read_text())
    container = doc["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    port = int(args[args.index("--metrics-port") + 1])
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named["metrics"] == port
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


def test_compose_healthcheck_command_follows_liveness(server):
    import yaml

    doc = yaml.safe_load((ROOT / "deploy" / "docker" / "docker-compose.yml").read_text())
    for name in ("scale", "detect"):
        svc = doc["services"][name]
        port = svc["command"][svc["command"].index("--metrics-port") + 1]
        test = svc["healthcheck"]["test"]
        assert test[0] == "CMD" and f"127.0.0.1:{port}/healthz" in test[-1]
    # The command itself, run against a server here: exit 0 while live, non-zero when stalled.
    cmd = [sys.executable if a == "python" else a.replace(f":{port}/", f":{server.port}/")
           for a in test[1:]]
    m = server.stage("p", "s", stalls_before_unhealthy=1, slow_batch_seconds=0.1)
    assert subprocess.run(cmd, capture_output=True).returncode == 0
    m.batch(1.0)
    assert subprocess.run(cmd, capture_output=True).returncode != 0


# ---- the connection to the cluster -----------------------------------------------------


def test_disconnection_fails_readiness_at_once_and_liveness_after_the_liveness_time(server):
    import time

    m = server.stage("p", "s", liveness_seconds=0.5)
    m.set_ready(True)
    url = f"http://127.0.0.1:{server.port}"
    assert _get(url + "/readyz")[0] == 200 and _get(url + "/healthz")[0] == 200
    m.connected(False)
    status, body = _get(url + "/readyz")
    assert status == 503
    body = json.loads(body)
    assert body["stages"] == {"p/s": False}
    assert body["why"]["p/s"]["assigned"] is True and body["why"]["p/s"]["connected"] is False
    status, body = _get(url + "/healthz")  # the loop turns: live for the liveness time
    assert status == 200 and json.loads(body)["stages"]["p/s"]["connected"] is False
    lv = (("pipeline", "p"), ("stage", "s"))
    assert _scrape(server)[("shiftwatch_stage_connected", lv)] == 0.0
    assert _scrape(server)[("shiftwatch_stage_ready", lv)] == 0.0
    deadline = time.monotonic() + 0.7
    while time.monotonic() < deadline:  # turning all along: only the disconnection counts
        m.turn()
        m.connected(False)  # the stage reports it every turn; the time counts from the first
        time.sleep(0.05)
    status, body = _get(url + "/healthz")
    stage = json.loads(body)["stages"]["p/s"]
    assert status == 503 and stage["live"] is False and stage["seconds_disconnected"] > 0.5
    assert stage["seconds_since_loop_turn"] < 0.5
    m.connected(True)
    assert _get(url + "/healthz")[0] == 200 and _get(url + "/readyz")[0] == 200
    assert _scrape(server)[("shiftwatch_stage_connected", lv)] == 1.0


# ---- a bounded number of threads -------------------------------------------------------


def _server_threads() -> list:
    import threading

    return [t for t in threading.enumerate() if t.name.startswith("shiftwatch-metrics")]


def test_idle_connections_take_no_thread_and_metrics_still_answers(server):
    import socket
    import threading
    import time

    from shiftwatch.deploy import observability as obs

    server.stage("p", "s").set_ready(True)
    assert len(_server_threads()) == obs.HTTP_WORKERS + 1  # the acceptor and the workers
    before = threading.active_count()
    idle = []
    try:
        for _ in range(300):  # connect and send nothing
            idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        time.sleep(0.5)
        during = threading.active_count()
        t0 = time.monotonic()
        status, body = _get(f"http://127.0.0.1:{server.port}/metrics")
        took = time.monotonic() - t0
        assert status == 200 and b"shiftwatch_stage_ready" in body
        assert _get(f"http://127.0.0.1:{server.port}/readyz")[0] == 200
        assert during == before, (before, during)  # not one thread per connection
        assert len(_server_threads()) == obs.HTTP_WORKERS + 1
        assert took < 2, took
        # Beyond MAX_OPEN_CONNECTIONS the oldest idle connections were closed by the server.
        closed = 0
        for s in idle:
            s.setblocking(False)
            try:
                closed += s.recv(1) == b""
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        assert 300 - obs.MAX_OPEN_CONNECTIONS - 1 <= closed < 300, closed
        print(f"300 idle connections: {during} threads in the process ({before} before), "
              f"{len(_server_threads())} of the server, {closed} closed by it, /metrics in "
              f"{took * 1000:.0f} ms")
    finally:
        for s in idle:
            s.close()


def test_an_idle_connection_is_closed_after_the_idle_timeout(monkeypatch):
    import socket
    import time

    from shiftwatch.deploy import observability as obs

    monkeypatch.setattr(obs, "IDLE_TIMEOUT_S", 0.5)
    s = MetricsServer(port=0, address="127.0.0.1").start()
    try:
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as idle:
            t0 = time.monotonic()
            assert idle.recv(1) == b""  # the server closed it
            assert 0.4 < time.monotonic() - t0 < 3
        assert _get(f"http://127.0.0.1:{s.port}/healthz")[0] == 200
    finally:
        s.close()


def test_metrics_host_defaults_to_loopback_for_replay_and_overrides_run(tmp_path, monkeypatch):
    from shiftwatch.deploy.kafka import run as kafka_run

    bound = []
    original = MetricsServer.start

    def start(self):
        original(self)
        bound.append(self._server.socket.getsockname()[0])
        return self

    monkeypatch.setattr(MetricsServer, "start", start)
    src = tmp_path / "x.jsonl"
    src.write_text("".join(json.dumps({"value": float(i % 7)}) + "\n" for i in range(50)))
    argv = ["replay", str(src), "--operator", "river:ADWIN", "--out", str(tmp_path / "o"),
            "--no-plots", "--no-progress", "--quiet", "--metrics-port", "0"]
    assert main(argv) == 0
    assert main([*argv, "--metrics-host", "0.0.0.0"]) == 0
    assert bound == ["127.0.0.1", "0.0.0.0"]

    seen = []
    monkeypatch.setattr(kafka_run, "run_pipeline",
                        lambda config, **kw: seen.append(config.metrics["address"]) or 0)
    pipeline = ROOT / "deploy" / "examples" / "sensors.yaml"
    assert main(["run", str(pipeline)]) == 0
    assert main(["run", str(pipeline), "--metrics-host", "127.0.0.1"]) == 0
    assert seen == ["0.0.0.0", "127.0.0.1"]  # the file's default, then the option
