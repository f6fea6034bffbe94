"""Assignment and restore of a Kafka stage's partitions (part of
:class:`~shiftwatch.deploy.kafka.stage.StageRunner`).

When the group gives a stage partitions, :class:`PartitionAssignment` restores each one's
newest checkpoint from the changelog (lazily by default: each key's state is decoded on its
first record), checks that it fits (its operators' parameters, its input offset within the
partition), and seeks the consumer to the offset it reflects; when partitions move away it
checkpoints them and drops their state. A checkpoint that cannot be used stops the stage with
one line naming the way out (``--reset-state``).

The class is a mixin: it holds no state of its own and works on the
:class:`~shiftwatch.deploy.kafka.stage.StageRunner` it is part of (its consumer, changelog
reader, checkpointer, tasks and metrics).
"""

from __future__ import annotations

import gc
import json
import logging
import time
from typing import Any

from shiftwatch.deploy.bounds import StreamBounds
from shiftwatch.deploy.deduper import Deduper, end_slack
from shiftwatch.deploy.executor import StageExecutor
from shiftwatch.deploy.expiry import Expiry
from shiftwatch.deploy.kafka.changelog import ChangelogError
from shiftwatch.deploy.kafka.checkpoint import PartitionTask, StateLoadError
from shiftwatch.deploy.time_rule import RULE_NAME, rule_operator

__all__ = ["PartitionAssignment", "operator_params", "params_mismatch"]

log = logging.getLogger("shiftwatch.kafka")

#: Bytes of a produced message besides its value (key, headers, record framing) that the
#: producer's ``max_request_size`` must also hold.
MESSAGE_OVERHEAD = 4096


