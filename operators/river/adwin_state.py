"""A fast writer for River's ADWIN state: the JSON of
:func:`~shiftwatch.operators.object_state.encode_object` and the patches of
:func:`~shiftwatch.operators.state_codec.diff_state`, without walking the object graph.

A key's ADWIN is seven attributes: six scalars (``_drift_detected``, ``delta``, ``clock``,
...) and a compiled helper (``river._river_rust.drift.AdaptiveWindowing``) whose state is
about 760 bytes that pickle would write. The generic codec encodes that graph as JSON (the
bytes as base64), and a changelog patch diffs two such documents part by part, decoding the
base64 again to XOR the bytes. With a checkpoint every 1,000 records at 1,000 keys that was
about two thirds of a key version's cost (issue 25).

:func:`adwin_parts` reads the same values straight from the detector (the scalars, the
helper's constructor arguments and its state bytes); :func:`adwin_doc` writes the document
``encode_object`` would, and :func:`adwin_patch` the operations ``diff_state`` would, from
two versions' parts. They are used only after a self-check (:func:`fast_path_ok`, run once)
found them equal to the generic codec's output on a live detector, so a River release that
changes ADWIN's layout falls back to the generic path instead of writing something else.
Anything unusual on a detector (a subclass, an extra attribute, a non-finite float) makes
:func:`adwin_parts` return None: the caller uses the generic codec for it.

>>> from river import drift
>>> det = drift.ADWIN()
>>> for x in [0.0, 1.0] * 40:
...     det.update(x)
>>> fast_path_ok() and adwin_doc(adwin_parts(det)) == encode_object(det)
True
"""

from __future__ import annotations

import base64
from binascii import b2a_base64
from math import isfinite
from typing import Any

from shiftwatch.operators.object_state import _qualified, encode_object
from shiftwatch.operators.state_codec import _same, diff_state, xorb_data

__all__ = ["adwin_parts", "adwin_doc", "adwin_patch", "adwin_from_doc", "fast_path_ok"]

_KEYS = ("_drift_detected", "delta", "clock", "max_buckets", "min_window_length",
         "grace_period", "_helper")
_N = len(_KEYS) - 1  # the scalars before the helper

_ADWIN: Any = None
_HELPER: Any = None
_NAMES: tuple[str, str] = ("", "")
_OK: bool | None = None  # the self-check's verdict, once run


def _setup() -> bool:
    global _ADWIN, _HELPER, _NAMES
    try:
        from river.drift.adwin import ADWIN  # (not river.drift: lazy_import)
    except ImportError:  # pragma: no cover - river is a dependency
        return False
    helper = getattr(ADWIN(), "_helper", None)
    if helper is None:
        return False
    _ADWIN, _HELPER = ADWIN, type(helper)
    _NAMES = (_qualified(ADWIN), _qualified(_HELPER))
    return True


def adwin_parts(det: Any) -> tuple | None:
    """``(scalars, helper_args, helper_bytes)`` of a plain River ADWIN, or None for anything
    the fast writer does not cover (use :func:`encode_object` then)."""
    if type(det) is not _ADWIN:
        return None
    d = det.__dict__
    if len(d) != len(_KEYS) or tuple(d) != _KEYS:
        return None
    helper = d["_helper"]
    if type(helper) is not _HELPER:
        return None
    scalars = (d["_drift_detected"], d["delta"], d["clock"], d["max_buckets"],
               d["min_window_length"], d["grace_period"])
    args = helper.__getnewargs__()
    data = helper.__getstate__()
    if type(data) is not bytes or type(args) is not tuple:
        return None
    if not _plain_values(scalars) or not _plain_values(args):
        return None
    return scalars, args, data


def adwin_doc(parts: tuple) -> dict:
    """The document :func:`encode_object` writes for the detector ``parts`` came from."""
    scalars, args, data = parts
    items: list = [[k, v] for k, v in zip(_KEYS, scalars, strict=False)]
    items.append(["_helper", {
        "!obj": 1, "new": {"!global": "copyreg:__newobj__"},
        "args": [{"!global": _NAMES[1]}, *args],
        "state": {"!bytes": b2a_base64(data, newline=False).decode("ascii"),
                  "mutable": False}}])
    return {"!obj": 0, "new": {"!global": "copyreg:__newobj__"},
            "args": [{"!global": _NAMES[0]}], "state": {"!dict": items}}


