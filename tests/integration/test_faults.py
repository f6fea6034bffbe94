"""Fault injection against the real broker: hostile messages, broken changelogs, errors
mid-batch, compression, a graceful hand-over. After each run every input offset must be in
the output topic (de-duplicated by input coordinates) or in the dead-letter topic, exactly
once, and never in both.
"""

from __future__ import annotations

import json
import signal

import numpy as np
import pytest
from kafka import KafkaProducer
from kafka_helpers import (
    create_topics,
    group_timing,
    read_topic,
    start_stage_process,
    unique,
    wait_for,
    write_pipeline,
)

from shiftwatch.deploy.cli import main
from shiftwatch.deploy.deduper import dedupe
from shiftwatch.deploy.kafka.changelog import encode_group, encode_marker

N = 100
HOSTILE_AT = 50


def _stage(name: str, timing: dict, operators=None, **extra) -> dict:
    ops = operators or [{"operator": "river:ADWIN", "params": {}}]
    return {"name": "det", "input": f"{name}.in", "output": f"{name}.out", "operators": ops,
            "consumer": timing, "checkpoint": {"every_records": 20, "every_seconds": 600},
            "batch": {"max_records": 30, "timeout_ms": 100}, **extra}


def _pipeline(tmp_path, name, bootstrap, real_kafka, **kw):
    top = kw.pop("top", {})
    return write_pipeline(tmp_path / "p.yaml", name, bootstrap,
                          [_stage(name, group_timing(real_kafka), **kw)], **top)


def _send(bootstrap: str, topic: str, messages: list[bytes], compression=None,
          keys=None) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, compression_type=compression,
                      max_request_size=8 * 1024 * 1024)
    for i, m in enumerate(messages):
        key = keys[i] if keys is not None else b"s1"
        p.send(topic, key=key, value=m, partition=0)
    p.flush()
    p.close()


def _normal(i: int, rng) -> bytes:
    return json.dumps({"key": "s1", "value": float(rng.normal()), "ts": float(i)}).encode()


def _messages(hostile: bytes, n: int = N, at: int = HOSTILE_AT, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    msgs = [_normal(i, rng) for i in range(n)]
    msgs[at] = hostile
    return msgs


def _run(path, *args) -> int:
    return main(["run", str(path), "--exit-when-idle", "2", "--quiet", *args])


def _accounting(bootstrap: str, name: str, n: int, stage: str = "det") -> tuple[set, dict]:
    """Check every input offset of partition 0 is output xor dead letter, once; return the
    dead-lettered offsets and their dead letters."""
    outs = [json.loads(m.value) for m in read_topic(bootstrap, f"{name}.out", quiet=0.5)]
    dead = [json.loads(m.value) for m in read_topic(bootstrap, f"{name}.{stage}.dlq",
                                                    quiet=0.5)]
    outs = list(dedupe(outs))
    out_offsets = [o["input"]["offset"] for o in outs]
    dead_offsets = [d["origin"]["offset"] for d in dead]
    assert len(out_offsets) == len(set(out_offsets)), "an input has two outputs"
    assert len(dead_offsets) == len(set(dead_offsets)), "an input has two dead letters"
    assert not set(out_offsets) & set(dead_offsets), "an input is output and dead letter"
    assert sorted(out_offsets + dead_offsets) == list(range(n)), (
        f"missing {sorted(set(range(n)) - set(out_offsets) - set(dead_offsets))}")
    return set(dead_offsets), {d["origin"]["offset"]: d for d in dead}


# ---- hostile messages: each becomes a dead letter, the stage goes on -------------------


@pytest.mark.parametrize("case", ["huge_integer", "two_mb_not_json", "nested_5000_deep",
                                  "infinite_coordinate", "forged_coordinate"])
def test_a_hostile_message_is_a_dead_letter_and_the_rest_flows(kafka_bootstrap, real_kafka,
                                                                tmp_path, case):
    name = unique()
    create_topics(kafka_bootstrap, 1, f"{name}.in")
    kw: dict = {}
    if case == "huge_integer":
        hostile = b'{"key":"s1","value":' + b"9" * 5000 + b"}"
    elif case == "two_mb_not_json":
        hostile = b"\xff" + b"x" * (2 * 1024 * 1024)
        kw["consumer"] = {**group_timing(real_kafka),
                          "max_partition_fetch_bytes": 8 * 1024 * 1024}
    elif case == "nested_5000_deep":
        hostile = (b'{"key":"s1","value":1.0,"deep":' + b"[" * 5000 + b"]" * 5000 + b"}")
        kw["operators"] = [{"operator": "river:ADWIN", "params": {"keep_input": True}}]
    elif case == "infinite_coordinate":
        hostile = (b'{"key":"s1","value":1.0,"input":{"topic":"up","partition":0,'
                   b'"offset":Infinity}}')
    else:  # a forged coordinate far beyond what the upstream topic holds
        create_topics(kafka_bootstrap, 1, f"{name}.up")
        _send(kafka_bootstrap, f"{name}.up", [b"{}"] * 5)
        rng = np.random.default_rng(0)
        msgs = [json.dumps({"key": "s1", "value": float(rng.normal()), "ts": float(i),
                            "input": {"topic": f"{name}.up", "partition": 0, "offset": i,
                                      "n": 0}}).encode() for i in range(N)]
        msgs[HOSTILE_AT] = json.dumps({"key": "s1", "value": 1.0, "input": {
            "topic": f"{name}.up", "partition": 0, "offset": 10**9, "n": 0}}).encode()
        kw["upstream"] = f"{name}.up"
    if case != "forged_coordinate":
        msgs = _messages(hostile)
    if "consumer" in kw:
        timing = kw.pop("consumer")
        path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap,
                              [{**_stage(name, group_timing(real_kafka), **kw),
                                "consumer": timing}], topics={"create": True})
    else:
        path = _pipeline(tmp_path, name, kafka_bootstrap, real_kafka, top={
            "topics": {"create": True}}, **kw)
    _send(kafka_bootstrap, f"{name}.in", msgs)
    assert _run(path) == 0
    dead, letters = _accounting(kafka_bootstrap, name, N)
    assert dead == {HOSTILE_AT}, dead
    letter = letters[HOSTILE_AT]
    if case == "two_mb_not_json":
        assert letter["truncated"] is True
        assert letter["raw_bytes"] == len(hostile)
    if case == "forged_coordinate":
        assert "beyond the end" in letter["reason"]
    # a second run finds nothing new to do: the checkpoint covered everything
    assert _run(path) == 0
    assert _accounting(kafka_bootstrap, name, N)[0] == {HOSTILE_AT}


