"""What the PyTorch learners (:mod:`~shiftwatch.operators.learners.cila`,
:mod:`~shiftwatch.operators.learners.hare_tortoise`) share: loading torch, limiting its threads,
seeded initialisation, the MLP and the integer-parameter check.

Nothing here imports torch at import time: :func:`load_torch` does, on the first call (from an
operator's constructor), and registers the tensor codec of
:mod:`shiftwatch.operators.learners.torch_state` with it. So importing a learner module, listing the
operators or ``import shiftwatch.operators`` stays light.

Examples
--------
>>> torch = load_torch("example")
>>> g = torch.Generator().manual_seed(0)
>>> with seeded_init(g):
...     net = mlp([3, 4, 2])
>>> net
Sequential(
  (0): Linear(in_features=3, out_features=4, bias=True)
  (1): ReLU()
  (2): Linear(in_features=4, out_features=2, bias=True)
)
>>> with TorchThreads(1):
...     torch.get_num_threads()
1
>>> is_int(3), is_int(True), is_int(3.0)
(True, False, False)
"""

from __future__ import annotations

import contextlib
import numbers
import threading
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["FLOAT32_MAX_ABS", "load_torch", "TorchThreads", "TORCH_SETTINGS_LOCK", "seeded_init",
           "mlp", "is_int", "check_int"]

#: The learners' ``max_abs``: the largest magnitude of an input entry they accept. They compute
#: in float32 (largest 3.4e38), where the records' float64 ``MAX_ABS`` (1e150) is already
#: infinite; 1e15 keeps a value's square below 1e30, the same margin below float32's limit as
#: ``MAX_ABS``'s 1e300 below float64's. Measured on the check suite's networks (a dozen such
#: inputs among 36 records): 1e39 (infinite in float32) made every weight NaN, 1e30 made Adam's
#: second moments and BatchNorm's running variance infinite, 1e19 did neither. (Training on a
#: whole stream of inputs near 1e12 and above can still diverge, as on any badly scaled
#: features: standardize them first.)
FLOAT32_MAX_ABS = 1e15

_torch: Any = None

#: Held by every :class:`TorchThreads` block that changes a setting and every
#: :func:`seeded_init` block (reentrant, so blocks nest).
TORCH_SETTINGS_LOCK = threading.RLock()

INSTALL_HINT = ("pip install 'shiftwatch[learners]' (in a clone of the repository: "
                "pip install -c constraints.txt -e '.[learners]')")


def load_torch(who: str = "this operator") -> Any:
    """The ``torch`` module, imported on the first call together with the tensor codec
    (:mod:`shiftwatch.operators.learners.torch_state`) that puts tensors in a ``state_dict``.

    Raises ``ImportError`` naming ``who`` and the install command when PyTorch is missing.
    """
    global _torch
    if _torch is None:
        try:
            import torch
        except ImportError as exc:  # pragma: no cover - torch is in the learners extra
            raise ImportError(f"the {who} operator needs PyTorch: {INSTALL_HINT}") from exc
        import shiftwatch.operators.learners.torch_state  # noqa: F401  (registers the tensor codec)

        _torch = torch
    return _torch


class TorchThreads:
    """Run a block with torch limited to ``threads`` intra-op threads (``None``: leave the
    setting) and, with ``flush_denormal``, subnormal floats flushed to zero; both settings are
    restored on exit.

    torch's API makes both settings **process-wide**, not per operator (how far each is per OS
    thread in effect depends on the build: OpenMP's thread count and the x86 flush flags are per
    thread, MKL's thread count and other parallel backends are global), so a block that changes
    one holds the process-wide reentrant lock :data:`TORCH_SETTINGS_LOCK` from the change to
    the restore: two learner stages running as threads of one process (Kafka stages) take
    turns, each computing under its own setting and never restoring the other's. Blocks may
    nest (in one thread). Stages that should compute in parallel run as processes; a block
    with ``threads=None`` and no flushing changes nothing and takes no lock.

    One thread suits the small networks and single-record steps of a stream operator, which
    scales out by keys and partitions instead. Flushing subnormals matters for CILA: its
    relation distillation at temperature 0.01 and Adam's moments produce float32 values below
    1.2e-38, on which x86 arithmetic is slow enough to make a step ~3x slower; flushing changes
    only those values.
    """

    __slots__ = ("threads", "flush_denormal", "_threads_before", "_flush_before")

    def __init__(self, threads: int | None, flush_denormal: bool = False) -> None:
        self.threads = threads
        self.flush_denormal = flush_denormal
        self._threads_before = 0
        self._flush_before = False

    def __enter__(self) -> None:
        if self.threads is None and not self.flush_denormal:
            return
        torch = load_torch()
        TORCH_SETTINGS_LOCK.acquire()
        try:
            if self.threads is not None:
                self._threads_before = torch.get_num_threads()
                if self._threads_before != self.threads:
                    torch.set_num_threads(self.threads)
            if self.flush_denormal:
                # torch has no getter for the flush mode: a subnormal survives a product only
                # when flushing is off.
                self._flush_before = bool(torch.tensor([1e-40]).mul_(1.0)[0] == 0)
                torch.set_flush_denormal(True)
        except BaseException:
            TORCH_SETTINGS_LOCK.release()
            raise

    def __exit__(self, *exc: object) -> None:
        if self.threads is None and not self.flush_denormal:
            return
        torch = load_torch()
        try:
            if self.flush_denormal:
                torch.set_flush_denormal(self._flush_before)
            if self.threads is not None and self._threads_before != self.threads:
                torch.set_num_threads(self._threads_before)
        finally:
            TORCH_SETTINGS_LOCK.release()


@contextlib.contextmanager
def seeded_init(generator: Any) -> Iterator[None]:
    """Seed torch's global RNG with a number drawn from ``generator`` for the block, and give
    the caller's global RNG state back afterwards.

    Module constructors (and dropout in a user's network) draw from the global RNG; this makes
    them reproducible from the operator's own generator without touching anyone else's. The
    global RNG is process-wide, so the block holds :data:`TORCH_SETTINGS_LOCK`: two learners
    initialising in threads of one process would otherwise draw from each other's seed.
    """
    torch = load_torch()
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    with TORCH_SETTINGS_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def mlp(sizes: Sequence[int], last_relu: bool = False) -> Any:
    """A ``torch.nn.Sequential`` of ``Linear`` layers ``sizes[0] -> sizes[1] -> ...`` with a
    ReLU after each but the last (after the last too with ``last_relu``)."""
    torch = load_torch()
    layers: list = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2 or last_relu:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def is_int(x: Any) -> bool:
    """An integer, but not a bool."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def check_int(owner: Any, name: str, minimum: int = 1) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``owner.<name>`` is an integer
    ``>= minimum``."""
    v = getattr(owner, name)
    if not is_int(v) or v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {v!r}")
