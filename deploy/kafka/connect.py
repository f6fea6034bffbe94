"""Reaching the Kafka cluster: a bounded wait and one clear line when nobody answers.

kafka-python waits 30 s for a first broker by default, logging ERROR lines all the while,
then raises ``KafkaTimeoutError: Unable to bootstrap ...``. The Kafka commands (``run``,
``produce``, ``consume``, ``replay kafka:...``, ``demo --kafka``) give every client
``bootstrap_timeout_ms`` from :func:`client_defaults` (``--connect-timeout SECONDS``, else a
pipeline's ``kafka.bootstrap_timeout_ms``, else ``SHIFTWATCH_CONNECT_TIMEOUT`` seconds, else
10), keep the ``kafka`` logger quiet unless ``--debug``, and turn that error into one line by
:func:`unreachable_message`.

Losing the cluster later, while a stage runs, is :func:`lost_cluster`'s question: which
kafka-python errors mean the cluster is gone or was replaced (the stage then reconnects for
up to :data:`CLUSTER_LOST_WAIT_S` seconds, and stops with :class:`ClusterLostError`, one line,
if it is not back).

Imports nothing from kafka-python at import time, so the command line can use it at start-up.
"""

from __future__ import annotations

import logging
import os
import re

from shiftwatch.deploy.errors import UserError

__all__ = ["DEFAULT_CONNECT_TIMEOUT_S", "connect_timeout_s", "client_defaults",
           "quiet_kafka_logs", "is_unreachable", "unreachable_message", "default_bootstrap",
           "CLUSTER_LOST_WAIT_S", "RECONNECT_BACKOFF_S", "lost_cluster", "Outage",
           "ClusterLostError", "SessionLost"]

DEFAULT_CONNECT_TIMEOUT_S = 10.0

#: Seconds a stage that lost its cluster keeps reconnecting (with backoff) before it stops
#: with one line; counted from the first error, and reset once the stage is assigned again.
CLUSTER_LOST_WAIT_S = 60.0
#: Seconds between a stage's attempts to reconnect (the last one repeats), within
#: :data:`CLUSTER_LOST_WAIT_S` in all.
RECONNECT_BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0)


def connect_timeout_s() -> float:
    """Seconds to wait for a first broker: ``$SHIFTWATCH_CONNECT_TIMEOUT`` or 10.

    >>> connect_timeout_s() > 0
    True
    """
    raw = os.environ.get("SHIFTWATCH_CONNECT_TIMEOUT")
    if not raw:
        return DEFAULT_CONNECT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"SHIFTWATCH_CONNECT_TIMEOUT must be seconds > 0, got {raw!r}") from None
    if not value > 0:
        raise ValueError(f"SHIFTWATCH_CONNECT_TIMEOUT must be seconds > 0, got {raw!r}")
    return value


def client_defaults(timeout_s: float | None = None) -> dict:
    """kafka-python settings every client of a command gets (a bounded bootstrap wait).

    >>> client_defaults(2.5)
    {'bootstrap_timeout_ms': 2500}
    """
    t = connect_timeout_s() if timeout_s is None else float(timeout_s)
    if not t > 0:
        raise ValueError(f"connect timeout must be seconds > 0, got {timeout_s!r}")
    return {"bootstrap_timeout_ms": int(round(t * 1000))}


def default_bootstrap() -> str:
    """``$KAFKA_BOOTSTRAP`` or ``localhost:9092``."""
    return os.environ.get("KAFKA_BOOTSTRAP") or "localhost:9092"


def quiet_kafka_logs(debug: bool = False) -> None:
    """kafka-python's own log: silent (CRITICAL only) unless ``debug``, then INFO."""
    logging.getLogger("kafka").setLevel(logging.INFO if debug else logging.CRITICAL)


