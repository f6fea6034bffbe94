"""The two losses of Co2L (Cha et al., 2021) that CILA (Wen et al., 2024) weighs per task.

Both take L2-normalised projections ``z`` of ``2B`` augmented views (two per sample) and are
functions of the one ``2B x 2B`` similarity matrix ``S = z z^T``. :func:`co2l_losses` computes
``S`` once for both, evaluates the losses and their gradients with respect to ``S`` in closed
form (no autograd graph over the ``2B x 2B`` matrices) and back-propagates
``dL/dz = (G + G^T) z`` with ``G = dL/dS``; :func:`asymmetric_supcon` and
:func:`relation_distillation` are each loss alone. The tests compare them with a slow double
loop over the formulas of ``REFERENCES.md`` section 4, and values and gradients with the
earlier autograd implementation.

Examples
--------
>>> import torch
>>> g = torch.Generator().manual_seed(0)
>>> z = torch.nn.functional.normalize(torch.randn(8, 4, generator=g), dim=1)
>>> labels = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])
>>> anchors = torch.tensor([True, True, False, False] * 2)
>>> round(float(asymmetric_supcon(z, labels, anchors)), 4)
8.0716
>>> z_prev = torch.nn.functional.normalize(torch.randn(8, 4, generator=g), dim=1)
>>> round(float(relation_distillation(z, z_prev)), 4)
5.4028
>>> l_con, l_dis = co2l_losses(z, labels, anchors, z_prev)
>>> round(float(l_con), 4), round(float(l_dis), 4)
(8.0716, 5.4028)
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["asymmetric_supcon", "relation_distillation", "co2l_losses", "BASE_TEMPERATURE"]

#: SupCon's base temperature: the loss is scaled by ``temperature / BASE_TEMPERATURE``.
BASE_TEMPERATURE = 0.07

#: Past relations ``p_prev(i, j)`` below ``exp(-60) ~ 1e-26`` are set to exactly 0.
_LOG_P_PREV_FLOOR = -60.0

#: ``torch.nn.functional.normalize``'s default ``eps``.
_NORM_EPS = 1e-12


def _supcon(s: torch.Tensor, labels: torch.Tensor, anchors: torch.Tensor,
            temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The asymmetric SupCon loss of the similarity matrix ``s`` and its gradient ``dL/ds``."""
    n = s.shape[0]
    # Unit vectors: z_i.z_a <= 1, so subtracting 1/tau (a constant that changes nothing
    # mathematically) bounds every exponent by 0, like SupCon's row maximum, for one op less.
    logits = (s - 1.0).div_(temperature)
    exp_logits = torch.exp(logits).fill_diagonal_(0.0)  # the contrast set: a != i
    denom = exp_logits.sum(dim=1)
    # Positives (same label, not self) as 0/1 floats: one-hot products are exact and much
    # faster than a broadcast comparison.
    lo, hi = torch.aminmax(labels)
    span = int(hi - lo) + 1
    if span <= n:
        codes = labels - lo
    else:  # sparse label values: renumber them 0, 1, ...
        codes = torch.unique(labels, return_inverse=True)[1]
        span = int(codes.max()) + 1
    onehot = torch.zeros((n, span), dtype=s.dtype, device=s.device)
    onehot.scatter_(1, codes[:, None], 1.0)
    positives = (onehot @ onehot.T).fill_diagonal_(0.0)
    n_pos = positives.sum(dim=1)
    use = (anchors & (n_pos > 0)).to(s.dtype)
    # Row i of `weights` is use_i / |P(i)| on the positives of i: each used row sums to 1, so
    # sum_ij weights_ij log_prob_ij = sum_ij weights_ij logits_ij - sum_i use_i log denom_i.
    weights = positives.mul_((use / n_pos.clamp(min=1.0))[:, None])
    scale = temperature / BASE_TEMPERATURE / n
    loss = (torch.dot(use, torch.log(denom)) - torch.dot(weights.view(-1), logits.view(-1)))
    # d/ds_ij of -scale * sum_i use_i mean_p log_prob_ip (log_prob_ij = s_ij/tau - log denom_i
    # + const): scale/tau * (use_i softmax_ij - weights_ij).
    grad = torch.addcmul(weights, exp_logits, (use / denom)[:, None], value=-1.0)
    return loss.mul_(scale), grad.mul_(-scale / temperature)