def test_an_spd_matrix_that_overflows_is_a_dead_letter(kafka_bootstrap, real_kafka, tmp_path):
    name = unique()
    create_topics(kafka_bootstrap, 1, f"{name}.in")
    rng = np.random.default_rng(1)
    msgs = []
    for i in range(N):
        a = rng.normal(size=(2, 4))
        m = (a @ a.T / 4 + 0.1 * np.eye(2)).tolist()
        msgs.append(json.dumps({"key": "s1", "value": m, "ts": float(i)}).encode())
    msgs[HOSTILE_AT] = json.dumps({"key": "s1", "value": [[1e308, 0.0], [0.0, 1e308]]}).encode()
    path = _pipeline(tmp_path, name, kafka_bootstrap, real_kafka, top={
        "topics": {"create": True}}, operators=[
        {"operator": "karcher", "params": {"manifold": "spd", "burn_in": 10}}])
    _send(kafka_bootstrap, f"{name}.in", msgs)
    assert _run(path) == 0
    dead, _ = _accounting(kafka_bootstrap, name, N)
    assert dead == {HOSTILE_AT}


# ---- an error that escapes mid-batch: nothing of the batch is committed -----------------


@pytest.mark.both_clients
def test_an_error_mid_batch_commits_nothing_and_the_restart_processes_it(
        kafka_bootstrap, real_kafka, tmp_path, monkeypatch):
    from shiftwatch.deploy.executor import StageExecutor

    name = unique()
    create_topics(kafka_bootstrap, 1, f"{name}.in")
    path = _pipeline(tmp_path, name, kafka_bootstrap, real_kafka, top={
        "topics": {"create": True}})
    _send(kafka_bootstrap, f"{name}.in", _messages(_normal(HOSTILE_AT,
                                                           np.random.default_rng(5))))
    real_encode = StageExecutor.encode

    def failing(self, batch, *a, **kw):
        if any(r.get("offset") == HOSTILE_AT for r in batch.inputs):
            raise RuntimeError("injected: the disk under the encoder vanished")
        return real_encode(self, batch, *a, **kw)

    monkeypatch.setattr(StageExecutor, "encode", failing)
    assert _run(path) == 1  # the stage stops on the error ...
    monkeypatch.setattr(StageExecutor, "encode", real_encode)
    assert _run(path) == 0  # ... and the restart processes what was not committed
    dead, _ = _accounting(kafka_bootstrap, name, N)
    assert dead == set()


# ---- changelogs that cannot be used: one line, and --reset-state --------------------------


