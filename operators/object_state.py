"""A restricted object-graph codec: River detectors (and similar plain objects) as safe JSON.

River's detectors are plain Python objects whose state lives in ``__dict__``, with a few
passengers: ``collections.deque`` windows, ``random.Random`` generators, ``river.stats``
objects, bound methods (``PageHinkley._test_drift``) and, for ADWIN, a compiled helper class
(``river._river_rust.drift.AdaptiveWindowing``) that pickles itself as bytes. Pickle would
round-trip all of that, but unpickling runs whatever callable the payload names.

This codec walks the same protocol pickle uses (``__reduce_ex__(4)``: a reconstructor, its
arguments, a state, list items, dict items) and writes the result as JSON. On the way back it
only imports classes and calls reconstructors from an explicit allowlist, and refuses anything
else with a :class:`StateRefused` error naming the class:

* classes defined in ``river`` and its submodules;
* ``collections.deque``, ``collections.OrderedDict``, ``random.Random``;
* the reconstructors ``copyreg.__newobj__``, ``copyreg.__newobj_ex__`` and
  ``copyreg._reconstructor`` (whose classes are checked against the same allowlist);
* NumPy arrays and scalars of non-object dtypes, stored as their raw bytes.

Floats are stored as JSON numbers (Python's ``repr`` round-trips them exactly) or tagged when
not finite, arrays and bytes as base64, shared references and cycles (an object reachable
twice, a bound method pointing back to its detector) as references, so a decoded graph is an
exact copy and replaying a stream through it gives bit-identical results.

The codec is also registered with
:func:`shiftwatch.operators.state_codec.register_state_extension` under the marker ``"__object__"``:
any operator whose underscore attributes hold River objects can use the
default :meth:`~shiftwatch.operators.contract.Operator.state_dict`.

Examples
--------
>>> import json
>>> from river import drift
>>> ph = drift.PageHinkley(threshold=5.0)
>>> for x in [0.0, 0.1, -0.2] * 20:
...     ph.update(x)
>>> doc = json.dumps(encode_object(ph))
>>> twin = decode_object(json.loads(doc))
>>> type(twin).__name__, twin._sum_increase == ph._sum_increase
('PageHinkley', True)
>>> decode_object({"!obj": 0, "new": {"!global": "os:system"}, "args": ["ls"]})
Traceback (most recent call last):
...
shiftwatch.operators.object_state.StateRefused: refusing to load os.system: not in the state \
allowlist (river.*, collections.deque, collections.OrderedDict, random.Random, numpy arrays)
"""

from __future__ import annotations

import base64
import collections
import copyreg
import importlib
import math
import random
import types
from typing import Any

import numpy as np

from shiftwatch.operators.state_codec import register_state_extension

__all__ = ["StateRefused", "encode_object", "decode_object", "is_allowed_class"]

#: Classes outside ``river.*`` that may appear in a state.
_ALLOWED_CLASSES: dict[str, type] = {
    "collections:deque": collections.deque,
    "collections:OrderedDict": collections.OrderedDict,
    "random:Random": random.Random,
}
#: Reconstructors a ``__reduce_ex__`` may name (besides allowlisted classes themselves).
_RECONSTRUCTORS: dict[str, Any] = {
    "copyreg:__newobj__": copyreg.__newobj__,
    "copyreg:__newobj_ex__": copyreg.__newobj_ex__,
    "copyreg:_reconstructor": copyreg._reconstructor,
}
#: Base classes ``copyreg._reconstructor`` may be given.
_RECONSTRUCTOR_BASES = {"builtins:object": object, "builtins:list": list, "builtins:dict": dict}
_ALLOWLIST_TEXT = ("river.*, collections.deque, collections.OrderedDict, random.Random, "
                   "numpy arrays")

_PRIMITIVES = (type(None), bool, int, str)


class StateRefused(ValueError):
    """A state names a class or callable outside the allowlist, or is malformed."""


