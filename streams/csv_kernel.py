"""A block of CSV lines scanned in one compiled pass: fields, plain numbers, key hashes.

:func:`scan_lines` reads the bytes of complete lines (each ending with ``\\n``) once and,
for each line, says whether it is plain (no quote, no NUL, no carriage return but the one of
a ``\\r\\n`` line end; exactly ``ncol`` fields; its ``ts`` and ``value`` cells short numbers of the
record path's grammar, :data:`~shiftwatch.streams.files._SHORT_NUMBER`), and for a plain
line gives the numbers and where its key cell lies, with a 64-bit FNV-1a hash of the key's
bytes. Every other line is left to the record path's own rule
(:mod:`~shiftwatch.streams.columns`). :func:`scan_vector_lines` does the same for a vector
value, several value cells a line (a separate kernel, so the scalar scan stays as it was).

A number is computed here only when the result is the double that Python's ``float`` gives
for the text: the decimal digits, leading zeros dropped, make an integer ``m`` below
``2**53`` and the decimal exponent ``e`` is within ``[-22, 22]``; ``m`` and ``10**|e|`` are
then exact doubles, and one IEEE multiplication or division (correctly rounded) gives the
correctly rounded value, which is what ``float`` gives (Clinger's fast path). Any other
short number is flagged and read by ``float`` in Python (:data:`PY_TS`, :data:`PY_VALUE`).
"""

from __future__ import annotations

import numpy as np

from shiftwatch._jit import njit

__all__ = ["scan_lines", "scan_vector_lines", "gather_cells", "same_key_bytes",
           "first_appearance",
           "key_lookup", "key_insert", "key_rehash", "PLAIN", "SLOW", "PY_TS", "PY_VALUE"]

#: A line's status bits: plain; left to the record path's rule; its ts / value cell is a
#: short number whose double ``float`` must give.
PLAIN, SLOW, PY_TS, PY_VALUE = 0, 1, 2, 4

_POW10 = np.array([10.0 ** k for k in range(23)])  # exact doubles 1e0 .. 1e22
_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)


@njit(cache=True)
def _number(buf, s, e, pow10):
    """The cell ``buf[s:e]``: (0 not a short number | 1 computed | 2 for ``float``, value)."""
    i = s
    neg = False
    if i < e and (buf[i] == 43 or buf[i] == 45):  # + -
        neg = buf[i] == 45
        i += 1
    if i >= e:
        return 0, 0.0
    m = np.uint64(0)
    sig = 0  # significant digits in m
    big = False  # more than 19 significant digits
    d0 = buf[i]
    if d0 == 48:  # "0": no digit may follow it in the integer part
        i += 1
        nint = 1
    elif 49 <= d0 <= 57:
        nint = 0
        while i < e and 48 <= buf[i] <= 57:
            nint += 1
            if sig < 19:
                m = m * np.uint64(10) + np.uint64(buf[i] - 48)
                sig += 1
            else:
                big = True
            i += 1
        if nint > 100:
            return 0, 0.0
    else:
        return 0, 0.0
    nfrac = 0
    if i < e and buf[i] == 46:  # .
        i += 1
        while i < e and 48 <= buf[i] <= 57:
            nfrac += 1
            d = buf[i] - 48
            if sig == 0 and d == 0:
                pass  # a leading zero of the fraction
            elif sig < 19:
                m = m * np.uint64(10) + np.uint64(d)
                sig += 1
            else:
                big = True
            i += 1
        if nfrac == 0 or nfrac > 99:
            return 0, 0.0
    exp = 0
    if i < e and (buf[i] == 101 or buf[i] == 69):  # e E
        i += 1
        eneg = False
        if i < e and (buf[i] == 43 or buf[i] == 45):
            eneg = buf[i] == 45
            i += 1
        ndig = 0
        while i < e and 48 <= buf[i] <= 57:
            if ndig < 9:
                exp = exp * 10 + (buf[i] - 48)
            ndig += 1
            i += 1
        if ndig == 0 or ndig > 9:
            return 0, 0.0
        if eneg:
            exp = -exp
    if i != e:
        return 0, 0.0
    if m == 0 and not big:
        return 1, -0.0 if neg else 0.0
    if big or m >= np.uint64(9007199254740992):  # 2**53
        return 2, 0.0
    k = exp - nfrac  # the value is m * 10**k (every digit is in m: not big)
    if k > 22 or k < -22:
        return 2, 0.0
    x = float(m)
    x = x * pow10[k] if k >= 0 else x / pow10[-k]
    return 1, -x if neg else x


