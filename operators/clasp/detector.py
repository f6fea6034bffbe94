"""Classification-score change detection (ClaSS): :class:`ClassDetector`.

Method, per key (Ermshaus, Schaefer & Leser 2024, on ClaSP, DMKD 2023):

1. **Warm-up.** The first ``n_warmup`` values are buffered; the subsequence width ``w`` is
   chosen on them by SuSS (the smallest width whose rolling mean, standard deviation and
   range stay close to the whole warm-up's, doubled; for several channels the smallest
   channel's width, as claspy's multivariate ClaSP takes), then the buffer is replayed.
2. **Streaming k-NN.** A sliding window of the last ``window`` values; each subsequence of
   width ``w`` keeps its ``k_neighbours`` nearest subsequences (z-normalised Euclidean
   distance, summed over channels), kept exact as the window slides: one new subsequence a
   value, its distances to all others from sliding dot products (O(window) per value and
   channel), and it enters the neighbour lists of the older ones. Subsequences before the
   last change point take no part.
3. **Profile** (every ``jump`` values): for every split of the window since the last change,
   the cross-validated k-NN classifier of "left vs right" (each subsequence labelled by the
   majority of its neighbours' sides), scored by macro F1; each side at least
   ``excl_radius * w`` subsequences.
4. **Alarm** when the best split passes the significance test: a rank-sum test of the
   predicted labels left against right, ``p <= threshold`` (default 1e-50, the paper's).
   The test is one-sided by default (the left part predicted left, the right part right);
   claspy's is two-sided, which also passes a split whose two sides are each predicted as
   the other (``test="two-sided"`` for claspy's behaviour; see ``test`` below).
   ``change_at`` is that split, numbered as the values fed (the paper's location; there is
   no separate locating step).

The window (``window``) bounds memory and time per key: about ``(7 c + 2 k) * window``
numbers for ``c`` channels (~1 MB at the defaults, one channel) and O(``c * window``) work a
value, plus O(``k * window``) per profile every ``jump`` values. A change shows no sooner
than ``excl_radius * w`` values after it (a segment must be that long to be scored) plus
the k-NN's lag of ``w + w // 2 + k`` values.

Exactness. The kernels (:mod:`~shiftwatch.operators.clasp.kernels`) keep the integer
bookkeeping of ``claspy`` 0.2.8's ``StreamingClaSPSegmentation`` (its change points on the
same series with the same parameters are the oracle of the tests), and with it two of its
quirks, so that the oracle holds: a new subsequence never enters an older one's list at the
last of its ``k`` places (only by pushing the others down), and the oldest subsequence of
the window is not a candidate neighbour.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np

from shiftwatch.operators.clasp import kernels as K
from shiftwatch.operators.drift_detector import RiverDriftDetector, refuse_text
from shiftwatch.records import BadInput

__all__ = ["ClassDetector"]

_SCORES = ("f1", "accuracy")
#: ``test`` values, in the kernels' order (``P_TEST``)
_TESTS = ("one-sided", "two-sided")

#: The largest ``window`` accepted (memory per key grows linearly with it).
MAX_WINDOW = 1_000_000


def _int(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, np.integer))


def _num(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float, np.integer, np.floating))


class ClassDetector(RiverDriftDetector):
    """Online segmentation by classification scores (ClaSS); see the module docstring.

    Parameters
    ----------
    window
        Values in the sliding window (claspy's ``n_timepoints``).
    n_warmup
        Values buffered before the width is chosen (claspy's ``n_warmup``); they are then
        processed like the rest, so a change inside them is still found. The default, 500,
        was chosen on tssb-dev among 200, 500, 1,000 and 2,000 by a rule declared first
        (``benchmarks/results/clasp.md``); every other default is the paper's.
    width
        Subsequence width: ``"suss"`` (chosen on the warm-up) or an integer >= 3.
    k_neighbours
        Neighbours per subsequence.
    excl_radius
        The smallest segment, in widths (both sides of a split; claspy's ``excl_radius``).
    jump
        A profile every ``jump`` values (adds at most ``jump - 1`` values of delay).
    threshold
        p-value of the significance test below which a split is a change (smaller: fewer
        alarms).
    test
        ``"one-sided"`` (default): the rank-sum test's alternative is the one a change
        claims, the left part's subsequences predicted left and the right part's right.
        ``"two-sided"``: claspy's (and the paper's code's) test, which also passes the
        opposite, each side predicted as the other: the sides then resemble each other
        more than themselves, which is no evidence of a change (on tssb-dev it gave one
        false alarm, in Herring, a series without changes; ``benchmarks/results/clasp.md``).
        The oracle tests against claspy run with ``"two-sided"``.
    score
        ``"f1"`` (macro F1, the paper's) or ``"accuracy"`` (the share of subsequences whose
        neighbours' majority is on their own side; claspy's streaming segmenter takes this
        option but always scores F1).
    suss_lbound
        SuSS's smallest width before doubling (claspy's ``lbound``).
    suss_threshold
        SuSS's similarity target.

    Examples
    --------
    A sine whose period changes at 1,500:

    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> t = np.arange(3000)
    >>> x = np.where(t < 1500, np.sin(2 * np.pi * t / 40), np.sin(2 * np.pi * t / 25))
    >>> det = ClassDetector(window=2000, n_warmup=500)
    >>> for i, v in enumerate(x + 0.1 * rng.standard_normal(3000)):
    ...     det.update(v)
    ...     if det.drift_detected:
    ...         print(i, det.change_at)
    1664 1485

    References
    ----------
    Ermshaus, A., Schaefer, P. and Leser, U. (2024). Raising the ClaSS of streaming time
    series segmentation. PVLDB 17(8), 1953-1966. Ermshaus, A., Schaefer, P. and Leser, U.
    (2023). ClaSP: parameter-free time series segmentation. Data Mining and Knowledge
    Discovery 37, 1262-1300.
    """

    def __init__(self, window: int = 10_000, n_warmup: int = 500, width: int | str = "suss",
                 k_neighbours: int = 3, excl_radius: int = 5, jump: int = 5,
                 threshold: float = 1e-50, test: str = "one-sided", score: str = "f1",
                 suss_lbound: int = 10,
                 suss_threshold: float = 0.89):
        self.window = window
        self.n_warmup = n_warmup
        self.width = width
        self.k_neighbours = k_neighbours
        self.excl_radius = excl_radius
        self.jump = jump
        self.threshold = threshold
        self.test = test
        self.score = score
        self.suss_lbound = suss_lbound
        self.suss_threshold = suss_threshold
        self._validate_params()
        self._reset()

    _PARAMS = tuple(inspect.signature(__init__).parameters)[1:]

    def _get_params(self) -> dict:
        return {k: getattr(self, k) for k in self._PARAMS}

    def __repr__(self) -> str:
        return f"ClassDetector({', '.join(f'{k}={v!r}' for k, v in self._get_params().items())})"

    def _validate_params(self) -> None:
        if not (_int(self.window) and 64 <= self.window <= MAX_WINDOW):
            raise ValueError(f"window must be an integer in [64, {MAX_WINDOW}], got "
                             f"{self.window!r}")
        if not (_int(self.n_warmup) and 16 <= self.n_warmup <= self.window):
            raise ValueError(f"n_warmup must be an integer in [16, window], got "
                             f"{self.n_warmup!r}")
        if not (self.width == "suss" or (_int(self.width) and self.width >= 3)):
            raise ValueError(f"width must be 'suss' or an integer >= 3, got {self.width!r}")
        for name, lo in (("k_neighbours", 1), ("excl_radius", 1), ("jump", 1),
                         ("suss_lbound", 2)):
            v = getattr(self, name)
            if not (_int(v) and v >= lo):
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if not (_num(self.threshold) and 0 < self.threshold < 1):
            raise ValueError(f"threshold must be a p-value in (0, 1), got {self.threshold!r}")
        if self.test not in _TESTS:
            raise ValueError(f"test must be one of {_TESTS}, got {self.test!r}")
        if self.score not in _SCORES:
            raise ValueError(f"score must be one of {_SCORES}, got {self.score!r}")
        if not (_num(self.suss_threshold) and 0 < self.suss_threshold < 1):
            raise ValueError(f"suss_threshold must be in (0, 1), got {self.suss_threshold!r}")
        if _int(self.width) and self._lag(self.width) + 2 * self.excl_radius * self.width \
                > self.window:
            raise ValueError(f"width {self.width} is too large for window {self.window} "
                             f"(needs window >= {self._lag(self.width)} + 2 * excl_radius * "
                             "width)")

    def _lag(self, w: int) -> int:
        return w + w // 2 + self.k_neighbours + 1

    # ---- state ----------------------------------------------------------------------------

    def _reset(self) -> None:
        self._c: int | None = None  # channels, fixed by the first value
        self._buf = np.zeros((0, 0))  # the warm-up values (until the width is chosen)
        self._w = 0  # the width (0 until chosen)
        self._width_rule: str | None = None
        self._par = np.zeros(K.N_PAR, dtype=np.int64)
        self._ist = np.zeros(K.N_IST, dtype=np.int64)
        self._ts = np.zeros((0, 0))
        self._tot = np.zeros(0)
        self._totsq = np.zeros(0)
        self._hist = np.zeros((0, 0))
        self._histsq = np.zeros((0, 0))
        self._means = np.zeros((0, 0))
        self._stds = np.zeros((0, 0))
        self._dot = np.zeros((0, 0))
        self._dists = np.zeros((0, 0))
        self._offs = np.zeros((0, 0), dtype=np.int64)
        self._drift_detected = False
        self._change_at: int | None = None
        self._changes: list[int] = []

    _ARRAYS = ("buf", "par", "ist", "ts", "tot", "totsq", "hist", "histsq", "means", "stds",
               "dot", "dists", "offs")
    _INT_ARRAYS = ("par", "ist", "offs")

    def state_dict(self) -> dict:
        st = {k: getattr(self, "_" + k).copy() for k in self._ARRAYS}
        st.update(c=self._c, w=self._w, width_rule=self._width_rule,
                  drift=self._drift_detected, change_at=self._change_at,
                  changes=list(self._changes))
        return st

    def load_state_dict(self, state: Mapping) -> None:
        self._reset()
        for k in self._ARRAYS:
            dtype = np.int64 if k in self._INT_ARRAYS else np.float64
            setattr(self, "_" + k, np.array(state[k], dtype=dtype))
        if self._par.shape == (K.N_PAR - 1,) or self._par.shape == (K.N_PAR,):
            # the test is a parameter, not state (a state saved before ``test`` existed
            # has one number fewer); the kernels read it from here
            self._par = np.append(self._par[:K.P_TEST], _TESTS.index(self.test))
        elif self._par.size:
            raise ValueError(f"state has {self._par.size} parameters, expected {K.N_PAR}")
        self._c = None if state["c"] is None else int(state["c"])
        self._w = int(state["w"])
        self._width_rule = None if state.get("width_rule") is None else str(state["width_rule"])
        self._drift_detected = bool(state["drift"])
        self._change_at = None if state["change_at"] is None else int(state["change_at"])
        self._changes = [int(v) for v in state["changes"]]

    # ---- properties -----------------------------------------------------------------------

    @property
    def drift_detected(self) -> bool:
        return self._drift_detected

    @property
    def change_at(self) -> int | None:
        """Where the change just detected began (position of its first value), else None."""
        return self._change_at

    @property
    def width_used(self) -> int | None:
        """The subsequence width (None until the warm-up is over)."""
        return self._w or None

    @property
    def width_rule(self) -> str | None:
        """How the width was chosen: ``"given"``, ``"suss"``, or ``"suss-fallback"`` (SuSS
        had no answer: a constant warm-up, or no width below its length passed)."""
        return self._width_rule

    @property
    def n_seen(self) -> int:
        """Values taken so far."""
        if self._w == 0:
            return int(self._buf.shape[0])
        return int(self._ist[K.T_INGESTED])

    # ---- the width and the state's arrays --------------------------------------------------

    def _choose_width(self, buf: np.ndarray) -> tuple[int, str]:
        if self.width != "suss":
            return int(self.width), "given"
        widths = []
        rule = "suss"
        for c in range(buf.shape[1]):
            w = int(K.suss_width(np.ascontiguousarray(buf[:, c]), int(self.suss_lbound),
                                 float(self.suss_threshold)))
            if w < 0:
                rule = "suss-fallback"
                w = int(self.suss_lbound) if w == -1 else 2 * int(self.suss_lbound)
            widths.append(w)
        w = max(3, min(widths))
        # the window must hold the k-NN lag and two smallest segments
        most = (self.window - self.k_neighbours - 1) // (1.5 + 2 * self.excl_radius)
        if w > most:
            w, rule = int(max(3, most)), rule + "-capped"
        return w, rule

    def _allocate(self, w: int) -> None:
        N, C, k = int(self.window), int(self._c), int(self.k_neighbours)
        nw = N - w + 1
        self._w = w
        self._par = np.array([N, w, k, w // 2, int(self.excl_radius) * w, int(self.jump), C,
                              _SCORES.index(self.score), _TESTS.index(self.test)],
                             dtype=np.int64)
        self._ist = np.zeros(K.N_IST, dtype=np.int64)
        self._ts = np.full((C, 2 * N), np.nan)
        self._tot = np.zeros(C)
        self._totsq = np.zeros(C)
        self._hist = np.zeros((C, w + 1))
        self._histsq = np.zeros((C, w + 1))
        self._means = np.full((C, 2 * nw), np.nan)
        self._stds = np.full((C, 2 * nw), np.nan)
        self._dot = np.full((C, nw), np.inf)
        self._dists = np.full((nw, k), np.inf)
        self._offs = np.full((nw, k), -1, dtype=np.int64)

    def _run(self, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        T = xs.shape[0]
        alarm = np.zeros(T, dtype=np.int64)
        cp = np.full(T, -1, dtype=np.int64)
        K.class_run(xs, self._par, self._ist, float(self.threshold), self._ts, self._tot,
                    self._totsq, self._hist, self._histsq, self._means, self._stds, self._dot,
                    self._dists, self._offs, alarm, cp)
        return alarm, cp

    def _as_rows(self, xs: Any) -> np.ndarray:
        a = np.asarray(xs, dtype=np.float64)
        if a.ndim == 1:
            a = a.reshape(-1, 1) if self._c in (None, 1) else a.reshape(1, -1)
        if a.ndim != 2:
            raise BadInput(f"ClassDetector takes numbers or vectors, got shape {a.shape}")
        if self._c is not None and a.shape[1] != self._c:
            raise BadInput(f"value has {a.shape[1]} channels, earlier values had {self._c}")
        if a.size and not np.isfinite(a).all():
            raise BadInput("value is not finite")
        return a

    def update_many(self, xs: Any) -> tuple[np.ndarray, np.ndarray, list]:
        """Take values ``xs`` ((T,) or (T, channels)); return per value ``(alarm,
        change_at, extra)``: ``change_at`` -1 where no alarm; ``extra[i]`` lists every
        change found at value ``i`` when there were several (only possible on the value
        that ends the warm-up, which replays it), else an empty tuple."""
        xs = self._as_rows(xs)
        T = xs.shape[0]
        if self._c is None and T:
            self._c = int(xs.shape[1])
            self._buf = np.zeros((0, self._c))
        alarm = np.zeros(T, dtype=bool)
        change = np.full(T, -1, dtype=np.int64)
        extra: list = [()] * T
        i = 0
        if self._w == 0 and T:
            need = int(self.n_warmup) - self._buf.shape[0]
            take = min(need, T)
            self._buf = np.concatenate([self._buf, xs[:take]])
            i = take
            if self._buf.shape[0] == int(self.n_warmup):
                w, self._width_rule = self._choose_width(self._buf)
                self._allocate(w)
                a, c = self._run(np.ascontiguousarray(self._buf))
                self._buf = np.zeros((0, self._c))
                found = c[a == 1].tolist()
                if found:
                    alarm[take - 1] = True
                    change[take - 1] = found[-1]
                    if len(found) > 1:
                        extra[take - 1] = tuple(found)
        if i < T:
            a, c = self._run(np.ascontiguousarray(xs[i:]))
            alarm[i:] = a == 1
            change[i:] = c
        if T:
            self._drift_detected = bool(alarm[-1])
            self._change_at = int(change[-1]) if alarm[-1] else None
            self._changes = list(extra[-1]) if alarm[-1] and extra[-1] else (
                [self._change_at] if alarm[-1] else [])
        return alarm, change, extra

    def update(self, x: Any) -> None:
        """Take one value (number or vector); River's drift-detector interface."""
        refuse_text(x, "ClassDetector")
        self.update_many(np.asarray([x], dtype=np.float64))
