"""Keyed: one operator state per record key."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from shiftwatch.operators.contract import Operator
from shiftwatch.operators.state_codec import loads_state
from shiftwatch.records import BadInput, DeadLetter

__all__ = ["DeferredStateError", "Keyed", "columns_by_key", "key_segments", "sort_by_key"]

log = logging.getLogger("shiftwatch.operators")


class Keyed(Operator):
    """One independent operator per record ``key``, created on first sight of the key.

    Parameters
    ----------
    operator
        A template operator (it is cloned for every new key and never used itself) or a
        zero-argument factory returning a fresh operator.
    expiry
        Optional :class:`~shiftwatch.deploy.expiry.Expiry` (an idle-key TTL and/or a
        maximum number of keys): after each :meth:`process_batch` (or :meth:`process`) the
        keys it finds due are forgotten (:meth:`evict`), counted in :attr:`evicted`. A stage
        sets it on its executor instead, which forgets a key in every operator of its chain.

    Notes
    -----
    :meth:`process_batch` groups the batch by key and hands each group to the per-key
    operator's own ``process_batch`` (so batch kernels run over the whole group). Its
    outputs come grouped by key, keys in order of first appearance, each key's outputs in
    input order: the same outputs as :meth:`process` in a loop, except for the interleaving
    of different keys, which carries no meaning because keys are independent. A record
    without a ``key`` belongs to the key ``None``; a list key is used as a tuple, and a key
    that cannot be hashed (a JSON object) makes the record a dead letter. A key is kept only
    once one of its records was accepted, so bad records do not grow the state.

    **An operator that fails.** If a key's operator raises anything but :class:`BadInput`
    on a group of records, the key is *quarantined*: its state is dropped (it may hold part
    of the group) and the group is processed again, record by record, by a fresh operator
    for the key; a record that raises again becomes a dead letter whose reason names the
    exception, and the operator's state goes back to what it was before that record. The
    other keys are not affected. The key's detector or learner thus restarts; the dead
    letter says so. (With a keyed store such as the ``cs`` fleet an unexpected exception
    propagates: the stage stops without committing the batch and a restart reprocesses it.)

    An operator may keep all its keys in one store instead of a clone per key (its
    ``_keyed_store`` hook; ``cs`` does, see :mod:`~shiftwatch.operators.confseq.fleet`):
    the outputs, dead letters and per-key ``state_dict`` are the same, the outputs come in
    input order, :meth:`existing` gives an object with the key's ``state_dict``, and
    :attr:`keys` lists the store's keys (in order of first acceptance within each kind).

    **Deferred states.** :meth:`load_encoded` takes the keys' states as their encoded bytes
    (:func:`~shiftwatch.operators.state_codec.dumps_state`, what a changelog holds) and
    builds a key's operator only when the key is first needed: its first record,
    :meth:`get` or :meth:`existing`, :meth:`state_dict`, :meth:`flush`. A restore of many
    keys then costs the reading of their bytes, and each key's decoding and loading is paid
    by its first record (as a RocksDB-backed store reads a key when it is used). A state
    that cannot be decoded or loaded raises :class:`DeferredStateError` naming the key
    there, and the key stays deferred; :meth:`load_deferred` builds every key now.

    Examples
    --------
    >>> from shiftwatch.operators.contract import Operator
    >>> from shiftwatch.operators.keyed import Keyed
    >>> class Count(Operator):
    ...     def __init__(self):
    ...         self._reset()
    ...     def _reset(self):
    ...         self._n = 0
    ...     def process(self, record):
    ...         self._n += 1
    ...         return [self._output(record, n=self._n)]
    >>> keyed = Keyed(Count)
    >>> [o["n"] for o in keyed.process_batch(
    ...     [{"key": "a"}, {"key": "b"}, {"key": "a"}])]
    [1, 2, 1]
    >>> sorted(keyed.state_dict()["keys"])
    ['a', 'b']

    With an expiry rule, at most two keys are kept (the least recently seen goes first):

    >>> from shiftwatch.deploy.expiry import Expiry
    >>> small = Keyed(Count, expiry=Expiry(max_keys=2))
    >>> _ = small.process_batch([{"key": k} for k in "abca"])
    >>> sorted(small.keys), small.evicted
    (['a', 'c'], 1)

    A key restored from its bytes is built on its first record:

    >>> from shiftwatch.operators.state_codec import dumps_state
    >>> again = Keyed(Count)
    >>> again.load_encoded({k: dumps_state(s) for k, s in keyed.state_dict()["keys"].items()})
    >>> len(again), again.deferred_keys
    (2, 2)
    >>> [o["n"] for o in again.process_batch([{"key": "a"}])], again.deferred_keys
    ([3], 1)
    """

    name = "keyed"

    def __init__(self, operator: Operator | Callable[[], Operator], expiry: Any = None):
        self.operator = operator
        self.expiry = expiry
        #: keys forgotten by :attr:`expiry`
        self.evicted = 0
        self._reset()

    def _reset(self) -> None:
        op = self.operator
        # An operator may keep all its keys in one store (e.g. cs: arrays); by default each
        # key gets a clone of it.
        store = op._keyed_store() if isinstance(op, Operator) else None
        self._store = store if store is not None else _Clones(self._new)
        #: keys restored by load_encoded whose operators are not built yet: key -> bytes
        self._deferred: dict[Any, bytes | str] = {}

    def _new(self) -> Operator:
        op = self.operator
        return op.clone() if isinstance(op, Operator) else op()

    def get(self, key: Any) -> Operator:
        """The operator for ``key``, created if new.

        With a keyed store (e.g. ``cs``'s fleet) an existing key's entry is a view whose
        ``state_dict`` reads the store; a new key gets an operator object of its own.
        """
        if self._deferred and key in self._deferred:
            self._build(key)
        got = self._store.existing(key)
        return got if got is not None else self._store.object_for(key)

    @property
    def keys(self) -> list:
        """The keys seen so far (with at least one accepted record), restored keys not built
        yet (:meth:`load_encoded`) last."""
        keys = self._store.keys
        return [*keys, *self._deferred] if self._deferred else keys

    def existing(self, key: Any) -> Operator | None:
        """The operator of ``key`` if the key exists, else None (no key is created; a
        deferred key's operator is built, see :meth:`load_encoded`).

        With a keyed store, an object with the key's ``state_dict``.
        """
        if self._deferred and key in self._deferred:
            self._build(key)
        return self._store.existing(key)

    @property
    def deferred_keys(self) -> int:
        """How many keys restored by :meth:`load_encoded` are not built yet."""
        return len(self._deferred)

    def deferred_state(self, key: Any) -> bytes | str | None:
        """A deferred key's encoded state as given to :meth:`load_encoded` (nothing is
        built), or None if ``key`` is not deferred."""
        return self._deferred.get(key) if self._deferred else None

    def evict(self, key: Any) -> bool:
        """Forget ``key`` (its state, built or deferred): its next record starts it afresh.
        Returns whether the key was there (``key`` as stored: :meth:`normalize_key`)."""
        if self._deferred and self._deferred.pop(key, None) is not None:
            return True
        return self._store.evict(key)

    def evict_many(self, keys: Iterable) -> list:
        """Forget each of ``keys`` (:meth:`evict`); returns those that were there. A store
        with its own ``evict_many`` (the ``cs`` fleet) forgets them in one pass."""
        gone = []
        rest = []
        for key in keys:
            if self._deferred and self._deferred.pop(key, None) is not None:
                gone.append(key)
            else:
                rest.append(key)
        many = getattr(self._store, "evict_many", None)
        if many is not None:
            return gone + many(rest)
        return gone + [k for k in rest if self._store.evict(k)]

    def load_encoded(self, states: Mapping[str, bytes | str]) -> None:
        """Replace the state by the keys' encoded states (``{key_name: dumps_state bytes}``,
        names as in :meth:`state_dict`), building each key's operator only when the key is
        first needed (see the class notes). Nothing is decoded here; a key name that names
        no key raises :class:`DeferredStateError`."""
        self._reset()
        deferred = self._deferred
        for name, data in states.items():
            try:
                key = _key_unstr(name)
                deferred[key] = data
            except Exception as exc:
                self._deferred = {}
                raise DeferredStateError(name, f"not a key name ({type(exc).__name__}: "
                                         f"{_short(exc)})", self) from None

    def load_deferred(self) -> None:
        """Build every deferred key's operator now (raises :class:`DeferredStateError` on
        the first state that cannot be loaded)."""
        for key in list(self._deferred):
            self._build(key)

    def _build(self, key: Any) -> None:
        data = self._deferred.pop(key)
        try:
            state = loads_state(data)
        except Exception as exc:
            self._deferred[key] = data
            raise DeferredStateError(_key_str(key), f"not a state ({type(exc).__name__}: "
                                     f"{_short(exc)})", self) from None
        try:
            self._store.load_key(key, state)
        except Exception as exc:
            self._deferred[key] = data
            raise DeferredStateError(_key_str(key), f"{type(exc).__name__}: "
                                     f"{_short(exc)}", self) from None

    def _build_for(self, records: list) -> None:
        """Build the deferred keys of ``records``."""
        deferred = self._deferred
        for record in records:
            key = record.get("key") if isinstance(record, Mapping) else None
            if type(key) is list:
                key = _key_of(key)
            try:
                hit = key in deferred
            except TypeError:  # unhashable: a dead letter, never a key
                continue
            if hit:
                self._build(key)
                if not deferred:
                    return

    @staticmethod
    def normalize_key(key: Any) -> Any:
        """The key as stored: JSON lists become tuples (hashable)."""
        return _key_of(key)

    @staticmethod
    def key_name(key: Any) -> str:
        """The string a key is stored under in :meth:`state_dict` (and in changelogs)."""
        return _key_str(key)

    @staticmethod
    def key_from_name(name: str) -> Any:
        """The key stored under ``name`` (the inverse of :meth:`key_name`)."""
        return _key_unstr(name)

    def __len__(self) -> int:
        return len(self._store) + len(self._deferred)

    def process(self, record: Mapping) -> list[dict]:
        if self._deferred:
            self._build_for([record])
        out = self._store.process(record, self)
        if self.expiry is not None:
            self._expire([record])
        return out

    def process_batch(self, records: Iterable[Mapping]) -> list[dict | DeadLetter]:
        if self._deferred or self.expiry is not None:
            records = list(records)
        if self._deferred:
            self._build_for(records)
        out = self._store.process_batch(records, self)
        if self.expiry is not None:
            self._expire(records)
        return out

    def _expire(self, records: list) -> None:
        self.expiry.touch(records)
        due = self.expiry.due()
        if due:
            self.evicted += len(self.evict_many(due))

    def flush(self) -> list[dict]:
        """Every key's held-back outputs (:meth:`Operator.flush`), keys in order."""
        flush = getattr(self._store, "flush", None)
        if flush is None:
            return []
        self.load_deferred()
        return flush()

    def state_dict(self) -> dict:
        self.load_deferred()
        store = self._store
        return {"operator": "keyed",
                "keys": {_key_str(k): store.existing(k).state_dict() for k in store.keys}}

    def load_state_dict(self, state: Mapping) -> None:
        if not isinstance(state, Mapping) or "keys" not in state:
            raise ValueError("Keyed state_dict has no 'keys' entry")
        self._reset()
        for k, s in state["keys"].items():
            self._store.load_key(_key_unstr(k), s)

    def _get_params(self) -> dict:
        return {"operator": self.operator}  # (not the expiry: a clone starts without one)


