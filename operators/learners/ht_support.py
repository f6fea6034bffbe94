"""Parameter checks and check-suite hooks of the ``hare-tortoise`` operator.

Kept apart from :mod:`~shiftwatch.operators.learners.hare_tortoise` so that module stays short;
:func:`validate_params` raises a ``ValueError`` naming the parameter, :class:`CheckSuiteHooks`
gives the shared operator check suite its parameter sets, test stream and bad records,
:func:`reset_head` re-initialises a network's last layer, and :func:`stack_forward` /
:func:`stack_grads` are the default MLP's forward pass and cross-entropy gradients without
autograd (the same kernels in the same order, so the same numbers to the bit).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from shiftwatch.operators.learners.task_boundaries import check_inner_detector
from shiftwatch.operators.learners.torch_nets import check_int, is_int, load_torch

__all__ = ["validate_params", "CheckSuiteHooks", "reset_head", "RESET_TO", "linear_stack",
           "stack_forward", "stack_grads", "set_grads"]

#: What an alarm reset does (``reset_to``).
RESET_TO = ("tortoise", "head", "full", "keep")


def _tiny_batchnorm_net() -> Any:
    """4 -> 8 (batch norm, dropout) -> 3: the check suite's user-factory case."""
    torch = load_torch("hare-tortoise")
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                               torch.nn.Dropout(0.1), torch.nn.Linear(8, 3))


def reset_head(net: Any, fresh: Any) -> None:
    """Copy the last module holding parameters of its own (the head) from ``fresh`` into
    ``net``, parameters and buffers (values only, in place)."""
    torch = load_torch("hare-tortoise")
    heads = [n for n, m in net.named_modules() if any(True for _ in m.parameters(recurse=False))]
    mine = dict(net.named_modules())[heads[-1]]
    new = dict(fresh.named_modules())[heads[-1]]
    with torch.no_grad():
        for p, f in zip([*mine.parameters(recurse=False), *mine.buffers(recurse=False)],
                        [*new.parameters(recurse=False), *new.buffers(recurse=False)],
                        strict=True):
            p.copy_(f)


def validate_params(op: Any, methods: dict) -> None:
    """Raise ``ValueError`` naming the first invalid parameter of a ``HareTortoise``."""
    METHODS = methods  # noqa: N806 (the operator's table, as it is named there)
    def positive_int(name: str, minimum: int = 1) -> None:
        check_int(op, name, minimum)

    def real_in(name: str, lo: float, hi: float, hi_open: bool = False) -> None:
        v = getattr(op, name)
        ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and lo <= v <= hi
        if ok and hi_open and v == hi:
            ok = False
        if not ok:
            bracket = ")" if hi_open else "]"
            raise ValueError(f"{name} must be a number in [{lo}, {hi}{bracket}, got {v!r}")

    positive_int("in_dim")
    positive_int("n_classes", 2)
    hidden = [op.hidden] if is_int(op.hidden) else op.hidden
    if (isinstance(hidden, (str, bytes)) or not isinstance(hidden, Sequence)
            or not all(is_int(h) and h >= 1 for h in hidden)):
        raise ValueError(f"hidden must be an integer >= 1 or a list of them, "
                         f"got {op.hidden!r}")
    if op.model is not None and not callable(op.model):
        raise ValueError(f"model must be None or a zero-argument callable returning a "
                         f"torch.nn.Module, got {op.model!r}")
    if op.method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}, "
                         f"got {op.method!r}")
    real_in("ema_momentum", 0.0, 1.0, hi_open=True)
    if op.ema_warmup is not None:
        real_in("ema_warmup", 1.0, float("inf"))
    if op.reset_every is not None:
        positive_int("reset_every")
    if op.reset_every_records is not None:
        positive_int("reset_every_records")
        if op.reset_every is not None:
            raise ValueError("reset_every and reset_every_records: give at most one of them")
    positive_int("reset_lr_warmup", 0)
    positive_int("batch_size")
    positive_int("replay_ratio")
    if op.alarm_replay_ratio is not None:
        positive_int("alarm_replay_ratio")
    positive_int("alarm_boost_records", 0)
    if op.replay_size is not None:
        positive_int("replay_size", 0)
    positive_int("buffer_size", 0)
    real_in("lr", 0.0, float("inf"))
    real_in("weight_decay", 0.0, float("inf"))
    if op.clip_norm is not None:
        real_in("clip_norm", 0.0, float("inf"))
    real_in("shrink", 0.0, 1.0)
    if op.predict_with not in ("tortoise", "hare"):
        raise ValueError(f"predict_with must be 'tortoise' or 'hare', "
                         f"got {op.predict_with!r}")
    if op.reset_on not in (None, "alarm"):
        raise ValueError(f"reset_on must be None or 'alarm', got {op.reset_on!r}")
    if op.reset_to not in RESET_TO:
        raise ValueError(f"reset_to must be one of {', '.join(map(repr, RESET_TO))}, "
                         f"got {op.reset_to!r}")
    if op.input_reset_to is not None and op.input_reset_to not in RESET_TO:
        raise ValueError(f"input_reset_to must be None or one of "
                         f"{', '.join(map(repr, RESET_TO))}, got {op.input_reset_to!r}")
    check_inner_detector(op.detector, op.detector_params)
    positive_int("min_reset_gap", 0)
    if not isinstance(op.field, str) or not op.field:
        raise ValueError(f"field must be a non-empty string, got {op.field!r}")
    if not is_int(op.seed) or not 0 <= op.seed < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {op.seed!r}")
    if op.threads is not None and (not is_int(op.threads) or op.threads < 1):
        raise ValueError(f"threads must be None or an integer >= 1, got {op.threads!r}")



