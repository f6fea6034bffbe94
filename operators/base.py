"""The ground floor: the record, dead letters, the operator contract, the registry, `Keyed`.

This module imports nothing else from shiftwatch. `streams`, `sinks` and `deploy` import it.

A record is a small JSON-serialisable mapping::

    {"key": "sensor-17", "ts": 1712345678.25, "value": 0.3, "y": None, "task": None, "meta": {}}

The runtime adds ``offset`` (the position of the record in its source or partition); operators
copy ``key``, ``ts``, ``offset``, ``y`` and ``task`` into their outputs so that a downstream
sink can score them.
"""

from __future__ import annotations

import base64
import inspect
import json
import math
import numbers
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

__all__ = [
    "BadInput",
    "DeadLetter",
    "Operator",
    "Keyed",
    "WithInput",
    "OperatorInfo",
    "PASSTHROUGH_FIELDS",
    "register",
    "register_prefix",
    "create",
    "resolve",
    "list_operators",
    "registered_names",
    "get_field",
    "as_scalar",
    "as_array",
    "encode_state",
    "decode_state",
    "dumps_state",
    "loads_state",
]

#: Fields that travel from an input record to the outputs it produces.
PASSTHROUGH_FIELDS = ("key", "ts", "offset", "y", "task")


# --------------------------------------------------------------------------------------
# Bad input and dead letters
# --------------------------------------------------------------------------------------


class BadInput(ValueError):
    """Raised by a source or an operator for one record it cannot take.

    The operator's state is left exactly as it was before the record. The runner turns the
    exception into a :class:`DeadLetter` and goes on with the next record.
    """


@dataclass
class DeadLetter:
    """A record that could not be processed, with why and where it came from.

    Parameters
    ----------
    raw
        The original input: a line of text, the bytes of a Kafka message (decoded as UTF-8
        with replacement), or the record mapping.
    reason
        One line saying what was wrong.
    origin
        Where it came from, e.g. ``{"file": "x.csv", "line": 12}`` or
        ``{"operator": "river:ADWIN", "key": "s1", "offset": 7}``.

    Examples
    --------
    >>> DeadLetter(raw="1,abc", reason="value: 'abc' is not a number",
    ...            origin={"file": "x.csv", "line": 3}).to_record()["reason"]
    "value: 'abc' is not a number"
    """

    raw: Any
    reason: str
    origin: dict = field(default_factory=dict)

    def to_record(self) -> dict:
        raw = self.raw
        if isinstance(raw, (bytes, bytearray)):
            raw = bytes(raw).decode("utf-8", errors="replace")
        try:
            json.dumps(raw, allow_nan=False)
        except (TypeError, ValueError):
            raw = repr(raw)
        return {"dead_letter": True, "reason": self.reason, "origin": dict(self.origin), "raw": raw}


# --------------------------------------------------------------------------------------
# Record helpers
# --------------------------------------------------------------------------------------

_MISSING = object()


def get_field(record: Mapping, path: str, default: Any = _MISSING) -> Any:
    """Read ``path`` (dotted for nested mappings: ``"meta.temp"``) from ``record``.

    Raises :class:`BadInput` when the field is missing and no default is given.

    >>> get_field({"value": 1.5, "meta": {"t": 2}}, "meta.t")
    2
    """
    if not isinstance(record, Mapping):
        raise BadInput(f"record is a {type(record).__name__}, not a mapping")
    cur: Any = record
    for part in path.split("."):
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        else:
            if default is not _MISSING:
                return default
            raise BadInput(f"record has no field {path!r}")
    return cur


