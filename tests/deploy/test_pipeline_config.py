"""Pipeline files: validation errors are one line and come before anything is consumed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from shiftwatch.deploy.cli import main
from shiftwatch.deploy.pipeline import PipelineError, load_pipeline, parse_pipeline

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "deploy" / "examples").glob("*.yaml"))

GOOD = {"pipeline": "p", "kafka": {"bootstrap_servers": "k:9092"},
        "stages": [{"name": "s", "input": "in", "output": "out", "operator": "river:ADWIN"}]}


def _with(stage_changes=None, **top):
    d = yaml.safe_load(yaml.safe_dump(GOOD))
    d.update(top)
    if stage_changes:
        d["stages"][0].update(stage_changes)
    return d


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_valid(path):
    cfg = load_pipeline(path)
    assert cfg.stages
    for stage in cfg.stages:
        for spec in stage.operators:
            spec.build()


def test_examples_exist():
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("data, message", [
    (_with({"oprator": "x"}), "stages[0] (s): unknown key 'oprator'"),
    (_with(extra=1), "top level: unknown key 'extra'"),
    (_with({"operator": "nope"}), "stages[0] (s): unknown operator 'nope'"),
    (_with({"operator": "standardize", "params": {"burn_in": 1}}),
     "stages[0] (s): standardize: burn_in must be an integer in [2, 10,000,000]"),
    (_with({"params": {"deltaa": 1}}), "has no parameter 'deltaa'"),
    (_with({"input": None}), "missing 'input' topic"),
    (_with({"output": "in"}), "input and output are the same topic"),
    (_with({"guarantee": "at-most-once"}), "guarantee must be one of"),
    (_with({"checkpoint": {"every_records": 0}}), "checkpoint.every_records must be"),
    (_with({"checkpoint": {"restore": "later"}}),
     "stages[0] (s): checkpoint.restore must be one of lazy, eager, got 'later'"),
    (_with({"batch": {"size": 3}}), "batch: unknown key 'size'"),
    (_with({"consumer": {"assignor": "cooperative"}}),
     "stages[0] (s): consumer.assignor must be one of cooperative-sticky, range, roundrobin, "
     "sticky, got 'cooperative'"),
    (_with(kafka={"bootstrap_servers": "x", "sasl_pasword": "p"}),
     "kafka: unknown key 'sasl_pasword'"),
    (_with(stages=[]), "'stages' must be a non-empty list"),
    (_with(pipeline="bad name"), "'pipeline' must be a name"),
    (_with(stages=[GOOD["stages"][0], GOOD["stages"][0]]), "duplicate stage name 's'"),
    (_with({"operator": None, "operators": [{"operator": "river:ADWIN"}]}),
     "either 'operator'"),
])
def test_bad_pipelines_give_one_line(data, message):
    with pytest.raises(PipelineError) as info:
        parse_pipeline(data, source="p.yaml")
    text = str(info.value)
    assert message in text
    assert text.startswith("p.yaml: ") and "\n" not in text


def test_security_settings_and_env_pass_through(monkeypatch):
    monkeypatch.setenv("KAFKA_PW", "s3cret")
    cfg = parse_pipeline(_with(kafka={
        "bootstrap_servers": "${BOOT:-b:9093}", "security_protocol": "SASL_SSL",
        "sasl_mechanism": "PLAIN", "sasl_plain_username": "u",
        "sasl_plain_password": "${KAFKA_PW}", "ssl_cafile": "/ca.pem"}))
    assert cfg.kafka == {"bootstrap_servers": "b:9093", "security_protocol": "SASL_SSL",
                         "sasl_mechanism": "PLAIN", "sasl_plain_username": "u",
                         "sasl_plain_password": "s3cret", "ssl_cafile": "/ca.pem"}
    monkeypatch.delenv("KAFKA_PW")
    with pytest.raises(PipelineError, match="environment variable KAFKA_PW is not set"):
        parse_pipeline(_with(kafka={"sasl_plain_password": "${KAFKA_PW}"}))


def test_stage_defaults_and_names():
    cfg = parse_pipeline(_with({"checkpoint": {"every_records": 7}},
                               guarantee="exactly-once"))
    s = cfg.stages[0]
    assert s.guarantee == "exactly-once" and s.checkpoint["every_records"] == 7
    assert s.checkpoint["every_seconds"] == 10.0
    assert cfg.changelog_topic(s) == "p.s.changelog" and cfg.group_id(s) == "p.s"
    with pytest.raises(PipelineError, match="no stage 'x'"):
        cfg.stage("x")


def test_cli_run_bad_file_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(_with({"operator": "river:ADWIN", "params": {"x": 1}})))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no parameter 'x'" in err[0]
    path.write_text("stages: [\n")
    assert main(["run", str(path)]) == 2
    assert "invalid YAML" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "none.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err


# ---- the kafka: section (issue 24, item 7) ----------------------------------------------


def test_bootstrap_timeout_ms_and_every_kafka_python_setting_pass_through():
    """Everything kafka-python 3's clients accept (DEFAULT_CONFIG) passes, except what the
    stage sets itself and what only Python can give; each client gets only its own."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    from shiftwatch.deploy.pipeline import (
        PYTHON_OBJECT_SETTINGS,
        STAGE_SETTINGS,
        client_settings,
    )

    cfg = parse_pipeline(_with(kafka={"bootstrap_servers": "k:9092",
                                      "bootstrap_timeout_ms": 2500}))
    assert cfg.kafka["bootstrap_timeout_ms"] == 2500
    classes = {"consumer": KafkaConsumer, "producer": KafkaProducer, "admin": KafkaAdminClient}
    every = {k: v for cls in classes.values() for k, v in cls.DEFAULT_CONFIG.items()}
    passed = {k: v for k, v in every.items()
              if k not in STAGE_SETTINGS and k not in PYTHON_OBJECT_SETTINGS}
    assert {"ssl_ciphers", "client_rack", "delivery_timeout_ms", "fetch_min_bytes",
            "retry_backoff_ms", "enable_idempotence"} <= set(passed)
    cfg = parse_pipeline(_with(kafka=passed))
    for client, cls in classes.items():
        mine = client_settings(cfg.kafka, client)
        assert set(mine) == set(passed) & set(cls.DEFAULT_CONFIG), client
    assert "ssl_ciphers" not in client_settings(cfg.kafka, "admin")
    assert "client_rack" in client_settings(cfg.kafka, "consumer")
    assert "client_rack" not in client_settings(cfg.kafka, "producer")