def columns_by_key(keyed: Keyed, keys: list, inv: Any, values: Any, record: Callable,
                   max_abs: float, ready: Callable, run_segment: Callable, accepted: Any,
                   alarm: Any, special: dict, dead: list) -> None:
    """The replay's column kernels' loop over the clones of ``keyed``: each key's rows of a
    batch (keys in order of first appearance, a key's rows in input order) go through
    ``run_segment(op, rows, xs)`` in runs its operator takes as plain values; the rows
    between (a key's first record, an operator not ``ready(op)``, a value beyond ``max_abs``
    or NaN) go through ``Keyed``'s own store one record at a time, as the record path takes
    them: their output in ``special`` and ``alarm``, or their dead letter in ``dead`` (and
    ``accepted`` False). ``record(row)`` is a row as the record path's record."""
    by_key = sort_by_key(inv, values, len(keys), max_abs)
    order, xs = by_key[0], by_key[1]
    for op, lo, hi in key_segments(keyed, keys, by_key, record, ready, accepted, alarm,
                                   special, dead):
        run_segment(op, order[lo:hi], xs[lo:hi])


def sort_by_key(inv: Any, values: Any, n_keys: int, max_abs: float,
                order: Any = None) -> tuple:
    """A batch's rows key by key, for :func:`key_segments`: ``(order, xs, starts, ends,
    bad)``: ``order`` the rows (keys in order of their numbers ``inv``, a key's rows in
    input order), ``xs = values[order]``, key ``u``'s rows at ``order[starts[u]:ends[u]]``
    (lists of ints), ``bad`` the positions in ``order`` of the values beyond ``max_abs`` (or
    NaN), a list. ``order``, if given, is that order (a caller's own stable sort)."""
    import numpy as np

    inv = np.asarray(inv)
    # (a stable sort gives the one order; of 16-bit numbers a radix sort, ~7x faster)
    if order is None:
        order = np.argsort(inv.astype(np.uint16) if n_keys <= 1 << 16 else inv, kind="stable")
    counts = np.bincount(inv, minlength=n_keys)
    ends = np.cumsum(counts)
    xs = values[order]
    bad = np.flatnonzero(~(np.abs(xs) <= max_abs))
    return order, xs, (ends - counts).tolist(), ends.tolist(), bad.tolist()


