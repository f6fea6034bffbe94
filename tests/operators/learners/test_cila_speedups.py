"""CILA's faster step computes what the earlier code computed (issue 13, part 5).

The oracles below are verbatim copies of the implementation before the speed-up (autograd
through dense loss expressions, the probe's gradient-descent loop, the augmentations): losses,
gradients, probe weights, augmented views and a whole training step must agree to
floating-point rounding on seeded inputs.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shiftwatch.operators.learners.cila import AUGMENTATIONS, CILA  # noqa: E402
from shiftwatch.operators.learners.cila_losses import (  # noqa: E402
    asymmetric_supcon,
    co2l_losses,
    relation_distillation,
)
from shiftwatch.operators.learners.linear_probe import LinearProbe  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---- the earlier implementation (oracle) ----------------------------------------------------


def old_supcon(z, labels, anchors, temperature=0.5):
    n = z.shape[0]
    logits = (z @ z.T - 1.0) / temperature
    not_self = ~torch.eye(n, dtype=torch.bool, device=z.device)
    positives = (labels[:, None] == labels[None, :]) & not_self
    exp_logits = torch.exp(logits) * not_self
    log_prob = logits - torch.log(exp_logits.sum(dim=1, keepdim=True))
    n_pos = positives.sum(dim=1)
    use = anchors & (n_pos > 0)
    mean_log_prob_pos = (log_prob * positives).sum(dim=1) / n_pos.clamp(min=1)
    per_anchor = -(temperature / 0.07) * mean_log_prob_pos
    return (per_anchor * use).sum() / n


def old_ird(z, z_prev, temperature=0.2, temperature_prev=0.01):
    n = z.shape[0]
    not_self = ~torch.eye(n, dtype=torch.bool, device=z.device)
    very_negative = torch.finfo(z.dtype).min

    def log_relation(zz, temp):
        sim = ((zz @ zz.T) / temp).masked_fill(~not_self, very_negative)
        return torch.log_softmax(sim, dim=1)

    log_cur = log_relation(z, temperature)
    log_prev = log_relation(z_prev.detach(), temperature_prev)
    p_prev = torch.exp(log_prev.clamp(min=-60.0)) * (log_prev > -60.0)
    return -(p_prev * log_cur.masked_fill(~not_self, 0.0)).sum() / n


def old_probe_sgd(w, b, lr, feats, y, steps, weights=None):
    onehot = torch.nn.functional.one_hot(y, w.shape[0]).to(feats.dtype)
    scale = (torch.full((len(y), 1), 1.0 / len(y)) if weights is None
             else (weights / weights.sum())[:, None])
    for _ in range(steps):
        p = torch.softmax(feats @ w.T + b, dim=1)
        g = (p - onehot) * scale
        w = w - lr * (g.T @ feats)
        b = b - lr * g.sum(dim=0)
    return w, b


OLD_AUGMENTATIONS = {
    "noise": lambda x, g, s: x + s * torch.randn(x.shape, generator=g),
    "shift": lambda x, g, s: x + s * torch.randn((x.shape[0], 1), generator=g),
    "scale": lambda x, g, s: x * (1.0 + 2.0 * s * (2.0 * torch.rand((x.shape[0], 1),
                                                                     generator=g) - 1.0)),
    "mask": lambda x, g, s: x * (torch.rand(x.shape, generator=g) >= s),
}


def old_contrastive_step(op, x, y, current):
    """The earlier ``CILA._contrastive_step`` on the operator's state."""
    def augment(v):
        for name in op.augment:
            v = OLD_AUGMENTATIONS[name](v, op._rng, float(op.augment_strength))
        return v

    views = torch.cat([augment(x), augment(x)])
    h = op._encoder(views)
    z = torch.nn.functional.normalize(op._projector(h), dim=1)
    l_con = old_supcon(z, torch.cat([y, y]), torch.cat([current, current]), op.temperature)
    loss, l_dis = l_con, None
    if op._frozen_encoder is not None:
        with torch.no_grad():
            z_prev = torch.nn.functional.normalize(
                op._frozen_projector(op._frozen_encoder(views)), dim=1)
        l_dis = old_ird(z, z_prev, op.ird_temperature, op.ird_temperature_prev)
        loss = loss + op._lambda * l_dis
    op._optimizer.zero_grad()
    loss.backward()
    op._optimizer.step()
    op._loss_sums[0] += float(l_con.detach())
    op._loss_sums[1] += float(l_dis.detach()) if l_dis is not None else 0.0
    op._loss_sums[2] += 1
    feats = torch.nn.functional.normalize(h[: len(y)].detach(), dim=1)
    op._probe.w, op._probe.b = old_probe_sgd(op._probe.w, op._probe.b, op._probe.lr, feats, y,
                                             op.probe_steps)