def as_scalar(value: Any, name: str = "value") -> float:
    """Return ``value`` as a finite float or raise :class:`BadInput`.

    >>> as_scalar("2.5")
    2.5
    >>> as_scalar(float("nan"))
    Traceback (most recent call last):
    ...
    shiftwatch.operators.base.BadInput: value is not finite: nan
    """
    if isinstance(value, (bool, np.bool_)):
        return float(value)
    if isinstance(value, numbers.Real):
        try:
            x = float(value)
        except OverflowError:
            raise BadInput(f"{name} is too large for a float") from None
    elif isinstance(value, str):
        try:
            x = float(value)
        except ValueError:
            raise BadInput(f"{name} {value[:40]!r} is not a number") from None
    elif isinstance(value, (list, tuple, np.ndarray)):
        try:
            arr = np.asarray(value, dtype=object)
        except ValueError:  # ragged nesting
            raise BadInput(f"{name} is a ragged nested list, expected a number") from None
        if arr.size != 1:
            raise BadInput(f"{name} has shape {arr.shape}, expected a number")
        return as_scalar(arr.reshape(-1)[0], name)
    else:
        raise BadInput(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(x):
        raise BadInput(f"{name} is not finite: {x}")
    return x


def as_array(value: Any, ndim: int | None = None, shape: tuple | None = None,
             name: str = "value") -> np.ndarray:
    """Return ``value`` as a finite float64 array of the given rank/shape or raise BadInput.

    ``shape`` entries may be ``None`` for "any length".

    >>> as_array([1, 2, 3], ndim=1).tolist()
    [1.0, 2.0, 3.0]
    >>> as_array([[1, 2]], shape=(2, 2))
    Traceback (most recent call last):
    ...
    shiftwatch.operators.base.BadInput: value has shape (1, 2), expected (2, 2)
    """
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise BadInput(f"{name} is not a numeric array") from None
    if ndim is not None and arr.ndim != ndim:
        raise BadInput(f"{name} has {arr.ndim} dimensions, expected {ndim}")
    if shape is not None:
        if arr.ndim != len(shape) or any(
                s is not None and s != a for s, a in zip(shape, arr.shape, strict=True)):
            want = tuple("*" if s is None else s for s in shape)
            raise BadInput(f"{name} has shape {arr.shape}, expected {want}".replace("'", ""))
    if not np.all(np.isfinite(arr)):
        raise BadInput(f"{name} contains NaN or infinite entries")
    return arr


# --------------------------------------------------------------------------------------
# Safe state codec: JSON plus base64 NumPy arrays. No pickle.
# --------------------------------------------------------------------------------------

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
    if isinstance(obj, list):
        return [decode_state(v) for v in obj]
    if isinstance(obj, dict):
        if _ND in obj:
            if obj[_ND] is None:
                flat = np.empty(len(obj["items"]), dtype=object)
                flat[:] = [decode_state(v) for v in obj["items"]]
                return flat.reshape(obj["shape"])
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


def _hashable(x: Any) -> Any:
    return tuple(_hashable(v) for v in x) if isinstance(x, list) else x


#: (encode, decode) pairs tried for objects the core codec does not know. Each returns
#: ``NotImplemented`` for values that are not its own.
_STATE_EXTENSIONS: list[tuple[Callable[[Any], Any], Callable[[Any], Any]]] = []


def register_state_extension(encode: Callable[[Any], Any], decode: Callable[[Any], Any],
                             marker: str | None = None) -> None:
    """Teach the state codec a new type (torch tensors, River internals, ...).

    ``encode(obj)`` returns a JSON-able value (typically a dict tagged with ``marker``) or
    ``NotImplemented``; ``decode(d)`` is called on every dict the core codec does not know and
    returns the value or ``NotImplemented``. Giving ``marker`` (the tag key of the extension's
    dicts) makes :func:`encode_state` escape plain dicts that happen to hold that key, so they
    are never mistaken for the extension's values.
    """
    if marker is not None:
        _RESERVED_KEYS.add(marker)
    if not any(e == encode and d == decode for e, d in _STATE_EXTENSIONS):
        _STATE_EXTENSIONS.append((encode, decode))


def dumps_state(state: Any) -> bytes:
    """Serialise a state_dict to UTF-8 JSON bytes (the changelog and checkpoint format)."""
    return json.dumps(encode_state(state), separators=(",", ":"), allow_nan=False).encode()


def loads_state(data: bytes | str) -> Any:
    """Inverse of :func:`dumps_state`."""
    return decode_state(json.loads(data))


# --------------------------------------------------------------------------------------
# The operator contract
# --------------------------------------------------------------------------------------


class Operator:
    """Base class of every stream operator.

    Subclasses follow River's conventions: ``__init__`` stores each argument unchanged under
    its own name, calls :meth:`_validate_params` and then :meth:`_reset`, which creates all
    learned state on attributes with a leading underscore.

    The default :meth:`state_dict` captures every underscore attribute (plain values and
    NumPy arrays); operators whose state holds other objects override :meth:`state_dict`
    and :meth:`load_state_dict`.

    Class attributes a subclass sets:

    * ``name`` — the registered name (set by :func:`register`);
    * ``input_kind`` — a one-line description of the values it accepts (for ``list``);
    * ``_state_exclude`` — underscore attributes that are configuration, not state.
    """

    # No instance attributes here: a subclass may declare __slots__ to save memory per key.
    __slots__ = ()

    name: ClassVar[str] = ""
    input_kind: ClassVar[str] = "scalar"
    _state_exclude: ClassVar[tuple[str, ...]] = ()

    # ---- lifecycle ------------------------------------------------------------------

    def _validate_params(self) -> None:
        """Raise ``ValueError`` naming the parameter and the allowed values."""

    def _reset(self) -> None:
        """Create the learned state (underscore attributes)."""

    # ---- processing -----------------------------------------------------------------

    def process(self, record: Mapping) -> list[dict]:
        """Process one record and return zero or more output records.

        Raises :class:`BadInput` for a record the operator cannot take; the state is then
        unchanged.
        """
        raise NotImplementedError

    def process_batch(self, records: Iterable[Mapping]) -> list[dict | DeadLetter]:
        """Process records in order; same outputs as :meth:`process` in a loop.

        A record that raises :class:`BadInput` becomes a :class:`DeadLetter` at its place in
        the output list and processing goes on. Hot operators override this with a kernel.
        """
        out: list[dict | DeadLetter] = []
        for record in records:
            try:
                out.extend(self.process(record))
            except BadInput as exc:
                out.append(self._dead_letter(record, exc))
        return out

    def _dead_letter(self, record: Any, exc: Exception) -> DeadLetter:
        origin = {"operator": self.name or type(self).__name__}
        if isinstance(record, Mapping):
            for f in ("key", "offset"):
                if f in record:
                    origin[f] = record[f]
        return DeadLetter(raw=record, reason=str(exc), origin=origin)

    @staticmethod
    def _output(record: Mapping, **fields: Any) -> dict:
        """An output record: the input's passthrough fields plus ``fields``."""
        out = {f: record[f] for f in PASSTHROUGH_FIELDS if f in record}
        if fields:
            out.update(fields)
        return out

    # ---- parameters -----------------------------------------------------------------

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values()
                if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def _get_params(self) -> dict:
        """The constructor arguments, read back from the attributes of the same name."""
        return {name: getattr(self, name) for name in self._param_names()}

    def clone(self, **new_params: Any) -> Operator:
        """A fresh operator with the same parameters (overridden by ``new_params``)."""
        params = {**self._get_params(), **new_params}
        return type(self)(**params)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._get_params().items())
        return f"{type(self).__name__}({args})"

    # ---- state ----------------------------------------------------------------------

    def _state_attributes(self) -> list[str]:
        return [k for k in vars(self) if k.startswith("_") and not k.startswith("__")
                and k not in self._state_exclude]

    def state_dict(self) -> dict:
        """The full learned state as plain JSON-able values and NumPy arrays.

        The returned structure shares no mutable objects with the operator.
        """
        return {"operator": self.name or type(self).__name__,
                "state": decode_state(encode_state(
                    {k: getattr(self, k) for k in self._state_attributes()}))}

    def load_state_dict(self, state: Mapping) -> None:
        """Restore a state produced by :meth:`state_dict` of an operator with equal params."""
        payload = self._state_payload(state)
        self._reset()
        for k, v in decode_state(encode_state(dict(payload))).items():
            setattr(self, k, v)

    def _state_payload(self, state: Any) -> Mapping:
        """The ``state`` entry of a state_dict, after checking it is this operator's.

        Raises ``ValueError`` (one line) for a malformed state_dict or another operator's.
        """
        if not isinstance(state, Mapping) or not isinstance(state.get("state"), Mapping):
            raise ValueError("state_dict has no 'state' entry")
        want = self.name or type(self).__name__
        if state.get("operator", want) != want:
            raise ValueError(f"state_dict is for operator {state.get('operator')!r}, not {want!r}")
        return state["state"]

    # ---- hooks for the shared check suite (operators/checks.py) -----------------------

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict]:
        """Parameter sets the check suite constructs the operator with."""
        yield {}

    @classmethod
    def _test_stream(cls, params: dict, n: int = 300, seed: int = 0) -> list[dict]:
        """A valid input stream for the check suite: a scalar Gaussian with a mean shift."""
        rng = np.random.default_rng(seed)
        x = rng.normal(0.0, 1.0, n)
        x[n // 2:] += 3.0
        return [{"key": "k", "ts": float(i), "offset": i, "value": float(v)}
                for i, v in enumerate(x)]

    @classmethod
    def _bad_records(cls, params: dict) -> list[dict]:
        """Records the operator must reject with :class:`BadInput`."""
        return [{"key": "k", "value": float("nan")}, {"key": "k", "value": "abc"},
                {"key": "k"}, {"key": "k", "value": [[1.0, 2.0], [3.0]]}]


# --------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------

_REGISTRY: dict[str, type[Operator]] = {}
_PREFIXES: dict[str, tuple[Callable[[str], Callable[..., Operator]], Callable[[], list[str]]]] = {}


@dataclass
class OperatorInfo:
    """What ``shiftwatch operators`` prints for one operator."""

    name: str
    summary: str
    params: dict  # name -> default (inspect.Parameter.empty shown as "required")
    input_kind: str


def register(name: str) -> Callable[[type[Operator]], type[Operator]]:
    """Class decorator: make an operator constructible by ``name`` from configs and the CLI."""

    def deco(cls: type[Operator]) -> type[Operator]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"operator name {name!r} is already registered")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def register_prefix(prefix: str, factory: Callable[[str], Callable[..., Operator]],
                    names: Callable[[], list[str]]) -> None:
    """Register a family of operators named ``prefix:NAME`` (e.g. ``river:ADWIN``).

    ``factory(NAME)`` returns a callable taking keyword parameters; ``names()`` lists NAMEs.
    """
    _PREFIXES[prefix] = (factory, names)


