"""Which topics a stage creates (issue 24, item 8): a typo'd input is an error, not an idle
stage that exits 0."""

from __future__ import annotations

from kafka import KafkaAdminClient
from kafka_helpers import create_topics, group_timing, unique, write_pipeline

from shiftwatch.deploy.cli import main


def _topics(bootstrap: str) -> set[str]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def test_a_missing_input_is_an_error_naming_the_topics_that_look_alike(
        kafka_bootstrap, real_kafka, tmp_path, capsys):
    name = unique()
    create_topics(kafka_bootstrap, 1, f"{name}.raw")
    path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap, [
        {"name": "s", "input": f"{name}.rwa", "output": f"{name}.out", "operator": "river:ADWIN",
         "consumer": group_timing(real_kafka)}], topics={"create": True})
    assert main(["run", str(path), "--exit-when-idle", "1"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1, err
    line = err[0]
    assert line.startswith(f"shiftwatch: error: {path}: stage s: topic '{name}.rwa' does not "
                           f"exist (topics that look alike: {name}.raw); ")
    assert "topics: {create_input: true}" in line
    topics = _topics(kafka_bootstrap)
    assert f"{name}.rwa" not in topics  # nothing created, nothing consumed
    assert f"{name}.out" not in topics and f"{name}.s.dlq" not in topics


def test_create_input_creates_it_and_create_makes_what_stages_write(
        kafka_bootstrap, real_kafka, tmp_path):
    timing = group_timing(real_kafka)
    name = unique()
    path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap, [
        {"name": "s", "input": f"{name}.in", "output": f"{name}.out", "operator": "river:ADWIN",
         "consumer": timing}], topics={"create": True, "create_input": True, "partitions": 2})
    assert main(["run", str(path), "--exit-when-idle", "0.5", "--quiet"]) == 0
    topics = _topics(kafka_bootstrap)
    assert {f"{name}.in", f"{name}.out", f"{name}.s.dlq", f"{name}.s.changelog"} <= topics
    # An input another stage of the file writes is created with topics.create alone, also
    # when that stage runs in another process (here: not at all).
    name = unique()
    path = write_pipeline(tmp_path / "q.yaml", name, kafka_bootstrap, [
        {"name": "a", "input": f"{name}.raw", "output": f"{name}.mid", "operator": "standardize",
         "consumer": timing},
        {"name": "b", "input": f"{name}.mid", "output": f"{name}.out", "operator": "river:ADWIN",
         "consumer": timing}], topics={"create": True})
    assert main(["run", str(path), "--stage", "b", "--exit-when-idle", "0.5", "--quiet"]) == 0
    topics = _topics(kafka_bootstrap)
    assert {f"{name}.mid", f"{name}.out"} <= topics and f"{name}.raw" not in topics
