"""Keys that expire, and restart memory, through ``shiftwatch run`` on a broker (issue 38, 1).

``python benchmarks/key_expiry.py`` starts the bundled broker (tansu, in memory; or
``--bootstrap HOST:PORT``), produces ``--keys`` one-record keys (every record a new key:
``kafka_vs_quix.make_records(keys, keys)``, 4 partitions) and, per arm, runs a fresh
pipeline (its own group and changelog) of one ``cs`` stage twice:

1. **live**: ``shiftwatch run PIPELINE --exit-when-idle 5`` over the whole input (default
   checkpoints: every 10,000 records or 10 s, and a final one when it stops);
2. **restart**: the same command again, with nothing left to consume: every partition is
   restored on assignment (``checkpoint.restore: lazy``, the default: each key kept as its
   bytes until its next record, which never comes) and the stage stops after 5 idle seconds.

Each run is its own process, started through a wrapper that calls
``shiftwatch.deploy.cli.main`` and prints its ``VmHWM`` (the process's peak RSS, imports and
the Kafka client included) when it returns. Not ``ru_maxrss``: on Linux a child's
``ru_maxrss`` starts at its parent's peak RSS (kept across fork and exec), so it would
report this script's own peak (about 300 MB, the input records) for a smaller stage. The
parent also samples ``VmRSS`` every 0.1 s
(the RSS-over-time of the restart, to see where its memory goes). Between the two runs the
changelog is read with a plain consumer: its messages and bytes as written (tansu does not
compact: what a restart reads here), the tombstones (``None`` values), and what compaction
keeps (the newest message per message key, a ``None`` deleting; the sum of their value
bytes). The restart's keys and seconds are from its ``restore of partitions ...`` lines.

Arms (``--arms``): ``compress`` (the default ``checkpoint.compress: true``), ``plain``
(``compress: false``), and ``max_keys`` (compress on, ``state: {max_keys: --max-keys}``;
the rule applies per input partition on Kafka, each partition's task having its own state,
so the stage keeps up to ``4 x --max-keys`` keys; the default 2,500 keeps 10,000 in all).

Results: ``benchmarks/results/key_expiry.md`` (``--output``; ``-``: stdout only) and a JSON
file beside it with every number and the RSS samples.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from kafka_vs_quix import PARTITIONS, make_records, produce_input  # noqa: E402
from restore import restores  # noqa: E402

#: The stage process: ``shiftwatch run ...`` and its own peak RSS on stderr at the end.
WRAPPER = ("import sys\n"
           "from shiftwatch.deploy.cli import main\n"
           "rc = main(sys.argv[1:])\n"
           "with open('/proc/self/status') as f:\n"
           "    hwm = next(line.split()[1] for line in f if line.startswith('VmHWM:'))\n"
           "print('PEAK_RSS_KB', hwm, file=sys.stderr, flush=True)\n"
           "sys.exit(rc)\n")
PEAK = re.compile(r"PEAK_RSS_KB (\d+)")
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO (.*)$", re.M)


def pipeline(bootstrap: str, topic: str, name: str, work: Path, arm: str,
             max_keys: int) -> Path:
    stage = {"name": "detect", "input": topic, "output": f"{name}.out", "operator": "cs"}
    if arm == "max_keys":
        stage["state"] = {"max_keys": max_keys}
    doc = {"pipeline": name, "kafka": {"bootstrap_servers": bootstrap},
           "topics": {"create": True, "partitions": PARTITIONS},
           "guarantee": "at-least-once",
           # tansu: a group join waits about max_poll_interval_ms; the final checkpoint of
           # a large state takes seconds without a poll, so not too small either
           "consumer": {"max_poll_interval_ms": 20_000, "session_timeout_ms": 10_000,
                        "heartbeat_interval_ms": 1000},
           "checkpoint": {"compress": arm != "plain"},
           "stages": [stage]}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _rss_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def run_stage(path: Path, idle_s: float, log: Path) -> dict:
    """One ``shiftwatch run`` process: its peak RSS, wall seconds, RSS samples, log text and
    metrics file (the run summary's counters)."""
    metrics = log.with_suffix(".metrics.json")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    samples: list[tuple[float, int]] = []
    t0 = time.time()
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-c", WRAPPER, "run", str(path),
                                 "--exit-when-idle", str(idle_s), "--metrics-file",
                                 str(metrics)], stdout=f,
                                stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        done = threading.Event()

        def sample():
            while not done.is_set():
                kb = _rss_kb(proc.pid)
                if kb is not None:
                    samples.append((time.time() - t0, kb))
                done.wait(0.1)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        try:
            rc = proc.wait(timeout=1800)
        finally:
            done.set()
            th.join()
    text = log.read_text()
    if rc != 0:
        raise SystemExit(f"{path.name}: exit {rc}; log {log}:\n{text[-3000:]}")
    peak = PEAK.search(text)
    # the log's own clock (local time, ms): seconds since the start for each INFO line
    events = []
    for m in STAMP.finditer(text):
        t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() - t0
        events.append((round(t, 2), m.group(2)[:160]))
    return {"peak_mb": int(peak.group(1)) / 1024 if peak else None,
            "wall_s": time.time() - t0, "samples": samples, "events": events, "log": text,
            "metrics": json.loads(metrics.read_text())}


