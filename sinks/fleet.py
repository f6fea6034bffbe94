"""Every key's positions, alarms and located changes, computed at once from the columns the
evaluation sink keeps (:class:`~shiftwatch.sinks.evaluation.EvaluationSink`).

Positions are 0-based positions in each key's own series. An output's position is the
position of the first input of the same key and offset; a key without inputs counts its
outputs (outputs sharing an offset share a position). A detector's ``change_at = j`` is the
position of the key's ``j``-th detector output (one per record the detector accepted), unless
the sink's ``change_at_positions`` says a replay runner already mapped it to a position.
Everything is computed with NumPy over the whole run, so a million keys cost seconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Fleet", "NO_OFFSET"]

#: The offset of an output or input that has none: matches nothing.
NO_OFFSET = -(2**62)


def _by_key(keys: np.ndarray, n_keys: int) -> np.ndarray:
    """The stable order of ``keys`` (key ids below ``n_keys``): NumPy sorts 16-bit integers
    by radix, several times faster than int64, in the same order."""
    if n_keys <= 1 << 16 and len(keys):
        keys = keys.astype(np.uint16)
    return np.argsort(keys, kind="stable")

def _groups(keys: np.ndarray, n_keys: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows grouped by key (stable), and each key's first index and count in that order."""
    order = _by_key(keys, n_keys)
    count = np.bincount(keys, minlength=n_keys) if len(keys) else np.zeros(n_keys, np.int64)
    start = np.zeros(n_keys, dtype=np.int64)
    np.cumsum(count[:-1], out=start[1:])
    return order, start, count

