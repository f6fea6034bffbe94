"""Change detection by confidence sequences (Shekhar & Ramdas, ICML 2024), exact and fast.

At every time ``m`` a level-(1 - alpha) confidence sequence (CS) ``C_{m,n}`` for a parameter
of the stream is started; the detector alarms at the first ``n`` where the intersection of all
CSs started so far (each made nested by running intersection) is empty. The intersection over
all start times is computed exactly by the kernels of :mod:`shiftwatch.operators.confseq_kernels`
(convex hull of the prefix-sum walk, or a CUSUM recursion of the capital), so no CS is ever
dropped unless ``prune`` asks for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar

import numpy as np
from numba import types
from river import base as river_base

from shiftwatch.operators.confseq_kernels import (
    BETTING_STATE,
    HULL_STATE,
    M_FLAG,
    M_HULL_SIZE,
    M_LAYOUT,
    M_PFA,
    N_SCALARS,
    OUT_ROWS,
    S_ALARM,
    S_ARGHI,
    S_ARGLO,
    S_BURN,
    S_CENTER,
    S_LOWER,
    S_N,
    S_SCALE,
    S_TSHI,
    S_TSLO,
    S_UPPER,
    S_VAR,
    cs_betting_run,
    cs_betting_step,
    cs_hull_run,
    cs_hull_step,
)
from shiftwatch.operators.contract import Operator
from shiftwatch.operators.locate import LOCATE_KINDS, ValueWindow, locate_change
from shiftwatch.operators.records import BadInput, DeadLetter, as_array, as_scalar, get_field
from shiftwatch.operators.registry import register
from shiftwatch.operators.sensitivity import Sensitivity

__all__ = ["ConfSeqDetector", "ConfSeqOperator", "CS_CHOICES"]

#: The confidence sequences a detector can use.
CS_CHOICES = ("subgaussian", "hoeffding", "empirical-bernstein", "betting", "quantile")
_HULL = ("subgaussian", "hoeffding", "empirical-bernstein")
#: Number of lambda values in the union of the linear-boundary CSs (CS lengths 1 .. 4^9).
N_LAMBDAS = 10
#: Grid of means (betting) on [lower, upper] and bets per side.
BET_GRID = 100
BET_LAMBDAS = 4.0 * 0.5 ** np.arange(8)
QUANTILE_LAMBDAS = 0.5 ** np.arange(6)
_LOG_PI2_6 = math.log(math.pi ** 2 / 6.0)
#: Entries appended to a ``_scalars`` / ``_last`` of an earlier release's length.
_OLD_LENGTHS = {"_scalars": {10: [0.0, 0.0, np.nan, np.nan], 12: [np.nan, np.nan]},
                "_last": {3: [-1.0, np.nan], 4: [np.nan]}}
#: update_many runs the kernel over chunks of this many values.
_CHUNK = 1 << 15
_NO_TS = np.zeros(0)


#: The compiled single-value kernels, filled on first use by _compile_steps.
_STEPS: list = []


def _compile_steps() -> list:
    """Compiled entry points of ``cs_hull_step`` / ``cs_betting_step`` for ``update``.

    ``update`` always passes a Python float and the two packed buffers (float64 and int64,
    C-contiguous, made by ``_pack``), so it calls the compiled functions for exactly those
    types and skips the dispatcher's per-call typing of every argument (~0.1 us of ~0.5 us).
    """
    sig = (types.float64, types.int64[::1])
    _STEPS[:] = [cs_hull_step.compile(sig), cs_betting_step.compile(sig)]
    return _STEPS


class ConfSeqDetector(river_base.DriftDetector):
    """Change detector that alarms when the confidence sequences started at all times disagree.

    A River drift detector (``update``, ``drift_detected``) exposing ``interval``, the current
    intersection ``(lower, upper)`` of all confidence sequences (CSs) started since the last
    alarm. After an alarm the detector restarts on the next ``update``, as River's detectors
    do. Without a change the average run length is at least ``1 / alpha``; with ``pfa=True``
    the start at time ``m`` gets level ``alpha_m = 6 alpha / (pi^2 m^2)`` and the probability of
    any false alarm is at most ``alpha``. Both hold whenever the CSs are valid.

    Parameters
    ----------
    cs
        The confidence sequence, one of:

        * ``"subgaussian"``: the mean of a ``sigma``-sub-Gaussian stream. Union over a grid of
          ``N_LAMBDAS`` fixed ``lambda_j`` (weights ``1/N_LAMBDAS``, ``alpha/2`` per side) of
          ``mean >= mu_hat - lambda sigma^2 / 2 - log(2 J / alpha) / (lambda k)``; the grid is
          tuned for CS lengths ``4^j``. Exact over all start times with a convex hull.
          With ``sigma=None`` this is the **scale-free mode**: the location and scale are
          estimated on the first ``burn_in`` values of each run (no alarm during the
          burn-in), the data standardised with them and treated as 1-sub-Gaussian. Its
          guarantee holds conditionally on the burn-in: if the standardised stream is
          1-sub-Gaussian given the burn-in estimate.
        * ``"hoeffding"``: the mean of data in ``[lower, upper]`` (Hoeffding's lemma, the
          sub-Gaussian CS with ``sigma = (upper - lower) / 2``). The predictable plug-in
          ``lambda_t`` of Waudby-Smith & Ramdas depends on the time since the start, which
          would make every start time different; the fixed grid makes the bound linear in
          partial sums and the max over starts exact.
        * ``"empirical-bernstein"``: the mean of bounded data, Waudby-Smith & Ramdas'
          empirical-Bernstein supermartingale for each fixed ``lambda_j`` in
          ``0.75 * 2^-j``, with the predictable centre ``mu_hat_t = (1/2 + sum x) / (t + 1)``
          of the current run shared by all start times; adapts to a small variance.
        * ``"betting"``: hedged capital for the mean of bounded data on a grid of
          ``BET_GRID`` means, union over the bets ``BET_LAMBDAS`` (truncated to keep the
          capital positive). Capitals are shared by all start times (CUSUM recursion).
        * ``"quantile"``: the ``quantile``-quantile (the median by default), from one-sided
          betting CSs on ``1{x <= theta}`` for thresholds ``theta`` = the sorted values of a
          burn-in of ``burn_in`` values (so it is scale-free and distribution-free; the
          guarantee is exact given the burn-in). A quantile away from the median
          (``quantile=0.9``) sees changes in spread, which leave the mean unchanged.
    alpha
        Level of each CS, in (0, 1): the average run length without change is >= 1/alpha.
    sigma
        ``"subgaussian"`` only: the sub-Gaussian scale, or ``None`` for the scale-free mode.
    lower, upper
        Bounds of the data for ``"hoeffding"``, ``"empirical-bernstein"`` and ``"betting"``.
        A value outside them is rejected with :class:`~shiftwatch.operators.records.BadInput`.
    quantile
        ``"quantile"`` only: the level ``p`` in (0, 1).
    pfa
        Use ``alpha_m = 6 alpha / (pi^2 m^2)`` for the CS started at the m-th observation of a
        run, so that ``P(any false alarm) <= alpha``.
    prune
        ``None`` (exact: every start time is kept) or ``K``: keep only the CSs started at the
        last ``K`` times, as the authors' code does with ``K = 500``. Dropping CSs keeps the
        guarantees and only delays alarms. Linear-boundary CSs only.
    burn_in
        Values used for the scale (``"subgaussian"`` with ``sigma=None``) or the thresholds
        (``"quantile"``) after each (re)start; ignored otherwise.

    Notes
    -----
    ``update_many(xs)`` runs the same kernel over an array and returns the positions of the
    alarms in ``xs``; it is identical to calling ``update`` in a loop. Non-finite values,
    non-numbers and values out of ``[lower, upper]`` raise
    :class:`~shiftwatch.operators.records.BadInput` and leave the state untouched.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> x = np.r_[rng.normal(0, 1, 1000), rng.normal(1, 1, 1000)]
    >>> det = ConfSeqDetector(cs="subgaussian", sigma=1.0, alpha=0.001)
    >>> det.update_many(x).tolist()
    [1032]
    >>> det = ConfSeqDetector(cs="betting", alpha=0.001)
    >>> beta = np.r_[rng.beta(2, 6, 1000), rng.beta(3.2, 4.8, 1000)]  # mean 0.25 -> 0.40
    >>> for i, v in enumerate(beta):
    ...     det.update(v)
    ...     if det.drift_detected:
    ...         print(i, [round(b, 2) for b in det.interval])
    1058 [0.28, 0.28]

    References
    ----------
    S. Shekhar and A. Ramdas. Reducing sequential change detection to sequential estimation.
    ICML 2024.
    """

    def __init__(self, cs: str = "subgaussian", alpha: float = 0.001, sigma: float | None = None,
                 lower: float = 0.0, upper: float = 1.0, quantile: float = 0.5,
                 pfa: bool = False, prune: int | None = None, burn_in: int = 30):
        super().__init__()
        self.cs = cs
        self.alpha = alpha
        self.sigma = sigma
        self.lower = lower
        self.upper = upper
        self.quantile = quantile
        self.pfa = pfa
        self.prune = prune
        self.burn_in = burn_in
        self._validate_params()
        self._reset()

    # ---- parameters -----------------------------------------------------------------

    def _validate_params(self) -> None:
        def number(name: str, v: Any) -> bool:
            return (not isinstance(v, bool) and isinstance(v, (int, float, np.floating,
                                                                np.integer))
                    and math.isfinite(v))

        if self.cs not in CS_CHOICES:
            raise ValueError(f"cs must be one of {', '.join(map(repr, CS_CHOICES))}, "
                             f"got {self.cs!r}")
        if not number("alpha", self.alpha) or not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be a number in (0, 1), got {self.alpha!r}")
        if self.sigma is not None and (not number("sigma", self.sigma) or self.sigma <= 0):
            raise ValueError(f"sigma must be a positive number or None (scale-free), "
                             f"got {self.sigma!r}")
        if self.sigma is not None and self.cs != "subgaussian":
            raise ValueError(f"sigma applies to cs='subgaussian' only, got cs={self.cs!r}")
        if not number("lower", self.lower) or not number("upper", self.upper) \
                or not self.lower < self.upper:
            raise ValueError(f"lower and upper must be finite numbers with lower < upper, got "
                             f"{self.lower!r}, {self.upper!r}")
        if not number("quantile", self.quantile) or not 0.0 < self.quantile < 1.0:
            raise ValueError(f"quantile must be a number in (0, 1), got {self.quantile!r}")
        if not isinstance(self.pfa, bool):
            raise ValueError(f"pfa must be true or false, got {self.pfa!r}")
        if self.prune is not None:
            if isinstance(self.prune, bool) or not isinstance(self.prune, int) \
                    or self.prune < 2:
                raise ValueError(f"prune must be None (exact) or an integer >= 2, "
                                 f"got {self.prune!r}")
            if self.cs not in _HULL:
                raise ValueError(f"prune is supported for cs in {', '.join(_HULL)}, "
                                 f"not {self.cs!r}")
        if isinstance(self.burn_in, bool) or not isinstance(self.burn_in, int) \
                or self.burn_in < 2:
            raise ValueError(f"burn_in must be an integer >= 2, got {self.burn_in!r}")

    @property
    def bounded(self) -> bool:
        """True when values must lie in ``[lower, upper]``."""
        return self.cs in ("hoeffding", "empirical-bernstein", "betting")

    def _uses_burn_in(self) -> bool:
        return self.cs == "quantile" or (self.cs == "subgaussian" and self.sigma is None)

    # ---- state ----------------------------------------------------------------------

    def _reset(self) -> None:
        super()._reset()
        alpha = float(self.alpha)
        scal = np.zeros(N_SCALARS)
        scal[S_BURN] = self.burn_in if self._uses_burn_in() else 0
        scal[S_CENTER], scal[S_SCALE] = 0.0, 1.0
        self._scalars = scal
        self._burn = np.zeros(self.burn_in if self._uses_burn_in() else 1)
        extra = _LOG_PI2_6 if self.pfa else 0.0
        if self.cs in _HULL:
            j = np.arange(N_LAMBDAS, dtype=float)
            c = math.log(2.0 * N_LAMBDAS / alpha) + extra
            if self.cs == "empirical-bernstein":
                lam = 0.75 * 0.5 ** j
                drift = (-np.log1p(-lam) - lam) / lam
                var = 0.0
            else:
                var = 1.0 if self.cs == "subgaussian" else 0.25
                lam = np.sqrt(2.0 * c / (var * 4.0 ** j))
                drift = lam / 2.0
            self._grid = np.stack([lam, drift, c / lam])
            scal[S_LOWER], scal[S_UPPER] = -np.inf, np.inf
            scal[S_VAR] = var
            if self.cs == "subgaussian" and self.sigma is not None:
                scal[S_SCALE] = float(self.sigma)
            elif self.cs != "subgaussian":
                scal[S_CENTER] = float(self.lower)
                scal[S_SCALE] = float(self.upper) - float(self.lower)
            cap = 1 if self.prune else 16
            # One hull per side serves every lambda when the kernel shares it (constant
            # variance proxy, no pfa offsets): see cs_hull_run.
            shared = self.cs != "empirical-bernstein" and not self.pfa
            n_hulls = 1 if shared or self.prune else N_LAMBDAS
            self._hull_x = np.zeros((2, n_hulls, cap))
            self._hull_y = np.zeros((2, n_hulls, cap))
            self._hull_t = np.full((2, n_hulls, cap), np.nan)  # ts of each hull point
            self._hull_size = np.zeros((2, N_LAMBDAS), dtype=np.int64)
            self._walk = np.zeros((2, N_LAMBDAS))
            k = self.prune or 1
            self._ring_y = np.zeros((2, N_LAMBDAS, k))
            self._ring_best = np.zeros((2, k))
            self._ring_t = np.full(k, np.nan)
            self._hint = np.zeros((2, N_LAMBDAS))  # where the tangent queries start walking
            # The kernel's skip-filter cache (not state; NaN in the last column: recompute).
            self._support = np.full((2, 2 * N_LAMBDAS + 2), np.nan)
        else:
            if self.cs == "betting":
                theta = (np.arange(BET_GRID) + 0.5) / BET_GRID
                lam = BET_LAMBDAS[:, None]
                self._lam_plus = np.minimum(lam, 1.0 / (2.0 * theta))
                self._lam_minus = np.minimum(lam, 1.0 / (2.0 * (1.0 - theta)))
                scal[S_CENTER] = float(self.lower)
                scal[S_SCALE] = float(self.upper) - float(self.lower)
            else:
                p = float(self.quantile)
                theta = np.zeros(self.burn_in)
                ones = np.ones(self.burn_in)
                self._lam_plus = (QUANTILE_LAMBDAS / (2.0 * (1.0 - p)))[:, None] * ones
                self._lam_minus = (QUANTILE_LAMBDAS / (2.0 * p))[:, None] * ones
            self._theta = theta
            scal[S_LOWER], scal[S_UPPER] = -1.0, theta.shape[0]
            n_bets = self._lam_plus.shape[0]
            self._log_thr = math.log(2.0 * n_bets / alpha) + extra
            self._cap_plus = np.zeros_like(self._lam_plus)
            self._cap_minus = np.zeros_like(self._lam_plus)
        self._last = np.array([0.0, -np.inf, np.inf, -1.0, np.nan])
        self._step = self._first_step  # the compiled single-value kernel once bound
        self._one = np.zeros(1)
        self._hull = self.cs in _HULL
        self._bounded = self.bounded
        self._bernstein = self.cs == "empirical-bernstein"
        self._quantile = self.cs == "quantile"
        self._p = float(self.quantile)
        if not self._hull:
            self._params = np.array([self._p, self._log_thr])
        self._pack()

    def _pack(self) -> None:
        """Copy the state arrays into one int64 allocation (meta block, then the floats stored
        bit for bit) and rebind them as views of it.

        ``update`` hands only that one array to the Numba kernel (see ``HULL_STATE`` in
        :mod:`shiftwatch.operators.confseq_kernels`). Called after any array is replaced (reset,
        hull growth, state restore, copy).
        """
        names = HULL_STATE if self._hull else BETTING_STATE
        arrays = [np.asarray(getattr(self, k), dtype=np.float64) for k in names]
        sizes = self._hull_size.ravel() if self._hull else np.zeros(0, dtype=np.int64)
        meta = np.zeros(M_LAYOUT + 4 * len(names) + sizes.size, dtype=np.int64)
        meta[M_FLAG] = self._bernstein if self._hull else self._quantile
        meta[M_PFA] = bool(self.pfa)
        n_meta = meta.shape[0]
        mem = np.zeros(1 + n_meta + sum(a.size for a in arrays), dtype=np.int64)
        mem[0] = n_meta
        buf = mem[1 + n_meta:].view(np.float64)  # the floats, stored in the same allocation
        offset = 0
        for k, (name, arr) in enumerate(zip(names, arrays, strict=True)):
            view = buf[offset:offset + arr.size].reshape(arr.shape)
            view[...] = arr
            setattr(self, name, view)
            meta[M_LAYOUT + 4 * k:M_LAYOUT + 4 * k + 4] = (offset, *arr.shape,
                                                           *(1,) * (3 - arr.ndim))
            offset += arr.size
        mem[1:1 + n_meta] = meta
        meta = mem[1:1 + n_meta]
        if self._hull:
            meta[M_HULL_SIZE:] = sizes
            self._hull_size = meta[M_HULL_SIZE:].reshape(self._hull_size.shape)
        self._mem = mem
        self._buf = buf
        self._meta = meta

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_step", None)  # a compiled function (bound again on the next update)
        return state

    def __setstate__(self, state: dict) -> None:
        # copy.deepcopy / pickle copy each view on its own: rebind them to one buffer.
        self.__dict__.update(state)
        self._step = self._first_step
        self._pack()

    #: Underscore attributes that are derived from the parameters, not learned.
    _CONFIG = ("_grid", "_lam_plus", "_lam_minus", "_log_thr", "_drift_detected", "_one",
               "_params", "_mem", "_buf", "_meta", "_hint", "_support", "_step")

    def state_dict(self) -> dict:
        """The learned state: NumPy arrays only (a copy)."""
        return {k: v.copy() for k, v in vars(self).items()
                if k.startswith("_") and not k.startswith("__") and k not in self._CONFIG
                and isinstance(v, np.ndarray)}

    def load_state_dict(self, state: Mapping) -> None:
        """Restore a state from :meth:`state_dict` of a detector with the same parameters."""
        mine = self.state_dict()
        state = dict(state)
        if self._hull and "_hull_x" in state:
            # Written before hull points kept their ts: none known.
            state.setdefault("_hull_t", np.full(np.shape(state["_hull_x"]), np.nan))
            state.setdefault("_ring_t", np.full(mine["_ring_t"].shape, np.nan))
        if set(state) != set(mine):
            raise ValueError(f"state_dict keys {sorted(state)} do not match {sorted(mine)}")
        new = {}
        for k, v in state.items():
            arr = np.asarray(v)
            if k in ("_scalars", "_last") and arr.ndim == 1 and arr.dtype == mine[k].dtype \
                    and arr.shape[0] in _OLD_LENGTHS[k]:
                # Written by an earlier release: no located start (10, 3) or no ts (12, 4).
                arr = np.r_[arr, _OLD_LENGTHS[k][arr.shape[0]]]
            if arr.dtype != mine[k].dtype or (arr.shape != mine[k].shape
                                              and k not in ("_hull_x", "_hull_y", "_hull_t")):
                raise ValueError(f"state_dict entry {k} has the wrong dtype or shape")
            new[k] = arr.copy()
        if self._hull and not (new["_hull_x"].shape == new["_hull_y"].shape
                               == new["_hull_t"].shape):
            raise ValueError("state_dict entries _hull_x, _hull_y, _hull_t differ in shape")
        for k, v in new.items():
            setattr(self, k, v)
        if self._hull:
            self._support = np.full((2, 2 * N_LAMBDAS + 2), np.nan)
        self._pack()

    def _fill_ts(self, ts_at: Callable[[int], float | None], count: int) -> None:
        """Set the ts of the hull points and located starts from ``ts_at(position)``, where
        ``count`` values were fed so far (upgrading a state of an earlier release)."""
        if not self._hull:
            return
        scal = self._scalars
        first = count - int(scal[S_N])  # position of the current run's index 0
        size = self._hull_size
        for s in range(2):
            for j in range(size.shape[1] if not self.prune else 0):
                for k in range(int(size[s, j])):
                    t = ts_at(first + int(self._hull_x[s, j, k]))
                    self._hull_t[s, j, k] = np.nan if t is None else t
        for arg, tsi in ((S_ARGLO, S_TSLO), (S_ARGHI, S_TSHI)):
            t = ts_at(first + int(scal[arg]))
            scal[tsi] = np.nan if t is None else t

    # ---- updating -------------------------------------------------------------------

    def _check(self, x: Any) -> float:
        v = as_scalar(x)
        if self.bounded and not self.lower <= v <= self.upper:
            raise BadInput(f"value {v} is outside [lower, upper] = [{self.lower}, {self.upper}]")
        return v

    def _check_many(self, xs: Any) -> np.ndarray:
        try:
            arr = np.ascontiguousarray(np.asarray(xs, dtype=np.float64).reshape(-1))
        except (TypeError, ValueError):
            raise BadInput("values are not a numeric array") from None
        if not np.all(np.isfinite(arr)):
            raise BadInput(f"value at position {int(np.flatnonzero(~np.isfinite(arr))[0])} "
                           "is not finite")
        if self.bounded:
            bad = np.flatnonzero((arr < self.lower) | (arr > self.upper))
            if bad.size:
                raise BadInput(f"value {arr[bad[0]]} at position {int(bad[0])} is outside "
                               f"[lower, upper] = [{self.lower}, {self.upper}]")
        return arr

    def _run(self, xs: np.ndarray, stop_at_alarm: bool = False,
             ts: np.ndarray = _NO_TS) -> np.ndarray:
        """Feed checked values; return ``out`` with rows alarm, lower, upper, located lag, ts.

        ``ts`` (float64, NaN for none; or empty) are the values' ``ts``, kept with the hull
        points for the located start's ``ts`` (row 4 at an alarm). With ``stop_at_alarm`` it
        stops right after the first alarm: ``out`` then has one column per value consumed.
        """
        out = np.empty((OUT_ROWS, xs.shape[0]))
        if xs.shape[0] == 0:
            return out
        if self.cs in _HULL:
            done = 0
            while True:
                done = cs_hull_run(xs, done, self.cs == "empirical-bernstein", self.pfa,
                                   self._grid, self._hull_x, self._hull_y, self._hull_size,
                                   self._walk, self._scalars, self._burn, self._ring_y,
                                   self._ring_best, out, stop_at_alarm, self._hint, ts,
                                   self._hull_t, self._ring_t, self._support)
                if done == xs.shape[0] or (stop_at_alarm and out[0, done - 1] != 0.0):
                    break
                self._grow()
        else:
            done = cs_betting_run(xs, 0, self.cs == "quantile", float(self.quantile), self.pfa,
                                  self._theta, self._lam_plus, self._lam_minus, self._log_thr,
                                  self._cap_plus, self._cap_minus, self._scalars, self._burn,
                                  out, stop_at_alarm)
        if done < xs.shape[0]:
            out = out[:, :done]
        self._last[:] = out[:, -1]
        return out

    def _grow(self) -> None:
        cap = self._hull_x.shape[2]
        for name in ("_hull_x", "_hull_y", "_hull_t"):
            old = getattr(self, name)
            new = np.zeros((2, old.shape[1], 2 * cap))
            new[:, :, :cap] = old
            setattr(self, name, new)
        self._pack()

    def update(self, x: float) -> None:
        """Update with one value (a number); raises BadInput for bad values."""
        # The common case in one line: a finite float, unbounded data, room in the hull.
        if type(x) is float and x - x == 0.0 and not self._bounded \
                and self._step(x, self._mem):
            return
        self._update_slow(x)

    def _update_slow(self, x: Any) -> None:
        if type(x) is not float or x - x != 0.0 or (
                self._bounded and not self.lower <= x <= self.upper):
            x = float(self._check(x))
        while not self._step(x, self._mem):  # 0: a hull array is full
            self._grow()

    def _first_step(self, x: float, mem: np.ndarray) -> int:
        """``_step`` until the first update: binds the compiled kernel (compiling or loading
        it from Numba's cache) and runs it."""
        self._step = (_STEPS or _compile_steps())[0 if self._hull else 1]
        return self._step(x, mem)

    def update_many(self, xs: Iterable[float]) -> np.ndarray:
        """Update with every value of ``xs``; return the positions of the alarms in ``xs``.

        Identical to calling :meth:`update` in a loop. The whole array is checked first: a
        bad value raises BadInput before any value is used.
        """
        arr = self._check_many(xs)
        alarms = [np.zeros(0, dtype=np.int64)]
        for start in range(0, arr.shape[0], _CHUNK):  # bounded output buffers
            out = self._run(arr[start:start + _CHUNK])
            alarms.append(np.flatnonzero(out[0] != 0.0) + start)
        return np.concatenate(alarms)

    @property
    def drift_detected(self) -> bool:
        """Whether the last update raised an alarm."""
        return bool(self._scalars[S_ALARM] != 0.0)

    @property
    def interval(self) -> tuple[float, float]:
        """``(lower, upper)``: the intersection of the CSs after the last update.

        ``(-inf, inf)`` before the first value (and during a burn-in); empty
        (``lower > upper``, or equal edges for the grid-based CSs) right after an alarm.
        """
        return float(self._last[1]), float(self._last[2])

    @property
    def change_lag(self) -> int | None:
        """At an alarm, how many values back the change is located (0: the last value).

        The later of the two start times whose confidence sequences attain the max lower and
        the min upper bound when the intersection became empty (see :class:`ConfSeqOperator`,
        Locating). None without an alarm, and for ``"betting"`` and ``"quantile"``, whose
        capitals are shared by all start times and so do not say which start excluded.
        """
        lag = self._last[3]
        return None if not self.drift_detected or lag < 0 else int(lag)

    @property
    def memory_items(self) -> int:
        """Number of stored start-time summaries (hull points, ring entries or grid cells)."""
        if self.cs in _HULL:
            return int(self._hull_size.sum()) if not self.prune else self._ring_y.size
        return int(self._cap_plus.size + self._cap_minus.size)


#: What ``locate=True`` means for the linear-boundary CSs (see ConfSeqOperator, Locating).
LOCATE_DEFAULT = "cs"


def _ts(record: Mapping) -> float | None:
    """The record's ``ts`` if it is a number (kept with the value for ``change_ts``)."""
    ts = record.get("ts") if isinstance(record, Mapping) else None
    if isinstance(ts, (int, float, np.integer, np.floating)) and not isinstance(ts, bool):
        return float(ts)
    return None


def _cs_start(position: int, columns: list[np.ndarray]) -> tuple[int, float | None]:
    """``(change_at, change_ts)`` of an alarm at ``position`` from the kernels' output columns
    of the coordinates that alarmed there: the earliest located CS start, with its ts."""
    at, t = min((position - int(col[3]), float(col[4])) for col in columns)
    return at, None if t != t else t


def _ts_array(ts: list) -> np.ndarray:
    """The ``ts`` of a batch as float64, NaN for none (empty when no record had one)."""
    if not ts or all(t is None for t in ts):
        return _NO_TS
    return np.array([np.nan if t is None else t for t in ts], dtype=np.float64)


@register("cs")
class ConfSeqOperator(Operator):
    """Confidence-sequence change detection (Shekhar & Ramdas 2024) as a stream operator.

    Reads ``field`` (a number, or a vector of numbers) and runs a :class:`ConfSeqDetector` on
    it; every input gives one output with ``alarm``, ``lower`` and ``upper`` (the current
    intersection of the CSs, ``None`` while unbounded, e.g. during a burn-in). A vector value
    of length ``d`` runs one detector per coordinate, each at level ``alpha / d`` (a union
    bound, so the vector detector keeps the ``1/alpha`` run length and ``pfa`` guarantees);
    ``alarm`` is then true when any coordinate alarms, ``lower``/``upper`` are lists and
    ``coordinates`` lists the coordinates that alarmed. The first record fixes the shape.
    Bad values (NaN, non-numbers, outside ``[lower, upper]`` for the bounded CSs, another
    shape) raise :class:`~shiftwatch.operators.records.BadInput` and become dead letters.

    Parameters are those of :class:`ConfSeqDetector` plus ``field`` (dotted path),
    ``locate``, ``locate_window`` and ``restart`` (below). The default is the scale-free
    sub-Gaussian CS (``sigma=None``, scale learned on a burn-in).

    **Locating.** An alarm output carries ``change_at``, the position of the first changed
    record (the operator's own 0-based count of accepted records; dead letters are not
    counted, as in the River adapter) and ``change_ts``, that record's ``ts`` (with
    ``"cs"``: kept with each stored start, so always there when the record had a ``ts``;
    with ``"mean"``/``"meanvar"``: when it is still in the window; ``locate_window`` is not
    used by ``"cs"``). ``locate=True`` (or ``"cs"``) derives it from the confidence
    sequences themselves: when the intersection becomes empty, the starts whose CSs attain
    the max lower bound and the min upper bound bracket the change, and the *later* of the
    two is taken (the kernels record it in the hull query, at no extra cost). Reason: the
    CS started after the change holds only post-change data, so it is the one that moved
    away; the earlier start's CS spans the change. The estimate is from above (never
    before the change when the change is the one detected) and is not limited by a window.
    ``"mean"``/``"meanvar"`` instead split the values since the previous located change (at
    most ``locate_window``) with :mod:`~shiftwatch.operators.locate`; the betting and
    quantile CSs share their capitals across starts, so they cannot say which start
    excluded and ``locate=True`` means ``"mean"`` for them. Measured on synthetic data
    only (``benchmarks/location.py`` section 5; one change at 3000, 30 seeds), mean
    absolute error CS start vs mean split: 135 vs 390 at a 0.25 sd shift, 25 vs 26 at 0.5,
    2.3 vs 2.0 at 1, 0.5 vs 0.7 at 2; on the multi-change streams F1 located 0.949 vs 0.959
    (error 19.5 vs 19.3). Equal where the shift is large, much better where it is small
    (the mean split is capped by the window): the CS start is the default. For a vector,
    ``change_at`` is the earliest estimate among the coordinates that alarmed.

    **Restart** (``restart``, default off). After an alarm the detector restarts on the
    next value, learning its scale on a new burn-in. ``restart=True`` instead re-feeds it
    the kept values from the located change to the alarm (the burn-in then starts at the
    change; alarms while re-feeding are not reported). On two changes 150 records apart
    (section 6, 30 seeds) it changed the alarm times but not the located F1 nor how often
    the second change was found (the 30-value burn-in ends long before the second change
    either way), so it is off: it costs a window and a re-run per alarm for nothing.

    Examples
    --------
    >>> import numpy as np
    >>> from shiftwatch.operators import create
    >>> rng = np.random.default_rng(3)
    >>> x = np.r_[rng.normal(5, 2, 300), rng.normal(9, 2, 300)]
    >>> outs = create("cs", alpha=0.01).process_batch(
    ...     [{"ts": i, "value": float(v)} for i, v in enumerate(x)])
    >>> [o["ts"] for o in outs if o["alarm"]]
    [310]
    >>> [o["change_at"] for o in outs if o["alarm"]]
    [307]
    """

    input_kind: ClassVar[str] = "scalar or vector (one detector per coordinate, alpha split)"
    sensitivity = Sensitivity("alpha", more_alarms="larger", low=1e-100, high=0.2,
                              guarantee="arl>=1/value", guarantee_when={"pfa": False})

    def __init__(self, field: str = "value", cs: str = "subgaussian", alpha: float = 0.001,
                 sigma: float | None = None, lower: float = 0.0, upper: float = 1.0,
                 quantile: float = 0.5, pfa: bool = False, prune: int | None = None,
                 burn_in: int = 30, locate: bool | str = True, locate_window: int = 1000,
                 restart: bool = False):
        self.field = field
        self.cs = cs
        self.alpha = alpha
        self.sigma = sigma
        self.lower = lower
        self.upper = upper
        self.quantile = quantile
        self.pfa = pfa
        self.prune = prune
        self.burn_in = burn_in
        self.locate = locate
        self.locate_window = locate_window
        self.restart = restart
        self._validate_params()
        self._reset()

    def _detector_params(self) -> dict:
        return {k: v for k, v in self._get_params().items()
                if k not in ("field", "locate", "locate_window", "restart")}

    def _keyed_store(self) -> Any:
        """``Keyed(self)`` keeps its keys in a :class:`~shiftwatch.operators.confseq_fleet.
        ConfSeqFleet` (arrays, one compiled call per micro-batch) when the parameters allow."""
        from shiftwatch.operators.confseq_fleet import ConfSeqFleet, fleet_eligible

        return ConfSeqFleet(self) if fleet_eligible(self) else None

    def _validate_params(self) -> None:
        if not isinstance(self.field, str) or not self.field or "" in self.field.split("."):
            raise ValueError(f"field must be a dotted path such as 'value', got {self.field!r}")
        ConfSeqDetector(**self._detector_params())
        kinds = ("cs", *LOCATE_KINDS)
        if not (isinstance(self.locate, bool) or self.locate in kinds):
            raise ValueError(f"locate must be true, false or one of {', '.join(kinds)}, "
                             f"got {self.locate!r}")
        if self.locate == "cs" and self.cs not in _HULL:
            raise ValueError(f"locate='cs' needs a linear-boundary CS ({', '.join(_HULL)}); "
                             f"cs={self.cs!r} does not locate: use locate='mean'")
        if (isinstance(self.locate_window, bool) or not isinstance(self.locate_window, int)
                or self.locate_window < 2):
            raise ValueError(f"locate_window must be an integer >= 2, got {self.locate_window!r}")
        if not isinstance(self.restart, bool):
            raise ValueError(f"restart must be true or false, got {self.restart!r}")

    @property
    def locate_kind(self) -> str | None:
        """The locator in use: ``"cs"``, ``"mean"``, ``"meanvar"`` or None (off)."""
        if self.locate is False:
            return None
        if self.locate is True:
            return LOCATE_DEFAULT if self.cs in _HULL else "mean"
        return self.locate

    def _reset(self) -> None:
        self._shape: list | None = None
        self._detectors: list[ConfSeqDetector] = []
        self._count = 0  # records accepted so far = the position of the next one
        # The values since the previous located change, bounded (None when neither locating
        # nor restarting needs them).
        self._window: ValueWindow | None = None

    def _make(self, shape: tuple) -> None:
        d = shape[0] if shape else 1
        params = self._detector_params()
        params["alpha"] = float(self.alpha) / d
        self._detectors = [ConfSeqDetector(**params) for _ in range(d)]
        self._shape = list(shape)
        if self._needs_window():
            self._window = self._new_window(d if shape else 0)

    def _needs_window(self) -> bool:
        # The CS start is located (with its ts) by the kernels: no window, unless restarting.
        return self.restart or self.locate_kind not in ("cs", None)

    def _new_window(self, dim: int) -> ValueWindow:
        # Locating from the CS start needs only positions and the located record's ts; the
        # values are kept for the generic split and for restarting.
        keep = self.locate_kind not in ("cs", None) or bool(self.restart)
        return ValueWindow(self.locate_window, dim, keep_values=keep)

    def state_dict(self) -> dict:
        window = self._window
        return {"operator": self.name,
                "state": {"shape": None if self._shape is None else list(self._shape),
                          "detectors": [d.state_dict() for d in self._detectors],
                          "count": self._count,
                          "window": None if window is None else window.state_dict()}}

    def load_state_dict(self, state: Mapping) -> None:
        inner = self._state_payload(state)
        self._reset()
        if inner.get("shape") is None:
            return
        shape = tuple(int(s) for s in inner["shape"])
        self._make(shape)
        docs = inner.get("detectors") or []
        if len(docs) != len(self._detectors):
            raise ValueError("state_dict holds the wrong number of detectors")
        for det, doc in zip(self._detectors, docs, strict=True):
            det.load_state_dict(doc)
        self._count = int(inner.get("count", 0))
        window = inner.get("window")
        if window is not None and any(isinstance(doc, Mapping) and "_hull_x" in doc
                                      and "_hull_t" not in doc for doc in docs):
            # An earlier release kept the ts in the window: give the hull points theirs.
            held = ValueWindow.from_state_dict(window)
            for det in self._detectors:
                det._fill_ts(held.ts_at, self._count)
        if window is not None and self._window is not None:
            window = ValueWindow.from_state_dict(window)
            if window.dim != (shape[0] if shape else 0):
                raise ValueError("state_dict's locate window does not match the value shape")
            self._window = window
        elif self._window is not None:
            # Written with locate and restart off: positions of the window start here.
            self._window = self._new_window(shape[0] if shape else 0)
            self._window._count = self._count

    # ---- processing -----------------------------------------------------------------

    def _read(self, record: Mapping) -> tuple[tuple, np.ndarray]:
        raw = get_field(record, self.field)
        if isinstance(raw, (list, tuple, np.ndarray)):
            value = as_array(raw, ndim=1, name=self.field)
            if value.size == 0:
                raise BadInput(f"{self.field} is an empty vector")
            shape: tuple = value.shape
        else:
            value = np.array([as_scalar(raw, self.field)])
            shape = ()
        if self._shape is not None and tuple(self._shape) != shape:
            raise BadInput(f"{self.field} has shape {shape}, expected {tuple(self._shape)} "
                           "(fixed by the first record)")
        probe = ConfSeqDetector.__new__(ConfSeqDetector)
        probe.cs, probe.lower, probe.upper = self.cs, self.lower, self.upper
        if probe.bounded and np.any((value < self.lower) | (value > self.upper)):
            raise BadInput(f"{self.field} {value.tolist() if shape else value[0]} is outside "
                           f"[lower, upper] = [{self.lower}, {self.upper}]")
        return shape, value

    @staticmethod
    def _edge(v: float) -> float | None:
        return v if math.isfinite(v) else None

    def _outputs(self, records: list[Mapping], outs: list[np.ndarray], vector: bool,
                 located: dict[int, tuple[int, float | None]]) -> list:
        result = []
        edge = self._edge
        for i, record in enumerate(records):
            if not vector:
                o = outs[0]
                out = self._output(record, alarm=bool(o[0, i] != 0.0),
                                   lower=edge(float(o[1, i])), upper=edge(float(o[2, i])))
            else:
                coords = [c for c, o in enumerate(outs) if o[0, i] != 0.0]
                out = self._output(
                    record, alarm=bool(coords),
                    lower=[edge(float(o[1, i])) for o in outs],
                    upper=[edge(float(o[2, i])) for o in outs], coordinates=coords)
            if i in located:
                at, ts = located[i]
                out["change_at"] = at
                if ts is not None:
                    out["change_ts"] = ts
            result.append(out)
        return result

    def _feed(self, matrix: np.ndarray, ts: list) -> tuple[list[np.ndarray], dict]:
        """Run the detectors over ``matrix`` (one row per record, one column per coordinate).

        Returns each coordinate's kernel output and ``{row: (change_at, change_ts)}`` for the
        rows that alarmed (empty when locating is off). Each coordinate's detector runs up to
        its next alarm on its own (they are independent); the shared window then takes the
        values up to the earliest pending alarm, which is located (and the alarmed detectors
        restarted) before any later one.
        """
        m, d = matrix.shape
        base = self._count
        self._count += m
        window = self._window
        cols = [np.ascontiguousarray(matrix[:, c]) for c in range(d)]
        kind = self.locate_kind
        if window is None:
            if kind != "cs":
                return [det._run(cols[c]) for c, det in enumerate(self._detectors)], {}
            tarr = _ts_array(ts)
            outs = [det._run(cols[c], ts=tarr) for c, det in enumerate(self._detectors)]
            located = {}
            hit = outs[0][0] != 0.0 if d == 1 else np.any([o[0] != 0.0 for o in outs], axis=0)
            for i in np.flatnonzero(hit).tolist():
                located[i] = _cs_start(base + i, [o[:, i] for o in outs if o[0, i] != 0.0])
            return outs, located
        tarr = _ts_array(ts) if kind == "cs" else _NO_TS
        pieces: list[list[np.ndarray]] = [[] for _ in range(d)]
        ptr = [0] * d
        pending: list[int | None] = [None] * d
        located: dict[int, tuple[int, float | None]] = {}
        pushed = 0
        while True:
            for c, det in enumerate(self._detectors):
                if pending[c] is None and ptr[c] < m:
                    o = det._run(cols[c][ptr[c]:], stop_at_alarm=True,
                                 ts=tarr[ptr[c]:] if tarr.shape[0] else tarr)
                    pieces[c].append(o)
                    ptr[c] += o.shape[1]
                    if o[0, -1] != 0.0:
                        pending[c] = ptr[c] - 1
            due = [p for p in pending if p is not None]
            if not due:
                break
            e = min(due)
            alarmed = [c for c in range(d) if pending[c] == e]
            window.push_many(matrix[pushed:e + 1] if self._shape else matrix[pushed:e + 1, 0],
                             ts[pushed:e + 1])
            pushed = e + 1
            if kind == "cs":
                # Each alarmed detector's last value consumed is its alarm.
                located[e] = _cs_start(base + e, [pieces[c][-1][:, -1] for c in alarmed])
                window.drop_before(located[e][0])
            elif kind is not None:
                at = self._locate_at(window, base + e, alarmed, pieces, kind)
                located[e] = (at, window.ts_at(at))
                window.drop_before(at)
            if self.restart:
                kept = window.values()
                kept_ts = _ts_array([window.ts_at(p) for p in range(window.start, window.count)])
                for c in alarmed:
                    self._detectors[c]._run(np.ascontiguousarray(
                        kept if not self._shape else kept[:, c]), ts=kept_ts)
            for c in alarmed:
                pending[c] = None
        if pushed < m:
            window.push_many(matrix[pushed:] if self._shape else matrix[pushed:, 0],
                             ts[pushed:])
        outs = [np.concatenate(p, axis=1) if len(p) > 1 else p[0] for p in pieces]
        return outs, located

    def _locate_at(self, window: ValueWindow, position: int, alarmed: list[int],
                   pieces: list[list[np.ndarray]], kind: str) -> int:
        """The located change of an alarm at ``position`` (the window ends with it)."""
        values = window.values()
        if self._shape:
            values = values[:, alarmed]
        return window.start + locate_change(values, kind)

    def process(self, record: Mapping) -> list[dict]:
        shape, value = self._read(record)
        if self._shape is None:
            self._make(shape)
        outs, located = self._feed(value[None, :], [_ts(record)])
        return self._outputs([record], outs, bool(shape), located)

    def process_batch(self, records: Iterable[Mapping]) -> list[dict | DeadLetter]:
        """Same outputs as :meth:`process` in a loop; the detectors run once over the batch."""
        records = list(records)
        good: list[Mapping] = []
        values: list[np.ndarray] = []
        slots: list[Any] = []  # a DeadLetter, or None for the next good record
        for record in records:
            try:
                shape, value = self._read(record)
            except BadInput as exc:
                slots.append(self._dead_letter(record, exc))
                continue
            if self._shape is None:
                self._make(shape)
            good.append(record)
            values.append(value)
            slots.append(None)
        if good:
            matrix = np.vstack(values)
            ts = [_ts(r) for r in good] if self._window is not None \
                or self.locate_kind == "cs" else []
            outs, located = self._feed(matrix, ts)
            produced = iter(self._outputs(good, outs, bool(self._shape), located))
        else:
            produced = iter(())
        return [next(produced) if s is None else s for s in slots]

    # ---- hooks for the check suite ----------------------------------------------------

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict]:
        yield {}
        yield {"cs": "subgaussian", "sigma": 1.0, "pfa": True, "field": "meta.x"}
        yield {"cs": "hoeffding", "lower": -4.0, "upper": 8.0, "prune": 50}
        yield {"cs": "empirical-bernstein", "lower": -4.0, "upper": 8.0}
        yield {"cs": "betting", "lower": -4.0, "upper": 8.0, "alpha": 0.05}
        yield {"cs": "quantile", "quantile": 0.5, "burn_in": 20}

    @classmethod
    def _test_stream(cls, params: dict, n: int = 300, seed: int = 0) -> list[dict]:
        rng = np.random.default_rng(seed)
        vector = params.get("field") == "meta.x"
        x = rng.normal(0.0, 1.0, (n, 3) if vector else n)
        x[n // 2:] += 3.0
        x = np.clip(x, -3.9, 7.9)
        records = []
        for i in range(n):
            rec: dict = {"key": "k", "ts": float(i), "offset": i}
            if vector:
                rec["meta"] = {"x": x[i].tolist()}
            else:
                rec["value"] = float(x[i])
            records.append(rec)
        return records

    @classmethod
    def _bad_records(cls, params: dict) -> list[dict]:
        vector = params.get("field") == "meta.x"

        def rec(v: Any) -> dict:
            return {"key": "k", "meta": {"x": v}} if vector else {"key": "k", "value": v}

        bad = [rec(float("nan")), rec("abc"), {"key": "k"}, rec([[1.0, 2.0], [3.0]]),
               rec(None), rec({"a": 1}), "not a record"]
        bad += [rec([1.0, 0.0])] if vector else [rec([1.0, 0.0]), rec(float("inf"))]
        if "upper" in params:
            bad.append(rec(params["upper"] + 1.0))
        return bad
