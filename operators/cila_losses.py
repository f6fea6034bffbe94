"""The two losses of Co2L (Cha et al., 2021) that CILA (Wen et al., 2024) weighs per task.

Both take L2-normalised projections ``z`` of ``2B`` augmented views (two per sample) and are
written as dense matrix expressions over the ``2B x 2B`` similarity matrix; the tests compare
them with a slow double loop over the formulas of ``REFERENCES.md`` section 4.

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
"""

from __future__ import annotations

import torch

__all__ = ["asymmetric_supcon", "relation_distillation", "BASE_TEMPERATURE"]

#: SupCon's base temperature: the loss is scaled by ``temperature / BASE_TEMPERATURE``.
BASE_TEMPERATURE = 0.07


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
    n = z.shape[0]
    # Unit vectors: z_i.z_a <= 1, so subtracting 1/tau (a constant that changes nothing
    # mathematically) bounds every exponent by 0, like SupCon's row maximum, for one op less.
    logits = (z @ z.T - 1.0) / temperature
    not_self = ~torch.eye(n, dtype=torch.bool, device=z.device)
    positives = (labels[:, None] == labels[None, :]) & not_self
    exp_logits = torch.exp(logits) * not_self
    log_prob = logits - torch.log(exp_logits.sum(dim=1, keepdim=True))
    n_pos = positives.sum(dim=1)
    use = anchors & (n_pos > 0)
    mean_log_prob_pos = (log_prob * positives).sum(dim=1) / n_pos.clamp(min=1)
    per_anchor = -(temperature / BASE_TEMPERATURE) * mean_log_prob_pos
    return (per_anchor * use).sum() / n


def relation_distillation(z: torch.Tensor, z_prev: torch.Tensor, temperature: float = 0.2,
                          temperature_prev: float = 0.01) -> torch.Tensor:
    """Co2L's instance-wise relation distillation (IRD).

    ``p(i, j) = exp(z_i.z_j/kappa) / sum_{k != i} exp(z_i.z_k/kappa)`` for the current model
    (``kappa = temperature``) and the frozen previous one (``temperature_prev``);
    ``L = (1/2B) sum_i sum_{j != i} -p_prev(i, j) log p_cur(i, j)``. No gradient flows into
    ``z_prev``.
    """
    n = z.shape[0]
    not_self = ~torch.eye(n, dtype=torch.bool, device=z.device)
    very_negative = torch.finfo(z.dtype).min

    def log_relation(zz: torch.Tensor, temp: float) -> torch.Tensor:
        sim = ((zz @ zz.T) / temp).masked_fill(~not_self, very_negative)
        return torch.log_softmax(sim, dim=1)

    log_cur = log_relation(z, temperature)
    # At temperature 0.01 most past relations are below float32's smallest normal number;
    # subnormal arithmetic in the backward pass made a training step ~10x slower. Relations
    # below exp(-60) ~ 1e-26 are set to exactly 0, a change of the loss below 1e-24.
    log_prev = log_relation(z_prev.detach(), temperature_prev)
    p_prev = torch.exp(log_prev.clamp(min=-60.0)) * (log_prev > -60.0)
    return -(p_prev * log_cur.masked_fill(~not_self, 0.0)).sum() / n
