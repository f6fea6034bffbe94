"""Rebalance pauses: how long each input partition's outputs stop when the group changes.

Run ``python benchmarks/rebalance.py`` (starts tansu on a free port; ``--client confluent``
for members on librdkafka; ``--bootstrap HOST:PORT`` to use a running cluster; ``--quick``
for a smoke run). For each assignor
(``range``, eager, and ``cooperative-sticky``, the default; alternating, ``--rounds`` times)
it makes a 6-partition input topic, and while a producer writes ``--rate`` records/s over
2,000 keys into it, runs members of one stage (separate ``shiftwatch run`` processes,
operator ``cs``) through

1. ``1 -> 3``: members b and c join member a;
2. ``3 -> 2``: c stops gracefully (SIGTERM: checkpoint, commit, leave the group);
3. ``2 -> 3``: c joins again;
4. ``3 -> 2 kill``: c is killed (SIGKILL: the group notices after the session timeout).

For each change and each input partition: the longest gap between consecutive outputs
(output message timestamps, i.e. when the stage produced them) from the change until the
next change, split by whether the partition stayed with its member (same owner before and
after, from the members' ``assigned`` / ``revoked`` / ``lost`` log lines) or moved. At the end,
outputs are de-duplicated by their input coordinates (partition, offset, n) and checked
against the input topic read back: every input exactly one output (none lost).

Group timing as the integration tests on tansu (a join there waits about the rebalance
timeout, max_poll_interval_ms): 3,000 ms max poll interval and session timeout, 1,000 ms
heartbeats. Writes benchmarks/results/rebalance.md and rebalance.json (``--output``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import yaml
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

ROOT = Path(__file__).resolve().parents[1]
PARTITIONS = 6
KEYS = 2000
TIMING = {"max_poll_interval_ms": 3000, "session_timeout_ms": 3000,
          "heartbeat_interval_ms": 1000}
LINE = re.compile(r"stage s: (assigned|revoked|partitions) \[([0-9, ]*)\]")


class Producer(threading.Thread):
    """``rate`` JSON records/s ``{"key", "value"}`` over KEYS keys, until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: float):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.stopped = threading.Event()
        self.sent = 0
        self.behind_s = 0.0

    def run(self) -> None:
        p = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5)
        t0 = time.monotonic()
        i = 0
        while not self.stopped.is_set():
            k = f"k{i % KEYS}"
            p.send(self.topic, key=k.encode(),
                   value=json.dumps({"key": k, "value": float(i % 13)}).encode())
            i += 1
            if i % 50 == 0:
                lag = t0 + i / self.rate - time.monotonic()
                if lag > 0:
                    time.sleep(lag)
                else:
                    self.behind_s = max(self.behind_s, -lag)
        p.flush()
        p.close()
        self.sent = i


class Member:
    """One ``shiftwatch run`` process and its log."""

    def __init__(self, name: str, pipeline: Path, work: Path):
        self.name = name
        self.log = work / f"{pipeline.stem}.{name}.{uuid.uuid4().hex[:4]}.log"
        out = open(self.log, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "shiftwatch.deploy.cli", "run",
                                      str(pipeline)], cwd=ROOT, stdout=out, stderr=out)

    def size(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def owned(self, upto: int) -> set[int]:
        """The partitions the member owns after the first ``upto`` bytes of its log."""
        own: set[int] = set()
        text = self.log.read_bytes()[:upto].decode(errors="replace")
        for m in LINE.finditer(text):
            parts = {int(p) for p in m.group(2).split(",") if p.strip()}
            if m.group(1) == "assigned":
                own |= parts
            else:  # revoked, partitions ... lost
                own -= parts
        return own

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait()
        return self.proc.returncode


def owners(work: Path, sizes: dict[str, int]) -> dict[int, str | None]:
    """Partition -> the log (member) that owns it, from the live members' logs up to
    ``sizes`` (log name -> bytes)."""
    out: dict[int, str | None] = dict.fromkeys(range(PARTITIONS))
    for fname, size in sizes.items():
        m = Member.__new__(Member)
        m.log = work / fname
        for p in m.owned(size):
            out[p] = fname
    return out


def snapshot(members: dict[str, Member]) -> dict[str, int]:
    """The live members' logs and their sizes now."""
    return {m.log.name: m.size() for m in members.values()}


def read_all(bootstrap: str, topic: str) -> list:
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                      consumer_timeout_ms=5000)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        return list(c)
    finally:
        c.close()


def wait_settled(members: dict[str, Member], want: int, timeout: float) -> float:
    """Wait until ``want`` members own all partitions between them (from their logs);
    returns the seconds it took (``timeout`` if never)."""
    t0 = time.monotonic()
    work = next(iter(members.values())).log.parent
    while time.monotonic() - t0 < timeout:
        own = owners(work, snapshot(members))
        holders = {o for o in own.values() if o is not None}
        if None not in own.values() and len(holders) == want:
            return time.monotonic() - t0
        time.sleep(0.5)
    return timeout


