"""Hare & Tortoise: a plasticity-preserving continual learner as a stream operator.

The Hare is the network the optimiser trains; the Tortoise starts as a copy of it and follows
it by an exponential moving average after every optimiser step; every few thousand labelled
records (and, through a change detector on the learner's own loss, at changes) the Hare is
reset. Predictions come from the Hare by default (the Tortoise on request). The baselines of the
paper (plain warm start, EMA alone, Shrink & Perturb, head reset) are options of the same
operator, so every arm runs the same code.

PyTorch is imported when an operator is constructed, not when this module is imported: the
operator is registered without torch, and constructing it without torch raises an
``ImportError`` saying how to install it.
"""

from __future__ import annotations

import copy
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from shiftwatch.operators.contract import Operator
from shiftwatch.operators.learners import ht_support
from shiftwatch.operators.learners.ht_support import CheckSuiteHooks, reset_head, validate_params
from shiftwatch.operators.learners.replay import Reservoir
from shiftwatch.operators.learners.torch_nets import (
    FLOAT32_MAX_ABS,
    TorchThreads,
    is_int,
    load_torch,
    mlp,
    seeded_init,
)
from shiftwatch.operators.registry import create, register
from shiftwatch.operators.state_codec import decode_state, encode_state
from shiftwatch.records import BadInput, DeadLetter, as_array, get_field

__all__ = ["HareTortoise", "METHODS"]

#: The learning rules the operator runs: name -> (keeps a Tortoise, resets the Hare to it,
#: intervention at a task change).
METHODS: dict[str, tuple[bool, bool, str | None]] = {
    "hare-tortoise": (True, True, None),
    "ema": (True, False, None),
    "warm": (False, False, None),
    "shrink-perturb": (False, False, "shrink-perturb"),
    "head-reset": (False, False, "head-reset"),
}


def _torch() -> Any:
    return load_torch("hare-tortoise")


