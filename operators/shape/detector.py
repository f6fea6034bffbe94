"""Shape-change detection: delay embedding -> per-block log-covariance -> self-normalised
two-sample scan (a log-Euclidean Frechet two-sample statistic) -> sample-level location.

:class:`ShapeDetector` holds the mathematics (a River-style detector: ``update(x)``,
``drift_detected``, ``change_at``, plus ``update_many``); the operator ``shape``
(:class:`ShapeOperator`) wraps it for records. Per-sample work runs in
:mod:`~shiftwatch.operators.shape.kernels` (Numba).

Method, per key
---------------

1. **Burn-in** (a prefix only). The location and scale of each channel are learned on it and
   frozen (they matter only for the ``gauss`` feature; the default feature is invariant to
   both). The period ``P`` is chosen by
   :func:`~shiftwatch.operators.period.time_scale_rule` (issue 36 item 2), tried at 64,
   128, 256 and ``burn_in`` (384) records: the periodogram's dominant period confirmed by an
   ACF peak (ACF >= 0.3, 4 <= P < n/4), else the first ACF peak after the first zero
   crossing if it is as clear; the stream's period is fixed at the first checkpoint where any
   channel has one (the median over those channels). A peak at the edge of the range
   (P = n/4) is not a period. With no clear period by ``burn_in``, a scalar stream takes its
   weak first ACF peak unless its spectrum is red (the periodogram's largest power at the
   range's longest period); otherwise, and for a multichannel stream with no clear channel,
   there is no period and the scale is short: ``P = 16`` records (blocks of 32), not the
   longest allowed one (96: blocks of 192, so 6 blocks outlasted short series). Chosen on
   tssb-dev and mocap6 among pre-declared variants (``benchmarks/results/shape.md``,
   "Time-scale rule"); ``time_scale["rule"]`` says which branch fixed the period.
2. **Delay embedding** of each channel: ``(y_t, y_{t-tau}, ..., y_{t-(d-1) tau})`` covering
   ``span`` periods with at most ``dmax`` coordinates in all (``dmax // c`` per channel of
   ``c``; none when that is below 2)
   (:func:`~shiftwatch.operators.period.embed_params`).
   ``channels="joint"`` embeds all channels in one vector (``c * d`` coordinates; with
   ``span=0`` no embedding: the c x c channel covariance), ``"separate"`` keeps one group per
   channel (block-diagonal: a ``d x d`` covariance per channel).
3. **Blocks** of ``B = block * P`` records: each block's covariance of the embedded vectors
   (shrunk towards the scaled identity), its matrix logarithm, ``vech`` -> one feature vector
   (log-Euclidean coordinates of the SPD point). The covariance of a delay embedding is the
   local autocovariance matrix: it moves when shape, period or noise colour change, not the
   level.
4. **Scan** (at each block end) over the blocks since the last change (at most
   ``max_blocks``): ``Z = max_k k (N-k) / N * ||mean_left - mean_right||^2 / V`` with ``V``
   the pooled block-to-block scatter, each side >= ``min_blocks`` blocks. It is the squared
   log-Euclidean distance between the two sides' Frechet means in units of its own standard
   error: about 1 without a change, whatever the series' scale, units or instance-to-instance
   variability (Dubey & Mueller's Frechet change-point idea with a log-Euclidean metric).
5. **Alarm** when ``Z`` exceeds the threshold of the scan's window: a fixed number
   (``threshold=6.0``, the default), or ``c(N)`` for ``N`` blocks since the start or the last
   change (``threshold="null"``). ``Z``'s null distribution depends on ``N``
   (``V`` rests on ``N`` blocks; the max runs over ``N - 2 min_blocks + 1`` splits), on the
   feature dimension and above all on how dependent successive blocks are, so with a fixed
   threshold young windows alarm more often than old ones. ``c(N)`` comes from a table
   computed on synthetic nulls (:mod:`~shiftwatch.operators.shape.null`, derived by
   ``benchmarks/shape_null.py`` with a fixed seed: white noise, AR(1) 0.5 and 0.9, resonant
   AR(2) coherent for 1 or 3 periods, sines under noise, a square wave under AR(1) noise;
   periods 4-32, i.e. feature dimensions 10-136, interpolated in ``log q``; ``min_blocks``
   2-5): the probability of a first alarm at a scan, given none before and averaged over
   those families, is ``h = false_alarms_per_100_periods * block / 100`` at every ``N`` (one
   scan per block), so a stationary stream alarms about ``false_alarms_per_100_periods``
   times per 100 periods however long it runs and however young its segment. The rate is
   the families' mean: one stream sees from none (white noise, sines, AR(1)) to several
   times the rate (a resonance that stays coherent longer than a block), see
   ``benchmarks/results/shape.md``, "Threshold from the null". Its default rate, 0.2 per 100
   periods, is a round average run length (one false alarm per 500 periods). ``"null"`` is
   not the default: on the development data it lost to the fixed 6 at every rate tried
   (tssb-dev covering 0.657-0.702 against 0.732, F1@1% 0.658-0.714 against 0.725; mocap6
   covering 0.363 against 0.556), so the default stays the one chosen there. The decision
   waits ``confirm`` more blocks and takes the split of the latest scan above its
   threshold. ``change_at`` is that block boundary refined
   to the record by the Gaussian likelihood-ratio split of the embedded vectors (own mean
   and covariance per side) over the two blocks around it, within +-B/2 of the boundary.
   The next segment starts at the first block whose embedded vectors all follow the located
   change; the blocks after it are kept (no dead time after an alarm), the blocks before it
   dropped (one change gives one alarm: a kept straddling block would give a second one).

Alarms raised while replaying the burn-in (possible only for short periods) are reported on
the record that completes the burn-in (``change_at`` the latest, ``changes_at`` all).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np

from shiftwatch.operators.drift_detector import RiverDriftDetector, refuse_text
from shiftwatch.operators.period import embed_params, time_scale_rule
from shiftwatch.operators.shape import kernels as K
from shiftwatch.records import BadInput

__all__ = ["ShapeDetector"]

#: The refinement searches the record-level split within +-REFINE_REACH blocks of the block
#: boundary the scan chose (a stretch of 2 blocks, each side >= 1/2 block): the scan's
#: boundary is the nearest one to the change when it is right; a wider reach let the
#: likelihood-ratio split wander on tssb-dev (F1@1% 0.74 -> 0.61-0.71).
REFINE_HALF_WIDTH, REFINE_MIN_SIDE = 1.0, 0.5

#: With ``asymmetry`` (where a second scan runs) both scans compare ``Z`` with the threshold
#: times this: 6 -> 6.5, the union's threshold for the covariance scan's false alarms at 6 on
#: the synthetic null (``benchmarks/shape_asymmetry.py threshold``).
ASYMMETRY_FACTOR = 13.0 / 12.0

_CHANNELS = ("joint", "separate")
_FEATURES = ("cov", "gauss")
_DEPENDENCE = ("none", "lag1")


def _num(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float, np.integer, np.floating))


def _int(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, np.integer))


class ShapeDetector(RiverDriftDetector):
    """Online detection of changes of shape, period or correlation (see the module docstring).

    Parameters
    ----------
    threshold
        ``"null"``: alarm when the self-normalised scan statistic ``Z`` exceeds ``c(N)``, the
        threshold for ``N`` blocks since the last change that gives
        ``false_alarms_per_100_periods`` under the synthetic null (module docstring, step 5);
        or a number (default 6.0): a fixed threshold for every ``N`` (``Z`` is about 1 per
        split without change).
    false_alarms_per_100_periods
        The false-alarm rate the ``"null"`` threshold is set for: alarms per 100 periods of a
        stationary stream, the mean over the table's synthetic families (module docstring,
        step 5). Unused with a numeric ``threshold``.
    block
        Block length in periods (each block gives one log-covariance feature).
    min_blocks
        Blocks each side of a split, at least.
    confirm
        Blocks to wait after the first crossing before deciding (better location).
    max_blocks
        Blocks since the last change kept for the scan (bounds memory and time).
    burn_in, burn_in_min, min_acf
        The progressive burn-in of
        :func:`~shiftwatch.operators.period.time_scale_rule` (records; ``min_acf``: the
        ACF a period needs to be clear).
    period
        ``"auto"`` (the burn-in rule) or a period in records (the burn-in then only learns
        location and scale, over ``burn_in_min`` records).
    span, dmax
        The embedding covers ``span`` periods with at most ``dmax`` coordinates (per channel
        with ``channels="separate"``; in all with ``"joint"``, so ``dmax // c`` lags per
        channel); ``span=0``, or fewer than 2 lags per channel, means no embedding (the
        channels' covariance: 12 channels with ``dmax=16`` give a 12 x 12 covariance).
    channels
        ``"joint"`` or ``"separate"`` (multichannel input; no effect on a scalar stream).
    feature
        ``"cov"`` (covariance: location-free, shape only) or ``"gauss"`` (mean and covariance).
    shrinkage
        Weight of the scaled identity in each block covariance.
    refine
        Refine the block boundary to the record (Gaussian likelihood-ratio split).
    p_min
        Smallest period considered.
    min_spread
        Floor of the block-to-block spread in the scan's normalisation (log units per
        coordinate; 0.01 = about 1% of a covariance entry): a noiseless periodic stream would
        otherwise have no spread and alarm on rounding errors.
    dependence
        ``"none"`` (default): the scan's scale assumes independent blocks. ``"lag1"``: ``Z``
        at the best split is divided by ``(1 + rho) / (1 - rho)``, ``rho`` the lag-1
        autocorrelation of the block features within each side (clipped to [0, 0.9]), for
        streams whose neighbouring blocks are alike. Not the default: on the development
        data it gained on tssb-dev by removing one false alarm and lost two detections on
        mocap6 (``benchmarks/results/shape.md``, "Block dependence in the scan's scale").
    asymmetry
        Also scan the blocks' time asymmetry: per channel and embedding lag, the skewness of
        the lag increments (the covariance of a delay embedding is the same for a waveform and
        its time reversal, so the covariance scan cannot see such a change); an alarm when
        either scan crosses ``threshold x ASYMMETRY_FACTOR`` (13/12: 6 -> 6.5, the same
        false-alarm rate on the synthetic null as the covariance scan alone at 6), at the
        larger ``Z``'s split, refined to the record by the split of the increments' skewness
        (:func:`~shiftwatch.operators.shape.kernels.refine_skew`). No embedding, no second
        scan and ``threshold`` as given. Not the default: on tssb-dev it raised covering
        0.732 -> 0.750 but not F1@1% (0.725 -> 0.724; a change-free daily cycle alarms, and
        a split a block off is out of the refinement's reach); ``benchmarks/results/
        shape.md``, "Time asymmetry beside the covariance".

    Examples
    --------
    A sine whose period changes from 10 to 17 records at position 1500, level and variance
    unchanged (a mean-shift detector sees nothing):

    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> t = np.arange(3000)
    >>> y = np.where(t < 1500, np.sin(2 * np.pi * t / 10), np.sin(2 * np.pi * t / 17))
    >>> det = ShapeDetector()
    >>> alarm, change_at, statistic, _ = det.update_many(y + 0.3 * rng.normal(size=3000))
    >>> [(int(i), int(change_at[i])) for i in np.flatnonzero(alarm)]  # (alarm, located)
    [(1568, 1509)]
    >>> det.time_scale  # the periodogram's dominant period, confirmed by the ACF at 64 records
    {'period': 10, 'd': 10, 'tau': 1, 'block': 20, 'rule': 'fft', 'at': 64}

    References
    ----------
    Dubey, P. and Mueller, H.-G. (2020). Frechet change-point detection. Annals of Statistics
    48(6). Takens, F. (1981). Detecting strange attractors in turbulence (delay embeddings).
    """

    def __init__(self, threshold: float | str = 6.0,
                 false_alarms_per_100_periods: float = 0.2, block: float = 2.0,
                 min_blocks: int = 3,
                 confirm: int = 1, max_blocks: int = 50, burn_in: int = 384,
                 burn_in_min: int = 64, min_acf: float = 0.3, period: int | str = "auto",
                 span: float = 1.0, dmax: int = 16, channels: str = "joint",
                 feature: str = "cov", shrinkage: float = 0.05, refine: bool = True,
                 p_min: int = 4, min_spread: float = 0.01, dependence: str = "none",
                 asymmetry: bool = False):
        self.threshold = threshold
        self.false_alarms_per_100_periods = false_alarms_per_100_periods
        self.block = block
        self.min_blocks = min_blocks
        self.confirm = confirm
        self.max_blocks = max_blocks
        self.burn_in = burn_in
        self.burn_in_min = burn_in_min
        self.min_acf = min_acf
        self.period = period
        self.span = span
        self.dmax = dmax
        self.channels = channels
        self.feature = feature
        self.shrinkage = shrinkage
        self.refine = refine
        self.p_min = p_min
        self.min_spread = min_spread
        self.dependence = dependence
        self.asymmetry = asymmetry
        self._validate_params()
        self._reset()

    #: The constructor's parameters (the shape operator takes them too, and ``field``)
    _PARAMS = tuple(inspect.signature(__init__).parameters)[1:]

    def _get_params(self) -> dict:
        return {k: getattr(self, k) for k in self._PARAMS}

    def __repr__(self) -> str:
        return f"ShapeDetector({', '.join(f'{k}={v!r}' for k, v in self._get_params().items())})"

    def _validate_params(self) -> None:
        if not (self.threshold == "null" or (_num(self.threshold) and self.threshold > 0)):
            raise ValueError(f"threshold must be 'null' or a positive number, got "
                             f"{self.threshold!r}")
        rate = self.false_alarms_per_100_periods
        if not (_num(rate) and 0 < rate < 100):
            raise ValueError(f"false_alarms_per_100_periods must be a number in (0, 100), "
                             f"got {rate!r}")
        if not (_num(self.block) and self.block > 0):
            raise ValueError(f"block must be a positive number (periods), got {self.block!r}")
        for name, lo in (("min_blocks", 2), ("confirm", 0), ("dmax", 2), ("p_min", 2),
                         ("burn_in_min", 16)):
            v = getattr(self, name)
            if not (_int(v) and v >= lo):
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if not (_int(self.max_blocks) and self.max_blocks >= 2 * self.min_blocks):
            raise ValueError(f"max_blocks must be an integer >= 2 * min_blocks, got "
                             f"{self.max_blocks!r}")
        if not (_int(self.burn_in) and self.burn_in >= self.burn_in_min):
            raise ValueError(f"burn_in must be an integer >= burn_in_min, got {self.burn_in!r}")
        if not (_num(self.min_acf) and 0 <= self.min_acf <= 1):
            raise ValueError(f"min_acf must be in [0, 1], got {self.min_acf!r}")
        if not (self.period == "auto" or (_int(self.period) and self.period >= 2)):
            raise ValueError(f"period must be 'auto' or an integer >= 2, got {self.period!r}")
        if not (_num(self.span) and self.span >= 0):
            raise ValueError(f"span must be a number >= 0, got {self.span!r}")
        if self.channels not in _CHANNELS:
            raise ValueError(f"channels must be one of {_CHANNELS}, got {self.channels!r}")
        if self.feature not in _FEATURES:
            raise ValueError(f"feature must be one of {_FEATURES}, got {self.feature!r}")
        if not (_num(self.shrinkage) and 0 <= self.shrinkage < 1):
            raise ValueError(f"shrinkage must be in [0, 1), got {self.shrinkage!r}")
        if not (_num(self.min_spread) and self.min_spread > 0):
            raise ValueError(f"min_spread must be a positive number, got {self.min_spread!r}")
        if self.dependence not in _DEPENDENCE:
            raise ValueError(f"dependence must be one of {_DEPENDENCE}, got {self.dependence!r}")
        if not isinstance(self.asymmetry, bool):
            raise ValueError(f"asymmetry must be true or false, got {self.asymmetry!r}")
        if not isinstance(self.refine, bool):
            raise ValueError(f"refine must be true or false, got {self.refine!r}")

    # ---- state ------------------------------------------------------------------------

    def _reset(self) -> None:
        self._c: int | None = None  # channels, fixed by the first value
        self._burn = np.zeros((0, 0))  # raw burn-in values (until the period is fixed)
        self._loc = np.zeros(0)
        self._scale = np.zeros(0)
        self._P = 0
        self._d = 0
        self._tau = 0
        self._B = 0
        self._rule: str | None = None  # how the period was chosen (time_scale_rule's rule)
        self._at = 0  # the burn-in length that fixed it
        self._ring = np.zeros((0, 0))
        self._s1 = np.zeros((0, 0))
        self._s2 = np.zeros((0, 0, 0))
        self._feats = np.zeros((0, 0))
        self._ist = np.zeros(K.N_IST, dtype=np.int64)
        self._fst = np.zeros(K.N_FST)
        self._a23 = np.zeros((2, 0, 0))
        self._feats2 = np.zeros((0, 0))
        self._curve: np.ndarray | None = None  # thresholds by N (derived: not state)
        self.thresholds = np.zeros(0)
        self._drift_detected = False
        self._change_at: int | None = None
        self._changes: list[int] = []

    _ARRAYS = ("burn", "loc", "scale", "ring", "s1", "s2", "feats", "ist", "fst", "a23",
               "feats2")

    def state_dict(self) -> dict:
        st = {k: getattr(self, "_" + k).copy() for k in self._ARRAYS}
        st.update(c=self._c, P=self._P, d=self._d, tau=self._tau, B=self._B,
                  drift=self._drift_detected, change_at=self._change_at,
                  changes=list(self._changes))
        st.update(rule=self._rule, at=self._at)
        return st

    def load_state_dict(self, state: Mapping) -> None:
        self._reset()
        for k in self._ARRAYS:
            if k not in state and k in ("a23", "feats2"):  # a state from before asymmetry
                continue
            dtype = np.int64 if k == "ist" else np.float64
            setattr(self, "_" + k, np.array(state[k], dtype=dtype))
        if len(self._fst) < K.N_FST:  # a state from before the null threshold
            self._fst = np.concatenate([self._fst, np.full(K.N_FST - len(self._fst), np.nan)])
        if len(self._ist) < K.N_IST:  # a state from before asymmetry
            self._ist = np.concatenate([self._ist, np.zeros(K.N_IST - len(self._ist), np.int64)])
        if self._a23.ndim != 3:
            self._a23 = self._a23.reshape(2, 0, 0)
        self._c = None if state["c"] is None else int(state["c"])
        for k in ("P", "d", "tau", "B"):
            setattr(self, "_" + k, int(state[k]))
        # states from before issue 36 item 2 carry no rule (None: not recorded)
        self._rule = None if state.get("rule") is None else str(state["rule"])
        self._at = int(state.get("at", 0))
        self._drift_detected = bool(state["drift"])
        self._change_at = None if state["change_at"] is None else int(state["change_at"])
        self._changes = [int(v) for v in state["changes"]]

    # ---- properties ---------------------------------------------------------------------

    @property
    def drift_detected(self) -> bool:
        return self._drift_detected

    @property
    def change_at(self) -> int | None:
        """Where the change just detected began (position in the stream), else None."""
        return self._change_at

    @property
    def statistic(self) -> float:
        return float(self._fst[K.LAST_Z])

    @property
    def time_scale(self) -> dict | None:
        """The chosen period, embedding and block length, and why: ``rule`` (``"fft"``: the
        periodogram's dominant period confirmed by the ACF; ``"acf"``: a clear first ACF peak;
        ``"acf-weak"``: a weak one at ``burn_in``; ``"none"``: no period, the short default
        scale; ``"given"``: the ``period`` parameter) and ``at`` (the burn-in length that
        fixed it). None during the burn-in."""
        if not self._P:
            return None
        return {"period": self._P, "d": self._d, "tau": self._tau, "block": self._B,
                "rule": self._rule, "at": self._at}

    # ---- burn-in ------------------------------------------------------------------------

    def _try_fix_period(self) -> bool:
        burn = self._burn
        n = len(burn)
        if self.period != "auto":
            if n < self.burn_in_min:
                return False
            P, used, self._rule = int(self.period), n, "given"
        else:
            if n < self.burn_in_min:
                return False
            # the stated rule of operators/period.py (dominant frequency confirmed by the
            # ACF, else a clear ACF peak; an edge peak or no period -> the short scale)
            ts = time_scale_rule(burn, self.burn_in_min, self.burn_in, self.p_min,
                                 self.min_acf)
            if ts is None:
                return False
            P, used, self._rule = int(ts["period"]), n, str(ts["rule"])
        self._at = int(used)
        b = burn[:used]
        self._loc = b.mean(0)
        sd = b.std(0)
        self._scale = np.where(sd > 0, sd, 1.0)
        self._P = P
        c = self._c
        joint = self.channels == "joint" or c == 1
        # a joint vector of c channels holds at most dmax coordinates: dmax // c lags each,
        # and with fewer than 2 lags no embedding (the channels' own covariance)
        per = self.dmax // c if joint else self.dmax
        if self.span == 0 or per < 2:
            d, tau = 1, 1
        else:
            d, tau = embed_params(P, self.span, per)
        self._d, self._tau = d, tau
        G, g = (1, c * d) if joint else (c, d)
        q = g * (g + 1) // 2 if self.feature == "cov" else (g + 1) * (g + 2) // 2
        self._B = max(g + 1, int(round(self.block * P)))
        R = (self.max_blocks + 3) * self._B + (d - 1) * tau + 1
        self._ring = np.zeros((R, c))
        self._s1 = np.zeros((G, g))
        self._s2 = np.zeros((G, g, g))
        self._feats = np.zeros((self.max_blocks, G * q))
        lags = d - 1 if self.asymmetry else 0
        self._a23 = np.zeros((2, c, d))
        self._feats2 = np.zeros((self.max_blocks, c * lags))
        self._ist = np.array([0, 0, 0, 0, -1, -1, 0, 0], dtype=np.int64)
        self._fst = np.zeros(K.N_FST)
        self._fst[K.LAST_H] = np.nan  # no scan yet
        return True

    def threshold_curve(self) -> np.ndarray | None:
        """The threshold for each window of ``N = 0 .. max_blocks`` blocks (None during the
        burn-in): ``c(N)`` of the null table for this feature dimension, ``min_blocks`` and
        ``false_alarms_per_100_periods``, or the fixed ``threshold`` for every ``N``."""
        if not self._P:
            return None
        if self._curve is None:
            if self.threshold == "null":
                from shiftwatch.operators.shape.null import threshold_curve

                hazard = self.false_alarms_per_100_periods * self.block / 100.0
                self._curve = threshold_curve(self._feats.shape[1], self.min_blocks,
                                              self.max_blocks, min(hazard, 0.5))
            else:
                self._curve = np.full(self.max_blocks + 1, float(self.threshold))
        return self._curve

    def _run(self, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        z = np.ascontiguousarray((xs - self._loc) / self._scale)
        T = len(z)
        alarm = np.zeros(T, dtype=np.uint8)
        change = np.full(T, -1, dtype=np.int64)
        stat = np.zeros(T)
        thr = np.zeros(T)
        joint = self.channels == "joint" or self._c == 1
        K.shape_run(z, self._ring, self._s1, self._s2, self._feats, self._ist, self._fst,
                    self._d, self._tau, joint, self._B, self.min_blocks, self.confirm,
                    self.threshold_curve(), float(self.shrinkage),
                    1 if self.feature == "gauss" else 0, self.refine, float(self.min_spread),
                    REFINE_HALF_WIDTH, REFINE_MIN_SIDE, alarm, change, stat, thr,
                    1 if self.dependence == "lag1" else 0, self._a23, self._feats2,
                    ASYMMETRY_FACTOR if self._feats2.shape[1] else 1.0)
        return alarm, change, stat, thr

    # ---- updates ------------------------------------------------------------------------

    def _as_rows(self, xs: Any) -> np.ndarray:
        arr = np.asarray(xs, dtype=np.float64)
        if arr.ndim == 1:
            arr = arr[:, None]
        if arr.ndim != 2 or not np.all(np.isfinite(arr)):
            raise BadInput("values must be finite numbers or vectors of one length")
        if self._c is not None and arr.shape[1] != self._c:
            raise BadInput(f"values have {arr.shape[1]} channels, earlier ones had {self._c}")
        return arr

    def update_many(self, xs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
        """Take the rows of ``xs`` (T,) or (T, c): returns (alarm, change_at, statistic,
        extra) per row, with ``change_at`` -1 where there is no alarm; ``extra[i]`` lists all
        changes found at row i when the burn-in replay found more than one (else empty).
        ``self.thresholds`` then holds, per row, the threshold the row's ``statistic`` was
        compared with (NaN before the first scan)."""
        arr = self._as_rows(xs)
        T = len(arr)
        if self._c is None and T:
            self._c = int(arr.shape[1])
            self._burn = np.zeros((0, self._c))
        alarm = np.zeros(T, dtype=np.uint8)
        change = np.full(T, -1, dtype=np.int64)
        stat = np.zeros(T)
        thr = np.full(T, np.nan)
        extra: list[list[int]] = [[] for _ in range(T)]
        i = 0
        if not self._P:
            # burn-in: fill the buffer up to each checkpoint where the period can be fixed
            while i < T and not self._P:
                cp = self._next_checkpoint()
                take = min(cp - len(self._burn), T - i)
                self._burn = np.vstack([self._burn, arr[i:i + take]])
                i += take
                if len(self._burn) >= cp and self._try_fix_period():
                    a, ch, st, th = self._run(self._burn)
                    found = [int(v) for v in ch[a == 1]]
                    if found:
                        alarm[i - 1] = 1
                        change[i - 1] = found[-1]
                        if len(found) > 1:
                            extra[i - 1] = found
                    # an alarm carries the Z that crossed (see kernels.shape_run)
                    stat[i - 1] = st[a == 1][-1] if found else st[-1]
                    thr[i - 1] = th[a == 1][-1] if found else th[-1]
                    self._burn = np.zeros((0, self._c))
        if i < T and self._P:
            a, ch, st, th = self._run(arr[i:])
            alarm[i:], change[i:], stat[i:], thr[i:] = a, ch, st, th
        self.thresholds = thr
        if T:
            self._drift_detected = bool(alarm[-1])
            self._change_at = int(change[-1]) if alarm[-1] else None
        return alarm, change, stat, extra

    def _next_checkpoint(self) -> int:
        """The next burn-in length (> the current one) at which the period is tried."""
        if self.period != "auto":
            return self.burn_in_min
        n = self.burn_in_min
        while n < self.burn_in and n <= len(self._burn):
            n *= 2
        return min(n, self.burn_in)

    def update(self, x: Any) -> None:
        """Take one value (number or vector); River's drift-detector interface (text is a
        ``TypeError``, as for River's detectors)."""
        refuse_text(x, "ShapeDetector")
        self.update_many(np.asarray([x], dtype=np.float64))
