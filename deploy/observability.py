"""Prometheus metrics and health probes for ``shiftwatch run`` and ``shiftwatch replay``.

One :class:`MetricsServer` per process serves, on one port:

* ``/metrics``: the Prometheus text format, written by ``prometheus_client`` from the
  server's own registry (:data:`METRICS` lists every family, its type and labels);
* ``/healthz``: 200 while every stage's loop turns (a loop turn within the stage's
  ``liveness_seconds``, fewer than ``stalls_before_unhealthy`` slow batches in a row, and
  not disconnected from the cluster for longer than ``liveness_seconds``), 503 otherwise;
* ``/readyz``: 200 once every stage has joined its group and restored the partitions it was
  assigned (a replay: once it started) and while it reaches the cluster, 503 before that,
  during a rebalance, while disconnected and at shutdown.

Both bodies are JSON and say why, per stage (``connected``, ``seconds_disconnected``, ...).
The ``/readyz`` body also shows the input as the member last saw it (``input``: the input
topic's partitions, those this member owns, those behind their end; see
:mod:`shiftwatch.deploy.kafka.coverage`): readiness is the member's own (a member of a group
of three owns a third of the input and is ready), the rest is for the operator.

Each stage (or replay) reports through its own :class:`StageMetrics`, whose label values are
the pipeline and stage names; per-operator alarm counts add the operator name, dead letters
a reason class from the fixed set :data:`REASON_CLASSES`, lag the partition number. A label
never holds a value; a record key only in ``shiftwatch_key_alarms_total``, for at most
``max_key_series`` keys of a stage, the later ones folded into ``key="_other"``
(:mod:`~shiftwatch.deploy.key_alarms`), so the number of series is bounded by configuration.

The server answers with a fixed number of threads whatever the clients do: one thread
accepts connections and watches them, :data:`HTTP_WORKERS` threads answer requests. A
connection costs a thread only once its request has arrived; one left idle is closed after
:data:`IDLE_TIMEOUT_S` seconds, at most :data:`MAX_OPEN_CONNECTIONS` are kept open (the
oldest goes first), and a request that does not arrive whole within
:data:`READ_TIMEOUT_S` seconds is dropped.

``prometheus_client`` is imported only when a server or a stage's metrics are created: the
CLI starts without it.
"""

from __future__ import annotations

import json
import logging
import queue
import selectors
import threading
import time
from collections.abc import Mapping
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from shiftwatch.deploy.key_alarms import DEFAULT_MAX_KEY_SERIES, KeyAlarmSeries

__all__ = ["MetricsServer", "StageMetrics", "METRICS", "REASON_CLASSES", "reason_class"]

log = logging.getLogger("shiftwatch.metrics")