@register("hare-tortoise")
class HareTortoise(Operator):
    """Hare & Tortoise continual learner (test-then-train) on feature vectors with class labels.

    Each record's ``value`` (a vector of ``in_dim`` numbers) is first predicted: the output
    carries ``y_pred`` (from the Hare, or the Tortoise with ``predict_with="tortoise"``) and
    the other network's prediction, if there is a Tortoise, as ``y_pred_tortoise`` /
    ``y_pred_hare``. Then, if the record has a label ``y`` (an integer in
    ``0..n_classes-1``) and no ``"train": false``, it joins the micro-batch. Every
    ``batch_size`` such records the operator runs ``replay_ratio`` optimiser steps, each on the
    micro-batch plus ``replay_size`` records drawn from a reservoir replay buffer, and then
    puts the micro-batch into the buffer. Unlabelled records and ``"train": false`` records
    are predicted, not learned.

    After every step the Tortoise follows the Hare, ``theta_T <- m_t theta_T + (1 - m_t)
    theta_H``, parameters and floating-point buffers (batch-norm statistics) alike; integer
    buffers are copied. The momentum of the ``t``-th update (``t = 0, 1, ...``) is
    ``m_t = min(m, t / (t + k))`` with ``m = ema_momentum`` and ``k = ema_warmup`` (default 2).
    The principle: the Tortoise is an average of the Hare's iterates *so far* with no weight on
    the initialisation (the point of Adam's bias correction), weighted towards recent ones
    (polynomial-decay averaging, Shamir & Zhang 2013: the ``s``-th iterate weighs ``~ s**(k-1)``;
    ``k = 1`` is the running mean, which Adam's bias correction of an EMA with ``m`` near 1
    equals; ``k = 2`` the linearly weighted average of Lacoste-Julien et al. 2012, whose mean
    age is a third of the steps) until ``t / (t + k)`` reaches ``m``, after ``k m / (1 - m)``
    updates (``k`` time constants of the EMA; ``m = 0.99``, ``k = 2``: 198 updates); from then
    on ``m_t = m``, the paper's EMA (the measurements behind ``k = 2``:
    ``benchmarks/results/hare_tortoise_ema_rule.md``). ``ema_warmup=None`` uses ``m_t = m``
    from the start, the Tortoise starting at the initialisation (the paper's rule, for epochs
    over a data set). The Hare's values are
    copied from the Tortoise (all layers; the optimiser state is kept) every
    ``reset_period_records`` labelled training records: ``reset_every_records``, or by default
    two EMA horizons, ``2 / (1 - m)`` steps of ``batch_size / replay_ratio`` new records each
    (1,600 records at the defaults), the authors' ratio (an EMA horizon of about 5 epochs, a
    reset every 10); or every ``reset_every`` optimiser steps when that is given. Each step
    zeroes the gradients, clips their norm to ``clip_norm`` and takes an AdamW step.

    Change detectors drive resets with ``reset_on="alarm"`` (the default): a record whose
    ``alarm`` field is truthy (a detector chained before with ``keep_input=true``, watching the
    features or the labels) or an alarm of the inner ``detector`` (default ``river:DDM``),
    which watches the learner's own 0/1 loss stream (``1.0`` when ``y_pred`` missed a labelled
    record's ``y``, else ``0.0``), resets the learner after the record is predicted and before
    it is learned: ``reset_to="tortoise"`` sets the Hare to the Tortoise (a method without a
    Tortoise keeps its network), ``"head"`` re-initialises the Hare's last layer with
    parameters, ``"full"`` the whole Hare, ``"keep"`` none of it; the Tortoise is then set to
    the Hare. Every alarm reset also gives the Hare a fresh AdamW optimiser whose learning
    rate rises linearly over ``reset_lr_warmup`` steps (``lr * (s + 1) / W`` at its step
    ``s < W``; the authors give each phase a fresh optimiser with a linear warm-up), empties
    the replay buffer (its records describe the concept that changed), restarts the EMA
    warm-up (so the Tortoise follows the re-adapting Hare) and the count towards the next
    periodic reset. Alarms within ``min_reset_gap`` labelled training records of the
    previous alarm reset are ignored.

    The defaults (``ema_momentum=0.99``, the reset period of two EMA horizons, ``reset_on=
    "alarm"`` with ``detector="river:DDM"``, ``reset_to="head"``, ``reset_lr_warmup=10``,
    ``predict_with="hare"``: the Tortoise lags) were chosen for one pass over a stream by
    ``python benchmarks/ht_defaults.py choose`` on streams made for choosing (mnist1d generated
    with seeds 100..102 and scikit-learn's digits; stationary, labels permuted and inputs
    permuted every 2,000 records), by the rule: among the candidates whose mean margin over a
    plain online MLP is at least -0.01 on every stationary stream, the one with the largest
    worst-case margin over the changing streams (ties within 0.005: the largest mean margin).

    The update budget, ``replay_ratio / batch_size`` optimiser steps per labelled record, is
    1/8 (``batch_size=8``, ``replay_ratio=1``; ``benchmarks/results/ht_budget_curve.md``), and
    4/8 for the first 1,000 records after each alarm reset (``alarm_replay_ratio=4``,
    ``benchmarks/results/ht_alarm_boost.md``), each chosen by a rule declared first on the
    choosing seeds: among budgets at least 5x deep-river's records/s, the most accurate. On
    mnist1d seeds 0-9 against deep-river's per-record MLP: +0.009 +- 0.007 stationary and
    +0.069 +- 0.011 after label changes, at 5.9x its records/s. Periodic resets: every 1,600.

    :meth:`process_batch` predicts all records between two training steps in one forward pass
    (the same predictions as :meth:`process` record by record, in test-then-train order: a
    record is predicted by the networks as they are after every record before it).

    Parameters
    ----------
    in_dim
        Length of the feature vector.
    n_classes
        Number of classes; labels are ``0..n_classes-1``.
    hidden
        Widths of the hidden layers of the default MLP (ReLU), ignored when ``model`` is given.
    model
        Optional zero-argument factory returning a ``torch.nn.Module`` that maps a
        ``(batch, in_dim)`` float tensor to ``(batch, n_classes)`` logits. It is called with
        torch's global generator seeded from ``seed`` (and restored afterwards), and every
        training forward pass runs the same way, so dropout is reproducible too.
    method
        ``"hare-tortoise"`` (EMA and resets), ``"ema"`` (EMA, no reset), ``"warm"`` (plain
        training: no Tortoise), ``"shrink-perturb"`` (no Tortoise; at a task change
        ``theta <- shrink * theta + (1 - shrink) * theta_fresh`` with ``theta_fresh`` a new
        initialisation) or ``"head-reset"`` (no Tortoise; at a task change the last layer
        with parameters is re-initialised). A task change is a labelled training record
        whose ``task`` differs from the previous one's.
    ema_momentum
        ``m`` above, in ``[0, 1)``.
    ema_warmup
        The order ``k >= 1`` of the averaging before ``m`` takes over (``m_t`` above), or
        ``None`` for the fixed momentum.
    reset_every
        Hare reset period in optimiser steps (method ``"hare-tortoise"``), or ``None`` for a
        period in records (``reset_every_records``).
    reset_every_records
        Hare reset period in labelled training records (method ``"hare-tortoise"``; a reset
        happens at the first step at or after that many records since the last reset of any
        kind), or ``None``: two EMA horizons (see :attr:`reset_period_records`). At most one
        of ``reset_every`` and ``reset_every_records`` may be given.
    batch_size
        Labelled records per micro-batch (default 8: one optimiser step per 8 labelled
        records; see the update budget above).
    replay_ratio
        Optimiser steps per micro-batch.
    replay_size
        Replayed records added to each step (default: ``batch_size``).
    buffer_size
        Capacity of the reservoir replay buffer (0 disables replay).
    lr, weight_decay
        AdamW learning rate and decoupled weight decay.
    clip_norm
        Gradient-norm clip (``None`` disables it).
    shrink
        Shrink factor of Shrink & Perturb.
    predict_with
        ``"tortoise"`` or ``"hare"``: the network behind ``y_pred``.
    reset_on
        ``"alarm"`` (resets at alarms too, the default) or ``None`` (the periodic schedule
        only; ``detector`` is not run).
    reset_to
        What an alarm resets: ``"tortoise"`` (the Hare is set to the Tortoise; a method
        without one keeps its network), ``"head"`` (the Hare's last layer with parameters is
        re-initialised), ``"full"`` (the whole Hare is) or ``"keep"`` (no weight changes);
        then the Tortoise is set to the Hare, the optimiser is fresh and the replay buffer
        empty.
    input_reset_to
        What the record's own ``alarm`` (an input detector chained before) resets, as
        ``reset_to`` (``None``, the default: ``reset_to``); the inner ``detector``'s alarms
        reset ``reset_to`` and win on a tie. ``"keep"`` suits inputs that change alone
        (``benchmarks/results/ht_input_resets.md``).
    alarm_replay_ratio, alarm_boost_records
        Optimiser steps per micro-batch for the first ``alarm_boost_records`` labelled
        training records after each alarm reset (default 4 for 1,000 records; ``None``:
        ``replay_ratio``): a larger update budget where the learner is behind, the stream's
        usual one elsewhere. Chosen by ``benchmarks/ht_alarm_boost.py choose``'s declared rule
        (``benchmarks/results/ht_alarm_boost.md``).
    detector
        A registered change detector (default ``"river:DDM"``; ``None`` for none) run inside
        the operator on the 0/1 loss of every labelled record when ``reset_on="alarm"``; its
        alarms count as the record's ``alarm``.
    detector_params
        Parameters of ``detector``.
    min_reset_gap
        Labelled training records after an alarm reset during which alarms are ignored.
    reset_lr_warmup
        Steps of the linear learning-rate warm-up of the fresh optimiser after an alarm reset
        (0: none).
    field
        Dotted path of the feature vector in the record.
    seed
        Seeds the initialisation, replay sampling and reservoir (a private
        ``torch.Generator``; torch's global generator is left as it was).
    threads
        Intra-op threads torch may use while the operator computes (set for the call and
        restored afterwards); ``None`` leaves torch's setting alone. One thread suits a stream
        operator, which scales out by keys and partitions (two made the check suite 15x slower).

    Examples
    --------
    >>> import numpy as np
    >>> from shiftwatch.operators import create
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 600)
    >>> x = rng.normal(0, 1, (600, 2)) + 2.0 * y[:, None]
    >>> op = create("hare-tortoise", in_dim=2, n_classes=2, hidden=[16], lr=0.01,
    ...             ema_momentum=0.9, reset_every=20, batch_size=8, seed=1)
    >>> outs = op.process_batch([{"value": v.tolist(), "y": int(c)} for v, c in zip(x, y)])
    >>> def accuracy(field):  # prequential, over the last 300 records
    ...     return round(float(np.mean([o[field] == o["y"] for o in outs[-300:]])), 3)
    >>> accuracy("y_pred"), accuracy("y_pred_tortoise"), op.n_steps, op.n_resets
    (0.89, 0.893, 75, 3)
    >>> op.n_alarm_resets  # the inner detector (DDM on the 0/1 loss) saw no change
    0

    References
    ----------
    Lee, H., Cho, H., Kim, H., Kim, D., Min, D., Choo, J., Lyle, C. (2024). Slow and Steady
    Wins the Race: Maintaining Plasticity with Hare and Tortoise Networks. ICML 2024.

    Shamir, O., Zhang, T. (2013). Stochastic Gradient Descent for Non-smooth Optimization:
    Convergence Results and Optimal Averaging Schemes. ICML 2013 (polynomial-decay averaging).

    Lacoste-Julien, S., Schmidt, M., Bach, F. (2012). A simpler approach to obtaining an
    O(1/t) convergence rate for the projected stochastic subgradient method. arXiv:1212.2002.
    """

    input_kind = "vector of in_dim numbers; optional integer label y, task, train"
    max_abs = FLOAT32_MAX_ABS  # float32 networks

    # The shared operator check suite's hooks (ht_support.py), as class attributes: one base
    # class keeps the parameters readable from source (`shiftwatch operators` imports no torch).
    _unit_test_params = CheckSuiteHooks.__dict__["_unit_test_params"]
    _test_stream = CheckSuiteHooks.__dict__["_test_stream"]
    _bad_records = CheckSuiteHooks.__dict__["_bad_records"]

    def __init__(
        self,
        in_dim: int,
        n_classes: int,
        hidden: int | Sequence[int] = (256, 256),
        model: Callable[[], Any] | None = None,
        method: str = "hare-tortoise",
        ema_momentum: float = 0.99,
        ema_warmup: float | None = 2.0,
        reset_every: int | None = None,
        reset_every_records: int | None = None,
        batch_size: int = 8,
        replay_ratio: int = 1,
        replay_size: int | None = None,
        buffer_size: int = 2000,
        lr: float = 1e-3,
        weight_decay: float = 1e-3,
        clip_norm: float | None = 0.5,
        shrink: float = 0.2,
        predict_with: str = "hare",
        reset_on: str | None = "alarm",
        reset_to: str = "head",
        input_reset_to: str | None = None,
        alarm_replay_ratio: int | None = 4,
        alarm_boost_records: int = 1000,
        detector: str | None = "river:DDM",
        detector_params: Mapping[str, Any] | None = None,
        min_reset_gap: int = 200,
        reset_lr_warmup: int = 10,
        field: str = "value",
        seed: int = 0,
        threads: int | None = 1,
    ):
        self.in_dim = in_dim
        self.n_classes = n_classes
        self.hidden = hidden
        self.model = model
        self.method = method
        self.ema_momentum = ema_momentum
        self.ema_warmup = ema_warmup
        self.reset_every = reset_every
        self.reset_every_records = reset_every_records
        self.batch_size = batch_size
        self.replay_ratio = replay_ratio
        self.replay_size = replay_size
        self.buffer_size = buffer_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.clip_norm = clip_norm
        self.shrink = shrink
        self.predict_with = predict_with
        self.reset_on = reset_on
        self.reset_to = reset_to
        self.input_reset_to = input_reset_to
        self.alarm_replay_ratio = alarm_replay_ratio
        self.alarm_boost_records = alarm_boost_records
        self.detector = detector
        self.detector_params = detector_params
        self.min_reset_gap = min_reset_gap
        self.reset_lr_warmup = reset_lr_warmup
        self.field = field
        self.seed = seed
        self.threads = threads
        self._validate_params()
        self._reset()

    # ---- parameters and state -------------------------------------------------------

    def _validate_params(self) -> None:
        validate_params(self, METHODS)

    def _reset(self) -> None:
        torch = _torch()
        self._gen = torch.Generator().manual_seed(int(self.seed))
        self._hare = self._build()
        has_tortoise = METHODS[self.method][0]
        # A copy of the values, never the same tensors.
        self._tortoise = copy.deepcopy(self._hare) if has_tortoise else None
        if self._tortoise is not None:
            self._tortoise.requires_grad_(False)
        self._opt = self._adamw()
        self._dtype = next(self._hare.parameters()).dtype
        np_dtype = torch.empty((), dtype=self._dtype).numpy().dtype
        # Labelled training records, offered once their micro-batch has been trained on.
        self._replay = Reservoir(self.buffer_size, self.in_dim, np_dtype)
        self._batch_x = np.zeros((self.batch_size, self.in_dim), dtype=np_dtype)
        self._batch_y = np.zeros(self.batch_size, dtype=np.int64)
        self._batch_len = 0
        self._n_steps = 0
        self._n_resets = 0
        self._n_task_changes = 0
        self._task: Any = None
        self._ema_t = 0  # EMA updates since the warm-up (re)started
        self._n_alarm_resets = 0
        self._since_alarm_reset = 0  # labelled training records since the last alarm reset
        self._since_reset = 0  # labelled training records since the last reset of any kind
        self._opt_steps: int | None = None  # steps of the optimiser fresh at an alarm reset
        self._version = 0  # bumped whenever a network changes (micro-batch prediction)
        self._detector = (None if self.detector is None or self.reset_on != "alarm"
                          else create(self.detector, **dict(self.detector_params or {})))
        self._bind()

    def _bind(self) -> None:
        """Cache the tensor lists the EMA and the reset walk (same order in both networks)."""
        torch = _torch()
        hare = self._hare
        self._hare_float = [*hare.parameters()] + [b for b in hare.buffers()
                                                   if torch.is_floating_point(b)]
        self._hare_other = [b for b in hare.buffers() if not torch.is_floating_point(b)]
        self._hare_all = [*hare.parameters(), *hare.buffers()]
        self._hare_params = [*hare.parameters()]  # the optimiser's (zero_grad, clipping)
        t = self._tortoise
        self._stacks = tuple(None if n is None or self.model is not None  # the default MLP's
                             else ht_support.linear_stack(n) for n in (hare, t))  # w/o autograd
        if t is not None:
            self._tort_float = [*t.parameters()] + [b for b in t.buffers()
                                                    if torch.is_floating_point(b)]
            self._tort_other = [b for b in t.buffers() if not torch.is_floating_point(b)]
            self._tort_all = [*t.parameters(), *t.buffers()]
        self._hare.eval()
        if t is not None:
            t.eval()

    def _adamw(self) -> Any:
        """The Hare's AdamW, fused (one kernel over all parameters: the same update as the
        per-tensor loop, at a third less time per step on the default MLP) when torch can fuse
        it for these parameters."""
        torch = _torch()
        try:
            return torch.optim.AdamW(self._hare.parameters(), lr=self.lr,
                                     weight_decay=self.weight_decay, fused=True)
        except (RuntimeError, ValueError):  # (parameters of a kind the fused kernel refuses)
            return torch.optim.AdamW(self._hare.parameters(), lr=self.lr,
                                     weight_decay=self.weight_decay)

    def _build(self) -> Any:
        """A freshly initialised network, its randomness drawn from the operator's generator."""
        torch = _torch()
        with seeded_init(self._gen):
            if self.model is None:
                hidden = [self.hidden] if is_int(self.hidden) else list(self.hidden)
                net = mlp([self.in_dim, *hidden, self.n_classes])
            else:
                net = self.model()
        if not isinstance(net, torch.nn.Module):
            raise ValueError(f"model must return a torch.nn.Module, got {type(net).__name__}")
        if not any(True for _ in net.parameters()):
            raise ValueError("model must return a network with parameters")
        return net

    def state_dict(self) -> dict:
        """Both networks, the optimiser, buffers, counters and the generator, as tensors,
        NumPy arrays and plain values (see :mod:`shiftwatch.operators.learners.torch_state`)."""
        raw = {
            "hare": self._hare.state_dict(),
            "tortoise": None if self._tortoise is None else self._tortoise.state_dict(),
            "optimizer": self._opt.state_dict(),
            "rng": self._gen.get_state(),
            "buffer_x": self._replay.x,
            "buffer_y": self._replay.y,
            "batch_x": self._batch_x[: self._batch_len],
            "batch_y": self._batch_y[: self._batch_len],
            "n_seen": self._replay.seen,
            "n_steps": self._n_steps,
            "n_resets": self._n_resets,
            "n_task_changes": self._n_task_changes,
            "task": self._task,
            "ema_t": self._ema_t,
            "n_alarm_resets": self._n_alarm_resets,
            "since_alarm_reset": self._since_alarm_reset,
            "since_reset": self._since_reset,
            "opt_steps": self._opt_steps,
            "detector": None if self._detector is None else self._detector.state_dict(),
        }
        # encode + decode is a deep copy that shares no tensor with the operator.
        return {"operator": self.name, "state": decode_state(encode_state(raw))}

    def load_state_dict(self, state: Mapping) -> None:
        payload = self._state_payload(state)
        self._reset()
        s = decode_state(encode_state(dict(payload)))
        if (s["tortoise"] is None) != (self._tortoise is None):
            raise ValueError(f"state_dict does not match method {self.method!r}")
        # load_state_dict copies values into the existing tensors, so the cached lists hold.
        self._hare.load_state_dict(s["hare"])
        if self._tortoise is not None:
            self._tortoise.load_state_dict(s["tortoise"])
        fused = [g.get("fused") for g in self._opt.param_groups]
        self._opt.load_state_dict(s["optimizer"])
        for g, f in zip(self._opt.param_groups, fused, strict=False):
            g["fused"] = f  # (a state saved by the unfused optimiser runs fused from here)
        self._gen.set_state(s["rng"])
        n, b = len(s["buffer_y"]), len(s["batch_y"])
        if n > self.buffer_size or b >= self.batch_size:
            raise ValueError("state_dict buffers do not fit buffer_size / batch_size")
        self._replay.load(s["buffer_x"], s["buffer_y"], s["n_seen"])
        self._batch_x[:b], self._batch_y[:b], self._batch_len = s["batch_x"], s["batch_y"], b
        self._n_steps = int(s["n_steps"])
        self._n_resets = int(s["n_resets"])
        self._n_task_changes = int(s["n_task_changes"])
        self._task = s["task"]
        # States written before the EMA warm-up existed: the warm-up counts every step.
        self._ema_t = int(s.get("ema_t", self._n_steps))
        self._n_alarm_resets = int(s.get("n_alarm_resets", 0))
        self._since_alarm_reset = int(s.get("since_alarm_reset", 0))
        self._since_reset = int(s.get("since_reset", 0))
        self._opt_steps = None if s.get("opt_steps") is None else int(s["opt_steps"])
        if self._detector is not None and s.get("detector") is not None:
            self._detector.load_state_dict(s["detector"])

    # ---- read-only views ------------------------------------------------------------

    @property
    def hare(self) -> Any:
        """The trained network (do not modify)."""
        return self._hare

    @property
    def tortoise(self) -> Any:
        """The EMA network, or None for methods without one (do not modify)."""
        return self._tortoise

    @property
    def n_steps(self) -> int:
        """Optimiser steps taken so far."""
        return self._n_steps

    @property
    def n_resets(self) -> int:
        """Times the Hare was reset to the Tortoise."""
        return self._n_resets

    @property
    def n_task_changes(self) -> int:
        """Task changes seen (each one ran the method's intervention, if it has one)."""
        return self._n_task_changes

    @property
    def n_alarm_resets(self) -> int:
        """Resets driven by alarms (``reset_on="alarm"``)."""
        return self._n_alarm_resets

    @property
    def ema_momentum_now(self) -> float:
        """The momentum the next EMA update uses (``m_t`` with the warm-up)."""
        m = float(self.ema_momentum)
        if self.ema_warmup is None:
            return m
        t = self._ema_t
        return min(m, t / (t + float(self.ema_warmup)))

    @property
    def reset_period_records(self) -> int | None:
        """The Hare reset period in labelled training records (``None`` when the period is
        ``reset_every`` optimiser steps): ``reset_every_records``, or by default two EMA
        horizons, ``ceil(2 * batch_size / (replay_ratio * (1 - ema_momentum)))``."""
        if self.reset_every is not None:
            return None
        if self.reset_every_records is not None:
            return int(self.reset_every_records)
        steps = 2.0 / (1.0 - float(self.ema_momentum))
        return max(1, math.ceil(round(steps * self.batch_size / self.replay_ratio, 6)))

    @property
    def lr_now(self) -> float:
        """The learning rate of the next step (lower during the warm-up after a reset)."""
        w, s = self.reset_lr_warmup, self._opt_steps
        if s is None or s >= w:
            return float(self.lr)
        return float(self.lr) * (s + 1) / w

    @property
    def buffer_len(self) -> int:
        """Records in the replay buffer."""
        return len(self._replay)

    # ---- processing -----------------------------------------------------------------

    def _parse(self, record: Mapping) -> tuple[np.ndarray, int | None, bool, bool]:
        if not isinstance(record, Mapping):
            raise BadInput(f"record is a {type(record).__name__}, not a mapping")
        x = as_array(get_field(record, self.field), shape=(self.in_dim,), name=self.field,
                     max_abs=self.max_abs)
        y = record.get("y")
        if y is not None:
            if isinstance(y, bool) or not isinstance(y, numbers.Real):
                raise BadInput(f"label y must be an integer class index, got {y!r}"[:200])
            # (an integer is compared as it is: float() of a huge one overflows)
            if not (isinstance(y, numbers.Integral) or float(y).is_integer()) \
                    or not 0 <= y < self.n_classes:
                raise BadInput(f"label y={y!r} is not a class index in 0..{self.n_classes - 1}")
            y = int(y)
        train = record.get("train", True) is not False
        alarm = bool(record.get("alarm")) if self.reset_on == "alarm" else False
        return x, y, train, alarm

    def _predictor(self) -> Any:
        if self._tortoise is not None and self.predict_with == "tortoise":
            return self._tortoise
        return self._hare

    def process_batch(self, records: Iterable[Mapping]) -> list[dict | DeadLetter]:
        with TorchThreads(self.threads):
            return self._run(list(records), dead_letters=True)

    def process(self, record: Mapping) -> list[dict]:
        with TorchThreads(self.threads):
            return self._run([record], dead_letters=False)  # type: ignore[return-value]

    def _run(self, records: list, dead_letters: bool) -> list[dict | DeadLetter]:
        """Test-then-train over ``records``: each run of records up to the next training step
        is predicted in one forward pass; when learning a record changes a network (a step,
        a task-change intervention, an alarm reset) the records after it are predicted anew."""
        parsed: list = []
        for r in records:
            try:
                parsed.append(self._parse(r))
            except BadInput as exc:
                if not dead_letters:
                    raise
                parsed.append(exc)
        out: list[dict | DeadLetter] = []
        i, n = 0, len(records)
        while i < n:
            # The run ends at the record that fills the micro-batch (a training step).
            room, j = self.batch_size - self._batch_len, i
            while j < n:
                p = parsed[j]
                if not isinstance(p, BadInput) and p[1] is not None and p[2]:
                    room -= 1
                    if room == 0:
                        break
                j += 1
            run = [k for k in range(i, min(j + 1, n)) if not isinstance(parsed[k], BadInput)]
            preds = self._predict_rows(np.stack([parsed[k][0] for k in run])) if run else {}
            row = 0
            version = self._version
            for k in range(i, min(j + 1, n)):
                i = k + 1
                p = parsed[k]
                if isinstance(p, BadInput):
                    out.append(self._dead_letter(records[k], p))
                    continue
                fields = {f: int(v[row]) for f, v in preds.items()}
                row += 1
                out.append(self._output(records[k], **fields))
                self._learn_record(records[k], p, fields["y_pred"])
                if self._version != version:
                    break
        return out

    def _predict_rows(self, x: np.ndarray) -> dict[str, np.ndarray]:
        torch = _torch()
        xt = torch.from_numpy(x).to(self._dtype)
        (sh, st), fwd = self._stacks, ht_support.stack_forward
        with torch.no_grad():
            y_hare = (fwd(*sh, xt) if sh else self._hare(xt)).argmax(1).numpy()
            if self._tortoise is None:
                return {"y_pred": y_hare}
            y_tort = (fwd(*st, xt) if st else self._tortoise(xt)).argmax(1).numpy()
        if self.predict_with == "tortoise":
            return {"y_pred": y_tort, "y_pred_hare": y_hare}
        return {"y_pred": y_hare, "y_pred_tortoise": y_tort}

    def _learn_record(self, record: Mapping, parsed: tuple, y_pred: int) -> None:
        x, y, train, alarm = parsed
        inner = False
        if self._detector is not None and y is not None:
            # The inner detector watches the 0/1 loss of every labelled record.
            found = self._detector.process({"value": float(y_pred != y)})
            inner = any(o.get("alarm") for o in found)
        if (alarm or inner) and self._since_alarm_reset >= self.min_reset_gap:
            self.alarm_reset(None if inner else self.input_reset_to)
        if y is not None and train:
            self._since_alarm_reset += 1
            self._since_reset += 1
            self._learn_one(x, y, record.get("task"))

    def alarm_reset(self, to: str | None = None) -> None:
        """Reset as at an alarm (``to``, default ``reset_to``), then a fresh optimiser warming
        up, an empty replay buffer and a restarted EMA warm-up."""
        torch = _torch()
        to = self.reset_to if to is None else to
        if to not in ht_support.RESET_TO:
            raise ValueError(f"reset to one of {ht_support.RESET_TO}, got {to!r}")
        with torch.no_grad():
            if to == "tortoise":
                if self._tortoise is not None:  # (without one the Hare stays as it is)
                    for h, t in zip(self._hare_all, self._tort_all, strict=True):
                        h.copy_(t)
            elif to == "head":
                reset_head(self._hare, self._build())
            elif to == "full":
                fresh = self._build()
                for h, f in zip(self._hare_all, [*fresh.parameters(), *fresh.buffers()],
                                strict=True):
                    h.copy_(f)
            if self._tortoise is not None:  # the Tortoise restarts from the reset Hare
                for t, h in zip(self._tort_all, self._hare_all, strict=True):
                    t.copy_(h)
        self._opt = self._adamw()
        self._opt_steps = 0
        self._since_reset = 0
        self._replay.clear()
        self._ema_t = 0
        self._since_alarm_reset = 0
        self._n_alarm_resets += 1
        self._version += 1

    def _learn_one(self, x: np.ndarray, y: int, task: Any) -> None:
        if task is not None:
            if self._task is not None and task != self._task:
                self.task_change()
            self._task = task
        i = self._batch_len
        self._batch_x[i] = x
        self._batch_y[i] = y
        self._batch_len = i + 1
        if self._batch_len < self.batch_size:
            return
        torch = _torch()
        xb = torch.from_numpy(self._batch_x.copy())
        yb = torch.from_numpy(self._batch_y.copy())
        k = self.batch_size if self.replay_size is None else self.replay_size
        boost = self.alarm_replay_ratio is not None and self._n_alarm_resets > 0 \
            and self._since_alarm_reset <= self.alarm_boost_records
        for _ in range(self.alarm_replay_ratio if boost else self.replay_ratio):
            if len(self._replay) and k:  # k replayed records, drawn with replacement
                idx = torch.randint(0, len(self._replay), (k,), generator=self._gen).numpy()
                xs = torch.cat([xb, torch.from_numpy(self._replay.x[idx])])
                ys = torch.cat([yb, torch.from_numpy(self._replay.y[idx])])
                self._step(xs, ys)
            else:
                self._step(xb, yb)
        for j in range(self.batch_size):
            self._replay.add(self._batch_x[j], self._batch_y[j], self._gen)
        self._batch_len = 0

    def _step(self, x: Any, y: Any) -> None:
        """One optimiser step on (x, y), then the EMA and, when due, the reset."""
        hare = self._hare
        if self.model is None:
            # The default MLP (Linear and ReLU) computes the same in train and eval mode and
            # draws no random numbers in training: no mode switch, no seeded scope.
            self._gradient_step(x, y)
        else:
            hare.train()
            try:
                with seeded_init(self._gen):
                    self._gradient_step(x, y)
            finally:
                hare.eval()
        self._n_steps += 1
        self._version += 1
        if self._tortoise is not None:
            self._ema()
            period = self.reset_period_records
            if not METHODS[self.method][1]:
                pass
            elif period is None and self._n_steps % self.reset_every == 0:
                self._reset_hare()
            elif period is not None and self._since_reset >= period:
                self._reset_hare()

    def _gradient_step(self, x: Any, y: Any) -> None:
        if self._opt_steps is not None:  # linear warm-up of a fresh optimiser
            for group in self._opt.param_groups:
                group["lr"] = self.lr_now
            self._opt_steps = None if self._opt_steps + 1 >= self.reset_lr_warmup \
                else self._opt_steps + 1
        params = self._hare_params  # (by hand on the default MLP: the same to the bit)
        ht_support.set_grads(self._hare, self._stacks[0], params, x.to(self._dtype), y)
        if self.clip_norm is not None:
            ht_support.clip_grad_norm(params, self.clip_norm)
        ht_support.adamw_step(self._opt, params)

    def _ema(self) -> None:
        torch = _torch()
        m = self.ema_momentum_now
        self._ema_t += 1
        with torch.no_grad():
            torch._foreach_mul_(self._tort_float, m)
            torch._foreach_add_(self._tort_float, self._hare_float, alpha=1.0 - m)
            for t, h in zip(self._tort_other, self._hare_other, strict=True):
                t.copy_(h)

    def _reset_hare(self) -> None:
        torch = _torch()
        with torch.no_grad():
            # copy_ writes values into the Hare's own tensors: the networks never share memory
            # and the optimiser keeps pointing at the Hare's parameters (and keeps its state).
            for h, t in zip(self._hare_all, self._tort_all, strict=True):
                h.copy_(t)
        self._since_reset = 0
        self._n_resets += 1

    def task_change(self) -> None:
        """Run the method's task-change intervention now (Shrink & Perturb, head reset).

        Called by :meth:`process` when a labelled training record's ``task`` differs from the
        previous one's; offline loops call it at a phase boundary.
        """
        torch = _torch()
        self._n_task_changes += 1
        action = METHODS[self.method][2]
        if action is None:
            return
        fresh = self._build()
        self._version += 1
        with torch.no_grad():
            if action == "shrink-perturb":
                for p, f in zip(self._hare.parameters(), fresh.parameters(), strict=True):
                    p.mul_(self.shrink).add_(f, alpha=1.0 - self.shrink)
            else:  # head reset: the last module holding parameters of its own
                reset_head(self._hare, fresh)

    # ---- offline use (benchmarks): the same steps without the stream machinery ----------

    def learn_many(self, x: Any, y: Any) -> None:
        """One optimiser step on exactly these rows (no micro-batch, no replay), followed by
        the EMA and the reset schedule, as :meth:`process` does for a full micro-batch."""
        torch = _torch()
        xt = torch.as_tensor(np.asarray(x)).to(self._dtype)
        yt = torch.as_tensor(np.asarray(y), dtype=torch.int64)
        if xt.ndim != 2 or xt.shape[1] != self.in_dim or yt.shape != (xt.shape[0],):
            raise ValueError(f"learn_many needs x of shape (n, {self.in_dim}) and y of shape "
                             f"(n,), got {tuple(xt.shape)} and {tuple(yt.shape)}")
        self._since_reset += int(xt.shape[0])
        with TorchThreads(self.threads):
            self._step(xt, yt)

    def predict_many(self, x: Any, net: str | None = None) -> np.ndarray:
        """Class predictions for the rows of ``x`` by ``net`` (``"hare"``, ``"tortoise"``;
        default: the network behind ``y_pred``)."""
        torch = _torch()
        model = {None: self._predictor(), "hare": self._hare, "tortoise": self._tortoise}[net]
        if model is None:
            raise ValueError(f"method {self.method!r} has no Tortoise")
        xt = torch.as_tensor(np.asarray(x)).to(self._dtype)
        with TorchThreads(self.threads), torch.no_grad():
            return model(xt).argmax(1).numpy()
