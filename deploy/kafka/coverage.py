"""Whether a stage's group covers its whole input (part of
:class:`~shiftwatch.deploy.kafka.stage.StageRunner`).

A member sees only the partitions the group gave it. A stage that must say "the input is
done" (``shiftwatch run --exit-when-idle``) or report on its group (``/readyz``, metrics, the
log) needs the rest: the input's partitions on the cluster, their end offsets and the
group's committed offsets. :class:`Coverage` is that view, asked of the cluster every
:data:`COVERAGE_EVERY_S` seconds by :meth:`CoverageCheck._check_coverage`:

* a partition this member owns is *done* when the member's position is at its end;
* a partition it does not own is *done* when the group's committed offset is at its end, or
  when nothing but transaction markers (or aborted records, under ``read_committed``) lies
  between the two (read once, without joining the group);
* any other partition is *behind*: owned by another member that is still working on it, or
  by no live member (a member killed whose session has not expired yet: the group waits for
  it before giving its partitions to someone else).

``--exit-when-idle`` stops only once every partition is done (idle input alone is not
enough); a stage still incomplete :data:`INCOMPLETE_WAIT_SESSIONS` session timeouts after it
went idle stops with status 1, naming the partitions and their offsets. The same check
notices an input topic that is no longer on the cluster (a broker restarted empty under the
stage): the session ends and the stage waits for the topic, as documented for an empty
cluster.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from shiftwatch.deploy.kafka.connect import SessionLost

__all__ = ["COVERAGE_EVERY_S", "INCOMPLETE_WAIT_SESSIONS", "Coverage", "CoverageCheck"]

log = logging.getLogger("shiftwatch.kafka")

#: Seconds between two checks of the input against the cluster (partitions, ends, the
#: group's commits). A broker that came back empty is noticed within this.
COVERAGE_EVERY_S = 5.0

#: With ``--exit-when-idle``: session timeouts an idle stage waits for the rest of its input
#: to be done before it stops incomplete. A member that died leaves the group after one
#: session timeout and the rebalance that follows gives its partitions to the live members;
#: two leave room for that rebalance and for the new owner to read them.
INCOMPLETE_WAIT_SESSIONS = 2.0

_UNKNOWN_TOPIC = 3  # Kafka's UNKNOWN_TOPIC_OR_PARTITION


@dataclass
class Coverage:
    """The input seen from one member: its partitions on the cluster, which this member
    owns, and which are behind (partition -> (offset done, end offset))."""

    topic: str
    partitions: list[int]
    owned: list[int]
    behind: dict[int, tuple[int | None, int]] = field(default_factory=dict)
    at: float = field(default_factory=time.monotonic)

    @property
    def complete(self) -> bool:
        """Every partition of the input is at its end (this member's position, or the
        group's committed offset)."""
        return bool(self.partitions) and not self.behind

    def describe(self) -> str:
        """``partitions 0, 2 of 3 are behind (0: committed 1200 of 5000; 2: nothing
        committed, end 4800); this member owns 1``."""
        if not self.behind:
            return (f"all {len(self.partitions)} partitions of {self.topic!r} at their end; "
                    f"this member owns {_list(self.owned)}")
        parts = []
        for p, (done, end) in sorted(self.behind.items()):
            mine = "this member's position" if p in self.owned else "committed"
            parts.append(f"{p}: {mine} {done} of {end}" if done is not None
                         else f"{p}: nothing committed, end {end}")
        unowned = [p for p in self.behind if p not in self.owned]
        return (f"partitions {_list(sorted(self.behind))} of {len(self.partitions)} of "
                f"{self.topic!r} are behind ({'; '.join(parts)}); this member owns "
                f"{_list(self.owned)}" + (
                    f"; {_list(sorted(unowned))} are owned by another member still working "
                    "on them or by none (a member that died, not yet out of the group)"
                    if unowned else ""))

    def as_dict(self) -> dict:
        """The ``/readyz`` and metrics view."""
        return {"input_partitions": len(self.partitions), "owned": list(self.owned),
                "behind": {str(p): {"done": d, "end": e}
                           for p, (d, e) in sorted(self.behind.items())},
                "complete": self.complete}


def _list(ps: list[int]) -> str:
    return ", ".join(map(str, ps)) if ps else "none"


class CoverageCheck:
    """The coverage of the input (a mixin of ``StageRunner``)."""

    _coverage: Coverage | None = None
    _admin: Any = None

    def _coverage_admin(self) -> Any:
        if self._admin is None:
            from shiftwatch.deploy.kafka.clients import make_admin
            from shiftwatch.deploy.pipeline import client_settings

            # (a short request timeout: the check runs in the stage's loop)
            self._admin = make_admin({"request_timeout_ms": 5000,
                                      **client_settings(self.client, "admin")})
        return self._admin

    def _close_admin(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                admin.close()
            except Exception as exc:  # closing must not hide why we stop
                log.debug("stage %s: admin close: %s", self.stage.name, exc)

    def _check_coverage(self, now: float, force: bool = False) -> Coverage | None:
        """Ask the cluster every :data:`COVERAGE_EVERY_S` seconds (or now, ``force``); the
        last answer otherwise. Raises :class:`SessionLost` when the input topic is not on the
        cluster any more. None when the cluster does not answer (the connection watch of the
        loop handles that)."""
        last = self._coverage
        if not force and last is not None and now - last.at < COVERAGE_EVERY_S:
            return last
        try:
            cov = self._ask_coverage()
        except SessionLost:
            raise
        except Exception as exc:
            log.debug("stage %s: coverage of the input not known (%s: %s)", self.stage.name,
                      type(exc).__name__, exc)
            self._close_admin()  # a fresh client next time
            return last
        self._coverage = cov
        if self.metrics is not None:
            self.metrics.coverage(cov.as_dict())
        return cov

    def _ask_coverage(self) -> Coverage:
        from kafka import TopicPartition
        from kafka.admin import OffsetSpec
        from kafka.protocol.consumer.offsets import IsolationLevel

        admin = self._coverage_admin()
        topic = self.stage.input
        (desc,) = admin.describe_topics([topic])
        if desc.get("error_code", 0) == _UNKNOWN_TOPIC:
            raise SessionLost(f"input topic {topic!r} is not on the cluster (any more)")
        partitions = sorted(p["partition_index"] for p in desc.get("partitions") or [])
        if not partitions:
            raise RuntimeError(f"no partitions of {topic!r} in the answer")
        tps = [TopicPartition(topic, p) for p in partitions]
        level = IsolationLevel.READ_COMMITTED if self.eos else IsolationLevel.READ_UNCOMMITTED
        ends = {tp.partition: o.offset for tp, o in admin.list_partition_offsets(
            {tp: OffsetSpec.LATEST for tp in tps}, isolation_level=level).items()}
        owned = sorted(p for p in self._tasks if p in ends)
        behind: dict[int, tuple[int | None, int]] = {}
        for p in owned:
            task = self._tasks.get(p)
            pos = self._own_position(p, task)
            if pos is None or pos < ends[p]:
                behind[p] = (pos, ends[p])
        others = [tp for tp in tps if tp.partition not in self._tasks]
        if others:
            got = admin.list_group_offsets({self.group_id: others}).get(self.group_id, {})
            for tp in others:
                om = got.get(tp)
                done = om.offset if om is not None and om.offset >= 0 else None
                end = ends[tp.partition]
                if end <= (done if done is not None else 0):
                    continue  # (an empty partition is done with nothing committed)
                behind[tp.partition] = (done, end)
            short = {p: d for p, (d, e) in behind.items() if p not in self._tasks and
                     d is not None}
            if short and self._reader is not None:
                with_records = self._reader.records_between(
                    topic, short, {p: ends[p] for p in short})
                for p in short:
                    if p not in with_records:
                        behind.pop(p)  # only markers (or aborted records) left
        return Coverage(topic, partitions, owned, behind)

    def _own_position(self, p: int, task: Any) -> int | None:
        """Where this member is in partition ``p``: the consumer's position (it moves past
        transaction markers), at least the next offset its state has not seen."""
        from kafka import TopicPartition

        pos = None
        try:
            pos = self._consumer.position(TopicPartition(self.stage.input, p))
        except Exception:
            pass
        nxt = getattr(task, "next_offset", None)
        if pos is None:
            return nxt
        return max(pos, nxt) if nxt is not None else pos

    def _idle_exit(self, now: float) -> bool:
        """With ``--exit-when-idle``, idle for ``idle_exit_s``: True to stop now (every
        partition done), False to go on; stops incomplete (:attr:`incomplete` set) once it
        waited :data:`INCOMPLETE_WAIT_SESSIONS` session timeouts."""
        cov = self._check_coverage(now, force=True)
        if cov is not None and cov.complete:
            log.info("stage %s: idle and complete: %s", self.stage.name, cov.describe())
            return True
        wait_s = INCOMPLETE_WAIT_SESSIONS * self.stage.consumer["session_timeout_ms"] / 1000
        if self._incomplete_since is None:
            self._incomplete_since = now
            log.warning("stage %s: idle for %g s but the input is not complete: %s; waiting "
                        "up to %g s for the group to cover it", self.stage.name,
                        self.idle_exit_s, cov.describe() if cov is not None
                        else "its partitions are not known (the cluster does not answer)",
                        wait_s)
            return False
        if now - self._incomplete_since < wait_s:
            return False
        what = (cov.describe() if cov is not None
                else "the input's partitions are not known (the cluster does not answer)")
        self.incomplete = (f"stage {self.stage.name}: stopped incomplete after waiting "
                           f"{wait_s:g} s: {what}")
        log.error(self.incomplete)
        return True
