"""Changelog checkpoints: per-key operator state and the input offset it reflects.

A stage writes the state of each input partition it owns to the compacted topic
``<pipeline>.<stage>.changelog``, into the changelog partition with the same number
(co-partitioned, as Kafka Streams does). Checkpoints are incremental: checkpoint ``id``
writes only the keys whose state changed since the previous checkpoint, then one small
commit marker. Messages (keys are UTF-8; ``T`` is the input topic, ``P`` its partition):

* **key entry** ``"T/P/k/<op>/<slot>/<chunk>/<key>"``: the state of one record key in the
  ``op``-th operator of the chain (``shiftwatch.operators.state_codec.dumps_state`` JSON, no
  pickle).
  Value: a JSON header line ``{"id", "chunk", "chunks", "bytes"}`` then the chunk's bytes. A state
  larger than ``chunk_bytes`` (default 512 KiB, below Kafka's default 1 MiB message limit) is
  cut into several chunks, so per-key states of any size fit; restoring holds every key's
  state in memory.
* **commit marker** ``"T/P/m"``: ``{"id", "offset", "keys", "upstream"}`` — the checkpoint
  ``id`` is complete and the state reflects exactly the input records below ``offset``
  (the next offset to read); ``keys`` is the number of keys of each operator (a check on
  restore); ``upstream`` the de-duplication high-water marks.

Every key alternates between two **slots**: a new version of a key goes to the slot that does
*not* hold its last committed version, and a key's slots flip only once the marker covering
the new version is durable. So the committed version is never overwritten (nor compacted
away) by a checkpoint that has not completed. Restoring takes the newest marker and, per key,
the newest complete version whose ``id`` is at or below the marker's. Entries with a higher
``id`` come from a checkpoint cut short by a crash (entries written, marker not): restore
ignores them, reports them (``junk``) and the stage deletes them (tombstones) in its next
checkpoint, before any marker could cover their ``id``; a restored stage numbers its next
checkpoint above every ``id`` it saw, so an old entry never passes for a new one.

A changelog entry that cannot be read (a bad key or header) is logged with its partition and
key and left out; if a marker then lacks entries, restoring fails (``ValueError``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

__all__ = ["Restored", "encode_entry", "encode_marker", "entry_key", "restore",
           "checkpoints_in", "ChangelogReader"]

log = logging.getLogger("shiftwatch.kafka")


def _head(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def entry_key(topic: str, partition: int, op: int, slot: int, chunk: int, key: str) -> bytes:
    """The changelog key of one chunk of one record key's state."""
    return f"{topic}/{partition}/k/{op}/{slot}/{chunk}/{key}".encode("utf-8", "surrogatepass")