def one_run(bootstrap: str, assignor: str, rate: float, work: Path, phase_s: float,
            warm_s: float, client: str = "kafka-python") -> dict:
    name = f"rb{uuid.uuid4().hex[:6]}"
    inp, out = f"{name}.in", f"{name}.out"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics({t: {"num_partitions": PARTITIONS, "replication_factor": 1}
                         for t in (inp, out)})
    admin.close()
    pipeline = work / f"{name}.yaml"
    pipeline.write_text(yaml.safe_dump({
        "pipeline": name, "kafka": {"bootstrap_servers": bootstrap, "client": client},
        "consumer": {**TIMING, "assignor": assignor},
        "checkpoint": {"every_records": 2000, "every_seconds": 5.0},
        "metrics": {"interval_seconds": 5.0},
        "stages": [{"name": "s", "input": inp, "output": out, "operator": "cs",
                    "key": "key"}]}, sort_keys=False))
    feed = Producer(bootstrap, inp, rate)
    feed.start()
    members: dict[str, Member] = {"a": Member("a", pipeline, work)}
    events: list[dict] = []

    def event(label: str, action) -> None:
        before = snapshot(members)
        t = time.time()
        action()
        events.append({"change": label, "t": t, "before": before})

    try:
        wait_settled(members, 1, 60)
        time.sleep(warm_s)  # tansu may drop a new group's first generation a few s in
        wait_settled(members, 1, 60)

        def join_bc():
            members["b"] = Member("b", pipeline, work)
            members["c"] = Member("c", pipeline, work)

        event("1 -> 3", join_bc)
        events[-1]["settle_s"] = wait_settled(members, 3, 60)
        time.sleep(phase_s)
        event("3 -> 2 (SIGTERM)", lambda: members.pop("c").stop(signal.SIGTERM))
        events[-1]["settle_s"] = wait_settled(members, 2, 60)
        time.sleep(phase_s)

        def rejoin_c():
            members["c"] = Member("c", pipeline, work)  # a new member (new log)

        event("2 -> 3", rejoin_c)
        events[-1]["settle_s"] = wait_settled(members, 3, 60)
        time.sleep(phase_s)
        event("3 -> 2 (SIGKILL)", lambda: members.pop("c").stop(signal.SIGKILL))
        events[-1]["settle_s"] = wait_settled(members, 2, 60)
        time.sleep(phase_s)
        end_sizes = snapshot(members)
        t_end = time.time()
    finally:
        feed.stopped.set()
        feed.join(60)
        time.sleep(3)  # the last records through
        for m in list(members.values()):
            m.stop(signal.SIGTERM)
    msgs = read_all(bootstrap, out)
    stamps: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
    coords = []
    for m in msgs:
        where = json.loads(m.value)["input"]
        coords.append((where["partition"], where["offset"], where["n"]))
        stamps[where["partition"]].append(m.timestamp / 1000)
    for ts in stamps.values():
        ts.sort()
    inputs = {(m.partition, m.offset) for m in read_all(bootstrap, inp)}
    distinct = set(coords)
    per_input: dict[tuple[int, int], int] = {}
    for p, o, _n in distinct:
        per_input[(p, o)] = per_input.get((p, o), 0) + 1
    check = {"inputs": len(inputs), "produced": feed.sent, "outputs": len(coords),
             "duplicates_dropped": len(coords) - len(distinct),
             "lost": len(inputs - set(per_input)),
             "extra": len(set(per_input) - inputs),
             "inputs_with_more_than_one_output": sum(1 for c in per_input.values() if c > 1),
             "producer_behind_s": round(feed.behind_s, 2)}
    results = []
    for i, ev in enumerate(events):
        t0 = ev["t"]
        t1 = events[i + 1]["t"] if i + 1 < len(events) else t_end
        ev["after"] = events[i + 1]["before"] if i + 1 < len(events) else end_sizes
        results.append((ev, t0, t1))
    return {"assignor": assignor, "pipeline": name, "check": check,
            "changes": [measure(ev, t0, t1, stamps, work) for ev, t0, t1 in results]}


def measure(ev: dict, t0: float, t1: float, stamps: dict[int, list[float]],
            work: Path) -> dict:
    """One change: ownership before it and after it settled (the next change's "before"),
    each partition's longest output gap between the change and the next."""
    before, after = owners(work, ev["before"]), owners(work, ev["after"])
    gaps = {}
    for p, ts in stamps.items():
        window = [t for t in ts if t0 - 0.5 <= t <= t1]
        gaps[p] = round(max((b - a for a, b in zip(window, window[1:], strict=False)),
                            default=float("nan")), 2)
    stayed = [p for p in range(PARTITIONS) if before[p] is not None and before[p] == after[p]]
    moved = [p for p in range(PARTITIONS) if p not in stayed]
    return {"change": ev["change"], "settle_s": round(ev.get("settle_s", float("nan")), 1),
            "stayed": stayed, "moved": moved, "gap_s": gaps,
            "before": {p: _short(o) for p, o in before.items()},
            "after": {p: _short(o) for p, o in after.items()}}


def _short(fname: str | None) -> str | None:
    return None if fname is None else fname.split(".")[-3]