#: Every exported family: name (as exposed; counters gain ``_total``), type, labels, help.
METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "shiftwatch_records_in_total": (
        "counter", ("pipeline", "stage"),
        "Input records read (dead letters and duplicates included)."),
    "shiftwatch_records_out_total": (
        "counter", ("pipeline", "stage"), "Output records of the stage's last operator."),
    "shiftwatch_dead_letters_total": (
        "counter", ("pipeline", "stage", "reason"),
        "Dead letters by reason class (decode, missing_field, not_a_number, shape, "
        "out_of_range, late, other)."),
    "shiftwatch_alarms_total": (
        "counter", ("pipeline", "stage", "operator"),
        "Outputs with alarm=true, by the operator that emitted them."),
    "shiftwatch_key_alarms_total": (
        "counter", ("pipeline", "stage", "operator", "key"),
        "Outputs with alarm=true by record key, for the first max_key_series keys of the "
        "stage to alarm; the later keys' alarms count under key=\"_other\" (key labels are "
        "escaped and cut to 64 characters)."),
    "shiftwatch_key_alarms_folded_keys": (
        "gauge", ("pipeline", "stage"),
        "Distinct keys whose alarms count under key=\"_other\" (exact up to 10000 keys, then "
        "a HyperLogLog estimate)."),
    "shiftwatch_alerts_total": (
        "counter", ("pipeline", "stage", "outcome"),
        "Alarms handed to the alert webhook, by outcome (sent, failed, dropped, suppressed)."),
    "shiftwatch_duplicates_dropped_total": (
        "counter", ("pipeline", "stage"),
        "Inputs dropped as duplicates: of an upstream stage's re-produced outputs, or of one "
        "of the key's last records (time.drop_duplicates)."),
    "shiftwatch_keys_evicted_total": (
        "counter", ("pipeline", "stage"),
        "Keys forgotten by the stage's state rule (idle past ttl_seconds, or over max_keys)."),
    "shiftwatch_batch_seconds": (
        "histogram", ("pipeline", "stage"), "Wall time to process one micro-batch."),
    "shiftwatch_slow_batches_total": (
        "counter", ("pipeline", "stage"),
        "Batches that took over half of consumer.max_poll_interval_ms."),
    "shiftwatch_consumer_lag_records": (
        "gauge", ("pipeline", "stage", "partition"),
        "Records between the partition's high watermark and the stage's next offset."),
    "shiftwatch_partitions_owned": (
        "gauge", ("pipeline", "stage"), "Input partitions assigned to this member."),
    "shiftwatch_input_partitions": (
        "gauge", ("pipeline", "stage"),
        "Partitions of the stage's input topic on the cluster (last asked)."),
    "shiftwatch_input_partitions_behind": (
        "gauge", ("pipeline", "stage"),
        "Input partitions not at their end: this member's behind its position, the others "
        "behind the group's committed offset (owned by another member still working, or by "
        "none). Staying above 0 with no input arriving means part of the input is not read."),
    "shiftwatch_rebalances_total": (
        "counter", ("pipeline", "stage"), "Partition assignments received from the group."),
    "shiftwatch_checkpoints_total": (
        "counter", ("pipeline", "stage"), "Checkpoints committed (marker and offset)."),
    "shiftwatch_checkpoint_seconds": (
        "histogram", ("pipeline", "stage"),
        "Time the stage loop spent writing a checkpoint (synchronous ones include the wait "
        "for acknowledgement and commit)."),
    "shiftwatch_last_checkpoint_age_seconds": (
        "gauge", ("pipeline", "stage"),
        "Seconds since the last committed checkpoint (since the stage started, before the "
        "first)."),
    "shiftwatch_stage_ready": (
        "gauge", ("pipeline", "stage"), "1 when the stage is assigned and restored."),
    "shiftwatch_stage_live": (
        "gauge", ("pipeline", "stage"), "1 while the stage's loop turns."),
    "shiftwatch_stage_connected": (
        "gauge", ("pipeline", "stage"),
        "1 while the stage reaches the Kafka cluster (its group coordinator is known)."),
}

#: The values of the ``reason`` label of ``shiftwatch_dead_letters_total``.
REASON_CLASSES = ("decode", "missing_field", "not_a_number", "shape", "out_of_range", "late",
                  "other")

_REASON_PATTERNS = (
    ("late", ()),  # the time rule's reasons start with "late: " (deploy/time_rule.py)
    ("decode", ("invalid json", "not utf-8", "tombstone", "is a json", "not a mapping",
                "key is an object", "not a record mapping")),
    ("missing_field", ("has no field",)),
    ("not_a_number", ("not a number", "must be a number", "not finite", "too large for a float",
                      "nan or infinite", "not a numeric array", "takes 0/1")),
    ("shape", ("shape", "dimensions", "length", "ragged", "empty vector", "square matrix",
               "unit vector", "orthonormal", "symmetric", "positive definite", "norm")),
    ("out_of_range", ("outside", "class index", "out of range")),
)

#: Threads that answer HTTP requests (besides the one that accepts and watches connections).
HTTP_WORKERS = 4
#: Connections kept open waiting for their request; beyond it the oldest is closed.
MAX_OPEN_CONNECTIONS = 64
#: An open connection that sends nothing for this long is closed.
IDLE_TIMEOUT_S = 10.0
#: A request whose line and headers have not arrived this long after they began is dropped.
READ_TIMEOUT_S = 5.0
#: Requests read to answer, waiting for a worker; beyond it a connection is closed at once.
_QUEUED_REQUESTS = 32

#: Batch-time buckets (seconds): a 1000-record batch takes milliseconds to seconds.
_BATCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                  10.0, 30.0, 60.0, 150.0, 300.0)


def reason_class(reason: str) -> str:
    """The bounded class of a dead letter's reason (one of :data:`REASON_CLASSES`).

    >>> reason_class("invalid JSON: Expecting value at column 1")
    'decode'
    >>> reason_class("value 'abc' is not a number"), reason_class("record has no field 'x'")
    ('not_a_number', 'missing_field')
    >>> reason_class("something new")
    'other'
    """
    if reason.startswith("late: "):
        return "late"
    low = reason.lower()
    for cls, needles in _REASON_PATTERNS:
        if any(n in low for n in needles):
            return cls
    return "other"