def _load_builtin() -> None:
    # Importing the package registers every built-in operator.
    import shiftwatch.operators  # noqa: F401


def resolve(name: str) -> Callable[..., Operator]:
    """Return a constructor for the operator registered as ``name``."""
    _load_builtin()
    if name in _REGISTRY:
        return _REGISTRY[name]
    prefix, sep, rest = name.partition(":")
    if sep and prefix in _PREFIXES:
        return _PREFIXES[prefix][0](rest)
    known = ", ".join(registered_names()[:12])
    raise ValueError(f"unknown operator {name!r}; known operators include: {known} "
                     "(run `shiftwatch operators` for all)")


def create(name: str, keep_input: bool = False, **params: Any) -> Operator:
    """Construct the operator registered as ``name`` with keyword ``params``.

    Unknown or invalid parameters raise ``ValueError`` with one clear line. ``keep_input=True``
    (accepted by every operator, ``--param keep_input=true`` on the command line) wraps the
    operator in :class:`WithInput`, so its outputs also carry the input record's fields, e.g.
    a detector's alarms next to the feature vector for a learner chained after it.
    """
    if not isinstance(keep_input, bool):
        raise ValueError(f"keep_input must be true or false, got {keep_input!r}")
    if keep_input:
        return WithInput(create(name, **params))
    ctor = resolve(name)
    accepted = _accepted_params(ctor)
    if accepted is not None:
        unknown = sorted(set(params) - set(accepted))
        if unknown:
            raise ValueError(f"operator {name!r} has no parameter {', '.join(map(repr, unknown))};"
                             f" parameters: {', '.join(accepted) or '(none)'}")
    try:
        return ctor(**params)
    except TypeError as exc:
        raise ValueError(f"operator {name!r}: {exc}") from None