def table(runs: list[dict]) -> list[str]:
    lines = ["| assignor | round | change | settled (s) | stayed: partitions | stayed: "
             "longest gap (s) | moved: partitions | moved: longest gap (s) | moved: median "
             "gap (s) |", "|---|---|---|---|---|---|---|---|---|"]
    rounds: dict[str, int] = {}
    for run in runs:
        rounds[run["assignor"]] = rounds.get(run["assignor"], 0) + 1
        for ch in run["changes"]:
            st = [ch["gap_s"][p] for p in ch["stayed"]]
            mv = [ch["gap_s"][p] for p in ch["moved"]]
            lines.append(
                f"| {run['assignor']} | {rounds[run['assignor']]} | {ch['change']} | "
                f"{ch['settle_s']} | {ch['stayed'] or '-'} | "
                f"{max(st) if st else '-'} | {ch['moved'] or '-'} | "
                f"{max(mv) if mv else '-'} | "
                f"{round(statistics.median(mv), 2) if mv else '-'} |")
    return lines


def client_version(client: str) -> str:
    if client == "confluent":
        import confluent_kafka

        return (f"confluent-kafka {confluent_kafka.version()[0]} "
                f"(librdkafka {confluent_kafka.libversion()[0]})")
    return f"kafka-python {__import__('kafka').__version__}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap")
    ap.add_argument("--rate", type=float, default=2000.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--phase-s", type=float, default=12.0,
                    help="seconds after a change settles before the next")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--client", choices=("kafka-python", "confluent"), default="kafka-python",
                    help="the members' kafka.client")
    ap.add_argument("--output", help="default benchmarks/results/rebalance.md "
                    "(rebalance-confluent.md with --client confluent)")
    args = ap.parse_args()
    if args.output is None:
        args.output = str(ROOT / "benchmarks" / "results" / (
            "rebalance.md" if args.client == "kafka-python" else "rebalance-confluent.md"))
    if args.quick:
        args.rounds, args.phase_s, args.rate = 1, 5.0, 500.0
    from shiftwatch.deploy.kafka.broker import start_broker, stop_broker

    work = Path(tempfile.mkdtemp(prefix="rebalance-"))
    broker_log = open(work / "tansu.log", "wb")
    proc, bootstrap = ((None, args.bootstrap) if args.bootstrap
                       else start_broker(log=broker_log))
    started = time.time()
    runs = []
    try:
        for r in range(args.rounds):
            for assignor in ("range", "cooperative-sticky"):
                run = one_run(bootstrap, assignor, args.rate, work, args.phase_s, 8.0,
                              args.client)
                run["round"] = r + 1
                runs.append(run)
                print("\n".join(table([run])[2:]), flush=True)
                print(json.dumps(run["check"]), flush=True)
    finally:
        if proc is not None:
            stop_broker(proc, grace_s=0)
    took = time.time() - started
    cmd = "python benchmarks/rebalance.py " + " ".join(sys.argv[1:])
    md = [
        "# Rebalance pauses: eager (range) vs cooperative-sticky",
        "",
        f"Command: `{cmd.strip()}` ({took / 60:.1f} min). Machine: {platform.machine()}, "
        f"{os.cpu_count()} cores (shared with other work), Python "
        f"{platform.python_version()}, members' client: {client_version(args.client)}, broker: "
        f"{'tansu (in memory, one node)' if proc is not None else args.bootstrap}. "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC.",
        "",
        f"6 input partitions, {KEYS:,} keys, a producer at {args.rate:,.0f} records/s, "
        "operator `cs`, members are separate `shiftwatch run` processes; consumer timing "
        f"{TIMING}. Changes: 1 -> 3 (two join), 3 -> 2 (one SIGTERM), 2 -> 3 (one joins), "
        "3 -> 2 (one SIGKILL). A gap is the longest time between two consecutive outputs "
        "of an input partition (output message timestamps) from the change until the "
        "next; about 0.1-0.4 s is the steady state (batch.timeout_ms 200 and batching). "
        "'Stayed': same owner before and after the change; 'moved': any other partition.",
        "",
        *table(runs),
        "",
        "Loss check (after de-duplication by input coordinates; every input read back from "
        "the input topic):",
        "",
        "| assignor | round | inputs | outputs | duplicates dropped | lost | extra | "
        "inputs with >1 output |",
        "|---|---|---|---|---|---|---|---|",
        *[f"| {r['assignor']} | {r['round']} | {r['check']['inputs']} | "
          f"{r['check']['outputs']} | {r['check']['duplicates_dropped']} | "
          f"{r['check']['lost']} | {r['check']['extra']} | "
          f"{r['check']['inputs_with_more_than_one_output']} |" for r in runs],
        "",
    ]
    text = "\n".join(md)
    print(text)
    if args.output != "-":
        Path(args.output).write_text(text)
        Path(args.output).with_suffix(".json").write_text(
            json.dumps({"command": cmd.strip(), "minutes": round(took / 60, 2),
                        "rate": args.rate, "timing": TIMING, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
