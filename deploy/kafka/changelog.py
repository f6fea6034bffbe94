"""Changelog checkpoints: per-key operator state and the input offset it reflects.

A stage writes the state of each input partition it owns to the compacted topic
``<pipeline>.<stage>.changelog``, into the changelog partition with the same number
(co-partitioned, as Kafka Streams does). Checkpoints are incremental: checkpoint ``id``
writes only the keys whose state changed since the previous checkpoint, all in **one group
entry**, then one small commit marker. Messages (keys are UTF-8; ``T`` is the input topic,
``P`` its partition):

* **group entry** ``"T/P/g/<id>/<chunk>"`` (format 2): the states of every (operator, key)
  checkpoint ``id`` wrote. The group's payload is one JSON index line
  ``{"v": 2, "keys": [[op, key, length], ...]}`` followed by the states
  (``shiftwatch.operators.state_codec.dumps_state`` JSON, no pickle) back to back, in index
  order. The payload is cut into chunks of at most ``chunk_bytes`` (default 512 KiB, below
  Kafka's default 1 MiB message limit); each message's value is a JSON header line
  ``{"id", "chunk", "chunks", "bytes"}`` then the chunk's bytes.
  A group in which some states are **patches** has index version 3,
  ``{"v": 3, "keys": [[op, key, length, base], ...]}``: ``base`` is -1 for a whole state and
  otherwise the id of the checkpoint whose version of that (operator, key) the patch
  applies to (:func:`shiftwatch.operators.state_codec.apply_state_patch`; an operator that
  offers ``state_patch``, e.g. ``river:*``, writes the values its window got since instead
  of the whole window). A key's versions since its last whole state form a **chain**; see
  below.
* **commit marker** ``"T/P/m"``: ``{"id", "offset", "keys", "upstream"}`` — the checkpoint
  ``id`` is complete and the state reflects exactly the input records below ``offset``
  (the next offset to read); ``keys`` is the number of keys of each operator (a check on
  restore); ``upstream`` the de-duplication high-water marks.
* **key entry** ``"T/P/k/<op>/<slot>/<chunk>/<key>"`` (format 1, written by releases up to
  0.1 and still read): one (operator, key) state per entry, alternating between two slots.

Restoring takes the newest marker and, per (operator, key), the newest complete version
whose ``id`` is at or below the marker's, from group entries and key entries alike; a patch
is applied to the version it names, back to the key's last whole state (its chain), so what
is restored is the whole state, exactly as the stage had it. Entries
with a higher ``id`` come from a checkpoint cut short by a crash (entries written, marker
not): restore ignores them, reports them (``junk``) and the stage deletes them (tombstones)
in its next checkpoint, before any marker could cover their ``id``; a restored stage numbers
its next checkpoint above every ``id`` it saw, so an old entry never passes for a new one.

**Log compaction.** A group's message keys contain its checkpoint ``id``, and ids never
repeat, so compaction never replaces one group by another: a group stays until the stage
deletes it. A group holds a key's *committed* version while no later committed group holds
that key (the key is *live* in it). The stage deletes a group (tombstones for all its
chunks) only once none of its keys is live, i.e. once the markers of the checkpoints that
rewrote all of them are acknowledged; so at every moment each key's newest committed state
is in a group compaction keeps, whether or not later groups contain the key. A group whose
live keys fall below half of the keys it was written with gets them written again (their
current state) in the next checkpoint, after which it is dead and deleted. A key written as
a patch stays live in every group of its chain (they are all needed to restore it), until
its next whole state; the stage writes a whole state again once the patches since the last
one add up to twice its size (or 32 of them), and always when it rewrites a group's live
keys. So the changelog holds at most about twice the live states, plus twice again for
chains, plus the checkpoints in flight. A changelog of
key entries (format 1) is migrated the same way: the first checkpoint after restoring writes
every key still held only in key entries into its group, and once its marker is acknowledged
all key entries are deleted. A group entry or a key entry written by a checkpoint that never
completed is deleted before the next marker (see above).

A changelog entry that cannot be read (a bad key, header or index) fails the restore
(``ValueError``; the stage reports it with the partition, offset and key, see
:class:`ChangelogError`), unless it belongs to a checkpoint above the marker (it is junk).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate

from shiftwatch.deploy.errors import UserError

__all__ = ["DELETED", "Group", "Restored", "WHOLE", "decode_group", "decode_group_entries",
           "encode_group", "encode_entry", "encode_marker", "entry_key", "group_key", "restore",
           "checkpoints_in", "ChangelogReader", "ChangelogError", "RESET_HINT"]

log = logging.getLogger("shiftwatch.kafka")

#: How to get a stage past a partition state it cannot use (the CLI option).
RESET_HINT = ("restart with --reset-state {partition} to drop this partition's state and "
              "start afresh from the group's committed offset")


class ChangelogError(UserError):
    """A partition's changelog cannot be restored (damaged, or from other parameters or
    another topic's history): one line with the partition, where, why and the way out."""

    def __init__(self, changelog: str, partition: int, reason: str,
                 offset: int | None = None, key: bytes | str | None = None,
                 hint: str | None = None):
        self.changelog, self.partition, self.reason = changelog, partition, reason
        self.offset, self.key = offset, key
        where = f"changelog {changelog} partition {partition}"
        if offset is not None:
            where += f" at offset {offset}"
        if key is not None:
            k = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
            where += f" (key {k[:120]!r})"
        hint = hint if hint is not None else RESET_HINT.format(partition=partition)
        super().__init__(f"{where}: {reason}; {hint}")

