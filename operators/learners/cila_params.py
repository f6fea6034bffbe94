"""Validation of the ``cila`` operator's parameters (kept out of the operator's module).

Examples
--------
>>> from types import SimpleNamespace
>>> try:
...     check_choice(SimpleNamespace(method="lwf"), "method", METHODS)
... except ValueError as e:
...     print(e)
method must be one of cila, co2l, er, finetune; got 'lwf'
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from shiftwatch.operators.learners.cila_augment import AUGMENTATIONS
from shiftwatch.operators.learners.task_boundaries import BOUNDARIES, check_inner_detector
from shiftwatch.operators.learners.torch_nets import check_int, is_int

__all__ = ["METHODS", "LAMBDA_FORMS", "PROBE_REFITS", "check_choice", "validate_cila_params"]

METHODS = ("cila", "co2l", "er", "finetune")
LAMBDA_FORMS = ("max", "pure", "min")
PROBE_REFITS = ("zero", "warm")


def check_choice(op: Any, name: str, allowed: Sequence[str]) -> None:
    """``ValueError`` naming ``name`` unless ``op.<name>`` is one of ``allowed``."""
    if getattr(op, name) not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; "
                         f"got {getattr(op, name)!r}")


def validate_cila_params(op: Any) -> None:
    """Check every parameter of a ``CILA`` operator; ``ValueError`` names the first bad one."""
    def positive_int(name: str, minimum: int = 1) -> None:
        check_int(op, name, minimum)

    def positive_float(name: str) -> None:
        v = getattr(op, name)
        if (not isinstance(v, numbers.Real) or isinstance(v, bool) or not math.isfinite(v)
                or v <= 0):
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")

    for name, allowed in (("method", METHODS), ("lambda_form", LAMBDA_FORMS),
                          ("boundary", BOUNDARIES), ("probe_refit", PROBE_REFITS)):
        check_choice(op, name, allowed)
    for name in ("kappa", "temperature", "ird_temperature", "ird_temperature_prev", "lr",
                 "probe_lr"):
        positive_float(name)
    if not isinstance(op.probe_balance, bool):
        raise ValueError(f"probe_balance must be True or False, got {op.probe_balance!r}")
    c = op.ce_weight
    if not isinstance(c, numbers.Real) or isinstance(c, bool) or not (
            math.isfinite(c) and c >= 0):
        raise ValueError(f"ce_weight must be a finite number >= 0, got {c!r}")
    positive_int("buffer_size", 0)
    positive_int("batch_size")
    positive_int("steps")
    positive_int("embedding_dim")
    positive_int("projection_dim")
    positive_int("probe_epochs", 0)
    positive_int("probe_steps", 0)
    positive_int("min_task_length", 0)
    if op.replay_batch_size is not None:
        positive_int("replay_batch_size", 0)
    if op.n_features is not None:
        positive_int("n_features")
    if op.threads is not None:
        positive_int("threads")
    if not is_int(op.seed):
        raise ValueError(f"seed must be an integer, got {op.seed!r}")
    if (isinstance(op.hidden_sizes, (str, bytes)) or not isinstance(
            op.hidden_sizes, Sequence) or not all(
            is_int(h) and h >= 1 for h in op.hidden_sizes)):
        raise ValueError("hidden_sizes must be a list of integers >= 1, "
                         f"got {op.hidden_sizes!r}")
    if op.encoder is not None and not callable(op.encoder):
        raise ValueError("encoder must be None or a callable n_features -> torch.nn.Module")
    if not callable(op.augment):
        if isinstance(op.augment, str) or not isinstance(op.augment, Sequence) or any(
                a not in AUGMENTATIONS for a in op.augment):
            raise ValueError(f"augment must be a list of names from "
                             f"{', '.join(AUGMENTATIONS)} or a callable, got {op.augment!r}")
    s = op.augment_strength
    if not isinstance(s, numbers.Real) or isinstance(s, bool) or not 0 <= s < 1:
        raise ValueError(f"augment_strength must be a number in [0, 1), got {s!r}")
    check_inner_detector(op.detector, op.detector_params)
    if not isinstance(op.field, str) or not op.field:
        raise ValueError(f"field must be a non-empty string, got {op.field!r}")
