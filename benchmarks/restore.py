"""Restore time of a stage's state on assignment (issue 25): 100,000 keys.

``python benchmarks/restore.py`` starts the bundled broker (tansu, in memory; or
``--bootstrap HOST:PORT``), writes ``--keys`` keys x ``--per-key`` records (JSON ``{"key",
"ts", "value"}``, 4 partitions), and for each operator (``--operators``, default ``cs`` and
``river:ADWIN``):

1. runs ``shiftwatch run`` over the input until idle (at-least-once), which leaves every
   key's state in the stage's changelog. By default (``--fill final``) the stage checkpoints
   only when it stops, so the changelog holds each key's state once: what a compacted
   changelog holds (Kafka compacts the changelog topic; tansu, the test broker, does not, so
   with the default checkpoints, ``--fill default``, every checkpoint's entries stay in its
   log and a restore reads them all: 1.5 GB instead of 0.3 GB for ``cs`` at 100,000 keys);
2. runs the same pipeline again ``--rounds`` times (same group, nothing left to consume):
   each run restores all partitions on assignment and logs one line per assignment (the
   changelog messages and bytes read, seconds reading, seconds decoding, seconds loading
   the states into the operators; ``deploy/kafka/stage.py``). Nothing else is timed: the
   group join before it and the idle wait after it are left out;
   Each round runs once per ``--restore`` mode, alternating: ``lazy`` (the default of
   ``checkpoint.restore``: each key's bytes are kept and its operator built on its first
   record) and ``eager`` (every key built on assignment);
3. reads the same changelog topic with a plain kafka-python consumer (partitions assigned,
   values discarded), the floor any restore that reads the changelog has on this machine;
4. in process (no broker), what a lazy restore defers: the same number of keys' states
   (``--per-key`` records each, encoded as the changelog holds them) restored eagerly or
   lazily into ``Keyed``, then one more record per key in batches of 1,000 (the stage's
   batch): the restore's seconds, the first records' seconds and both together.

Target (set from the profile, not from a score): restoring takes at most **2x** the plain
read of the same changelog, i.e. decoding and loading the states costs no more than reading
them. The broker, the stage and the reading consumer share the same 2 cores.

Results go to ``benchmarks/results/restore.md`` (``--output``; ``-`` for stdout only) and
``restore.json`` beside it.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from kafka_vs_quix import make_records, produce_input  # noqa: E402

LINE = re.compile(
    r"restore of partitions \[([^\]]*)\]: (\d+) key states from (\d+) changelog messages "
    r"\(([\d.]+) MB\) read in ([\d.]+) s \([\d.na]+ messages/s; ([\d.]+) s with decoding\), "
    r"loaded in ([\d.]+) s; ([\d.]+) s in all")


def pipeline(bootstrap: str, topic: str, name: str, operator: str, work: Path,
             fill: str = "final", restore: str | None = None) -> Path:
    doc = {"pipeline": name, "kafka": {"bootstrap_servers": bootstrap},
           "topics": {"create": True, "partitions": 4},
           "guarantee": "at-least-once",
           # tansu: a group join waits about max_poll_interval_ms
           "consumer": {"max_poll_interval_ms": 5000, "session_timeout_ms": 5000,
                        "heartbeat_interval_ms": 1000},
           "stages": [{"name": "detect", "input": topic, "output": f"{name}.out",
                       "operator": operator}]}
    if fill == "final":  # one checkpoint, when the stage stops
        doc["checkpoint"] = {"every_records": 10**12, "every_seconds": 10**6}
        # writing every key's state at once takes longer than 5 s: a member that does not
        # poll for max_poll_interval_ms leaves its group, and the checkpoint's commit fails
        doc["consumer"]["max_poll_interval_ms"] = 120_000
    if restore is not None:
        doc.setdefault("checkpoint", {})["restore"] = restore
    path = work / f"{name}{'-' + restore if restore else ''}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run_stage(path: Path, idle_s: float, log: Path) -> tuple[float, str]:
    t0 = time.monotonic()
    with open(log, "w") as f:
        subprocess.run([sys.executable, "-m", "shiftwatch.deploy.cli", "run", str(path),
                        "--exit-when-idle", str(idle_s)], stdout=f, stderr=subprocess.STDOUT,
                       cwd=ROOT, check=True, timeout=1800)
    return time.monotonic() - t0, log.read_text()


def restores(text: str) -> list[dict]:
    out = []
    for m in LINE.finditer(text):
        out.append({"partitions": [int(p) for p in m.group(1).split(",") if p.strip()],
                    "states": int(m.group(2)), "messages": int(m.group(3)),
                    "mb": float(m.group(4)), "read_s": float(m.group(5)),
                    "read_decode_s": float(m.group(6)), "load_s": float(m.group(7)),
                    "total_s": float(m.group(8))})
    return out


def first_records(operator: str, keys: int, per_key: int, mode: str) -> dict:
    """In process: ``keys`` keys' states restored (``mode``), then one record per key."""
    import orjson

    from shiftwatch.operators.keyed import Keyed
    from shiftwatch.operators.registry import create
    from shiftwatch.operators.state_codec import dumps_state, loads_state

    recs = [orjson.loads(v) for _, v in make_records(keys * (per_key + 1), keys)]
    first = Keyed(create(operator))
    for i in range(0, keys * per_key, 1000):
        first.process_batch(recs[i:i + 1000])
    encoded = {k: dumps_state(st) for k, st in first.state_dict()["keys"].items()}
    del first
    keyed = Keyed(create(operator))
    t0 = time.perf_counter()
    if mode == "lazy":
        keyed.load_encoded(encoded)
    else:
        keyed.load_state_dict({"operator": "keyed",
                               "keys": {k: loads_state(b) for k, b in encoded.items()}})
    t1 = time.perf_counter()
    rest = recs[keys * per_key:]
    for i in range(0, len(rest), 1000):
        keyed.process_batch(rest[i:i + 1000])
    t2 = time.perf_counter()
    assert keyed.deferred_keys == 0 and len(keyed) == keys
    return {"mode": mode, "restore_s": t1 - t0, "first_s": t2 - t1, "total_s": t2 - t0}