def test_admin_client_takes_what_the_kafka_section_gives_it():
    """`ssl_ciphers` was allowed and given to the admin client too, which refused it
    (KafkaConfigurationError: Unrecognized configs) before the stage started."""
    import socket

    from kafka import KafkaAdminClient
    from kafka.errors import KafkaConfigurationError

    from shiftwatch.deploy.pipeline import client_settings

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = parse_pipeline(_with(kafka={"bootstrap_servers": f"127.0.0.1:{port}",
                                      "ssl_ciphers": "ALL", "bootstrap_timeout_ms": 300}))
    with pytest.raises(Exception) as info:  # nobody listens: not a configuration error
        KafkaAdminClient(**client_settings(cfg.kafka, "admin"))
    assert not isinstance(info.value, KafkaConfigurationError), info.value


@pytest.mark.parametrize("key, words", [
    ("group_id", "kafka: group_id is set by the stage, not here: the stage's group id is "
                 "<pipeline>.<stage>"),
    ("enable_auto_commit", "commits an offset only after checkpointing"),
    ("transactional_id", "exactly-once"),
    ("isolation_level", "read_committed"),
    ("value_deserializer", "message bytes"),
    ("max_poll_records", "batch.max_records"),
    ("session_timeout_ms", "set consumer.session_timeout_ms"),
    ("compression_type", "set producer.compression_type"),
    ("linger_ms", "set producer.linger_ms"),
    ("partitioner", "Python object"),
    ("partition_assignment_strategy", "set consumer.assignor (cooperative-sticky, range, "
                                      "roundrobin, sticky; per stage if need be)"),
])
def test_settings_the_stage_sets_are_refused_with_why(key, words):
    with pytest.raises(PipelineError) as info:
        parse_pipeline(_with(kafka={"bootstrap_servers": "k", key: 1}), source="p.yaml")
    text = str(info.value)
    assert words in text and "\n" not in text


def test_an_unknown_kafka_setting_lists_the_accepted_ones():
    with pytest.raises(PipelineError) as info:
        parse_pipeline(_with(kafka={"bootstrap_servers": "k", "bootstrap_timeout": 5}),
                       source="p.yaml")
    text = str(info.value)
    assert text.startswith("p.yaml: kafka: unknown key 'bootstrap_timeout'; kafka-python's "
                           "client settings: ") and "\n" not in text
    assert "bootstrap_timeout_ms" in text and "sasl_plain_password" in text
    assert "group_id" not in text.split("settings: ")[1].split(", ")


