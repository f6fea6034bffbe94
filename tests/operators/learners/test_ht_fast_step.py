"""``hare-tortoise``'s training step calls torch's kernels without the optimiser's and the
clipping function's per-call Python (issue 49: a cheaper step): the same gradients and the
same AdamW update to the bit as ``clip_grad_norm_`` and ``AdamW(fused=True).step()``, and
torch's own path wherever the shortcut's conditions do not hold."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from shiftwatch.operators.learners import ht_support  # noqa: E402


def _net(seed: int):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _grads(net, seed: int, scale: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 10, generator=g) * scale
    y = torch.randint(0, 4, (8,), generator=g)
    for p in net.parameters():
        p.grad = None
    torch.nn.functional.cross_entropy(net(x), y).backward()


@pytest.mark.parametrize("scale", [0.01, 1.0, 100.0])  # below, near and above the clip
def test_clipping_matches_torch_to_the_bit(scale):
    a, b = _net(0), _net(0)
    _grads(a, 1, scale)
    _grads(b, 1, scale)
    torch.nn.utils.clip_grad_norm_(a.parameters(), 0.5)
    ht_support.clip_grad_norm(list(b.parameters()), 0.5)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)


def test_adamw_step_matches_the_fused_optimiser_to_the_bit():
    a, b = _net(2), _net(2)
    oa = torch.optim.AdamW(a.parameters(), lr=3e-3, weight_decay=0.01, fused=True)
    ob = torch.optim.AdamW(b.parameters(), lr=3e-3, weight_decay=0.01, fused=True)
    calls = []
    real = ob.step
    ob.step = lambda *args, **kw: (calls.append(1), real(*args, **kw))[1]
    for k in range(25):
        _grads(a, 10 + k)
        _grads(b, 10 + k)
        if k == 12:  # a warm-up's changed learning rate is read from the group
            for o in (oa, ob):
                o.param_groups[0]["lr"] = 1e-3
        oa.step()
        ht_support.adamw_step(ob, list(b.parameters()))
        for p, q in zip(a.parameters(), b.parameters(), strict=True):
            assert torch.equal(p, q), k
    assert calls == [1]  # torch's own step made the state; the shortcut took the rest
    for s_a, s_b in zip(oa.state.values(), ob.state.values(), strict=True):
        assert all(torch.equal(s_a[key], s_b[key]) for key in ("step", "exp_avg", "exp_avg_sq"))


def test_adamw_step_falls_back_to_torch_where_it_does_not_apply():
    net = _net(3)
    for opt in (torch.optim.AdamW(net.parameters()),  # not fused
                torch.optim.AdamW(net.parameters(), fused=True, amsgrad=True)):
        calls = []
        real = opt.step
        opt.step = lambda *args, _r=real, _c=calls, **kw: (_c.append(1), _r(*args, **kw))[1]
        for k in range(3):
            _grads(net, k)
            ht_support.adamw_step(opt, list(net.parameters()))
        assert calls == [1, 1, 1]
    opt = torch.optim.AdamW(net.parameters(), fused=True)
    _grads(net, 0)
    opt.step()
    calls = []
    real = opt.step
    opt.step = lambda *args, **kw: (calls.append(1), real(*args, **kw))[1]
    _grads(net, 1)
    net[2].bias.grad = None  # a parameter without a gradient: torch skips it
    ht_support.adamw_step(opt, list(net.parameters()))
    assert calls == [1]