class _Families:
    """The metric families of one registry (created once per :class:`MetricsServer`)."""

    def __init__(self, registry: Any):
        from prometheus_client import Counter, Gauge, Histogram

        self.registry = registry
        made: dict[str, Any] = {}
        for name, (kind, labels, doc) in METRICS.items():
            if kind == "counter":
                made[name] = Counter(name.removesuffix("_total"), doc, labels,
                                     registry=registry)
            elif kind == "gauge":
                made[name] = Gauge(name, doc, labels, registry=registry)
            else:
                made[name] = Histogram(name, doc, labels, registry=registry,
                                       buckets=_BATCH_BUCKETS)
        self.by_name = made


class StageMetrics:
    """The metrics and health of one stage (or one replay) of a process.

    Created by :meth:`MetricsServer.stage`. The stage's loop calls :meth:`turn` and
    :meth:`connected` once per loop iteration, :meth:`batch` after each micro-batch,
    :meth:`sync` to copy the counters of its :class:`~shiftwatch.deploy.executor.RunSummary`;
    the executor calls :meth:`dead_letter` and :meth:`alarms`. None of them raises on normal
    input.

    Parameters
    ----------
    families
        The registry's metric families.
    pipeline, stage
        The label values.
    liveness_seconds
        The stage is not live when its loop has not turned for this long, or when it has
        been disconnected from the cluster for longer.
    stalls_before_unhealthy
        The stage is not live after this many slow batches in a row.
    slow_batch_seconds
        A batch longer than this is slow (a Kafka stage: half of max_poll_interval_ms).
    max_key_series
        Keys that get their own ``shiftwatch_key_alarms_total`` series (the first to alarm);
        the alarms of later keys count under ``key="_other"``
        (:class:`~shiftwatch.deploy.key_alarms.KeyAlarmSeries`).

    Examples
    --------
    >>> server = MetricsServer(port=None)
    >>> m = server.stage("sensors", "detect", stalls_before_unhealthy=2, slow_batch_seconds=1.0)
    >>> m.alarms("river:ADWIN", 3, keys={"pump-a": 2, "pump-b": 1})
    >>> m.dead_letter("invalid JSON: x"); m.turn(); m.set_ready(True)
    >>> m.batch(0.01), m.live, m.batch(2.0), m.live, m.batch(3.0), m.live
    (None, True, None, True, None, False)
    >>> server.value("shiftwatch_alarms_total", stage="detect", operator="river:ADWIN")
    3.0
    >>> server.value("shiftwatch_key_alarms_total", stage="detect", key="pump-a")
    2.0
    >>> m.connected(False); m.ready, m.health()["connected"]
    (False, False)
    """

    def __init__(self, families: _Families, pipeline: str, stage: str,
                 liveness_seconds: float = 300.0, stalls_before_unhealthy: int = 3,
                 slow_batch_seconds: float | None = None,
                 max_key_series: int = DEFAULT_MAX_KEY_SERIES):
        if isinstance(stalls_before_unhealthy, bool) or not isinstance(
                stalls_before_unhealthy, int) or stalls_before_unhealthy < 1:
            raise ValueError("stalls_before_unhealthy must be an integer >= 1, got "
                             f"{stalls_before_unhealthy!r}")
        if not liveness_seconds > 0:
            raise ValueError(f"liveness_seconds must be > 0, got {liveness_seconds!r}")
        self.families = families
        self.pipeline = pipeline
        self.stage = stage
        self.liveness_seconds = liveness_seconds
        self.stalls_before_unhealthy = stalls_before_unhealthy
        self.slow_batch_seconds = slow_batch_seconds
        self.key_alarms = KeyAlarmSeries(families.by_name["shiftwatch_key_alarms_total"],
                                         pipeline, stage, max_key_series)
        self._reset()

    def _reset(self) -> None:
        f = self.families.by_name
        lv = (self.pipeline, self.stage)
        self._c = {k: f[k].labels(*lv) for k, (kind, labels, _) in METRICS.items()
                   if len(labels) == 2}
        self._seen: dict[str, float] = {}
        self._lag_partitions: set[int] = set()
        self._last_turn = time.monotonic()
        self._stalls = 0
        self._ready = False
        self._disconnected_since: float | None = None
        self._coverage_view: dict | None = None
        self._started_unix = time.time()
        self._last_checkpoint_unix: float | None = None
        self._c["shiftwatch_last_checkpoint_age_seconds"].set_function(self._checkpoint_age)
        self._c["shiftwatch_stage_live"].set_function(lambda: float(self.live))
        self._c["shiftwatch_key_alarms_folded_keys"].set_function(
            lambda: self.key_alarms.folded_keys)
        self._c["shiftwatch_stage_ready"].set_function(lambda: float(self.ready))
        self._c["shiftwatch_stage_connected"].set_function(
            lambda: float(self._disconnected_since is None))

    # ---- called by the stage loop --------------------------------------------------

    def turn(self) -> None:
        """The loop turned (liveness)."""
        self._last_turn = time.monotonic()

    def batch(self, seconds: float) -> None:
        """One micro-batch took ``seconds``; counts slow ones and consecutive stalls."""
        self._c["shiftwatch_batch_seconds"].observe(seconds)
        if self.slow_batch_seconds is not None and seconds > self.slow_batch_seconds:
            self._c["shiftwatch_slow_batches_total"].inc()
            self._stalls += 1
        else:
            self._stalls = 0
        self._last_turn = time.monotonic()

    def checkpoint(self, seconds: float) -> None:
        """A checkpoint write took ``seconds``."""
        self._c["shiftwatch_checkpoint_seconds"].observe(seconds)

    def rebalance(self) -> None:
        """The group assigned partitions."""
        self._c["shiftwatch_rebalances_total"].inc()

    def set_ready(self, ready: bool) -> None:
        """Assigned and restored (True), or rebalancing / stopping (False)."""
        self._ready = ready

    def connected(self, connected: bool) -> None:
        """Whether the stage reaches the cluster right now (called once per loop turn).

        While it does not, the stage is not ready; once that has lasted longer than
        ``liveness_seconds`` it is not live either (a restart is due)."""
        if connected:
            self._disconnected_since = None
        elif self._disconnected_since is None:
            self._disconnected_since = time.monotonic()

    def partitions(self, lags: dict[int, int | None]) -> None:
        """The partitions owned and their lag (None: not known yet)."""
        g = self.families.by_name["shiftwatch_consumer_lag_records"]
        self._c["shiftwatch_partitions_owned"].set(len(lags))
        for p in self._lag_partitions - set(lags):
            try:
                g.remove(self.pipeline, self.stage, str(p))
            except KeyError:
                pass
        self._lag_partitions = set()
        for p, lag in lags.items():
            if lag is not None:
                g.labels(self.pipeline, self.stage, str(p)).set(lag)
                self._lag_partitions.add(p)

    def coverage(self, view: dict) -> None:
        """The input seen from this member (:meth:`~shiftwatch.deploy.kafka.coverage.Coverage.
        as_dict`): its partitions, those owned here, those behind."""
        self._coverage_view = view
        self._c["shiftwatch_input_partitions"].set(view["input_partitions"])
        self._c["shiftwatch_input_partitions_behind"].set(len(view["behind"]))

    def sync(self, summary: Any) -> None:
        """Add what ``summary`` (a :class:`RunSummary`) counted since the last call."""
        for name, attr in (("shiftwatch_records_in_total", "records_in"),
                           ("shiftwatch_records_out_total", "outputs"),
                           ("shiftwatch_duplicates_dropped_total", "duplicates_dropped"),
                           ("shiftwatch_keys_evicted_total", "keys_evicted"),
                           ("shiftwatch_checkpoints_total", "checkpoints")):
            now = getattr(summary, attr)
            delta = now - self._seen.get(attr, 0)
            if delta > 0:
                self._c[name].inc(delta)
                self._seen[attr] = now
        self._last_checkpoint_unix = getattr(summary, "last_checkpoint_unix", None)

    # ---- called by the executor ------------------------------------------------------

    def dead_letter(self, reason: str) -> None:
        """One dead letter with this reason text (counted under its class)."""
        self.families.by_name["shiftwatch_dead_letters_total"].labels(
            self.pipeline, self.stage, reason_class(reason)).inc()

    def alarms(self, operator: str, n: int, keys: Mapping[Any, int] | None = None) -> None:
        """``operator`` emitted ``n`` alarm outputs, ``keys[key]`` of them for each key."""
        if n:
            self.families.by_name["shiftwatch_alarms_total"].labels(
                self.pipeline, self.stage, operator).inc(n)
        if keys:
            self.key_alarms.add(operator, keys)

    def alert(self, outcome: str) -> None:
        """One alarm's fate at the alert webhook (``sent``, ``failed``, ``dropped``,
        ``suppressed``: :class:`~shiftwatch.sinks.alerts.WebhookAlertSink`)."""
        self.families.by_name["shiftwatch_alerts_total"].labels(
            self.pipeline, self.stage, outcome).inc()

    # ---- health ----------------------------------------------------------------------

    @property
    def seconds_disconnected(self) -> float:
        """Seconds since the stage last reached the cluster (0 while it does)."""
        since = self._disconnected_since
        return 0.0 if since is None else time.monotonic() - since

    @property
    def live(self) -> bool:
        """The loop turned within ``liveness_seconds``, is not stalled, and has not been
        disconnected for longer than ``liveness_seconds``."""
        return (time.monotonic() - self._last_turn <= self.liveness_seconds
                and self._stalls < self.stalls_before_unhealthy
                and self.seconds_disconnected <= self.liveness_seconds)

    @property
    def ready(self) -> bool:
        """Assigned and restored, and reaching the cluster."""
        return self._ready and self._disconnected_since is None

    def health(self) -> dict:
        """The probes' view of the stage, with the reasons (the /healthz body)."""
        return {"live": self.live, "ready": self.ready, "assigned": self._ready,
                "connected": self._disconnected_since is None,
                "seconds_disconnected": round(self.seconds_disconnected, 3),
                "consecutive_stalls": self._stalls,
                "seconds_since_loop_turn": round(time.monotonic() - self._last_turn, 3)}

    def _checkpoint_age(self) -> float:
        last = self._last_checkpoint_unix
        return time.time() - (last if last is not None else self._started_unix)