def test_kafka_setting_values_that_the_stage_reads_are_checked():
    with pytest.raises(PipelineError, match="bootstrap_timeout_ms must be a positive integer"):
        parse_pipeline(_with(kafka={"bootstrap_servers": "k", "bootstrap_timeout_ms": "5s"}))
    cfg = parse_pipeline(_with(kafka={"bootstrap_servers": "k", "api_version": [2, 5, 0]}))
    assert cfg.kafka["api_version"] == (2, 5, 0)
    cfg = parse_pipeline(_with(kafka={"bootstrap_servers": "k", "api_version": "2.5.0"}))
    assert cfg.kafka["api_version"] == (2, 5, 0)


def test_emit_per_stage_or_top_level():
    assert parse_pipeline(GOOD).stages[0].emit == "all"
    assert parse_pipeline(_with(emit="alarms")).stages[0].emit == "alarms"
    assert parse_pipeline(_with({"emit": "all"}, emit="alarms")).stages[0].emit == "all"
    with pytest.raises(PipelineError, match="emit must be one of all, alarms"):
        parse_pipeline(_with({"emit": "alarm"}))


def test_topics_create_input_defaults_to_false():
    cfg = parse_pipeline(_with(topics={"create": True}))
    assert cfg.topics["create"] is True and cfg.topics["create_input"] is False
    with pytest.raises(PipelineError, match="topics.create_input must be true or false"):
        parse_pipeline(_with(topics={"create_input": "yes"}))


def test_consumer_assignor_defaults_to_cooperative_sticky_and_is_per_stage():
    cfg = parse_pipeline(_with(consumer={"assignor": "range"},
                               stages=[GOOD["stages"][0],
                                       {**GOOD["stages"][0], "name": "t", "output": "o2",
                                        "consumer": {"assignor": "sticky"}}]))
    assert [s.consumer["assignor"] for s in cfg.stages] == ["range", "sticky"]
    assert parse_pipeline(_with()).stages[0].consumer["assignor"] == "cooperative-sticky"


@pytest.mark.parametrize("name, protocol", [("cooperative-sticky", "COOPERATIVE"),
                                            ("range", "EAGER"), ("roundrobin", "EAGER"),
                                            ("sticky", "EAGER")])
def test_each_assignor_is_a_kafka_python_assignor_that_notes_joins(name, protocol):
    from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor, RebalanceProtocol

    from shiftwatch.deploy.kafka.stage import StageRunner

    cfg = parse_pipeline(_with({"consumer": {"assignor": name}}))
    r = StageRunner(cfg, cfg.stages[0])
    assert r.cooperative == (protocol == "COOPERATIVE")
    a = r._assignor(name)
    assert isinstance(a, AbstractPartitionAssignor) and a.name == name
    assert max(a.supported_protocols()) == getattr(RebalanceProtocol, protocol)

    class Assignment:
        def partitions(self):
            return []

    assert r._joined is False
    a.on_assignment(Assignment(), 3)
    assert r._joined is True


def test_kafka_client_is_checked_and_librdkafka_settings_pass_through(monkeypatch):
    from shiftwatch.deploy.kafka import clients

    with pytest.raises(PipelineError) as info:
        parse_pipeline(_with(kafka={"bootstrap_servers": "k", "client": "rdkafka"}),
                       source="p.yaml")
    assert str(info.value) == ("p.yaml: kafka: client must be one of kafka-python, confluent, "
                               "got 'rdkafka'")
    with pytest.raises(PipelineError, match="librdkafka must map"):
        parse_pipeline(_with(kafka={"bootstrap_servers": "k", "librdkafka": ["x"]}))
    cfg = parse_pipeline(_with(kafka={"bootstrap_servers": "k", "client": "confluent",
                                      "librdkafka": {"socket.keepalive.enable": True}}))
    assert clients.client_kind(cfg.kafka) == "confluent"
    monkeypatch.setenv("SHIFTWATCH_KAFKA_CLIENT", "confluent")
    assert clients.client_kind({}) == "confluent"
    assert clients.client_kind({"client": "kafka-python"}) == "kafka-python"  # the file wins
    assert "must be one of" in clients.check_client("nope")
    conf = clients.rdkafka_conf({"bootstrap_servers": ["a:1", "b:2"], "linger_ms": 5,
                                 "bootstrap_timeout_ms": 1000, "compression_type": None,
                                 "librdkafka": {"socket.keepalive.enable": True}})
    assert conf == {"bootstrap.servers": "a:1,b:2", "linger.ms": 5,
                    "socket.keepalive.enable": True, "logger": conf["logger"],
                    "allow.auto.create.topics": False}
    # no client creates a topic by naming it, whatever kafka.librdkafka says
    assert clients.rdkafka_conf({"librdkafka": {"allow.auto.create.topics": True}})[
        "allow.auto.create.topics"] is False
    with pytest.raises(PipelineError, match="allow_auto_create_topics is set by the stage"):
        parse_pipeline(_with(kafka={"bootstrap_servers": "k", "allow_auto_create_topics": True}))


