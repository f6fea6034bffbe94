"""Sources: where records come from.

A source is an iterable of records (dicts, see ``shiftwatch.records``) and
:class:`~shiftwatch.records.DeadLetter` items for input it could not parse. Sources never
write dead letters themselves: the runner routes them.
"""

from __future__ import annotations

from collections.abc import Iterator

from shiftwatch.records import DeadLetter

__all__ = ["Source"]


class Source:
    """Base class of sources.

    Attributes a source may provide (the runner and the evaluating sink read them):

    * ``name`` — a short label used in reports.
    * ``annotations`` — the true change points, ``{annotator_id: [index, ...]}``, indices
      0-based positions in the series of each key (``None`` when unknown).
    * ``length`` — the number of records if known in advance (for the progress bar's ETA).
    """

    name: str = "source"
    annotations: dict[str, list[int]] | None = None
    length: int | None = None

    def __iter__(self) -> Iterator[dict | DeadLetter]:
        raise NotImplementedError

    def close(self) -> None:
        """Release files or connections. Called by the runner in ``finally``."""
