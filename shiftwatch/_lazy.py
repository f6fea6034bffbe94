"""Lazy re-exports for the package ``__init__`` modules (PEP 562).

Each package lists ``public name -> defining module`` once; the name is imported on first
attribute access, so importing a package loads none of its heavy dependencies.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, table: Mapping[str, str], namespace: dict
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose names come from ``table``.

    A module in ``table`` that starts with ``"."`` is relative to ``package``. A loaded
    name is cached in ``namespace`` (the package's globals).
    """

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
