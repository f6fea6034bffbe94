"""The augmentations of feature vectors that CILA's contrastive views are made with.

Each is ``f(x, generator, strength) -> x'`` on a ``(B, n)`` tensor, drawing from the operator's
``torch.Generator``; :data:`AUGMENTATIONS` names them for the operator's ``augment=``.

Examples
--------
>>> from shiftwatch.operators.learners.torch_nets import load_torch
>>> torch = load_torch()
>>> g = torch.Generator().manual_seed(0)
>>> x = torch.ones((2, 3))
>>> augment_mask(x, g, 0.0).tolist()  # strength 0 masks nothing
[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
>>> sorted(AUGMENTATIONS)
['mask', 'noise', 'scale', 'shift']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from shiftwatch.operators.learners.torch_nets import load_torch

if TYPE_CHECKING:
    import torch

__all__ = ["AUGMENTATIONS", "augment_noise", "augment_shift", "augment_scale", "augment_mask"]


def _torch() -> Any:
    return load_torch("cila")


def augment_noise(x: torch.Tensor, g: torch.Generator, s: float) -> torch.Tensor:
    """Add Gaussian noise of standard deviation ``s`` to every feature."""
    torch = _torch()
    return torch.add(x, torch.randn(x.shape, generator=g), alpha=s)


def augment_shift(x: torch.Tensor, g: torch.Generator, s: float) -> torch.Tensor:
    """Add one Gaussian offset (standard deviation ``s``) to all features of a sample."""
    torch = _torch()
    return torch.add(x, torch.randn((x.shape[0], 1), generator=g), alpha=s)


def augment_scale(x: torch.Tensor, g: torch.Generator, s: float) -> torch.Tensor:
    """Multiply each sample by a factor drawn uniformly from ``[1 - 2s, 1 + 2s]``."""
    torch = _torch()
    # x (1 + 2s (2u - 1)) = (1 - 2s) x + 4s u x: one fused op after the draw.
    u = torch.rand((x.shape[0], 1), generator=g)
    return torch.addcmul(x * (1.0 - 2.0 * s), x, u, value=4.0 * s)


def augment_mask(x: torch.Tensor, g: torch.Generator, s: float) -> torch.Tensor:
    """Set each feature to zero with probability ``s``."""
    torch = _torch()
    # ge_ writes the 0/1 mask into the float draw: no bool tensor, no type promotion.
    return x * torch.rand(x.shape, generator=g).ge_(s)


#: The named augmentations ``augment=`` accepts, applied in the order given.
AUGMENTATIONS: dict[str, Callable[[Any, Any, float], Any]] = {
    "noise": augment_noise,
    "shift": augment_shift,
    "scale": augment_scale,
    "mask": augment_mask,
}
