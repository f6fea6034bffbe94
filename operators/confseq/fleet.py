"""A fleet of ``cs`` detectors: every key's state in arrays, a micro-batch in one compiled call.

:class:`~shiftwatch.operators.keyed.Keyed` over a :class:`~shiftwatch.operators.confseq.
ConfSeqOperator` keeps one operator object per key; with tens of thousands of sensors per
partition the per-record Python around a one-value kernel call dominates and each key costs
kilobytes. :class:`ConfSeqFleet` is what ``Keyed`` uses instead when the operator allows it
(sub-Gaussian or Hoeffding CS, no ``pfa``, no ``prune``, no ``restart``, ``locate`` = the CS
start or off): a key is a slot (a float64 row and an int32 row of two state arrays), a key in
its burn-in borrows a row of a shared burn-in table, the hull points of all keys share one
pool (blocks that grow by a quarter; a block a key grew out of waits on a free list for the
next key growing into its size), and :meth:`ConfSeqFleet.process_batch` reads the
micro-batch column by column and runs it, all keys interleaved, through one call of
:func:`~shiftwatch.operators.confseq.fleet_kernel.fleet_hull_run`. About 900 bytes a key
after 500 values (``benchmarks/RESULTS.md``).

Outputs and dead letters are those of a ``ConfSeqOperator`` per key (tested bit for bit), and
each key's ``state_dict`` has the operator's format and values (the hull arrays past the
hull's points are left empty rather than holding stale points, and a key past its burn-in
has zeros for the burn-in values it no longer uses), so a changelog written by one restores
into the other with the same outputs (tested). A key whose first
accepted value is a vector gets an operator object of its own (the fleet holds scalars), which
the fleet keeps beside its slots. A key leaves the fleet only when the stage's expiry rule
forgets it (:meth:`ConfSeqFleet.evict`, ``state:`` of a stage, deploy/expiry.py): the last
slot moves into its place and its hull blocks are reclaimed by the next compaction.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Any

import numpy as np

from shiftwatch.operators.confseq.detector import ConfSeqDetector
from shiftwatch.operators.confseq.fleet_kernel import (
    C_COUNT,
    C_ROW,
    C_SUPR,
    C_WALK,
    F_ALARM,
    F_AT,
    F_LOWER,
    F_ROWS,
    F_TS,
    F_UPPER,
    N_CLASSES,
    X_BROW,
    X_CAP,
    X_OFF,
    X_ROW,
    X_SIZE,
    fleet_compact,
    fleet_hull_run,
    grown_cap,
    return_burn_row,
    take_burn_row,
)
from shiftwatch.operators.confseq.kernels import (
    S_ALARM,
    S_ARGHI,
    S_ARGLO,
    S_BURN,
    S_CENTER,
    S_LOWER,
    S_N,
    S_NBURN,
    S_SCALE,
    S_TSHI,
    S_TSLO,
    S_UPPER,
)
from shiftwatch.operators.contract import Operator
from shiftwatch.operators.keyed import BAD_KEY_REASON, Keyed
from shiftwatch.operators.state_codec import encode_state
from shiftwatch.records import BadInput, DeadLetter, numeric_ts

__all__ = ["ConfSeqFleet", "fleet_eligible"]

_STATE_CAP = 16  # a detector's first hull arrays: the least size of a state's hull arrays
_MIN_BURN_ROWS = 64  # the burn-in rows kept however few keys are in burn-in
_X32 = 2**31 - 2  # record indices since a restart above this widen pool_x from int32
_NONE = object()


_PACKERS: dict[tuple[str, int], struct.Struct] = {}


def _packed(code: str, items: list, dtype: Any) -> np.ndarray:
    """``items`` as an array of ``dtype``, written by a cached ``struct.Struct`` (``'d'``:
    float64, ``'q'``: int64); raises ``struct.error`` for an item the code does not take
    (``'q'``: anything but an int). About 4x faster than ``np.array`` from a list."""
    n = len(items)
    packer = _PACKERS.get((code, n))
    if packer is None:
        if len(_PACKERS) >= 64:  # batch sizes vary: keep a few
            _PACKERS.clear()
        packer = _PACKERS[code, n] = struct.Struct(f"={n}{code}")
    arr = np.empty(n, dtype=dtype)
    packer.pack_into(arr, 0, *items)
    return arr


def _yt(length: int) -> np.ndarray:
    """A pool of (walk value, ts) pairs (nothing reads a point before it is written)."""
    return np.empty((length, 2))


#: The block capacities that have free lists (fleet_hull_run): a compaction trims a block to
#: the least of them that holds its hull and two more points.
_CLASS_CAPS = np.array([4], dtype=np.int64)
while len(_CLASS_CAPS) < N_CLASSES:
    _CLASS_CAPS = np.r_[_CLASS_CAPS, grown_cap(int(_CLASS_CAPS[-1]))]


def fleet_eligible(op: Operator) -> bool:
    """Whether ``Keyed(op)`` can keep its keys in a :class:`ConfSeqFleet`."""
    return (op.cs in ("subgaussian", "hoeffding") and not op.pfa and op.prune is None
            and not op.restart and op.locate_kind in ("cs", None))


class ConfSeqFleet:
    """The keys of ``Keyed(template)`` as slots of arrays (see the module docstring).

    Parameters
    ----------
    template
        The per-key operator it stands for (:func:`fleet_eligible` must hold).
    """

    def __init__(self, template: Operator):
        if not fleet_eligible(template):
            raise ValueError("this cs operator cannot run as a fleet (see fleet_eligible)")
        self.template = template
        self._field = template.field
        self._plain = "." not in template.field
        # The values the short paths take: within [lower, upper] for hoeffding, and within
        # the operator's max_abs always (anything else goes the checked way).
        limit = float(template.max_abs)
        lo, hi = -limit, limit
        if template.cs == "hoeffding":
            lo, hi = max(lo, float(template.lower)), min(hi, float(template.upper))
        self._lo, self._hi = lo, hi
        self._locate = template.locate_kind == "cs"
        det = ConfSeqDetector(**template._detector_params())
        self._det_state = det.state_dict()  # a fresh detector's: the layout of a key's state
        self._det_encoded: dict | None = None  # its entries encoded (slot_state_encoded)
        self._grid = det._grid
        self._burn_cfg = det._burn_cfg.copy()
        self._scal0 = det._scalars[:C_WALK].copy()  # S_SEEN: the record count (C_COUNT)
        self._n_burn = det._burn.shape[0]
        # A reader for a new key (shape not fixed) and one for a scalar key.
        self._probe_new = template.clone()
        self._probe = template.clone()
        self._probe._shape = []
        self._scratch: ConfSeqDetector | None = None  # reads restored key states (load_key)
        self._reset()

    def _reset(self) -> None:
        self._slot: dict[Any, int] = {}
        self._slot_keys: list = []  # the key of each slot (evict moves the last slot)
        self._objs: dict[Any, Operator] = {}  # keys with vector values
        self._n = 0
        self._alloc(16)
        # Burn-in rows (see fleet_hull_run): only keys in burn-in hold one.
        self._set_burn(np.zeros((0, self._n_burn)), np.zeros(0, dtype=np.int64))
        self._grow_burn(_MIN_BURN_ROWS)
        self._pool_x = np.zeros(1024, dtype=np.int32)  # record indices: widened if ever large
        self._pool_yt = _yt(1024)  # walk value and ts of each point, side by side
        # Pool points used; of them in live blocks; the free lists' heads (fleet_hull_run).
        self._pmeta = np.full(2 + N_CLASSES, -1, dtype=np.int64)
        self._pmeta[:2] = 0
        self._fed = 0  # values run, an upper bound of any key's record index
        self.compactions = 0  # times the pool was compacted (for tests and diagnostics)

    def _alloc(self, capacity: int) -> None:
        """Rows for ``capacity`` slots (the first ``_n`` copied): a float64 row and an int32
        row per key (the kernel's ``C_*`` and ``X_*`` columns), and views of their columns."""
        old = getattr(self, "_st", None)
        n = self._n
        st = np.full((capacity, C_ROW), np.nan)
        ix = np.zeros((capacity, X_ROW), dtype=np.int32)
        ix[:, X_BROW] = -1
        if old is not None:
            st[:n] = old[:n]
            ix[:n] = self._ix[:n]
        self._st, self._ix = st, ix
        self._st32 = st.view(np.float32)
        self._scal = st[:, :C_WALK]
        self._walk = st[:, C_WALK:C_WALK + 2]
        self._sup_r = st[:, C_SUPR:C_SUPR + 2]
        self._count = st[:, C_COUNT]
        self._off = ix[:, X_OFF:X_OFF + 2]
        self._cap = ix[:, X_CAP:X_CAP + 2]
        self._size = ix[:, X_SIZE:X_SIZE + 2]
        self._brow = ix[:, X_BROW]

    def _new_slot(self, key: Any) -> int:
        k = self._n
        if k == self._scal.shape[0]:
            self._alloc(k + max(16, k // 4))  # a quarter more: less slack than doubling
        self._scal[k] = self._scal0
        self._walk[k] = 0.0
        self._count[k] = 0.0
        self._n = k + 1
        self._slot[key] = k
        self._slot_keys.append(key)
        return k

    # ---- burn-in rows ----------------------------------------------------------------

    def _set_burn(self, burn: np.ndarray, free: np.ndarray) -> None:
        """The burn-in table ``burn`` with the rows ``free`` free (the last taken first)."""
        bfree = np.zeros(burn.shape[0] + 1, dtype=np.int64)
        bfree[0] = len(free)
        bfree[1:len(free) + 1] = free
        self._burn, self._bfree = burn, bfree

    def _grow_burn(self, rows: int) -> None:
        """Make the burn-in table ``rows`` rows long (rows in use keep their index)."""
        old = self._burn.shape[0]
        burn = np.zeros((rows, self._n_burn))
        burn[:old] = self._burn
        self._set_burn(burn, np.r_[self._bfree[1:int(self._bfree[0]) + 1],
                                   np.arange(rows - 1, old - 1, -1)])

    def _shrink_burn(self) -> None:
        """When three quarters of the burn-in rows are free, renumber the rows in use from 0
        and keep twice as many rows as they are (at least ``_MIN_BURN_ROWS``)."""
        rows = self._burn.shape[0]
        if rows <= _MIN_BURN_ROWS or 4 * int(self._bfree[0]) < 3 * rows:
            return
        owners = np.flatnonzero(self._brow[:self._n] >= 0)
        live = self._brow[owners]
        keep = max(_MIN_BURN_ROWS, 2 * len(owners))
        burn = np.zeros((keep, self._n_burn))
        burn[:len(owners)] = self._burn[live]
        self._brow[owners] = np.arange(len(owners), dtype=np.int32)
        self._set_burn(burn, np.arange(keep - 1, len(owners) - 1, -1))

    # ---- the hull pool ---------------------------------------------------------------

    @property
    def _pool_used(self) -> int:
        return int(self._pmeta[0])

    @property
    def _pool_live(self) -> int:
        return int(self._pmeta[1])

    def _make_room(self, points: int) -> None:
        """``points`` free at the pool's tail: compact it if a sixteenth or more of it is
        blocks left behind by growth (free or not), else (or if still short) make it an
        eighth longer (not more: the unused tail is memory every key pays)."""
        if self._pool_used + points <= self._pool_x.shape[0]:
            return
        if 16 * (self._pool_used - self._pool_live) >= self._pool_x.shape[0]:
            self._compact(points)
        if self._pool_used + points > self._pool_x.shape[0]:
            self._resize_pool(max(self._pool_x.shape[0] * 9 // 8, self._pool_used + points))

    def _grow_block(self, k: int, s: int) -> None:
        """Give (slot ``k``, side ``s``) a larger block (:func:`grown_cap`), as the kernel
        does for a full block."""
        old_cap = int(self._cap[k, s])
        new_cap = int(grown_cap(old_cap))
        self._make_room(new_cap)
        o, h, new = int(self._off[k, s]), int(self._size[k, s]), self._pool_used
        for arr in (self._pool_x, self._pool_yt):
            arr[new:new + h] = arr[o:o + h]
        self._off[k, s] = new
        self._cap[k, s] = new_cap
        self._pmeta[0] += new_cap
        self._pmeta[1] += new_cap - old_cap

    def _resize_pool(self, length: int, x_dtype: Any = None) -> None:
        if length >= 2**31:  # (about 40 GB of hull points: block offsets are int32)
            raise MemoryError("the cs fleet's hull pool would pass 2**31 points")
        used = self._pool_used
        px = np.empty(length, dtype=x_dtype or self._pool_x.dtype)
        px[:used] = self._pool_x[:used]
        yt = _yt(length)
        yt[:used] = self._pool_yt[:used]
        self._pool_x, self._pool_yt = px, yt

    def _compact(self, points: int = 0) -> None:
        """Move every live block to the front of the pool, trimmed to the least block size
        (``_CLASS_CAPS``) that holds its hull's points and two more (what growth left behind,
        and the slack of hulls that shrank, freed); the pool then has an eighth (and
        ``points``) more than that, and no free blocks."""
        n = self._n
        size, cap = self._size[:n], self._cap[:n]
        need = size.astype(np.int64) + 2
        fits = np.where(need <= _CLASS_CAPS[-1],
                        _CLASS_CAPS[np.minimum(np.searchsorted(_CLASS_CAPS, need),
                                               len(_CLASS_CAPS) - 1)], need)
        new_cap = np.where(cap > 0, np.minimum(cap, fits), 0).astype(np.int32)
        used = int(new_cap.sum())
        length = max(1024, used + max(used // 8, points))
        px = np.empty(length, dtype=self._pool_x.dtype)
        yt = _yt(length)
        fleet_compact(n, self._ix, new_cap, self._pool_x, self._pool_yt, px, yt)
        self._pool_x, self._pool_yt = px, yt
        self._pmeta[:2] = used
        self._pmeta[2:] = -1
        self.compactions += 1

    def _widen_x(self, most: float) -> None:
        """Record indices up to ``most`` to come: beyond int32, the pool's x becomes float64
        (once; the arithmetic is the same)."""
        if self._pool_x.dtype == np.int32 and most > _X32:
            self._resize_pool(self._pool_x.shape[0], np.float64)

    # ---- processing ------------------------------------------------------------------

    def _run(self, slots: np.ndarray, xs: np.ndarray, ts: np.ndarray) -> np.ndarray:
        out = np.empty((F_ROWS, xs.shape[0]))
        self._fed += xs.shape[0]
        if self._fed > _X32 and self._pool_x.dtype == np.int32:  # some key may get there
            self._widen_x(float(self._scal[:self._n, S_N].max()) + xs.shape[0])
        done = 0
        while done < xs.shape[0]:
            done = fleet_hull_run(slots, xs, ts, done, self._grid, self._st, self._st32,
                                  self._ix, self._burn, self._bfree, self._pool_x,
                                  self._pool_yt, self._pmeta, out, self._burn_cfg)
            if done < xs.shape[0]:
                k = int(slots[done])
                if (self._scal[k, S_NBURN] < self._scal[k, S_BURN] and self._brow[k] < 0
                        and self._bfree[0] == 0):
                    self._grow_burn(self._burn.shape[0] * 2)
                else:  # a full block, and no room at the pool's tail for a larger one
                    self._make_room(2 * int(grown_cap(int(self._cap[k].max()))))
        self._shrink_burn()
        return out

    def process(self, record: Mapping, owner: Any) -> list[dict]:
        """:meth:`process_batch` of one record; a bad one raises BadInput, as an operator's
        ``process`` does."""
        res = self.process_batch([record], owner)
        if len(res) == 1 and isinstance(res[0], DeadLetter):
            raise BadInput(res[0].reason)
        return res

    def process_batch(self, records: Iterable[Mapping], owner: Any) -> list:
        """One output or dead letter per record, in input order (``owner``, the
        :class:`Keyed`, makes the dead letters of unusable keys).

        The common record (a dict whose key has a slot and whose field is a finite float)
        takes a short path; every other record goes through :meth:`_special`, which gives
        the same result as the key's own operator would.
        """
        records = records if isinstance(records, list) else list(records)
        if records:
            outs = self._fast_batch(records)
            if outs is not None:
                return outs
        slot_of = self._slot
        field = self._field
        lo, hi = self._lo, self._hi
        plain = self._plain
        slots: list[int] = []
        values: list[float] = []
        tss: list[float] = []
        fed: list[int] = []  # indices of the records the kernel gets
        special: dict[int, Any] = {}  # index -> its result (output or dead letter)
        nan = math.nan
        for idx, record in enumerate(records):
            if type(record) is dict and plain:
                try:
                    k = slot_of.get(record.get("key"))
                except TypeError:  # an unhashable key
                    k = None
                if k is not None:
                    v = record.get(field)
                    if type(v) is float and lo <= v <= hi:  # (NaN fails too)
                        t = record.get("ts")
                        slots.append(k)
                        values.append(v)
                        if type(t) is not float:
                            t = numeric_ts(record)
                            t = nan if t is None else t
                        tss.append(t)
                        fed.append(idx)
                        continue
            got = self._special(record, owner)
            if type(got) is tuple:  # a value for the kernel
                slots.append(got[0])
                values.append(got[1])
                t = numeric_ts(record)
                tss.append(nan if t is None else t)
                fed.append(idx)
            else:
                special[idx] = got
        outs = self._outputs(records, fed, slots, values, tss) if fed else []
        if not special:
            return outs
        result: list = []
        it = iter(outs)
        for idx in range(len(records)):
            got = special.get(idx, _NONE)
            result.append(next(it) if got is _NONE else got)
        return result

    def _fast_batch(self, records: list) -> list[dict] | None:
        """The whole batch column-wise, when it is the common case: dicts of known keys with
        finite float values and float (or no) ``ts``, the same passthrough fields in every
        record. None otherwise (nothing changed; the per-record path takes over)."""
        if not self._plain or set(map(type, records)) != {dict}:
            return None
        fields = set().union(*records)  # every field name of the batch, at C speed
        field = self._field
        if "y" in fields or "task" in fields or "key" not in fields or field not in fields:
            return None
        has_ts = "ts" in fields
        has_off = "offset" in fields
        try:  # the columns; a record without a field others have: KeyError
            keys = [r["key"] for r in records]
            values = [r[field] for r in records]
            tl = [r["ts"] for r in records] if has_ts else []
            offs = [r["offset"] for r in records] if has_off else []
        except KeyError:
            return None
        try:  # itemgetter: the lookups in one C call, a KeyError at a new key
            got = itemgetter(*keys)(self._slot)
        except (KeyError, TypeError):  # a new key, an unhashable one
            return None
        slots = _packed("q", got if len(keys) > 1 else [got], np.int64)
        if set(map(type, values)) != {float}:
            return None
        xs = _packed("d", values, np.float64)
        if not ((xs >= self._lo).all() and (xs <= self._hi).all()):  # (NaN fails too)
            return None
        if not has_ts:
            ts = np.full(len(records), math.nan)
        elif set(map(type, tl)) == {float}:
            ts = _packed("d", tl, np.float64)
        else:
            ts = np.array([math.nan if t is None else t for t in map(numeric_ts, records)])
        out = self._run(slots, xs, ts)
        alarm = (out[F_ALARM] != 0.0).tolist()
        if np.isfinite(out[F_LOWER:F_UPPER + 1]).all():  # (None only while unbounded)
            lw, up = out[F_LOWER].tolist(), out[F_UPPER].tolist()
        else:
            lower = out[F_LOWER].astype(object)
            lower[~np.isfinite(out[F_LOWER])] = None
            upper = out[F_UPPER].astype(object)
            upper[~np.isfinite(out[F_UPPER])] = None
            lw, up = lower.tolist(), upper.tolist()
        if has_ts and has_off:
            res = [{"key": k, "ts": t, "offset": o, "alarm": a, "lower": b, "upper": c}
                   for k, t, o, a, b, c in zip(keys, tl, offs, alarm, lw, up, strict=True)]
        elif has_ts:
            res = [{"key": k, "ts": t, "alarm": a, "lower": b, "upper": c}
                   for k, t, a, b, c in zip(keys, tl, alarm, lw, up, strict=True)]
        elif has_off:
            res = [{"key": k, "offset": o, "alarm": a, "lower": b, "upper": c}
                   for k, o, a, b, c in zip(keys, offs, alarm, lw, up, strict=True)]
        else:
            res = [{"key": k, "alarm": a, "lower": b, "upper": c}
                   for k, a, b, c in zip(keys, alarm, lw, up, strict=True)]
        if self._locate:
            for i in np.flatnonzero(out[F_ALARM] != 0.0).tolist():
                o = res[i]
                o["change_at"] = int(out[F_AT, i])
                t = float(out[F_TS, i])
                if t == t:
                    o["change_ts"] = t
        return res

    def _special(self, record: Any, owner: Any) -> Any:
        """A record off the short path: ``(slot, value)`` for the kernel, or its result."""
        key = record.get("key") if isinstance(record, Mapping) else None
        if type(key) is list:
            key = Keyed.normalize_key(key)
        try:
            k = self._slot.get(key)
            obj = self._objs.get(key) if k is None else None
        except TypeError:
            return owner._dead_letter(record, BadInput(BAD_KEY_REASON))
        if obj is not None:
            return obj.process_batch([record])[0]
        try:
            shape, arr = (self._probe if k is not None else self._probe_new)._read(record)
        except BadInput as exc:
            return self.template._dead_letter(record, exc)
        if shape:  # a vector as this new key's first value: an operator of its own
            obj = self._objs[key] = self.template.clone()
            return obj.process_batch([record])[0]
        if k is None:
            k = self._new_slot(key)
        return (k, float(arr[0]))

    def _outputs(self, records: list, fed: list[int], slots: list[int], values: list[float],
                 tss: list[float]) -> list[dict]:
        out = self._run(np.array(slots, dtype=np.int64), np.array(values, dtype=np.float64),
                        np.array(tss, dtype=np.float64))
        alarm, lower, upper = out[F_ALARM].tolist(), out[F_LOWER].tolist(), out[F_UPPER].tolist()
        at, ats = out[F_AT].tolist(), out[F_TS].tolist()
        locate = self._locate
        inf = math.inf
        output = self.template._output  # the passthrough fields, as every operator's
        result: list[dict] = []
        for i, idx in enumerate(fed):
            lw = lower[i]
            up = upper[i]
            a = alarm[i] != 0.0
            o = output(records[idx], alarm=a, lower=lw if -inf < lw < inf else None,
                       upper=up if -inf < up < inf else None)
            if a and locate:
                o["change_at"] = int(at[i])
                t = ats[i]
                if t == t:
                    o["change_ts"] = t
            result.append(o)
        return result

    # ---- keys and state --------------------------------------------------------------

    def __len__(self) -> int:
        return self._n + len(self._objs)

    @property
    def keys(self) -> list:
        return list(self._slot) + list(self._objs)

    def existing(self, key: Any) -> Any:
        k = self._slot.get(key)
        if k is not None:
            return _SlotView(self, k)
        return self._objs.get(key)

    def evict(self, key: Any) -> bool:
        """Forget ``key``: its slot gets the last slot's rows (so slots stay dense), its
        burn-in row goes back, its hull blocks become garbage the next compaction reclaims."""
        if self._objs.pop(key, None) is not None:
            return True
        k = self._slot.pop(key, None)
        if k is None:
            return False
        if self._brow[k] >= 0:
            return_burn_row(self._ix, k, self._bfree)
        self._pmeta[1] -= int(self._cap[k].sum())
        last = self._n - 1
        if k != last:
            self._st[k] = self._st[last]
            self._ix[k] = self._ix[last]
            moved = self._slot_keys[last]
            self._slot[moved] = k
            self._slot_keys[k] = moved
        self._slot_keys.pop()
        self._st[last] = np.nan
        self._ix[last] = 0
        self._ix[last, X_BROW] = -1
        self._n = last
        return True

    def evict_many(self, keys: list) -> list:
        """Forget ``keys`` at once (what :meth:`evict` does for each, in array operations:
        the remaining slots keep their order); returns the keys that were there."""
        gone, slots = [], []
        for key in keys:
            if self._objs.pop(key, None) is not None:
                gone.append(key)
                continue
            k = self._slot.pop(key, None)
            if k is not None:
                gone.append(key)
                slots.append(k)
        if not slots:
            return gone
        n = self._n
        idx = np.asarray(slots, dtype=np.int64)
        brows = self._brow[idx]
        back = brows[brows >= 0].astype(np.int64)
        if len(back):  # their burn-in rows go back on the free stack
            nf = int(self._bfree[0])
            self._bfree[nf + 1:nf + 1 + len(back)] = back
            self._bfree[0] = nf + len(back)
        self._pmeta[1] -= int(self._cap[idx].sum())
        keep = np.ones(n, dtype=bool)
        keep[idx] = False
        m = n - len(idx)
        self._st[:m] = self._st[:n][keep]
        self._ix[:m] = self._ix[:n][keep]
        self._st[m:n] = np.nan
        self._ix[m:n] = 0
        self._ix[m:n, X_BROW] = -1
        self._slot_keys = [k for k, kept in zip(self._slot_keys, keep.tolist(), strict=True)
                           if kept]
        first = int(idx.min())
        slot = self._slot
        for j in range(first, m):  # the slots after the first one removed moved down
            slot[self._slot_keys[j]] = j
        self._n = m
        return gone

    def object_for(self, key: Any) -> Any:
        """The operator object of a key without a slot (created when new)."""
        obj = self._objs.get(key)
        if obj is None:
            obj = self._objs[key] = self.template.clone()
        return obj

    def _slot_entries(self, k: int) -> dict:
        """The detector state entries slot ``k`` fills in (new arrays); the others are a
        fresh detector's (``_det_state``)."""
        fresh = self._det_state
        scal = np.r_[self._scal[k], self._count[k]]  # S_SEEN: the key's record count
        b = int(self._brow[k])  # past the burn-in its values are unused: zeros stand in
        burn = self._burn[b].copy() if b >= 0 else np.zeros(self._n_burn)
        h = self._size[k]
        cap = max(_STATE_CAP, int(self._cap[k].max()))
        hx, hy, ht = np.zeros((2, 1, cap)), np.zeros((2, 1, cap)), np.full((2, 1, cap), np.nan)
        for s in range(2):
            o, n = int(self._off[k, s]), int(h[s])
            hx[s, 0, :n] = self._pool_x[o:o + n]
            hy[s, 0, :n] = self._pool_yt[o:o + n, 0]
            ht[s, 0, :n] = self._pool_yt[o:o + n, 1]
        hull_size = fresh["_hull_size"].copy()
        hull_size[:, 0] = h
        walk = fresh["_walk"].copy()
        walk[:, 0] = self._walk[k]
        # The detector's last output, which the slot does not keep: it follows from the state.
        last = fresh["_last"].copy()
        last[1] = scal[S_CENTER] + scal[S_SCALE] * scal[S_LOWER]
        last[2] = scal[S_CENTER] + scal[S_SCALE] * scal[S_UPPER]
        if scal[S_ALARM] != 0.0:
            later = S_ARGLO if scal[S_ARGLO] >= scal[S_ARGHI] else S_ARGHI
            last[0] = 1.0
            last[3] = scal[S_N] - 1.0 - scal[later]
            last[4] = scal[S_TSLO if later == S_ARGLO else S_TSHI]
        return {"_scalars": scal, "_burn": burn, "_hull_x": hx, "_hull_y": hy, "_hull_t": ht,
                "_hull_size": hull_size, "_walk": walk, "_last": last}

    def _key_state(self, k: int, det: dict) -> dict:
        return {"operator": self.template.name,
                "state": {"shape": [], "detectors": [det], "count": int(self._count[k]),
                          "window": None}}

    def slot_state(self, k: int) -> dict:
        """Slot ``k``'s state as :meth:`ConfSeqOperator.state_dict` gives it."""
        filled = self._slot_entries(k)
        return self._key_state(k, {name: filled[name] if name in filled else arr.copy()
                                   for name, arr in self._det_state.items()})

    def slot_state_encoded(self, k: int) -> dict:
        """``encode_state(slot_state(k))``, the entries a slot does not fill in encoded once
        (what a checkpoint writes for every changed key)."""
        filled = self._slot_entries(k)
        fixed = self._det_encoded
        if fixed is None:
            fixed = self._det_encoded = {name: encode_state(arr)
                                         for name, arr in self._det_state.items()}
        return self._key_state(k, {name: encode_state(filled[name]) if name in filled
                                   else fixed[name] for name in self._det_state})

    def load_key(self, key: Any, state: Mapping) -> None:
        """Restore one key from a per-key ``state_dict`` (of a fleet or an operator)."""
        scalar = self._scalar_state(state)
        if scalar is not None:
            # the common case (a scalar key without a locate window): its one detector's
            # state read into a scratch detector (the same checks and upgrades as the
            # operator's), then copied into the fleet's arrays; no operator object is made
            doc, count = scalar
            det = self._scratch
            if det is None:
                params = self.template._detector_params()
                params["alpha"] = float(self.template.alpha)
                det = self._scratch = ConfSeqDetector(**params)
            det._load_arrays(doc)  # (not packed for the kernel: only copied out)
            self._put(key, det, count)
            return
        op = self.template.clone()
        op.load_state_dict(state)  # validates, and upgrades states of earlier releases
        if op._shape is None or op._shape:  # no value yet, or vectors: an object of its own
            self._objs[key] = op
            return
        self._put(key, op._detectors[0], op._count)

    def _scalar_state(self, state: Mapping) -> tuple[Mapping, int] | None:
        """(detector state, count) of a scalar key's state that holds no window, else None
        (the operator then reads it: vectors, no value yet, a window, bad states)."""
        try:
            inner = self.template._state_payload(state)
        except ValueError:
            return None
        docs = inner.get("detectors")
        if (inner.get("shape") != [] or inner.get("window") is not None
                or self.template._needs_window() or not isinstance(docs, list)
                or len(docs) != 1 or not isinstance(docs[0], Mapping)):
            return None
        count = inner.get("count", 0)
        if isinstance(count, bool) or not isinstance(count, (int, float)):
            return None
        return docs[0], int(count)

    def _put(self, key: Any, det: ConfSeqDetector, count: int) -> None:
        """Copy a scalar key's detector state into the fleet's arrays."""
        k = self._slot.get(key)
        if k is None:
            k = self._new_slot(key)
        self._scal[k] = det._scalars[:C_WALK]
        b = int(self._brow[k])
        if det._scalars[S_NBURN] < det._scalars[S_BURN]:  # in its burn-in: a row
            if b < 0:
                if self._bfree[0] == 0:
                    self._grow_burn(self._burn.shape[0] * 2)
                b = int(take_burn_row(self._ix, k, self._bfree))
            self._burn[b] = det._burn
        elif b >= 0:  # (a key restored over one in burn-in) the row goes back
            return_burn_row(self._ix, k, self._bfree)
        self._walk[k] = det._walk[:, 0]
        self._count[k] = count
        self._sup_r[k] = np.nan  # the skip filter's minima are computed again
        self._widen_x(float(det._scalars[S_N]))
        for s in range(2):
            h = int(det._hull_size[s, 0])
            self._size[k, s] = 0
            while self._cap[k, s] <= h:
                self._grow_block(k, s)
            o = int(self._off[k, s])
            self._pool_x[o:o + h] = det._hull_x[s, 0, :h]
            self._pool_yt[o:o + h, 0] = det._hull_y[s, 0, :h]
            self._pool_yt[o:o + h, 1] = det._hull_t[s, 0, :h]
            self._size[k, s] = h

    def clear(self) -> None:
        self._reset()

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (slots allocated, and the whole pool)."""
        arrays = (self._st, self._ix, self._burn, self._bfree, self._pool_x, self._pool_yt)
        return int(sum(a.nbytes for a in arrays))


class _SlotView:
    """One key of a fleet, as far as checkpoints need it: its ``state_dict``."""

    __slots__ = ("_fleet", "_k")

    def __init__(self, fleet: ConfSeqFleet, k: int):
        self._fleet = fleet
        self._k = k

    def state_dict(self) -> dict:
        return self._fleet.slot_state(self._k)

    def encoded_state(self) -> dict:
        """``encode_state(state_dict())``, faster (see :meth:`ConfSeqFleet.slot_state_encoded`)."""
        return self._fleet.slot_state_encoded(self._k)
