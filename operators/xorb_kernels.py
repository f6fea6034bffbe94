"""Numba kernels of the ``xorb`` state patch (:mod:`shiftwatch.operators.state_codec`).

The sparse XOR of two byte strings, as 8-byte words: a nonzero-word bitmap, one
nonzero-byte bitmap per nonzero word, then the nonzero bytes (bitmaps most significant bit
first, as ``numpy.packbits``). In NumPy it is eight array operations, about 15 us on the 760
bytes of an ADWIN helper on the benchmark machine, mostly per-call overhead; one pass here.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["xorb_encode", "xorb_decode"]


@njit(cache=True)
def xorb_encode(old: np.ndarray, new: np.ndarray) -> np.ndarray:  # pragma: no cover - jit
    """The raw (not base64) ``xorb`` data turning ``old`` into ``new`` (uint8 arrays;
    ``old`` is cut or padded with zeros to ``len(new)``)."""
    n = new.shape[0]
    nw = (n + 7) // 8
    head = (nw + 7) // 8
    out = np.zeros(head + nw + nw * 8, dtype=np.uint8)
    no = old.shape[0]
    k = 0
    nb = 0
    vals = np.empty(nw * 8, dtype=np.uint8)
    for w in range(nw):
        mask = 0
        for j in range(8):
            i = w * 8 + j
            a = old[i] if i < no else 0
            b = new[i] if i < n else 0
            x = a ^ b
            if x != 0:
                mask |= 0x80 >> j
                vals[nb] = x
                nb += 1
        if mask != 0:
            out[w >> 3] |= 0x80 >> (w & 7)
            out[head + k] = mask
            k += 1
    out[head + k:head + k + nb] = vals[:nb]
    return out[:head + k + nb]


@njit(cache=True)
def xorb_decode(old: np.ndarray, data: np.ndarray, n: int) -> np.ndarray:  # pragma: no cover
    """``old`` (cut or padded with zeros to ``n``) XOR the change ``data`` describes; an
    empty array of length 0 with ``n > 0`` never happens, errors come back as a result of
    length ``n + 1`` (the caller raises)."""
    nw = (n + 7) // 8
    head = (nw + 7) // 8
    bad = np.zeros(n + 1, dtype=np.uint8)
    if data.shape[0] < head:
        return bad
    out = np.zeros(nw * 8, dtype=np.uint8)
    no = old.shape[0]
    for i in range(min(no, n)):
        out[i] = old[i]
    k = 0
    for w in range(nw):
        if data[w >> 3] & (0x80 >> (w & 7)):
            k += 1
    pos = head + k
    if data.shape[0] < pos:
        return bad
    r = 0
    for w in range(nw):
        if data[w >> 3] & (0x80 >> (w & 7)):
            mask = data[head + r]
            r += 1
            for j in range(8):
                if mask & (0x80 >> j):
                    if pos >= data.shape[0]:
                        return bad
                    out[w * 8 + j] ^= data[pos]
                    pos += 1
    if pos != data.shape[0]:
        return bad
    # bits past the end (in the word bitmap's last byte, or bytes of the last word beyond
    # n) must be zero: the encoder never sets them
    for w in range(nw, head * 8):
        if data[w >> 3] & (0x80 >> (w & 7)):
            return bad
    for i in range(n, nw * 8):
        if out[i] != 0:
            return bad
    return out[:n]