def adwin_patch(old: tuple, new: tuple, path: list) -> list:
    """The operations :func:`diff_state` gives from the document of ``old`` to that of
    ``new`` (both :func:`adwin_parts`), the document being at ``path``."""
    ops: list = []
    base = [*path, "state", "!dict"]
    s0, s1 = old[0], new[0]
    if not _same(s0, s1):  # the tuples' JSON texts (0.0 and -0.0, 1 and True differ)
        for i in range(_N):
            a, b = s0[i], s1[i]
            if type(a) is not type(b) or not _same(a, b):
                ops.append(["set", [*base, i, 1], b])
    hpath = [*base, _N, 1]
    a0, a1 = old[1], new[1]
    if _same(a0, a1):
        pass
    elif len(a0) != len(a1):
        ops.append(["set", [*hpath, "args"], [{"!global": _NAMES[1]}, *a1]])
    else:
        for i, (a, b) in enumerate(zip(a0, a1, strict=True)):
            if type(a) is not type(b) or not _same(a, b):
                ops.append(["set", [*hpath, "args", i + 1], b])
    b0, b1 = old[2], new[2]
    if b0 != b1:
        spath = [*hpath, "state", "!bytes"]
        data = xorb_data(b0, b1)
        ops.append(["xorb", spath, data, len(b1)] if data is not None else
                   ["set", spath, b2a_base64(b1, newline=False).decode("ascii")])
    return ops


_NEW = {"!global": "copyreg:__newobj__"}


def _plain_values(values: list | tuple) -> bool:
    # bools, ints and finite floats: what encode_object writes as themselves
    for v in values:
        t = type(v)
        if t is float:
            if not isfinite(v):
                return False
        elif t is not int and t is not bool:
            return False
    return True


def adwin_from_doc(doc: Any) -> Any:
    """The ADWIN :func:`~shiftwatch.operators.object_state.decode_object` rebuilds from
    ``doc``, built directly when ``doc`` is exactly what :func:`adwin_doc` writes (the
    classes, reconstructors and layout checked, only the values free); None for any other
    document (decode it with the generic, allowlisting decoder then)."""
    return _from_doc(doc) if fast_path_ok() else None


def _from_doc(doc: Any) -> Any:
    if type(doc) is not dict or len(doc) != 4:
        return None
    try:
        if type(doc["!obj"]) is not int or doc["!obj"] != 0 or doc["new"] != _NEW or \
                doc["args"] != [{"!global": _NAMES[0]}]:
            return None
        state = doc["state"]
        if type(state) is not dict or len(state) != 1:
            return None
        items = state["!dict"]
        if type(items) is not list or len(items) != len(_KEYS):
            return None
        values = []
        for key, item in zip(_KEYS, items, strict=True):
            if type(item) is not list or len(item) != 2 or item[0] != key:
                return None
            values.append(item[1])
        helper = values.pop()
        if not _plain_values(values) or type(helper) is not dict or len(helper) != 4 or \
                type(helper["!obj"]) is not int or helper["!obj"] != 1 or \
                helper["new"] != _NEW:
            return None
        args = helper["args"]
        if type(args) is not list or not args or args[0] != {"!global": _NAMES[1]} or \
                not _plain_values(args[1:]):
            return None
        hstate = helper["state"]
        if type(hstate) is not dict or len(hstate) != 2 or hstate["mutable"] is not False or \
                type(hstate["!bytes"]) is not str:
            return None
        data = base64.b64decode(hstate["!bytes"])
        h = _HELPER.__new__(_HELPER, *args[1:])
        h.__setstate__(data)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # noqa: BLE001 - also the helper's Rust panic on bad bytes: the
        return None  # generic decoder says what is wrong
    det = _ADWIN.__new__(_ADWIN)
    d = dict(zip(_KEYS, values, strict=False))
    d["_helper"] = h
    det.__dict__.update(d)
    return det


def fast_path_ok() -> bool:
    """Whether the fast writer gives exactly the generic codec's documents and patches on
    this River (checked once, on a detector fed a few hundred values with a change)."""
    global _OK
    if _OK is None:
        _OK = False
        if _setup():
            try:
                _OK = _self_check()
            except Exception:  # noqa: BLE001 - any surprise means: use the generic path
                _OK = False
    return _OK


def _self_check() -> bool:
    det = _ADWIN()
    prev_parts, prev_doc = None, None
    x = 0.0
    for step in range(12):
        for j in range(40):
            x = (x * 1103515245 + 12345 + j) % 2147483648
            det.update((x / 2147483648.0) + (3.0 if step >= 6 else 0.0))
        parts = adwin_parts(det)
        if parts is None:
            return False
        doc = encode_object(det)
        if adwin_doc(parts) != doc:
            return False
        if prev_parts is not None and \
                adwin_patch(prev_parts, parts, ["d"]) != diff_state(prev_doc, doc, ["d"]):
            return False
        twin = _from_doc(doc)
        if twin is None or encode_object(twin) != doc:
            return False
        prev_parts, prev_doc = parts, doc
    return True
