"""Continual learners as stream operators, and their PyTorch helpers.

:mod:`~shiftwatch.operators.learners.hare_tortoise` (Hare & Tortoise, Lee et al., ICML 2024)
and :mod:`~shiftwatch.operators.learners.cila` (CILA, Wen et al., ICML 2024, with its losses in
:mod:`~shiftwatch.operators.learners.cila_losses`) are the operators. They share the networks
and torch settings of :mod:`~shiftwatch.operators.learners.torch_nets`, the tensor state
codec of :mod:`~shiftwatch.operators.learners.torch_state`, the replay buffers of
:mod:`~shiftwatch.operators.learners.replay`, the probe of
:mod:`~shiftwatch.operators.learners.linear_probe` and the task boundaries of
:mod:`~shiftwatch.operators.learners.task_boundaries`. Every name loads PyTorch on first use.
"""

from __future__ import annotations

from shiftwatch._lazy import lazy_exports

#: public name -> module that defines it (imported on first attribute access)
_LAZY = {
    "HareTortoise": ".hare_tortoise",
    "CILA": ".cila",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
