#!/usr/bin/env python
"""The Quix Streams peer app of ``benchmarks/kafka_vs_quix.py``.

Runs INSIDE the Quix venv (``quix_env.py``): stdlib + quixstreams + river. What a user who
wants per-key drift detection on Kafka in Python would write with Quix Streams: one
``StreamingDataFrame`` over the input topic (JSON ``{"key", "ts", "value"}``, keyed by
``key``), a stateful ``apply`` that keeps one detector per message key in Quix State (RocksDB,
changelog topic on), one JSON output per input to the output topic.

* ``adwin``: River's ``drift.ADWIN()`` (River's defaults, as shiftwatch's ``river:ADWIN``)
  per key, stored in State with ``pickle`` (``RocksDBOptions(dumps=pickle.dumps,
  loads=pickle.loads)``: a River detector is not JSON), read and written back at every
  record. Output ``{"key", "ts", "alarm", "statistic"}`` (``statistic`` = ADWIN's
  ``estimation``).
* ``cusum``: a plain two-sided CUSUM per key (:func:`cusum_step`, stdlib only, so the
  benchmark runs the same function locally as a reference) in JSON state (Quix's default
  serialiser, orjson).

Output timestamps are set to the wall clock at processing (``set_timestamp``), as
kafka-python's producer does for the shiftwatch stage, so the benchmark reads both systems'
end-to-end times from the output topic the same way.

Usage: ``python quix_app.py CONFIG_JSON`` with ``bootstrap``, ``input``, ``output``,
``group``, ``variant`` (adwin or cusum), ``commit_every`` (0 = Quix's default, time only),
``commit_interval`` (default 5.0, Quix's default), ``idle_timeout_s``, ``state_dir``;
``python quix_app.py --versions`` prints the package versions as JSON.
"""

from __future__ import annotations

import json
import math
import sys

#: CUSUM: burn-in values for the mean and standard deviation, slack k and threshold h (in
#: standard deviations). After an alarm the key starts a new burn-in.
CUSUM_BURN_IN = 50
CUSUM_K = 0.5
CUSUM_H = 5.0


def cusum_new() -> dict:
    return {"n": 0, "mean": 0.0, "m2": 0.0, "gp": 0.0, "gn": 0.0}


def cusum_step(s: dict, x: float) -> tuple[bool, float]:
    """Update CUSUM state ``s`` (a JSON dict, in place) with ``x``: (alarm, statistic)."""
    n = s["n"]
    if n < CUSUM_BURN_IN:
        n += 1
        d = x - s["mean"]
        s["mean"] += d / n
        s["m2"] += d * (x - s["mean"])
        s["n"] = n
        return False, 0.0
    sd = math.sqrt(s["m2"] / (CUSUM_BURN_IN - 1)) or 1.0
    z = (x - s["mean"]) / sd
    gp = max(0.0, s["gp"] + z - CUSUM_K)
    gn = max(0.0, s["gn"] - z - CUSUM_K)
    stat = max(gp, gn)
    if stat > CUSUM_H:
        s.update(cusum_new())
        return True, stat
    s["gp"], s["gn"] = gp, gn
    return False, stat


def versions() -> dict:
    from importlib.metadata import version

    import confluent_kafka

    out = {k: version(k) for k in ("quixstreams", "river", "confluent-kafka", "rocksdict",
                                   "orjson")}
    out["librdkafka"] = confluent_kafka.libversion()[0]
    out["python"] = sys.version.split()[0]
    return out


def main(cfg: dict) -> None:
    import logging
    import pickle
    import time

    from quixstreams import Application
    from quixstreams.state.rocksdb import RocksDBOptions

    variant = cfg["variant"]
    options = None
    if variant == "adwin":
        from river import drift

        options = RocksDBOptions(dumps=pickle.dumps, loads=pickle.loads)

        def step(value: dict, state) -> dict:
            det = state.get("adwin")
            if det is None:
                det = drift.ADWIN()
            det.update(float(value["value"]))
            state.set("adwin", det)
            return {"key": value["key"], "ts": value["ts"], "alarm": det.drift_detected,
                    "statistic": det.estimation}
    elif variant == "cusum":
        def step(value: dict, state) -> dict:
            s = state.get("cusum")
            if s is None:
                s = cusum_new()
            alarm, stat = cusum_step(s, float(value["value"]))
            state.set("cusum", s)
            return {"key": value["key"], "ts": value["ts"], "alarm": alarm, "statistic": stat}
    else:
        raise SystemExit(f"unknown variant {variant!r}")

    app = Application(
        broker_address=cfg["bootstrap"],
        consumer_group=cfg["group"],
        auto_offset_reset="earliest",
        commit_interval=float(cfg.get("commit_interval", 5.0)),
        commit_every=int(cfg.get("commit_every", 0)),
        consumer_extra_config={"session.timeout.ms": 10000},
        state_dir=cfg["state_dir"],
        rocksdb_options=options,
        loglevel="WARNING",
    )
    logging.getLogger("quixstreams").setLevel(logging.WARNING)
    topic_in = app.topic(cfg["input"], value_deserializer="json", key_deserializer="bytes")
    topic_out = app.topic(cfg["output"], value_serializer="json", key_serializer="bytes")
    sdf = app.dataframe(topic_in)
    sdf = sdf.apply(step, stateful=True)
    sdf = sdf.set_timestamp(lambda value, key, timestamp, headers: int(time.time() * 1000))
    sdf.to_topic(topic_out)
    app.run(timeout=float(cfg.get("idle_timeout_s", 3.0)))


if __name__ == "__main__":
    if sys.argv[1:] == ["--versions"]:
        print(json.dumps(versions()))
    else:
        main(json.loads(sys.argv[1]))