def _changelog_damage(bootstrap, name, kind):
    topic, cl = f"{name}.in", f"{name}.det.changelog"
    p = KafkaProducer(bootstrap_servers=bootstrap)
    if kind == "marker_offset_1e9":
        k, v = encode_marker(topic, 0, 99, 10**9, [1], [])
        p.send(cl, key=k, value=v, partition=0)
    elif kind == "garbage_marker":
        p.send(cl, key=f"{topic}/0/m".encode(), value=b"\x00garbage", partition=0)
    elif kind == "key_count_mismatch":
        k, v = encode_marker(topic, 0, 99, 10, [7], [])
        p.send(cl, key=k, value=v, partition=0)
    elif kind in ("bad_state_json", "bad_river_state"):
        state = b"{not json" if kind == "bad_state_json" else json.dumps(
            {"!object": "river.drift.adwin:ADWIN", "state": "garbage"}).encode()
        for k, v in encode_group(topic, 0, 98, [(0, "s1", state)], 512 * 1024):
            p.send(cl, key=k, value=v, partition=0)
        k, v = encode_marker(topic, 0, 98, 10, [1], [])
        p.send(cl, key=k, value=v, partition=0)
    elif kind == "garbage_group":
        p.send(cl, key=f"{topic}/0/g/97/0".encode(), value=b"garbage", partition=0)
        k, v = encode_marker(topic, 0, 97, 10, [1], [])
        p.send(cl, key=k, value=v, partition=0)
    p.flush()
    p.close()


@pytest.mark.parametrize("kind", ["marker_offset_1e9", "garbage_marker", "key_count_mismatch",
                                  "bad_state_json", "bad_river_state", "garbage_group"])
