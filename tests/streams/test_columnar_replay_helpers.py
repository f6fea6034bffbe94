"""(Helpers for the stream tests: not tests.)"""

from __future__ import annotations

import random

_BAD = ["abc", "", " ", "nan", "inf", "-inf", "1e400", "1e200", "1_000", ".5", "007", "5.",
        "1" * 120, " 2.5 ", "+3", '"4"', '"5', "1,2", "0x10", "NaN", "1e-400", "-0",
        "1e1234567890", "0.5e-05", "12345678901234567890123", "9007199254740993"]


def messy_ascii_csv(path, n=2000, keys=7, seed=0, ts=True, key=True, bad=0.06, delim=",",
                    crlf=False, utf8=False, lone_cr=False, undecodable=False):
    """A CSV of ``n`` rows (``key,ts,value``), about ``bad`` of them broken: ASCII, unless
    ``utf8`` (keys with accents and CJK), ``lone_cr`` (a ``\\r`` ending a line alone) or
    ``undecodable`` (bytes that are not UTF-8); ``crlf``: lines end with ``\\r\\n``."""
    rng = random.Random(seed)
    names = ["k0", "Zürich", "東京", "k3", "São Paulo"] if utf8 else None
    cols = (["key"] if key else []) + (["ts"] if ts else []) + ["value"]
    out = [delim.join(cols)]
    for i in range(n):
        k = rng.choice(names) if names else f"k{rng.randrange(keys)}"
        t = str(i // 2) if rng.random() > 0.03 else str(i - 40)
        v = repr(round(rng.gauss(0.0, 1.0), rng.randrange(1, 17)))
        if rng.random() < 0.02:
            v = f"{rng.gauss(0.0, 1.0) * 10 ** rng.randrange(-30, 30):.{rng.randrange(1, 20)}e}"
        if rng.random() < bad:
            which = rng.randrange(4)
            if which == 0:
                v = rng.choice(_BAD)
            elif which == 1 and ts:
                t = rng.choice(_BAD)
            elif which == 2 and key:
                k = rng.choice(["", "a\x00b", 'a"b', '"q"', " sp", "k" + delim + "1"])
            else:
                out.append(rng.choice(["", "   ", "x", delim.join("abcd"), "k1" + delim + "1",
                                       "k1" + delim + "3" + delim + "4" + delim]))
                continue
        out.append(delim.join(([k] if key else []) + ([t] if ts else []) + [v]))
    if lone_cr:
        out[len(out) // 2] += "\r" + out[len(out) // 2]
    data = (("\r\n" if crlf else "\n").join(out) + ("\n" if seed % 2 else "")).encode()
    if undecodable:
        data = data.replace(b"k3", b"k\xff3", 3)
    path.write_bytes(data)
    return path


def chunk_items(chunks, row):
    """The items column chunks stand for, in file order: ``("dead", record)`` for each dead
    letter, ``row(chunk, i)`` for each accepted row (what the record path's items are
    compared with)."""
    got = []
    for c in chunks:
        dead = iter(c.dead)
        d = next(dead, None)
        for i in range(len(c) + 1):
            while d is not None and d[0] == i:
                got.append(("dead", d[1].to_record()))
                d = next(dead, None)
            if i < len(c):
                got.append(row(c, i))
    return got


def norm_key(k):
    """A JSON list key as the tuple the keyed operators (and the JSON Lines reader) use."""
    return tuple(norm_key(x) for x in k) if isinstance(k, list) else k


def spell(x):
    """Type and text: 1, 1.0 and True differ, as -0.0 and 0.0 do."""
    return (type(x).__name__, repr(x))
