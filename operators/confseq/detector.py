"""Change detection by confidence sequences (Shekhar & Ramdas, ICML 2024), exact and fast.

At every time ``m`` a level-(1 - alpha) confidence sequence (CS) ``C_{m,n}`` for a parameter
of the stream is started; the detector alarms at the first ``n`` where the intersection of all
CSs started so far (each made nested by running intersection) is empty. The intersection over
all start times is computed exactly by the kernels of :mod:`shiftwatch.operators.confseq.kernels`
(convex hull of the prefix-sum walk, or a CUSUM recursion of the capital), so no CS is ever
dropped unless ``prune`` asks for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
from numba import types

from shiftwatch.operators.confseq.kernels import (
    B_BATCHES,
    B_EFFECTIVE,
    B_FIRST,
    B_LEVELS,
    BETTING_STATE,
    HULL_STATE,
    M_FLAG,
    M_HULL_SIZE,
    M_LAYOUT,
    M_PFA,
    N_BURN_CFG,
    N_SCALARS,
    OUT_ROWS,
    S_ALARM,
    S_ARGHI,
    S_ARGLO,
    S_BURN,
    S_CENTER,
    S_LOWER,
    S_N,
    S_NBURN,
    S_SCALE,
    S_SEEN,
    S_TSHI,
    S_TSLO,
    S_UPPER,
    S_VAR,
    cs_betting_run,
    cs_betting_step,
    cs_hull_run,
    cs_hull_step,
    long_run_burn_step,
)
from shiftwatch.operators.drift_detector import NotANumber, RiverDriftDetector, real_number
from shiftwatch.records import MAX_ABS, BadInput, as_scalar

__all__ = ["ConfSeqDetector", "CS_CHOICES", "N_LAMBDAS", "SCALE_CHOICES", "LONG_RUN_BATCHES"]

#: The confidence sequences a detector can use.
CS_CHOICES = ("subgaussian", "hoeffding", "empirical-bernstein", "betting", "quantile")
HULL_CS = ("subgaussian", "hoeffding", "empirical-bernstein")
#: How the scale-free mode learns its scale on the burn-in.
SCALE_CHOICES = ("long-run", "marginal")
#: The long-run scale uses batch sizes with at least this many complete batches in the
#: burn-in (the largest batch is a tenth of it).
LONG_RUN_BATCHES = 10
#: Number of lambda values in the union of the linear-boundary CSs (CS lengths 1 .. 4^9).
N_LAMBDAS = 10
#: Grid of means (betting) on [lower, upper] and bets per side.
BET_GRID = 100
BET_LAMBDAS = 4.0 * 0.5 ** np.arange(8)
QUANTILE_LAMBDAS = 0.5 ** np.arange(6)
_LOG_PI2_6 = math.log(math.pi ** 2 / 6.0)
#: Entries appended to a ``_scalars`` / ``_last`` of an earlier release's length.
_OLD_LENGTHS = {"_scalars": {10: [0.0, 0.0, np.nan, np.nan, np.nan], 12: [np.nan] * 3,
                             14: [np.nan]},
                "_last": {3: [-1.0, np.nan], 4: [np.nan]}}
#: update_many runs the kernel over chunks of this many values.
_CHUNK = 1 << 15
NO_TS = np.zeros(0)


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


class ConfSeqDetector(RiverDriftDetector):
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
          estimated on a burn-in at the start of each run (no alarm during the burn-in),
          the data standardised with them and treated as 1-sub-Gaussian (see ``scale``).
          Its guarantee holds conditionally on the burn-in: if the standardised stream is
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
        A value outside them is rejected with :class:`~shiftwatch.records.BadInput`.
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
        Values used for the thresholds (``"quantile"``) or the scale (``"subgaussian"`` with
        ``sigma=None`` and ``scale="marginal"``) after each (re)start; with
        ``scale="long-run"`` the least length of the burn-in (its first checkpoint).
        Ignored otherwise.
    scale
        How the scale-free mode learns its scale on the burn-in:

        * ``"long-run"`` (default): the square root of the largest variance per value of the
          partial sums over the lengths the burn-in can measure, ``max_b b Var(mean of b
          consecutive values)`` for ``b = 1, 2, 4, ...`` with at least ``LONG_RUN_BATCHES``
          (10) complete batches (non-overlapping batch means). The CS bounds partial sums
          ``S_k`` as if ``Var(S_k) <= k sigma^2``: for independent values that is
          ``sigma^2``, the marginal variance, but for dependent ones ``Var(S_k) / k`` grows
          towards the long-run variance ``sum_h gamma_h`` (``(1 + rho) / (1 - rho)`` times
          the marginal one for an AR(1)), or peaks near half a period for a periodic signal.
          The burn-in lasts until it holds ``burn_in_effective`` effective values,
          ``n sigma_marginal^2 / sigma_long_run^2``, checked after ``burn_in`` values and then
          every 10% more, or ``burn_in_max`` values, whichever comes first: for independent
          values about ``burn_in_effective`` (median 66 at the defaults), for dependent ones
          as long as the dependence needs (AR(1) rho 0.5: median 149; rho 0.9: 972).
          O(log ``burn_in_max``) memory (the batch sums are carried up, not kept).
          Measured (issue 23; 200 seeded runs of 50,000 values per cell): without change,
          ARL >= 1/alpha on i.i.d. N(0,1) and AR(1) rho 0.5 and 0.9 for alpha 0.1 to
          0.001 (at alpha = 0.001: 63,128, 34,933, 75,920), where the marginal scale gives
          31,497, 628 and 79. Its
          cost: a change inside a burn-in (after a false alarm, or two changes closer than
          a burn-in) makes the scale larger still (a level shift looks like dependence on a
          short stretch) and is not detected.
        * ``"marginal"``: the standard deviation of the first ``burn_in`` values (the
          scale-free mode before issue 23; valid for independent data only).
    burn_in_effective
        ``scale="long-run"``: effective values the burn-in must hold (>= 2).
    burn_in_max
        ``scale="long-run"``: the burn-in ends after this many values (>= ``burn_in``) even
        if it holds fewer effective values, with the scale it has then.

    Notes
    -----
    ``update_many(xs)`` runs the same kernel over an array and returns the positions of the
    alarms in ``xs``; it is identical to calling ``update`` in a loop. Non-finite values,
    non-numbers and values out of ``[lower, upper]`` raise
    :class:`~shiftwatch.records.BadInput` and leave the state untouched.

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
                 pfa: bool = False, prune: int | None = None, burn_in: int = 30,
                 scale: str = "long-run", burn_in_effective: int = 60,
                 burn_in_max: int = 1000):
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
        self.scale = scale
        self.burn_in_effective = burn_in_effective
        self.burn_in_max = burn_in_max
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
            if self.cs not in HULL_CS:
                raise ValueError(f"prune is supported for cs in {', '.join(HULL_CS)}, "
                                 f"not {self.cs!r}")
        if isinstance(self.burn_in, bool) or not isinstance(self.burn_in, int) \
                or self.burn_in < 2:
            raise ValueError(f"burn_in must be an integer >= 2, got {self.burn_in!r}")
        if self.scale not in SCALE_CHOICES:
            raise ValueError(f"scale must be one of {', '.join(map(repr, SCALE_CHOICES))}, "
                             f"got {self.scale!r}")
        if isinstance(self.burn_in_effective, bool) or not isinstance(
                self.burn_in_effective, int) or self.burn_in_effective < 2:
            raise ValueError(f"burn_in_effective must be an integer >= 2, "
                             f"got {self.burn_in_effective!r}")
        if isinstance(self.burn_in_max, bool) or not isinstance(self.burn_in_max, int) \
                or self.burn_in_max < 2:
            raise ValueError(f"burn_in_max must be an integer >= 2, got {self.burn_in_max!r}")
        if self._long_run() and self.burn_in_max < self.burn_in:
            raise ValueError(f"burn_in_max must be >= burn_in with scale='long-run', got "
                             f"burn_in_max={self.burn_in_max!r} < burn_in={self.burn_in!r}")

    @property
    def bounded(self) -> bool:
        """True when values must lie in ``[lower, upper]``."""
        return self.cs in ("hoeffding", "empirical-bernstein", "betting")

    def _uses_burn_in(self) -> bool:
        return self.cs == "quantile" or (self.cs == "subgaussian" and self.sigma is None)

    def _long_run(self) -> bool:
        """The scale-free mode with the long-run scale (its burn-in keeps accumulators)."""
        return self.cs == "subgaussian" and self.sigma is None and self.scale == "long-run"

    def _long_run_levels(self) -> int:
        """Batch sizes ``2^1 .. 2^levels`` can have ``LONG_RUN_BATCHES`` batches within
        ``burn_in_max`` values."""
        levels = 0
        while (2 << levels) * LONG_RUN_BATCHES <= self.burn_in_max:
            levels += 1
        return levels

    # ---- state ----------------------------------------------------------------------

    def _reset(self) -> None:
        super()._reset()
        alpha = float(self.alpha)
        scal = np.zeros(N_SCALARS)
        scal[S_BURN] = self.burn_in if self._uses_burn_in() else 0
        scal[S_CENTER], scal[S_SCALE] = 0.0, 1.0
        self._scalars = scal
        self._burn = np.zeros(self.burn_in if self._uses_burn_in() else 1)
        self._burn_cfg = np.zeros(N_BURN_CFG)
        if self._long_run():
            levels = self._long_run_levels()
            scal[S_BURN] = self.burn_in_max
            self._burn = np.zeros(2 + 3 * (levels + 1))  # accumulators (long_run_burn_step)
            cfg = self._burn_cfg
            cfg[B_EFFECTIVE] = self.burn_in_effective
            cfg[B_BATCHES] = LONG_RUN_BATCHES
            cfg[B_LEVELS] = levels
            cfg[B_FIRST] = self.burn_in
        extra = _LOG_PI2_6 if self.pfa else 0.0
        if self.cs in HULL_CS:
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
        self._hull = self.cs in HULL_CS
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
        :mod:`shiftwatch.operators.confseq.kernels`). Called after any array is replaced (reset,
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

    def _from_marginal_burn_in(self, state: dict, mine: dict) -> dict:
        """A state written before the long-run scale existed (its ``_burn`` buffers the
        burn-in's raw values) as the long-run burn-in would have it: a finished burn-in stays
        finished (the scale it learned is kept), an unfinished one's values are fed to the
        long-run accumulators. So changelogs of earlier releases restore."""
        scal = np.asarray(state["_scalars"], dtype=np.float64)
        if scal.shape[0] in _OLD_LENGTHS["_scalars"]:
            scal = np.r_[scal, _OLD_LENGTHS["_scalars"][scal.shape[0]]]
        if scal.shape != mine["_scalars"].shape:
            raise ValueError("state_dict entry _scalars has the wrong dtype or shape")
        scal = scal.copy()
        old = np.asarray(state["_burn"], dtype=np.float64).reshape(-1)
        seen, length = int(scal[S_NBURN]), int(scal[S_BURN])
        w = np.zeros_like(mine["_burn"])
        scal[S_BURN] = self.burn_in_max
        if seen >= length:
            scal[S_NBURN] = self.burn_in_max
        else:
            scal[S_NBURN] = 0.0
            for x in old[:seen]:
                long_run_burn_step(scal, w, float(x), self._burn_cfg)
        return {**state, "_scalars": scal, "_burn": w}

    #: Underscore attributes that are derived from the parameters, not learned.
    _CONFIG = ("_grid", "_lam_plus", "_lam_minus", "_log_thr", "_drift_detected", "_one",
               "_params", "_mem", "_buf", "_meta", "_hint", "_support", "_step", "_burn_cfg")

    def state_dict(self) -> dict:
        """The learned state: NumPy arrays only (a copy)."""
        return {k: v.copy() for k, v in self._learned().items()}

    def _learned(self) -> dict:
        """The learned arrays themselves (not copies)."""
        config = self._CONFIG
        return {k: v for k, v in vars(self).items()
                if k.startswith("_") and not k.startswith("__") and k not in config
                and isinstance(v, np.ndarray)}

    def load_state_dict(self, state: Mapping) -> None:
        """Restore a state from :meth:`state_dict` of a detector with the same parameters."""
        self._load_arrays(state)
        self._pack()

    def _load_arrays(self, state: Mapping) -> None:
        """:meth:`load_state_dict` but for packing the arrays for the kernel (a fleet that
        only copies them out skips it)."""
        mine = self._learned()
        state = dict(state)
        if self._hull and "_hull_x" in state:
            # Written before hull points kept their ts: none known.
            state.setdefault("_hull_t", np.full(np.shape(state["_hull_x"]), np.nan))
            state.setdefault("_ring_t", np.full(mine["_ring_t"].shape, np.nan))
        if set(state) != set(mine):
            raise ValueError(f"state_dict keys {sorted(state)} do not match {sorted(mine)}")
        if self._long_run() and np.shape(state["_burn"]) != mine["_burn"].shape:
            state = self._from_marginal_burn_in(state, mine)
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
            arr = np.asarray(xs)
            text = arr.dtype.kind in "USV"  # NumPy reads "1.0" as a number; update does not
            if not text:
                arr = np.ascontiguousarray(arr.astype(np.float64, copy=False).reshape(-1))
        except (TypeError, ValueError):
            raise BadInput("values are not a numeric array") from None
        if text:
            raise NotANumber("ConfSeqDetector: update_many takes numbers, not text")
        if not np.all(np.isfinite(arr)):
            raise BadInput(f"value at position {int(np.flatnonzero(~np.isfinite(arr))[0])} "
                           "is not finite")
        big = np.flatnonzero(np.abs(arr) > MAX_ABS)
        if big.size:
            raise BadInput(f"value {arr[big[0]]:.3g} at position {int(big[0])} is beyond the "
                           f"magnitude limit max_abs={MAX_ABS:.3g}")
        if self.bounded:
            bad = np.flatnonzero((arr < self.lower) | (arr > self.upper))
            if bad.size:
                raise BadInput(f"value {arr[bad[0]]} at position {int(bad[0])} is outside "
                               f"[lower, upper] = [{self.lower}, {self.upper}]")
        return arr

    def _run(self, xs: np.ndarray, stop_at_alarm: bool = False,
             ts: np.ndarray = NO_TS) -> np.ndarray:
        """Feed checked values; return ``out`` with rows alarm, lower, upper, located lag, ts.

        ``ts`` (float64, NaN for none; or empty) are the values' ``ts``, kept with the hull
        points for the located start's ``ts`` (row 4 at an alarm). With ``stop_at_alarm`` it
        stops right after the first alarm: ``out`` then has one column per value consumed.
        """
        out = np.empty((OUT_ROWS, xs.shape[0]))
        if xs.shape[0] == 0:
            return out
        if self.cs in HULL_CS:
            done = 0
            while True:
                done = cs_hull_run(xs, done, self.cs == "empirical-bernstein", self.pfa,
                                   self._grid, self._hull_x, self._hull_y, self._hull_size,
                                   self._walk, self._scalars, self._burn, self._ring_y,
                                   self._ring_best, out, stop_at_alarm, self._hint, ts,
                                   self._hull_t, self._ring_t, self._support, self._burn_cfg)
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
        if type(x) is float and -MAX_ABS <= x <= MAX_ABS and not self._bounded \
                and self._step(x, self._mem):
            return
        self._update_slow(x)

    def _update_slow(self, x: Any) -> None:
        if type(x) is not float:  # what River's detectors take, and refuse ("1.0", None)
            x = real_number(x, "ConfSeqDetector")
        if type(x) is not float or not -MAX_ABS <= x <= MAX_ABS or (
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
    def change_at(self) -> int | None:
        """At an alarm, the position of the first changed value: 0-based, counted in the
        values this detector has taken (from its construction; a state restored from
        :meth:`state_dict` keeps counting), the meaning ``change_at`` has on every detector
        of shiftwatch (:attr:`ShapeDetector.change_at
        <shiftwatch.operators.shape.ShapeDetector.change_at>`,
        :attr:`KarcherDetector.change_at
        <shiftwatch.operators.riemannian.KarcherDetector.change_at>`) and in the operators'
        outputs. None without an alarm, where :attr:`change_lag` is None, and for a state
        written before detectors counted their values (shiftwatch 0.1.0).
        """
        lag = self.change_lag
        seen = float(self._scalars[S_SEEN])
        if lag is None or not math.isfinite(seen):
            return None
        return int(seen) - 1 - lag

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
        if self.cs in HULL_CS:
            return int(self._hull_size.sum()) if not self.prune else self._ring_y.size
        return int(self._cap_plus.size + self._cap_minus.size)