def encode_entry(topic: str, partition: int, checkpoint_id: int, op: int, key: str, slot: int,
                 state: bytes, chunk_bytes: int) -> list[tuple[bytes, bytes]]:
    """The (key, value) messages holding ``state`` of record ``key`` in operator ``op``.

    >>> msgs = encode_entry("in", 2, 7, 0, "s1", 1, b"x" * 10, chunk_bytes=4)
    >>> [k.decode() for k, _ in msgs]
    ['in/2/k/0/1/0/s1', 'in/2/k/0/1/1/s1', 'in/2/k/0/1/2/s1']
    >>> decode_message(msgs[2][1])
    ({'id': 7, 'chunk': 2, 'chunks': 3, 'bytes': 10}, b'xx')
    """
    n = max(1, -(-len(state) // chunk_bytes))
    return [(entry_key(topic, partition, op, slot, i, key),
             _head({"id": checkpoint_id, "chunk": i, "chunks": n, "bytes": len(state)})
             + b"\n" + state[i * chunk_bytes:(i + 1) * chunk_bytes]) for i in range(n)]


def encode_marker(topic: str, partition: int, checkpoint_id: int, offset: int,
                  keys: list[int], upstream: list) -> tuple[bytes, bytes]:
    """The commit marker of checkpoint ``checkpoint_id``."""
    return (f"{topic}/{partition}/m".encode(),
            _head({"id": checkpoint_id, "offset": offset, "keys": keys,
                   "upstream": upstream}))


def decode_message(value: bytes) -> tuple[dict, bytes]:
    head, _, body = value.partition(b"\n")
    return json.loads(head), body


@dataclass
class Restored:
    """The state of one input partition as of its newest commit marker.

    ``states[op][key]`` is the ``dumps_state`` bytes of ``key`` in operator ``op``;
    ``slots[(op, key)]`` the slot holding that committed version; ``junk`` the changelog keys
    of entries from checkpoints that never completed (delete them before the next marker);
    ``next_id`` is above every checkpoint id seen.
    """

    id: int
    offset: int
    upstream: list
    states: list[dict[str, bytes]] = field(default_factory=list)
    slots: dict[tuple[int, str], int] = field(default_factory=dict)
    junk: list[bytes] = field(default_factory=list)
    next_id: int = 0


def restore(messages: Iterable[tuple[bytes, bytes | None]], topic: str, partition: int
            ) -> Restored | None:
    """The state of ``topic``/``partition`` as of its newest marker among changelog messages.

    Messages are in log order; a later message with the same key replaces an earlier one and
    a ``None`` value deletes it (what compaction keeps). Raises ``ValueError`` if the entries
    a marker covers are not all there (a damaged changelog).

    >>> e = lambda cid, key, slot, s: encode_entry("in", 0, cid, 0, key, slot, s, 4)
    >>> msgs = e(1, "a", 0, b'"a1"') + e(1, "b", 0, b'"b1"')
    >>> msgs.append(encode_marker("in", 0, 1, 50, [2], []))
    >>> msgs += e(2, "a", 1, b'"a2-longer"')   # a crash before marker 2: ignored
    >>> r = restore(msgs, "in", 0)
    >>> r.id, r.offset, r.states, r.next_id, len(r.junk)
    (1, 50, [{'a': b'"a1"', 'b': b'"b1"'}], 3, 3)
    """
    prefix = f"{topic}/{partition}/".encode()
    latest: dict[bytes, bytes] = {}
    for key, value in messages:
        if key is not None and key.startswith(prefix):
            if value is None:
                latest.pop(key, None)
            else:
                latest[key] = value
    return _assemble(latest, prefix, topic, partition)


def checkpoints_in(messages: Iterable[tuple[bytes, bytes | None]], topic: str,
                   partition: int) -> Iterator[Restored]:
    """What :func:`restore` gives as of each marker of a full (uncompacted) changelog."""
    prefix = f"{topic}/{partition}/".encode()
    marker = prefix + b"m"
    latest: dict[bytes, bytes] = {}
    for key, value in messages:
        if key is None or not key.startswith(prefix):
            continue
        if value is None:
            latest.pop(key, None)
            continue
        latest[key] = value
        if key == marker:
            got = _assemble(latest, prefix, topic, partition)
            if got is not None:
                yield got


def _assemble(latest: dict[bytes, bytes], prefix: bytes, topic: str, partition: int
              ) -> Restored | None:
    raw_marker = latest.get(prefix + b"m")
    if raw_marker is None:
        return None
    marker = json.loads(raw_marker)
    cid = int(marker["id"])
    max_id = cid
    # (op, key, slot) -> id -> chunk -> (head, body)
    versions: dict[tuple[int, str, int], dict[int, dict[int, tuple[dict, bytes]]]] = {}
    junk: list[bytes] = []
    kprefix = prefix + b"k/"
    for k, v in latest.items():
        if not k.startswith(kprefix):
            continue
        try:
            op, slot, chunk, key = k[len(kprefix):].decode("utf-8", "surrogatepass").split(
                "/", 3)
            head, body = decode_message(v)
            vid = int(head["id"])
            int(op), int(slot), int(chunk), int(head["chunks"]), int(head["bytes"])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("changelog %s/%s: skipping malformed entry %r: %s: %s", topic,
                        partition, k[:200], type(exc).__name__, exc)
            continue
        max_id = max(max_id, vid)
        if vid > cid:
            junk.append(k)
            continue
        versions.setdefault((int(op), key, int(slot)), {}).setdefault(vid, {})[int(chunk)] = (
            head, body)
    best: dict[tuple[int, str], tuple[int, int, bytes]] = {}
    for (op, key, slot), by_id in versions.items():
        for vid in sorted(by_id, reverse=True):
            chunks = by_id[vid]
            n = next(iter(chunks.values()))[0]["chunks"]
            if len(chunks) != n or not all(i in chunks for i in range(n)):
                continue
            state = b"".join(chunks[i][1] for i in range(n))
            if len(state) != chunks[0][0]["bytes"]:
                continue
            if (op, key) not in best or best[(op, key)][0] < vid:
                best[(op, key)] = (vid, slot, state)
            break
    counts = [int(c) for c in marker["keys"]]
    states: list[dict[str, bytes]] = [{} for _ in counts]
    slots: dict[tuple[int, str], int] = {}
    for (op, key), (_vid, slot, state) in best.items():
        if op < len(states):
            states[op][key] = state
            slots[(op, key)] = slot
    got = [len(s) for s in states]
    if got != counts:
        raise ValueError(f"changelog {topic}/{partition}: checkpoint {cid} covers {counts} "
                         f"keys per operator but {got} complete entries were found")
    return Restored(id=cid, offset=int(marker["offset"]), upstream=marker.get("upstream", []),
                    states=states, slots=slots, junk=junk, next_id=max_id + 1)


class ChangelogReader:
    """Reads partitions' state back from a changelog topic without joining a consumer group.

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
             ) -> dict[int, Restored | None]:
        """The restored state of each input partition (None if it has no checkpoint).

        Called on assignment. Raises ``TimeoutError`` if the changelog cannot be read to its
        end in ``timeout_s``, ``ValueError`` if a checkpoint's entries are missing.
        """
        import time

        from kafka import TopicPartition

        tps = [TopicPartition(self.changelog, p) for p in partitions]
        if not tps:
            return {}
        self._consumer.assign(tps)
        ends = self._consumer.end_offsets(tps)
        self._consumer.seek_to_beginning(*tps)
        messages: dict[int, list[tuple[bytes, bytes | None]]] = {tp.partition: [] for tp in tps}
        deadline = time.monotonic() + timeout_s
        # Some Kafka-protocol brokers (tansu) report an end offset below the real one, so
        # the end is "at or past the reported end, and a poll brought nothing new".
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading changelog {self.changelog} took over {timeout_s} s")
            got = self._consumer.poll(timeout_ms=200)
            for tp, msgs in got.items():
                messages[tp.partition].extend((m.key, m.value) for m in msgs)
            if got:
                continue
            # every fetch response carries the true high-water mark: never stop short of it
            if all(self._consumer.position(tp) >= max(ends.get(tp, 0),
                                                        self._consumer.highwater(tp) or 0)
                   for tp in tps):
                break
        self._consumer.assign([])
        return {tp.partition: restore(messages[tp.partition], topic, tp.partition)
                for tp in tps}

    def close(self) -> None:
        self._consumer.close()
