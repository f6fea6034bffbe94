"""Sinks: where results go.

The runner calls, in this order: ``open()`` once before the first record; ``write(records)``
with each micro-batch of output records (dicts); ``write_inputs(records)`` with the matching
input records (only sinks that set ``wants_inputs = True``, e.g. the evaluating sink that plots
the series); ``write_dead_letters(records)`` with the dead-letter records (only sinks that set
``wants_dead_letters = True``); ``flush()`` periodically and on Ctrl-C; ``close()`` once, in
``finally``, also after an error or an interrupt. ``summary()`` is read after ``close()``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["Sink"]


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