class MetricsServer:
    """A process's registry and its HTTP server: ``/metrics``, ``/healthz``, ``/readyz``.

    Parameters
    ----------
    port
        TCP port to listen on; 0 picks a free one (see :attr:`port` after :meth:`start`);
        None serves nothing (the registry still counts, e.g. for tests).
    address
        Address to bind: ``0.0.0.0`` in a container (the kubelet probes the pod's IP),
        ``127.0.0.1`` to stay on loopback.

    Examples
    --------
    >>> from urllib.request import urlopen
    >>> server = MetricsServer(port=0, address="127.0.0.1").start()
    >>> m = server.stage("p", "s")
    >>> urlopen(f"http://127.0.0.1:{server.port}/healthz").status
    200
    >>> m.set_ready(True)
    >>> urlopen(f"http://127.0.0.1:{server.port}/readyz").status
    200
    >>> server.close()
    """

    def __init__(self, port: int | None = 0, address: str = "0.0.0.0"):
        from prometheus_client import CollectorRegistry

        self.port = port
        self.address = address
        self.registry = CollectorRegistry(auto_describe=True)
        self.families = _Families(self.registry)
        self.stages: list[StageMetrics] = []
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def stage(self, pipeline: str, stage: str, **kwargs) -> StageMetrics:
        """The metrics of a new stage (keyword arguments: see :class:`StageMetrics`)."""
        m = StageMetrics(self.families, pipeline, stage, **kwargs)
        self.stages.append(m)
        return m

    def value(self, name: str, **labels) -> float | None:
        """The current value of one sample (summed over unnamed labels), or None."""
        total = None
        for fam in self.registry.collect():
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    total = (total or 0.0) + s.value
        return total

    # ---- HTTP ------------------------------------------------------------------------

    def _app(self):
        from prometheus_client import make_wsgi_app

        metrics_app = make_wsgi_app(self.registry)

        def health(start_response, ok: bool, body: dict):
            data = json.dumps(body).encode()
            start_response("200 OK" if ok else "503 Service Unavailable",
                           [("Content-Type", "application/json"),
                            ("Content-Length", str(len(data)))])
            return [data]

        def app(environ, start_response):
            path = environ.get("PATH_INFO", "/")
            if path == "/healthz":
                stages = {f"{m.pipeline}/{m.stage}": m.health() for m in self.stages}
                return health(start_response, all(m.live for m in self.stages),
                              {"live": all(m.live for m in self.stages), "stages": stages})
            if path == "/readyz":
                ok = bool(self.stages) and all(m.ready for m in self.stages)
                why = {}
                for m in self.stages:
                    h = m.health()
                    why[f"{m.pipeline}/{m.stage}"] = {
                        **{k: h[k] for k in ("assigned", "connected", "seconds_disconnected")},
                        "input": m._coverage_view}  # (the group's view; not a condition)
                return health(start_response, ok, {
                    "ready": ok, "stages": {f"{m.pipeline}/{m.stage}": m.ready
                                            for m in self.stages}, "why": why})
            return metrics_app(environ, start_response)

        return app

    def start(self) -> MetricsServer:
        """Listen in a daemon thread (no-op when ``port`` is None); returns self.

        Raises ``OSError`` when the port is taken."""
        if self.port is None or self._server is not None:
            return self
        self._server = _PooledServer((self.address, self.port), _QuietHandler)
        self._server.set_app(self._app())
        self._server.start_workers()
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.2},
                                        name="shiftwatch-metrics", daemon=True)
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics (probes /healthz, /readyz)",
                 self.address, self.port)
        return self

    def close(self) -> None:
        """Stop serving and release the port."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


class _QuietHandler(WSGIRequestHandler):
    timeout = READ_TIMEOUT_S  # socket timeout while a worker reads the request

    def log_message(self, format, *args):  # scrapes every few seconds: no access log
        pass


class _PooledServer(WSGIServer):
    """wsgiref's server with a bounded number of threads (see the module docstring).

    :meth:`serve_forever` (one thread) accepts connections and parks them in a selector until
    their request arrives, then queues them for :data:`HTTP_WORKERS` worker threads. Each
    answer is one request per connection (wsgiref speaks HTTP/1.0), so a worker is busy for
    one request at a time and at most :data:`READ_TIMEOUT_S` waiting for it.
    """

    allow_reuse_address = True
    request_queue_size = 128  # the listen backlog (socketserver's 5 drops bursts of connects)

    def start_workers(self) -> None:
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._requests: queue.Queue = queue.Queue(maxsize=_QUEUED_REQUESTS)
        self._workers = [threading.Thread(target=self._work, name=f"shiftwatch-metrics-{i}",
                                          daemon=True) for i in range(HTTP_WORKERS)]
        for t in self._workers:
            t.start()

    def serve_forever(self, poll_interval: float = 0.2) -> None:
        parked: dict[Any, float] = {}  # connection -> when it was accepted (oldest first)
        sel = selectors.DefaultSelector()
        sel.register(self.socket, selectors.EVENT_READ)

        def drop(conn) -> None:
            sel.unregister(conn)
            del parked[conn]
            self.shutdown_request(conn)

        try:
            while not self._stopping.is_set():
                for key, _ in sel.select(poll_interval):
                    if key.fileobj is self.socket:
                        try:
                            conn, _addr = self.socket.accept()
                        except OSError:
                            continue
                        if len(parked) >= MAX_OPEN_CONNECTIONS:
                            drop(next(iter(parked)))
                        parked[conn] = time.monotonic()
                        sel.register(conn, selectors.EVENT_READ)
                        continue
                    conn = key.fileobj
                    sel.unregister(conn)
                    del parked[conn]
                    try:
                        self._requests.put_nowait(conn)
                    except queue.Full:  # every worker busy and the queue full: refuse
                        self.shutdown_request(conn)
                cutoff = time.monotonic() - IDLE_TIMEOUT_S
                while parked and next(iter(parked.values())) < cutoff:
                    drop(next(iter(parked)))
        finally:
            for conn in list(parked):
                drop(conn)
            sel.close()
            self._stopped.set()

    def _work(self) -> None:
        while True:
            conn = self._requests.get()
            if conn is None:
                return
            try:
                self.finish_request(conn, conn.getpeername())
            except Exception:  # a client that went away, a timeout: nothing to answer
                log.debug("metrics request failed", exc_info=True)
            finally:
                self.shutdown_request(conn)

    def shutdown(self) -> None:
        """Stop accepting, close parked connections, let the workers finish; waits."""
        self._stopping.set()
        self._stopped.wait(timeout=5)
        while True:  # requests not begun are not answered
            try:
                conn = self._requests.get_nowait()
            except queue.Empty:
                break
            if conn is not None:
                self.shutdown_request(conn)
        for _ in self._workers:
            self._requests.put(None)
        for t in self._workers:
            t.join(timeout=5)