def test_a_changelog_that_cannot_be_restored_is_one_line_and_reset_state_recovers(
        kafka_bootstrap, real_kafka, tmp_path, capsys, kind):
    name = unique()
    create_topics(kafka_bootstrap, 1, f"{name}.in")
    path = _pipeline(tmp_path, name, kafka_bootstrap, real_kafka, top={
        "topics": {"create": True}})
    msgs = _messages(_normal(HOSTILE_AT, np.random.default_rng(2)))
    _send(kafka_bootstrap, f"{name}.in", msgs[:60])
    assert _run(path) == 0
    _changelog_damage(kafka_bootstrap, name, kind)
    _send(kafka_bootstrap, f"{name}.in", msgs[60:])
    capsys.readouterr()
    assert _run(path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    line = [x for x in err if x.startswith("shiftwatch: error:")]
    assert line, err
    assert "partition 0" in line[-1] and "--reset-state 0" in line[-1], line[-1]
    assert "Traceback" not in "\n".join(err)
    # the way out: drop the partition's state, resume from the committed offset (60)
    assert _run(path, "--reset-state", "0") == 0
    _accounting(kafka_bootstrap, name, N)
    # and the next restart restores the new checkpoint without complaint
    assert _run(path) == 0


@pytest.mark.parametrize("restore", ["lazy", "eager"])
def test_a_state_that_cannot_be_loaded_names_its_key_lazy_or_eager(
        kafka_bootstrap, real_kafka, tmp_path, capsys, restore):
    """checkpoint.restore: lazy finds a damaged key state on the key's first record, eager
    on assignment; both stop the stage with the same one line (key, checkpoint, changelog
    offset, --reset-state) and commit nothing past the restored checkpoint."""
    name = unique()
    create_topics(kafka_bootstrap, 1, f"{name}.in")
    path = _pipeline(tmp_path, name, kafka_bootstrap, real_kafka, top={
        "topics": {"create": True}, "checkpoint": {"restore": restore}})
    msgs = _messages(_normal(HOSTILE_AT, np.random.default_rng(2)))
    _send(kafka_bootstrap, f"{name}.in", msgs[:60])
    assert _run(path) == 0
    _changelog_damage(kafka_bootstrap, name, "bad_river_state")
    _send(kafka_bootstrap, f"{name}.in", msgs[60:])
    capsys.readouterr()
    assert _run(path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    line = [x for x in err if x.startswith("shiftwatch: error:")][-1]
    assert "the state of key 's1' (operator 0) in checkpoint 98 cannot be loaded" in line, line
    assert "partition 0 at offset" in line and "--reset-state 0" in line, line
    assert "Traceback" not in "\n".join(err)
    assert _run(path, "--reset-state", "0") == 0
    _accounting(kafka_bootstrap, name, N)  # every input once: nothing was lost or doubled


def test_changed_parameters_are_refused_with_the_parameter_named(kafka_bootstrap, real_kafka,
                                                                   tmp_path, capsys):
    name = unique()
    create_topics(kafka_bootstrap, 1, f"{name}.in")
    ops = [{"operator": "cs", "params": {"alpha": 0.001}}]
    path = _pipeline(tmp_path, name, kafka_bootstrap, real_kafka, operators=ops,
                     top={"topics": {"create": True}})
    msgs = _messages(_normal(HOSTILE_AT, np.random.default_rng(3)))
    _send(kafka_bootstrap, f"{name}.in", msgs[:60])
    assert _run(path) == 0
    path = _pipeline(tmp_path, name, kafka_bootstrap, real_kafka, top={
        "topics": {"create": True}}, operators=[{"operator": "cs", "params": {"alpha": 0.05}}])
    _send(kafka_bootstrap, f"{name}.in", msgs[60:])
    capsys.readouterr()
    assert _run(path) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "alpha=0.001" in line and "alpha=0.05" in line and "--reset-state" in line, line
    assert _run(path, "--reset-state", "all") == 0
    _accounting(kafka_bootstrap, name, N)


# ---- compression: every codec for input, output and changelog ---------------------------


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_compression_codec_in_and_out(kafka_bootstrap, real_kafka, tmp_path, codec):
    name = unique()
    create_topics(kafka_bootstrap, 1, f"{name}.in")
    path = _pipeline(tmp_path, name, kafka_bootstrap, real_kafka, top={
        "topics": {"create": True}}, producer={"compression_type": codec})
    msgs = _messages(_normal(HOSTILE_AT, np.random.default_rng(4)))
    msgs[10] = b"not json"  # a dead letter too, compressed like the rest
    _send(kafka_bootstrap, f"{name}.in", msgs, compression=None if codec == "none" else codec)
    assert _run(path) == 0
    dead, _ = _accounting(kafka_bootstrap, name, N)
    assert dead == {10}
    changelog = read_topic(kafka_bootstrap, f"{name}.det.changelog", quiet=0.5)
    assert any(m.key.endswith(b"/m") for m in changelog)
    assert _run(path) == 0  # restores from the compressed changelog
    assert _accounting(kafka_bootstrap, name, N)[0] == {10}


# ---- a graceful hand-over: the new member resumes where the old one checkpointed ----------


@pytest.mark.both_clients
def test_a_graceful_hand_over_produces_no_duplicates(kafka_bootstrap, real_kafka, tmp_path):
    name = unique()
    create_topics(kafka_bootstrap, 4, f"{name}.in")
    stage = _stage(name, group_timing(real_kafka))
    stage["checkpoint"] = {"every_records": 100_000, "every_seconds": 600}  # only on revoke
    path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap, [stage],
                          topics={"create": True}, metrics={"interval_seconds": 0.3})
    rng = np.random.default_rng(6)
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=5)

    def send(lo, hi):
        for i in range(lo, hi):
            key = f"s{i % 8}"
            p.send(f"{name}.in", key=key.encode(), value=json.dumps(
                {"key": key, "value": float(rng.normal()), "ts": float(i)}).encode())
        p.flush()

    metrics = {w: tmp_path / f"{w}.json" for w in "ab"}
    procs = {"a": start_stage_process(path, "--metrics-file", str(metrics["a"]),
                                      log=tmp_path / "a.log")}
    try:
        send(0, 400)
        wait_for(lambda: len(read_topic(kafka_bootstrap, f"{name}.out", min_count=400,
                                        timeout=60)) >= 400, 90, "a to process the first half")
        procs["b"] = start_stage_process(path, "--metrics-file", str(metrics["b"]),
                                         log=tmp_path / "b.log")

        def both_own():
            try:
                parts = [json.loads(metrics[w].read_text())["partitions"] for w in "ab"]
            except (OSError, ValueError, KeyError):
                return False
            return all(parts) and sorted(parts[0] + parts[1]) == [0, 1, 2, 3]
        wait_for(both_own, 90, "both workers to own partitions")
        send(400, 800)
        wait_for(lambda: len(read_topic(kafka_bootstrap, f"{name}.out", min_count=800,
                                        timeout=60)) >= 800, 90, "the second half")
        for w in "ab":
            procs[w].send_signal(signal.SIGTERM)
        for w in "ab":
            assert procs[w].wait(timeout=60) == 0
    finally:
        p.close()
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    outs = [json.loads(m.value) for m in read_topic(kafka_bootstrap, f"{name}.out", quiet=1.0)]
    log = (tmp_path / "a.log").read_text()
    assert "checkpoint on revoke failed" not in log, log[-2000:]
    assert len(outs) == 800, f"{len(outs) - len(list(dedupe(outs)))} duplicates"
