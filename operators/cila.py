"""CILA, a contrastive continual learner with adaptive distillation, as a stream operator.

``CILA`` (registered as ``cila``) learns a stream of labelled feature vectors task after task,
test-then-train: each record is first predicted (``y_pred``) and then trained on. Co2L's
training (Cha et al., 2021) runs on mini-batches of the current task mixed with samples
replayed from a class-balanced buffer: an asymmetric supervised contrastive loss on two
augmented views plus instance-wise relation distillation (IRD) against a frozen copy of the
model taken at the end of the previous task. CILA (Wen et al., 2024) weighs the distillation
per task with ``lambda_t`` computed from the mean losses of the earlier tasks. Predictions come
from a linear probe on the encoder's output. The losses are in
:mod:`shiftwatch.operators.cila_losses`.

The baselines of the paper are options of the same operator (``method=``): ``co2l``
(``lambda`` fixed at 1), ``er`` (experience replay, cross-entropy through the encoder) and
``finetune`` (cross-entropy, no buffer).

PyTorch is an optional dependency (the ``learners`` extra): the operator is registered either
way and constructing it without torch raises a clear ``ImportError``.
"""

from __future__ import annotations

import contextlib
import copy
import math
import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from shiftwatch.operators.base import (
    BadInput,
    Operator,
    as_array,
    create,
    decode_state,
    encode_state,
    get_field,
)
from shiftwatch.operators.base import register as _register

try:
    import torch

    import shiftwatch.operators.torch_state  # noqa: F401  (registers the tensor codec)
    from shiftwatch.operators.cila_losses import asymmetric_supcon, relation_distillation
except ImportError:  # pragma: no cover - exercised only without the learners extra
    torch = None  # type: ignore[assignment]

__all__ = ["CILA", "AUGMENTATIONS", "adaptive_lambda"]

METHODS = ("cila", "co2l", "er", "finetune")
LAMBDA_FORMS = ("max", "pure", "min")
BOUNDARIES = ("auto", "task", "label", "alarm")


# --------------------------------------------------------------------------------------
# Augmentations of feature vectors: f(x, generator, strength) -> x'
# --------------------------------------------------------------------------------------


def augment_noise(x: torch.Tensor, g: torch.Generator, s: float) -> torch.Tensor:
    """Add Gaussian noise of standard deviation ``s`` to every feature."""
    return x + s * torch.randn(x.shape, generator=g)


def augment_shift(x: torch.Tensor, g: torch.Generator, s: float) -> torch.Tensor:
    """Add one Gaussian offset (standard deviation ``s``) to all features of a sample."""
    return x + s * torch.randn((x.shape[0], 1), generator=g)


def augment_scale(x: torch.Tensor, g: torch.Generator, s: float) -> torch.Tensor:
    """Multiply each sample by a factor drawn uniformly from ``[1 - 2s, 1 + 2s]``."""
    return x * (1.0 + 2.0 * s * (2.0 * torch.rand((x.shape[0], 1), generator=g) - 1.0))


def augment_mask(x: torch.Tensor, g: torch.Generator, s: float) -> torch.Tensor:
    """Set each feature to zero with probability ``s``."""
    return x * (torch.rand(x.shape, generator=g) >= s)


#: The named augmentations ``augment=`` accepts, applied in the order given.
AUGMENTATIONS: dict[str, Callable[[Any, Any, float], Any]] = {
    "noise": augment_noise,
    "shift": augment_shift,
    "scale": augment_scale,
    "mask": augment_mask,
}


def adaptive_lambda(task_losses: Sequence[Sequence[float]], kappa: float,
                    form: str = "max") -> float:
    """CILA's distillation weight for the task after ``task_losses`` (one ``(Lcon, Ldis)`` mean
    pair per finished task, oldest first).

    ``lambda = 1`` for the second task; afterwards ``r = kappa * sum_j Ldis_j / sum_j Lcon_j``
    and ``lambda = max(1, r)`` (``form="max"``), ``r`` (``"pure"``) or ``min(1, r)``
    (``"min"``). The first task has no previous model, so its ``Ldis`` is 0.

    >>> adaptive_lambda([(5.0, 0.0)], kappa=2.0)
    1.0
    >>> adaptive_lambda([(5.0, 0.0), (4.0, 6.0)], kappa=2.0), adaptive_lambda(
    ...     [(5.0, 0.0), (4.0, 6.0)], kappa=2.0, form="min")
    (1.3333333333333333, 1.0)
    """
    if len(task_losses) <= 1:
        return 1.0
    con = sum(float(c) for c, _ in task_losses)
    dis = sum(float(d) for _, d in task_losses)
    r = kappa * dis / con if con > 0 else 1.0
    if form == "max":
        return max(1.0, r)
    if form == "min":
        return min(1.0, r)
    return r