def _accepted_params(ctor: Callable[..., Any]) -> list[str] | None:
    target = ctor.__init__ if isinstance(ctor, type) else ctor
    names = getattr(ctor, "accepted_params", None)
    if names is not None:
        return list(names)
    sig = inspect.signature(target)
    if any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    return [p.name for p in sig.parameters.values() if p.name != "self"]


def registered_names() -> list[str]:
    """Every name :func:`create` accepts, prefixed families expanded."""
    _load_builtin()
    names = sorted(_REGISTRY)
    for prefix, (_, lister) in sorted(_PREFIXES.items()):
        names += [f"{prefix}:{n}" for n in lister()]
    return names


def list_operators() -> list[OperatorInfo]:
    """Name, one-line summary, parameters with defaults, and accepted input of each operator."""
    infos = []
    for name in registered_names():
        ctor = resolve(name)
        info = getattr(ctor, "info", None)
        if callable(info):
            infos.append(info())
            continue
        doc = inspect.getdoc(ctor) or ""
        sig = inspect.signature(ctor)
        params = {p.name: ("required" if p.default is p.empty else p.default)
                  for p in sig.parameters.values() if p.kind not in (p.VAR_KEYWORD,)}
        infos.append(OperatorInfo(name=name, summary=doc.split("\n")[0], params=params,
                                  input_kind=getattr(ctor, "input_kind", "")))
    return infos


