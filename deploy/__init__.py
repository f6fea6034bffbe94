"""How a pipeline runs: the local runner and the ``shiftwatch`` command line."""

from __future__ import annotations

from deploy.local import Pipeline, RunSummary

__all__ = ["Pipeline", "RunSummary", "main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``shiftwatch`` console script."""
    from deploy.cli import main as _main

    return _main(argv)
