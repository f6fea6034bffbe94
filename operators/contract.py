"""The operator contract: :class:`Operator`, the base class of every stream operator."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from shiftwatch.operators.state_codec import decode_state, encode_state
from shiftwatch.records import MAX_ABS, PASSTHROUGH_FIELDS, BadInput, DeadLetter

__all__ = ["Operator", "params_of"]


def params_of(cls: type, init: Any) -> Any:
    """Give ``init`` (an operator's ``def __init__(self, *args, <own keyword-only parameters>,
    **params)``) the parameters of ``cls``'s constructor followed by its own, so an operator
    that wraps a detector defines none of the detector's parameters a second time.

    The decorated ``__init__`` stores every parameter under its own name (River style) and
    then runs the original body, which validates and ends with ``self._reset()``. Its
    signature (``inspect.signature``, ``clone``, ``repr``, the registry) is the combined
    one; positional arguments, unknown names and duplicates fail as Python's own calls do.
    The operator class also names ``cls`` in a ``params_from = "module.Class"`` attribute,
    which :mod:`~shiftwatch.operators.source_info` reads to list the parameters without
    importing the modules.
    """
    base = [p for p in inspect.signature(cls.__init__).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    own = [p.replace(kind=p.POSITIONAL_OR_KEYWORD)
           for p in inspect.signature(init).parameters.values() if p.kind == p.KEYWORD_ONLY]
    signature = inspect.Signature([*base, *own])

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        names = list(bound.arguments)
        for name in names[1:]:
            setattr(self, name, bound.arguments[name])
        init(self, **{p.name: bound.arguments[p.name] for p in own})

    __init__.__signature__ = signature  # type: ignore[attr-defined]
    __init__.__doc__ = init.__doc__
    __init__.__qualname__ = init.__qualname__
    return __init__


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
    * ``max_abs`` — the largest magnitude of a number it accepts in a value (default
      :data:`~shiftwatch.records.MAX_ABS`, 1e150, whose square is still finite);
      larger ones are rejected with :class:`BadInput` naming the limit, as is anything
      that would make the state infinite or NaN;
    * ``_state_exclude`` — underscore attributes that are configuration, not state.
    """

    # No instance attributes here: a subclass may declare __slots__ to save memory per key.
    __slots__ = ()

    name: ClassVar[str] = ""
    input_kind: ClassVar[str] = "scalar"
    max_abs: ClassVar[float] = MAX_ABS
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

    def warm_up(self) -> int | None:
        """The fewest records a key needs before this operator can raise an alarm (a lower
        bound read from its parameters), or None: not a detector, or no bound known. See
        :func:`~shiftwatch.operators.sensitivity.warm_up_of`."""
        from shiftwatch.operators.sensitivity import warm_up_of

        return warm_up_of(self)

    def flush(self) -> list[dict]:
        """Outputs still held back when a replay's stream ends (e.g. the records of an
        embedding's burn-in, before its period is known); none by default.

        Called by the local runner once, after the last record (not after Ctrl-C); the
        Kafka stage never calls it, as its streams do not end. The outputs go through the
        rest of the operator chain like any others.
        """
        return []

    def _dead_letter(self, record: Any, exc: Exception) -> DeadLetter:
        origin = {"operator": self.name or type(self).__name__}
        if isinstance(record, Mapping):
            for f in ("key", "offset"):
                if f in record:
                    origin[f] = record[f]
        return DeadLetter(raw=record, reason=str(exc), origin=origin)

    def _keyed_store(self) -> Any:
        """A store keeping every key's state of ``Keyed(self)`` in arrays, or None.

        None (the default): :class:`~shiftwatch.operators.keyed.Keyed` keeps one clone of the
        operator per key. An operator may return an object with the same outputs and per-key
        ``state_dict`` that runs a micro-batch of many keys at once (see
        :class:`~shiftwatch.operators.confseq.fleet.ConfSeqFleet`). A store has what ``Keyed``
        delegates to: ``process(record, owner)``, ``process_batch(records, owner)`` (``owner``
        the ``Keyed``, for its dead letters), ``existing(key)``, ``object_for(key)``,
        ``load_key(key, state)``, ``keys`` and ``len()``.
        """
        return None

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
        # a class's constructor does not change: read its signature once (clone, which
        # reads it, runs once per key restored)
        names = cls.__dict__.get("_param_names_cache")
        if names is None or names[0] is not cls.__init__:
            sig = inspect.signature(cls.__init__)
            names = (cls.__init__, tuple(
                p.name for p in sig.parameters.values()
                if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)))
            cls._param_names_cache = names
        return list(names[1])

    def _get_params(self) -> dict:
        """The constructor arguments, read back from the attributes of the same name."""
        return {name: getattr(self, name) for name in self._param_names()}

    def all_params(self) -> dict:
        """Every parameter with the value in use, defaults included (what a report records
        of the run); the constructor's by default."""
        return self._get_params()

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