def _qualified(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', '?')}"


def _is_river_module(module: str) -> bool:
    return module == "river" or module.startswith("river.")


def is_allowed_class(cls: type) -> bool:
    """Whether objects of ``cls`` may be written to and read from a state.

    >>> from river import drift
    >>> is_allowed_class(drift.ADWIN), is_allowed_class(dict)
    (True, False)
    """
    module = getattr(cls, "__module__", "") or ""
    return _is_river_module(module) or _ALLOWED_CLASSES.get(_qualified(cls)) is cls


def _resolve_global(name: str, allowed: dict[str, Any]) -> Any:
    """Import ``module:qualname`` if allowlisted (river.* or ``allowed``), else refuse."""
    if not isinstance(name, str) or ":" not in name:
        raise StateRefused(f"malformed global reference {name!r}")
    if name in allowed:
        return allowed[name]
    module, _, qualname = name.partition(":")
    if not _is_river_module(module):
        raise StateRefused(f"refusing to load {module}.{qualname}: not in the state allowlist "
                           f"({_ALLOWLIST_TEXT})")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError:
        raise StateRefused(f"cannot import module {module!r} named by the state") from None
    for part in qualname.split("."):
        if part.startswith("__") or not hasattr(obj, part):
            raise StateRefused(f"{module} has no attribute {qualname!r}")
        obj = getattr(obj, part)
    if getattr(obj, "__module__", None) != module:
        # A river module re-exporting something from elsewhere (e.g. ``os``) is not river's.
        raise StateRefused(f"refusing to load {module}.{qualname}: it is defined in "
                           f"{getattr(obj, '__module__', '?')}, not in river")
    return obj


# --------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------


def encode_object(obj: Any) -> Any:
    """Encode an object graph of allowlisted objects as JSON-able values.

    Raises ``TypeError`` for an object whose class is not in the allowlist.
    """
    return _Encoder().encode(obj)


class _Encoder:
    def __init__(self) -> None:
        self.memo: dict[int, int] = {}
        self.keep: list[Any] = []  # keeps ids stable while encoding

    def encode(self, obj: Any) -> Any:
        if isinstance(obj, _PRIMITIVES) and type(obj) in _PRIMITIVES:
            return obj
        if isinstance(obj, (np.generic, np.ndarray)):
            return self._numpy(obj)
        if type(obj) is float:
            return obj if math.isfinite(obj) else {"!float": repr(obj)}
        if type(obj) is list:
            return [self.encode(v) for v in obj]
        if type(obj) is tuple:
            return {"!tuple": [self.encode(v) for v in obj]}
        if type(obj) is dict:
            return {"!dict": [[self.encode(k), self.encode(v)] for k, v in obj.items()]}
        if type(obj) in (bytes, bytearray):
            return {"!bytes": base64.b64encode(bytes(obj)).decode("ascii"),
                    "mutable": type(obj) is bytearray}
        if type(obj) in (set, frozenset):
            return {"!set": [self.encode(v) for v in obj], "frozen": type(obj) is frozenset}
        ref = self.memo.get(id(obj))
        if ref is not None:
            return {"!ref": ref}
        if isinstance(obj, types.MethodType):
            return self._method(obj)
        if isinstance(obj, type) or isinstance(obj, types.FunctionType):
            return self._global(obj)
        return self._reduce(obj)

    def _numpy(self, obj: Any) -> dict:
        arr = np.asarray(obj)
        if arr.dtype.hasobject:
            raise TypeError("cannot encode a NumPy array of Python objects in a state")
        data = base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode("ascii")
        if isinstance(obj, np.generic):
            return {"!npscalar": data, "dtype": arr.dtype.str}
        return {"!ndarray": data, "dtype": arr.dtype.str, "shape": list(arr.shape)}

    def _global(self, obj: Any) -> dict:
        name = _qualified(obj)
        if not (_is_river_module(obj.__module__) or name in _ALLOWED_CLASSES
                or name in _RECONSTRUCTORS or name in _RECONSTRUCTOR_BASES):
            raise TypeError(f"cannot encode a reference to {name} in a state: not in the "
                            f"allowlist ({_ALLOWLIST_TEXT})")
        return {"!global": name}

    def _method(self, obj: types.MethodType) -> dict:
        owner = obj.__self__
        name = obj.__func__.__name__
        if getattr(type(owner), name, None) is not obj.__func__:
            raise TypeError(f"cannot encode bound method {name!r}: not a method of its class")
        return {"!method": name, "self": self.encode(owner)}

    def _reduce(self, obj: Any) -> dict:
        cls = type(obj)
        if not is_allowed_class(cls):
            raise TypeError(f"cannot encode {cls.__module__}.{cls.__qualname__} in a state: "
                            f"not in the allowlist ({_ALLOWLIST_TEXT})")
        rv = obj.__reduce_ex__(4)
        if isinstance(rv, str) or not isinstance(rv, tuple) or not 2 <= len(rv) <= 6:
            raise TypeError(f"cannot encode {cls.__qualname__}: unsupported __reduce_ex__")
        rv = rv + (None,) * (6 - len(rv))
        func, args, state, listitems, dictitems, setstate = rv
        if setstate is not None:
            raise TypeError(f"cannot encode {cls.__qualname__}: custom state setters")
        ref = len(self.memo)
        self.memo[id(obj)] = ref
        self.keep.append(obj)
        out: dict[str, Any] = {"!obj": ref, "new": self.encode(func),
                               "args": [self.encode(a) for a in args]}
        if state is not None:
            out["state"] = self.encode(state)
        if listitems is not None:
            out["items"] = [self.encode(v) for v in listitems]
        if dictitems is not None:
            out["dictitems"] = [[self.encode(k), self.encode(v)] for k, v in dictitems]
        return out


# --------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------


def decode_object(doc: Any) -> Any:
    """Rebuild the object graph written by :func:`encode_object`.

    Raises :class:`StateRefused` (a ``ValueError``) for classes or callables outside the
    allowlist and for malformed documents.
    """
    try:
        return _Decoder().decode(doc)
    except StateRefused:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as exc:
        raise StateRefused(f"malformed object state: {type(exc).__name__}: {exc}") from None


class _Decoder:
    def __init__(self) -> None:
        self.memo: dict[int, Any] = {}

    def decode(self, doc: Any) -> Any:
        if doc is None or isinstance(doc, (bool, int, str, float)):
            return doc
        if isinstance(doc, list):
            return [self.decode(v) for v in doc]
        if not isinstance(doc, dict):
            raise StateRefused(f"unexpected {type(doc).__name__} in an object state")
        if "!float" in doc:
            return float(doc["!float"])
        if "!tuple" in doc:
            return tuple(self.decode(v) for v in doc["!tuple"])
        if "!dict" in doc:
            return {self.decode(k): self.decode(v) for k, v in doc["!dict"]}
        if "!bytes" in doc:
            raw = base64.b64decode(doc["!bytes"])
            return bytearray(raw) if doc.get("mutable") else raw
        if "!set" in doc:
            items = [self.decode(v) for v in doc["!set"]]
            return frozenset(items) if doc.get("frozen") else set(items)
        if "!ndarray" in doc or "!npscalar" in doc:
            return self._numpy(doc)
        if "!ref" in doc:
            ref = doc["!ref"]
            if ref not in self.memo:
                raise StateRefused(f"object reference {ref!r} used before its definition")
            return self.memo[ref]
        if "!global" in doc:
            return _resolve_global(doc["!global"], {**_ALLOWED_CLASSES, **_RECONSTRUCTORS,
                                                    **_RECONSTRUCTOR_BASES})
        if "!method" in doc:
            owner = self.decode(doc["self"])
            name = doc["!method"]
            func = getattr(type(owner), name, None) if isinstance(name, str) else None
            if not isinstance(func, types.FunctionType) or not is_allowed_class(type(owner)):
                raise StateRefused(f"refusing bound method {name!r} of {type(owner).__name__}")
            return types.MethodType(func, owner)
        if "!obj" in doc:
            return self._object(doc)
        raise StateRefused(f"unknown entry in an object state: keys {sorted(doc)[:5]}")

    def _numpy(self, doc: dict) -> Any:
        dtype = np.dtype(doc["dtype"])
        if dtype.hasobject:
            raise StateRefused("refusing a NumPy array of Python objects")
        if "!npscalar" in doc:
            return np.frombuffer(base64.b64decode(doc["!npscalar"]), dtype=dtype)[0]
        buf = base64.b64decode(doc["!ndarray"])
        return np.frombuffer(buf, dtype=dtype).reshape(doc["shape"]).copy()

    def _object(self, doc: dict) -> Any:
        func = self.decode(doc["new"])
        args = [self.decode(a) for a in doc["args"]]
        self._check_call(func, args)
        obj = func(*args)
        self.memo[doc["!obj"]] = obj
        if "state" in doc:
            state = self.decode(doc["state"])
            setstate = getattr(obj, "__setstate__", None)
            if setstate is not None and getattr(type(obj), "__setstate__", None) is not \
                    getattr(object, "__setstate__", None):
                try:
                    setstate(state)
                except (KeyboardInterrupt, SystemExit):
                    raise
                except BaseException as exc:  # noqa: BLE001 - a compiled class's own check
                    # (River's Rust helpers panic on bytes they cannot read: PanicException
                    # is a BaseException) is a refused state, not the end of the process
                    raise StateRefused(f"{type(obj).__name__} refused its state: "
                                       f"{type(exc).__name__}: {str(exc)[:120]}") from None
            else:
                slots = None
                if isinstance(state, tuple) and len(state) == 2:
                    state, slots = state
                if state:
                    obj.__dict__.update(state)
                for k, v in (slots or {}).items():
                    setattr(obj, k, v)
        for item in doc.get("items", ()):
            obj.append(self.decode(item))
        for k, v in doc.get("dictitems", ()):
            obj[self.decode(k)] = self.decode(v)
        return obj

    @staticmethod
    def _check_call(func: Any, args: list) -> None:
        if func is copyreg.__newobj__ or func is copyreg.__newobj_ex__:
            if not args or not isinstance(args[0], type) or not is_allowed_class(args[0]):
                raise StateRefused(f"refusing to construct {args[0] if args else None!r}")
        elif func is copyreg._reconstructor:
            if (len(args) != 3 or not isinstance(args[0], type) or not is_allowed_class(args[0])
                    or args[1] not in _RECONSTRUCTOR_BASES.values()):
                raise StateRefused("refusing copyreg._reconstructor arguments")
        elif not (isinstance(func, type) and is_allowed_class(func)):
            raise StateRefused(f"refusing to call {_qualified(func)}: not an allowed "
                               "reconstructor")


# --------------------------------------------------------------------------------------
# Registration with the core state codec
# --------------------------------------------------------------------------------------

_MARKER = "__object__"


def _encode_extension(obj: Any) -> Any:
    if isinstance(obj, types.MethodType) or is_allowed_class(type(obj)):
        return {_MARKER: encode_object(obj)}
    return NotImplemented


def _decode_extension(doc: dict) -> Any:
    if _MARKER in doc and len(doc) == 1:
        return decode_object(doc[_MARKER])
    return NotImplemented


register_state_extension(_encode_extension, _decode_extension, marker=_MARKER)
