"""The state codec: JSON plus base64 NumPy arrays, bit-exact, no pickle.

``state_dict()`` values, changelog entries and checkpoints all go through
:func:`encode_state` / :func:`decode_state` (or :func:`dumps_state` / :func:`loads_state` for
bytes). Extensions (River internals, torch tensors) plug in with
:func:`register_state_extension`.

A 1-D float64 array that is an exact arithmetic run (a window's ``ts`` at a fixed rate) or
decimals of at most 9 digits a few units apart (epoch milliseconds, readings such as
``23.51``) is written as ``arange`` (two numbers) or ``delta`` (its integers' differences
as int8/16/32), bit for bit; every other array as its raw bytes (see ``_f8_run``). Both
forms are read since 2026-12-02: an older release refuses a changelog that holds them.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import zlib
from binascii import b2a_base64
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["encode_state", "decode_state", "dumps_state", "loads_state",
           "register_state_extension", "apply_state_patch", "diff_state", "xorb_data",
           "compress_state", "inflate_state"]


_ND = "__ndarray__"
_TUPLE = "__tuple__"
_NONSTR_DICT = "__dict_items__"
_FLOAT = "__float__"
#: Keys that tag a dict as an encoded value; plain dicts holding one of them are escaped.
_RESERVED_KEYS: set[str] = {_ND, _TUPLE, _NONSTR_DICT, _FLOAT}


def encode_state(obj: Any) -> Any:
    """Turn a state (dicts, lists, tuples, scalars, NumPy arrays) into JSON-able values.

    Arrays become ``{"__ndarray__": base64, "dtype": ..., "shape": ...}``, so round-trips are
    bit-exact. Dicts with non-string keys and tuples are tagged so they come back as they were.
    Objects that know how to encode themselves provide ``__state_encode__`` (used by
    extensions such as the River adapter).

    >>> s = {"n": 3, "m": np.array([0.1, 0.2]), (1, 2): (3, None)}
    >>> back = decode_state(json.loads(json.dumps(encode_state(s))))
    >>> back["n"], back["m"].tolist(), back[(1, 2)]
    (3, [0.1, 0.2], (3, None))
    """
    # The usual state types by their exact type first (about twice as fast as the isinstance
    # chain below, which gives the same values for them; checkpoints encode many states).
    t = type(obj)
    if t is str or t is int or t is bool or obj is None:
        return obj
    if t is float and math.isfinite(obj):
        return obj
    if t is dict and _RESERVED_KEYS.isdisjoint(obj) and all(type(k) is str for k in obj):
        return {k: encode_state(v) for k, v in obj.items()}
    if t is list:  # strings and ints (a patch's paths) without a call each
        return [v if type(v) is str or type(v) is int else encode_state(v) for v in obj]
    if t is np.ndarray and obj.ndim and not obj.dtype.hasobject:
        enc = _f8_run(obj)
        if enc is not None:
            return enc
        return {_ND: b2a_base64(obj.tobytes(), newline=False).decode("ascii"),
                "dtype": obj.dtype.str, "shape": list(obj.shape)}
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, bool):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        if math.isfinite(x):
            return x
        return {_FLOAT: repr(x)}
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        arr = np.ascontiguousarray(obj)
        enc = _f8_run(arr)
        if enc is not None:
            return enc
        if arr.dtype == object:
            return {_ND: None, "items": [encode_state(v) for v in arr.reshape(-1)],
                    "shape": list(arr.shape)}
        return {_ND: base64.b64encode(arr.tobytes()).decode("ascii"), "dtype": arr.dtype.str,
                "shape": list(arr.shape)}
    if isinstance(obj, Mapping):
        if all(isinstance(k, str) for k in obj) and _RESERVED_KEYS.isdisjoint(obj):
            return {k: encode_state(v) for k, v in obj.items()}
        return {_NONSTR_DICT: [[encode_state(k), encode_state(v)] for k, v in obj.items()]}
    if isinstance(obj, tuple):
        return {_TUPLE: [encode_state(v) for v in obj]}
    if isinstance(obj, list):
        return [encode_state(v) for v in obj]
    hook = getattr(obj, "__state_encode__", None)
    if hook is not None:
        return hook()
    for extension in _STATE_EXTENSIONS:
        enc = extension[0](obj)
        if enc is not NotImplemented:
            return enc
    raise TypeError(f"cannot encode {type(obj).__name__} in a state_dict")


def decode_state(obj: Any) -> Any:
    """Inverse of :func:`encode_state`."""
    # Plain lists and dicts (no tag key, every extension tagged) by their exact type first:
    # the values, and what a restore decodes for every key
    t = type(obj)
    if t is list:
        return [v if type(v) in _SCALARS else decode_state(v) for v in obj]
    if t is dict and not _UNMARKED and _RESERVED_KEYS.isdisjoint(obj):
        return {k: v if type(v) in _SCALARS else decode_state(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode_state(v) for v in obj]
    if isinstance(obj, dict):
        if _ND in obj:
            if obj[_ND] is None:
                flat = np.empty(len(obj["items"]), dtype=object)
                flat[:] = [decode_state(v) for v in obj["items"]]
                return flat.reshape(obj["shape"])
            if "arange" in obj or "delta" in obj:
                return _f8_run_decode(obj)
            buf = base64.b64decode(obj[_ND])
            return np.frombuffer(buf, dtype=np.dtype(obj["dtype"])).reshape(obj["shape"]).copy()
        if _TUPLE in obj:
            return tuple(decode_state(v) for v in obj[_TUPLE])
        if _NONSTR_DICT in obj:
            return {_hashable(decode_state(k)): decode_state(v) for k, v in obj[_NONSTR_DICT]}
        if _FLOAT in obj:
            return float(obj[_FLOAT])
        for extension in _STATE_EXTENSIONS:
            dec = extension[1](obj)
            if dec is not NotImplemented:
                return dec
        return {k: decode_state(v) for k, v in obj.items()}
    return obj


_SCALARS = frozenset((str, int, float, bool, type(None)))

# ---- runs of float64: timestamps and decimal readings ------------------------------------
# A window's ``ts`` is most often an arithmetic run (a fixed sampling rate, a counter) or
# numbers of a few decimals a few units apart (epoch seconds with milliseconds, epoch
# milliseconds), and sensor readings are often decimals of a few digits (``23.51``); written
# as 8-byte floats they cost 10.7 bytes of base64 each. Two exact forms of a 1-D ``<f8``
# array of at least ``_RUN_MIN`` entries:
#
# * ``{"__ndarray__": "", "dtype": "<f8", "shape": [n], "arange": [first, step]}``: entry
#   ``i`` is ``first + step * i`` (NumPy float64, bit for bit), ``n <= _RUN_MAX``;
# * ``{"__ndarray__": b64, "dtype": "<f8", "shape": [n], "delta": [first, int, decimals]}``:
#   entry ``i`` is the integer ``k_i`` divided by ``10 ** decimals`` (0 to 9; IEEE division
#   is correctly rounded, so this is exactly the float that parsing the decimal text gave),
#   with ``|k_i| <= 2**53``; ``first`` is ``k_0``, and the base64 holds the ``n - 1``
#   differences as ``int`` (``"<i1"``, ``"<i2"`` or ``"<i4"``, the smallest that holds them),
#   written only when it saves at least 24 bytes (what its fields cost).
#
# The encoder writes one only when decoding it gives the array back bit for bit (so -0.0,
# NaN, and floats that are not exactly on the run keep the plain form); the decoder refuses
# what is not of that shape. Checking costs a few float operations for an array of
# full-precision values (the decimals of its first entry are looked for, up to 9; the
# decimals are those of the first, second and last entries).

_RUN_MIN = 4
_RUN_MAX = 1 << 24
_INT_MAX = float(1 << 53)
_DELTA_TYPES = {"<i1": np.int8, "<i2": np.int16, "<i4": np.int32}
_DELTA_FITS = [(name, int(np.iinfo(dt).min), int(np.iinfo(dt).max), np.dtype(dt).itemsize)
               for name, dt in _DELTA_TYPES.items()]
_POW10 = [10.0 ** k for k in range(10)]


def _arange(first: float, step: float, n: int) -> np.ndarray:
    return np.arange(n, dtype=np.float64) * step + first


def _decimals(x: float) -> int:
    """The fewest decimals (0-9) of which ``x`` is the float, or 10 (none)."""
    if x.is_integer():
        return 0
    y = x * 1e9
    if abs(y) <= _INT_MAX and round(y) / 1e9 != x:
        return 10  # not even 9 decimals (so none fewer): a full-precision value, at once
    for k in range(1, 10):
        p = _POW10[k]
        y = x * p
        if abs(y) <= _INT_MAX and round(y) / p == x:
            return k
    return 10


def _f8_run(arr: np.ndarray) -> dict | None:
    """The run form of an array, or None (not a 1-D ``<f8`` array of ``_RUN_MIN`` or more
    entries on a run; see above)."""
    if arr.ndim != 1 or arr.dtype.str != "<f8" or arr.shape[0] < _RUN_MIN:
        return None
    n = arr.shape[0]
    first, second = float(arr[0]), float(arr[1])
    step = second - first
    if not (math.isfinite(first) and math.isfinite(step)):
        return None
    if float(arr[2]) - second == step and n <= _RUN_MAX:
        if _arange(first, step, n).tobytes() == arr.tobytes():
            return {_ND: "", "dtype": "<f8", "shape": [n], "arange": [first, step]}
    k = _decimals(first)
    if k > 9 or (k := max(k, _decimals(second), _decimals(float(arr[-1])))) > 9:
        return None
    p = _POW10[k]
    lim = _INT_MAX / p
    if not (-lim <= float(arr.min()) and float(arr.max()) <= lim):  # also False for NaN
        return None
    if k:
        ints = np.rint(arr * p).astype(np.int64)
        if (ints.astype(np.float64) / p).tobytes() != arr.tobytes():  # not all of k
            return None  # decimals, or a -0.0
    else:
        ints = arr.astype(np.int64)
        if ints.astype(np.float64).tobytes() != arr.tobytes():  # a fraction, or -0.0
            return None
    d = ints[1:] - ints[:-1]
    dlo, dhi = int(d.min()), int(d.max())
    for name, lo, hi, size in _DELTA_FITS:
        if lo <= dlo and dhi <= hi:
            if n * (8 - size) < 24:  # the form's fields cost about that
                return None
            return {_ND: b2a_base64(d.astype(name).tobytes(), newline=False).decode("ascii"),
                    "dtype": "<f8", "shape": [n], "delta": [int(ints[0]), name, k]}
    return None


def _f8_run_decode(obj: dict) -> np.ndarray:
    """Inverse of :func:`_f8_run`; ValueError for what is not of its shape."""
    shape = obj.get("shape")
    if (obj.get("dtype") != "<f8" or type(shape) is not list or len(shape) != 1
            or type(shape[0]) is not int or not _RUN_MIN <= shape[0] or len(obj) != 4):
        raise ValueError("bad run-encoded array")
    n = shape[0]
    if "arange" in obj:
        spec = obj["arange"]
        if (obj[_ND] != "" or type(spec) is not list or len(spec) != 2
                or not all(type(v) in (int, float) and math.isfinite(v) for v in spec)
                or n > _RUN_MAX):
            raise ValueError("bad arange-encoded array")
        return _arange(float(spec[0]), float(spec[1]), n)
    spec = obj["delta"]
    if (type(spec) is not list or len(spec) != 3 or type(spec[0]) is not int
            or not -_INT_MAX <= spec[0] <= _INT_MAX or spec[1] not in _DELTA_TYPES
            or type(spec[2]) is not int or not 0 <= spec[2] <= 9
            or type(obj[_ND]) is not str):
        raise ValueError("bad delta-encoded array")
    dt = np.dtype(_DELTA_TYPES[spec[1]])
    raw = base64.b64decode(obj[_ND], validate=True)
    if len(raw) != (n - 1) * dt.itemsize:
        raise ValueError("bad delta-encoded array: wrong length")
    ints = np.empty(n, dtype=np.int64)
    ints[0] = spec[0]
    np.cumsum(np.frombuffer(raw, dtype=dt), dtype=np.int64, out=ints[1:])
    ints[1:] += spec[0]
    if int(np.abs(ints).max()) > _INT_MAX:
        raise ValueError("bad delta-encoded array: beyond 2**53")
    out = ints.astype(np.float64)
    return out / _POW10[spec[2]] if spec[2] else out


def _hashable(x: Any) -> Any:
    return tuple(_hashable(v) for v in x) if isinstance(x, list) else x


#: (encode, decode) pairs tried for objects the core codec does not know. Each returns
#: ``NotImplemented`` for values that are not its own.
_STATE_EXTENSIONS: list[tuple[Callable[[Any], Any], Callable[[Any], Any]]] = []
#: Whether an extension was registered without a marker.
_UNMARKED = False


def register_state_extension(encode: Callable[[Any], Any], decode: Callable[[Any], Any],
                             marker: str | None = None) -> None:
    """Teach the state codec a new type (torch tensors, River internals, ...).

    ``encode(obj)`` returns a JSON-able value (typically a dict tagged with ``marker``) or
    ``NotImplemented``; ``decode(d)`` is called on every dict the core codec does not know and
    returns the value or ``NotImplemented``. Giving ``marker`` (the tag key of the extension's
    dicts) makes :func:`encode_state` escape plain dicts that happen to hold that key, so they
    are never mistaken for the extension's values.
    """
    global _UNMARKED
    if marker is not None:
        _RESERVED_KEYS.add(marker)
    else:
        _UNMARKED = True  # its dicts are not recognisable by a key: every dict is offered
    if not any(e == encode and d == decode for e, d in _STATE_EXTENSIONS):
        _STATE_EXTENSIONS.append((encode, decode))


def dumps_state(state: Any) -> bytes:
    """Serialise a state_dict to UTF-8 JSON bytes (the changelog and checkpoint format)."""
    return json.dumps(encode_state(state), separators=(",", ":"), allow_nan=False).encode()


def loads_state(data: bytes | str) -> Any:
    """Inverse of :func:`dumps_state`; also reads what :func:`compress_state` made of it."""
    if isinstance(data, (bytes, bytearray, memoryview)) and data[:1] == b"x":
        data = inflate_state(data)
    return decode_state(_loads(data))


#: A state's bytes are compressed (:func:`compress_state`) from this size on.
COMPRESS_FROM = 256
#: The largest state :func:`inflate_state` expands (a bound against a damaged entry).
MAX_INFLATED = 1 << 31


def compress_state(data: bytes) -> bytes:
    """``data`` (a state's JSON bytes) zlib-compressed (level 1) if it is at least
    :data:`COMPRESS_FROM` bytes, else as it is. Compressed bytes begin with ``x`` (zlib's
    header), which no JSON text does, so :func:`loads_state` tells them apart. A changelog
    holds its keys' states this way: a ``cs`` key's 2.7 KB state is about 0.35 KB.

    >>> s = dumps_state({"x": [0.0] * 100})
    >>> z = compress_state(s)
    >>> len(s), len(z) < len(s) // 4, z[:1], loads_state(z) == loads_state(s)
    (407, True, b'x', True)
    """
    if len(data) < COMPRESS_FROM or data[:1] == b"x":
        return data
    return zlib.compress(data, 1)


def inflate_state(data: bytes | bytearray | memoryview) -> bytes:
    """The JSON bytes of a compressed state (``ValueError`` if damaged, or if it would
    expand past :data:`MAX_INFLATED` bytes)."""
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, MAX_INFLATED)
    except zlib.error as exc:
        raise ValueError(f"a compressed state cannot be read ({exc})") from None
    if d.unconsumed_tail or not d.eof:
        raise ValueError("a compressed state is cut short or expands past "
                         f"{MAX_INFLATED:,} bytes")
    return out


try:
    from orjson import JSONDecodeError as _OrjsonError
    from orjson import loads as _orjson_loads

    # every digit -> "1", anything else -> "0": a run of 19 digits is then a substring
    # (two C passes; several times faster than a regular expression)
    _DIGITS = bytes(0x31 if 0x30 <= i <= 0x39 else 0x30 for i in range(256))
    _RUN = b"1" * 19
    _LONG_DIGITS_STR = re.compile(r"[0-9]{19}")

    def _loads(data: bytes | str) -> Any:
        # orjson (several times faster) unless the text has a run of 19 digits somewhere
        # (orjson reads an integer beyond 64 bits as a float, json exactly; no float the
        # writers write has one); json too for what orjson refuses and json reads (a lone
        # surrogate), so the two read every text alike
        if isinstance(data, (bytes, bytearray)):
            long = _RUN in data.translate(_DIGITS)
        else:
            long = _LONG_DIGITS_STR.search(data) is not None
        if not long:
            try:
                return _orjson_loads(data)
            except _OrjsonError:
                pass
        return json.loads(data)
except ImportError:  # pragma: no cover - orjson is a dependency
    _loads = json.loads


def apply_state_patch(state: Any, patch: Any) -> Any:
    """Apply a state patch (what an operator's ``state_patch`` returns) to a decoded state.

    A patch is a list of operations on the decoded state (dicts, lists, NumPy arrays), each
    with a ``path`` (dict keys and list indices from the root):

    * ``["set", path, value]``: replace the value at ``path``;
    * ``["append", path, rows, keep]``: the array (or list) at ``path`` followed by ``rows``
      along its first axis, of which only the last ``keep`` are kept (a bounded window that
      got ``len(rows)`` new values);
    * ``["xor64", path, data, length]``: the string at ``path`` is base64 bytes (an encoded
      array or blob) of which a few changed: the new bytes are the old ones (cut or padded
      with zeros to ``length``) XOR the zlib-compressed ``data`` (base64), re-encoded (what
      :func:`diff_state` wrote for a long base64 string until 2026-12; still read);
    * ``["xorb", path, data, length]``: the same change written sparsely (what
      :func:`diff_state` writes now): ``x``, the old bytes (cut or padded with zeros to
      ``length``) XOR the new ones, taken as 8-byte words (the last one padded with zeros),
      is written as the words' nonzero bitmap (``numpy.packbits``, most significant bit
      first), then one nonzero-byte bitmap per nonzero word, then those nonzero bytes, in
      order; base64. No compressor: about a third of zlib's time on the 760 bytes of an
      ADWIN helper, and a tenth smaller on them (:func:`xorb_data`).

    Patches travel in the changelog as states do (:func:`encode_state`, arrays as base64
    bytes), so applying one to the state it was computed against gives the operator's
    state, bit for bit. Returns the patched state (the root itself is never replaced in
    place by a ``set`` with an empty path). Raises ``ValueError`` for a malformed patch.

    >>> s = {"n": 3, "w": {"values": np.array([1.0, 2.0, 3.0]), "count": 3}}
    >>> s = apply_state_patch(s, [["set", ["n"], 4], ["set", ["w", "count"], 5],
    ...                           ["append", ["w", "values"], np.array([4.0, 5.0]), 4]])
    >>> s["n"], s["w"]["count"], s["w"]["values"].tolist()
    (4, 5, [2.0, 3.0, 4.0, 5.0])
    """
    if not isinstance(patch, list):
        raise ValueError(f"a state patch is a list of operations, not {type(patch).__name__}")
    for op in patch:
        try:
            kind, path = op[0], op[1]
            if not isinstance(path, list):
                raise TypeError("path is not a list")
            if not path:
                if kind != "set" or len(op) != 3:
                    raise ValueError("only 'set' may have an empty path")
                state = op[2]
                continue
            parent = state
            for part in path[:-1]:
                parent = parent[part]
            last = path[-1]
            if kind == "set" and len(op) == 3:
                if isinstance(parent, list) and not (isinstance(last, int)
                                                     and 0 <= last < len(parent)):
                    raise IndexError(f"index {last!r} of a list of {len(parent)}")
                parent[last] = op[2]
            elif kind == "xorb" and len(op) == 4:
                parent[last] = _xorb(parent[last], op[2], op[3])
            elif kind == "xor64" and len(op) == 4:
                parent[last] = _xor64(parent[last], op[2], op[3])
            elif kind == "append" and len(op) == 4:
                old, rows, keep = parent[last], op[2], op[3]
                if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
                    raise ValueError(f"keep must be an integer >= 0, got {keep!r}")
                if isinstance(old, np.ndarray):
                    rows = np.asarray(rows, dtype=old.dtype)
                    if rows.shape[1:] != old.shape[1:]:
                        raise ValueError(f"rows of shape {rows.shape[1:]} appended to an "
                                         f"array of rows of shape {old.shape[1:]}")
                    whole = np.concatenate([old, rows])
                    parent[last] = np.ascontiguousarray(whole[len(whole) - keep:]) \
                        if keep <= len(whole) else _too_few(keep, len(whole))
                elif isinstance(old, list):
                    whole = [*old, *rows]
                    parent[last] = whole[len(whole) - keep:] if keep <= len(whole) else \
                        _too_few(keep, len(whole))
                else:
                    raise TypeError(f"cannot append to {type(old).__name__}")
            else:
                raise ValueError(f"unknown patch operation {kind!r} of {len(op)} fields")
        except (KeyError, IndexError, TypeError, binascii.Error, zlib.error) as exc:
            raise ValueError(f"state patch operation {str(op)[:80]} does not apply: "
                             f"{type(exc).__name__}: {exc}") from None
    return state


def _too_few(keep: int, have: int):
    raise ValueError(f"keep {keep} of {have} values")


def _xor64(old: str, data: str, length: int) -> str:
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError(f"length must be an integer >= 0, got {length!r}")
    before = base64.b64decode(old, validate=True)
    d = zlib.decompressobj()
    x = d.decompress(base64.b64decode(data, validate=True), length + 1)
    if len(x) != length or d.unconsumed_tail:
        raise ValueError(f"xor64 data of {len(x)} bytes, expected {length}")
    a = np.frombuffer(before[:length].ljust(length, b"\0"), dtype=np.uint8)
    return b2a_base64((a ^ np.frombuffer(x, dtype=np.uint8)).tobytes(),
                      newline=False).decode("ascii")


def _xorb(old: str, data: str, length: int) -> str:
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError(f"length must be an integer >= 0, got {length!r}")
    if not isinstance(data, str):
        raise TypeError("xorb data is not a string")
    before = base64.b64decode(old, validate=True)
    raw = np.frombuffer(base64.b64decode(data, validate=True), dtype=np.uint8)
    nw = (length + 7) // 8
    head = (nw + 7) // 8
    if len(raw) < head:
        raise ValueError(f"xorb data of {len(raw)} bytes, too short for {length}")
    bits = np.unpackbits(raw[:head])
    if bits[nw:].any():
        raise ValueError("xorb word bitmap has bits past the last word")
    words = bits[:nw].astype(bool)
    k = int(words.sum())
    if len(raw) < head + k:
        raise ValueError("xorb data shorter than its word bitmap says")
    mask = np.unpackbits(raw[head:head + k]).astype(bool)
    if k and not raw[head:head + k].all():
        raise ValueError("xorb data marks a word changed with no byte changed")
    values = raw[head + k:]
    if int(mask.sum()) != len(values):
        raise ValueError(f"xorb data holds {len(values)} bytes, its bitmaps say "
                         f"{int(mask.sum())}")
    x = np.zeros((nw, 8), dtype=np.uint8)
    rows = np.zeros((k, 8), dtype=np.uint8)
    rows.reshape(-1)[mask] = values
    x[words] = rows
    if x.reshape(-1)[length:].any():
        raise ValueError("xorb data changes bytes past the end")
    a = np.frombuffer(before[:nw * 8].ljust(nw * 8, b"\0"), dtype=np.uint8)
    return b2a_base64((a ^ x.reshape(-1)).tobytes()[:length],
                      newline=False).decode("ascii")


#: Base64 strings at least this long are diffed as bytes (``xorb``) rather than replaced.
_XOR_MIN = 96


def diff_state(old: Any, new: Any, path: list | None = None) -> list:
    """Patch operations (:func:`apply_state_patch`) that turn the JSON value ``old`` into
    ``new`` (both plain JSON values: what :func:`encode_state` or an operator's encoder
    returns): ``set`` for each part that differs (dicts with the same keys and lists of the
    same length are compared part by part; floats by their bits, so 0.0 and -0.0 differ),
    ``xorb`` for a long base64 string of which only some bytes changed.

    >>> old = {"n": 1, "b": {"!bytes": base64.b64encode(bytes(200)).decode()}}
    >>> new = {"n": 2, "b": {"!bytes": base64.b64encode(bytes(199) + b"x").decode()}}
    >>> ops = diff_state(old, new)
    >>> [op[0] for op in ops], apply_state_patch(old, ops) == new
    (['set', 'xorb'], True)
    """
    ops: list = []
    _diff(old, new, [] if path is None else list(path), ops)
    return ops


try:
    from orjson import dumps as _exact_text
except ImportError:  # pragma: no cover - orjson is a dependency
    def _exact_text(v: Any) -> bytes:
        return json.dumps(v, separators=(",", ":")).encode()


def _same(a: Any, b: Any) -> bool:
    # == is True for 0.0 and -0.0, True and 1, 1 and 1.0: the JSON text tells them apart
    try:
        return a == b and _exact_text(a) == _exact_text(b)
    except (TypeError, ValueError):  # not plain JSON (an array, a big int): compare in full
        return a is b


def _diff(old: Any, new: Any, path: list, ops: list) -> None:
    t = type(new)
    if t is not type(old):
        ops.append(["set", path, new])
    elif t is str or t is int:  # the same type: == tells equal texts apart
        if old != new:
            if t is str and len(new) >= _XOR_MIN:
                op = _xor_op(old, new, path)
                ops.append(op if op is not None else ["set", path, new])
            else:
                ops.append(["set", path, new])
    elif _same(old, new):
        return
    elif t is dict and list(old) == list(new):
        for k in new:
            _diff(old[k], new[k], [*path, k], ops)
    elif t is list and len(old) == len(new):
        mine: list = []
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            _diff(a, b, [*path, i], mine)
        # a list whose items moved (a deque that shifted) is smaller whole
        ops.extend([["set", path, new]] if len(new) > 8 and len(mine) > len(new) // 4
                   else mine)
    elif t is str and len(new) >= _XOR_MIN:
        op = _xor_op(old, new, path)
        ops.append(op if op is not None else ["set", path, new])
    else:
        ops.append(["set", path, new])


def _xor_op(old: str, new: str, path: list) -> list | None:
    try:
        a = base64.b64decode(old, validate=True)
        b = base64.b64decode(new, validate=True)
    except (binascii.Error, ValueError):
        return None
    if b2a_base64(b, newline=False).decode("ascii") != new or \
            b2a_base64(a, newline=False).decode("ascii") != old:
        return None  # not canonical base64: the round trip would not give it back
    data = xorb_data(a, b)
    return None if data is None else ["xorb", path, data, len(b)]


def xorb_data(old: bytes, new: bytes) -> str | None:
    """The ``data`` of an ``xorb`` operation (:func:`apply_state_patch`) turning the bytes
    ``old`` into ``new``, or None when that is not at least 16 characters shorter than
    ``new`` in base64 (write ``new`` whole then).

    >>> old = bytes(range(40))
    >>> new = old[:8] + bytes([153]) + old[9:] + b"tail"
    >>> data = xorb_data(old, new)
    >>> _xorb(base64.b64encode(old).decode(), data, len(new)) == base64.b64encode(new).decode()
    True
    """
    n = len(new)
    pad = -n % 8
    if len(old) != n + pad:
        old = old[:n + pad].ljust(n + pad, b"\0")
    # as 8-byte words (native order: only zero or not matters, and the bytes are taken back
    # in memory order); eight NumPy calls, about 3x faster than zlib on a 760-byte helper
    w = np.frombuffer(old, dtype=np.uint64) ^ \
        np.frombuffer(new + bytes(pad) if pad else new, dtype=np.uint64)
    words = w != 0
    xb = w[words].view(np.uint8)
    rows = xb != 0
    raw = b"".join((np.packbits(words).tobytes(), np.packbits(rows).tobytes(),
                    xb[rows].tobytes()))
    if 4 * ((len(raw) + 2) // 3) + 16 >= 4 * ((n + 2) // 3):
        return None
    return b2a_base64(raw, newline=False).decode("ascii")
