"""Pipeline files: the YAML that ``shiftwatch run`` reads, loaded and validated in one place.

A pipeline file names the Kafka cluster and a list of stages. Each stage consumes one topic,
runs one or more operators (each wrapped in :class:`~shiftwatch.operators.keyed.Keyed`) and produces
to one topic; stages chain through topics::

    pipeline: sensors                  # group ids and internal topics derive from it
    kafka:
      bootstrap_servers: ${KAFKA_BOOTSTRAP:-localhost:9092}
      security_protocol: SASL_SSL      # every kafka-python client setting passes through
    guarantee: at-least-once           # or exactly-once (default of every stage)
    metrics: {port: 9400}              # /metrics, /healthz, /readyz (shiftwatch.deploy.
                                       # observability); stalls_before_unhealthy: 3,
                                       # max_key_series: 100 (alarms per key)
    stages:
      - name: scale
        input: sensors.raw
        output: sensors.scaled
        operator: standardize
        params: {burn_in: 30}
        value: temp                    # field holding the value (default: value)
        key: sensor                    # field holding the key (default: the message key)
        ts: time                       # field holding the event time in seconds (default:
                                       # the record's ts, else the message timestamp)
        loose: false                   # true: "1e5" and true read as numbers (default: a
                                       # dead letter, the value must be a JSON number)
      - name: detect
        input: sensors.scaled
        output: sensors.alarms
        operator: river:ADWIN

Everything is checked by :func:`load_pipeline` before anything is consumed: unknown keys,
missing keys, bad operator names or parameters, bad numbers. Each problem is one line naming
the file and the place (``pipeline.yaml: stages[1] (detect): unknown key 'oprator'``).
Whether the topics exist is checked against the cluster when the stage starts
(:meth:`shiftwatch.deploy.kafka.stage.StageRunner.prepare`), also before consuming.

String values may use ``${VAR}`` or ``${VAR:-default}`` to read the environment (for the
bootstrap address and credentials in containers).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from shiftwatch.deploy.bounds import BOUNDS_DEFAULTS, check_bounds
from shiftwatch.deploy.errors import UserError
from shiftwatch.deploy.expiry import STATE_DEFAULTS, check_state
from shiftwatch.deploy.key_alarms import DEFAULT_MAX_KEY_SERIES
from shiftwatch.deploy.time_rule import TIME_DEFAULTS, check_time

__all__ = [
    "PipelineError",
    "PipelineConfig",
    "StageConfig",
    "OperatorSpec",
    "load_pipeline",
    "parse_pipeline",
    "STAGE_SETTINGS",
    "PYTHON_OBJECT_SETTINGS",
    "kafka_settings",
    "client_settings",
    "GUARANTEES",
    "EMIT_CHOICES",
    "COMPRESSION_TYPES",
    "RESTORE_MODES",
    "ASSIGNORS",
]

GUARANTEES = ("at-least-once", "exactly-once")
#: The Kafka clients a stage can run on (``kafka.client``; deploy/kafka/clients.py makes them).
CLIENT_CHOICES = ("kafka-python", "confluent")

#: Settings of the ``kafka:`` section the stage sets itself, or that have their own section
#: (validated there, overridable per stage): refused in ``kafka:``, each with the reason.
STAGE_SETTINGS = {
    "group_id": "the stage's group id is <pipeline>.<stage>",
    "group_instance_id": "every member of every stage would share one static member id",
    "enable_auto_commit": "the stage commits an offset only after checkpointing up to it",
    "auto_commit_interval_ms": "the stage commits an offset only after checkpointing up to it",
    "isolation_level": "the stage reads read_committed with guarantee: exactly-once, "
                       "read_uncommitted otherwise",
    "transactional_id": "with guarantee: exactly-once the stage uses <group id>.<instance>",
    "acks": "a checkpoint waits for outputs acknowledged by all in-sync replicas (acks=all)",
    "key_deserializer": "the stage reads message bytes", "value_deserializer":
    "the stage reads message bytes", "key_serializer": "the stage writes message bytes",
    "value_serializer": "the stage writes message bytes",
    "max_poll_records": "set batch.max_records",
    "allow_auto_create_topics": "no client of shiftwatch creates a topic by asking for it: the "
                                "stage creates its topics with topics.partitions",
    **{k: f"set consumer.{k} (per stage if need be)" for k in (
        "max_poll_interval_ms", "session_timeout_ms", "heartbeat_interval_ms",
        "auto_offset_reset", "fetch_max_bytes", "max_partition_fetch_bytes")},
    **{k: f"set producer.{k} (per stage if need be)" for k in (
        "compression_type", "max_request_size", "linger_ms", "batch_size")},
}
#: kafka-python settings whose values are Python objects (callables, classes, sockets), which
#: a YAML file cannot give: refused in ``kafka:``.
PYTHON_OBJECT_SETTINGS = ("default_offset_commit_callback", "kafka_client", "metric_reporters",
                          "partition_assignment_strategy", "partitioner",
                          "sasl_oauth_token_provider", "selector", "ssl_context")
#: ``consumer.assignor``: how the group spreads the input's partitions over a stage's members,
#: by kafka-python assignor (``kafka.coordinator.assignors``). ``cooperative-sticky``
#: (KIP-429, incremental): a membership change revokes only the partitions that move, the
#: others stay with their member; the others are eager: every member gives up every
#: partition at every change (``sticky`` gives most of them back to the same member).
ASSIGNORS = {
    "cooperative-sticky":
        "kafka.coordinator.assignors.cooperative_sticky.CooperativeStickyAssignor",
    "range": "kafka.coordinator.assignors.range.RangePartitionAssignor",
    "roundrobin": "kafka.coordinator.assignors.roundrobin.RoundRobinPartitionAssignor",
    "sticky": "kafka.coordinator.assignors.sticky.sticky_assignor.StickyPartitionAssignor",
}
#: The Kafka clients a stage makes, by kafka-python class.
CLIENTS = {"consumer": "KafkaConsumer", "producer": "KafkaProducer", "admin": "KafkaAdminClient"}


@functools.cache
def kafka_settings() -> dict[str, tuple[str, ...]]:
    """client -> the settings kafka-python's client takes from a pipeline's ``kafka:``: the
    keys of its ``DEFAULT_CONFIG``, less :data:`STAGE_SETTINGS` and
    :data:`PYTHON_OBJECT_SETTINGS`. Read from the installed kafka-python, so that every
    setting it accepts passes through.

    >>> "bootstrap_timeout_ms" in kafka_settings()["admin"]
    True
    >>> "ssl_ciphers" in kafka_settings()["consumer"], "ssl_ciphers" in kafka_settings()["admin"]
    (True, False)
    """
    import kafka

    refused = set(STAGE_SETTINGS) | set(PYTHON_OBJECT_SETTINGS)
    return {client: tuple(sorted(set(getattr(kafka, cls).DEFAULT_CONFIG) - refused))
            for client, cls in CLIENTS.items()}


def client_settings(kafka: Mapping[str, Any], client: str) -> dict:
    """The settings of a pipeline's ``kafka:`` section that kafka-python's ``client``
    (``consumer``, ``producer`` or ``admin``) takes; a setting only some clients know goes to
    those only (``ssl_ciphers``: consumers and producers).

    >>> client_settings({"bootstrap_servers": "k:9092", "ssl_ciphers": "ALL"}, "admin")
    {'bootstrap_servers': 'k:9092'}
    """
    known = kafka_settings()[client]
    return {k: v for k, v in kafka.items() if k in known}


def _kafka_section(kafka: Mapping, err) -> dict:
    """Check a pipeline's ``kafka:`` section: what kafka-python accepts passes, a setting the
    stage sets itself is refused with why, anything else with the list of settings."""
    accepted = sorted(set().union(*kafka_settings().values()))
    for k in kafka:
        if k == "client":
            if kafka[k] not in CLIENT_CHOICES:
                raise err(f"kafka: client must be one of {', '.join(CLIENT_CHOICES)}, got "
                          f"{kafka[k]!r}")
            continue
        if k == "librdkafka":
            if not isinstance(kafka[k], Mapping) or not all(isinstance(n, str)
                                                            for n in kafka[k]):
                raise err("kafka: librdkafka must map librdkafka setting names to values "
                          "(passed through with client: confluent)")
            continue
        if k in STAGE_SETTINGS:
            raise err(f"kafka: {k} is set by the stage, not here: {STAGE_SETTINGS[k]}")
        if k == "partition_assignment_strategy":
            raise err(f"kafka: {k} takes Python classes, which a pipeline file cannot give; "
                      f"set consumer.assignor ({', '.join(ASSIGNORS)}; per stage if need be)")
        if k in PYTHON_OBJECT_SETTINGS:
            raise err(f"kafka: {k} takes a Python object, which a pipeline file cannot give")
        if k not in accepted:
            raise err(f"kafka: unknown key {k!r}; kafka-python's client settings: "
                      f"{', '.join(accepted)}")
    out = dict(kafka)
    t = out.get("bootstrap_timeout_ms")
    if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t <= 0):
        raise err(f"kafka: bootstrap_timeout_ms must be a positive integer (milliseconds), "
                  f"got {t!r}")
    version = out.get("api_version")
    if isinstance(version, (list, str)):  # kafka-python compares it as a tuple: (2, 5, 0)
        try:
            parts = version.split(".") if isinstance(version, str) else version
            out["api_version"] = tuple(int(p) for p in parts)
        except (TypeError, ValueError):
            raise err(f"kafka: api_version must be a version such as [2, 5, 0] or '2.5.0', "
                      f"got {version!r}") from None
    return out


_TOP_KEYS = ("pipeline", "kafka", "topics", "guarantee", "checkpoint", "batch", "consumer",
             "producer", "metrics", "emit", "alerts", "stages")
_STAGE_KEYS = ("name", "input", "output", "operator", "params", "operators", "value", "key",
               "ts", "guarantee", "checkpoint", "batch", "consumer", "producer", "dedupe",
               "upstream", "emit", "alerts", "loose", "state", "time", "bounds")
#: What a stage writes to its output topic: every output, or only those with ``alarm: true``
#: (the dead letters, the checkpoints and the committed offsets are the same either way).
EMIT_CHOICES = ("all", "alarms")
#: ``checkpoint.restore``: on assignment, read every key's state and build its operator on
#: the key's first record (``lazy``), or build every key's operator before the first record
#: (``eager``: a state that cannot be loaded stops the stage at assignment rather than at its
#: key's first record).
RESTORE_MODES = ("lazy", "eager")
#: What the stage's producer may compress with (kafka-python's codecs; each one's library
#: is installed with shiftwatch).
COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
_SECTION_KEYS = {
    "checkpoint": ("every_records", "every_seconds", "chunk_bytes", "patches", "restore",
                   "compress"),
    "batch": ("max_records", "timeout_ms"),
    "consumer": ("max_poll_interval_ms", "session_timeout_ms", "heartbeat_interval_ms",
                 "auto_offset_reset", "fetch_max_bytes", "max_partition_fetch_bytes",
                 "assignor"),
    "producer": ("compression_type", "max_request_size", "linger_ms", "batch_size"),
    "topics": ("create", "create_input", "partitions", "replication_factor"),
    "metrics": ("file", "interval_seconds", "port", "address", "stalls_before_unhealthy",
                "max_key_series"),
}
_DEFAULTS: dict[str, dict[str, Any]] = {
    # patches: keys whose operator offers state_patch (river:*) are written as what changed
    # since their previous version, with a whole state now and then (deploy/kafka/changelog)
    # restore: lazy builds a restored key's operator on its first record (RESTORE_MODES)
    # compress: each key's state zlib-compressed in the changelog (a cs key: 2.7 -> 0.35 KB;
    # restored keys not yet seen again are held so, operators/state_codec.compress_state)
    "checkpoint": {"every_records": 10_000, "every_seconds": 10.0, "chunk_bytes": 512 * 1024,
                   "patches": True, "restore": "lazy", "compress": True},
    "batch": {"max_records": 1000, "timeout_ms": 200},
    "consumer": {"max_poll_interval_ms": 300_000, "session_timeout_ms": 10_000,
                 "heartbeat_interval_ms": 3_000, "auto_offset_reset": "earliest",
                 "assignor": "cooperative-sticky"},
    # max_request_size: Kafka's default broker limit (message.max.bytes, 1 MiB); an output or
    # dead letter must fit in it (a larger output makes its input a dead letter, a larger
    # dead letter is cut). Raise both together.
    "producer": {"compression_type": "none", "max_request_size": 1024 * 1024, "linger_ms": 10,
                 "batch_size": 256 * 1024},
    # create: the output, changelog and dead-letter topics (and an input another stage of
    # the file writes); create_input: also an input nothing of the file writes (a typo'd
    # name would otherwise be created silently and the stage idle)
    "topics": {"create": False, "create_input": False, "partitions": 1,
               "replication_factor": 1},
    # max_key_series: keys with their own shiftwatch_key_alarms_total series (deploy/key_alarms)
    "metrics": {"file": None, "interval_seconds": 10.0, "port": None, "address": "0.0.0.0",
                "stalls_before_unhealthy": 3, "max_key_series": DEFAULT_MAX_KEY_SERIES},
}
_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


class PipelineError(UserError):
    """A pipeline file that cannot run: the message is one line naming file and place."""


@dataclass
class OperatorSpec:
    """One operator of a stage: its registered name and keyword parameters."""

    name: str
    params: dict = field(default_factory=dict)

    def build(self):
        """A fresh operator (raises ``ValueError`` for a bad name or parameter)."""
        from shiftwatch.operators import create

        return create(self.name, **self.params)


@dataclass
class StageConfig:
    """One stage: input topic -> operators (keyed) -> output topic."""

    name: str
    input: str
    output: str
    operators: list[OperatorSpec]
    value: str = "value"
    key: str | None = None
    ts: str | None = None
    guarantee: str = "at-least-once"
    dedupe: bool = True
    #: read numeric strings and booleans in ``value`` as numbers (default: a dead letter)
    loose: bool = False
    upstream: str | None = None  # the topic input coordinates must name (dedupe)
    emit: str = "all"  # or "alarms": only outputs with alarm: true go to the output topic
    #: the alert webhook's settings (``url``, ``format``, ...: sinks/alerts.py), or None
    alerts: dict | None = None
    #: when keys expire (``ttl_seconds``, ``clock``, ``max_keys``: deploy/expiry.py)
    state: dict = field(default_factory=lambda: dict(STATE_DEFAULTS))
    #: the rule for time and duplicates (``allowed_lateness_seconds``, ``drop_duplicates``:
    #: deploy/time_rule.py)
    time: dict = field(default_factory=lambda: dict(TIME_DEFAULTS))
    #: the stream's plausibility bounds (``max_abs_value``, ``max_future_seconds``:
    #: deploy/bounds.py), per input partition
    bounds: dict = field(default_factory=lambda: dict(BOUNDS_DEFAULTS))
    checkpoint: dict = field(default_factory=lambda: dict(_DEFAULTS["checkpoint"]))
    batch: dict = field(default_factory=lambda: dict(_DEFAULTS["batch"]))
    consumer: dict = field(default_factory=lambda: dict(_DEFAULTS["consumer"]))
    producer: dict = field(default_factory=lambda: dict(_DEFAULTS["producer"]))


@dataclass
class PipelineConfig:
    """A validated pipeline file."""

    name: str
    stages: list[StageConfig]
    kafka: dict = field(default_factory=dict)
    topics: dict = field(default_factory=lambda: dict(_DEFAULTS["topics"]))
    metrics: dict = field(default_factory=lambda: dict(_DEFAULTS["metrics"]))
    source: str = "<pipeline>"

    def stage(self, name: str) -> StageConfig:
        for s in self.stages:
            if s.name == name:
                return s
        raise PipelineError(f"{self.source}: no stage {name!r}; stages: "
                            f"{', '.join(s.name for s in self.stages)}")

    def group_id(self, stage: StageConfig) -> str:
        return f"{self.name}.{stage.name}"

    def changelog_topic(self, stage: StageConfig) -> str:
        return f"{self.name}.{stage.name}.changelog"

    def dlq_topic(self, stage: StageConfig) -> str:
        return f"{self.name}.{stage.name}.dlq"


# --------------------------------------------------------------------------------------


_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


#: What a pipeline file may hold, at most: its size, the values it expands to (YAML aliases
#: repeat what they name: nine nested aliases make 10**9 copies) and their depth. A real
#: pipeline is a few hundred values; these stop a file that would hang the loader.
MAX_PIPELINE_BYTES = 1024 * 1024
MAX_PIPELINE_VALUES = 100_000
MAX_PIPELINE_DEPTH = 32


def _expand(value: Any, where: str, source: str, budget: list[int] | None = None,
            depth: int = 0) -> Any:
    """``${VAR}`` and ``${VAR:-default}`` substituted in every string; the values counted as
    they are copied (aliases included), so a file cannot expand beyond
    :data:`MAX_PIPELINE_VALUES` values nor :data:`MAX_PIPELINE_DEPTH` levels."""
    if budget is None:
        budget = [MAX_PIPELINE_VALUES]
    budget[0] -= 1
    if budget[0] < 0:
        raise PipelineError(f"{source}: expands to more than {MAX_PIPELINE_VALUES:,} values "
                            "(YAML aliases repeat what they name); a pipeline file holds a "
                            "few hundred")
    if depth > MAX_PIPELINE_DEPTH:
        raise PipelineError(f"{source}: {where}: nested more than {MAX_PIPELINE_DEPTH} levels "
                            "deep")
    if isinstance(value, str):
        def sub(m: re.Match) -> str:
            var, default = m.group(1), m.group(2)
            if var in os.environ:
                return os.environ[var]
            if default is not None:
                return default
            raise PipelineError(f"{source}: {where}: environment variable {var} is not set "
                                "(write ${" + var + ":-default} for a default)")
        return _ENV.sub(sub, value)
    if isinstance(value, list):
        return [_expand(v, f"{where}[{i}]", source, budget, depth + 1)
                for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        return {k: _expand(v, f"{where}.{k}", source, budget, depth + 1)
                for k, v in value.items()}
    return value


def load_pipeline(path: str | Path, build_operators: bool = True) -> PipelineConfig:
    """Read and validate a pipeline file; raise :class:`PipelineError` (one line) if bad.

    A missing file raises ``FileNotFoundError``.
    """
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_PIPELINE_BYTES:
        raise PipelineError(f"{path}: {size:,} bytes; a pipeline file holds at most "
                            f"{MAX_PIPELINE_BYTES:,} (is this the pipeline file?)")
    text = path.read_text()
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise PipelineError(f"{path}: nested too deep to read") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise PipelineError(f"{path}: invalid YAML{at}: {problem}") from None
    return parse_pipeline(data, source=str(path), build_operators=build_operators)


def parse_pipeline(data: Any, source: str = "<pipeline>",
                   build_operators: bool = True) -> PipelineConfig:
    """Validate a pipeline given as a mapping (what the YAML file holds).

    With ``build_operators`` every operator is constructed once, so bad parameters fail here.

    Examples
    --------
    >>> cfg = parse_pipeline({"pipeline": "p", "kafka": {"bootstrap_servers": "k:9092"},
    ...     "stages": [{"name": "detect", "input": "in", "output": "out",
    ...                 "operator": "river:ADWIN", "params": {"delta": 0.01}}]})
    >>> cfg.stages[0].operators, cfg.dlq_topic(cfg.stages[0])
    ([OperatorSpec(name='river:ADWIN', params={'delta': 0.01})], 'p.detect.dlq')
    >>> parse_pipeline({"pipeline": "p", "stages": [{"name": "d", "input": "in",
    ...     "output": "out", "oprator": "x"}]})
    Traceback (most recent call last):
    ...
    shiftwatch.deploy.pipeline.PipelineError: <pipeline>: stages[0] (d): unknown key 'oprator'; \