def read_changelog(bootstrap: str, topic: str) -> dict:
    """The changelog as written (messages, bytes, tombstones) and as compaction keeps it."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                      max_partition_fetch_bytes=8 * 1024 * 1024,
                      fetch_max_bytes=64 * 1024 * 1024)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or [])]
        c.assign(tps)
        ends = c.end_offsets(tps)
        c.seek_to_beginning(*tps)
        n = nbytes = tombstones = 0
        newest: dict[tuple[int, bytes], int | None] = {}
        while True:
            got = c.poll(timeout_ms=500)
            for tp, msgs in got.items():
                for m in msgs:
                    n += 1
                    nbytes += len(m.key or b"") + len(m.value or b"")
                    tombstones += m.value is None
                    newest[(tp.partition, m.key)] = None if m.value is None else len(m.value)
            if got:
                continue
            if all(c.position(tp) >= max(ends.get(tp, 0), c.highwater(tp) or 0) for tp in tps):
                break
        kept = [v for v in newest.values() if v is not None]
        return {"messages": n, "mb": nbytes / 1e6, "tombstones": tombstones,
                "compacted_messages": len(kept), "compacted_mb": sum(kept) / 1e6}
    finally:
        c.close()


def rss_at(samples: list, t: float) -> float | None:
    """The largest RSS sample (MB) up to ``t`` seconds."""
    xs = [kb for s, kb in samples if s <= t]
    return max(xs) / 1024 if xs else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap")
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--max-keys", type=int, default=2_500, help="per partition (4 of them)")
    ap.add_argument("--arms", default="compress,plain,max_keys")
    ap.add_argument("--output", default=str(ROOT / "benchmarks/results/key_expiry.md"))
    args = ap.parse_args()
    from shiftwatch.deploy.kafka.broker import start_broker, stop_broker

    started = datetime.now(timezone.utc)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip() or "?"
    if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", ".", ":!benchmarks", ":!tests"],
                      cwd=ROOT).returncode:
        commit += " (with uncommitted library changes)"
    proc, bootstrap = (None, args.bootstrap) if args.bootstrap else start_broker()
    work = Path(tempfile.mkdtemp(prefix="key-expiry-"))
    results = []
    try:
        topic = f"in-{uuid.uuid4().hex[:6]}"
        produce_input(bootstrap, topic, make_records(args.keys, args.keys))
        print(f"input {topic}: {args.keys:,} records, one per key", flush=True)
        for arm in args.arms.split(","):
            name = f"ke{uuid.uuid4().hex[:8]}"
            path = pipeline(bootstrap, topic, name, work, arm, args.max_keys)
            live = run_stage(path, 5.0, work / f"{name}-live.log")
            live.pop("log")
            print(f"{arm} live: peak {live['peak_mb']:.0f} MB, {live['wall_s']:.0f} s",
                  flush=True)
            cl = read_changelog(bootstrap, f"{name}.detect.changelog")
            print(f"{arm} changelog: {cl}", flush=True)
            rest = run_stage(path, 5.0, work / f"{name}-restart.log")
            got = restores(rest.pop("log"))
            if not got:
                raise SystemExit(f"{arm}: no restore line in {work}/{name}-restart.log")
            keys = sum(g["states"] for g in got)
            restore_s = sum(g["total_s"] for g in got)
            # when the restore ended (the restore line) and the RSS reached by then
            t_restored = max((t for t, e in rest["events"] if "restore of partitions" in e),
                             default=None)
            res = {"arm": arm, "live": live, "changelog": cl, "restart": rest,
                   "keys_restored": keys, "restore_s": restore_s, "restores": got,
                   "keys_evicted": live["metrics"].get("keys_evicted"),
                   "rss_at_restored_mb": rss_at(rest["samples"], t_restored)
                   if t_restored is not None else None}
            print(f"{arm} restart: peak {rest['peak_mb']:.0f} MB, {keys:,} keys in "
                  f"{restore_s:.2f} s (RSS {res['rss_at_restored_mb']} MB when restored)",
                  flush=True)
            results.append(res)
    finally:
        if proc is not None:
            stop_broker(proc, grace_s=0)

    import kafka
    import numpy

    import shiftwatch

    lines = [
        "# Keys that expire and restart memory, through `shiftwatch run` (issue 38, item 1)", "",
        f"`python benchmarks/key_expiry.py --keys {args.keys} --max-keys {args.max_keys} "
        f"--arms {args.arms}`, {started:%Y-%m-%d %H:%M} UTC "
        f"({(datetime.now(timezone.utc) - started).total_seconds() / 60:.0f} min). "
        f"Machine: {platform.machine()}, 2 cores shared by the broker (tansu, in memory), "
        f"the stage and other work; Python {platform.python_version()}, numpy "
        f"{numpy.__version__}, kafka-python {kafka.__version__}, shiftwatch "
        f"{getattr(shiftwatch, '__version__', '?')} at commit {commit}.", "",
        f"{args.keys:,} one-record `cs` keys (every record a new key, {PARTITIONS} "
        "partitions). *live*: `shiftwatch run` over them (default checkpoints). *restart*: "
        "the same again with nothing to consume (`checkpoint.restore: lazy`). Peak RSS: each "
        "process's own `VmHWM` (imports and the Kafka client included; not `ru_maxrss`, "
        "which a child inherits from its parent's peak). *written*: the "
        "changelog as the broker holds it (tansu does not compact: what this restart "
        "reads); *compacted*: the newest message per message key without the deleted ones, "
        "what a compacting broker keeps (value bytes). `max_keys` is per partition.", "",
        "| arm | live peak RSS MB | restart peak RSS MB | restart / live | changelog written "
        "MB (messages) | compacted MB (messages) | tombstones | keys evicted | keys restored "
        "| restore s | restart wall s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        arm = r["arm"]
        label = {"compress": "compress: true (default)", "plain": "compress: false",
                 "max_keys": f"compress: true, max_keys: {args.max_keys} (x{PARTITIONS})"}[arm]
        lv, rs, cl = r["live"], r["restart"], r["changelog"]
        lines.append(
            f"| {label} | {lv['peak_mb']:.0f} | {rs['peak_mb']:.0f} | "
            f"{rs['peak_mb'] / lv['peak_mb']:.2f} | {cl['mb']:.1f} ({cl['messages']:,}) | "
            f"{cl['compacted_mb']:.1f} ({cl['compacted_messages']:,}) | "
            f"{cl['tombstones']:,} | {r['keys_evicted']:,} | {r['keys_restored']:,} | "
            f"{r['restore_s']:.2f} | {rs['wall_s']:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output != "-":
        out = Path(args.output)
        out.write_text(text)
        out.with_suffix(".json").write_text(json.dumps(
            {"args": vars(args), "started": started.isoformat(), "results": results},
            indent=1))


if __name__ == "__main__":
    main()