# --------------------------------------------------------------------------------------
# WithInput: outputs that also carry their input's fields
# --------------------------------------------------------------------------------------


class WithInput(Operator):
    """Wrap an operator so that each output also carries the fields of its input record.

    An output's own fields win over the input's (a transform's new ``value`` replaces the
    old one). Detectors emit ``alarm`` and ``statistic`` but not the input ``value``; wrapped,
    their outputs can feed a stage that needs the input too, e.g. a learner that takes the
    detector's alarms as task boundaries. The state is the wrapped operator's.

    Examples
    --------
    >>> class Sign(Operator):
    ...     def __init__(self):
    ...         self._reset()
    ...     def process(self, record):
    ...         return [self._output(record, alarm=record["value"] < 0)]
    >>> WithInput(Sign()).process({"value": -2.0, "y": 1, "meta": {"site": "a"}})
    [{'y': 1, 'alarm': True, 'value': -2.0, 'meta': {'site': 'a'}}]
    """

    def __init__(self, operator: Operator):
        if not isinstance(operator, Operator):
            raise ValueError(f"operator must be an Operator, got {type(operator).__name__}")
        self.operator = operator

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.operator.name

    @property
    def input_kind(self) -> str:  # type: ignore[override]
        return self.operator.input_kind

    @staticmethod
    def _merge(record: Any, out: Any) -> Any:
        if isinstance(out, DeadLetter) or not isinstance(record, Mapping):
            return out
        merged = dict(out)
        for k, v in record.items():
            merged.setdefault(k, v)
        return merged

    def process(self, record: Mapping) -> list[dict]:
        return [self._merge(record, o) for o in self.operator.process(record)]

    def process_batch(self, records: Iterable[Mapping]) -> list[dict | DeadLetter]:
        records = list(records)
        offsets = [r.get("offset") if isinstance(r, Mapping) else None for r in records]
        if None in offsets or len(set(offsets)) != len(offsets):
            # Without unique offsets an output cannot be matched to its input: go one by one.
            return super().process_batch(records)
        by_offset = dict(zip(offsets, records, strict=True))
        return [o if isinstance(o, DeadLetter) else self._merge(by_offset.get(o.get("offset")), o)
                for o in self.operator.process_batch(records)]

    def state_dict(self) -> dict:
        return self.operator.state_dict()

    def load_state_dict(self, state: Mapping) -> None:
        self.operator.load_state_dict(state)

    def clone(self, **new_params: Any) -> Operator:
        return WithInput(self.operator.clone(**new_params))

    def _get_params(self) -> dict:
        # The wrapped operator's parameters plus the flag that made this wrapper.
        return {**self.operator._get_params(), "keep_input": True}

    def __repr__(self) -> str:
        return f"WithInput({self.operator!r})"


# --------------------------------------------------------------------------------------
# Keyed: one operator state per record key
# --------------------------------------------------------------------------------------