class PartitionAssignment:
    """The assignment, restore and revocation of partitions (a mixin of ``StageRunner``)."""

    def on_assign(self, partitions) -> None:
        """Called inside ``poll`` (on the consumer's I/O thread) when the group gives this
        member partitions (under ``cooperative-sticky`` only those added: the ones it keeps
        keep their state; a join that adds none calls it with none).

        Restores each partition's newest checkpoint and seeks to its offset (to the beginning
        when there is none; partitions in :attr:`reset_state` start afresh). A checkpoint
        that cannot be used (damaged, from other operator parameters, past the end of the
        input) is a :class:`~shiftwatch.deploy.kafka.changelog.ChangelogError`; it and any
        other error are kept and raised by the poll loop (the stage stops without a
        checkpoint), so the cause is what the user sees.
        """
        try:
            self._assign(partitions)
        except Exception as exc:
            log.error("stage %s: assignment failed: %s: %s", self.stage.name,
                      type(exc).__name__, exc)
            self._fatal = exc

    def _assign(self, partitions) -> None:
        mine = [tp for tp in partitions if tp.topic == self.stage.input]
        if self.metrics is not None:
            self.metrics.rebalance()
        if not mine:
            if self.metrics is not None:
                self.metrics.set_ready(True)  # joined; more members than partitions
            return
        reset = {tp.partition for tp in mine
                 if self.reset_state == "all" or (self.reset_state and
                                                  tp.partition in self.reset_state)}
        keep = [tp.partition for tp in mine if tp.partition not in reset]
        # The cyclic garbage collector is paused while the states are read and loaded: a
        # restore makes several objects per key (about 100,000 keys restored in 2 s), and
        # each of the collections they would start walks the whole heap (River, NumPy and
        # Numba's objects included): half of the restore's decoding time, measured. Nothing
        # a restore makes is cyclic garbage; the collector runs again after it.
        gc_was_on = gc.isenabled()
        gc.disable()
        try:
            self._assign_partitions(mine, reset, keep)
        finally:
            if gc_was_on:
                gc.enable()

    def _assign_partitions(self, mine: list, reset: set, keep: list[int]) -> None:
        t0 = time.monotonic()
        restored = self._reader.read(self.stage.input, keep) if keep else {}
        t_read = time.monotonic()
        ends = self._reader.end_offsets(self.stage.input, keep) if keep else {}
        tasks = {}
        for tp in mine:
            task = self._new_task(tp.partition)
            if tp.partition in reset:
                self._reset_partition(task)  # resumes from the group's committed offset
                tasks[tp.partition] = task
                continue
            cp = restored.get(tp.partition)
            if cp is not None:
                self._check_restored(tp.partition, cp, ends.get(tp.partition))
                self._load(task, cp)
                self._consumer.seek(tp, cp.offset)
            else:
                orphan = self._reader.orphans.get(tp.partition)
                if orphan is not None:  # a first checkpoint cut short: number above it and
                    task.checkpoint_id = max(task.checkpoint_id, orphan[0])  # delete its
                    task.junk = list(orphan[1])  # entries before the first marker
                self._consumer.seek_to_beginning(tp)
            tasks[tp.partition] = task
        self._tasks.update(tasks)
        t_end = time.monotonic()
        log.info("stage %s: assigned %s (restored %s)", self.stage.name,
                 sorted(tp.partition for tp in mine),
                 {p: (c.offset if c else None) for p, c in restored.items()})
        if keep:
            r = self._reader
            rate = r.last_messages / r.last_read_s if r.last_read_s > 0 else float("nan")
            states = sum(len(c.owners) for c in restored.values() if c is not None)
            log.info("stage %s: restore of partitions %s: %d key states from %d changelog "
                     "messages (%.1f MB) read in %.2f s (%.0f messages/s; %.2f s with "
                     "decoding), loaded in %.2f s; %.2f s in all (%s)", self.stage.name,
                     keep, states, r.last_messages, r.last_bytes / 1e6, r.last_read_s, rate,
                     t_read - t0, t_end - t_read, t_end - t0,
                     "restore: lazy, each key built on its first record"
                     if self.checkpointer.settings.get("restore", "lazy") == "lazy"
                     else "restore: eager, every key built")
        self.stats.partitions = sorted(self._tasks)
        if self.metrics is not None:
            self.metrics.set_ready(True)

    def on_revoke(self, partitions) -> None:
        """Called inside ``poll`` before partitions move to another member (and on close):
        under the eager assignors every partition before each join, under
        ``cooperative-sticky`` only those that move, after the join that takes them away
        (kafka-python then joins again, and the group gives them to their new member).

        Checkpoints and commits the revoked partitions, then drops their state. Errors are
        logged: the last checkpoint still holds, so the next owner replays from it.
        """
        if self.metrics is not None and not self.cooperative:
            # eager: every partition goes, ready again once assigned; cooperative: only
            # these go, the member goes on with the others (and may have none left: a
            # member without partitions is ready, as after an empty assignment)
            self.metrics.set_ready(False)
        mine = [tp.partition for tp in partitions
                if tp.topic == self.stage.input and tp.partition in self._tasks]
        # This runs on the consumer's I/O thread, while the poll loop waits inside poll():
        # the checkpoint waits only on the producer (its own client) and commits the offsets
        # without waiting (restoring reads the markers, not the committed offsets).
        self.checkpointer.async_commits = True
        try:
            if self._fatal is None and not self._failed:
                self.checkpointer.checkpoint(mine)
        except Exception as exc:  # the next owner replays from the previous checkpoint
            log.warning("stage %s: checkpoint on revoke failed: %s", self.stage.name, exc)
            if self.eos and self.checkpointer.in_txn:
                self.checkpointer.abort()
        finally:
            self.checkpointer.async_commits = False
        for p in mine:
            self._tasks.pop(p, None)
        self.stats.partitions = sorted(self._tasks)
        if mine:
            log.info("stage %s: revoked %s (keeps %s)", self.stage.name, sorted(mine),
                     self.stats.partitions)

    def _check_restored(self, partition: int, cp, end: int | None) -> None:
        """Refuse a checkpoint the stage cannot resume from (one line with the way out)."""
        # (a few brokers report an end offset short of the true one: some room, end_slack)
        if end is not None and cp.offset > end + end_slack(end):
            raise ChangelogError(
                self.changelog, partition,
                f"its checkpoint {cp.id} resumes input {self.stage.input}[{partition}] at "
                f"offset {cp.offset}, beyond the partition's end offset {end} (a changelog "
                "from another history of the topic, or damaged)")
        if cp.params is None:
            log.warning("stage %s: partition %d's checkpoint %d does not record its "
                        "operators' parameters (written by an earlier release): not checked",
                        self.stage.name, partition, cp.id)
            return
        mismatch = params_mismatch(cp.params, self.checkpointer.params)
        if mismatch is not None:
            raise ChangelogError(
                self.changelog, partition, f"its state was computed with {mismatch}; a "
                "state from other parameters gives outputs that match neither",
                hint=f"restart with --reset-state {partition} (or all) to start afresh, or "
                "give the pipeline a new name")

    def _load(self, task: PartitionTask, cp) -> None:
        """Load a restored checkpoint into ``task``; a key state that cannot be read is a
        :class:`~shiftwatch.deploy.kafka.changelog.ChangelogError` naming the key."""
        # the changelog offsets of this read (a later assignment's read replaces the
        # reader's): a lazily restored key that cannot be loaded names its entry's offset
        task.changelog_offsets = self._reader.offsets
        try:
            self.checkpointer.load(task, cp)
        except StateLoadError as exc:
            raise self._unloadable(task, exc.operator, exc.key, exc.reason, cp.id) from None

    def _unloadable(self, task: PartitionTask, operator: int, key: str, reason: str,
                    checkpoint: int) -> ChangelogError:
        """The error of a restored key state that cannot be loaded (on assignment, or on the
        key's first record under ``checkpoint.restore: lazy``), naming the key and where its
        entry is in the changelog."""
        group = task.owners.get((operator, key))
        keys = task.groups[group].keys if group in task.groups else []
        where = keys[0] if keys else None
        return ChangelogError(
            self.changelog, task.partition,
            f"the state of key {key!r} (operator {operator}) in checkpoint {checkpoint} "
            f"cannot be loaded: {reason}",
            offset=task.changelog_offsets.get((task.partition, where)), key=where)

    def _reset_partition(self, task: PartitionTask) -> None:
        """--reset-state: delete the partition's changelog entries (tombstones), number the
        next checkpoint above every id they used, and start the partition afresh."""
        msgs = self._reader.read_messages([task.partition]).get(task.partition, [])
        prefix = f"{self.stage.input}/{task.partition}/".encode()
        live: dict[bytes, bool] = {}
        for key, value in msgs:
            if key is not None and key.startswith(prefix):
                live[key] = value is not None
        top = 0
        for key in live:
            parts = key[len(prefix):].split(b"/")
            if len(parts) >= 2 and parts[0] == b"g" and parts[1].isdigit():
                top = max(top, int(parts[1]))
        for key, alive in live.items():
            if alive:
                self._producer.send(self.changelog, key=key, value=None,
                                    partition=task.partition)
        self._producer.flush()
        task.checkpoint_id = top
        log.warning("stage %s: --reset-state: partition %d starts with fresh state from the "
                    "group's committed offset (%d changelog entries deleted)", self.stage.name,
                    task.partition, sum(live.values()))

    def _new_task(self, partition: int) -> PartitionTask:
        st = self.stage
        deduper = Deduper(upstream=st.upstream, end_offset=self._upstream_end)
        ops, names = [spec.build() for spec in st.operators], [s.name for s in st.operators]
        rule = rule_operator(st.time)  # the rule for time and duplicates runs first
        if rule is not None:
            ops, names = [rule, *ops], [RULE_NAME, *names]
        executor = StageExecutor(ops, names=names, value=st.value,
                                 key=st.key, ts=st.ts, dedupe=st.dedupe, loose=st.loose,
                                 summary=self.stats,
                                 observer=self.metrics, deduper=deduper,
                                 expiry=Expiry.from_settings(st.state),
                                 bounds=StreamBounds.from_settings(st.bounds),
                                 max_message_bytes=st.producer["max_request_size"]
                                 - MESSAGE_OVERHEAD)
        return PartitionTask(partition=partition, executor=executor,
                             dirty=[set() for _ in ops])