def is_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` is kafka-python (or confluent-kafka: all brokers down, transport)
    saying no broker answered the bootstrap."""
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    code = _confluent_code(exc)
    if code is not None:
        return code[0] in ("_ALL_BROKERS_DOWN", "_TRANSPORT")
    if not module.startswith("kafka"):
        return False
    return name == "NoBrokersAvailable" or (
        name == "KafkaTimeoutError" and "bootstrap" in str(exc).lower())


def unreachable_message(exc: BaseException, hint: str | None = None,
                        timeout_s: float | None = None) -> str:
    """One line for an unreachable cluster: where, how long, and how to point elsewhere.

    >>> class KafkaTimeoutError(Exception): pass
    >>> unreachable_message(KafkaTimeoutError("Unable to bootstrap from ['h:1']"))[:52]
    'no Kafka broker answered at h:1 within 10 s; give th'
    """
    m = re.search(r"bootstrap from \[?([^\]]*)\]?", str(exc))
    where = m.group(1).replace("'", "").strip() if m else "the bootstrap address"
    try:
        waited = f"{timeout_s if timeout_s is not None else connect_timeout_s():g} s"
    except ValueError:
        waited = "the connect timeout"
    hint = hint or ("give the broker's address with --bootstrap HOST:PORT or the "
                    "KAFKA_BOOTSTRAP environment variable")
    return (f"no Kafka broker answered at {where} within {waited}; {hint} "
            "(`shiftwatch broker` starts a local one; --connect-timeout SECONDS or "
            "SHIFTWATCH_CONNECT_TIMEOUT sets the wait)")


class SessionLost(RuntimeError):
    """Raised by a stage whose group dropped it (its partitions were lost: a long outage, a
    broker restarted empty): the cluster may not be the one it left, so the stage starts
    over as after a lost cluster (:func:`lost_cluster` says yes)."""


class ClusterLostError(UserError):
    """A running stage lost its Kafka cluster and it did not come back within
    :data:`CLUSTER_LOST_WAIT_S` seconds (one line, exit status 2; nothing was committed)."""


#: Errors of a producer whose broker no longer knows it: the broker restarted without its
#: state (an in-memory test broker) or the cluster was replaced.
_FORGOTTEN = ("UnknownProducerIdError", "OutOfOrderSequenceNumberError",
              "InvalidProducerIdMappingError", "UnknownError", "CommitFailedError",
              "UnknownMemberIdError", "IllegalGenerationError")
_UNEXPECTED = re.compile(r"Unexpected error in (\w+?)(?:Response)?: (?:\[Error -?\d+\] )?(\w+)")


#: confluent-kafka (librdkafka) error codes that mean the cluster is gone, was replaced or
#: forgot this client (as kafka-python's retriable and "forgotten" errors above). A fatal
#: error (``_FATAL``: a fenced producer) is not among them.
CONFLUENT_LOST = frozenset({
    "_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "_MSG_TIMED_OUT", "_RESOLVE",
    "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "_WAIT_COORD", "_NO_OFFSET",
    "UNKNOWN_TOPIC_OR_PART", "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE",
    "COORDINATOR_LOAD_IN_PROGRESS", "NOT_LEADER_FOR_PARTITION", "LEADER_NOT_AVAILABLE",
    "REQUEST_TIMED_OUT", "NETWORK_EXCEPTION", "UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION",
    "REBALANCE_IN_PROGRESS", "UNKNOWN_PRODUCER_ID", "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "INVALID_PRODUCER_ID_MAPPING", "UNKNOWN", "_STATE", "NOT_ENOUGH_REPLICAS",
})


def _confluent_code(exc: BaseException) -> tuple[str, str] | None:
    """(code name, text) of a confluent-kafka ``KafkaException``/``KafkaError``, else None."""
    err = exc.args[0] if getattr(exc, "args", None) else exc
    name = getattr(err, "name", None)
    if not callable(name) or not callable(getattr(err, "str", None)):
        return None
    try:
        if callable(getattr(err, "fatal", None)) and err.fatal():
            return "_FATAL", err.str()
        return str(name()), err.str()
    except Exception:  # pragma: no cover
        return None


def lost_cluster(exc: BaseException) -> str | None:
    """A few words on why ``exc`` means the cluster is gone or was replaced, or None.

    Yes for kafka-python's retriable errors that reached the caller after the client's own
    retries (connection errors, timeouts, expired sends, no leader or coordinator, an
    unknown topic), for a producer or member the broker forgot (unknown producer id, an
    ``UnknownError`` answer such as ``InitProducerId``'s, a commit refused because the group
    is gone), and for a send refused because such an error came first. No for everything
    else (authorization, a record too large, a fenced producer, a bug, a
    :class:`~shiftwatch.deploy.errors.UserError`), which stops the stage as before.

    >>> from kafka.errors import KafkaError, KafkaTimeoutError, MessageSizeTooLargeError
    >>> lost_cluster(KafkaError("Unexpected error in InitProducerIdResponse: "
    ...                         "[Error -1] UnknownError"))
    'InitProducerId: UnknownError'
    >>> lost_cluster(KafkaTimeoutError("Expiring 3 record(s) for t-0: 120000 ms has passed"))
    'KafkaTimeoutError: Expiring 3 record(s) for t-0: 120000 ms has passed'
    >>> lost_cluster(MessageSizeTooLargeError("too large")) is None
    True
    """
    if isinstance(exc, SessionLost):
        return str(exc)
    code = _confluent_code(exc)
    if code is not None:
        if code[0] in CONFLUENT_LOST:
            detail = " ".join(code[1].split())[:120]
            return f"{code[0]}: {detail}" if detail else code[0]
        return None
    try:
        from kafka import errors
    except ImportError:  # pragma: no cover - no client, nothing of it to classify
        return None
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if id(e) in seen or not isinstance(e, errors.KafkaError):
            continue
        seen.add(id(e))
        text = str(e.args[0]) if e.args and e.args[0] is not None else ""
        m = _UNEXPECTED.search(text)
        if m:
            return f"{m.group(1)}: {m.group(2)}"
        if isinstance(e, errors.RetriableError) or type(e).__name__ in _FORGOTTEN:
            detail = " ".join(text.split())[:120]
            return f"{type(e).__name__}: {detail}" if detail else type(e).__name__
        # "Cannot perform send because at least one previous ... request has failed": the
        # first error rides along as an argument
        todo.extend(a for a in e.args[1:] if isinstance(a, BaseException))
        if e.__cause__ is not None:
            todo.append(e.__cause__)
    return None


class Outage:
    """A running stage's loss of its cluster: since when, why, when to try again.

    Parameters
    ----------
    stage, where
        The stage's name and the cluster's bootstrap address (for the messages).
    reason
        What :func:`lost_cluster` said of the first error.
    since
        When it happened (``time.monotonic()``).
    wait_s
        How long the stage keeps trying (default :data:`CLUSTER_LOST_WAIT_S`).

    Examples
    --------
    >>> o = Outage("det", "h:9092", "InitProducerId: UnknownError", since=100.0)
    >>> o.failed("InitProducerId: UnknownError", now=100.0), o.failed("timeout", now=101.0)
    (0.5, 1.0)
    >>> o.failed("timeout", now=158.0)  # the backoff never runs past the bound
    2.0
    >>> o.failed("timeout", now=160.0)
    Traceback (most recent call last):
    ...
    shiftwatch.deploy.kafka.connect.ClusterLostError: stage det: lost the Kafka cluster at \
h:9092 (InitProducerId: UnknownError) and it did not come back within 60 s (3 reconnection \
attempts; last: timeout); it stopped without a checkpoint: once the cluster answers, \
restart it and it resumes from its last committed checkpoint
    """

    def __init__(self, stage: str, where: str, reason: str, since: float,
                 wait_s: float | None = None):
        self.stage = stage
        self.where = where
        self.first = self.last = reason
        self.since = since
        self.wait_s = CLUSTER_LOST_WAIT_S if wait_s is None else wait_s
        self.failures = 0
        #: the clients' bootstrap wait before the outage (restored once the stage is back)
        self.bootstrap_ms: int | None = None

    def left_s(self, now: float) -> float:
        """Seconds left to come back."""
        return self.wait_s - (now - self.since)

    def failed(self, reason: str, now: float) -> float:
        """One more failed session (the first included): the seconds to wait before the
        next attempt. Raises :class:`ClusterLostError` once the outage is ``wait_s`` old."""
        self.failures += 1
        self.last = reason
        left = self.left_s(now)
        if left <= 0:
            raise self.error()
        return min(RECONNECT_BACKOFF_S[min(self.failures, len(RECONNECT_BACKOFF_S)) - 1], left)

    def error(self) -> ClusterLostError:
        last = "" if self.last == self.first else f"; last: {self.last}"
        return ClusterLostError(
            f"stage {self.stage}: lost the Kafka cluster at {self.where} ({self.first}) and it "
            f"did not come back within {self.wait_s:g} s ({self.failures - 1} reconnection "
            f"attempts{last}); it stopped without a checkpoint: once the cluster answers, "
            "restart it and it resumes from its last committed checkpoint")