class _MLP(torch.nn.Module if torch is not None else object):  # type: ignore[misc]
    def __init__(self, sizes: Sequence[int], last_relu: bool) -> None:
        super().__init__()
        layers: list = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            layers.append(torch.nn.Linear(a, b))
            if i < len(sizes) - 2 or last_relu:
                layers.append(torch.nn.ReLU())
        self.net = torch.nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _is_int(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


@_register("cila")
class CILA(Operator):
    """Contrastive continual learner with adaptive distillation (CILA) on Co2L; test-then-train.

    Consumes records with a feature vector ``value``, a label ``y`` (int or str) and an
    optional ``task``; emits ``y_pred`` (``None`` before any label was seen) and ``boundary``
    (``True`` when the record opened a new task). Records without a label, or with
    ``"train": false``, are only predicted.

    A task boundary (``boundary=``) comes from a change of the ``task`` field (``"task"``),
    from a truthy ``alarm`` field, e.g. set by a change detector chained before (``"alarm"``),
    or from the first sight of a new label (``"label"``, class-incremental streams). ``"auto"``
    uses ``task`` when the record has it, else ``alarm`` when it has that field, else new
    labels. Alarms and new labels within the first ``min_task_length`` training records of a
    task do not open another one (a task of several classes introduces them one by one).

    At a boundary the operator trains on the pending partial batch, stores the finished
    task's mean losses, computes the next ``lambda``, freezes a copy of encoder and
    projection head, refits the linear probe from zero on the buffer plus the task's samples
    (a reservoir of ``buffer_size``; classes weighted equally, as Co2L's linear evaluation
    on buffer + last task), and merges that reservoir into the replay buffer class-balanced.
    (The next lambda is computed when the next task opens.)

    Parameters
    ----------
    method
        ``"cila"`` (adaptive lambda), ``"co2l"`` (lambda fixed at 1), ``"er"`` (experience
        replay with cross-entropy) or ``"finetune"`` (cross-entropy, no buffer).
    lambda_form
        CILA's ``"max"``: ``max(1, r)``, ``"pure"``: ``r`` or ``"min"``: ``min(1, r)``, with
        ``r = kappa * sum_{j<t} Ldis_j / sum_{j<t} Lcon_j`` (see :func:`adaptive_lambda`).
    kappa
        CILA's scale of the loss ratio (> 0). The IRD loss is 0.1-0.15 of the SupCon loss on
        the benchmark streams, so with ``kappa <= 5`` the max form stays at 1 (Co2L); the
        default 20 was chosen on a held-out seed of Split-Digits (benchmarks/results/cila.md).
    temperature
        Temperature of the supervised contrastive loss.
    ird_temperature, ird_temperature_prev
        IRD temperatures of the current and of the frozen previous model.
    buffer_size
        Replay buffer capacity in samples (>= 0), kept class-balanced.
    batch_size
        Training records per mini-batch: the operator trains each time this many labelled
        records have arrived.
    replay_batch_size
        Buffer samples mixed into each mini-batch (default: ``batch_size``).
    steps
        Gradient steps per mini-batch (fresh augmentations and replay samples each).
    hidden_sizes, embedding_dim, projection_dim
        The default MLP encoder ``n_features -> hidden_sizes -> embedding_dim`` (ReLU) and
        projection head ``embedding_dim -> embedding_dim -> projection_dim``.
    encoder
        From Python: a factory ``encoder(n_features) -> torch.nn.Module`` mapping ``(B, n)``
        to ``(B, e)``; replaces the default MLP (the head then maps ``e`` to
        ``projection_dim``). It is called with the global torch RNG seeded from ``seed``.
    lr
        Adam learning rate of encoder and head.
    probe_lr, probe_epochs
        Learning rate of the linear probe (plain gradient descent on L2-normalised encoder
        outputs, one step per mini-batch) and the number of full-batch steps of its refit
        on the buffer at a task boundary.
    augment
        Names from :data:`AUGMENTATIONS` (``noise``, ``shift``, ``scale``, ``mask``), applied in
        order, or a callable ``f(x, generator) -> x`` on a ``(B, n)`` tensor.
    augment_strength
        The strength ``s`` of the named augmentations.
    boundary, min_task_length
        Where task boundaries come from, as above.
    detector, detector_params
        A registered change detector (e.g. ``"river:ADWIN"``) run inside the operator on
        every training record; its alarms count as the record's ``alarm`` field, so
        ``boundary="alarm"`` (or ``"auto"`` on records without ``task``) finds unlabelled
        task boundaries. Its state is part of this operator's state.
    field
        Field holding the feature vector.
    n_features
        Vector length; ``None`` takes it from the first record.
    threads
        torch intra-op threads while the operator computes (set around each call and
        restored after); ``None`` keeps torch's setting. One thread is fastest for these
        small networks: scale out with keys and partitions instead. Subnormal floats are
        flushed to zero during the operator's calls too (see ``_torch_threads``).
    seed
        Seeds the operator's own ``torch.Generator`` (initialisation, augmentations, replay
        sampling); global RNGs are left alone.

    Examples
    --------
    >>> import numpy as np
    >>> from shiftwatch.operators.cila import CILA
    >>> rng = np.random.default_rng(0)
    >>> centres = rng.normal(0, 2, (4, 6))
    >>> stream = [{"value": (centres[c] + rng.normal(0, 0.5, 6)).tolist(), "y": int(c),
    ...            "task": int(c) // 2}
    ...           for t in range(2) for c in rng.permutation(np.repeat([2 * t, 2 * t + 1], 40))]
    >>> op = CILA(buffer_size=20, batch_size=8, hidden_sizes=(32,), embedding_dim=16,
    ...           projection_dim=16, seed=1)
    >>> out = op.process_batch(stream)
    >>> [o["boundary"] for o in out].index(True), op.lambdas  # task 2 opens at record 80
    (80, [0.0, 1.0])
    >>> sum(o["y_pred"] == r["y"] for o, r in zip(out[120:], stream[120:]))  # of 40
    31
    >>> op.end_task()  # close task 2: buffer merge and probe refit, as at a boundary
    >>> X, y = np.array([r["value"] for r in stream]), [r["y"] for r in stream]
    >>> float(np.mean(np.array(op.classes_)[op.decision_scores(X).argmax(1)] == y))
    1.0
    >>> sorted(op.classes_), len(op.buffer_labels)
    ([0, 1, 2, 3], 20)

    References
    ----------
    Y. Wen, Z. Tan, K. Zheng, C. Xie, W. Huang. Provable Contrastive Continual Learning.
    ICML 2024. H. Cha, J. Lee, J. Shin. Co2L: Contrastive Continual Learning. ICCV 2021.
    """

    input_kind = "vector (list of numbers) with a label y and an optional task"

    def __init__(
        self,
        method: str = "cila",
        lambda_form: str = "max",
        kappa: float = 20.0,
        temperature: float = 0.5,
        ird_temperature: float = 0.2,
        ird_temperature_prev: float = 0.01,
        buffer_size: int = 100,
        batch_size: int = 32,
        replay_batch_size: int | None = None,
        steps: int = 1,
        hidden_sizes: Sequence[int] = (128,),
        embedding_dim: int = 64,
        projection_dim: int = 32,
        encoder: Callable[[int], Any] | None = None,
        lr: float = 1e-3,
        probe_lr: float = 0.5,
        probe_epochs: int = 100,
        augment: Sequence[str] | Callable[[Any, Any], Any] = ("noise", "scale", "mask"),
        augment_strength: float = 0.1,
        boundary: str = "auto",
        min_task_length: int = 20,
        detector: str | None = None,
        detector_params: Mapping[str, Any] | None = None,
        field: str = "value",
        n_features: int | None = None,
        threads: int | None = 1,
        seed: int = 0,
    ) -> None:
        self.method = method
        self.lambda_form = lambda_form
        self.kappa = kappa
        self.temperature = temperature
        self.ird_temperature = ird_temperature
        self.ird_temperature_prev = ird_temperature_prev
        self.buffer_size = buffer_size
        self.batch_size = batch_size
        self.replay_batch_size = replay_batch_size
        self.steps = steps
        self.hidden_sizes = hidden_sizes
        self.embedding_dim = embedding_dim
        self.projection_dim = projection_dim
        self.encoder = encoder
        self.lr = lr
        self.probe_lr = probe_lr
        self.probe_epochs = probe_epochs
        self.augment = augment
        self.augment_strength = augment_strength
        self.boundary = boundary
        self.min_task_length = min_task_length
        self.detector = detector
        self.detector_params = detector_params
        self.field = field
        self.n_features = n_features
        self.threads = threads
        self.seed = seed
        if torch is None:
            raise ImportError("the cila operator needs PyTorch: "
                              "pip install -c constraints.txt -e '.[learners]'")
        self._validate_params()
        self._reset()

    # ---- parameters -------------------------------------------------------------------

    def _validate_params(self) -> None:
        def positive_int(name: str, minimum: int = 1) -> None:
            v = getattr(self, name)
            if not _is_int(v) or v < minimum:
                raise ValueError(f"{name} must be an integer >= {minimum}, got {v!r}")

        def positive_float(name: str) -> None:
            v = getattr(self, name)
            if (not isinstance(v, numbers.Real) or isinstance(v, bool) or not math.isfinite(v)
                    or v <= 0):
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")

        for name, allowed in (("method", METHODS), ("lambda_form", LAMBDA_FORMS),
                              ("boundary", BOUNDARIES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}; "
                                 f"got {getattr(self, name)!r}")
        for name in ("kappa", "temperature", "ird_temperature", "ird_temperature_prev", "lr",
                     "probe_lr"):
            positive_float(name)
        positive_int("buffer_size", 0)
        positive_int("batch_size")
        positive_int("steps")
        positive_int("embedding_dim")
        positive_int("projection_dim")
        positive_int("probe_epochs", 0)
        positive_int("min_task_length", 0)
        if self.replay_batch_size is not None:
            positive_int("replay_batch_size", 0)
        if self.n_features is not None:
            positive_int("n_features")
        if self.threads is not None:
            positive_int("threads")
        if not _is_int(self.seed):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        if (isinstance(self.hidden_sizes, (str, bytes)) or not isinstance(
                self.hidden_sizes, Sequence) or not all(
                _is_int(h) and h >= 1 for h in self.hidden_sizes)):
            raise ValueError("hidden_sizes must be a list of integers >= 1, "
                             f"got {self.hidden_sizes!r}")
        if self.encoder is not None and not callable(self.encoder):
            raise ValueError("encoder must be None or a callable n_features -> torch.nn.Module")
        if not callable(self.augment):
            if isinstance(self.augment, str) or not isinstance(self.augment, Sequence) or any(
                    a not in AUGMENTATIONS for a in self.augment):
                raise ValueError(f"augment must be a list of names from "
                                 f"{', '.join(AUGMENTATIONS)} or a callable, got {self.augment!r}")
        s = self.augment_strength
        if not isinstance(s, numbers.Real) or isinstance(s, bool) or not 0 <= s < 1:
            raise ValueError(f"augment_strength must be a number in [0, 1), got {s!r}")
        if self.detector is not None:
            if self.detector_params is not None and not isinstance(self.detector_params,
                                                                   Mapping):
                raise ValueError("detector_params must be a mapping of the detector's "
                                 f"parameters, got {self.detector_params!r}")
            try:
                create(self.detector, **dict(self.detector_params or {}))
            except ValueError as exc:
                raise ValueError(f"detector: {exc}") from None
        if not isinstance(self.field, str) or not self.field:
            raise ValueError(f"field must be a non-empty string, got {self.field!r}")

    @property
    def _contrastive(self) -> bool:
        return self.method in ("cila", "co2l")

    @property
    def _replays(self) -> bool:
        return self.method != "finetune" and self.buffer_size > 0

    # ---- state ------------------------------------------------------------------------

    def _reset(self) -> None:
        self._rng = torch.Generator().manual_seed(self.seed)
        self._n_features: int | None = None
        self._encoder: Any = None
        self._projector: Any = None
        self._frozen_encoder: Any = None
        self._frozen_projector: Any = None
        self._optimizer: Any = None
        self._classes: list = []
        self._probe_w = torch.zeros((0, 0))
        self._probe_b = torch.zeros(0)
        self._buffer_x = np.zeros((0, 0), dtype=np.float32)
        self._buffer_y = np.zeros(0, dtype=np.int64)
        self._pool_x = np.zeros((0, 0), dtype=np.float32)
        self._pool_y = np.zeros(0, dtype=np.int64)
        self._pool_seen = 0
        self._pending_x: list[list[float]] = []
        self._pending_y: list[int] = []
        self._task_index = 0  # 1-based index of the current (or last closed) task
        self._task_open = False
        self._task_id: Any = None
        self._task_records = 0
        self._loss_sums = [0.0, 0.0, 0]  # Lcon, Ldis, steps of the current task
        self._task_losses: list[list[float]] = []
        self._lambdas: list[float] = []
        self._lambda = 0.0
        self._detector = (None if self.detector is None
                          else create(self.detector, **dict(self.detector_params or {})))
        if self.n_features is not None:
            self._build(self.n_features)

    def _build(self, n_features: int) -> None:
        """Create encoder, head, optimiser and probe for vectors of length ``n_features``."""
        self._n_features = n_features
        init_seed = int(torch.randint(0, 2**62, (1,), generator=self._rng))
        # Module constructors draw from torch's global RNG: seed it inside fork_rng, which
        # restores the caller's RNG state afterwards.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            if self.encoder is not None:
                enc = self.encoder(n_features)
                with torch.no_grad():
                    emb = int(enc(torch.zeros((2, n_features))).shape[1])
            else:
                emb = self.embedding_dim
                enc = _MLP([n_features, *self.hidden_sizes, emb], last_relu=True)
            proj = _MLP([emb, emb, self.projection_dim], last_relu=False)
        self._encoder, self._projector = enc, proj
        params = list(enc.parameters())
        if self._contrastive:
            params += list(proj.parameters())
        # foreach: one kernel per step for all parameters instead of one per tensor.
        self._optimizer = torch.optim.Adam(params, lr=self.lr, foreach=True)
        self._probe_w = torch.zeros((len(self._classes), emb))
        self._probe_b = torch.zeros(len(self._classes))
        self._buffer_x = np.zeros((0, n_features), dtype=np.float32)
        self._pool_x = np.zeros((0, n_features), dtype=np.float32)

    def state_dict(self) -> dict:
        """Everything learned: models, frozen copy, optimiser, buffer, task pool, pending
        batch, loss sums, lambda history, probe and the generator state (tensors, arrays and
        plain values; no pickle)."""
        built = self._encoder is not None
        frozen = self._frozen_encoder is not None
        state = {
            "n_features": self._n_features,
            "encoder": dict(self._encoder.state_dict()) if built else None,
            "projector": dict(self._projector.state_dict()) if built else None,
            "frozen_encoder": dict(self._frozen_encoder.state_dict()) if frozen else None,
            "frozen_projector": dict(self._frozen_projector.state_dict()) if frozen else None,
            "optimizer": self._optimizer.state_dict() if built else None,
            "classes": list(self._classes),
            "probe_w": self._probe_w,
            "probe_b": self._probe_b,
            "buffer_x": self._buffer_x,
            "buffer_y": self._buffer_y,
            "pool_x": self._pool_x,
            "pool_y": self._pool_y,
            "pool_seen": self._pool_seen,
            "pending_x": [list(v) for v in self._pending_x],
            "pending_y": list(self._pending_y),
            "task_index": self._task_index,
            "task_open": self._task_open,
            "task_id": self._task_id,
            "task_records": self._task_records,
            "loss_sums": list(self._loss_sums),
            "task_losses": [list(p) for p in self._task_losses],
            "lambdas": list(self._lambdas),
            "lambda": self._lambda,
            "rng": self._rng.get_state(),
            "detector": None if self._detector is None else self._detector.state_dict(),
        }
        return {"operator": self.name, "state": decode_state(encode_state(state))}

    def load_state_dict(self, state: Mapping) -> None:
        s = decode_state(encode_state(dict(self._state_payload(state))))  # private copies
        self._reset()
        if s["n_features"] is not None:
            if self._encoder is None or self._n_features != s["n_features"]:
                self._build(int(s["n_features"]))
            self._encoder.load_state_dict(s["encoder"])
            self._projector.load_state_dict(s["projector"])
            self._optimizer.load_state_dict(s["optimizer"])
            if s["frozen_encoder"] is not None:
                self._freeze()
                self._frozen_encoder.load_state_dict(s["frozen_encoder"])
                self._frozen_projector.load_state_dict(s["frozen_projector"])
        self._classes = list(s["classes"])
        self._probe_w, self._probe_b = s["probe_w"], s["probe_b"]
        self._buffer_x, self._buffer_y = s["buffer_x"], s["buffer_y"]
        self._pool_x, self._pool_y, self._pool_seen = s["pool_x"], s["pool_y"], s["pool_seen"]
        self._pending_x, self._pending_y = s["pending_x"], s["pending_y"]
        self._task_index, self._task_open = s["task_index"], s["task_open"]
        self._task_id, self._task_records = s["task_id"], s["task_records"]
        self._loss_sums = s["loss_sums"]
        self._task_losses, self._lambdas = s["task_losses"], s["lambdas"]
        self._lambda = s["lambda"]
        self._rng.set_state(s["rng"])
        if self._detector is not None and s.get("detector") is not None:
            self._detector.load_state_dict(s["detector"])

    # ---- read-only results ------------------------------------------------------------

    @property
    def classes_(self) -> list:
        """Labels seen in training, in the order of the probe's outputs."""
        return list(self._classes)

    @property
    def lambdas(self) -> list[float]:
        """Distillation weight of each task so far (0.0 for the first: no previous model)."""
        return list(self._lambdas)

    @property
    def task_losses(self) -> list[tuple[float, float]]:
        """Mean ``(Lcon, Ldis)`` of each finished task (contrastive methods)."""
        return [(float(c), float(d)) for c, d in self._task_losses]

    @property
    def buffer_labels(self) -> list:
        """Labels of the samples in the replay buffer."""
        return [self._classes[i] for i in self._buffer_y.tolist()]

    # ---- input ------------------------------------------------------------------------

    def _parse(self, record: Mapping) -> tuple[np.ndarray, Any, Any, bool, bool]:
        x = as_array(get_field(record, self.field), ndim=1, name=self.field)
        n = self._n_features if self._n_features is not None else self.n_features
        if x.size == 0:
            raise BadInput(f"{self.field} is an empty vector")
        if n is not None and x.shape[0] != n:
            raise BadInput(f"{self.field} has length {x.shape[0]}, expected {n}")
        y = record.get("y")
        if y is not None:
            if isinstance(y, bool) or not isinstance(y, (numbers.Real, str)):
                raise BadInput(f"y must be an integer or a string label, got {type(y).__name__}")
            if not isinstance(y, str):
                if not (math.isfinite(float(y)) and float(y) == int(y)):
                    raise BadInput(f"y must be an integer or a string label, got {y!r}")
                y = int(y)
        task = record.get("task")
        if task is not None and (isinstance(task, (Mapping, list, tuple)) or (
                isinstance(task, float) and not math.isfinite(task))):
            raise BadInput(f"task must be a string or a number, got {task!r}")
        if isinstance(task, numbers.Integral) and not isinstance(task, bool):
            task = int(task)
        train = record.get("train", True) is not False and y is not None
        alarm = bool(record.get("alarm")) if "alarm" in record else None
        return x.astype(np.float32), y, task, alarm, train

    # ---- processing -------------------------------------------------------------------

    @contextlib.contextmanager
    def _torch_threads(self) -> Iterator[None]:
        """Run torch with ``threads`` intra-op threads and subnormal floats flushed to zero,
        then restore the caller's settings.

        The relation distillation at temperature 0.01 and Adam's moments produce subnormal
        float32 values; x86 arithmetic on them is slow enough to make a training step ~3x
        slower. Flushing them changes values below 1.2e-38 only.
        """
        threads_before = torch.get_num_threads()
        # torch has no getter for the flush mode: a subnormal survives a product only when
        # flushing is off.
        flush_before = bool(torch.tensor([1e-40]).mul_(1.0)[0] == 0)
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        torch.set_flush_denormal(True)
        try:
            yield
        finally:
            torch.set_flush_denormal(flush_before)
            if self.threads is not None:
                torch.set_num_threads(threads_before)

    def process(self, record: Mapping) -> list[dict]:
        x, y, task, alarm, train = self._parse(record)
        if self._detector is not None and train:
            # The inner detector sees every training record; it raises BadInput (its state
            # unchanged) before anything of ours changes.
            found = any(o.get("alarm") for o in self._detector.process(record))
            alarm = bool(alarm) or found
        with self._torch_threads():
            return self._process(record, x, y, task, alarm, train)

    def _process(self, record: Mapping, x: np.ndarray, y: Any, task: Any, alarm: bool | None,
                 train: bool) -> list[dict]:
        if self._encoder is None:
            self._build(int(x.shape[0]))
        opened = False
        if train:
            if not self._task_open:
                self._start_task(task)
                opened = self._task_index > 1
            elif self._is_boundary(y, task, alarm):
                self._close_task()
                self._start_task(task)
                opened = True
        out = self._output(record, y_pred=self._predict_one(x), boundary=opened)
        if train:
            self._learn_one(x, y)
        return [out]

    def _is_boundary(self, y: Any, task: Any, alarm: bool | None) -> bool:
        mode = self.boundary
        if mode in ("auto", "task") and task is not None:
            return task != self._task_id
        if mode == "task":
            return False
        settled = self._task_records >= self.min_task_length
        if mode in ("auto", "alarm") and alarm is not None:
            return alarm and settled
        if mode == "alarm":
            return False
        return y not in self._classes and settled

    def _start_task(self, task: Any) -> None:
        self._task_index += 1
        self._task_open = True
        self._task_id = task
        self._task_records = 0
        self._loss_sums = [0.0, 0.0, 0]
        if self._task_index == 1:
            self._lambda = 0.0
        elif self.method == "cila":
            self._lambda = adaptive_lambda(self._task_losses, self.kappa, self.lambda_form)
        else:
            self._lambda = 1.0
        self._lambdas.append(self._lambda)

    def end_task(self) -> None:
        """Close the current task now, as a boundary would (the next training record opens
        a new one). Use it before evaluating after the last task."""
        if self._task_open:
            with self._torch_threads():
                self._close_task()

    def _close_task(self) -> None:
        if self._pending_y:
            self._train_pending()
        con, dis, n = self._loss_sums
        self._task_losses.append([con / n if n else 0.0, dis / n if n else 0.0])
        if self._contrastive:
            self._freeze()
            # Co2L's linear evaluation: buffer + the finished task (here its reservoir).
            self._refit_probe(np.concatenate([self._buffer_x, self._pool_x]),
                              np.concatenate([self._buffer_y, self._pool_y]))
        if self._replays:
            self._merge_buffer()
        self._task_open = False

    def _freeze(self) -> None:
        self._frozen_encoder = copy.deepcopy(self._encoder).requires_grad_(False).eval()
        self._frozen_projector = copy.deepcopy(self._projector).requires_grad_(False).eval()

    def _learn_one(self, x: np.ndarray, y: Any) -> None:
        if y not in self._classes:
            self._classes.append(y)
            self._probe_w = torch.cat([self._probe_w, torch.zeros((1, self._probe_w.shape[1]))])
            self._probe_b = torch.cat([self._probe_b, torch.zeros(1)])
        k = self._classes.index(y)
        self._task_records += 1
        if self._replays:
            self._pool_add(x, k)
        self._pending_x.append(x.tolist())
        self._pending_y.append(k)
        if len(self._pending_y) >= self.batch_size:
            self._train_pending()

    def _pool_add(self, x: np.ndarray, k: int) -> None:
        # Reservoir sampling of the current task, merged into the buffer at its end.
        self._pool_seen += 1
        if self._pool_y.shape[0] < self.buffer_size:
            self._pool_x = np.concatenate([self._pool_x, x[None]])
            self._pool_y = np.concatenate([self._pool_y, np.array([k], dtype=np.int64)])
            return
        j = int(torch.randint(0, self._pool_seen, (1,), generator=self._rng))
        if j < self.buffer_size:
            self._pool_x = self._pool_x.copy()
            self._pool_y = self._pool_y.copy()
            self._pool_x[j] = x
            self._pool_y[j] = k

    def _merge_buffer(self) -> None:
        xs = np.concatenate([self._buffer_x, self._pool_x])
        ys = np.concatenate([self._buffer_y, self._pool_y])
        self._buffer_x, self._buffer_y = self._balanced(xs, ys, self.buffer_size)
        self._pool_x = np.zeros((0, self._n_features), dtype=np.float32)
        self._pool_y = np.zeros(0, dtype=np.int64)
        self._pool_seen = 0

    def _balanced(self, xs: np.ndarray, ys: np.ndarray, size: int
                  ) -> tuple[np.ndarray, np.ndarray]:
        """At most ``size`` samples, as equal per class as the counts allow, drawn at random."""
        labels, counts = np.unique(ys, return_counts=True)
        quota = np.zeros(len(labels), dtype=np.int64)
        room = min(size, len(ys))
        while room > 0:  # water-filling: one more slot to every class that has samples left
            open_ = np.flatnonzero(quota < counts)
            for i in open_[:room]:
                quota[i] += 1
            room -= min(room, len(open_))
        keep = []
        for lab, q in zip(labels, quota, strict=True):
            where = np.flatnonzero(ys == lab)
            order = torch.randperm(len(where), generator=self._rng).numpy()
            keep.append(np.sort(where[order[:q]]))
        idx = np.concatenate(keep) if keep else np.zeros(0, dtype=np.int64)
        return xs[idx].copy(), ys[idx].copy()

    # ---- the model --------------------------------------------------------------------

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.normalize(self._encoder(x), dim=1)

    def _logits(self, feats: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return feats @ w.T + b

    def _predict_one(self, x: np.ndarray) -> Any:
        if not self._classes:
            return None
        scores = self.decision_scores(x[None])[0]
        return self._classes[int(np.argmax(scores))]

    def decision_scores(self, X: Any) -> np.ndarray:
        """Probe scores ``(n, len(classes_))`` of the rows of ``X`` (no state change)."""
        X = np.asarray(X, dtype=np.float32)
        self._encoder.eval()
        with torch.no_grad(), self._torch_threads():
            s = self._logits(self._features(torch.from_numpy(X)), self._probe_w, self._probe_b)
        return s.numpy()

    def _augment(self, x: torch.Tensor) -> torch.Tensor:
        if callable(self.augment):
            return self.augment(x, self._rng)
        for name in self.augment:
            x = AUGMENTATIONS[name](x, self._rng, float(self.augment_strength))
        return x

    def _train_pending(self) -> None:
        xc = torch.tensor(self._pending_x, dtype=torch.float32)
        yc = torch.tensor(self._pending_y, dtype=torch.int64)
        self._pending_x, self._pending_y = [], []
        self._train_step(xc, yc)

    def _train_step(self, xc: torch.Tensor, yc: torch.Tensor) -> None:
        """``steps`` gradient steps on a current mini-batch plus replayed samples."""
        rb = self.batch_size if self.replay_batch_size is None else self.replay_batch_size
        self._encoder.train()
        self._projector.train()
        for _ in range(self.steps):
            x, y, current = xc, yc, torch.ones(len(yc), dtype=torch.bool)
            if self._replays and len(self._buffer_y) and rb:
                pick = torch.randperm(len(self._buffer_y), generator=self._rng)[:rb].numpy()
                x = torch.cat([xc, torch.from_numpy(self._buffer_x[pick])])
                y = torch.cat([yc, torch.from_numpy(self._buffer_y[pick])])
                current = torch.cat([current, torch.zeros(len(pick), dtype=torch.bool)])
            if self._contrastive:
                self._contrastive_step(x, y, current)
            else:
                self._cross_entropy_step(x, y)

    def _contrastive_step(self, x: torch.Tensor, y: torch.Tensor, current: torch.Tensor) -> None:
        views = torch.cat([self._augment(x), self._augment(x)])
        h = self._encoder(views)
        z = torch.nn.functional.normalize(self._projector(h), dim=1)
        l_con = asymmetric_supcon(z, torch.cat([y, y]), torch.cat([current, current]),
                                  self.temperature)
        loss = l_con
        l_dis = None
        if self._frozen_encoder is not None:
            with torch.no_grad():
                z_prev = torch.nn.functional.normalize(
                    self._frozen_projector(self._frozen_encoder(views)), dim=1)
            l_dis = relation_distillation(z, z_prev, self.ird_temperature,
                                          self.ird_temperature_prev)
            loss = loss + self._lambda * l_dis
        self._optimizer.zero_grad()
        loss.backward()
        self._optimizer.step()
        self._loss_sums[0] += float(l_con.detach())
        self._loss_sums[1] += float(l_dis.detach()) if l_dis is not None else 0.0
        self._loss_sums[2] += 1
        # The probe learns online on the (detached) features of the first view.
        feats = torch.nn.functional.normalize(h[: len(y)].detach(), dim=1)
        self._probe_sgd(feats, y, steps=1)

    def _cross_entropy_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        w = self._probe_w.clone().requires_grad_(True)
        b = self._probe_b.clone().requires_grad_(True)
        loss = torch.nn.functional.cross_entropy(self._logits(self._features(x), w, b), y)
        self._optimizer.zero_grad()
        loss.backward()
        self._optimizer.step()
        with torch.no_grad():
            self._probe_w = w - self.probe_lr * w.grad
            self._probe_b = b - self.probe_lr * b.grad
        self._loss_sums[0] += float(loss.detach())
        self._loss_sums[2] += 1

    def _probe_sgd(self, feats: torch.Tensor, y: torch.Tensor, steps: int,
                   weights: torch.Tensor | None = None) -> None:
        # Softmax regression by plain gradient descent (closed-form gradient, no autograd):
        # the probe grows a row per new class, so it keeps no optimiser state.
        w, b = self._probe_w, self._probe_b
        onehot = torch.nn.functional.one_hot(y, w.shape[0]).to(feats.dtype)
        scale = (torch.full((len(y), 1), 1.0 / len(y)) if weights is None
                 else (weights / weights.sum())[:, None])
        for _ in range(steps):
            p = torch.softmax(self._logits(feats, w, b), dim=1)
            g = (p - onehot) * scale
            w = w - self.probe_lr * (g.T @ feats)
            b = b - self.probe_lr * g.sum(dim=0)
        self._probe_w, self._probe_b = w, b

    def _refit_probe(self, xs: np.ndarray, ys: np.ndarray) -> None:
        """A probe trained from zero on ``xs``, classes weighted equally."""
        if not len(ys) or not self.probe_epochs:
            return
        self._encoder.eval()
        with torch.no_grad():
            feats = self._features(torch.from_numpy(xs))
        counts = np.bincount(ys, minlength=len(self._classes)).astype(np.float32)
        weights = torch.from_numpy(1.0 / counts[ys])
        self._probe_w = torch.zeros_like(self._probe_w)
        self._probe_b = torch.zeros_like(self._probe_b)
        self._probe_sgd(feats, torch.from_numpy(ys), self.probe_epochs, weights)

    # ---- hooks for the shared check suite -------------------------------------------

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict]:
        small = {"buffer_size": 12, "batch_size": 8, "hidden_sizes": [16], "embedding_dim": 8,
                 "projection_dim": 8, "probe_epochs": 10, "seed": 3}
        yield small
        yield {**small, "method": "er", "boundary": "label", "min_task_length": 5}
        yield {**small, "lambda_form": "pure", "kappa": 3.0, "n_features": 6,
               "augment": ["shift", "mask"], "steps": 2}
        yield {**small, "boundary": "alarm", "min_task_length": 10, "detector": "river:PageHinkley",
               "detector_params": {"field": "y", "threshold": 10.0}}

    @classmethod
    def _test_stream(cls, params: dict, n: int = 96, seed: int = 0) -> list[dict]:
        """Three class-incremental tasks of two Gaussian classes in 6 dimensions."""
        rng = np.random.default_rng(seed)
        centres = rng.normal(0.0, 2.0, (6, 6))
        per_task = n // 3
        out = []
        for t in range(3):
            labels = rng.permutation(np.repeat([2 * t, 2 * t + 1], per_task // 2))
            for c in labels:
                i = len(out)
                out.append({"key": "k", "ts": float(i), "offset": i, "task": t, "y": int(c),
                            "value": (centres[c] + rng.normal(0, 0.5, 6)).tolist()})
        return out

    @classmethod
    def _bad_records(cls, params: dict) -> list[dict]:
        good = [0.0] * 6
        return [{"key": "k", "value": [float("nan")] * 6, "y": 0},
                {"key": "k", "value": [1.0, 2.0], "y": 0},
                {"key": "k", "value": "abc", "y": 0},
                {"key": "k", "y": 1},
                {"key": "k", "value": [[1.0] * 6], "y": 0},
                {"key": "k", "value": good, "y": 1.5},
                {"key": "k", "value": good, "y": {"a": 1}},
                {"key": "k", "value": good, "y": 0, "task": {"t": 1}}]
