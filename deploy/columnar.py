"""The replay's columnar path: a CSV file in column batches through one keyed detector.

:class:`~shiftwatch.deploy.local.Pipeline` takes this path on its own when the run allows it
(:func:`columnar_run`): a CSV source read in columns (:mod:`shiftwatch.streams.columns`), one
keyed operator with a column kernel (``cs`` as a fleet:
:mod:`shiftwatch.operators.confseq.columns`; a non-binary ``river:NAME``:
:mod:`shiftwatch.operators.river.columns`; ``shape``:
:mod:`shiftwatch.operators.shape.columns`) or the chain ``standardize -> river:NAME``
(:mod:`shiftwatch.operators.river.chain_columns`: a keyed ``standardize`` reading ``value``
that emits its burn-in, any ``burn_in`` and ``min_std``, then a keyed non-binary River
detector), or a ``karcher`` chain (:mod:`shiftwatch.operators.riemannian.columns`:
``window_covariance -> karcher`` over vectors, a CSV whose ``value`` is a list of columns or
a JSON Lines file whose ``value`` is a list, read as a vector per row, with or without a
``standardize`` before it; or ``embed d=N -> window_covariance -> karcher`` over numbers;
``karcher`` on an SPD manifold), no pacing, no
metrics server, no key expiry, no rule for time and duplicates. Everything else takes the
record path: any other chain (``standardize`` with ``emit_burn_in=false`` or another
``field``, a subclass of it, ``standardize -> cs``, ``embed d=auto``, ``window_subspace``,
other chains of three operators), vector values through any other operator, and any run
with ``SHIFTWATCH_RECORD_PATH=1`` in the environment (or ``Pipeline(columnar=False)``).

A row of a chain whose stages emit fewer outputs than inputs (a window filling, a stride
skipped) has no output and no dead letter; the positions of ``change_at`` count it among
the key's inputs, as :mod:`~shiftwatch.deploy.positions` does.

Within the columnar path some rows still go through the operators record by record (each
kernel's docstring): for the chain, a key's first record and its burn-in (which move its
running mean and variance) and a value ``standardize`` refuses; its frozen rest is
standardised in arrays. A River detector's first record of a key and a value it refuses
(e.g. one standardised beyond ``MAX_ABS``) likewise. A chain's dead letters are written
stage by stage within a micro-batch, each stage's key by key, as the record path writes them.

What the two paths write is the same, byte for byte: the micro-batches hold the same
records (``batch_size`` accepted records each, the source's dead letters written where the
record path writes them: before the batch whose last record follows them), the kernels
give each key's outputs and dead letters as the operators do, ``change_at`` is mapped to the
key's positions by the rule of :mod:`~shiftwatch.deploy.positions`, and the sinks get
columns (``write_columns``, ``write_input_columns`` and ``write_output_columns``, where they
have them; the rest get records). ``tests/deploy/test_columnar_replay.py`` (one operator),
``tests/deploy/test_columnar_chain.py`` (the chain) and
``tests/deploy/test_columnar_karcher.py`` (the ``karcher`` chains) compare every file of the
two paths on streams with bad rows.

A JSON Lines file is read in columns too, under the same conditions
(:mod:`~shiftwatch.streams.jsonl_columns`; ``tests/deploy/test_columnar_jsonl.py``), unless
some record is one columns cannot hold (a vector value where numbers are read, for a
``karcher`` chain a value that is not a vector of the file's one length, keys equal but
written differently: the file is read once beforehand to know), which sends the whole file
the record path.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from functools import partial
from typing import Any

import numpy as np

from shiftwatch.records import DeadLetter, reason_kind

__all__ = ["columnar_run", "source_columns", "InputColumns", "OutputColumns",
           "RECORD_PATH_ENV"]

#: An environment variable: "1" makes every replay take the record path.
RECORD_PATH_ENV = "SHIFTWATCH_RECORD_PATH"


class InputColumns:
    """A micro-batch's input records as columns (what sinks with ``write_input_columns``
    get): ``keys`` (distinct, in order of first appearance), ``inv`` (each row's index into
    them), ``offsets``, ``ts`` (None: no ts) and ``values``; ``gids``, each key's number in
    the run (the same key, the same number; numbers are not in any order), and
    ``gid_space``, the run's object whose numbers those are (a sink that keeps something per
    key number keeps it for that run: ``gids`` may be None)."""

    __slots__ = ("keys", "inv", "offsets", "ts", "values", "gids", "gid_space")

    def __init__(self, keys: list, inv: np.ndarray, offsets: np.ndarray,
                 ts: np.ndarray | None, values: np.ndarray, gids: np.ndarray | None = None,
                 gid_space: Any = None):
        self.keys, self.inv, self.offsets, self.ts, self.values = keys, inv, offsets, ts, values
        self.gids, self.gid_space = gids, gid_space

    def __len__(self) -> int:
        return self.offsets.shape[0]

    def record(self, i: int) -> dict:
        """Row ``i`` as the record the record path has."""
        rec: dict[str, Any] = {"key": self.keys[self.inv[i]]}
        if self.ts is not None:
            rec["ts"] = float(self.ts[i])
        v = self.values[i]
        rec["value"] = float(v) if v.ndim == 0 else v.tolist()  # (a vector: its list)
        rec["offset"] = int(self.offsets[i])
        return rec

    def records(self) -> list[dict]:
        return [self.record(i) for i in range(len(self))]


class OutputColumns:
    """A micro-batch's outputs as columns, in input order (what sinks with
    ``write_columns`` / ``write_output_columns`` get).

    ``keys``/``inv``, ``offsets``, ``ts`` (None: no ts), ``gids``/``gid_space`` as
    :class:`InputColumns`, ``alarm`` (booleans), ``fields`` (the output fields after
    ``alarm``, in order: float arrays with NaN for ``None``, or boolean arrays), ``special``
    (``{row: output}``: the rows whose output is more than the columns, alarms with
    ``change_at``; written as they are)."""

    __slots__ = ("keys", "inv", "offsets", "ts", "alarm", "fields", "special", "gids",
                 "gid_space")

    def __init__(self, keys: list, inv: np.ndarray, offsets: np.ndarray,
                 ts: np.ndarray | None, alarm: np.ndarray, fields: dict, special: dict,
                 gids: np.ndarray | None = None, gid_space: Any = None):
        self.keys, self.inv, self.offsets, self.ts = keys, inv, offsets, ts
        self.alarm, self.fields, self.special = alarm, fields, special
        self.gids, self.gid_space = gids, gid_space

    def __len__(self) -> int:
        return self.offsets.shape[0]

    def names(self) -> list[str]:
        """The fields of a row that is not special, in order."""
        return ["key", *(["ts"] if self.ts is not None else []), "offset", "alarm",
                *self.fields]

    def record(self, i: int) -> dict:
        """Row ``i`` as the output record of the record path."""
        got = self.special.get(i)
        if got is not None:
            return got
        rec: dict[str, Any] = {"key": self.keys[self.inv[i]]}
        if self.ts is not None:
            rec["ts"] = float(self.ts[i])
        rec["offset"] = int(self.offsets[i])
        rec["alarm"] = bool(self.alarm[i])
        for name, col in self.fields.items():
            v = col[i].item()
            rec[name] = None if type(v) is float and v != v else v
        return rec

    def records(self) -> list[dict]:
        return [self.record(i) for i in range(len(self))]

    def alarms(self) -> list[dict]:
        """The outputs with ``alarm: true``, in order."""
        return [self.record(i) for i in np.flatnonzero(self.alarm).tolist()]


def _kernel(op: Any) -> tuple | None:
    """The column kernel for the keyed operator ``op`` and whether it gives its dead letters
    key by key, or None."""
    from shiftwatch.operators.keyed import Keyed

    if not isinstance(op, Keyed):
        return None
    name = type(getattr(op, "_store", None)).__name__
    if name == "ConfSeqFleet":
        from shiftwatch.operators.confseq import columns as cs

        return (cs.fleet_columns, False) if cs.columns_ready(op) else None
    from shiftwatch.operators.shape.operator import ShapeOperator

    if isinstance(op.operator, ShapeOperator):
        from shiftwatch.operators.shape import columns as sc

        return (sc.shape_columns, True) if sc.columns_ready(op) else None
    from shiftwatch.operators.river.adapter import RiverDetector

    if isinstance(op.operator, RiverDetector):
        from shiftwatch.operators.river import columns as rc

        return (rc.river_columns, True) if rc.columns_ready(op) else None
    return None


def columnar_run(pipeline: Any) -> _ColumnarRun | None:
    """The columnar run of ``pipeline`` (a :class:`~shiftwatch.deploy.local.Pipeline`), or
    None when it takes the record path (see the module docstring)."""
    if pipeline.columnar is False or os.environ.get(RECORD_PATH_ENV, "") == "1":
        return None
    ops = pipeline.operators
    if (pipeline.speed or pipeline.metrics is not None or pipeline.expiry is not None
            or len(ops) not in (1, 2, 3)):
        return None
    from shiftwatch.streams.columns import columns_eligible

    kernel = _kernel(ops[0]) if len(ops) == 1 else _chain_kernel(*ops)
    if kernel is None:
        return None
    vectors = getattr(kernel[0], "vectors", False)  # (the chain reads vectors)
    source = pipeline.source
    if vectors != bool(getattr(source, "_vector", False)) and not _jsonl(source):
        return None  # (a CSV's vectors are its list of value columns; JSON's, a list value)
    eligible = columns_eligible(source, vectors=True) if vectors else columns_eligible(source)
    if not eligible or _unfit(source, vectors):
        return None
    return _ColumnarRun(pipeline, *kernel, vectors=vectors)


def source_columns(source: Any, vectors: bool = False) -> Any:
    """The items of ``source`` (:func:`~shiftwatch.streams.columns.columns_eligible`) as
    column chunks, by the reader of its kind:
    :func:`~shiftwatch.streams.columns.csv_columns` or
    :func:`~shiftwatch.streams.jsonl_columns.jsonl_columns`; with ``vectors``, a vector per
    row (a CSV's list of value columns, a JSON Lines file's list values)."""
    if _jsonl(source):
        from shiftwatch.streams.jsonl_columns import jsonl_columns

        return jsonl_columns(source, vectors=vectors)
    from shiftwatch.streams.columns import csv_columns

    return csv_columns(source, vectors=vectors)


def _jsonl(source: Any) -> bool:
    from shiftwatch.streams.files import JsonlSource

    return type(source) is JsonlSource


def _unfit(source: Any, vectors: bool = False) -> bool:
    """Whether ``source`` is a JSON Lines file whose records columns cannot hold (as
    numbers, or with ``vectors`` as vectors of one length:
    :func:`~shiftwatch.streams.jsonl_columns.unfit`; read once to know, the verdicts kept on
    the source)."""
    if not _jsonl(source):
        return False
    verdicts = getattr(source, "_columns_unfit", None)
    if verdicts is None:
        verdicts = source._columns_unfit = {}
    if vectors not in verdicts:
        from shiftwatch.streams.jsonl_columns import unfit

        verdicts[vectors] = unfit(source, vectors=vectors) is not None
    return verdicts[vectors]


class _KarcherChain:
    """The column kernel of a ``karcher`` chain
    (:func:`~shiftwatch.operators.riemannian.columns.karcher_chain_columns`) in the form
    :class:`_ColumnarRun` calls (the detector first); ``vectors``: it reads a vector per
    row."""

    __name__ = "karcher_chain_columns"

    def __init__(self, ops: list):
        from shiftwatch.operators.riemannian.transforms import WindowCovariance

        self.ops = ops  # (vectors: a standardiser before window_covariance reads them too)
        self.vectors = type(ops[-2].operator) is WindowCovariance and \
            type(ops[0].operator).__name__ != "DelayEmbed"

    def __call__(self, _op: Any, *args: Any) -> tuple:
        from shiftwatch.operators.riemannian.columns import karcher_chain_columns

        return karcher_chain_columns(self.ops, *args)


def _chain_kernel(*ops: Any) -> tuple | None:
    """The column kernel for the chain ``ops`` (keyed): ``standardize -> river:NAME``,
    ``window_covariance -> karcher`` or ``embed -> window_covariance -> karcher``
    (:func:`~shiftwatch.operators.riemannian.columns.chain_ready`), or None."""
    if type(getattr(ops[-1], "operator", None)).__name__ == "KarcherOperator":
        from shiftwatch.operators.riemannian.columns import chain_ready

        return (_KarcherChain(list(ops)), True) if chain_ready(list(ops)) else None
    if len(ops) != 2:
        return None
    first, second = ops
    got = _kernel(second)
    if got is None or got[0].__name__ != "river_columns":
        return None
    from shiftwatch.operators.river import chain_columns as ch

    if not ch.standardize_ready(first):
        return None
    return partial(ch.standardize_river_columns, first), True


class _AllDead:
    """:func:`~shiftwatch.deploy.local.stop_if_all_dead` as a state machine fed item by
    item (True: the run stops before this item)."""

    def __init__(self, first: int | None):
        self.first = first
        self.n = 0
        self.head: DeadLetter | None = None
        self.kind: str | None = None
        self.done = not first

    def item(self, dead: DeadLetter | None) -> bool:
        if dead is not None and (self.kind is None or reason_kind(dead.reason) == self.kind):
            if self.head is None:
                self.head, self.kind = dead, reason_kind(dead.reason)
            self.n += 1
            return self.n >= self.first
        self.done = True
        return False


class _Positions:
    """:class:`~shiftwatch.deploy.positions.ChangePositions` for column batches: per key
    the inputs and accepted records so far, and the positions of its rejected inputs."""

    def __init__(self) -> None:
        self.n_in = np.zeros(16, dtype=np.int64)
        self.n_det = np.zeros(16, dtype=np.int64)
        # per key, the positions of its inputs without a detector output (rejected, or held
        # by a stage before it: a window filling), in parts
        self.rejected: dict[int, list[np.ndarray]] = {}

    def batch(self, ids: np.ndarray, inv: np.ndarray, accepted: np.ndarray,
              special: dict[int, dict]) -> None:
        """A micro-batch: ``ids`` its keys' numbers in the run, ``inv`` each row's key."""
        top = int(ids.max()) + 1 if ids.shape[0] else 0
        if top > self.n_in.shape[0]:
            size = 2 * top
            self.n_in = np.r_[self.n_in, np.zeros(size - self.n_in.shape[0], np.int64)]
            self.n_det = np.r_[self.n_det, np.zeros(size - self.n_det.shape[0], np.int64)]
        all_ok = bool(accepted.all())
        located = sorted(i for i, o in special.items() if "change_at" in o)
        if not all_ok or located:
            rank = _rank(inv)  # each row's place among its key's rows of the batch
        if not all_ok:  # each rejected input's position among its key's inputs
            bad = np.flatnonzero(~accepted)
            pos = self.n_in[ids[inv[bad]]] + rank[bad]
            g_bad = ids[inv[bad]]
            order = np.argsort(g_bad, kind="stable")
            g_sorted = g_bad[order]
            cuts = np.flatnonzero(np.diff(g_sorted)) + 1
            for part in np.split(order, cuts):
                self.rejected.setdefault(int(g_bad[part[0]]), []).append(pos[part])
        for i in located:
            o = special[i]
            j = o.get("change_at")
            if j is None or isinstance(j, bool) or not isinstance(j, int):
                continue
            g = int(ids[inv[i]])
            if all_ok:
                before = int(rank[i])
            else:  # the key's accepted rows before this one
                same = inv[:i] == inv[i]
                before = int(np.count_nonzero(same & accepted[:i]))
            seen = int(self.n_det[g]) + before + 1  # with this one
            if 0 <= j < seen:
                o["change_at"] = self._position(g, j)
            else:
                o["change_at"] = None
                o["change_at_operator"] = j
        _add(self.n_in, ids, inv)
        _add(self.n_det, ids, inv if all_ok else inv[accepted])


    def _position(self, g: int, j: int) -> int:
        """The position among key ``g``'s inputs of its ``j``-th accepted one (past the
        rejected ones up to it)."""
        parts = self.rejected.get(g)
        if not parts:
            return j
        if len(parts) > 1:
            parts[:] = [np.concatenate(parts)]
        rej = parts[0]  # increasing: the k-th accepted input is at k + (rejected before it)
        return j + int(np.searchsorted(rej - np.arange(rej.shape[0]), j, side="right"))


def _rank(inv: np.ndarray) -> np.ndarray:
    """Each row's place among the rows of its key (``inv``: each row's key), from 0."""
    order = np.argsort(inv, kind="stable")
    counts = np.bincount(inv)
    starts = np.cumsum(counts) - counts
    rank = np.empty(inv.shape[0], dtype=np.int64)
    rank[order] = np.arange(inv.shape[0]) - np.repeat(starts, counts)
    return rank


def _add(counts: np.ndarray, ids: np.ndarray, inv: np.ndarray) -> None:
    counts[ids] += np.bincount(inv, minlength=ids.shape[0])


class _ColumnarRun:
    """One replay on the columnar path (built by :func:`columnar_run`).

    The kernels run over super-batches of many micro-batches (``batch_size`` records each):
    a key's values of a super-batch go through its detector in one call, and a kernel's
    outputs do not depend on where batches end. What does, the order of the dead letters in
    their file (the source's are written as they are read, an operator's after its batch),
    is rebuilt micro-batch by micro-batch."""

    #: Rows per super-batch, at least (a multiple of ``batch_size``).
    SUPER_ROWS = 1 << 15
    #: Rows per key per super-batch, at least (up to ``MAX_SUPER_ROWS``): the kernels that
    #: go key by key pay a fixed cost per key and call, so with many keys a super-batch holds
    #: more rows (10,000 keys: 2,097,152, the most).
    KEY_ROWS = 256
    #: Rows per super-batch, at most (more keys than ``MAX_SUPER_ROWS / KEY_ROWS``: fewer
    #: rows per key and call).
    MAX_SUPER_ROWS = 1 << 21

    def __init__(self, pipeline: Any, kernel: Any, grouped: bool, vectors: bool = False):
        self.p = pipeline
        self.kernel = kernel
        self.grouped = grouped  # the operator's dead letters come key by key in a batch
        self.vectors = vectors  # the source read as a vector per row
        self.op = pipeline.operators[-1]  # (a chain's kernel holds the operators before it)
        self.last = len(pipeline.operators) - 1  # the index of the detector
        self.path = pipeline.source.path
        self.pending: list[tuple[int, DeadLetter]] = []  # source dead letters to write
        self.positions: _Positions | None = None
        self.read = 0  # items read from the source so far
        self.gid: dict = {}  # each key's number in the run (InputColumns.gids)
        self.key_of: list = []  # the key of each number
        self._reader_keys: Any = None  # a reader's growing list of keys, and their numbers
        self._reader_numbers = np.zeros(0, dtype=np.int64)
        self.blanks: list[int] = []  # the numbers of the blank lines read so far

    def run(self, ex: Any, guard: Any, bar: Any, all_dead: Any) -> None:
        """Read, process and write the whole source (the record loop of ``Pipeline._run``,
        in columns); the caller handles the end of the stream and closing. ``all_dead(
        how_many, head)`` is the exception to raise when the source's first items are all
        dead letters (:func:`~shiftwatch.deploy.local.stop_if_all_dead`)."""

        p = self.p
        big = self._super_rows(0)
        check = _AllDead(p.stop_if_all_dead)
        parts: list[tuple] = []  # (keys, ts, values, lines, offsets) read, not processed
        held = 0
        base = 0
        self.positions = _Positions() if p._positions is not None else None
        try:
            for chunk in source_columns(p.source, self.vectors):
                _bound(chunk, ex.bounds, getattr(p.source, "path", None))
                m, nd = len(chunk), len(chunk.dead)
                fresh: list[tuple[int, DeadLetter]] = []
                if nd:
                    before = np.array([b for b, _ in chunk.dead], dtype=np.int64)
                    offs = base + np.arange(m) + np.searchsorted(before, np.arange(m),
                                                                  side="right")
                    for j, (b, d) in enumerate(chunk.dead):
                        d.origin.setdefault("offset", base + b + j)
                        fresh.append((base + b + j, d))
                else:
                    offs = base + np.arange(m, dtype=np.int64)
                self.blanks.extend(chunk.blanks)
                if not check.done:
                    for off, d in _head(offs, fresh):
                        if check.item(d):  # stop before this item, as the record path
                            self._count_to(ex, off, d.origin.get("line"))
                            self._write_source_dead(ex, off)
                            self._write_source_dead(ex, off, fresh)
                            raise all_dead(f"the first {check.n}", check.head)
                        if check.done:
                            break
                self.pending.extend(fresh)
                base += m + nd
                self.read = base
                if m:
                    parts.append((self._codes(chunk), chunk.ts, chunk.values, chunk.lines,
                                  offs))
                    held += m
                while held >= big:
                    batch, parts = _take(parts, big)
                    held -= big
                    keys = self._process(ex, batch, guard, bar, final=False)
                    big = max(big, self._super_rows(keys))
        except KeyboardInterrupt:
            ex.summary.interrupted = True
        if not check.done and check.n and not ex.summary.interrupted:
            self._count_to(ex, base)
            self._write_source_dead(ex, None)
            n = check.n
            raise all_dead(f"all {n}" if n > 1 else "the one", check.head)
        if held:
            batch, parts = _take(parts, held)
            try:
                self._process(ex, batch, guard, bar, final=True)
            except KeyboardInterrupt:
                ex.summary.interrupted = True
        self._count_to(ex, base)
        self._write_source_dead(ex, None)

    def _codes(self, chunk: Any) -> np.ndarray:
        """Each row's key number in the run (new keys numbered as they come). A reader that
        keeps its keys in one growing list (``chunk.uniq``, the same list for every chunk of
        a read) has the numbers of its list's keys kept, extended as it grows."""
        uniq, inv = chunk.uniq, chunk.inv
        if uniq is not None:
            if uniq is not self._reader_keys:  # (a list not seen before: held, so that its
                # identity is not another list's later)
                self._reader_keys, self._reader_numbers = uniq, np.zeros(0, dtype=np.int64)
            known = self._reader_numbers
            if len(uniq) > known.shape[0]:  # (keys added to the list since)
                known = self._reader_numbers = np.concatenate(
                    [known, self._numbers(uniq[known.shape[0]:])])
            return known[inv]
        keys = chunk.keys  # a key per row: its distinct keys, in order
        uniq = list(dict.fromkeys(keys))
        index = {k: i for i, k in enumerate(uniq)}
        inv = np.fromiter(map(index.__getitem__, keys), dtype=np.int64, count=len(keys))
        return self._numbers(uniq)[inv]

    def _numbers(self, keys: list) -> np.ndarray:
        """Each key's number in the run (a new key gets the next one)."""
        gid, key_of = self.gid, self.key_of
        numbers = np.empty(len(keys), dtype=np.int64)
        for u, k in enumerate(keys):
            g = gid.get(k)
            if g is None:
                g = gid[k] = len(key_of)
                key_of.append(k)
            numbers[u] = g
        return numbers

    def _super_rows(self, keys: int) -> int:
        """Rows per super-batch for ``keys`` distinct keys in one: ``SUPER_ROWS``, or
        ``KEY_ROWS`` a key up to ``MAX_SUPER_ROWS``, a multiple of ``batch_size``."""
        size = self.p.batch_size
        rows = max(self.SUPER_ROWS, min(self.MAX_SUPER_ROWS, self.KEY_ROWS * keys))
        return size * max(1, -(-rows // size))

    def _count_to(self, ex: Any, items: int, line: int | None = None) -> None:
        """Count the source's items up to ``items``, and its blank lines before line
        ``line`` (None: all read), as the record path has when it got there (it counts an
        item when it reads it: a micro-batch is processed when its last record was read)."""
        if items > ex.summary.records_in:
            ex.count_inputs(items - ex.summary.records_in)
        self.p.source.blank_lines = (len(self.blanks) if line is None
                                     else bisect_left(self.blanks, line))

    def _write_source_dead(self, ex: Any, before: int | None,
                           items: list[tuple[int, DeadLetter]] | None = None) -> None:
        """Write the pending source dead letters (or ``items``) whose offset is below
        ``before`` (None: all of them)."""
        todo = self.pending if items is None else items
        k = len(todo) if before is None else next(
            (j for j, (o, _) in enumerate(todo) if o >= before), len(todo))
        if k:
            self.p._write_dead([ex.dead_letter(d) for _, d in todo[:k]])
            del todo[:k]

    def _process(self, ex: Any, batch: tuple, guard: Any, bar: Any, final: bool) -> int:
        """Run a super-batch through the kernel, then write it micro-batch by micro-batch as
        the record path does: the source's dead letters read before a micro-batch ended
        (before its last record; at the end of the stream all of them, before a last, partial
        micro-batch), the operator's of that micro-batch (in input order, or key by key),
        then its inputs and outputs to the sinks, and the check of the first rejections
        (``Pipeline``'s ``_RejectionCheck``)."""
        codes, ts, values, lines, offs = batch
        from shiftwatch.streams.csv_kernel import first_appearance

        gids, inv = first_appearance(codes, len(self.key_of))
        uniq = list(map(self.key_of.__getitem__, gids.tolist()))
        n = offs.shape[0]
        inputs = InputColumns(uniq, inv, offs, ts, values, gids, self.gid)
        size = self.p.batch_size
        with guard.deferred():
            accepted, alarm, fields, special, dead = self.kernel(
                self.op, uniq, inv, values, ts, inputs.record)
            dead = [d if type(d) is tuple else (0, d) for d in dead]  # (stage, dead letter)
            by_batch = self._group_dead(inputs, dead)
            rows = sorted({int(np.searchsorted(offs, d.origin.get("offset")))
                           for _, d in dead})
            where = {int(offs[i]): {"file": self.path, "line": int(lines[i]),
                                    "offset": int(offs[i])} for i in rows}
            rows_special = sorted(special)
            for b in range(-(-n // size)):
                lo, hi = b * size, min(n, (b + 1) * size)
                partial = final and hi == n and hi - lo < size
                self._count_to(ex, self.read if partial else int(offs[hi - 1]) + 1,
                               None if partial else int(lines[hi - 1]))
                self._write_source_dead(ex, None if partial else int(offs[hi - 1]))
                records = [ex._operator_dead_letter(d, ex.names[stage], where, None)
                           for stage, d in by_batch.get(b, ())]  # (counted in that order)
                self.p._write_dead(records)
                i0 = bisect_left(rows_special, lo)
                i1 = bisect_left(rows_special, hi)
                sub = {i - lo: special[i] for i in rows_special[i0:i1]}
                self._write(ex, _part(inputs, lo, hi), accepted[lo:hi], alarm[lo:hi],
                            {k: v[lo:hi] for k, v in fields.items()}, sub)
                rejections = self.p._rejections
                if not rejections.done:
                    rejections.batch([{"offset": o} for o in offs[lo:hi].tolist()], records)
            if bar is not None:
                bar.update(n)
        return len(uniq)

    def _group_dead(self, inputs: InputColumns, dead: list) -> dict[int, list]:
        """The operators' dead letters (``(stage, dead letter)``) by micro-batch, each
        micro-batch's in the record path's order: stage by stage, each stage's in input
        order, or for an operator whose dead letters come key by key (``Keyed``'s clones) by
        key (in order of first appearance in the micro-batch)."""
        size = self.p.batch_size
        order = []
        rows = [int(np.searchsorted(inputs.offsets, d.origin.get("offset"))) for _, d in dead]
        for (stage, d), row in zip(dead, rows, strict=True):
            b = row // size
            first = 0
            if self.grouped:  # (each stage's keys in order of first appearance in the
                # micro-batch: Keyed groups by key, and a later stage gets the groups in order)
                lo = b * size
                same = inputs.inv[lo:lo + size] == inputs.inv[row]
                first = int(np.flatnonzero(same)[0])
            order.append(((b, stage, first, row), (stage, d)))
        order.sort(key=lambda x: x[0])
        by_batch: dict[int, list] = {}
        for (b, *_), item in order:
            by_batch.setdefault(b, []).append(item)
        return by_batch

    def _write(self, ex: Any, inputs: InputColumns, accepted: np.ndarray,
               alarm: np.ndarray, fields: dict, special: dict) -> None:
        """One micro-batch's results: counted, ``change_at`` mapped, to the sinks."""
        p = self.p
        all_ok = bool(accepted.all())
        if self.positions is not None:
            self.positions.batch(inputs.gids, inputs.inv, accepted, special)
        for o in special.values():  # clamp_change_ts
            c = o.get("change_ts")
            t = o.get("ts")
            if c is not None and t is not None and c > t:
                o["change_ts"] = t
        if all_ok:
            out = OutputColumns(inputs.keys, inputs.inv, inputs.offsets, inputs.ts, alarm,
                                fields, special, inputs.gids, inputs.gid_space)
        else:
            rows = np.flatnonzero(accepted)
            remap = {int(i): j for j, i in enumerate(rows.tolist())}
            out = OutputColumns(inputs.keys, inputs.inv[rows], inputs.offsets[rows],
                                None if inputs.ts is None else inputs.ts[rows], alarm[rows],
                                {k: v[rows] for k, v in fields.items()},
                                {remap[i]: o for i, o in special.items()},
                                inputs.gids, inputs.gid_space)
        n_out = len(out)
        n_alarms = int(np.count_nonzero(out.alarm))
        s = ex.summary
        counts = s.alarms_by_operator
        key = f"{self.last}:{ex.names[self.last]}"  # (a standardiser before it: no alarms)
        if n_out or key in counts:
            counts[key] = counts.get(key, 0) + n_alarms
            s.n_operators = self.last + 1
        s.outputs += n_out
        s.alarms += n_alarms
        for sink in p.sinks:
            if getattr(sink, "wants_inputs", False):
                write = getattr(sink, "write_input_columns", None)
                if write is not None:
                    write(inputs)
                else:
                    sink.write_inputs(inputs.records())
            if hasattr(sink, "write_output_columns"):
                sink.write_output_columns(out)
            elif hasattr(sink, "write_columns"):
                sink.write_columns(out)
            elif getattr(sink, "reads_alarms_only", False):
                sink.write(out.alarms())
            else:
                sink.write(out.records())


def _part(inputs: InputColumns, lo: int, hi: int) -> InputColumns:
    """Rows ``lo:hi`` of ``inputs``, their keys in order of first appearance among them."""
    if lo == 0 and hi == len(inputs):
        return inputs
    from shiftwatch.streams.csv_kernel import first_appearance

    present, inv = first_appearance(inputs.inv[lo:hi], len(inputs.keys))
    keys = inputs.keys
    return InputColumns(list(map(keys.__getitem__, present.tolist())), inv,
                        inputs.offsets[lo:hi], None if inputs.ts is None else inputs.ts[lo:hi],
                        inputs.values[lo:hi],
                        None if inputs.gids is None else inputs.gids[present], inputs.gid_space)


def _bound(chunk: Any, bounds: Any, path: Any = None) -> None:
    """The stream's plausibility bounds (:mod:`~shiftwatch.deploy.bounds`) on a chunk, in
    place: its rows beyond them become dead letters where the record path has them (the
    same reason, raw record and offset), the others stay. A vectorised look first; the
    rows are walked in order (the bounds' clock) only in a chunk with a candidate."""
    m = len(chunk)
    if bounds is None or not m:
        return
    ts, values = chunk.ts, chunk.values
    cand = np.zeros(m, dtype=bool)
    if bounds.max_abs_value is not None:
        cand |= ~(np.abs(values.reshape(m, -1)) <= bounds.max_abs_value).all(axis=1)
    if bounds.max_future_seconds is not None and ts is not None:
        cand |= ts > max(bounds.clock, bounds.now()) + bounds.max_future_seconds
    if not cand.any():
        if ts is not None:
            bounds.clock = max(bounds.clock, float(ts.max()))
        return
    keys = chunk.keys
    keep = np.ones(m, dtype=bool)
    dead: list[tuple[int, DeadLetter]] = []
    for i in range(m):
        rec: dict[str, Any] = {"key": keys[i]}
        if ts is not None:
            rec["ts"] = float(ts[i])
        v = values[i]
        rec["value"] = float(v) if v.ndim == 0 else v.tolist()
        why = bounds.reason(rec)
        if why is not None:
            keep[i] = False
            origin = {"line": int(chunk.lines[i]), "operator": "bounds", "key": keys[i]}
            if path is not None:
                origin = {"file": path, **origin}
            dead.append((i, DeadLetter(raw=rec, reason=why, origin=origin)))
    if not dead:
        return
    # rows_before of every dead letter, counted over the rows kept
    kept_before = np.concatenate([[0], np.cumsum(keep)])
    moved = [(int(kept_before[b]), d) for b, d in chunk.dead]
    old = [(int(kept_before[i]), d) for i, d in dead]
    # in line order among those with the same rows before them
    lines = chunk.lines
    at = {id(d): int(lines[i]) for i, d in dead}
    merged = sorted(moved + old, key=lambda bd: (bd[0], at.get(id(bd[1]),
                                                             bd[1].origin.get("line", 0))))
    chunk.dead = merged
    if chunk._keys is not None:
        chunk._keys = [k for k, ok in zip(chunk._keys, keep.tolist(), strict=True) if ok]
    if chunk.inv is not None:
        chunk.inv = chunk.inv[keep]
    chunk.ts = None if ts is None else ts[keep]
    chunk.values = values[keep]
    chunk.lines = lines[keep]


def _head(offs: np.ndarray, fresh: list) -> list[tuple[int, DeadLetter | None]]:
    """A chunk's first items in order as (offset, DeadLetter or None for a record): its dead
    letters and enough rows to reach the first record (:class:`_AllDead` stops there)."""
    items: list = [(o, None) for o in offs[:len(fresh) + 1].tolist()] + fresh
    items.sort(key=lambda x: x[0])
    return items


def _take(parts: list[tuple], size: int) -> tuple[tuple, list[tuple]]:
    """The first ``size`` rows of ``parts`` as one batch, and the parts left."""
    got, left, need = [], [], size
    for part in parts:
        m = len(part[0])
        if need == 0:
            left.append(part)
        elif m <= need:
            got.append(part)
            need -= m
        else:
            got.append(tuple(None if c is None else c[:need] for c in part))
            left.append(tuple(None if c is None else c[need:] for c in part))
            need = 0
    if len(got) == 1:
        return got[0], left
    cols = [None if got[0][c] is None else np.concatenate([g[c] for g in got])
            for c in range(5)]
    return tuple(cols), left
