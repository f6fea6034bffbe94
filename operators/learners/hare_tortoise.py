"""Hare & Tortoise: a plasticity-preserving continual learner as a stream operator.

The Hare is the network the optimiser trains; the Tortoise starts as a copy of it and follows
it by an exponential moving average after every optimiser step; every ``reset_every`` steps
the Hare is set back to the Tortoise. Predictions come from the Tortoise. The baselines of the
paper (plain warm start, EMA alone, Shrink & Perturb, head reset) are options of the same
operator, so every arm runs the same code.

PyTorch is imported when an operator is constructed, not when this module is imported: the
operator is registered without torch, and constructing it without torch raises an
``ImportError`` saying how to install it.
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from shiftwatch.operators.contract import Operator
from shiftwatch.operators.learners.replay import Reservoir
from shiftwatch.operators.learners.task_boundaries import check_inner_detector
from shiftwatch.operators.learners.torch_nets import (
    FLOAT32_MAX_ABS,
    TorchThreads,
    check_int,
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


def _tiny_batchnorm_net() -> Any:
    """4 -> 8 (batch norm, dropout) -> 3: the check suite's user-factory case."""
    torch = _torch()
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                               torch.nn.Dropout(0.1), torch.nn.Linear(8, 3))


@register("hare-tortoise")
class HareTortoise(Operator):
    """Hare & Tortoise continual learner (test-then-train) on feature vectors with class labels.

    Each record's ``value`` (a vector of ``in_dim`` numbers) is first predicted: the output
    carries ``y_pred`` (from the Tortoise, or the Hare with ``predict_with="hare"`` or a method
    without a Tortoise) and the other network's prediction as ``y_pred_hare`` /
    ``y_pred_tortoise``. Then, if the record has a label ``y`` (an integer in
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
    on ``m_t = m``, the paper's EMA. So the Tortoise is useful from the first micro-batches of
    a stream and becomes the slow average the resets need within a few time constants. (On
    held-out seeds ``k = 1`` reached only 0.93x a plain MLP's accuracy on short mnist1d
    streams (``k = 2``: 0.96x or more) and the earlier rule
    ``min(m, (1 + t) / (10 + t))``, which takes ``9 m / (1 - m)`` updates, cost accuracy on
    the long warm-start protocol of ``benchmarks/hare_tortoise.py``.)
    ``ema_warmup=None`` uses ``m_t = m`` from the start, the Tortoise starting at the
    initialisation (the paper's rule, for epochs over a data set). Every ``reset_every``
    steps the Hare's values are copied from the Tortoise (all layers; the optimiser state is
    kept). Each step zeroes the gradients, clips their norm to ``clip_norm`` and takes an
    AdamW step.

    Change detectors drive resets with ``reset_on="alarm"``: a record whose ``alarm`` field is
    truthy (a detector chained before with ``keep_input=true``, watching the features or the
    labels) or an alarm of the inner ``detector``, which watches the learner's own 0/1 loss
    stream (``1.0`` when ``y_pred`` missed a labelled record's ``y``, else ``0.0``), resets
    the learner after the record is predicted and before it is learned: ``reset_to="tortoise"``
    sets the Hare to the Tortoise, ``"full"`` re-initialises both networks and the optimiser.
    Either way the replay buffer is emptied (its records describe the concept that changed)
    and the EMA warm-up starts again, so the Tortoise follows the re-adapting Hare. Alarms
    within ``min_reset_gap`` labelled training records of the previous alarm reset are
    ignored.

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
        Hare reset period in optimiser steps (method ``"hare-tortoise"``).
    batch_size
        Labelled records per micro-batch.
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
        ``None`` (resets on the ``reset_every`` schedule only) or ``"alarm"`` (also at alarms).
    reset_to
        What an alarm resets: ``"tortoise"`` (the Hare is set to the Tortoise; methods with a
        Tortoise) or ``"full"`` (fresh networks and optimiser).
    detector
        A registered change detector (e.g. ``"river:DDM"``) run inside the operator on the 0/1
        loss of every labelled record; its alarms count as the record's ``alarm``. Needs
        ``reset_on="alarm"``.
    detector_params
        Parameters of ``detector``.
    min_reset_gap
        Labelled training records after an alarm reset during which alarms are ignored.
    field
        Dotted path of the feature vector in the record.
    seed
        Seeds the initialisation, replay sampling and reservoir (a private
        ``torch.Generator``; torch's global generator is left as it was).
    threads
        Intra-op threads torch may use while the operator computes (set for the call and
        restored afterwards); ``None`` leaves torch's setting alone. One thread suits the
        small networks and single-record predictions of a stream operator, which scales out
        by keys and partitions instead: on a loaded 2-core machine two threads made the
        check-suite stream 15 times slower.

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
    >>> accuracy("y_pred"), accuracy("y_pred_hare"), op.n_steps, op.n_resets
    (0.893, 0.89, 75, 3)

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

    def __init__(
        self,
        in_dim: int,
        n_classes: int,
        hidden: int | Sequence[int] = (256, 256),
        model: Callable[[], Any] | None = None,
        method: str = "hare-tortoise",
        ema_momentum: float = 0.999,
        ema_warmup: float | None = 2.0,
        reset_every: int = 1000,
        batch_size: int = 32,
        replay_ratio: int = 1,
        replay_size: int | None = None,
        buffer_size: int = 2000,
        lr: float = 1e-3,
        weight_decay: float = 1e-3,
        clip_norm: float | None = 0.5,
        shrink: float = 0.2,
        predict_with: str = "tortoise",
        reset_on: str | None = None,
        reset_to: str = "tortoise",
        detector: str | None = None,
        detector_params: Mapping[str, Any] | None = None,
        min_reset_gap: int = 200,
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
        self.detector = detector
        self.detector_params = detector_params
        self.min_reset_gap = min_reset_gap
        self.field = field
        self.seed = seed
        self.threads = threads
        self._validate_params()
        self._reset()

    # ---- parameters and state -------------------------------------------------------

    def _validate_params(self) -> None:
        def positive_int(name: str, minimum: int = 1) -> None:
            check_int(self, name, minimum)

        def real_in(name: str, lo: float, hi: float, hi_open: bool = False) -> None:
            v = getattr(self, name)
            ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and lo <= v <= hi
            if ok and hi_open and v == hi:
                ok = False
            if not ok:
                bracket = ")" if hi_open else "]"
                raise ValueError(f"{name} must be a number in [{lo}, {hi}{bracket}, got {v!r}")

        positive_int("in_dim")
        positive_int("n_classes", 2)
        hidden = [self.hidden] if is_int(self.hidden) else self.hidden
        if (isinstance(hidden, (str, bytes)) or not isinstance(hidden, Sequence)
                or not all(is_int(h) and h >= 1 for h in hidden)):
            raise ValueError(f"hidden must be an integer >= 1 or a list of them, "
                             f"got {self.hidden!r}")
        if self.model is not None and not callable(self.model):
            raise ValueError(f"model must be None or a zero-argument callable returning a "
                             f"torch.nn.Module, got {self.model!r}")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}, "
                             f"got {self.method!r}")
        real_in("ema_momentum", 0.0, 1.0, hi_open=True)
        if self.ema_warmup is not None:
            real_in("ema_warmup", 1.0, float("inf"))
        positive_int("reset_every")
        positive_int("batch_size")
        positive_int("replay_ratio")
        if self.replay_size is not None:
            positive_int("replay_size", 0)
        positive_int("buffer_size", 0)
        real_in("lr", 0.0, float("inf"))
        real_in("weight_decay", 0.0, float("inf"))
        if self.clip_norm is not None:
            real_in("clip_norm", 0.0, float("inf"))
        real_in("shrink", 0.0, 1.0)
        if self.predict_with not in ("tortoise", "hare"):
            raise ValueError(f"predict_with must be 'tortoise' or 'hare', "
                             f"got {self.predict_with!r}")
        if self.reset_on not in (None, "alarm"):
            raise ValueError(f"reset_on must be None or 'alarm', got {self.reset_on!r}")
        if self.reset_to not in ("tortoise", "full"):
            raise ValueError(f"reset_to must be 'tortoise' or 'full', got {self.reset_to!r}")
        if (self.reset_on == "alarm" and self.reset_to == "tortoise"
                and not METHODS[self.method][0]):
            raise ValueError(f"reset_to='tortoise' needs a method with a Tortoise, not "
                             f"{self.method!r}; use reset_to='full'")
        if self.detector is not None and self.reset_on != "alarm":
            raise ValueError("detector needs reset_on='alarm'")
        check_inner_detector(self.detector, self.detector_params)
        positive_int("min_reset_gap", 0)
        if not isinstance(self.field, str) or not self.field:
            raise ValueError(f"field must be a non-empty string, got {self.field!r}")
        if not is_int(self.seed) or not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be an integer in [0, 2**63), got {self.seed!r}")
        if self.threads is not None and (not is_int(self.threads) or self.threads < 1):
            raise ValueError(f"threads must be None or an integer >= 1, got {self.threads!r}")

    def _reset(self) -> None:
        torch = _torch()
        self._gen = torch.Generator().manual_seed(int(self.seed))
        self._hare = self._build()
        has_tortoise = METHODS[self.method][0]
        # A copy of the values, never the same tensors.
        self._tortoise = copy.deepcopy(self._hare) if has_tortoise else None
        if self._tortoise is not None:
            self._tortoise.requires_grad_(False)
        self._opt = torch.optim.AdamW(self._hare.parameters(), lr=self.lr,
                                      weight_decay=self.weight_decay)
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
        self._version = 0  # bumped whenever a network changes (micro-batch prediction)
        self._detector = (None if self.detector is None
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
        t = self._tortoise
        if t is not None:
            self._tort_float = [*t.parameters()] + [b for b in t.buffers()
                                                    if torch.is_floating_point(b)]
            self._tort_other = [b for b in t.buffers() if not torch.is_floating_point(b)]
            self._tort_all = [*t.parameters(), *t.buffers()]
        self._hare.eval()
        if t is not None:
            t.eval()

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
        self._opt.load_state_dict(s["optimizer"])
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
        with torch.no_grad():
            y_hare = self._hare(xt).argmax(1).numpy()
            if self._tortoise is None:
                return {"y_pred": y_hare}
            y_tort = self._tortoise(xt).argmax(1).numpy()
        if self.predict_with == "tortoise":
            return {"y_pred": y_tort, "y_pred_hare": y_hare}
        return {"y_pred": y_hare, "y_pred_tortoise": y_tort}

    def _learn_record(self, record: Mapping, parsed: tuple, y_pred: int) -> None:
        x, y, train, alarm = parsed
        if self._detector is not None and y is not None:
            # The inner detector watches the 0/1 loss of every labelled record.
            found = self._detector.process({"value": float(y_pred != y)})
            alarm = alarm or any(o.get("alarm") for o in found)
        if alarm and self._since_alarm_reset >= self.min_reset_gap:
            self.alarm_reset()
        if y is not None and train:
            self._since_alarm_reset += 1
            self._learn_one(x, y, record.get("task"))

    def alarm_reset(self) -> None:
        """Reset as at an alarm (``reset_to``): the Hare to the Tortoise, or fresh networks and
        optimiser; empty the replay buffer and restart the EMA warm-up."""
        torch = _torch()
        if self.reset_to == "full":
            fresh = self._build()
            with torch.no_grad():
                for h, f in zip(self._hare_all, [*fresh.parameters(), *fresh.buffers()],
                                strict=True):
                    h.copy_(f)
                if self._tortoise is not None:
                    for t, h in zip(self._tort_all, self._hare_all, strict=True):
                        t.copy_(h)
            self._opt = torch.optim.AdamW(self._hare.parameters(), lr=self.lr,
                                          weight_decay=self.weight_decay)
        elif self._tortoise is not None:
            with torch.no_grad():
                for h, t in zip(self._hare_all, self._tort_all, strict=True):
                    h.copy_(t)
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
        for _ in range(self.replay_ratio):
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
        hare.train()
        try:
            if self.model is None:  # the default MLP draws no random numbers in training
                self._gradient_step(x, y)
            else:
                with seeded_init(self._gen):
                    self._gradient_step(x, y)
        finally:
            hare.eval()
        self._n_steps += 1
        self._version += 1
        if self._tortoise is not None:
            self._ema()
            if METHODS[self.method][1] and self._n_steps % self.reset_every == 0:
                self._reset_hare()

    def _gradient_step(self, x: Any, y: Any) -> None:
        torch = _torch()
        self._opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(self._hare(x.to(self._dtype)), y)
        loss.backward()
        if self.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(self._hare.parameters(), self.clip_norm)
        self._opt.step()

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
                heads = [n for n, m in self._hare.named_modules()
                         if any(True for _ in m.parameters(recurse=False))]
                mine = dict(self._hare.named_modules())[heads[-1]]
                new = dict(fresh.named_modules())[heads[-1]]
                for p, f in zip([*mine.parameters(recurse=False), *mine.buffers(recurse=False)],
                                [*new.parameters(recurse=False), *new.buffers(recurse=False)],
                                strict=True):
                    p.copy_(f)

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

    # ---- hooks for the shared check suite ------------------------------------------

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict]:
        base = {"in_dim": 4, "n_classes": 3, "hidden": [8], "batch_size": 4, "buffer_size": 16,
                "ema_momentum": 0.9, "reset_every": 5, "seed": 3}
        # Head reset differs from warm start only at a task change: its own tests cover it.
        yield base
        yield {**base, "method": "ema", "predict_with": "hare", "replay_ratio": 2,
               "replay_size": 2}
        yield {**base, "method": "warm", "clip_norm": None}
        yield {**base, "method": "shrink-perturb", "buffer_size": 0}
        yield {**base, "model": _tiny_batchnorm_net}

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
