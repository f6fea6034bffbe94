"""Topic names in messages: which existing topics look like one that does not exist.

A typo'd topic name (``sensors.rwa``) is the usual reason a topic is missing; the one line that
says so names the existing topics that look alike, so the fix is in the message.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

__all__ = ["look_alike", "missing_topic", "not_created"]

#: Topics whose names start like this are Kafka's or the broker's own, never a user's input.
_INTERNAL = ("__",)


def look_alike(name: str, existing: Iterable[str], n: int = 5) -> list[str]:
    """The existing topics whose names look like ``name``, the closest first (at most ``n``).

    >>> look_alike("sensors.rwa", ["sensors.raw", "sensors.alarms", "other", "__consumer_offsets"])
    ['sensors.raw']
    >>> look_alike("Sensors.Raw", ["sensors.raw"])  # case differs
    ['sensors.raw']
    """
    names = sorted({t for t in existing if t != name and not t.startswith(_INTERNAL)})
    scored = sorted(((difflib.SequenceMatcher(None, name.lower(), t.lower()).ratio(), t)
                     for t in names), key=lambda st: -st[0])
    if not scored or scored[0][0] < 0.6:
        return []
    # Topics of one pipeline share a prefix: only those about as close as the closest
    best = scored[0][0]
    return [t for score, t in scored[:n] if score >= max(0.6, best - 0.1)]


def missing_topic(name: str, existing: Iterable[str]) -> str:
    """``topic 'x' does not exist`` and what exists that looks like it, in words.

    >>> missing_topic("sensors.rwa", ["sensors.raw", "b"])
    "topic 'sensors.rwa' does not exist (topics that look alike: sensors.raw)"
    >>> missing_topic("zzz", ["sensors.raw", "b"])
    "topic 'zzz' does not exist (none of the 2 topics looks alike)"
    """
    existing = [t for t in existing if not t.startswith(_INTERNAL)]
    alike = look_alike(name, existing)
    if alike:
        return f"topic {name!r} does not exist (topics that look alike: {', '.join(alike)})"
    n = len(set(existing))
    if n == 0:
        return f"topic {name!r} does not exist (the cluster has no topics)"
    return (f"topic {name!r} does not exist (none of the {n} topic{'s' if n > 1 else ''} "
            "looks alike)")


def not_created(topic: str, stage: Any, config: Any) -> str | None:
    """Why a stage does not create its missing input or output ``topic``, as the fix; None:
    it creates it.

    ``topics.create`` creates what the stage writes, and an input another stage of the file
    writes; an input nothing of the file writes only with ``topics.create_input`` (created
    silently, a typo'd input would leave the stage idle and exit 0)."""
    topics = config.topics
    if topic != stage.input:
        return None if topics["create"] else "create it, or set topics: {create: true}"
    if topics.get("create_input") or (topics["create"] and any(
            s.output == topic for s in config.stages)):
        return None
    return ("create it (shiftwatch produce --partitions N creates it as it writes), or set "
            "topics: {create_input: true} to have the stage create its input empty"
            + (" (topics: {create: true} creates only the topics stages write)"
               if topics["create"] else ""))