def _ird(s: torch.Tensor, z_prev: torch.Tensor, temperature: float,
         temperature_prev: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The IRD loss of the similarity matrix ``s`` against ``z_prev`` and ``dL/ds``
    (overwrites ``s``)."""
    n = s.shape[0]
    very_negative = torch.finfo(s.dtype).min

    def log_relation(ss: torch.Tensor, temp: float) -> torch.Tensor:  # (overwrites ss)
        return torch.log_softmax(ss.div_(temp).fill_diagonal_(very_negative), dim=1)

    log_cur = log_relation(s, temperature)
    # At temperature 0.01 most past relations are below float32's smallest normal number;
    # subnormal arithmetic in the backward pass made a training step ~10x slower. Relations
    # below exp(-60) ~ 1e-26 are set to exactly 0, a change of the loss below 1e-24.
    log_prev = log_relation(z_prev @ z_prev.T, temperature_prev)
    # (log p_prev <= -60 becomes -inf, then exactly 0.)
    p_prev = torch.nn.functional.threshold(log_prev, _LOG_P_PREV_FLOOR, -math.inf).exp_()
    p_cur = torch.exp(log_cur)  # 0 on the diagonal
    loss = torch.dot(p_prev.view(-1), log_cur.fill_diagonal_(0.0).view(-1)).mul_(-1.0 / n)
    # d/ds_ij: (1/(n kappa)) (r_i p_cur_ij - p_prev_ij), r_i = sum_j p_prev_ij.
    grad = torch.addcmul(p_prev, p_cur, p_prev.sum(dim=1, keepdim=True), value=-1.0)
    return loss, grad.mul_(-1.0 / (n * temperature))


class _Co2LLosses(torch.autograd.Function):
    """``(Lcon, Ldis)`` of ``z`` (or of ``normalize(z)``) with the hand-written gradient
    ``(G + G^T) z`` (first order only: no double backward)."""

    @staticmethod
    def forward(ctx: Any, z: torch.Tensor, labels: torch.Tensor | None,
                anchors: torch.Tensor | None, z_prev: torch.Tensor | None, temperature: float,
                ird_temperature: float, ird_temperature_prev: float, normalize: bool
                ) -> tuple[torch.Tensor, torch.Tensor]:
        norm = None
        if normalize:  # as torch.nn.functional.normalize(z, dim=1)
            norm = torch.linalg.vector_norm(z, dim=1, keepdim=True).clamp_min_(_NORM_EPS)
            z = z / norm
        s = z @ z.T
        l_con = l_dis = z.new_zeros(())
        g_con = g_dis = None
        if labels is not None:
            l_con, g_con = _supcon(s, labels, anchors, temperature)
        if z_prev is not None:  # (last: it overwrites s)
            l_dis, g_dis = _ird(s, z_prev.detach(), ird_temperature, ird_temperature_prev)
        ctx.parts = (g_con is not None, g_dis is not None, norm is not None)
        saved = [z, *(t for t in (g_con, g_dis, norm) if t is not None)]
        ctx.save_for_backward(*saved)
        return l_con, l_dis

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, d_con: torch.Tensor, d_dis: torch.Tensor) -> tuple:
        z, *rest = ctx.saved_tensors
        has_con, has_dis, normalized = ctx.parts
        # G = d_con G_con + d_dis G_dis (the saved matrices stay intact for retain_graph).
        g = None
        if has_con:
            g = rest.pop(0) * d_con
        if has_dis:
            g_dis = rest.pop(0)
            g = g_dis * d_dis if g is None else g.add_(g_dis, alpha=float(d_dis))
        if g is None:
            return (None,) * 8
        dz = (g + g.T) @ z
        if normalized:
            # Through z = p / |p|: dp = (dz - z (z . dz)) / |p|. (Where |p| < 1e-12 was clamped
            # torch's normalize would pass dz / 1e-12; projections are never that short.)
            dz = torch.addcmul(dz, z, (z * dz).sum(dim=1, keepdim=True), value=-1.0)
            dz = dz.div_(rest.pop(0))
        return dz, None, None, None, None, None, None, None


def co2l_losses(z: torch.Tensor, labels: torch.Tensor, anchors: torch.Tensor,
                z_prev: torch.Tensor | None = None, temperature: float = 0.5,
                ird_temperature: float = 0.2, ird_temperature_prev: float = 0.01, *,
                normalize: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`asymmetric_supcon` and (when ``z_prev`` is given) :func:`relation_distillation`
    of ``z`` from one similarity matrix; ``(Lcon, None)`` without ``z_prev``.

    Both are differentiable in ``z`` (first order: the gradient is computed in closed form);
    no gradient flows into ``z_prev``. With ``normalize=True``, ``z`` is the raw projection and
    is L2-normalised here (as ``torch.nn.functional.normalize(z, dim=1)``), with that step's
    gradient in closed form too; ``z_prev`` must be normalised already.

    Parameters
    ----------
    z
        ``(2B, d)`` projections: L2-normalised, or raw with ``normalize=True``.
    labels, anchors
        As in :func:`asymmetric_supcon`.
    z_prev
        ``(2B, d)`` L2-normalised projections of the frozen previous model, or ``None``.
    temperature, ird_temperature, ird_temperature_prev
        SupCon's ``tau`` and the IRD temperatures of the current and of the previous model.
    normalize
        Normalise ``z`` here.

    Returns
    -------
    tuple
        ``(Lcon, Ldis)`` as 0-d tensors (``Ldis`` is ``None`` without ``z_prev``).
    """
    l_con, l_dis = _Co2LLosses.apply(z, labels, anchors, z_prev, temperature,
                                     ird_temperature, ird_temperature_prev, normalize)
    return l_con, (l_dis if z_prev is not None else None)


def asymmetric_supcon(z: torch.Tensor, labels: torch.Tensor, anchors: torch.Tensor,
                      temperature: float = 0.5) -> torch.Tensor:
    """Co2L's asymmetric supervised contrastive loss.

    ``L = (1/2B) sum_{i in anchors} -(tau/0.07) (1/|P(i)|) sum_{p in P(i)}
    log[exp(z_i.z_p/tau) / sum_{a != i} exp(z_i.z_a/tau)]`` where ``P(i)`` are the other
    views with the label of ``i``. Anchors are the current task's views; the contrast set
    (the denominator) is every view, replayed ones included. Anchors without a positive
    contribute nothing.

    Parameters
    ----------
    z
        ``(2B, d)`` L2-normalised projections.
    labels
        ``(2B,)`` integer labels.
    anchors
        ``(2B,)`` boolean mask of the views that act as anchors.
    temperature
        ``tau``.
    """
    return co2l_losses(z, labels, anchors, None, temperature)[0]


def relation_distillation(z: torch.Tensor, z_prev: torch.Tensor, temperature: float = 0.2,
                          temperature_prev: float = 0.01) -> torch.Tensor:
    """Co2L's instance-wise relation distillation (IRD).

    ``p(i, j) = exp(z_i.z_j/kappa) / sum_{k != i} exp(z_i.z_k/kappa)`` for the current model
    (``kappa = temperature``) and the frozen previous one (``temperature_prev``);
    ``L = (1/2B) sum_i sum_{j != i} -p_prev(i, j) log p_cur(i, j)``. No gradient flows into
    ``z_prev``.
    """
    return _Co2LLosses.apply(z, None, None, z_prev, 0.5, temperature, temperature_prev,
                             False)[1]