class CheckSuiteHooks:
    """The shared operator check suite's hooks (mixed into ``HareTortoise``)."""

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict]:
        base = {"in_dim": 4, "n_classes": 3, "hidden": [8], "batch_size": 4, "buffer_size": 16,
                "ema_momentum": 0.9, "reset_every": 5, "seed": 3, "detector": None}
        # Head reset differs from warm start only at a task change: its own tests cover it.
        yield base
        yield {**base, "method": "ema", "predict_with": "hare", "replay_ratio": 2,
               "replay_size": 2}
        yield {**base, "method": "warm", "clip_norm": None}
        yield {**base, "method": "shrink-perturb", "buffer_size": 0}
        yield {**base, "model": _tiny_batchnorm_net}
        # The defaults' reset rules: a record cadence, and DDM on the 0/1 loss resetting the head.
        yield {**{k: v for k, v in base.items() if k not in ("reset_every", "detector")},
               "reset_every_records": 24, "min_reset_gap": 10}

    @classmethod
    def _test_stream(cls, params: dict, n: int = 120, seed: int = 0) -> list[dict]:
        """Three Gaussian classes in 4-d; the class means move at n/2 (task 0 -> 1); every
        7th record is unlabelled and every 11th an evaluation-only record."""
        rng = np.random.default_rng(seed)
        d = params.get("in_dim", 4)
        k = params.get("n_classes", 3)
        means = rng.normal(0, 2, (2, k, d))
        out = []
        for i in range(n):
            task = int(i >= n // 2)
            c = int(rng.integers(k))
            rec = {"key": "k", "ts": float(i), "offset": i,
                   "value": (means[task, c] + rng.normal(0, 1, d)).tolist(), "y": c,
                   "task": task}
            if i % 7 == 3:
                rec["y"] = None
            elif i % 11 == 5:
                rec["train"] = False
            out.append(rec)
        return out

    @classmethod
    def _bad_records(cls, params: dict) -> list[dict]:
        d = params.get("in_dim", 4)
        k = params.get("n_classes", 3)
        return [
            {"key": "k", "value": [0.0] * (d + 1), "y": 0},
            {"key": "k", "value": [float("nan")] + [0.0] * (d - 1), "y": 0},
            {"key": "k", "value": [0.0] * d, "y": k},
            {"key": "k", "value": [0.0] * d, "y": 0.5},
            {"key": "k", "value": [0.0] * d, "y": "cat"},
            {"key": "k", "y": 0},
        ]



def clip_grad_norm(params: Sequence[Any], max_norm: float) -> None:
    """``torch.nn.utils.clip_grad_norm_(params, max_norm)`` for parameters of one device and
    dtype, without its per-call grouping and checks: the same kernels in the same order
    (``_foreach_norm``, the norm of the stacked norms, the clamped coefficient, one
    ``_foreach_mul_``), so the same gradients to the bit; other parameters go to torch's
    own function."""
    torch = load_torch()
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    first = grads[0]
    if any(g.device != first.device or g.dtype != first.dtype or g.is_sparse
           for g in grads) or first.device.type != "cpu":
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        return
    norms = torch._foreach_norm(grads, 2.0)
    total = torch.linalg.vector_norm(torch.stack(norms), 2.0)
    coef = torch.clamp(float(max_norm) / (total + 1e-6), max=1.0)
    torch._foreach_mul_(grads, coef)


def adamw_step(opt: Any, params: Sequence[Any]) -> None:
    """``opt.step()`` for a fused AdamW of one parameter group on CPU whose state exists
    (after its first step) and whose every parameter has a gradient, without the step's
    per-call grouping, hooks and profiler scopes: torch's own two calls (the steps
    incremented, then ``_fused_adamw_``) with the group's hyper-parameters, so the same
    update to the bit. Anything else goes to ``opt.step()``."""
    torch = load_torch()
    groups = opt.param_groups
    g = groups[0]
    if (len(groups) != 1 or not g.get("fused") or g.get("amsgrad") or g.get("maximize")
            or g.get("capturable") or g.get("differentiable")
            or not g.get("decoupled_weight_decay", True)
            or isinstance(g["lr"], torch.Tensor) or len(g["params"]) != len(params)
            or any(a is not b for a, b in zip(g["params"], params, strict=True))):
        opt.step()
        return
    grads, avgs, sqs, steps = [], [], [], []
    state = opt.state
    for p in params:
        st = state.get(p)
        if p.grad is None or not st or p.device.type != "cpu" or p.grad.is_sparse:
            opt.step()
            return
        grads.append(p.grad)
        avgs.append(st["exp_avg"])
        sqs.append(st["exp_avg_sq"])
        steps.append(st["step"])
    if any(q.dtype != params[0].dtype for q in params):
        opt.step()
        return
    beta1, beta2 = g["betas"]
    torch._foreach_add_(steps, 1)
    torch._fused_adamw_(list(params), grads, avgs, sqs, [], steps, amsgrad=False, lr=g["lr"],
                        beta1=float(beta1), beta2=float(beta2),
                        weight_decay=g["weight_decay"], eps=g["eps"], maximize=False,
                        grad_scale=None, found_inf=None)


def linear_stack(net: Any) -> tuple[list, list] | None:
    """The weights and biases of ``net`` if it is a plain ``Sequential`` of ``Linear`` (with
    bias) and ``ReLU`` modules alternating, first and last ``Linear`` (what
    :func:`~shiftwatch.operators.learners.torch_nets.mlp` builds) and has no hooks; else
    ``None``."""
    torch = load_torch()
    if type(net) is not torch.nn.Sequential:
        return None
    mods = list(net)
    if len(mods) % 2 == 0:
        return None
    for i, m in enumerate(mods):
        if type(m) is not (torch.nn.Linear if i % 2 == 0 else torch.nn.ReLU):
            return None
        if (i % 2 == 0 and m.bias is None) or m._forward_hooks or m._forward_pre_hooks \
                or m._backward_hooks or m._backward_pre_hooks:
            return None
    if net._forward_hooks or net._forward_pre_hooks or net._backward_hooks:
        return None
    return [m.weight for m in mods[0::2]], [m.bias for m in mods[0::2]]


def stack_forward(weights: Sequence[Any], biases: Sequence[Any], x: Any,
                  keep: list | None = None) -> Any:
    """The logits of a :func:`linear_stack` network for the rows of ``x``: ``addmm`` and
    ``relu`` as ``Linear`` and ``ReLU`` call them, without the modules' dispatch. With
    ``keep`` the input and every hidden activation are appended to it (for
    :func:`stack_grads`)."""
    torch = load_torch()
    a, last = x, len(weights) - 1
    with torch.no_grad():
        for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
            if keep is not None:
                keep.append(a)
            a = torch.addmm(b, a, w.t())
            if i < last:
                a = torch.relu(a)
    return a


def stack_grads(weights: Sequence[Any], biases: Sequence[Any], x: Any, y: Any) -> list:
    """The gradients of the mean cross-entropy of a :func:`linear_stack` network on
    ``(x, y)``, in parameter order (``w0, b0, w1, b1, ...``), by the kernels autograd runs for
    ``cross_entropy(net(x), y).backward()`` (``nll_loss_backward``,
    ``_log_softmax_backward_data``, ``addmm``'s ``mm`` in the layout of a ``Linear`` weight,
    ``threshold_backward``): the same gradients to the bit, at about 60% of the time on the
    default MLP (``tests/operators/learners/test_ht_fast_step.py``)."""
    torch = load_torch()
    aten = torch.ops.aten
    acts: list = []
    with torch.no_grad():
        logits = stack_forward(weights, biases, x, keep=acts)
        logsm = torch.log_softmax(logits, 1)
        one = torch.ones((), dtype=logsm.dtype)
        total = torch.tensor(float(x.shape[0]), dtype=logsm.dtype)
        g = aten.nll_loss_backward(one, logsm, y, None, 1, -100, total)
        g = aten._log_softmax_backward_data(g, logsm, 1, logsm.dtype)
        out: list = [None] * (2 * len(weights))
        for i in range(len(weights) - 1, -1, -1):
            out[2 * i] = g.t().mm(acts[i])
            out[2 * i + 1] = g.sum(0)
            if i > 0:
                g = aten.threshold_backward(g.mm(weights[i]), acts[i], 0)
    return out


def set_grads(net: Any, stack: tuple[list, list] | None, params: Sequence[Any], x: Any,
              y: Any) -> None:
    """Set ``params``' gradients (``net``'s parameters) to those of the mean cross-entropy on
    ``(x, y)``: by :func:`stack_grads` when ``stack`` is ``net``'s :func:`linear_stack`, else
    by autograd after the optimiser's ``zero_grad(set_to_none=True)``."""
    if stack is not None:
        for p, g in zip(params, stack_grads(*stack, x, y), strict=True):
            p.grad = g
        return
    for p in params:
        p.grad = None
    load_torch().nn.functional.cross_entropy(net(x), y).backward()