# ---- losses ----------------------------------------------------------------------------------


def _batch(seed, n=64, d=16, n_classes=5, dtype=torch.float64, spread=0.5):
    """Projections of ``n`` views (two per sample, as the operator builds them), raw and
    normalised, a nearby frozen projection, labels and anchors (the first half current)."""
    g = torch.Generator().manual_seed(seed)
    raw = 2.0 * torch.randn(n, d, generator=g, dtype=dtype)
    z_prev = torch.nn.functional.normalize(
        raw + spread * torch.randn(n, d, generator=g, dtype=dtype), dim=1)
    y = torch.randint(0, n_classes, (n // 2,), generator=g)
    current = torch.arange(n // 2) < n // 4
    return raw, z_prev, torch.cat([y, y]), torch.cat([current, current])


def _old_losses_and_grad(raw, z_prev, labels, anchors, lam, normalize):
    p = raw.clone().requires_grad_(True)
    z = torch.nn.functional.normalize(p, dim=1) if normalize else p
    l_con, l_dis = old_supcon(z, labels, anchors), old_ird(z, z_prev)
    (l_con + lam * l_dis).backward()
    return float(l_con.detach()), float(l_dis.detach()), p.grad


def _new_losses_and_grad(raw, z_prev, labels, anchors, lam, normalize):
    p = raw.clone().requires_grad_(True)
    z = p if normalize else torch.nn.functional.normalize(p, dim=1).detach().requires_grad_(True)
    l_con, l_dis = co2l_losses(z, labels, anchors, z_prev, normalize=normalize)
    (l_con + lam * l_dis).backward()
    return float(l_con.detach()), float(l_dis.detach()), (p.grad if normalize else z.grad)


@pytest.mark.parametrize("dtype, rel", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_fused_losses_and_gradients_match_the_earlier_implementation(seed, normalize, dtype,
                                                                      rel):
    raw, z_prev, labels, anchors = _batch(seed, dtype=dtype)
    z_unit = torch.nn.functional.normalize(raw, dim=1)
    lam = 1.0 + seed  # CILA's lambda_t weighs the distillation
    if normalize:
        old = _old_losses_and_grad(raw, z_prev, labels, anchors, lam, True)
    else:
        old = _old_losses_and_grad(z_unit, z_prev, labels, anchors, lam, False)
    new = _new_losses_and_grad(raw, z_prev, labels, anchors, lam, normalize)
    assert new[0] == pytest.approx(old[0], rel=rel)
    assert new[1] == pytest.approx(old[1], rel=rel)
    scale = float(old[2].abs().max())
    assert scale > 0
    assert float((new[2] - old[2]).abs().max()) <= rel * 10 * scale


@pytest.mark.parametrize("seed", range(3))
def test_single_losses_match_the_earlier_implementation(seed):
    raw, z_prev, labels, anchors = _batch(seed, n=20, n_classes=3)
    z0 = torch.nn.functional.normalize(raw, dim=1)
    for new_fn, old_fn, args in ((asymmetric_supcon, old_supcon, (labels, anchors)),
                                 (relation_distillation, old_ird, (z_prev,))):
        za, zb = z0.clone().requires_grad_(True), z0.clone().requires_grad_(True)
        la, lb = new_fn(za, *args), old_fn(zb, *args)
        la.backward()
        lb.backward()
        assert float(la.detach()) == pytest.approx(float(lb.detach()), rel=1e-12)
        torch.testing.assert_close(za.grad, zb.grad, rtol=1e-10, atol=1e-13)


def test_fused_gradient_passes_gradcheck():
    raw, z_prev, labels, anchors = _batch(7, n=12, d=4, n_classes=3, spread=0.3)

    def f(p):
        l_con, l_dis = co2l_losses(p, labels, anchors, z_prev, normalize=True)
        return l_con + 2.5 * l_dis

    assert torch.autograd.gradcheck(f, (raw.clone().requires_grad_(True),))


def test_edge_cases_match_the_earlier_implementation():
    g = torch.Generator().manual_seed(1)
    z = torch.nn.functional.normalize(torch.randn(8, 3, generator=g, dtype=torch.float64), dim=1)
    z_prev = torch.nn.functional.normalize(z + 0.2, dim=1)
    cases = [
        (torch.arange(8), torch.ones(8, dtype=torch.bool)),            # no positives at all
        (torch.zeros(8, dtype=torch.long), torch.zeros(8, dtype=torch.bool)),  # no anchors
        (torch.tensor([5, 10**9, -3, 5, 7, -3, 10**9, 0]), torch.rand(8, generator=g) < 0.5),
    ]
    for labels, anchors in cases:
        za, zb = z.clone().requires_grad_(True), z.clone().requires_grad_(True)
        l_con, l_dis = co2l_losses(za, labels, anchors, z_prev)
        (l_con + l_dis).backward()
        (old_supcon(zb, labels, anchors) + old_ird(zb, z_prev)).backward()
        assert float(l_con.detach()) == pytest.approx(float(old_supcon(z, labels, anchors)),
                                                      abs=1e-12)
        torch.testing.assert_close(za.grad, zb.grad, rtol=1e-10, atol=1e-12)
    # Without z_prev only SupCon is computed.
    l_con, l_dis = co2l_losses(z, cases[2][0], cases[2][1])
    assert l_dis is None
    assert float(l_con) == pytest.approx(float(old_supcon(z, *cases[2])), rel=1e-12)


# ---- probe and augmentations -----------------------------------------------------------------


@pytest.mark.parametrize("n_classes, steps, weighted", [(1, 5, False), (4, 20, False),
                                                       (10, 200, True), (3, 0, False)])
def test_probe_sgd_matches_the_earlier_loop(n_classes, steps, weighted):
    g = torch.Generator().manual_seed(n_classes)
    feats = torch.nn.functional.normalize(torch.randn(48, 16, generator=g), dim=1)
    y = torch.randint(0, n_classes, (48,), generator=g)
    w0, b0 = 0.1 * torch.randn(n_classes, 16, generator=g), 0.1 * torch.randn(n_classes,
                                                                              generator=g)
    weights = torch.rand(48, generator=g) + 0.1 if weighted else None
    probe = LinearProbe(0.5, 16, n_classes)
    probe.w, probe.b = w0.clone(), b0.clone()
    probe.sgd(feats, y, steps, weights)
    w_old, b_old = old_probe_sgd(w0, b0, 0.5, feats, y, steps, weights)
    torch.testing.assert_close(probe.w, w_old, rtol=1e-5, atol=2e-6)
    torch.testing.assert_close(probe.b, b_old, rtol=1e-5, atol=2e-6)
    assert probe.w.shape == (n_classes, 16) and probe.b.shape == (n_classes,)


@pytest.mark.parametrize("name", sorted(AUGMENTATIONS))
def test_augmentations_draw_the_same_numbers_as_before(name):
    x = torch.randn(32, 10, generator=torch.Generator().manual_seed(0))
    g_new, g_old = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    new = AUGMENTATIONS[name](x, g_new, 0.15)
    old = OLD_AUGMENTATIONS[name](x, g_old, 0.15)
    torch.testing.assert_close(new, old, rtol=1e-6, atol=1e-6)
    assert torch.equal(g_new.get_state(), g_old.get_state())  # the same draws


# ---- a whole training step -------------------------------------------------------------------


def test_training_step_matches_the_earlier_step():
    params = {"buffer_size": 40, "batch_size": 16, "hidden_sizes": [32], "embedding_dim": 16,
              "projection_dim": 8, "probe_epochs": 20, "augment": ["noise", "shift", "scale",
                                                                   "mask"], "seed": 5,
              "probe_balance": False}  # the earlier step's online probe was unweighted
    recs = CILA._test_stream(params, n=96, seed=2)
    op = CILA(**params)
    op.process_batch([r for r in recs if r["task"] < 2])  # second task: frozen model, lambda
    assert op._frozen_encoder is not None and op._lambda > 0
    twin = copy.deepcopy(op)
    g = torch.Generator().manual_seed(9)
    x = torch.randn(16, 6, generator=g)
    y = torch.tensor([op.classes_.index(c) for c in [2, 3] * 8])
    with op._torch_threads():
        op._train_step(x, y)
        twin._contrastive_step = lambda xx, yy, cur: old_contrastive_step(twin, xx, yy, cur)
        twin._train_step(x, y)
    for a, b in zip(op._encoder.parameters(), twin._encoder.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(op._projector.parameters(), twin._projector.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(op._loss_sums[:2], twin._loss_sums[:2], rtol=1e-5)
    torch.testing.assert_close(op._probe.w, twin._probe.w, rtol=1e-4, atol=1e-5)
    assert torch.equal(op._rng.get_state(), twin._rng.get_state())


def test_fused_losses_backward_twice_with_retain_graph():
    raw, z_prev, labels, anchors = _batch(3, n=16, n_classes=3)
    p = raw.clone().requires_grad_(True)
    l_con, l_dis = co2l_losses(p, labels, anchors, z_prev, normalize=True)
    loss = l_con + 2.0 * l_dis
    loss.backward(retain_graph=True)
    first = p.grad.clone()
    loss.backward()
    torch.testing.assert_close(p.grad, 2 * first)
