"""`shiftwatch replay kafka:TOPIC?...` reads history without joining a consumer group."""

from __future__ import annotations

import json
import time

from kafka_helpers import create_topics, produce, sensor_records, unique

from shiftwatch.deploy.cli import main
from shiftwatch.streams import open_source


def test_replay_kafka_history_equals_replay_of_the_file(kafka_bootstrap, tmp_path):
    name = unique()
    records = sensor_records(600, keys=3, seed=5)
    create_topics(kafka_bootstrap, 2, name)
    produce(kafka_bootstrap, name, records[:300])
    time.sleep(0.05)
    t_mid = time.time()
    time.sleep(0.05)
    produce(kafka_bootstrap, name, records[300:] + [(b"s0", b"{bad")])

    src = open_source(f"kafka:{name}?bootstrap={kafka_bootstrap}", value="temp", key="sensor")
    got = list(src)
    src.close()
    good = [r for r in got if isinstance(r, dict)]
    assert len(good) == 600 and len(got) == 601
    # Per key, the records come in the order they were written.
    for k in ("s0", "s1", "s2"):
        assert [r["ts"] for r in good if r["key"] == k] == \
            [r["ts"] for r in records if r["sensor"] == k]
    # A time window and an offset window.
    late = list(open_source(f"kafka:{name}?bootstrap={kafka_bootstrap}&start_time={t_mid}",
                            value="temp"))
    assert sorted(r["ts"] for r in late if isinstance(r, dict)) == \
        [r["ts"] for r in records[300:]]
    first = list(open_source(f"kafka:{name}?bootstrap={kafka_bootstrap}&end=10&partitions=0",
                             value="temp"))
    assert [r["meta"]["kafka"]["offset"] for r in first] == list(range(10))

    # The same evaluation as on a file.
    out_k, out_f = tmp_path / "k", tmp_path / "f"
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    common = ["--operator", "river:ADWIN", "--no-progress", "--no-plots", "--quiet"]
    assert main(["replay", f"kafka:{name}?bootstrap={kafka_bootstrap}", "--source-opt",
                 "value=temp", "--source-opt", "key=sensor", "--out", str(out_k),
                 *common]) == 0
    assert main(["replay", str(jsonl), "--source-opt", "value=temp", "--source-opt",
                 "key=sensor", "--source-opt", "ts=ts", "--out", str(out_f), *common]) == 0

    def per_key(path):
        res: dict = {}
        for line in (path / "outputs.jsonl").read_text().splitlines():
            o = json.loads(line)
            res.setdefault(o["key"], []).append((o["ts"], o["alarm"], o["statistic"]))
        return res

    assert per_key(out_k) == per_key(out_f)
    assert len((out_k / "dead_letters.jsonl").read_text().splitlines()) == 1


def test_replay_of_a_live_topic_stops_at_the_end_it_found_and_follow_tails(kafka_bootstrap):
    """The history source stops at the end offsets of when it started reading, even while
    more records arrive; with follow=true it reads on."""
    name = unique()
    create_topics(kafka_bootstrap, 2, name)
    first = sensor_records(200, keys=4, seed=7)
    more = sensor_records(100, keys=4, seed=8, start=1000)
    produce(kafka_bootstrap, name, first)
    src = open_source(f"kafka:{name}?bootstrap={kafka_bootstrap}", value="temp", key="sensor")
    got = []
    for i, r in enumerate(src):
        got.append(r)
        if i == 5:  # records written after the source opened are not part of the replay
            produce(kafka_bootstrap, name, more)
    src.close()
    assert len(got) == len(first)
    assert sorted(r["ts"] for r in got) == sorted(r["ts"] for r in first)

    tail = open_source(f"kafka:{name}?bootstrap={kafka_bootstrap}&follow=true", value="temp",
                       key="sensor")
    seen = []
    extra = sensor_records(50, keys=4, seed=9, start=5000)
    for r in tail:
        seen.append(r)
        if len(seen) == len(first) + len(more):
            produce(kafka_bootstrap, name, extra)  # tailing sees what comes next, too
        if len(seen) == len(first) + len(more) + len(extra):
            break
    tail.close()
    assert sorted(r["ts"] for r in seen) == sorted(r["ts"] for r in first + more + extra)
