"""``njit`` for the kernels: Numba's, with an on-disk cache that cannot stop an import.

Every kernel is ``@njit(cache=True)``. Numba looks for a writable folder to cache it in when
the module is imported (``NUMBA_CACHE_DIR``, the ``__pycache__`` beside the source, the
user's cache folder) and, where it finds none, raises ``RuntimeError: cannot cache function
...: no locator available``: the detector then cannot be imported at all. That is the case
of a user without a home (a container's ``useradd --no-create-home``) running an install in
root's site-packages. Here such a kernel is compiled without a cache instead, in every
process, and one warning says how to keep the compiled code (``NUMBA_CACHE_DIR``).

Only the kernel modules import this (it imports Numba), never ``import shiftwatch``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numba

__all__ = ["njit"]

_warned = False


def _warn_once(exc: BaseException) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(f"shiftwatch: Numba has no writable folder to cache compiled kernels in "
                      f"({exc}); they are compiled again in every process: set "
                      f"NUMBA_CACHE_DIR to a writable folder to keep them", RuntimeWarning,
                      stacklevel=3)


def njit(*args: Any, **kwargs: Any) -> Callable:
    """``numba.njit`` with the same arguments; with ``cache=True`` and no folder to cache
    in, the function is compiled without a cache (and a warning says so once)."""
    if len(args) == 1 and callable(args[0]) and not kwargs:  # bare @njit
        return numba.njit(args[0])

    def decorate(func: Callable) -> Callable:
        try:
            return numba.njit(*args, **kwargs)(func)
        except RuntimeError as exc:
            if not kwargs.get("cache") or "cannot cache function" not in str(exc):
                raise
            _warn_once(exc)
            return numba.njit(*args, **{**kwargs, "cache": False})(func)

    return decorate
