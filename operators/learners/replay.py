"""Replay memories of the continual learners: a reservoir sample of a stream and CILA's
class-balanced buffer.

Their random draws come from the owning operator's ``torch.Generator`` (passed in), so an
operator's state is one generator plus these arrays. Torch is imported only when a draw is made.

Examples
--------
>>> import numpy as np
>>> from shiftwatch.operators.learners.torch_nets import load_torch
>>> g = load_torch().Generator().manual_seed(0)
>>> res = Reservoir(3, 2, np.float32)
>>> for i in range(10):
...     res.add(np.full(2, i, dtype=np.float32), i % 2, g)
>>> res.seen, res.x[:, 0].tolist(), res.y.tolist()
(10, [3.0, 1.0, 6.0], [1, 1, 0])
>>> buf = ClassBalancedBuffer(2, 2)
>>> buf.merge(res, g)  # one sample per class
>>> buf.x[:, 0].tolist(), buf.y.tolist(), len(res)
([6.0, 1.0], [0, 1], 0)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shiftwatch.operators.learners.torch_nets import load_torch

__all__ = ["Reservoir", "ClassBalancedBuffer", "balanced_sample"]


class Reservoir:
    """A uniform sample of at most ``size`` of the ``(x, y)`` pairs offered so far
    (Vitter's Algorithm R: after ``n`` offers each one is kept with probability ``size / n``).

    ``x`` and ``y`` are views of the kept rows, in slot order; ``seen`` counts the offers.
    """

    def __init__(self, size: int, dim: int, dtype: Any) -> None:
        self.size = size
        self._x = np.zeros((size, dim), dtype=dtype)
        self._y = np.zeros(size, dtype=np.int64)
        self._len = 0
        self.seen = 0

    def __len__(self) -> int:
        return self._len

    @property
    def x(self) -> np.ndarray:
        return self._x[: self._len]

    @property
    def y(self) -> np.ndarray:
        return self._y[: self._len]

    def add(self, x: np.ndarray, y: int, generator: Any) -> None:
        """Offer one pair; when the reservoir is full, one draw from ``generator``."""
        self.seen += 1
        if self.size == 0:
            return
        if self._len < self.size:
            j = self._len
            self._len += 1
        else:
            j = int(load_torch().randint(0, self.seen, (1,), generator=generator))
            if j >= self.size:
                return
        self._x[j] = x
        self._y[j] = y

    def clear(self) -> None:
        self._len = 0
        self.seen = 0

    def load(self, x: np.ndarray, y: np.ndarray, seen: int) -> None:
        """Restore the kept rows and the offer count (from a ``state_dict``)."""
        n = len(y)
        if n > self.size:
            raise ValueError(f"state_dict holds {n} replay samples, more than {self.size}")
        self._x[:n], self._y[:n], self._len, self.seen = x, y, n, int(seen)


def balanced_sample(xs: np.ndarray, ys: np.ndarray, size: int, generator: Any
                    ) -> tuple[np.ndarray, np.ndarray]:
    """At most ``size`` rows of ``(xs, ys)``, as equal per class as the counts allow, drawn at
    random (one ``randperm`` per class); class by class, each in its original order."""
    torch = load_torch()
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
        order = torch.randperm(len(where), generator=generator).numpy()
        keep.append(np.sort(where[order[:q]]))
    idx = np.concatenate(keep) if keep else np.zeros(0, dtype=np.int64)
    return xs[idx].copy(), ys[idx].copy()


class ClassBalancedBuffer:
    """CILA's replay buffer: at most ``size`` samples of all finished tasks, class-balanced.

    A task's samples wait in a :class:`Reservoir` of the same size; :meth:`merge` joins that
    reservoir to the buffer and keeps a :func:`balanced_sample` of the union (Co2L).
    """

    def __init__(self, size: int, dim: int) -> None:
        self.size = size
        self.x = np.zeros((0, dim), dtype=np.float32)
        self.y = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.y)

    def merge(self, pool: Reservoir, generator: Any) -> None:
        """Keep a class-balanced sample of buffer + ``pool``, then empty ``pool``."""
        xs = np.concatenate([self.x, pool.x])
        ys = np.concatenate([self.y, pool.y])
        self.x, self.y = balanced_sample(xs, ys, self.size, generator)
        pool.clear()

    def sample(self, k: int, generator: Any) -> np.ndarray:
        """Indices of ``min(k, len(self))`` distinct samples, drawn at random."""
        return load_torch().randperm(len(self.y), generator=generator)[:k].numpy()
