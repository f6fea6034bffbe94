"""Which true change points belong to which key: one rule for ``replay`` and ``calibrate``.

Labels are positions in each key's own stream (0-based: the ``n``-th record of that key). They
come as

* a list ``[120, 480]``: the same positions for every key;
* a mapping whose names are **keys of the stream**: ``{"s1": [120], "s2": []}`` or, with
  several annotators, ``{"s1": {"ann1": [120], "ann2": [118]}}``. ``[]`` says the key never
  changed; a key left out is not scored; the name ``"*"`` (:data:`EVERY_KEY`) gives the
  labels of every key the mapping does not name (``{"*": {"ann1": [...], "ann2": [...]}}``:
  annotators for every key);
* in an **unkeyed** stream (no record has a key) there is no key to name, so the names of
  ``{"ann1": [...], "ann2": [...]}`` are annotators, and a one-entry
  ``{"data set": {"ann1": [...]}}`` (a TCPD annotations file) applies to the series.

A mapping naming anything that is not a key of a keyed stream is an error
(:class:`LabelsError`) naming what is unknown and some of the keys: a typo'd key must not
silently turn into an annotator whose points apply to every key.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

__all__ = ["EVERY_KEY", "LabelsError", "LabelPlan", "plan_labels", "positions_of"]

#: The name that, in a labels mapping, stands for every key the mapping does not name.
EVERY_KEY = "*"
#: The key text of records without a key (``key_text(None)``).
_UNKEYED = "None"


class LabelsError(ValueError):
    """A labels mapping that names what is not a key of the stream (a mistake the user can
    fix: the command line prints it as one line, exit status 2)."""


class LabelPlan:
    """The labels of each key, resolved against the keys of the stream.

    ``mode`` is ``"per key"``, ``"shared by all keys"`` or None (no labels);
    :meth:`for_key` gives a key's labels (a list, or ``{annotator: list}``) or None when the
    key is not labelled.
    """

    def __init__(self, mode: str | None, shared: Any = None,
                 per_key: Mapping[str, Any] | None = None, default: Any = None):
        self.mode = mode
        self._shared = shared
        self._per_key = per_key or {}
        self._default = default

    def for_key(self, key_text: str) -> Any:
        if self.mode is None:
            return None
        if self.mode == "shared by all keys":
            return self._shared
        found = self._per_key.get(key_text)
        return found if found is not None else self._default

    @property
    def labelled_all(self) -> bool:
        """Whether every key has labels (a shared list, or a ``"*"`` entry)."""
        return self.mode == "shared by all keys" or self._default is not None


def _as_annotations(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {str(a): list(p) for a, p in v.items()}
    return list(v)


def plan_labels(labels: Mapping | Sequence | None, keys: Collection[str]) -> LabelPlan:
    """Resolve ``labels`` against ``keys`` (the key texts of the stream, ``"None"`` for
    records without a key); raise :class:`LabelsError` for names that are not keys.

    >>> plan_labels({"s1": [120], "*": [5]}, {"s1", "s2"}).for_key("s2")
    [5]
    >>> plan_labels({"ann1": [120], "ann2": [118]}, {"None"}).for_key("None")
    {'ann1': [120], 'ann2': [118]}
    >>> plan_labels({"pumpb": [899], "pump-a": []}, ["pump-a", "pump-b", "pump-c"])
    Traceback (most recent call last):
    ...
    shiftwatch.sinks.labels.LabelsError: 'pumpb' is not a key of the stream (3 keys: pump-a, \
pump-b, pump-c; did you mean pump-b?); a labels file names keys of the stream, or gives \
{"*": [...]} (or {"*": {"annotator": [...]}}) for every key
    """
    if labels is None or len(labels) == 0:
        return LabelPlan(None)
    if not isinstance(labels, Mapping):
        return LabelPlan("shared by all keys", shared=list(labels))
    names = {str(n): v for n, v in labels.items()}
    keyset = keys if isinstance(keys, (set, frozenset, dict)) else set(keys)
    unkeyed = not keyset or set(keyset) <= {_UNKEYED}
    if set(names) == {EVERY_KEY}:
        return LabelPlan("shared by all keys", shared=_as_annotations(names[EVERY_KEY]))
    if unkeyed and not (set(names) - {EVERY_KEY}) & set(keyset):
        nested = all(isinstance(v, Mapping) for v in names.values())
        if not nested:  # {annotator: [positions]} for the one series
            return LabelPlan("shared by all keys", shared=_as_annotations(names))
        if len(names) == 1:  # a TCPD file: {data set: {annotator: [positions]}}
            return LabelPlan("shared by all keys",
                             shared=_as_annotations(next(iter(names.values()))))
    unknown = [n for n in names if n != EVERY_KEY and n not in keyset]
    if unknown:
        raise LabelsError(_unknown_message(unknown, keyset))
    per_key = {n: _as_annotations(v) for n, v in names.items() if n != EVERY_KEY}
    default = names.get(EVERY_KEY)
    return LabelPlan("per key", per_key=per_key,
                     default=None if default is None else _as_annotations(default))


def _unknown_message(unknown: list[str], keys: Collection[str], shown: int = 5) -> str:
    from shiftwatch.sinks.key_names import key_label

    listed = ", ".join(repr(key_label(u)) for u in unknown[:shown])
    more = ", ..." if len(unknown) > shown else ""
    what = (f"{listed} is not a key" if len(unknown) == 1 else
            f"{len(unknown)} names are not keys ({listed}{more})")
    close: list[str] = []
    if len(keys) <= 100_000:  # difflib over a huge fleet would take seconds
        pool = list(keys)
        for u in unknown[:shown]:
            close += [c for c in difflib.get_close_matches(u, pool, n=1, cutoff=0.6)
                      if c not in close]
    import heapq

    some = (close + [k for k in heapq.nsmallest(shown + len(close), keys)
                     if k not in close])[:shown]
    hint = f"; did you mean {', '.join(key_label(c) for c in close)}?" if close else ""
    known = "the stream has no keyed records" if not keys or set(keys) <= {_UNKEYED} else (
        f"{len(keys):,} key{'' if len(keys) == 1 else 's'}"
        f"{', e.g.' if len(keys) > len(some) else ':'} "
        + ", ".join(key_label(k) for k in sorted(some)))
    return (f"{what} of the stream ({known}{hint}); a labels file names keys of the stream, "
            'or gives {"*": [...]} (or {"*": {"annotator": [...]}}) for every key')


def positions_of(annotations: Any) -> list[int]:
    """Every position of one key's labels (a list or ``{annotator: list}``), sorted, once.

    >>> positions_of({"a": [120, 5], "b": [118]}), positions_of([3, 3]), positions_of(None)
    ([5, 118, 120], [3], [])
    """
    if annotations is None:
        return []
    groups: Iterable = (annotations.values() if isinstance(annotations, Mapping)
                        else [annotations])
    return sorted({int(c) for g in groups for c in g})