def key_segments(keyed: Keyed, keys: list, by_key: tuple, record: Callable, ready: Callable,
                 accepted: Any, alarm: Any, special: dict, dead: list) -> Iterator[tuple]:
    """:func:`columns_by_key`'s loop as a generator: ``(op, lo, hi)`` for each run of a key's
    rows its operator takes as plain values (positions ``lo .. hi - 1`` of ``order`` and
    ``xs`` of ``by_key``, :func:`sort_by_key`); the run is to be done before the next item
    is asked for. The rows between go through ``Keyed``'s store here, as in
    :func:`columns_by_key`."""
    store = keyed._store
    get = store._ops.get
    order, _, starts, ends, bad = by_key
    nb, b = len(bad), 0
    for u, key in enumerate(keys):
        i, m = starts[u], ends[u]
        while b < nb and bad[b] < i:  # (not expected: each key's bad rows are used up)
            b += 1
        while i < m:
            op = get(key)
            isbad = b < nb and bad[b] == i
            if op is None or isbad or not ready(op):
                if isbad:
                    b += 1
                r = int(order[i])
                for o in store.process_batch([record(r)], keyed):  # (one output or one
                    if isinstance(o, DeadLetter):                    # dead letter)
                        accepted[r] = False
                        dead.append(o)
                    else:
                        special[r] = o
                        alarm[r] = bool(o.get("alarm"))
                i += 1
                continue
            j = bad[b] if b < nb and bad[b] < m else m
            yield op, i, j
            i = j