def _pairs(keys: np.ndarray, values: np.ndarray, n_keys: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (key, value) pairs sorted, and each key's first index and count."""
    if len(keys) == 0:
        return values[:0], np.zeros(n_keys, np.int64), np.zeros(n_keys, np.int64)
    order = np.lexsort((values, keys))
    k, v = keys[order], values[order]
    keep = np.ones(len(k), dtype=bool)
    keep[1:] = (k[1:] != k[:-1]) | (v[1:] != v[:-1])
    k, v = k[keep], v[keep]
    count = np.bincount(k, minlength=n_keys)
    start = np.zeros(n_keys, dtype=np.int64)
    np.cumsum(count[:-1], out=start[1:])
    return v, start, count

class Fleet:
    """Every key's positions, alarms and located changes, computed at once from the columns."""

    def __init__(self, sink: Any):
        """``sink``: the evaluation sink whose columns it reads."""
        n_keys = len(sink._keys)
        self.n_keys = n_keys
        in_key = np.frombuffer(sink._in_key, dtype=np.int64) if sink._in_key else np.zeros(
            0, np.int64)
        in_off = np.frombuffer(sink._in_off, dtype=np.int64) if sink._in_off else in_key[:0]
        out_key = np.frombuffer(sink._out_key, dtype=np.int64) if sink._out_key else in_key[:0]
        out_off = np.frombuffer(sink._out_off, dtype=np.int64) if sink._out_off else in_key[:0]
        self.in_ts = np.frombuffer(sink._in_ts, dtype=np.float64) if sink._in_ts else np.zeros(0)
        self.in_val = np.frombuffer(sink._in_val, dtype=np.float64) if sink._in_val \
            else np.zeros(0)
        self.alarm = np.frombuffer(sink._out_alarm, dtype=np.int8) if sink._out_alarm \
            else np.zeros(0, np.int8)
        self.change_at = np.frombuffer(sink._out_change_at, dtype=np.int64) \
            if sink._out_change_at else in_key[:0]
        self.stats = {f: np.frombuffer(col, dtype=np.float64) if col else np.zeros(0)
                      for f, col in sink._out_stats.items()}
        self.out_key = out_key

        # Inputs: each one's position in its key's series.
        self.in_order, self.in_start, self.n_in = _groups(in_key, n_keys)
        in_pos = np.empty(len(in_key), dtype=np.int64)
        in_pos[self.in_order] = np.arange(len(in_key)) - np.repeat(self.in_start, self.n_in)
        # Outputs: the position of the first input of the same key and offset.
        # One output per input, in the same order, with distinct offsets (a detector's run):
        # each output's input is the one in its row.
        same_rows = len(in_key) == len(out_key) and np.array_equal(in_key, out_key)
        out_pos = np.full(len(out_key), -1, dtype=np.int64)
        if same_rows and len(in_off) and np.array_equal(in_off, out_off) \
                and in_off[0] != NO_OFFSET and bool(np.all(in_off[1:] > in_off[:-1])):
            out_pos = in_pos
        elif len(in_key) and len(out_key):
            out_pos = self._match(in_key, in_off, in_pos, out_key, out_off, n_keys)
        # Keys without inputs: count their outputs (outputs sharing an offset share one).
        if same_rows:
            self.out_order, self.out_start, self.n_out = self.in_order, self.in_start, self.n_in
        else:
            self.out_order, self.out_start, self.n_out = _groups(out_key, n_keys)
        self.n = self.n_in.copy()
        blind = self.n_in[out_key] == 0 if len(out_key) else np.zeros(0, bool)
        if blind.any():
            ko, oo = out_key[self.out_order], out_off[self.out_order]
            step = np.ones(len(ko), dtype=np.int64)
            step[1:] = (ko[1:] != ko[:-1]) | (oo[1:] != oo[:-1]) | (oo[1:] == NO_OFFSET)
            first = np.ones(len(ko), dtype=bool)
            first[1:] = ko[1:] != ko[:-1]
            run = np.cumsum(step)
            base = np.repeat(run[first] - 1, self.n_out[self.n_out > 0])
            counted = run - base - 1
            sel = blind[self.out_order]
            out_pos[self.out_order[sel]] = counted[sel]
            last = np.zeros(n_keys, dtype=np.int64)
            np.maximum.at(last, ko[sel], counted[sel] + 1)
            self.n = np.where(self.n_in > 0, self.n_in, last)
        self.out_pos = out_pos
        has_in = self.n_in[out_key] > 0 if len(out_key) else np.zeros(0, bool)
        self.unmatched = np.bincount(out_key[has_in & (out_pos < 0)], minlength=n_keys) \
            if len(out_key) else np.zeros(n_keys, np.int64)

        # Detectors: alarms, and change_at mapped through the key's detector outputs.
        det = self.alarm >= 0
        self.has_detector = np.bincount(out_key[det], minlength=n_keys) > 0 if len(out_key) \
            else np.zeros(n_keys, bool)
        hit = (self.alarm == 1) & (out_pos >= 0)
        self.alarms, self.a_start, self.a_count = _pairs(out_key[hit], out_pos[hit], n_keys)
        if det.all():  # every output: already grouped by key
            det_rows = self.out_order
        else:
            det_rows = np.flatnonzero(det)  # arrival order; grouped by key below
            det_rows = det_rows[_by_key(out_key[det_rows], n_keys)]
        d_count = np.bincount(out_key[det_rows], minlength=n_keys)
        d_start = np.zeros(n_keys, dtype=np.int64)
        np.cumsum(d_count[:-1], out=d_start[1:])
        self.locates = np.bincount(out_key[det & (self.change_at != -1)],
                                   minlength=n_keys) > 0
        if getattr(sink, "change_at_positions", False):
            # The runner already made change_at a position among the key's inputs
            # (deploy/positions.py); one it could not map came as None (-2 here).
            loc_rows = np.flatnonzero((self.alarm == 1) & (self.change_at != -1))
            lk, p = out_key[loc_rows], self.change_at[loc_rows].copy()
            p[p >= self.n[lk]] = -1
        else:
            # change_at = j: the position of the key's j-th detector output.
            loc_rows = np.flatnonzero((self.alarm == 1) & (self.change_at >= 0))
            lk, j = out_key[loc_rows], self.change_at[loc_rows]
            ok = j < d_count[lk]
            p = np.full(len(loc_rows), -1, dtype=np.int64)
            if ok.any():
                p[ok] = out_pos[det_rows[d_start[lk[ok]] + j[ok]]]
        self.unmatched_locations = np.bincount(lk[p < 0], minlength=n_keys)
        self.located, self.l_start, self.l_count = _pairs(lk[p >= 0], p[p >= 0], n_keys)

    @staticmethod
    def _match(in_key, in_off, in_pos, out_key, out_off, n_keys) -> np.ndarray:
        valid_in = in_off != NO_OFFSET
        offs = np.concatenate([in_off[valid_in], out_off[out_off != NO_OFFSET]])
        lo, hi = (int(offs.min()), int(offs.max())) if len(offs) else (0, 0)
        span = hi - lo + 1
        out_pos = np.full(len(out_key), -1, dtype=np.int64)
        if span * max(n_keys, 1) < 2**62:
            code_in = in_key[valid_in] * span + (in_off[valid_in] - lo)
            pos_in = in_pos[valid_in]
            order = np.argsort(code_in, kind="stable")
            codes, first = np.unique(code_in[order], return_index=True)
            valid_out = out_off != NO_OFFSET
            code_out = out_key[valid_out] * span + (out_off[valid_out] - lo)
            idx = np.searchsorted(codes, code_out)
            idx_c = np.minimum(idx, max(len(codes) - 1, 0))
            found = (idx < len(codes)) & (codes[idx_c] == code_out) if len(codes) else \
                np.zeros(len(code_out), bool)
            got = np.where(found, pos_in[order[first[idx_c]]] if len(codes) else -1, -1)
            out_pos[valid_out] = got
            return out_pos
        where: dict[tuple[int, int], int] = {}  # offsets too far apart for one int64 code
        for k, o, p in zip(in_key.tolist(), in_off.tolist(), in_pos.tolist(), strict=True):
            if o != NO_OFFSET:
                where.setdefault((k, o), p)
        for i, (k, o) in enumerate(zip(out_key.tolist(), out_off.tolist(), strict=True)):
            out_pos[i] = where.get((k, o), -1)
        return out_pos

    # ---- one key ------------------------------------------------------------------------

    def input_rows(self, k: int) -> np.ndarray:
        s = self.in_start[k]
        return self.in_order[s:s + self.n_in[k]]

    def output_rows(self, k: int) -> np.ndarray:
        s = self.out_start[k]
        return self.out_order[s:s + self.n_out[k]]

    def alarms_of(self, k: int) -> np.ndarray:
        s = self.a_start[k]
        return self.alarms[s:s + self.a_count[k]]

    def located_of(self, k: int) -> np.ndarray:
        s = self.l_start[k]
        return self.located[s:s + self.l_count[k]]

    def ts_at(self, k: int, positions: Any) -> np.ndarray:
        """The input ``ts`` at ``positions`` of key ``k`` (NaN where there is none)."""
        pos = np.asarray(positions, dtype=np.int64)
        if not pos.size:
            return np.zeros(0)
        out = np.full(pos.shape, np.nan)
        ok = (pos >= 0) & (pos < self.n_in[k])
        if ok.any() and len(self.in_ts):
            out[ok] = self.in_ts[self.in_order[self.in_start[k] + pos[ok]]]
        return out
