"""WithInput: outputs that also carry their input record's fields (``keep_input=true``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from shiftwatch.operators.contract import Operator
from shiftwatch.records import DeadLetter

__all__ = ["WithInput"]


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

    @property
    def max_abs(self) -> float:  # type: ignore[override]
        return self.operator.max_abs

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

    def all_params(self) -> dict:
        return {**self.operator.all_params(), "keep_input": True}

    def __repr__(self) -> str:
        return f"WithInput({self.operator!r})"