def test_confluent_errors_are_classified():
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from shiftwatch.deploy.kafka.connect import is_unreachable, lost_cluster

    KafkaError, KafkaException = confluent_kafka.KafkaError, confluent_kafka.KafkaException
    assert lost_cluster(KafkaException(KafkaError(KafkaError._TRANSPORT, "down"))) == \
        "_TRANSPORT: down"
    assert lost_cluster(KafkaException(KafkaError(KafkaError.NOT_COORDINATOR))) is not None
    assert lost_cluster(KafkaException(KafkaError(KafkaError._FATAL, "fenced", fatal=True))) \
        is None
    assert lost_cluster(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))) \
        is None
    assert is_unreachable(KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN)))


@pytest.mark.parametrize("assignor, librdkafka, cooperative", [
    ("cooperative-sticky", {}, True), ("range", {}, False), ("roundrobin", {}, False),
    ("sticky", {}, False),  # librdkafka has no eager sticky: range
    ("cooperative-sticky", {"partition.assignment.strategy": "range"}, False)])
def test_the_confluent_client_runs_librdkafkas_assignors(assignor, librdkafka, cooperative):
    from shiftwatch.deploy.kafka.stage import StageRunner

    kafka = {"bootstrap_servers": "127.0.0.1:9", "client": "confluent",
             **({"librdkafka": librdkafka} if librdkafka else {})}
    cfg = parse_pipeline(_with(kafka=kafka, consumer={"assignor": assignor}))
    runner = StageRunner(cfg, cfg.stages[0])
    runner._clients()  # no broker needed: librdkafka connects in the background
    try:
        assert runner.cooperative is cooperative
        assert runner._consumer.cooperative is cooperative
    finally:
        runner._drop_clients()


def test_an_alias_bomb_is_refused_at_once(tmp_path):
    # nine nested YAML aliases expand to 10**9 values: the loader used to copy them all
    levels = ['        - &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 9):
        refs = ",".join([f"*a{i - 1}"] * 10)
        levels.append(f"        - &a{i} [{refs}]")
    path = tmp_path / "bomb.yaml"
    path.write_text("pipeline: p\nkafka: {bootstrap_servers: 'k:9092'}\nstages:\n"
                    "  - name: d\n    input: a\n    output: b\n    operator: river:ADWIN\n"
                    "    params:\n      delta:\n" + "\n".join(levels) + "\n")
    import time

    from shiftwatch.deploy.pipeline import PipelineError, load_pipeline

    t0 = time.monotonic()
    with pytest.raises(PipelineError, match="expands to more than 100,000 values"):
        load_pipeline(path)
    assert time.monotonic() - t0 < 5


def test_a_pipeline_file_too_large_or_too_deep_is_refused(tmp_path):
    from shiftwatch.deploy.pipeline import PipelineError, load_pipeline

    big = tmp_path / "big.yaml"
    big.write_text("pipeline: p\n# " + "x" * (2 * 1024 * 1024) + "\n")
    with pytest.raises(PipelineError, match="bytes; a pipeline file holds at most"):
        load_pipeline(big)
    deep = tmp_path / "deep.yaml"
    deep.write_text("pipeline: p\nkafka: {bootstrap_servers: 'k:9092'}\nstages:\n"
                    "  - {name: d, input: a, output: b, operator: river:ADWIN, params: {delta: "
                    + "[" * 40 + "]" * 40 + "}}\n")
    with pytest.raises(PipelineError, match="nested more than 32 levels"):
        load_pipeline(deep)