class DeferredStateError(ValueError):
    """A key's state given to :meth:`Keyed.load_encoded` cannot be decoded or loaded (raised
    when the key is first needed); ``key`` is its name as in ``state_dict``."""

    def __init__(self, key: str, reason: str, keyed: Keyed | None = None):
        super().__init__(f"key {key!r}: {reason}")
        self.key, self.reason = key, reason
        self.keyed = keyed  #: the Keyed whose key it is


_BAD_KEY = object()
#: The dead-letter reason of a record whose key cannot be a key (e.g. a JSON object).
BAD_KEY_REASON = "key is not a string, number or list"


class _Clones:
    """The default store of :class:`Keyed`: one clone of the operator per key."""

    def __init__(self, new: Callable[[], Operator]):
        self._new = new
        self._ops: dict[Any, Operator] = {}

    @property
    def keys(self) -> list:
        return list(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def existing(self, key: Any) -> Operator | None:
        return self._ops.get(key)

    def object_for(self, key: Any) -> Operator:
        op = self._ops.get(key)
        if op is None:
            op = self._ops[key] = self._new()
        return op

    def evict(self, key: Any) -> bool:
        return self._ops.pop(key, None) is not None

    def load_key(self, key: Any, state: Mapping) -> None:
        op = self._new()
        op.load_state_dict(state)
        self._ops[key] = op

    def flush(self) -> list[dict]:
        return [o for op in self._ops.values() for o in op.flush()]

    def process(self, record: Mapping, owner: Operator) -> list[dict]:
        key = _key_of(record.get("key") if isinstance(record, Mapping) else None)
        op = self._ops.get(key)
        if op is not None:
            return op.process(record)
        # A new key is kept only once a record for it was accepted: a bad record leaves the
        # state (including the set of keys) untouched.
        op = self._new()
        out = op.process(record)
        self._ops[key] = op
        return out

    def process_batch(self, records: Iterable[Mapping], owner: Operator
                      ) -> list[dict | DeadLetter]:
        groups: dict[Any, list] = {}
        for record in records:
            if type(record) is dict:  # the common case, without the Mapping ABC check
                key = record.get("key")
            else:
                key = record.get("key") if isinstance(record, Mapping) else None
            if type(key) is list:
                key = _key_of(key)
            try:
                group = groups.get(key)
            except TypeError:  # an unhashable key, e.g. a JSON object
                key = _BAD_KEY
                group = groups.get(key)
            if group is None:
                group = groups[key] = []
            group.append(record)
        out: list[dict | DeadLetter] = []
        ops = self._ops
        for key, group in groups.items():
            if key is _BAD_KEY:
                out.extend(owner._dead_letter(r, BadInput(BAD_KEY_REASON)) for r in group)
                continue
            op = ops.get(key)
            try:
                if op is not None:
                    if len(group) == 1:
                        # With many keys most groups hold one record: no process_batch call.
                        try:
                            out.extend(op.process(group[0]))
                        except BadInput as exc:
                            out.append(op._dead_letter(group[0], exc))
                    else:
                        out.extend(op.process_batch(group))
                    continue
                op = self._new()
                res = op.process_batch(group)
            except Exception as exc:  # not BadInput: the key's state may hold part of it
                out.extend(self._quarantine(key, group, exc))
                continue
            # Every bad record gives exactly one dead letter: if all were bad, the operator
            # is still fresh and the key is not kept.
            if sum(isinstance(r, DeadLetter) for r in res) < len(group):
                ops[key] = op
            out.extend(res)
        return out

    def _quarantine(self, key: Any, group: list, exc: Exception) -> list[dict | DeadLetter]:
        """The key's operator raised ``exc`` on ``group``: start the key afresh and process
        the group again one record at a time, rolling the fresh state back over each record
        that raises (it becomes a dead letter naming the exception)."""
        self._ops.pop(key, None)
        op = self._new()
        name = op.name or type(op).__name__
        log.warning("operator %s failed on key %r (%s: %s): the key restarts from a fresh "
                    "state and its %d record(s) of this batch are processed one by one",
                    name, _short(key), type(exc).__name__, _short(exc), len(group),
                    exc_info=exc)
        out: list[dict | DeadLetter] = []
        accepted = False
        for record in group:
            before = op.state_dict()
            try:
                res = op.process(record)
            except BadInput as bad:
                out.append(op._dead_letter(record, bad))
                continue
            except Exception as err:
                op = self._new()
                op.load_state_dict(before)
                out.append(op._dead_letter(record, BadInput(
                    f"{name} raised {type(err).__name__}: {_short(err)} on this record; the "
                    f"key's state was restarted (quarantined) and rolled back over it")))
                continue
            out.extend(res)
            accepted = True
        if accepted:
            self._ops[key] = op
        return out


def _short(x: Any, width: int = 200) -> str:
    text = str(x)
    return text if len(text) <= width else text[:width] + "..."


def _key_of(key: Any) -> Any:
    # Keys from JSON may be (nested) lists; make them hashable.
    return tuple(_key_of(k) for k in key) if isinstance(key, list) else key


def _key_str(key: Any) -> str:
    # Strings starting with NUL are JSON-encoded too, so they cannot pass for a tagged key.
    if isinstance(key, str) and not key.startswith("\x00"):
        return key
    return "\x00json:" + json.dumps(key)


def _key_unstr(s: str) -> Any:
    if s.startswith("\x00json:"):
        return _key_of(json.loads(s[6:]))
    return s