def plain_read(bootstrap: str, topic: str) -> dict:
    """Every message of ``topic`` with a plain consumer, as fast as kafka-python fetches."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                      max_partition_fetch_bytes=8 * 1024 * 1024,
                      fetch_max_bytes=64 * 1024 * 1024)
    try:
        parts = sorted(c.partitions_for_topic(topic) or [])
        tps = [TopicPartition(topic, p) for p in parts]
        t0 = time.monotonic()  # as the stage's reader: assign, end offsets, read to the end
        c.assign(tps)
        ends = c.end_offsets(tps)
        c.seek_to_beginning(*tps)
        n = nbytes = 0
        while True:
            got = c.poll(timeout_ms=200)
            for msgs in got.values():
                n += len(msgs)
                nbytes += sum(len(m.key or b"") + len(m.value or b"") for m in msgs)
            if got:
                continue
            if all(c.position(tp) >= max(ends.get(tp, 0), c.highwater(tp) or 0)
                   for tp in tps):
                break
        # (the last, empty poll of 200 ms included, as in the stage's reader: tansu reports
        # short end offsets, so the end is an empty poll at or past them)
        return {"messages": n, "mb": nbytes / 1e6, "seconds": time.monotonic() - t0}
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap")
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--per-key", type=int, default=5)
    ap.add_argument("--operators", default="cs,river:ADWIN")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fill", choices=("final", "default"), default="final",
                    help="checkpoints while filling: only the final one (as compacted), or "
                    "the stage's default ones (every one stays in tansu's log)")
    ap.add_argument("--restore", default="lazy,eager",
                    help="checkpoint.restore modes, each restored --rounds times, alternating")
    ap.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "restore.md"))
    args = ap.parse_args()
    from shiftwatch.deploy.kafka.broker import start_broker, stop_broker

    modes = [m.strip() for m in args.restore.split(",") if m.strip()]
    t_start = time.time()
    proc, bootstrap = (None, args.bootstrap) if args.bootstrap else start_broker()
    work = Path(tempfile.mkdtemp(prefix="restore-"))
    results = []
    try:
        n = args.keys * args.per_key
        topic = f"in-{uuid.uuid4().hex[:6]}"
        produce_input(bootstrap, topic, make_records(n, args.keys))
        print(f"input {topic}: {n:,} records, {args.keys:,} keys", flush=True)
        for op in args.operators.split(","):
            name = f"rs{uuid.uuid4().hex[:8]}"
            path = pipeline(bootstrap, topic, name, op, work, args.fill)
            wall, _ = run_stage(path, 8.0, work / f"{name}-fill.log")
            print(f"{op}: filled in {wall:.0f} s", flush=True)
            rounds: dict[str, list] = {m: [] for m in modes}
            for r in range(args.rounds):
                for mode in modes if r % 2 == 0 else modes[::-1]:
                    path = pipeline(bootstrap, topic, name, op, work, args.fill, mode)
                    log_path = work / f"{name}-restore{r}-{mode}.log"
                    wall, text = run_stage(path, 3.0, log_path)
                    got = restores(text)
                    if not got:
                        raise SystemExit(f"{op}: no restore line in {log_path}")
                    agg = {k: sum(g[k] for g in got) for k in
                           ("states", "messages", "mb", "read_s", "read_decode_s", "load_s",
                            "total_s")}
                    agg["assignments"] = len(got)
                    agg["wall_s"] = wall
                    rounds[mode].append(agg)
                    print(f"{op} round {r} ({mode}): {agg}", flush=True)
            plain = [plain_read(bootstrap, f"{name}.detect.changelog")
                     for _ in range(args.rounds)]
            firsts = [first_records(op, args.keys, args.per_key, mode)
                      for _ in range(2) for mode in modes]
            for f in firsts:
                print(f"{op} in process: {f}", flush=True)
            results.append({"operator": op, "rounds": rounds, "plain_read": plain,
                            "first_records": firsts})
    finally:
        if proc is not None:
            stop_broker(proc)

    def med(xs):
        return statistics.median(xs)

    lines = ["# Restore time on assignment", "",
             "`benchmarks/restore.py` (issue 25); how each number is taken is in its "
             "docstring.", "",
             f"## {datetime.now():%Y-%m-%d %H:%M}", "",
             f"Command: `python benchmarks/restore.py --keys {args.keys} --per-key "
             f"{args.per_key} --rounds {args.rounds} --fill {args.fill} --restore "
             f"{args.restore}` "
             f"({(time.time() - t_start) / 60:.0f} min). "
             f"Machine: {platform.machine()}, Python {platform.python_version()}, 2 cores "
             "shared by the broker (tansu, in memory), the stage and other work. Medians of "
             f"{args.rounds} restores; every number in `restore.json`.", "",
             "| operator | restore | key states | changelog messages | changelog MB | read s | "
             "decode s | load s | **restore s** | key states/s | messages/s | plain read s "
             "(same topic) | **restore / plain read** (target <= 2) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: |"]
    for res in results:
        plain = med([p["seconds"] for p in res["plain_read"]])
        for mode, rs in res["rounds"].items():
            tot = med([r["total_s"] for r in rs])
            read = med([r["read_s"] for r in rs])
            dec = med([r["read_decode_s"] - r["read_s"] for r in rs])
            load = med([r["load_s"] for r in rs])
            states = rs[0]["states"]
            msgs = rs[0]["messages"]
            lines.append(f"| `{res['operator']}` | {mode} | {states:,} | {msgs:,} | "
                         f"{rs[0]['mb']:.1f} | {read:.2f} | {dec:.2f} | {load:.2f} | "
                         f"**{tot:.2f}** | {states / tot:,.0f} | {msgs / tot:,.0f} | "
                         f"{plain:.2f} | **{tot / plain:.2f}x** |")
    lines += ["", f"What a lazy restore defers, in process (no broker): {args.keys:,} keys' "
              f"states of {args.per_key} records each restored into `Keyed`, then one "
              "record per key in batches of 1,000; median of 2 alternations.", "",
              "| operator | restore | restore s | first record of every key s | both s | "
              "us per key (both) |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    for res in results:
        for mode in modes:
            fs = [f for f in res["first_records"] if f["mode"] == mode]
            r_s = med([f["restore_s"] for f in fs])
            f_s = med([f["first_s"] for f in fs])
            t_s = med([f["total_s"] for f in fs])
            lines.append(f"| `{res['operator']}` | {mode} | {r_s:.2f} | {f_s:.2f} | "
                         f"{t_s:.2f} | {t_s / args.keys * 1e6:.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output != "-":
        out = Path(args.output)
        out.write_text(text)
        out.with_suffix(".json").write_text(json.dumps(
            {"args": vars(args), "results": results}, indent=1))


if __name__ == "__main__":
    main()