@njit(cache=True)
def scan_lines(buf, delim, ncol, kpos, tpos, vpos, max_abs, pow10, crlf):
    """Scan the complete lines of ``buf`` (uint8; each ends with ``\\n``, or with
    ``\\r\\n`` when ``crlf``: every ``\\r`` is then followed by ``\\n``).

    Returns ``(starts, status, key_start, key_end, key_hash, ts, value)``: each line's first
    byte (``starts[n]`` is one past the last line's ``\\n``), its status bits, the byte span
    of its key cell and the key's hash (``kpos < 0``: none), its ts (``tpos < 0``: none) and
    value. A plain line with a value or ts beyond ``max_abs`` is left to the record path.
    Bytes above 127 (UTF-8, checked by the caller) may be in a key; a number holding one is
    not a short number. (:func:`scan_vector_lines` with a value of one cell.)
    """
    vslot = np.full(ncol, -1, np.int64)
    vslot[vpos] = 0
    starts, status, kst, ken, khash, ts, val, _, _, _ = scan_vector_lines(
        buf, delim, ncol, kpos, tpos, vslot, 1, max_abs, pow10, crlf)
    return starts, status, kst, ken, khash, ts, val[:, 0]


@njit(cache=True)
def scan_vector_lines(buf, delim, ncol, kpos, tpos, vslot, nv, max_abs, pow10, crlf):
    """Scan the complete lines of ``buf`` as :func:`scan_lines` does, for a value of ``nv``
    cells: ``vslot[field]`` (int64, one per field of ``ncol``) is the value's slot a field's
    number goes to, or -1 (no field is both a slot and ``kpos`` or ``tpos``). The value
    comes as a float64 array of shape ``(lines, nv)``; the value cells for ``float``
    (:data:`PY_VALUE`) are listed too: their byte spans and flat index ``line * nv + slot``
    in the value array, in three more int64 arrays (for :func:`gather_cells`)."""
    n = 0
    for j in range(buf.shape[0]):
        if buf[j] == 10:
            n += 1
    starts = np.empty(n + 1, np.int64)
    status = np.zeros(n, np.int8)
    kst = np.zeros(n, np.int64)
    ken = np.zeros(n, np.int64)
    khash = np.zeros(n, np.uint64)
    ts = np.zeros(n, np.float64)
    val = np.zeros((n, nv), np.float64)
    fst = np.empty(n * nv, np.int64)
    fen = np.empty(n * nv, np.int64)
    fat = np.empty(n * nv, np.int64)
    nf = 0
    i = 0
    for line in range(n):
        starts[line] = i
        field = 0
        fs = i
        bad = False
        while True:
            b = buf[i]
            e = i  # the cell's end (before the \r of a \r\n)
            if crlf and b == 13:  # the \r of \r\n: the line's end
                i += 1
                b = 10
            if b == 10 or b == delim:
                if field == kpos:
                    kst[line], ken[line] = fs, e
                    h = _FNV_OFFSET
                    for q in range(fs, e):
                        h = (h ^ np.uint64(buf[q])) * _FNV_PRIME
                    khash[line] = h
                elif field < ncol and (field == tpos or vslot[field] >= 0):
                    got, x = _number(buf, fs, e, pow10)
                    if got == 0 or (got == 1 and not abs(x) <= max_abs):
                        bad = True
                    elif field == tpos:
                        ts[line] = x
                        if got == 2:
                            status[line] |= 2
                    else:
                        val[line, vslot[field]] = x
                        if got == 2:
                            status[line] |= 4
                            fst[nf], fen[nf] = fs, e
                            fat[nf] = line * nv + vslot[field]
                            nf += 1
                field += 1
                fs = i + 1
                if b == 10:
                    break
            elif b == 34 or b == 13 or b == 0:
                bad = True
            i += 1
        i += 1
        if bad or field != ncol:
            status[line] = 1
    starts[n] = i
    return starts, status, kst, ken, khash, ts, val, fst[:nf], fen[:nf], fat[:nf]