def operator_params(op: Any) -> dict:
    """``{"operator": name, "params": {...}}``: what a checkpoint records of an operator (its
    constructor parameters, defaults included, as JSON values)."""
    from shiftwatch.codec import jsonable

    params = op._get_params() if hasattr(op, "_get_params") else {}
    return {"operator": getattr(op, "name", None) or type(op).__name__,
            "params": jsonable(params)}

def params_mismatch(saved: list, now: list) -> str | None:
    """What differs between a checkpoint's operator parameters and the stage's, in words
    (None if nothing)."""
    def text(v: Any) -> str:
        return json.dumps(v, sort_keys=True)

    if len(saved) != len(now):
        return f"{len(saved)} operators, the stage has {len(now)}"
    for i, (a, b) in enumerate(zip(saved, now, strict=True)):
        if not isinstance(a, dict) or a.get("operator") != b["operator"]:
            name = a.get("operator") if isinstance(a, dict) else a
            return f"operator {i + 1} {name!r}, the stage has {b['operator']!r}"
        pa, pb = a.get("params") or {}, b["params"]
        for k in sorted(set(pa) | set(pb)):
            if text(pa.get(k)) != text(pb.get(k)):
                return (f"{b['operator']} {k}={text(pa.get(k))}; the pipeline now says "
                        f"{k}={text(pb.get(k))}")
    return None
