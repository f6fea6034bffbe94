"""CILA's linear probe: softmax regression on L2-normalised encoder outputs, trained by plain
gradient descent, that grows one output row per new class.

Examples
--------
>>> from shiftwatch.operators.learners.torch_nets import load_torch
>>> torch = load_torch()
>>> probe = LinearProbe(lr=0.5, dim=2)
>>> probe.add_class(); probe.add_class()
>>> feats = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
>>> probe.sgd(feats, torch.tensor([0, 1]), steps=20)
>>> probe.logits(feats).argmax(1).tolist()
[0, 1]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shiftwatch.operators.learners.torch_nets import load_torch

__all__ = ["LinearProbe"]


class LinearProbe:
    """Weights ``w`` ``(n_classes, dim)`` and bias ``b`` ``(n_classes,)``; scores are
    ``feats @ w.T + b``.

    It keeps no optimiser state, so a new class is one more zero row (:meth:`add_class`).
    ``w`` and ``b`` are plain tensors that the owner reads and replaces (CILA's state_dict,
    its cross-entropy baselines).
    """

    def __init__(self, lr: float, dim: int = 0, n_classes: int = 0) -> None:
        torch = load_torch()
        self.lr = lr
        self.w = torch.zeros((n_classes, dim))
        self.b = torch.zeros(n_classes)

    def add_class(self) -> None:
        """One more output, initialised at zero."""
        torch = load_torch()
        self.w = torch.cat([self.w, torch.zeros((1, self.w.shape[1]))])
        self.b = torch.cat([self.b, torch.zeros(1)])

    def logits(self, feats: Any, w: Any = None, b: Any = None) -> Any:
        """Scores of ``feats`` under the probe (or under ``w``, ``b`` when given)."""
        w = self.w if w is None else w
        b = self.b if b is None else b
        return feats @ w.T + b

    def sgd(self, feats: Any, y: Any, steps: int, weights: Any = None) -> None:
        """``steps`` full-batch gradient steps of the (sample-``weights``-ed) cross-entropy."""
        # Closed-form softmax-regression gradient, no autograd. The bias is a last column of
        # the weights against a constant feature 1, so a step is 4 tensor ops:
        # [w b] += lr * (scale * (onehot - softmax))^T [feats 1]. Scores are kept transposed,
        # (n_classes, n): torch's softmax over a short last dimension is several times slower.
        torch = load_torch()
        n = len(y)
        scale = (torch.full((1, n), 1.0 / n) if weights is None
                 else (weights / weights.sum())[None, :])
        target = torch.nn.functional.one_hot(y, self.w.shape[0]).T.to(feats.dtype).contiguous()
        target.mul_(scale)
        fa = torch.cat([feats, torch.ones((n, 1), dtype=feats.dtype)], dim=1)
        fa_t = fa.T.contiguous()
        wa = torch.cat([self.w, self.b[:, None]], dim=1)
        for _ in range(steps):
            p_t = torch.softmax(wa @ fa_t, dim=0)
            wa.addmm_(torch.addcmul(target, p_t, scale, value=-1.0), fa, alpha=self.lr)
        self.w, self.b = wa[:, :-1].contiguous(), wa[:, -1].contiguous()

    def refit(self, feats: Any, ys: np.ndarray, steps: int, warm: bool = False) -> None:
        """Train from zero (from the current weights if ``warm``) on ``feats`` with labels
        ``ys``, every class weighted equally."""
        torch = load_torch()
        counts = np.bincount(ys).astype(np.float32)
        weights = torch.from_numpy(1.0 / counts[ys])
        if not warm:
            self.w = torch.zeros_like(self.w)
            self.b = torch.zeros_like(self.b)
        self.sgd(feats, torch.from_numpy(ys), steps, weights)