@njit(cache=True)
def gather_cells(buf, fst, fen):
    """The cells ``buf[fst[k]:fen[k]]`` joined by ``\\n`` (uint8), to be read by ``float``
    in one pass."""
    total = 0
    for k in range(fst.shape[0]):
        total += fen[k] - fst[k] + 1
    out = np.empty(max(total - 1, 0), np.uint8)
    o = 0
    for k in range(fst.shape[0]):
        if k:
            out[o] = 10
            o += 1
        for q in range(fst[k], fen[k]):
            out[o] = buf[q]
            o += 1
    return out


@njit(cache=True)
def same_key_bytes(buf, kst, ken, rows, first):
    """Whether each row in ``rows`` has the same key bytes as the row ``first[row's
    group]``... given as ``first`` per row (the row whose key stands for its hash)."""
    for r in range(rows.shape[0]):
        a, b = rows[r], first[r]
        if a == b:
            continue
        la = ken[a] - kst[a]
        if la != ken[b] - kst[b]:
            return False
        for q in range(la):
            if buf[kst[a] + q] != buf[kst[b] + q]:
                return False
    return True


@njit(cache=True)
def first_appearance(codes, ncode):
    """``codes`` (int64, each in ``[0, ncode)``) factorised in order of first appearance:
    ``(distinct, inv)``, ``distinct[inv] == codes``, ``distinct`` in the order the codes
    first occur (what ``dict.fromkeys`` of the values gives, in one pass)."""
    slot = np.full(ncode, -1, np.int64)
    distinct = np.empty(min(ncode, codes.shape[0]), np.int64)
    inv = np.empty(codes.shape[0], np.int64)
    k = 0
    for i in range(codes.shape[0]):
        c = codes[i]
        j = slot[c]
        if j < 0:
            j = slot[c] = k
            distinct[k] = c
            k += 1
        inv[i] = j
    return distinct[:k], inv


@njit(cache=True)
def key_lookup(buf, kst, ken, khash, rows, tab, thash, kbuf, koff, klen):
    """Each row's key code in the table (``tab``: open addressing, -1 empty; ``thash`` the
    hash at each slot; the codes' bytes at ``kbuf[koff[c]:koff[c] + klen[c]]``), -1 for a
    key not in it. Same hash and same bytes: the same key."""
    mask = tab.shape[0] - 1
    out = np.empty(rows.shape[0], np.int64)
    for j in range(rows.shape[0]):
        r = rows[j]
        h = khash[r]
        a = kst[r]
        n = ken[r] - a
        s = np.int64(h & np.uint64(mask))
        code = -1
        while True:
            c = tab[s]
            if c < 0:
                break
            if thash[s] == h and klen[c] == n:
                o = koff[c]
                same = True
                for q in range(n):
                    if kbuf[o + q] != buf[a + q]:
                        same = False
                        break
                if same:
                    code = c
                    break
            s = (s + 1) & mask
        out[j] = code
    return out


@njit(cache=True)
def key_insert(buf, kst, ken, khash, rows, codes, tab, thash, kbuf, koff, klen, used):
    """Put the keys of ``rows`` (new to the table) in it as ``codes``, their bytes after
    ``used`` bytes of ``kbuf`` (room made by the caller); returns the bytes used then."""
    mask = tab.shape[0] - 1
    for j in range(rows.shape[0]):
        r = rows[j]
        a = kst[r]
        n = ken[r] - a
        c = codes[j]
        kbuf[used:used + n] = buf[a:a + n]
        koff[c] = used
        klen[c] = n
        used += n
        s = np.int64(khash[r] & np.uint64(mask))
        while tab[s] >= 0:
            s = (s + 1) & mask
        tab[s] = c
        thash[s] = khash[r]
    return used


@njit(cache=True)
def key_rehash(tab, thash, hashes, n):
    """Refill the (empty) table ``tab`` with codes ``0..n-1`` of hashes ``hashes``."""
    mask = tab.shape[0] - 1
    for c in range(n):
        h = hashes[c]
        s = np.int64(h & np.uint64(mask))
        while tab[s] >= 0:
            s = (s + 1) & mask
        tab[s] = c
        thash[s] = h
