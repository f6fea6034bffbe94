"""Sinks: where results go.

The runner calls, in this order: ``open()`` once before the first record; ``write(records)``
with each micro-batch of output records (dicts); ``write_inputs(records)`` with the matching
input records (only sinks that set ``wants_inputs = True``, e.g. the evaluating sink that plots
the series); ``write_dead_letters(records)`` with the dead-letter records (only sinks that set
``wants_dead_letters = True``); ``flush()`` periodically and on Ctrl-C; ``close()`` once, in
``finally``, also after an error or an interrupt. ``summary()`` is read after ``close()``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Sink", "per_key_number"]


class Sink:
    """Base class of sinks. Subclasses override what they need."""

    #: Set to True to receive the input records through :meth:`write_inputs`.
    wants_inputs: bool = False

    def open(self) -> None:
        """Called once before the first write. May raise ``OSError`` (the run stops)."""

    def write(self, records: Sequence[dict]) -> None:
        """Receive a batch of output records, in processing order."""

    #: Set to True to receive the dead-letter records through :meth:`write_dead_letters`.
    wants_dead_letters: bool = False

    def write_inputs(self, records: Sequence[dict]) -> None:
        """Receive a batch of input records (only if ``wants_inputs``)."""

    def write_dead_letters(self, records: Sequence[dict]) -> None:
        """Receive dead-letter records (only if ``wants_dead_letters``)."""

    def flush(self) -> None:
        """Make what was written durable (files flushed). Called periodically and on Ctrl-C."""

    def close(self) -> None:
        """Flush and release resources. Called once, in ``finally``."""
        self.flush()

    def summary(self) -> dict:
        """A small JSON-able dict for the run summary (counts, paths)."""
        return {}


def per_key_number(holder: Any, attr: str, columns: Any, make: Callable[[Any], Any]) -> list:
    """``make(key)`` of each of ``columns.keys``, kept by the key's number in the run
    (``columns.gids``, numbers of ``columns.gid_space``: the replay's columnar path) in
    ``holder``'s attribute ``attr``: a key met before is found by its number, without a
    lookup per key and batch; the keys met for the first time are made in order."""
    space, table = getattr(holder, attr, None) or (None, None)
    if space is not columns.gid_space:
        space, table = columns.gid_space, []
    g = columns.gids.tolist()
    top = max(g) + 1 if g else 0
    if top > len(table):
        table.extend([None] * (top - len(table)))
    got = list(map(table.__getitem__, g))
    if None in got:
        keys = columns.keys
        for j, v in enumerate(got):
            if v is None:
                got[j] = table[g[j]] = make(keys[j])
    setattr(holder, attr, (space, table))
    return got