class Keyed(Operator):
    """One independent operator per record ``key``, created on first sight of the key.

    Parameters
    ----------
    operator
        A template operator (it is cloned for every new key and never used itself) or a
        zero-argument factory returning a fresh operator.

    Notes
    -----
    :meth:`process_batch` groups the batch by key and hands each group to the per-key
    operator's own ``process_batch`` (so batch kernels run over the whole group). Its
    outputs come grouped by key, keys in order of first appearance, each key's outputs in
    input order: the same outputs as :meth:`process` in a loop, except for the interleaving
    of different keys, which carries no meaning because keys are independent. A record
    without a ``key`` belongs to the key ``None``; a list key is used as a tuple, and a key
    that cannot be hashed (a JSON object) makes the record a dead letter. A key is kept only
    once one of its records was accepted, so bad records do not grow the state.

    Examples
    --------
    >>> from shiftwatch.operators.base import Keyed
    >>> class Count(Operator):
    ...     def __init__(self):
    ...         self._reset()
    ...     def _reset(self):
    ...         self._n = 0
    ...     def process(self, record):
    ...         self._n += 1
    ...         return [self._output(record, n=self._n)]
    >>> keyed = Keyed(Count)
    >>> [o["n"] for o in keyed.process_batch(
    ...     [{"key": "a"}, {"key": "b"}, {"key": "a"}])]
    [1, 2, 1]
    >>> sorted(keyed.state_dict()["keys"])
    ['a', 'b']
    """

    name = "keyed"

    def __init__(self, operator: Operator | Callable[[], Operator]):
        self.operator = operator
        self._reset()

    def _reset(self) -> None:
        self._ops: dict[Any, Operator] = {}

    def _new(self) -> Operator:
        op = self.operator
        return op.clone() if isinstance(op, Operator) else op()

    def get(self, key: Any) -> Operator:
        """The operator for ``key``, created if new."""
        op = self._ops.get(key)
        if op is None:
            op = self._ops[key] = self._new()
        return op

    @property
    def keys(self) -> list:
        """The keys seen so far (with at least one accepted record)."""
        return list(self._ops)

    def existing(self, key: Any) -> Operator | None:
        """The operator of ``key`` if the key exists, else None (nothing is created)."""
        return self._ops.get(key)

    @staticmethod
    def normalize_key(key: Any) -> Any:
        """The key as stored: JSON lists become tuples (hashable)."""
        return _key_of(key)

    @staticmethod
    def key_name(key: Any) -> str:
        """The string a key is stored under in :meth:`state_dict` (and in changelogs)."""
        return _key_str(key)

    def __len__(self) -> int:
        return len(self._ops)

    def process(self, record: Mapping) -> list[dict]:
        key = _key_of(record.get("key") if isinstance(record, Mapping) else None)
        op = self._ops.get(key)
        if op is not None:
            return op.process(record)
        # A new key is kept only once a record for it was accepted: a bad record leaves the
        # state (including the set of keys) untouched.
        op = self._new()
        out = op.process(record)
        self._ops[key] = op
        return out

    def process_batch(self, records: Iterable[Mapping]) -> list[dict | DeadLetter]:
        groups: dict[Any, list] = {}
        for record in records:
            if type(record) is dict:  # the common case, without the Mapping ABC check
                key = record.get("key")
            else:
                key = record.get("key") if isinstance(record, Mapping) else None
            if type(key) is list:
                key = _key_of(key)
            try:
                group = groups.get(key)
            except TypeError:  # an unhashable key, e.g. a JSON object
                key = _BAD_KEY
                group = groups.get(key)
            if group is None:
                group = groups[key] = []
            group.append(record)
        out: list[dict | DeadLetter] = []
        ops = self._ops
        for key, group in groups.items():
            if key is _BAD_KEY:
                out.extend(self._dead_letter(r, BadInput("key is not a string, number or list"))
                           for r in group)
                continue
            op = ops.get(key)
            if op is not None:
                if len(group) == 1:
                    # With many keys most groups hold one record: skip a process_batch call.
                    try:
                        out.extend(op.process(group[0]))
                    except BadInput as exc:
                        out.append(op._dead_letter(group[0], exc))
                else:
                    out.extend(op.process_batch(group))
                continue
            op = self._new()
            res = op.process_batch(group)
            # Every bad record gives exactly one dead letter: if all were bad, the operator
            # is still fresh and the key is not kept.
            if sum(isinstance(r, DeadLetter) for r in res) < len(group):
                self._ops[key] = op
            out.extend(res)
        return out

    def state_dict(self) -> dict:
        return {"operator": "keyed",
                "keys": {_key_str(k): op.state_dict() for k, op in self._ops.items()}}

    def load_state_dict(self, state: Mapping) -> None:
        if not isinstance(state, Mapping) or "keys" not in state:
            raise ValueError("Keyed state_dict has no 'keys' entry")
        self._reset()
        for k, s in state["keys"].items():
            op = self._new()
            op.load_state_dict(s)
            self._ops[_key_unstr(k)] = op

    def _get_params(self) -> dict:
        return {"operator": self.operator}


_BAD_KEY = object()


def _key_of(key: Any) -> Any:
    # Keys from JSON may be (nested) lists; make them hashable.
    return tuple(_key_of(k) for k in key) if isinstance(key, list) else key


def _key_str(key: Any) -> str:
    # Strings starting with NUL are JSON-encoded too, so they cannot pass for a tagged key.
    if isinstance(key, str) and not key.startswith("\x00"):
        return key
    return "\x00json:" + json.dumps(key)


def _key_unstr(s: str) -> Any:
    if s.startswith("\x00json:"):
        return _key_of(json.loads(s[6:]))
    return s
