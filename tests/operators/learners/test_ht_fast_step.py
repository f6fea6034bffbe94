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


@pytest.mark.parametrize("sizes,n,dtype", [((10, 16, 4), 8, torch.float32),
                                           ((40, 256, 256, 10), 16, torch.float32),
                                           ((5, 3), 1, torch.float32),
                                           ((6, 7, 5, 3), 4, torch.float64)])
def test_stack_gradients_and_logits_match_autograd_to_the_bit(sizes, n, dtype):
    from shiftwatch.operators.learners.torch_nets import mlp

    torch.manual_seed(sum(sizes))
    net = mlp(list(sizes)).to(dtype)
    stack = ht_support.linear_stack(net)
    assert stack is not None
    g = torch.Generator().manual_seed(n)
    for k in range(20):  # a wide range of logits, dead units included (relu at 0)
        x = (torch.randn(n, sizes[0], generator=g) * (0.1 + k)).to(dtype)
        y = torch.randint(0, sizes[-1], (n,), generator=g)
        for p in net.parameters():
            p.grad = None
        logits = net(x)
        torch.nn.functional.cross_entropy(logits, y).backward()
        assert torch.equal(ht_support.stack_forward(*stack, x), logits.detach())
        mine = ht_support.stack_grads(*stack, x, y)
        for p, q in zip(net.parameters(), mine, strict=True):
            assert q.dtype == p.dtype and q.shape == p.shape and q.stride() == p.grad.stride()
            assert torch.equal(p.grad, q), k


def test_linear_stack_refuses_other_networks():
    from shiftwatch.operators.learners.torch_nets import mlp

    nn = torch.nn
    assert ht_support.linear_stack(ht_support._tiny_batchnorm_net()) is None
    tanh = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    assert ht_support.linear_stack(tanh) is None
    assert ht_support.linear_stack(nn.Sequential(nn.Linear(3, 4, bias=False))) is None
    assert ht_support.linear_stack(mlp([3, 4, 2], last_relu=True)) is None
    hooked = mlp([3, 4, 2])
    hooked[0].register_forward_hook(lambda *a: None)
    assert ht_support.linear_stack(hooked) is None
    assert ht_support.linear_stack(mlp([3, 4, 2])) is not None


def test_the_operator_without_autograd_learns_the_same_to_the_bit(monkeypatch):
    """The default MLP's step by hand against the same operator on torch's modules and autograd
    (``linear_stack`` made to refuse): the same predictions and weights, replay and resets
    included."""
    import numpy as np

    from shiftwatch.operators.learners.hare_tortoise import HareTortoise

    rng = np.random.default_rng(0)
    x = rng.normal(size=(1500, 6))
    y = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0.5)
    y[700:] = 2 - y[700:]  # a change of the labels: DDM alarms, the head resets
    records = [{"key": "k", "value": list(map(float, r)), "y": int(c)}
               for r, c in zip(x, y, strict=True)]

    def run():
        op = HareTortoise(in_dim=6, n_classes=3, hidden=(32, 16), batch_size=8, replay_ratio=2,
                          reset_every_records=400, seed=3)
        out = [o["y_pred"] for i in range(0, len(records), 64)
               for o in op.process_batch(records[i:i + 64])]
        return op, out

    fast, preds_fast = run()
    assert fast._stacks[0] is not None and fast._stacks[1] is not None
    monkeypatch.setattr(ht_support, "linear_stack", lambda net: None)
    slow, preds_slow = run()
    assert slow._stacks == (None, None)
    assert preds_fast == preds_slow
    assert fast.n_alarm_resets == slow.n_alarm_resets and fast.n_resets == slow.n_resets
    assert fast.n_alarm_resets + fast.n_resets > 0
    for a, b in zip([*fast.hare.parameters(), *fast.tortoise.parameters()],
                    [*slow.hare.parameters(), *slow.tortoise.parameters()], strict=True):
        assert torch.equal(a, b)