#: The group id of the key entries (format 1) of a restored changelog.
LEGACY = -1
#: The ``base`` of a whole state in a group index (anything else: a patch of that version).
WHOLE = -1
#: The ``base`` of a deletion (an expired key, with no bytes): the key has no state from
#: that checkpoint on.
DELETED = -2


def _head(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def entry_key(topic: str, partition: int, op: int, slot: int, chunk: int, key: str) -> bytes:
    """The changelog key of one chunk of one record key's state (format 1)."""
    return f"{topic}/{partition}/k/{op}/{slot}/{chunk}/{key}".encode("utf-8", "surrogatepass")


def group_key(topic: str, partition: int, checkpoint_id: int, chunk: int) -> bytes:
    """The changelog key of one chunk of checkpoint ``checkpoint_id``'s group entry."""
    return f"{topic}/{partition}/g/{checkpoint_id}/{chunk}".encode()


def _chunks(keys: list[bytes], checkpoint_id: int, payload: bytes, chunk_bytes: int
            ) -> list[tuple[bytes, bytes]]:
    n = len(keys)
    return [(keys[i], _head({"id": checkpoint_id, "chunk": i, "chunks": n,
                             "bytes": len(payload)})
             + b"\n" + payload[i * chunk_bytes:(i + 1) * chunk_bytes]) for i in range(n)]


def encode_entry(topic: str, partition: int, checkpoint_id: int, op: int, key: str, slot: int,
                 state: bytes, chunk_bytes: int) -> list[tuple[bytes, bytes]]:
    """The (key, value) messages of a format-1 key entry: ``state`` of record ``key`` in
    operator ``op`` (what releases up to 0.1 wrote; restore still reads it).

    >>> msgs = encode_entry("in", 2, 7, 0, "s1", 1, b"x" * 10, chunk_bytes=4)
    >>> [k.decode() for k, _ in msgs]
    ['in/2/k/0/1/0/s1', 'in/2/k/0/1/1/s1', 'in/2/k/0/1/2/s1']
    >>> decode_message(msgs[2][1])
    ({'id': 7, 'chunk': 2, 'chunks': 3, 'bytes': 10}, b'xx')
    """
    n = max(1, -(-len(state) // chunk_bytes))
    return _chunks([entry_key(topic, partition, op, slot, i, key) for i in range(n)],
                   checkpoint_id, state, chunk_bytes)


def encode_group(topic: str, partition: int, checkpoint_id: int,
                 states: list[tuple], chunk_bytes: int) -> list[tuple[bytes, bytes]]:
    """The (key, value) messages of checkpoint ``checkpoint_id``'s group entry: ``states``
    is a list of (operator index, record key name, state bytes), each (operator, key) once,
    or (operator index, record key name, bytes, base): ``base`` -1 for a whole state, else
    the bytes are a patch of the key's version of checkpoint ``base`` (index version 3).

    >>> msgs = encode_group("in", 2, 7, [(0, "a", b'"a7"'), (1, "a", b"[1]")], 64)
    >>> [k.decode() for k, _ in msgs]
    ['in/2/g/7/0']
    >>> msgs[0][1].decode()
    '{"id":7,"chunk":0,"chunks":1,"bytes":44}\\n{"v":2,"keys":[[0,"a",4],[1,"a",3]]}\\n"a7"[1]'
    >>> len(encode_group("in", 2, 7, [(0, "a", b'"a7"'), (1, "a", b"[1]")], 20))
    3
    """
    if any(len(e) > 3 and e[3] != WHOLE for e in states):
        head = {"v": 3, "keys": [[e[0], e[1], len(e[2]), e[3] if len(e) > 3 else WHOLE]
                                 for e in states]}
    else:
        head = {"v": 2, "keys": [[e[0], e[1], len(e[2])] for e in states]}
    index = json.dumps(head, separators=(",", ":")).encode("utf-8", "surrogatepass")
    payload = b"".join([index, b"\n", *(e[2] for e in states)])
    n = max(1, -(-len(payload) // chunk_bytes))
    return _chunks([group_key(topic, partition, checkpoint_id, i) for i in range(n)],
                   checkpoint_id, payload, chunk_bytes)


def decode_group(payload: bytes) -> list[tuple[int, str, bytes]]:
    """(operator, key, bytes) of each state in a group entry's payload, whole states and
    patches alike (raises ``ValueError`` if bad); :func:`decode_group_entries` tells which."""
    return [(op, key, state) for op, key, state, _ in decode_group_entries(payload)]


def decode_group_entries(payload: bytes) -> list[tuple[int, str, bytes, int]]:
    """Inverse of the payload :func:`encode_group` writes: (operator, key, bytes, base), base
    -1 (:data:`WHOLE`) for a whole state (raises ``ValueError`` if bad)."""
    cut = payload.find(b"\n")
    head = json.loads(payload[:cut]) if cut >= 0 else None
    if not isinstance(head, dict) or head.get("v") not in (2, 3):
        raise ValueError("not a version 2 or 3 group entry")
    entries = head["keys"]
    width = 4 if head["v"] == 3 else 3
    if not isinstance(entries, list) or not all(
            type(e) is list and len(e) == width for e in entries):
        raise ValueError(f"group entry index entries are not lists of {width}")
    if not entries:
        ops = names = lengths = bases = ()
    elif width == 4:
        ops, names, lengths, bases = zip(*entries, strict=True)
    else:
        ops, names, lengths = zip(*entries, strict=True)
        bases = (WHOLE,) * len(entries)
    for what, values, kind in (("an operator", ops, int), ("a key", names, str),
                               ("a length", lengths, int), ("a base", bases, int)):
        if not all(type(v) is kind for v in values):
            bad = next(v for v in values if type(v) is not kind)
            raise ValueError(f"group entry index has {what} {bad!r}")
    if lengths and min(lengths) < 0:
        raise ValueError("group entry index has a negative length")
    if ops and min(ops) < 0:
        raise ValueError("group entry index has a negative operator")
    # the states are sliced from the payload itself (no copy of the body first)
    ends = list(accumulate(lengths, initial=cut + 1))
    if ends[-1] != len(payload):
        raise ValueError(f"group entry index covers {ends[-1] - cut - 1} bytes, the body has "
                         f"{len(payload) - cut - 1}")
    states = [payload[a:b] for a, b in zip(ends, ends[1:], strict=False)]
    return list(zip(ops, names, states, bases, strict=True))


def encode_marker(topic: str, partition: int, checkpoint_id: int, offset: int,
                  keys: list[int], upstream: list, params: list | None = None,
                  clock: float | None = None) -> tuple[bytes, bytes]:
    """The commit marker of checkpoint ``checkpoint_id``; ``params`` (one entry per operator,
    ``{"operator": name, "params": {...}}``) says what the state was computed with, ``clock``
    the stage's event clock for key expiry (deploy/expiry.py)."""
    body = {"id": checkpoint_id, "offset": offset, "keys": keys, "upstream": upstream}
    if params:
        body["params"] = params
    if clock is not None:
        body["clock"] = clock
    return f"{topic}/{partition}/m".encode(), _head(body)


def decode_message(value: bytes) -> tuple[dict, bytes]:
    head, _, body = value.partition(b"\n")
    return json.loads(head), body


def _split_message(value: bytes) -> tuple[dict, memoryview]:
    """:func:`decode_message` with the body as a view (a restore joins the chunks' bodies:
    one copy instead of two)."""
    cut = value.find(b"\n")
    if cut < 0:
        raise ValueError("no header line")
    return json.loads(value[:cut]), memoryview(value)[cut + 1:]


@dataclass
class Group:
    """A committed group entry (or, with id ``LEGACY``, all format-1 key entries).

    ``size`` is the number of (operator, key) states it was written with, ``live`` those
    whose committed version it still holds, ``keys`` its changelog message keys (deleted
    once ``live`` is empty).
    """

    size: int
    live: set[tuple[int, str]] = field(default_factory=set)
    keys: list[bytes] = field(default_factory=list)

    def to_rewrite(self, gid: int) -> bool:
        """Whether its live keys are to be written again (so it can be deleted): the legacy
        entries always, a group once fewer than half of its states are live."""
        return gid == LEGACY or 2 * len(self.live) < self.size


@dataclass
class Restored:
    """The state of one input partition as of its newest commit marker.

    ``states[op][key]`` is the ``dumps_state`` bytes of ``key`` in operator ``op``;
    ``owners[(op, key)]`` the id of the group holding that committed version (``LEGACY``
    for a format-1 key entry) and ``groups`` those groups; ``slots[(op, key)]`` the slot of
    a format-1 key entry holding it; ``junk`` the changelog keys of entries from checkpoints
    that never completed (delete them before the next marker); ``dead`` those of committed
    entries no key needs any more (groups with no live key; delete them at any time);
    ``next_id`` is above every checkpoint id seen. A key restored from patches has its
    whole state in ``states`` and its chain's group ids in ``chains``.
    """

    id: int
    offset: int
    upstream: list
    states: list[dict[str, bytes]] = field(default_factory=list)
    slots: dict[tuple[int, str], int] = field(default_factory=dict)
    junk: list[bytes] = field(default_factory=list)
    next_id: int = 0
    owners: dict[tuple[int, str], int] = field(default_factory=dict)
    groups: dict[int, Group] = field(default_factory=dict)
    dead: list[bytes] = field(default_factory=list)
    params: list | None = None  # the marker's operator parameters (None: not recorded)
    #: (op, key) -> ids of the groups of its chain, oldest (its whole state) first, for the
    #: keys whose restored version is a patch (all of them are live for it)
    chains: dict[tuple[int, str], list[int]] = field(default_factory=dict)
    #: (op, key) -> (id of the group holding its deletion, ids of older groups holding a
    #: version of it), for expired keys: the deletion is live while one of those exists
    erasures: dict[tuple[int, str], tuple[int, list[int]]] = field(default_factory=dict)
    #: the stage's event clock at the marker (deploy/expiry.py), or None
    clock: float | None = None


def restore(messages: Iterable[tuple[bytes, bytes | None]], topic: str, partition: int
            ) -> Restored | None:
    """The state of ``topic``/``partition`` as of its newest marker among changelog messages.

    Messages are in log order; a later message with the same key replaces an earlier one and
    a ``None`` value deletes it (what compaction keeps). Raises ``ValueError`` if the entries
    a marker covers are not all there (a damaged changelog).

    >>> msgs = encode_group("in", 0, 1, [(0, "a", b'"a1"'), (0, "b", b'"b1"')], 16)
    >>> msgs.append(encode_marker("in", 0, 1, 50, [2], []))
    >>> msgs += encode_group("in", 0, 2, [(0, "a", b'"a2"')], 16)
    >>> msgs.append(encode_marker("in", 0, 2, 60, [2], []))
    >>> msgs += encode_group("in", 0, 3, [(0, "a", b'"a3"')], 16)  # no marker 3: ignored
    >>> r = restore(msgs, "in", 0)
    >>> r.id, r.offset, r.states, r.next_id, len(r.junk)
    (2, 60, [{'a': b'"a2"', 'b': b'"b1"'}], 4, 2)
    >>> r.owners == {(0, "a"): 2, (0, "b"): 1}, r.groups[1].live, r.groups[1].size
    (True, {(0, 'b')}, 2)

    Format-1 key entries (``encode_entry``) are read the same way:

    >>> e = lambda cid, key, slot, s: encode_entry("in", 0, cid, 0, key, slot, s, 4)
    >>> msgs = e(1, "a", 0, b'"a1"') + e(1, "b", 0, b'"b1"')
    >>> msgs.append(encode_marker("in", 0, 1, 50, [2], []))
    >>> msgs += e(2, "a", 1, b'"a2-longer"')   # a crash before marker 2: ignored
    >>> r = restore(msgs, "in", 0)
    >>> r.id, r.offset, r.states, r.next_id, len(r.junk), r.owners[(0, "a")] == LEGACY
    (1, 50, [{'a': b'"a1"', 'b': b'"b1"'}], 3, 3, True)
    """
    prefix = f"{topic}/{partition}/".encode()
    latest: dict[bytes, bytes] = {}
    for key, value in messages:
        if key is not None and key.startswith(prefix):
            if value is None:
                latest.pop(key, None)
            else:
                latest[key] = value
    return _assemble(latest, prefix, topic, partition, consume=True)


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


def _orphans(latest: dict[bytes, bytes], prefix: bytes) -> tuple[int, list[bytes]] | None:
    """(the highest checkpoint id, the message keys) of the entries of a partition that has
    no commit marker, or None if it has none."""
    keys, top = [], -1
    gprefix, kprefix = prefix + b"g/", prefix + b"k/"
    for k, v in latest.items():
        if k.startswith(gprefix):
            gid = _group_id(k, gprefix)
            top = max(top, gid if gid is not None else -1)
        elif k.startswith(kprefix):
            try:
                top = max(top, int(_split_message(v)[0]["id"]))
            except (ValueError, KeyError, TypeError):
                pass
        else:
            continue
        keys.append(k)
    return (top, keys) if keys else None


class EntryError(ValueError):
    """A changelog entry a checkpoint needs cannot be read (``key``: its message key)."""

    def __init__(self, key: bytes, reason: str):
        super().__init__(reason)
        self.key = key


def _group_id(key: bytes, gprefix: bytes) -> int | None:
    if not key.startswith(gprefix):
        return None
    head = key[len(gprefix):].split(b"/", 1)[0]
    return int(head) if head.isdigit() else None


def _whole(chunks: dict[int, tuple[dict, bytes, bytes]]) -> bytes | None:
    """The payload of a chunked entry, or None if a chunk is missing."""
    n = next(iter(chunks.values()))[0]["chunks"]
    if len(chunks) != n or not all(i in chunks for i in range(n)):
        return None
    data = b"".join(chunks[i][1] for i in range(n))
    return data if len(data) == chunks[0][0]["bytes"] else None


def _assemble(latest: dict[bytes, bytes], prefix: bytes, topic: str, partition: int,
              consume: bool = False) -> Restored | None:
    # consume: ``latest`` is not needed afterwards, so each group's messages are let go once
    # its states are cut out of them (a restore then holds about one copy of the changelog)
    raw_marker = latest.get(prefix + b"m")
    if raw_marker is None:
        return None
    try:
        marker = json.loads(raw_marker)
        cid = int(marker["id"])
        offset = int(marker["offset"])
        counts = [int(c) for c in marker["keys"]]
        if cid < 0 or offset < 0 or any(c < 0 for c in counts):
            raise ValueError("negative id, offset or key count")
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"the commit marker cannot be read ({type(exc).__name__}: {exc})"
                         ) from None
    max_id = cid
    # format 1: (op, key, slot) -> id -> chunk -> (head, body, message key)
    versions: dict[tuple[int, str, int], dict[int, dict[int, tuple[dict, bytes, bytes]]]] = {}
    # format 2: id -> chunk -> (head, body, message key)
    grouped: dict[int, dict[int, tuple[dict, bytes, bytes]]] = {}
    junk: list[bytes] = []
    legacy_keys: list[bytes] = []
    kprefix = prefix + b"k/"
    gprefix = prefix + b"g/"
    for k, v in latest.items():
        is_group = k.startswith(gprefix)
        if not is_group and not k.startswith(kprefix):
            continue
        try:
            head, body = _split_message(v)
            vid = int(head["id"])
            int(head["chunks"]), int(head["bytes"])
            if is_group:
                gid, chunk = (int(x) for x in k[len(gprefix):].decode().split("/"))
                if gid != vid:
                    raise ValueError(f"id {vid} in the header of group {gid}")
            else:
                op, slot, chunk, key = k[len(kprefix):].decode("utf-8", "surrogatepass").split(
                    "/", 3)
                op, slot, chunk = int(op), int(slot), int(chunk)
        except (ValueError, KeyError, TypeError) as exc:
            gid = _group_id(k, gprefix)
            if gid is not None and gid > cid:  # of a checkpoint that never completed
                junk.append(k)
                continue
            raise EntryError(k, f"a changelog entry cannot be read ({type(exc).__name__}: "
                             f"{exc})") from None
        max_id = max(max_id, vid)
        if vid > cid:
            junk.append(k)
        elif is_group:
            grouped.setdefault(vid, {})[chunk] = (head, body, k)
        else:
            legacy_keys.append(k)
            versions.setdefault((op, key, slot), {}).setdefault(vid, {})[chunk] = (head, body, k)
    # (op, key) -> (id, slot of a format-1 entry, group id, state)
    best: dict[tuple[int, str], tuple[int, int, int, bytes]] = {}
    for (op, key, slot), by_id in versions.items():
        for vid in sorted(by_id, reverse=True):
            state = _whole(by_id[vid])
            if state is None:
                continue
            if (op, key) not in best or best[(op, key)][0] < vid:
                best[(op, key)] = (vid, slot, LEGACY, state)
            break
    groups: dict[int, Group] = {}
    dead: list[bytes] = []
    # (op, key) -> (group id, base, bytes) of its first group entry seen; a key in several
    # (a newer version, or a chain of patches) also in ``in_groups``: group id -> (base, bytes)
    only: dict[tuple[int, str], tuple[int, int, bytes]] = {}
    in_groups: dict[tuple[int, str], dict[int, tuple[int, bytes]]] = {}
    for gid in sorted(grouped):
        chunks = grouped.pop(gid) if consume else grouped[gid]
        keys = [c[2] for c in chunks.values()]
        payload = _whole(chunks)
        if consume:
            for k in keys:
                latest.pop(k, None)
            chunks = None
        if payload is None:  # chunks of a group deleted part-way (or damaged)
            dead.extend(keys)
            continue
        try:
            items = decode_group_entries(payload)
        except (ValueError, KeyError, TypeError) as exc:
            raise EntryError(keys[0], f"group entry {gid} cannot be read "
                             f"({type(exc).__name__}: {exc})") from None
        groups[gid] = Group(size=len(items), keys=keys)
        for op, key, state, base in items:
            ref = (op, key)
            seen = only.get(ref)
            if seen is None:
                only[ref] = (gid, base, state)
                continue
            by_gid = in_groups.get(ref)
            if by_gid is None:
                by_gid = in_groups[ref] = {seen[0]: (seen[1], seen[2])}
            by_gid[gid] = (base, state)
    chains: dict[tuple[int, str], list[int]] = {}
    erasures: dict[tuple[int, str], tuple[int, list[int]]] = {}
    for ref, (gid, base, state) in only.items():  # in order of first appearance
        by_gid = in_groups.get(ref)
        if by_gid is None:
            if base == WHOLE:  # the common case: one whole version
                if ref not in best or best[ref][0] < gid:
                    best[ref] = (gid, -1, gid, state)
                continue
            by_gid = {gid: (base, state)}
        gid = max(by_gid)
        if ref in best and best[ref][0] >= gid:  # a format-1 entry as new or newer
            continue
        if by_gid[gid][0] == DELETED:  # the key expired: no state; the deletion stays
            older = sorted(g for g in by_gid if g < gid)  # live while an older one exists
            if best.pop(ref, None) is not None:
                older.insert(0, LEGACY)
            if older:
                erasures[ref] = (gid, older)
            continue
        chain = [gid]
        while by_gid[chain[-1]][0] != WHOLE:
            base = by_gid[chain[-1]][0]
            if base not in by_gid or base >= chain[-1]:
                raise EntryError(groups[chain[-1]].keys[0],
                                 f"group entry {chain[-1]} holds a patch of key {ref[1]!r} "
                                 f"(operator {ref[0]}) against checkpoint {base}, whose "
                                 "entry is missing")
            chain.append(base)
        chain.reverse()
        if len(chain) == 1:
            best[ref] = (gid, -1, gid, by_gid[gid][1])
            continue
        try:
            state = _patched([by_gid[g][1] for g in chain])
        except ValueError as exc:
            raise EntryError(groups[gid].keys[0], f"key {ref[1]!r} (operator {ref[0]}) "
                             f"cannot be restored from its patches: {exc}") from None
        best[ref] = (gid, -1, gid, state)
        chains[ref] = chain
    if legacy_keys:
        groups[LEGACY] = Group(size=0, keys=legacy_keys)
    states: list[dict[str, bytes]] = [{} for _ in counts]
    slots: dict[tuple[int, str], int] = {}
    owners: dict[tuple[int, str], int] = {}
    nops = len(states)
    live = {g: group.live for g, group in groups.items()}
    for ref, (_vid, slot, gid, state) in best.items():
        op = ref[0]
        if op < nops:
            states[op][ref[1]] = state
            owners[ref] = gid
            chain = chains.get(ref) if chains else None
            if chain is None:
                live[gid].add(ref)
            else:
                for g in chain:
                    live[g].add(ref)
            if gid == LEGACY:
                slots[ref] = slot
        else:
            chains.pop(ref, None)
    for ref, (gid, _older) in erasures.items():
        live[gid].add(ref)
    got = [len(s) for s in states]
    if got != counts:
        raise ValueError(f"changelog {topic}/{partition}: checkpoint {cid} covers {counts} "
                         f"keys per operator but {got} complete entries were found")
    for gid in [g for g, group in groups.items() if not group.live]:
        dead.extend(groups.pop(gid).keys)
    if LEGACY in groups:
        groups[LEGACY].size = len(groups[LEGACY].live)
    params = marker.get("params")
    clock = marker.get("clock")
    return Restored(id=cid, offset=offset, upstream=marker.get("upstream", []),
                    states=states, slots=slots, junk=junk, next_id=max_id + 1, owners=owners,
                    groups=groups, dead=dead, params=params if isinstance(params, list) else None,
                    chains=chains, erasures=erasures,
                    clock=clock if type(clock) in (int, float) else None)


def _patched(versions: list[bytes]) -> bytes:
    """The whole state of a chain: its whole state (first) with every patch applied."""
    from shiftwatch.operators.state_codec import apply_state_patch, dumps_state, loads_state

    try:
        state = loads_state(versions[0])
        for patch in versions[1:]:
            state = apply_state_patch(state, loads_state(patch))
    except ValueError:
        raise
    except Exception as exc:  # a damaged entry: not JSON, a bad array, ...
        raise ValueError(f"{type(exc).__name__}: {exc}") from None
    try:
        from orjson import dumps

        from shiftwatch.operators.state_codec import encode_state

        return dumps(encode_state(state))
    except (ImportError, TypeError):  # orjson refuses an int over 64 bits, ...
        return dumps_state(state)


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

    def __init__(self, client: dict, changelog: str, read_committed: bool = False,
                 kind: str = "kafka-python"):
        from shiftwatch.deploy.kafka.clients import make_consumer

        self.changelog = changelog
        #: (partition, message key) -> changelog offset of its newest message (last read)
        self.offsets: dict[tuple[int, bytes], int] = {}
        #: partition -> (highest checkpoint id, message keys) of the entries :meth:`read`
        #: found in a partition without a commit marker (a first checkpoint cut short)
        self.orphans: dict[int, tuple[int, list[bytes]]] = {}
        #: messages and bytes (keys + values) of the last :meth:`read_messages`, and its
        #: seconds (for the restore line a stage logs on assignment)
        self.last_messages = 0
        self.last_bytes = 0
        self.last_read_s = 0.0
        self._consumer = make_consumer(kind, {
            **client, "enable_auto_commit": False, "group_id": None,
            "isolation_level": "read_committed" if read_committed else "read_uncommitted",
            "max_partition_fetch_bytes": 8 * 1024 * 1024, "fetch_max_bytes": 64 * 1024 * 1024},
            max_poll_records=500)

    def read(self, topic: str, partitions: Iterable[int], timeout_s: float = 60.0
             ) -> dict[int, Restored | None]:
        """The restored state of each input partition (None if it has no checkpoint).

        Called on assignment. Raises ``TimeoutError`` if the changelog cannot be read to its
        end in ``timeout_s``, :class:`ChangelogError` (partition, changelog offset, reason) if
        a partition's checkpoint cannot be read. :attr:`last_keys` then holds each
        partition's message keys and :attr:`offsets` the changelog offset of each key's
        newest message (for :meth:`ChangelogError` and ``--reset-state``).
        """
        # Only the newest message of each changelog key is kept while reading (what
        # compaction keeps): an uncompacted changelog costs no more memory than a compacted one.
        partitions = list(partitions)
        prefixes = {p: f"{topic}/{p}/".encode() for p in partitions}
        latest: dict[int, dict[bytes, bytes]] = {p: {} for p in partitions}

        def keep(p: int, msgs: list) -> None:
            book, prefix = latest[p], prefixes[p]
            for m in msgs:
                key = m.key
                if key is not None and key.startswith(prefix):
                    if m.value is None:
                        book.pop(key, None)
                    else:
                        book[key] = m.value

        self._read(partitions, timeout_s, keep)
        out: dict[int, Restored | None] = {}
        self.orphans = {}
        for p in partitions:
            book = latest.pop(p)
            if prefixes[p] + b"m" not in book:
                # no marker: nothing to restore, but entries of a checkpoint that never
                # completed may be there; the stage numbers its checkpoints above them and
                # deletes them (else its own ids would reuse their changelog keys)
                out[p] = None
                found = _orphans(book, prefixes[p])
                if found is not None:
                    self.orphans[p] = found
                continue
            try:
                out[p] = _assemble(book, prefixes[p], topic, p, consume=True)
            except ValueError as exc:
                key = getattr(exc, "key", None) or f"{topic}/{p}/m".encode()
                raise ChangelogError(self.changelog, p, str(exc),
                                     offset=self.offsets.get((p, key)), key=key) from None
        return out

    def read_messages(self, partitions: Iterable[int], timeout_s: float = 60.0
                      ) -> dict[int, list[tuple[bytes, bytes | None]]]:
        """Every message of the changelog partitions, in log order (``(key, value)``)."""
        partitions = list(partitions)
        messages: dict[int, list[tuple[bytes, bytes | None]]] = {p: [] for p in partitions}
        self._read(partitions, timeout_s, lambda p, msgs: messages[p].extend(
            (m.key, m.value) for m in msgs))
        return messages

    def _read(self, partitions: list[int], timeout_s: float, take) -> None:
        """Read the changelog partitions to their end, handing each poll's messages of a
        partition to ``take(partition, messages)`` in log order."""
        import time

        from kafka import TopicPartition

        tps = [TopicPartition(self.changelog, p) for p in partitions]
        self.offsets = {}
        self.last_messages = self.last_bytes = 0
        self.last_read_s = 0.0
        if not tps:
            return
        t0 = time.monotonic()
        self._consumer.assign(tps)
        ends = self._consumer.end_offsets(tps)
        self._consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout_s
        # Some Kafka-protocol brokers (tansu) report an end offset below the real one, so
        # the end is "at or past the reported end, and a poll brought nothing new".
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading changelog {self.changelog} took over {timeout_s} s")
            got = self._consumer.poll(timeout_ms=200)
            for tp, msgs in got.items():
                take(tp.partition, msgs)
                self.offsets.update(((tp.partition, m.key), m.offset) for m in msgs)
                self.last_messages += len(msgs)
                self.last_bytes += sum(len(m.key or b"") + len(m.value or b"") for m in msgs)
            if got:
                continue
            # every fetch response carries the true high-water mark: never stop short of it
            if all(self._consumer.position(tp) >= max(ends.get(tp, 0),
                                                        self._consumer.highwater(tp) or 0)
                   for tp in tps):
                break
        self._consumer.assign([])
        self.last_read_s = time.monotonic() - t0

    def end_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """The end offsets of ``topic``'s ``partitions`` (asked with this reader's own
        client, so it may be called from a rebalance callback)."""
        from kafka import TopicPartition

        tps = [TopicPartition(topic, p) for p in partitions]
        if not tps:
            return {}
        return {tp.partition: off for tp, off in self._consumer.end_offsets(tps).items()}

    def records_between(self, topic: str, starts: dict[int, int], ends: dict[int, int],
                        timeout_s: float = 3.0) -> set[int]:
        """The partitions of ``topic`` with at least one record (as this reader's isolation
        sees it) at an offset in ``[starts[p], ends[p])``: between a group's committed offset
        and the end there may be only transaction markers (or aborted records). A partition
        not read to ``ends[p]`` within ``timeout_s`` counts as having records."""
        import time

        from kafka import TopicPartition

        tps = {p: TopicPartition(topic, p) for p in starts if starts[p] < ends[p]}
        if not tps:
            return set()
        found: set[int] = set()
        try:
            self._consumer.assign(list(tps.values()))
            for p, tp in tps.items():
                self._consumer.seek(tp, starts[p])
            deadline = time.monotonic() + timeout_s
            left = set(tps)
            while left and time.monotonic() < deadline:
                got = self._consumer.poll(timeout_ms=200)
                for tp, msgs in got.items():
                    if any(starts[tp.partition] <= m.offset < ends[tp.partition]
                           for m in msgs):
                        found.add(tp.partition)
                for p in list(left):
                    if p in found or self._consumer.position(tps[p]) >= ends[p]:
                        left.discard(p)
            found |= left  # not read to the end in time: not known to be done
        finally:
            self._consumer.assign([])
        return found

    def close(self) -> None:
        self._consumer.close()
