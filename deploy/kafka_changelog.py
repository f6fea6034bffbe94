"""Changelog checkpoints: a partition's operator state and the input offset it reflects.

A stage writes the state of each input partition it owns to the compacted topic
``<pipeline>.<stage>.changelog``, into the changelog partition with the same number
(co-partitioned, as Kafka Streams does). A checkpoint is one or more messages:

* key ``"<input topic>/<partition>/<slot>/<chunk>"`` — the slot alternates 0, 1 between
  consecutive checkpoints, so a checkpoint cut short by a crash never overwrites (under
  compaction) the chunks of the last complete one;
* value: one JSON header line ``{"id", "offset", "chunk", "chunks", "bytes"}`` then the
  chunk's bytes. The state is ``operators.base.dumps_state`` JSON (no pickle), cut into
  ``chunk_bytes`` pieces (default 512 KiB, below Kafka's default 1 MiB message limit), so a
  state of any size fits; restoring reads it back whole into memory.

``offset`` is the next input offset to read: the state reflects exactly the records below it.
Restoring reads the changelog partition from its beginning to its end and keeps the complete
checkpoint with the highest ``id``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Checkpoint", "encode_checkpoint", "ChangelogReader"]


@dataclass
class Checkpoint:
    """A restored checkpoint: ``state`` bytes reflect the input records below ``offset``."""

    id: int
    offset: int
    state: bytes


def encode_checkpoint(topic: str, partition: int, checkpoint_id: int, offset: int,
                      state: bytes, chunk_bytes: int) -> list[tuple[bytes, bytes]]:
    """The (key, value) messages of one checkpoint.

    >>> msgs = encode_checkpoint("in", 2, 7, 120, b"x" * 10, chunk_bytes=4)
    >>> [k.decode() for k, _ in msgs]
    ['in/2/1/0', 'in/2/1/1', 'in/2/1/2']
    >>> decode_message(msgs[2][1])
    ({'id': 7, 'offset': 120, 'chunk': 2, 'chunks': 3, 'bytes': 10}, b'xx')
    """
    n = max(1, -(-len(state) // chunk_bytes))
    slot = checkpoint_id % 2
    out = []
    for i in range(n):
        head = json.dumps({"id": checkpoint_id, "offset": offset, "chunk": i, "chunks": n,
                           "bytes": len(state)}, separators=(",", ":")).encode()
        out.append((f"{topic}/{partition}/{slot}/{i}".encode(),
                    head + b"\n" + state[i * chunk_bytes:(i + 1) * chunk_bytes]))
    return out


def decode_message(value: bytes) -> tuple[dict, bytes]:
    head, _, body = value.partition(b"\n")
    return json.loads(head), body


def assemble(messages: Iterable[tuple[bytes, bytes]], topic: str, partition: int
             ) -> Checkpoint | None:
    """The newest complete checkpoint of ``topic``/``partition`` among changelog messages.

    Later messages with the same key replace earlier ones (what compaction keeps).

    >>> msgs = encode_checkpoint("in", 0, 1, 50, b"old", 4)
    >>> msgs += encode_checkpoint("in", 0, 2, 90, b"new-state", 4)[:1]  # cut short by a crash
    >>> assemble(msgs, "in", 0)
    Checkpoint(id=1, offset=50, state=b'old')
    """
    prefix = f"{topic}/{partition}/".encode()
    latest: dict[bytes, bytes] = {}
    for key, value in messages:
        if key is not None and key.startswith(prefix) and value is not None:
            latest[key] = value
    by_id: dict[int, dict[int, tuple[dict, bytes]]] = {}
    for value in latest.values():
        try:
            head, body = decode_message(value)
            by_id.setdefault(int(head["id"]), {})[int(head["chunk"])] = (head, body)
        except (ValueError, KeyError, TypeError):
            continue
    for cid in sorted(by_id, reverse=True):
        chunks = by_id[cid]
        head = next(iter(chunks.values()))[0]
        if len(chunks) == head["chunks"] and all(i in chunks for i in range(head["chunks"])):
            state = b"".join(chunks[i][1] for i in range(head["chunks"]))
            if len(state) == head["bytes"]:
                return Checkpoint(id=cid, offset=int(head["offset"]), state=state)
    return None


class ChangelogReader:
    """Reads checkpoints back from a changelog topic without joining a consumer group.

    Parameters
    ----------
    client
        kafka-python client settings (bootstrap, security).
    changelog
        The changelog topic.
    read_committed
        Read only committed transactions (exactly-once stages).
    """

    def __init__(self, client: dict, changelog: str, read_committed: bool = False):
        from kafka import KafkaConsumer

        self.changelog = changelog
        self._consumer = KafkaConsumer(
            **client, enable_auto_commit=False, group_id=None,
            isolation_level="read_committed" if read_committed else "read_uncommitted",
            max_partition_fetch_bytes=8 * 1024 * 1024, fetch_max_bytes=64 * 1024 * 1024)

    def read(self, topic: str, partitions: Iterable[int], timeout_s: float = 60.0
             ) -> dict[int, Checkpoint | None]:
        """The newest complete checkpoint of each input partition (None if there is none).

        Raises ``TimeoutError`` if the changelog cannot be read to its end in ``timeout_s``.
        """
        import time

        from kafka import TopicPartition

        tps = [TopicPartition(self.changelog, p) for p in partitions]
        if not tps:
            return {}
        self._consumer.assign(tps)
        ends = self._consumer.end_offsets(tps)
        self._consumer.seek_to_beginning(*tps)
        messages: dict[int, list[tuple[bytes, bytes]]] = {tp.partition: [] for tp in tps}
        deadline = time.monotonic() + timeout_s
        # Some Kafka-protocol brokers (tansu) report an end offset below the real one, so
        # the end is "at or past the reported end, and a poll brought nothing new".
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading changelog {self.changelog} took over {timeout_s} s")
            got = self._consumer.poll(timeout_ms=200)
            for tp, msgs in got.items():
                messages[tp.partition].extend((m.key, m.value) for m in msgs)
            if not got and all(self._consumer.position(tp) >= ends.get(tp, 0) for tp in tps):
                break
        self._consumer.assign([])
        return {tp.partition: assemble(messages[tp.partition], topic, tp.partition)
                for tp in tps}

    def close(self) -> None:
        self._consumer.close()
