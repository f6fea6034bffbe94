"""Riemannian online change detection: two stochastic Karcher-mean estimates, slow and fast.

:class:`KarcherDetector` holds the mathematics (a River drift detector: ``update(x)``,
``drift_detected``, plus ``statistic`` and ``score_many``); the registered operator
``karcher`` (:class:`KarcherOperator`) wraps it for records. The per-sample work runs in the
Numba kernels of this module and of :mod:`shiftwatch.operators.manifolds`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from shiftwatch._jit import njit
from shiftwatch.operators.drift_detector import RiverDriftDetector, refuse_text
from shiftwatch.operators.locate import ValueWindow, mean_change_split
from shiftwatch.operators.riemannian.base import Manifold
from shiftwatch.operators.riemannian.calibration import calibrate_threshold
from shiftwatch.operators.riemannian.grassmann import grassmann_dist, grassmann_step
from shiftwatch.operators.riemannian.linalg import (
    cholesky_inplace,
    lower_inverse_inplace,
    sym_expm,
    sym_logm,
)
from shiftwatch.operators.riemannian.manifolds import MANIFOLD_NAMES, manifold_from_spec
from shiftwatch.operators.riemannian.spd import (
    spd_affine_dist,
    spd_affine_dist_factored,
    spd_affine_step_inplace,
    spd_bw_dist,
    spd_bw_exp,
    spd_bw_log,
    spd_retract,
)
from shiftwatch.operators.riemannian.sphere import sphere_dist, sphere_step
from shiftwatch.records import MAX_WINDOW, BadInput

__all__ = ["KarcherDetector", "calibrate_threshold", "THRESHOLD_MODES"]

#: The non-numeric values of ``threshold``.
THRESHOLD_MODES = ("adaptive", "calibrated")

#: Why a valid point is rejected when its step would make the estimates infinite or NaN.
OVERFLOW_REASON = "value would make the Karcher-mean estimates overflow (not finite)"


# --------------------------------------------------------------------------------------
# Batch kernels: advance (P0, P1) over a (T, ...) stack of samples, write g_t to ``out``
# --------------------------------------------------------------------------------------


@njit(cache=True, fastmath={"contract"})
def karcher_scores_spd_affine(xs, p0, p1, s0, s1, retraction, out):
    """Affine-invariant SPD: one eigen-decomposition per estimate (geodesic or retraction
    step) and the eigenvalues of one more matrix for g, per sample.

    Allocation-free: each estimate's Cholesky factor (and its inverse) is computed once per
    sample, right after its step, and serves both the distance and the next step; the
    eigenproblems go to :func:`~shiftwatch.operators.manifolds.sym_eig_inplace` (n <= 24,
    LAPACK above). The factors
    are a function of ``p0``/``p1`` alone, so a run split over several calls gives the same
    bits as one call.
    """
    n = p0.shape[0]
    low0, inv0 = np.empty((n, n)), np.empty((n, n))
    low1, inv1 = np.empty((n, n)), np.empty((n, n))
    v, tmp = np.empty((n, n)), np.empty((n, n))
    d, e = np.empty(n), np.empty(n)
    cholesky_inplace(p0, low0)
    lower_inverse_inplace(low0, inv0)
    cholesky_inplace(p1, low1)
    lower_inverse_inplace(low1, inv1)
    for t in range(xs.shape[0]):
        x = xs[t]
        spd_affine_step_inplace(x, p0, low0, inv0, s0, retraction, v, d, e, tmp)
        spd_affine_step_inplace(x, p1, low1, inv1, s1, retraction, v, d, e, tmp)
        out[t] = spd_affine_dist_factored(inv0, low1, tmp, v, d, e)


@njit(cache=True)
def karcher_scores_spd_logeuclid(xs, l0, l1, s0, s1, retraction, out):
    """Log-Euclidean SPD on the logarithms: L <- L + s (log X - L) is the geodesic step."""
    for t in range(xs.shape[0]):
        lx = sym_logm(xs[t])
        l0 += s0 * (lx - l0)
        l1 += s1 * (lx - l1)
        out[t] = math.sqrt(np.sum((l0 - l1) ** 2))


@njit(cache=True)
def karcher_scores_spd_bw(xs, p0, p1, s0, s1, retraction, out):
    """Bures-Wasserstein SPD: Log, then Exp or the second-order retraction."""
    for t in range(xs.shape[0]):
        x = xs[t]
        v0 = s0 * spd_bw_log(x, p0)
        v1 = s1 * spd_bw_log(x, p1)
        if retraction:
            p0[:, :] = spd_retract(v0, p0)
            p1[:, :] = spd_retract(v1, p1)
        else:
            p0[:, :] = spd_bw_exp(v0, p0)
            p1[:, :] = spd_bw_exp(v1, p1)
        out[t] = spd_bw_dist(p0, p1)


@njit(cache=True)
def karcher_scores_grassmann(xs, y0, y1, s0, s1, retraction, out):
    """Grassmann bases: Log, then Exp or the polar retraction."""
    for t in range(xs.shape[0]):
        x = xs[t]
        y0[:, :] = grassmann_step(x, y0, s0, retraction)
        y1[:, :] = grassmann_step(x, y1, s1, retraction)
        out[t] = grassmann_dist(y0, y1)


@njit(cache=True)
def karcher_scores_sphere(xs, p0, p1, s0, s1, retraction, out):
    """Sphere: Log, then Exp or the normalising retraction."""
    for t in range(xs.shape[0]):
        x = xs[t]
        p0[:] = sphere_step(x, p0, s0, retraction)
        p1[:] = sphere_step(x, p1, s1, retraction)
        out[t] = sphere_dist(p0, p1)


_KERNELS = {
    "spd-affine": karcher_scores_spd_affine,
    "spd-logeuclid": karcher_scores_spd_logeuclid,
    "spd-bw": karcher_scores_spd_bw,
    "grassmann": karcher_scores_grassmann,
    "sphere": karcher_scores_sphere,
}


def point_distances(kind: str, p: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """Distances from the estimate ``p`` (internal form, see ``_to_internal``) to each of ``xs``."""
    out = np.empty(len(xs))
    for t in range(len(xs)):
        x = xs[t]
        if kind == "spd-affine":
            out[t] = spd_affine_dist(p, x)
        elif kind == "spd-logeuclid":
            out[t] = math.sqrt(float(np.sum((sym_logm(x) - p) ** 2)))
        elif kind == "spd-bw":
            out[t] = spd_bw_dist(p, x)
        elif kind == "grassmann":
            out[t] = grassmann_dist(p, x)
        else:
            out[t] = sphere_dist(p, x)
    return out


def _to_internal(kind: str, x: np.ndarray) -> np.ndarray:
    # The log-Euclidean estimates are kept as matrix logarithms.
    return sym_logm(x) if kind == "spd-logeuclid" else x.copy()


def _from_internal(kind: str, p: np.ndarray) -> np.ndarray:
    return sym_expm(p) if kind == "spd-logeuclid" else p.copy()


# --------------------------------------------------------------------------------------
# The detector
# --------------------------------------------------------------------------------------


class KarcherDetector(RiverDriftDetector):
    """Online change detection on a Riemannian manifold (Wang, Borsoi & Richard).

    Two stochastic-gradient estimates of the Karcher mean of the stream, ``P0`` with the
    slow step ``step_slow`` and ``P1`` with the fast step ``step_fast``, both start at the
    first sample. Each sample ``X`` moves them ``P <- R_P(2 step Log_P(X))`` (``R`` the
    exponential map or a retraction); the statistic is ``g = d(P0, P1)``. After a change the
    fast estimate leaves first and ``g`` rises. An alarm is raised when ``g >= h`` after
    ``burn_in`` samples.

    Parameters
    ----------
    manifold
        A :class:`~shiftwatch.operators.manifolds.Manifold` (``SPD(8)``, ``Grassmann(20, 5)``, ...)
        or a name whose dimensions are read from the first sample: ``"spd"`` (affine-invariant),
        ``"spd-log-euclidean"``, ``"spd-bures-wasserstein"``, ``"grassmann"`` (n x p
        orthonormal bases), ``"sphere"`` (unit vectors).
    step_slow, step_fast
        Step sizes ``lambda0 < lambda1`` in (0, 0.5].
    threshold
        ``"calibrated"`` (default): the ``calibration`` statistics after the burn-in are
        taken as change-free and :func:`calibrate_threshold` sets ``h`` for the average run
        length ``target_arl`` (no alarm during calibration, so the first
        ``burn_in + calibration`` samples, 575 at the defaults, cannot alarm). A number ``h``
        (fixed). ``"adaptive"``, the authors' rule (the default before issue 36):
        exponentially weighted moments ``m <- (1-a) m + a g``, ``v <- (1-a) v + a g^2``
        (``a = adapt_rate``) and ``h = m + adapt_k sqrt(v - m^2)``; it has no stated
        false-alarm rate: on change-free input its first alarm came after 380 monitored
        samples on average (SPD(8) Wishart), 150 (3 independent channels through
        ``window_covariance window=20``) and 170 (AR(1) channels, ``window=50``), where
        ``"calibrated"`` gave 1,700-2,300 (``benchmarks/results/defaults.md``).
    burn_in
        Samples (from the start or the last reset) before an alarm may be raised. ``None``
        (default): what the statistic needs, ``ceil(1 / (2 step_slow)) + ceil(1 / (2
        step_fast))`` (75 at the default steps, 15 at 0.05 / 0.1): the slow estimate's memory
        (with ``warm_start`` it is the running mean until then, after which the statistic is
        stationary), then the fast one's, the time scale on which the statistic varies, so
        that the threshold has seen it vary once. ``burn_in=400`` is the authors' (and the
        default before issue 23): longer than the short streams it should serve (a 300-record
        stream could not alarm). Measured on the paper's SPD(8) Wishart setting (change at
        1500, adaptive threshold, 200 runs): the change is found in 95% of the runs (8.5%
        with ``burn_in=400, warm_start=False``, whose one false alarm near 1190 restarts a
        burn-in over the change), at 2.85 false alarms before it instead of 0.98 (the
        adaptive threshold's own rate, no longer held back by the start-up transient).
    update
        ``"exp"`` (the exponential map: the exact geodesic step) or ``"retraction"``
        (SPD: ``sym(P + V + 0.5 V P^-1 V)``; Grassmann: polar; sphere: normalisation). For
        the log-Euclidean metric both are the exact step ``log P <- log P + 2 step
        (log X - log P)``, cheaper than any retraction.
    adapt_rate, adapt_k
        ``a`` and ``k`` of ``threshold="adaptive"`` (authors: 0.005 and 1.64); unused otherwise.
    target_arl, calibration
        Used only with ``threshold="calibrated"`` (ignored for ``"adaptive"`` or a number).
        ``target_arl``: the wanted mean number of samples to a false alarm on change-free
        input, counted from the end of the calibration (after a reset, from the end of the
        burn-in; the threshold is kept). ``calibration``: how many statistics after the
        burn-in the threshold is fitted on. At the defaults (1000, 500) the measured mean
        was 1,700-2,300 (95% lower bounds >= 1,400) on three change-free inputs; each stream
        fits its own threshold, so run lengths spread more than a geometric law's (medians
        about 700-1,000, ``benchmarks/results/defaults.md``).
    calibration_margin
        With ``threshold="calibrated"``: the fitted level is raised by this many standard
        errors of its own estimate, computed with the calibration's effective sample size
        (:func:`~shiftwatch.operators.riemannian.calibration.calibrate_threshold`), so that
        a stream whose 500 statistics happen to give a low threshold does not alarm for the
        rest of its life at several times the documented rate. Statistics of overlapping
        windows (``window_covariance``) are strongly dependent, so there the margin is
        large; on independent inputs it is small. The default, 1, was chosen by a rule
        declared before the numbers (``benchmarks/results/defaults.md``, section D): the
        smallest of 0, 0.5, 1, 1.645 whose long-run false-alarm rate with resets (18,000
        records a stream) stays within ``target_arl`` on every change-free input. 0 is
        the threshold before issue 48: in long runs it gave one false alarm per 730-1,010
        monitored records, and one stream in six more than twice the documented rate.
    reset_on_alarm
        After an alarm, start afresh at the next sample (both estimates, burn-in); the
        adaptive moments and a calibrated threshold are kept.
    warm_start
        ``True`` (default): the ``t``-th sample of a run moves each estimate ``max(2 step,
        1 / t)`` of the way, i.e. both are the running Karcher mean until ``1 / t`` falls to
        their step (then the recursion is the paper's), and the adaptive moments are divided
        by their total weight ``1 - (1 - a)^n`` (exponentially weighted moments of the
        statistics seen, with no zero past). ``False``: both estimates start at the first
        sample with their constant steps and the moments at 0, as the authors' code: the
        first sample keeps a weight ``(1 - 2 step)^t``, the statistic rises to about 4.7
        times its stationary level near t = 30 (SPD(8) Wishart, mean of 100 runs) and the
        threshold, from 0, carries that for about 1/a samples. After 400 samples the two
        agree (the paper's levels and MDD-vs-ARL are unchanged, issue 23).
    locate_window
        0 (default): the detector does not locate its changes. ``n >= 2``: it keeps the
        last ``n`` samples (since the previous located change) and an alarm sets
        :attr:`change_at`, the split of those samples where they go from sitting about
        equally near ``P0`` and ``P1`` to nearer ``P1`` (Hinkley's mean split of
        ``d(P0, X) - d(P1, X)``, the ``karcher`` operator's rule, which gives the same
        positions). :meth:`update_many` then runs sample by sample.

    Attributes
    ----------
    statistic
        The last ``g_t``.
    change_at
        At an alarm with ``locate_window``, the position (0-based, among the samples this
        detector has taken) of the first changed sample; else None. The same meaning as
        ``ShapeDetector.change_at`` and ``ConfSeqDetector.change_at``.
    threshold_value
        The threshold ``g`` was last compared with (None before it exists).

    References
    ----------
    X. Wang, R. A. Borsoi and C. Richard. Non-parametric online change point detection on
    Riemannian manifolds. ICML 2024.

    Examples
    --------
    >>> from shiftwatch.streams.synthetic import WishartSPDStream
    >>> xs = np.array([r["value"] for r in WishartSPDStream(n=2000, change_point=1500, seed=1)])
    >>> det = KarcherDetector("spd", threshold=0.35, update="retraction")
    >>> alarms = []
    >>> for t, x in enumerate(xs):
    ...     det.update(x)
    ...     if det.drift_detected:
    ...         alarms.append(t)
    >>> alarms
    [1518]
    >>> g = KarcherDetector("spd", update="retraction").score_many(xs)
    >>> round(float(g[400:1500].mean()), 3), round(float(g[1500:1600].max()), 3)
    (0.194, 0.372)
    """

    def __init__(self, manifold: str | Manifold = "spd", step_slow: float = 0.01,
                 step_fast: float = 0.02, threshold: float | str = "calibrated",
                 burn_in: int | None = None, update: str = "exp", adapt_rate: float = 0.005,
                 adapt_k: float = 1.64, target_arl: float = 1000.0, calibration: int = 500,
                 reset_on_alarm: bool = True, warm_start: bool = True,
                 locate_window: int = 0, calibration_margin: float = 1.0):
        self.manifold = manifold
        self.step_slow = step_slow
        self.step_fast = step_fast
        self.threshold = threshold
        self.burn_in = burn_in
        self.update_rule = update
        self.adapt_rate = adapt_rate
        self.adapt_k = adapt_k
        self.target_arl = target_arl
        self.calibration = calibration
        self.reset_on_alarm = reset_on_alarm
        self.warm_start = warm_start
        self.locate_window = locate_window
        self.calibration_margin = calibration_margin
        self._validate_params()
        super().__init__()
        self._reset()

    # River's clone/repr read the constructor arguments back by name; ``update`` is a method.
    def _get_params(self) -> dict:
        return {"manifold": self.manifold, "step_slow": self.step_slow,
                "step_fast": self.step_fast, "threshold": self.threshold,
                "burn_in": self.burn_in, "update": self.update_rule,
                "adapt_rate": self.adapt_rate, "adapt_k": self.adapt_k,
                "target_arl": self.target_arl, "calibration": self.calibration,
                "reset_on_alarm": self.reset_on_alarm, "warm_start": self.warm_start,
                "locate_window": self.locate_window,
                "calibration_margin": self.calibration_margin}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._get_params().items())
        return f"{type(self).__name__}({args})"

    def _validate_params(self) -> None:
        m = self.manifold
        if not isinstance(m, Manifold) and m not in MANIFOLD_NAMES:
            raise ValueError(f"manifold must be a Manifold or one of "
                             f"{', '.join(map(repr, MANIFOLD_NAMES))}, got {m!r}")
        for name in ("step_slow", "step_fast"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 0.5:
                raise ValueError(f"{name} must be a number in (0, 0.5], got {v!r}")
        if not self.step_slow < self.step_fast:
            raise ValueError(f"step_slow must be < step_fast, got {self.step_slow!r} >= "
                             f"{self.step_fast!r}")
        h = self.threshold
        if isinstance(h, str):
            if h not in THRESHOLD_MODES:
                raise ValueError(f"threshold must be a positive number or one of "
                                 f"{', '.join(map(repr, THRESHOLD_MODES))}, got {h!r}")
        elif isinstance(h, bool) or not isinstance(h, (int, float)) or not (
                math.isfinite(h) and h > 0):
            raise ValueError(f"threshold must be a positive number or one of "
                             f"{', '.join(map(repr, THRESHOLD_MODES))}, got {h!r}")
        lw = self.locate_window
        if isinstance(lw, bool) or not isinstance(lw, int) or lw == 1 or not 0 <= lw <= MAX_WINDOW:
            raise ValueError(f"locate_window must be 0 (no locating) or an integer in "
                             f"2..{MAX_WINDOW:,}, got {lw!r}")
        if self.burn_in is not None and (isinstance(self.burn_in, bool)
                                         or not isinstance(self.burn_in, int)
                                         or self.burn_in < 1):
            raise ValueError(f"burn_in must be None (derived) or an integer >= 1, "
                             f"got {self.burn_in!r}")
        if self.update_rule not in ("exp", "retraction"):
            raise ValueError(f"update must be 'exp' or 'retraction', got {self.update_rule!r}")
        if not (isinstance(self.adapt_rate, (int, float)) and 0 < self.adapt_rate < 1):
            raise ValueError(f"adapt_rate must be a number in (0, 1), got {self.adapt_rate!r}")
        if not (isinstance(self.adapt_k, (int, float)) and self.adapt_k > 0):
            raise ValueError(f"adapt_k must be a positive number, got {self.adapt_k!r}")
        if isinstance(self.target_arl, bool) or not isinstance(self.target_arl, (int, float)) \
                or not self.target_arl > 1:
            raise ValueError(f"target_arl must be a number > 1, got {self.target_arl!r}")
        if isinstance(self.calibration, bool) or not isinstance(self.calibration, int) \
                or self.calibration < 20:
            raise ValueError(f"calibration must be an integer >= 20, got {self.calibration!r}")
        cm = self.calibration_margin
        if isinstance(cm, bool) or not isinstance(cm, (int, float)) or not 0 <= cm < math.inf:
            raise ValueError(f"calibration_margin must be a number >= 0, got {cm!r}")
        if not isinstance(self.reset_on_alarm, bool):
            raise ValueError(f"reset_on_alarm must be true or false, got "
                             f"{self.reset_on_alarm!r}")
        if not isinstance(self.warm_start, bool):
            raise ValueError(f"warm_start must be true or false, got {self.warm_start!r}")

    @property
    def burn_in_length(self) -> int:
        """The burn-in in samples: ``burn_in``, or with ``burn_in=None`` what the statistic
        and the threshold need (see the class docstring, ``burn_in``)."""
        if self.burn_in is not None:
            return int(self.burn_in)
        return (math.ceil(1.0 / (2.0 * self.step_slow) - 1e-9)
                + math.ceil(1.0 / (2.0 * self.step_fast) - 1e-9))

    def _reset(self) -> None:
        super()._reset()
        self._shape: list[int] | None = None
        self._p0: np.ndarray | None = None
        self._p1: np.ndarray | None = None
        self._n = 0  # samples since the start or the last reset
        self._seen = 0  # samples the current estimates have taken (the warm start's count)
        self._g = 0.0
        self._mean = 0.0  # adaptive threshold moments
        self._second = 0.0
        self._weight = 0.0  # their total weight, 1 - (1 - a)^n (warm start: divided by it)
        self._h: float | None = float(self.threshold) if not isinstance(self.threshold, str) \
            else None
        self._calib = np.zeros(0)
        self._restart = False
        self._count = 0  # samples taken since the construction (positions of change_at)
        self._window: ValueWindow | None = None
        self._change_at: int | None = None

    # ---- geometry -------------------------------------------------------------------

    def _geometry(self, shape: tuple[int, ...]) -> Manifold:
        if isinstance(self.manifold, Manifold):
            return self.manifold
        return manifold_from_spec(self.manifold, shape)

    @property
    def geometry(self) -> Manifold | None:
        """The manifold in use (None until the first sample when given by name)."""
        if isinstance(self.manifold, Manifold):
            return self.manifold
        return None if self._shape is None else self._geometry(tuple(self._shape))

    def validate(self, x: Any) -> np.ndarray:
        """``x`` as a float64 point of the manifold, or BadInput saying what is wrong."""
        geo = self.geometry
        if geo is None:
            try:
                shape = np.shape(np.asarray(x, dtype=np.float64))
            except (TypeError, ValueError, OverflowError):
                raise BadInput("value is not a numeric array") from None
            geo = self._geometry(tuple(shape))
        return geo.validate(x)

    @property
    def estimates(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The slow and fast Karcher-mean estimates (P0, P1) as points, None before data."""
        if self._p0 is None:
            return None
        kind = self.geometry.kind
        return _from_internal(kind, self._p0), _from_internal(kind, self._p1)

    # ---- updates --------------------------------------------------------------------

    @property
    def statistic(self) -> float:
        """The last statistic g_t = d(P0, P1)."""
        return self._g

    @property
    def threshold_value(self) -> float | None:
        return self._h

    def _run_kernel(self, xs: np.ndarray) -> np.ndarray:
        # Run the kernel over xs (already validated, same shape) on copies of the estimates,
        # starting a fresh pair at xs[0] when there are none, and keep the copies; returns g
        # for each sample.
        kind = self.geometry.kind
        out = np.zeros(len(xs))
        start = 0
        if self._p0 is None:
            p0 = _to_internal(kind, xs[0])
            p1 = p0.copy()
            seen = 1
            start = 1
        else:
            p0, p1, seen = self._p0.copy(), self._p1.copy(), self._seen
        kernel = _KERNELS[kind]
        retraction = self.update_rule == "retraction"
        s0, s1 = 2.0 * self.step_slow, 2.0 * self.step_fast
        if self.warm_start:
            # The t-th sample moves each estimate by max(2 step, 1 / t) of the way: the
            # running Karcher mean until 1 / t falls to the constant step (then the
            # recursion is the paper's), instead of a start that keeps the first sample's
            # weight (1 - 2 step)^t.
            while start < len(xs) and 1.0 / (seen + 1) > s0:
                w = 1.0 / (seen + 1)
                kernel(np.ascontiguousarray(xs[start:start + 1]), p0, p1, max(s0, w),
                       max(s1, w), retraction, out[start:start + 1])
                seen += 1
                start += 1
        if start < len(xs):
            kernel(np.ascontiguousarray(xs[start:]), p0, p1, s0, s1, retraction, out[start:])
            seen += len(xs) - start
        self._p0, self._p1, self._seen = p0, p1, seen
        return out

    def _advance(self, xs: np.ndarray) -> tuple[np.ndarray, int | None]:
        """``(g, None)`` for the samples ``xs``, or ``(g[:k], k)`` when sample ``k`` would make
        the estimates (and so ``g``) infinite or NaN: the estimates are then those after
        sample ``k - 1`` and the samples from ``k`` on are not taken.

        Validated samples keep the estimates finite except in corner cases of the arithmetic
        (the second-order retraction on samples very far from the estimate grows it without
        bound; whitening an ill-conditioned sample by an ill-conditioned estimate rounds its
        eigenvalues to zero), so this check costs one pass over ``g`` per call."""
        before = (self._p0, self._p1, self._seen)
        g = self._finite_run(xs)
        if g is not None:
            return g, None
        # Find the first sample that breaks the estimates, one at a time (rare).
        self._p0, self._p1, self._seen = before
        out = np.zeros(len(xs))
        for k in range(len(xs)):
            kept = (self._p0, self._p1, self._seen)
            gk = self._finite_run(xs[k:k + 1])
            if gk is None:
                self._p0, self._p1, self._seen = kept
                return out[:k], k
            out[k] = gk[0]
        return out, None

    def _finite_run(self, xs: np.ndarray) -> np.ndarray | None:
        # _run_kernel's g, or None when the estimates became infinite or NaN (the kernels'
        # factorisations then raise: Cholesky ValueError, eigh LinAlgError on NaN).
        try:
            g = self._run_kernel(xs)
        except (ValueError, ZeroDivisionError, np.linalg.LinAlgError):
            return None
        if np.isfinite(g).all() and np.isfinite(self._p0).all() and np.isfinite(self._p1).all():
            return g
        return None

    def _judge(self, g: float) -> bool:
        # Threshold bookkeeping for one statistic; returns the alarm.
        self._n += 1
        self._g = g
        if self.threshold == "adaptive":
            a = self.adapt_rate
            self._mean = (1 - a) * self._mean + a * g
            self._second = (1 - a) * self._second + a * g * g
            self._weight = (1 - a) * self._weight + a
            w = self._weight if self.warm_start else 1.0
            mean, second = self._mean / w, self._second / w
            self._h = mean + self.adapt_k * math.sqrt(max(second - mean ** 2, 0.0))
        if self._n <= self.burn_in_length:
            return False
        if self.threshold == "calibrated" and self._h is None:
            self._calib = np.append(self._calib, g)
            if len(self._calib) >= self.calibration:
                self._h = calibrate_threshold(self._calib, self.target_arl,
                                              self.calibration_margin)
                self._calib = np.zeros(0)
            return False
        return g >= self._h

    def _judge_many(self, g: np.ndarray, reset: bool, out: tuple) -> int:
        """:meth:`_judge` over the statistics ``g`` in arrays, for a fixed or calibrated
        threshold: the burn-in, the calibration and the values below the threshold (with
        ``reset``, up to the first alarm; without, every one) at once, each value's
        statistic, alarm and threshold written into ``out`` (arrays from ``g[0]`` on), the
        state left as the loop of ``_judge`` leaves it. Returns how many it judged (an alarm
        that resets is the loop's)."""
        g_out, a_out, h_out = out
        B = self.burn_in_length
        m = g.shape[0]
        t = 0
        while t < m:
            if self._n < B:  # the burn-in: no alarm, the threshold unchanged
                k = min(m - t, B - self._n)
            elif self.threshold == "calibrated" and self._h is None:
                k = min(m - t, self.calibration - len(self._calib) - 1)
                if k <= 0:  # the value that completes the calibration
                    a = self._judge(float(g[t]))
                    g_out[t], a_out[t] = g[t], a
                    if self._h is not None:
                        h_out[t] = self._h
                    self._drift_detected = a
                    t += 1
                    continue
                self._calib = np.concatenate([self._calib, g[t:t + k]])
            else:
                hit = g[t:] >= self._h
                if reset:
                    above = np.flatnonzero(hit)
                    k = m - t if not above.shape[0] else int(above[0])
                    if k == 0:
                        break  # an alarm: the loop's
                else:
                    k = m - t
                    a_out[t:t + k] = hit
            g_out[t:t + k] = g[t:t + k]
            if self._h is not None:
                h_out[t:t + k] = self._h
            self._n += k
            self._g = float(g[t + k - 1])
            self._drift_detected = bool(a_out[t + k - 1])
            t += k
        return t

    def _start_over_if_needed(self) -> None:
        if self._restart:
            self._restart = False
            self._p0 = self._p1 = None
            self._n = 0

    def update(self, x: Any) -> None:
        """Take one sample; raises BadInput (state untouched) for a value off the manifold
        or one that would make the estimates overflow; text is a ``TypeError`` too, as for
        River's detectors."""
        refuse_text(x, "KarcherDetector")
        point = self.validate(x)
        before = (self._restart, self._p0, self._p1, self._n, self._shape, self._seen)
        self._start_over_if_needed()
        if self._shape is None:
            self._shape = list(point.shape)
        g, bad = self._advance(point[None])
        if bad is not None:
            self._restart, self._p0, self._p1, self._n, self._shape, self._seen = before
            raise BadInput(OVERFLOW_REASON)
        self._drift_detected = self._judge(float(g[0]))
        self._count += 1
        self._change_at = None
        if self.locate_window:
            if self._window is None:
                self._window = ValueWindow(self.locate_window, int(point.size))
                self._window._count = self._count - 1
            self._window.push(point.reshape(-1))
            if self._drift_detected:
                self._change_at = self._locate()
        if self._drift_detected and self.reset_on_alarm:
            self._restart = True

    @property
    def change_at(self) -> int | None:
        """Where the change just detected began (see ``locate_window``), else None."""
        return self._change_at

    def _locate(self) -> int:
        w = self._window
        pts = w.values().reshape((len(w), *self._shape))
        kind = self.geometry.kind
        # Pre-change points sit about equally near both estimates, post-change ones nearer
        # the fast one.
        score = point_distances(kind, self._p0, pts) - point_distances(kind, self._p1, pts)
        at = w.start + mean_change_split(score)[0]
        w.drop_before(at)
        return int(at)

    #: Samples per kernel call of :meth:`update_many`: an alarm that resets the estimates
    #: discards what the kernel computed after it, at most this many samples.
    KERNEL_RUN = 512

    def update_many(self, xs: np.ndarray, stop_at_alarm: bool = False,
                    stop_at_overflow: bool = False,
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``update`` over validated points ``xs`` (T, ...): returns (g, alarms, thresholds).

        With ``stop_at_alarm`` it returns right after the first alarm (the arrays then end
        there), with the estimates as they were at the alarm.

        A point that would make the estimates overflow is not taken: the points before it
        are, then BadInput is raised, as ``update`` in a loop would; with
        ``stop_at_overflow`` it returns instead, the arrays ending before that point (so
        shorter than ``xs`` without ending in an alarm).

        ``thresholds`` holds the threshold each ``g`` was compared with (NaN where there was
        none yet).

        Same results as ``update`` in a loop; the kernel runs over whole stretches between
        resets.
        """
        xs = np.ascontiguousarray(xs, dtype=np.float64)
        g_all = np.zeros(len(xs))
        alarms = np.zeros(len(xs), dtype=bool)
        hs = np.full(len(xs), np.nan)
        if self.locate_window:  # locating needs the estimates at each alarm: one by one
            for t in range(len(xs)):
                try:
                    self.update(xs[t])
                except BadInput:
                    if stop_at_overflow:
                        return g_all[:t], alarms[:t], hs[:t]
                    raise
                g_all[t], alarms[t] = self._g, self._drift_detected
                if self._h is not None:
                    hs[t] = self._h
                if stop_at_alarm and alarms[t]:
                    return g_all[:t + 1], alarms[:t + 1], hs[:t + 1]
            return g_all, alarms, hs
        i = 0
        while i < len(xs):
            self._start_over_if_needed()
            if self._shape is None:
                self._shape = list(xs[i].shape)
            saved = (None if self._p0 is None or not stop_at_alarm
                     else (self._p0, self._p1, self._seen))
            end = min(len(xs), i + self.KERNEL_RUN)
            g, bad = self._advance(xs[i:end])
            # The kernel ran to `end` (or to a point that would overflow); if an alarm
            # resets the estimates at j, the samples after j are redone from the fresh start,
            # so the result equals the loop.
            stop = end if bad is None else i + bad
            done = 0
            if self.threshold != "adaptive":  # (the loop below, in arrays, up to an alarm)
                done = self._judge_many(g, reset=self.reset_on_alarm or stop_at_alarm,
                                        out=(g_all[i:], alarms[i:], hs[i:]))
            for j in range(done, len(g)):
                g_all[i + j] = g[j]
                alarm = self._judge(float(g[j]))
                alarms[i + j] = alarm
                if self._h is not None:
                    hs[i + j] = self._h
                self._drift_detected = alarm
                if alarm and self.reset_on_alarm and not stop_at_alarm:
                    self._restart = True
                    stop = i + j + 1
                    break
                if alarm and stop_at_alarm:
                    self._restart = self.reset_on_alarm
                    # The kernel ran past the alarm: redo the run up to it from the estimates
                    # before, so that they are the ones at the alarm (locating reads them).
                    stop = i + j + 1
                    if saved is None:
                        self._p0 = self._p1 = None
                    else:
                        self._p0, self._p1, self._seen = saved
                    self._run_kernel(xs[i:stop])  # (finite: it was, up to the alarm)
                    break
            else:
                if bad is not None:  # no alarm before the point that would overflow
                    self._count += stop - i
                    if stop_at_overflow:
                        return g_all[:stop], alarms[:stop], hs[:stop]
                    raise BadInput(f"{OVERFLOW_REASON} (point {stop} of {len(xs)})")
            self._count += stop - i
            i = stop
            if stop_at_alarm and alarms[i - 1]:
                return g_all[:i], alarms[:i], hs[:i]
        return g_all, alarms, hs

    def score_many(self, xs: Any) -> np.ndarray:
        """The statistic g_t for every sample of ``xs`` (T, ...), with no alarms or resets.

        Starts from the current estimates (or at ``xs[0]``) and leaves the detector
        unchanged: meant for threshold sweeps over a whole stream.
        """
        xs = np.ascontiguousarray(xs, dtype=np.float64)
        if len(xs) == 0:
            return np.zeros(0)
        if not np.all(np.isfinite(xs)):
            raise BadInput("xs contains NaN or infinite entries")
        geo = self._geometry(tuple(xs.shape[1:])) if self._shape is None else self.geometry
        if tuple(xs.shape[1:]) != geo.point_shape():
            raise BadInput(f"xs has points of shape {xs.shape[1:]}, expected "
                           f"{geo.point_shape()}")
        twin = self.clone()
        twin._shape = list(geo.point_shape())
        twin._p0 = None if self._p0 is None else self._p0.copy()
        twin._p1 = None if self._p1 is None else self._p1.copy()
        twin._seen = self._seen
        g, bad = twin._advance(xs)
        if bad is not None:
            raise BadInput(f"{OVERFLOW_REASON} (xs[{bad}])")
        return g

    # ---- state ----------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The learned state as plain values and NumPy arrays."""
        return {"shape": None if self._shape is None else list(self._shape),
                "p0": None if self._p0 is None else self._p0.copy(),
                "p1": None if self._p1 is None else self._p1.copy(),
                "n": self._n, "seen": self._seen, "g": self._g, "mean": self._mean,
                "second": self._second, "weight": self._weight,
                "h": self._h, "calib": self._calib.copy(), "restart": self._restart,
                "drift": self._drift_detected, "count": self._count,
                "change_at": self._change_at,
                "window": None if self._window is None else self._window.state_dict()}

    def load_state_dict(self, state: Mapping) -> None:
        self._reset()
        self._shape = None if state["shape"] is None else [int(s) for s in state["shape"]]
        self._p0 = None if state["p0"] is None else np.array(state["p0"], dtype=np.float64)
        self._p1 = None if state["p1"] is None else np.array(state["p1"], dtype=np.float64)
        self._n = int(state["n"])
        # (a state written before the warm start: its estimates have taken n samples)
        self._seen = int(state.get("seen", state["n"]))
        self._g = float(state["g"])
        self._mean = float(state["mean"])
        self._second = float(state["second"])
        self._weight = float(state.get("weight", 1.0))  # (earlier releases: no correction)
        self._h = None if state["h"] is None else float(state["h"])
        self._calib = np.array(state["calib"], dtype=np.float64)
        self._restart = bool(state["restart"])
        self._drift_detected = bool(state["drift"])
        # (states written before the detector counted and located: from 0, nothing kept)
        self._count = int(state.get("count", 0))
        at = state.get("change_at")
        self._change_at = None if at is None else int(at)
        window = state.get("window")
        if window is not None and self.locate_window:
            self._window = ValueWindow.from_state_dict(window)
