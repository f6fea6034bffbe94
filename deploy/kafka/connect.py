"""Reaching the Kafka cluster: a bounded wait and one clear line when nobody answers.

kafka-python waits 30 s for a first broker by default, logging ERROR lines all the while,
then raises ``KafkaTimeoutError: Unable to bootstrap ...``. The Kafka commands (``run``,
``produce``, ``replay kafka:...``, ``demo --kafka``) give every client
``bootstrap_timeout_ms`` from :func:`client_defaults` (``SHIFTWATCH_CONNECT_TIMEOUT`` seconds,
10 by default; a pipeline's ``kafka.bootstrap_timeout_ms`` wins), keep the ``kafka`` logger
quiet unless ``--debug``, and turn that error into one line by :func:`unreachable_message`.

Imports nothing from kafka-python, so the command line can use it at start-up.
"""

from __future__ import annotations

import logging
import os
import re

__all__ = ["DEFAULT_CONNECT_TIMEOUT_S", "connect_timeout_s", "client_defaults",
           "quiet_kafka_logs", "is_unreachable", "unreachable_message", "default_bootstrap"]

DEFAULT_CONNECT_TIMEOUT_S = 10.0


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
    """Whether ``exc`` is kafka-python saying no broker answered the bootstrap."""
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    if not module.startswith("kafka"):
        return False
    return name == "NoBrokersAvailable" or (
        name == "KafkaTimeoutError" and "bootstrap" in str(exc).lower())


def unreachable_message(exc: BaseException, hint: str | None = None) -> str:
    """One line for an unreachable cluster: where, how long, and how to point elsewhere.

    >>> class KafkaTimeoutError(Exception): pass
    >>> unreachable_message(KafkaTimeoutError("Unable to bootstrap from ['h:1']"))[:52]
    'no Kafka broker answered at h:1 within 10 s; give th'
    """
    m = re.search(r"bootstrap from \[?([^\]]*)\]?", str(exc))
    where = m.group(1).replace("'", "").strip() if m else "the bootstrap address"
    try:
        waited = f"{connect_timeout_s():g} s"
    except ValueError:
        waited = "the connect timeout"
    hint = hint or ("give the broker's address with --bootstrap HOST:PORT or the "
                    "KAFKA_BOOTSTRAP environment variable")
    return (f"no Kafka broker answered at {where} within {waited}; {hint} "
            "(`shiftwatch broker` starts a local one; SHIFTWATCH_CONNECT_TIMEOUT sets the wait)")
