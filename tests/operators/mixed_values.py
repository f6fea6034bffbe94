"""Records whose values mix every type a hot path must tell apart (not a test module):
floats, ints, NumPy floats, one-element lists, missing ``ts``, integer ``ts`` and, now and
then, a value the record path refuses."""

from __future__ import annotations

import numpy as np

from shiftwatch.records import MAX_ABS

BAD = ["x", float("nan"), float("inf"), True, None, 10 ** 400, MAX_ABS * 2, [1.0, 2.0],
       -MAX_ABS]


def mixed_records(y: np.ndarray, rng: np.random.Generator) -> list[dict]:
    recs: list[dict] = []
    for i, v in enumerate(y):
        kind = int(rng.integers(12))
        value: object = float(v)
        if kind == 0:
            value = int(round(v * 3))
        elif kind == 1:
            value = np.float64(v)
        elif kind == 2 and i % 5 == 0:
            value = BAD[int(rng.integers(len(BAD)))]
        elif kind == 3:
            value = [float(v)]
        rec = {"key": "k", "ts": float(i) if kind != 4 else i, "value": value}
        if kind == 5:
            rec.pop("ts")
        recs.append(rec)
    return recs


def same_outputs(fast: list, slow: list) -> None:
    """Outputs equal, dead letters with the same reason, raw record and origin."""
    assert len(fast) == len(slow)
    for x, y in zip(fast, slow, strict=True):
        if isinstance(x, dict):
            assert x == y
        else:
            assert type(x) is type(y)
            assert (x.reason, x.raw, x.origin) == (y.reason, y.raw, y.origin)