allowed: name, input, output, operator, params, operators, value, key, ts, guarantee, \
checkpoint, batch, consumer, producer, dedupe, upstream, emit, alerts, loose, state, time, bounds
    """
    def err(msg: str) -> PipelineError:
        return PipelineError(f"{source}: {msg}")

    if not isinstance(data, Mapping):
        raise err("expected a mapping with 'pipeline' and 'stages' at the top")
    _unknown(data, _TOP_KEYS, "top level", err)
    data = _expand(dict(data), "top level", source)
    name = data.get("pipeline")
    if not isinstance(name, str) or not _NAME.match(name):
        raise err("'pipeline' must be a name of letters, digits, '.', '_' or '-' "
                  f"(it prefixes group ids and topics), got {name!r}")
    kafka = data.get("kafka") or {}
    if not isinstance(kafka, Mapping):
        raise err("'kafka' must be a mapping of client settings")
    kafka = _kafka_section(kafka, err)
    kafka.setdefault("bootstrap_servers", "localhost:9092")
    defaults = {sec: _section(data.get(sec), sec, "top level", dict(_DEFAULTS[sec]), err)
                for sec in ("checkpoint", "batch", "consumer", "producer", "topics", "metrics")}
    guarantee = _guarantee(data.get("guarantee", "at-least-once"), "top level", err)
    emit = _emit(data.get("emit", "all"), "top level", err)
    alerts = _alerts(data.get("alerts"), "top level", err)
    stages_raw = data.get("stages")
    if not isinstance(stages_raw, list) or not stages_raw:
        raise err("'stages' must be a non-empty list of stages")
    stages: list[StageConfig] = []
    seen: set[str] = set()
    for i, raw in enumerate(stages_raw):
        stage = _stage(raw, i, defaults, guarantee, err, build_operators, emit)
        if stage.alerts is None:
            stage.alerts = alerts
        if stage.name in seen:
            raise err(f"stages[{i}]: duplicate stage name {stage.name!r}")
        seen.add(stage.name)
        stages.append(stage)
    for stage in stages:  # a stage fed by another stage of the file: that stage's input
        if stage.upstream is None and stage.dedupe:
            feeders = [s.input for s in stages if s.output == stage.input]
            if len(feeders) == 1:
                stage.upstream = feeders[0]
    return PipelineConfig(name=name, stages=stages, kafka=kafka, topics=defaults["topics"],
                          metrics=defaults["metrics"], source=source)


def _unknown(d: Mapping, allowed: tuple[str, ...], where: str, err) -> None:
    for k in d:
        if k not in allowed:
            raise err(f"{where}: unknown key {k!r}; allowed: {', '.join(allowed)}")


_ALERT_KEYS = ("url", "format", "retries", "backoff_s", "max_backoff_s", "timeout_s",
               "per_key_per_minute", "queue_size", "drain_s", "undelivered")


def _alerts(a: Any, where: str, err) -> dict | None:
    """``alerts: {url: ..., format: json|slack, retries: ..., ...}``, checked by building the
    sink once (sinks/alerts.py)."""
    if a is None:
        return None
    from shiftwatch.sinks.alerts import WebhookAlertSink, redact_url

    if not isinstance(a, Mapping) or "url" not in a:
        shown = ({k: redact_url(v) if k == "url" else v for k, v in a.items()}
                 if isinstance(a, Mapping) else a)  # the URL is a secret, even here
        raise err(f"{where}: alerts must be a mapping with a url (and optionally format, "
                  f"retries, backoff_s, max_backoff_s, timeout_s, per_key_per_minute, "
                  f"queue_size, drain_s, undelivered), got {shown!r}")

    _unknown(a, _ALERT_KEYS, f"{where}: alerts", err)
    try:
        WebhookAlertSink(**a)
    except (TypeError, ValueError) as exc:
        raise err(f"{where}: alerts: {exc}") from None
    return dict(a)


def _state(d: Any, where: str, err) -> dict:
    """``state: {ttl_seconds, clock, max_keys}`` (:func:`shiftwatch.deploy.expiry.check_state`)."""
    try:
        return check_state(d)
    except ValueError as exc:
        raise err(f"{where}: state: {exc}") from None


def _time(d: Any, where: str, err) -> dict:
    """``time: {allowed_lateness_seconds, drop_duplicates}``
    (:func:`shiftwatch.deploy.time_rule.check_time`)."""
    try:
        return check_time(d)
    except ValueError as exc:
        raise err(f"{where}: time: {exc}") from None


def _bounds(d: Any, where: str, err) -> dict:
    """``bounds: {max_abs_value, max_future_seconds}``
    (:func:`shiftwatch.deploy.bounds.check_bounds`)."""
    try:
        return check_bounds(d)
    except ValueError as exc:
        raise err(f"{where}: bounds: {exc}") from None


def _emit(e: Any, where: str, err) -> str:
    if e not in EMIT_CHOICES:
        raise err(f"{where}: emit must be one of {', '.join(EMIT_CHOICES)} (every output, or "
                  f"only those with alarm: true), got {e!r}")
    return e


def _guarantee(g: Any, where: str, err) -> str:
    if g not in GUARANTEES:
        raise err(f"{where}: guarantee must be one of {', '.join(GUARANTEES)}, got {g!r}")
    return g


def _section(value: Any, sec: str, where: str, base: dict, err) -> dict:
    if value is None:
        return base
    if not isinstance(value, Mapping):
        raise err(f"{where}: '{sec}' must be a mapping with keys {', '.join(_SECTION_KEYS[sec])}")
    _unknown(value, _SECTION_KEYS[sec], f"{where}: {sec}", err)
    out = {**base, **value}
    for k, v in out.items():
        want = _DEFAULTS[sec].get(k, 1)  # keys without a default (fetch sizes) are counts
        if k in ("auto_offset_reset",):
            if v not in ("earliest", "latest"):
                raise err(f"{where}: {sec}.{k} must be earliest or latest, got {v!r}")
        elif k == "assignor":
            if v not in ASSIGNORS:
                raise err(f"{where}: {sec}.{k} must be one of {', '.join(ASSIGNORS)}, "
                          f"got {v!r}")
        elif k == "file":
            if v is not None and not isinstance(v, str):
                raise err(f"{where}: {sec}.{k} must be a path, got {v!r}")
        elif k == "port":  # /metrics, /healthz, /readyz (0: any free port)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)
                                  or not 0 <= v <= 65535):
                raise err(f"{where}: {sec}.{k} must be a TCP port 0-65535, got {v!r}")
        elif k == "restore":
            if v not in RESTORE_MODES:
                raise err(f"{where}: {sec}.{k} must be one of {', '.join(RESTORE_MODES)}, "
                          f"got {v!r}")
        elif k == "compression_type":
            if v not in COMPRESSION_TYPES:
                raise err(f"{where}: {sec}.{k} must be one of {', '.join(COMPRESSION_TYPES)}, "
                          f"got {v!r}")
        elif k in ("linger_ms", "max_key_series"):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise err(f"{where}: {sec}.{k} must be an integer >= 0, got {v!r}")
        elif k == "address":
            if not isinstance(v, str) or not v:
                raise err(f"{where}: {sec}.{k} must be an address to listen on "
                          f"(0.0.0.0, 127.0.0.1, ...), got {v!r}")
        elif isinstance(want, bool):
            if not isinstance(v, bool):
                raise err(f"{where}: {sec}.{k} must be true or false, got {v!r}")
        elif isinstance(want, (int, float)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0 or \
                    (isinstance(want, int) and not isinstance(v, int)):
                kind = "a positive integer" if isinstance(want, int) else "a positive number"
                raise err(f"{where}: {sec}.{k} must be {kind}, got {v!r}")
    return out


def _topic(v: Any, what: str, where: str, err) -> str:
    if v is None:
        raise err(f"{where}: missing '{what}' topic")
    if not isinstance(v, str) or not _NAME.match(v) or len(v) > 249:
        raise err(f"{where}: {what} must be a Kafka topic name, got {v!r}")
    return v


def _stage(raw: Any, i: int, defaults: dict, guarantee: str, err,
           build_operators: bool, emit: str = "all") -> StageConfig:
    where = f"stages[{i}]"
    if not isinstance(raw, Mapping):
        raise err(f"{where}: a stage must be a mapping, got {type(raw).__name__}")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise err(f"{where}: 'name' must be a name of letters, digits, '.', '_' or '-', "
                  f"got {name!r}")
    where = f"{where} ({name})"
    _unknown(raw, _STAGE_KEYS, where, err)
    inp = _topic(raw.get("input"), "input", where, err)
    out = _topic(raw.get("output"), "output", where, err)
    if inp == out:
        raise err(f"{where}: input and output are the same topic {inp!r}")
    if "operator" in raw and "operators" in raw:
        raise err(f"{where}: give either 'operator' (+ 'params') or 'operators', not both")
    if "operators" in raw:
        if "params" in raw:
            raise err(f"{where}: 'params' belongs inside each entry of 'operators'")
        lst = raw["operators"]
        if not isinstance(lst, list) or not lst:
            raise err(f"{where}: 'operators' must be a non-empty list of "
                      "{operator: NAME, params: {...}}")
        specs = [_op_spec(o, f"{where}: operators[{j}]", err) for j, o in enumerate(lst)]
    elif "operator" in raw:
        specs = [_op_spec({"operator": raw["operator"], "params": raw.get("params")}, where, err)]
    else:
        raise err(f"{where}: missing 'operator' (see `shiftwatch operators`)")
    if build_operators:
        for spec in specs:
            try:
                spec.build()
            except ValueError as exc:
                raise err(f"{where}: {str(exc).splitlines()[0]}") from None
    value = raw.get("value", "value")
    if not isinstance(value, str) or not value:
        raise err(f"{where}: 'value' must be a field name (dotted for nested), got {value!r}")
    key = raw.get("key")
    if key is not None and (not isinstance(key, str) or not key):
        raise err(f"{where}: 'key' must be a field name, got {key!r}")
    ts = raw.get("ts")
    if ts is not None and (not isinstance(ts, str) or not ts):
        raise err(f"{where}: 'ts' must be a field name (event time in seconds), got {ts!r}")
    dedupe = raw.get("dedupe", True)
    if not isinstance(dedupe, bool):
        raise err(f"{where}: 'dedupe' must be true or false, got {dedupe!r}")
    loose = raw.get("loose", False)
    if not isinstance(loose, bool):
        raise err(f"{where}: 'loose' must be true or false, got {loose!r}")
    upstream = raw.get("upstream")
    if upstream is not None:
        upstream = _topic(upstream, "upstream", where, err)
    sections = {sec: _section(raw.get(sec), sec, where, dict(defaults[sec]), err)
                for sec in ("checkpoint", "batch", "consumer", "producer")}
    c = sections["consumer"]
    if c["session_timeout_ms"] <= c["heartbeat_interval_ms"]:
        raise err(f"{where}: consumer.heartbeat_interval_ms must be below session_timeout_ms")
    return StageConfig(name=name, input=inp, output=out, operators=specs, value=value, key=key,
                       ts=ts,
                       guarantee=_guarantee(raw.get("guarantee", guarantee), where, err),
                       dedupe=dedupe, loose=loose, upstream=upstream,
                       emit=_emit(raw.get("emit", emit), where, err),
                       alerts=_alerts(raw.get("alerts"), where, err),
                       state=_state(raw.get("state"), where, err),
                       time=_time(raw.get("time"), where, err),
                       bounds=_bounds(raw.get("bounds"), where, err), **sections)


def _op_spec(o: Any, where: str, err) -> OperatorSpec:
    if not isinstance(o, Mapping):
        raise err(f"{where}: expected {{operator: NAME, params: {{...}}}}, got {o!r}")
    _unknown(o, ("operator", "params"), where, err)
    name = o.get("operator")
    if not isinstance(name, str) or not name:
        raise err(f"{where}: 'operator' must be an operator name (see `shiftwatch operators`)")
    params = o.get("params") or {}
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise err(f"{where}: 'params' must be a mapping of parameter names to values")
    return OperatorSpec(name=name, params=dict(params))
