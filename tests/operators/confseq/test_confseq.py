"""ConfSeqDetector: exactness against a brute-force reference, API, and its statistical promises."""

from __future__ import annotations

import copy
import math
import pickle

import numpy as np
import pytest
from scipy import stats

from shiftwatch.operators import BadInput, create
from shiftwatch.operators.confseq.detector import CS_CHOICES, ConfSeqDetector

# --------------------------------------------------------------------------------------
# Brute-force reference: every start time, plain NumPy, O(n) work per step.
# --------------------------------------------------------------------------------------


def long_run_burn_in(det: ConfSeqDetector, burn: list[float], checkpoint: int):
    """The long-run burn-in after the values ``burn``, from the formulas: ``(center, scale)``
    when it ends there, else the next checkpoint (an int)."""
    from shiftwatch.operators.confseq.detector import LONG_RUN_BATCHES

    b = np.array(burn)
    n = b.size
    if n < checkpoint and n < det.burn_in_max:
        return checkpoint
    marginal = b.var(ddof=1)
    top, size = marginal, 2
    while n // size >= LONG_RUN_BATCHES and size * LONG_RUN_BATCHES <= det.burn_in_max:
        means = b[:n // size * size].reshape(-1, size).mean(axis=1)
        top = max(top, size * means.var(ddof=1))
        size *= 2
    if n >= det.burn_in_max or n * marginal >= det.burn_in_effective * top:
        return b.mean(), max(np.sqrt(top), 1e-12 * max(1, abs(b.mean())))
    return n + max(1, n // 10)


def brute_hull(det: ConfSeqDetector, xs: np.ndarray, with_starts: bool = False):
    """Alarms of the linear-boundary CS detector, from the formulas, over all start times.

    With ``with_starts`` also the located start of each alarm: the later of the starts whose
    CS attains the running max lower / min upper bound (their index in ``xs``).
    """
    lam, drift, offset = det._grid
    bern = det.cs == "empirical-bernstein"
    var = det._scalars[8]
    burn_n = det.burn_in if det._uses_burn_in() else 0
    fixed_center, fixed_scale = det._scalars[6], det._scalars[7]
    long_run = det._long_run()
    checkpoint = det.burn_in
    alarms, run, burn = [], [], []
    center, scale = fixed_center, fixed_scale
    lower, upper = -np.inf, np.inf
    best_start = None
    arg = [0, 0]  # run index (after the burn-in) of the start attaining each side's bound
    located = []
    for t, x in enumerate(xs):
        if long_run and burn_n:
            burn.append(x)
            got = long_run_burn_in(det, burn, checkpoint)
            if isinstance(got, int):
                checkpoint = got
            else:
                center, scale = got
                burn_n = 0  # monitoring until the next alarm
            continue
        if len(burn) < burn_n:
            burn.append(x)
            if len(burn) == burn_n:
                b = np.array(burn)
                center, scale = b.mean(), max(b.std(ddof=1), 1e-12 * max(1, abs(b.mean())))
            continue
        run.append((x - center) / scale)
        z = np.array(run)
        n = len(z)
        if bern:
            sums = np.concatenate([[0.0], np.cumsum(z)[:-1]])
            v = (z - (0.5 + sums) / np.arange(1, n + 1)) ** 2
        else:
            v = np.full(n, var)
        m = np.arange(1, n + 1)
        pen = 2.0 * np.log(m) if det.pfa else np.zeros(n)
        bounds = []
        for sign in (1.0, -1.0):
            per_start = np.full(n, -np.inf)
            for j in range(len(lam)):
                walk = np.concatenate([[0.0], np.cumsum(sign * z - drift[j] * v)])
                slopes = (walk[n] - offset[j] - (walk[:n] + pen / lam[j])) / (n - (m - 1.0))
                per_start = np.maximum(per_start, slopes)
            bounds.append(per_start)
        if det.prune:
            # Each start keeps its own running intersection; only the last K are active.
            if best_start is None:
                best_start = [[], []]
            for s in range(2):
                best_start[s].append(-np.inf)
                best_start[s] = list(np.maximum(best_start[s], bounds[s]))
            k = det.prune
            lower = max(best_start[0][-k:])
            upper = -max(best_start[1][-k:])
            for s in range(2):
                active = np.array(best_start[s][-k:])
                # the newest start among ties, as the kernel scans newest first
                arg[s] = n - 1 - int(np.argmax(active[::-1]))
        else:
            if bounds[0].max() > lower:
                lower, arg[0] = bounds[0].max(), int(np.argmax(bounds[0]))
            if -bounds[1].max() < upper:
                upper, arg[1] = -bounds[1].max(), int(np.argmax(bounds[1]))
        if lower > upper:
            alarms.append(t)
            located.append(t - (n - 1) + max(arg))
            run, burn, best_start = [], [], None
            lower, upper = -np.inf, np.inf
            center, scale = fixed_center, fixed_scale
            arg = [0, 0]
            if long_run:
                burn_n, checkpoint = det.burn_in_max, det.burn_in
    return (alarms, located) if with_starts else alarms


def brute_betting(det: ConfSeqDetector, xs: np.ndarray) -> list[int]:
    """Alarms of the betting / quantile detectors: a capital per start time, no recursion."""
    quantile = det.cs == "quantile"
    p = det.quantile
    thr = math.exp(det._log_thr)
    lp, lm = det._lam_plus, det._lam_minus
    theta = det._theta.copy()
    burn_n = det.burn_in if quantile else 0
    alarms, burn = [], []
    caps_p: list[np.ndarray] = []
    caps_m: list[np.ndarray] = []
    ex_p = np.zeros(theta.size, bool)
    ex_m = np.zeros(theta.size, bool)
    for t, x in enumerate(xs):
        if len(burn) < burn_n:
            burn.append(x)
            if len(burn) == burn_n:
                theta = np.sort(np.array(burn))
            continue
        z = x if quantile else (x - det.lower) / (det.upper - det.lower)
        m = len(caps_p) + 1
        start = 1.0 / (m * m) if det.pfa else 1.0
        caps_p.append(np.full(lp.shape, start))
        caps_m.append(np.full(lp.shape, start))
        if quantile:
            e_p = p - (z <= theta).astype(float)
            e_m = (z < theta).astype(float) - p
        else:
            e_p, e_m = z - theta, theta - z
        for c in caps_p:
            c *= 1.0 + lp * e_p
        for c in caps_m:
            c *= 1.0 + lm * e_m
        ex_p |= np.any(np.array(caps_p) >= thr, axis=(0, 1))
        ex_m |= np.any(np.array(caps_m) >= thr, axis=(0, 1))
        lo = np.flatnonzero(ex_p).max() if ex_p.any() else -1
        hi = np.flatnonzero(ex_m).min() if ex_m.any() else theta.size
        if lo >= hi:
            alarms.append(t)
            caps_p, caps_m, burn = [], [], []
            ex_p[:] = False
            ex_m[:] = False
    return alarms


def _stream(rng: np.random.Generator, n: int, bounded: bool) -> np.ndarray:
    """A stream with 0-3 changes of random size, so that alarms and restarts happen."""
    cps = np.sort(rng.choice(np.arange(20, n - 10), size=rng.integers(0, 4), replace=False))
    level = np.zeros(n)
    for c in cps:
        level[c:] += rng.normal(0, 1.5)
    if bounded:
        return 1.0 / (1.0 + np.exp(-(2 * level + rng.normal(0, 1, n))))
    return level + rng.normal(0, 1, n) * rng.uniform(0.5, 2)


HULL_CASES = [
    dict(cs="subgaussian", sigma=1.0, alpha=0.1),
    dict(cs="subgaussian", alpha=0.1, burn_in=10),
    dict(cs="subgaussian", alpha=0.1, burn_in=10, scale="marginal"),
    dict(cs="subgaussian", alpha=0.2, burn_in=8, burn_in_effective=12, burn_in_max=70),
    dict(cs="subgaussian", sigma=1.0, alpha=0.1, pfa=True),
    dict(cs="hoeffding", alpha=0.2),
    dict(cs="empirical-bernstein", alpha=0.1),
    dict(cs="empirical-bernstein", alpha=0.2, pfa=True),
    dict(cs="empirical-bernstein", alpha=0.3, prune=150),
    dict(cs="subgaussian", sigma=1.0, alpha=0.2, prune=20),
]
N_STREAMS = 30  # per case: 10 x 30 + 4 x 25 = 400 streams in all


@pytest.mark.parametrize("params", HULL_CASES, ids=lambda p: "-".join(f"{v}" for v in p.values()))
def test_hull_detector_equals_brute_force(params):
    bounded = params["cs"] != "subgaussian"
    total = 0
    for seed in range(N_STREAMS):
        rng = np.random.default_rng(seed)
        xs = _stream(rng, int(rng.integers(60, 220)), bounded)
        det = ConfSeqDetector(**params)
        fast = det.update_many(xs).tolist()
        assert fast == brute_hull(ConfSeqDetector(**params), xs), (params, seed)
        total += len(fast)
    assert total >= (1 if "prune" in params else 3)  # the streams exercise alarms and restarts


def _located_fast(params: dict, xs: np.ndarray) -> tuple[list[int], list[int]]:
    """Alarms and located starts from the kernel (update_many and the update loop agree)."""
    det = ConfSeqDetector(**params)
    out = det._run(np.ascontiguousarray(xs))
    alarms = np.flatnonzero(out[0] != 0.0)
    loop = ConfSeqDetector(**params)
    lags = []
    for x in xs:
        loop.update(float(x))
        if loop.drift_detected:
            lags.append(loop.change_lag)
    assert out[3, alarms].tolist() == lags
    return alarms.tolist(), (alarms - out[3, alarms].astype(int)).tolist()


@pytest.mark.parametrize("params", HULL_CASES, ids=lambda p: "-".join(f"{v}" for v in p.values()))
def test_hull_located_start_equals_brute_force(params):
    # The kernel's located start (the later of the starts attaining the max lower / min upper
    # bound) is the one the brute force finds over all start times.
    bounded = params["cs"] != "subgaussian"
    total = 0
    for seed in range(N_STREAMS):
        rng = np.random.default_rng(seed)
        xs = _stream(rng, int(rng.integers(60, 220)), bounded)
        alarms, starts = _located_fast(params, xs)
        b_alarms, b_starts = brute_hull(ConfSeqDetector(**params), xs, with_starts=True)
        assert (alarms, starts) == (b_alarms, b_starts), (params, seed)
        assert all(0 <= s <= a for s, a in zip(starts, alarms, strict=True))
        total += len(alarms)
    assert total >= 1


@pytest.mark.parametrize("params", [dict(cs="betting", alpha=0.2),
                                    dict(cs="betting", alpha=0.2, pfa=True),
                                    dict(cs="quantile", alpha=0.2, burn_in=12),
                                    dict(cs="quantile", alpha=0.3, quantile=0.8, burn_in=10)],
                         ids=["betting", "betting-pfa", "median", "q0.8"])
def test_betting_detector_equals_brute_force(params):
    total = 0
    for seed in range(25):
        rng = np.random.default_rng(100 + seed)
        xs = _stream(rng, int(rng.integers(50, 140)), bounded=True)
        fast = ConfSeqDetector(**params).update_many(xs).tolist()
        assert fast == brute_betting(ConfSeqDetector(**params), xs), (params, seed)
        total += len(fast)
    assert total >= 5


def test_brute_force_reference_sees_more_alarms_than_pruned():
    # Pruning only delays alarms: the exact detector alarms first on the same stream.
    rng = np.random.default_rng(5)
    xs = np.r_[rng.normal(0, 1, 400), rng.normal(0.6, 1, 400)]
    exact = ConfSeqDetector(sigma=1.0, alpha=0.01).update_many(xs)
    pruned = ConfSeqDetector(sigma=1.0, alpha=0.01, prune=20).update_many(xs)
    assert exact[0] <= (pruned[0] if len(pruned) else 10**9)


# --------------------------------------------------------------------------------------
# API
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("cs", CS_CHOICES)
def test_update_loop_equals_update_many_and_interval(cs):
    rng = np.random.default_rng(0)
    xs = np.clip(np.r_[rng.normal(0.3, 0.1, 600), rng.normal(0.6, 0.1, 600)], 0, 1)
    a, b, c = ConfSeqDetector(cs=cs), ConfSeqDetector(cs=cs), ConfSeqDetector(cs=cs)
    loop, intervals = [], []
    for i, x in enumerate(xs):
        a.update(x)
        intervals.append(a.interval)
        if a.drift_detected:
            loop.append(i)
            lo, hi = a.interval
            assert lo >= hi
    assert loop and loop == b.update_many(xs).tolist()
    pieces = [c.update_many(xs[i:i + 97]) + i for i in range(0, len(xs), 97)]
    assert np.concatenate(pieces).tolist() == loop
    assert c.interval == a.interval
    lo, hi = intervals[loop[0] - 5]
    assert lo < hi and (cs == "quantile" or lo <= 0.35 <= hi or hi - lo < 0.2)


def test_river_api_and_restart():
    from river.base import DriftDetector

    det = ConfSeqDetector(sigma=1.0, alpha=0.01)
    assert isinstance(det, DriftDetector)
    assert det.interval == (-math.inf, math.inf) and not det.drift_detected
    xs = np.r_[np.zeros(200), np.full(50, 5.0)]
    alarm = det.update_many(xs)
    assert alarm.tolist() and 200 <= alarm[0] < 210
    det.update(5.0)  # the run after the alarm starts afresh
    lo, hi = det.interval
    assert lo < 5.0 < hi and not det.drift_detected
    assert det.clone().interval == (-math.inf, math.inf)


def test_hull_memory_grows_slowly():
    det = ConfSeqDetector(sigma=1.0, alpha=1e-6)
    det.update_many(np.random.default_rng(0).normal(size=100_000))
    # O(log n) hull points per lambda and side: far fewer than n.
    assert det.memory_items < 2 * 10 * 60


def test_state_dict_round_trip_mid_stream():
    rng = np.random.default_rng(2)
    xs = np.r_[rng.normal(0, 1, 700), rng.normal(1, 1, 700)]
    for cs in ("subgaussian", "quantile"):
        a = ConfSeqDetector(cs=cs)
        a.update_many(xs[:500])
        b = ConfSeqDetector(cs=cs)
        b.load_state_dict(a.state_dict())
        assert a.update_many(xs[500:]).tolist() == b.update_many(xs[500:]).tolist()


@pytest.mark.parametrize("params", [dict(cs="subgaussian", sigma=1.0, alpha=0.01),
                                    dict(cs="empirical-bernstein", lower=-6, upper=6, pfa=True),
                                    dict(cs="betting", lower=-6, upper=6, alpha=0.01),
                                    dict(cs="quantile")], ids=lambda p: p["cs"])
def test_update_path_state_survives_copy_restore_and_growth(params):
    # update() runs on one packed buffer (views rebound by _pack): a deep copy, a pickle, a
    # state_dict restore and hull growth must all keep it consistent with update_many.
    rng = np.random.default_rng(4)
    xs = np.clip(np.r_[rng.normal(0, 1, 3000), rng.normal(0.8, 1, 3000)], -6, 6)
    a = ConfSeqDetector(**params)
    a.update_many(xs[:2500])
    b = ConfSeqDetector(**params)
    b.load_state_dict(a.state_dict())
    expected = ConfSeqDetector(**params)
    expected.update_many(xs[:2500])
    expected = expected.update_many(xs[2500:]).tolist()
    assert expected
    for det in (a, b, copy.deepcopy(a), pickle.loads(pickle.dumps(a))):
        alarms, last = [], None
        for i, x in enumerate(xs[2500:].tolist()):
            det.update(x)
            if det.drift_detected:
                alarms.append(i)
                last = det.interval
        assert alarms == expected
        assert last is not None and last[0] >= last[1]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "abc", None, [1.0, 2.0], 1.5, -0.1])
def test_bad_values_are_rejected_and_leave_state_untouched(bad):
    det = ConfSeqDetector(cs="hoeffding")
    det.update_many([0.2, 0.3, 0.4])
    before = {k: v.copy() for k, v in det.state_dict().items()}
    with pytest.raises(BadInput):
        det.update(bad)
    with pytest.raises(BadInput):
        det.update_many([0.2, bad] if not isinstance(bad, list) else [0.2, "x"])
    after = det.state_dict()
    assert all(np.array_equal(before[k], after[k], equal_nan=True) for k in before)


def test_operator_vector_splits_alpha_and_dead_letters():
    op = create("cs", cs="subgaussian", sigma=1.0, alpha=0.01)
    out = op.process({"value": [0.0, 1.0]})
    assert out[0]["alarm"] is False and len(out[0]["lower"]) == 2
    assert op._detectors[0].alpha == pytest.approx(0.005)
    res = op.process_batch([{"value": [0.0, 1.0]}, {"value": 3.0}, {"value": [0.1, 0.9]}])
    assert type(res[1]).__name__ == "DeadLetter" and "shape" in res[1].reason


@pytest.mark.parametrize(("params", "word"), [
    (dict(cs="median"), "cs"), (dict(alpha=1.5), "alpha"), (dict(sigma=-1.0), "sigma"),
    (dict(cs="hoeffding", sigma=1.0), "sigma"), (dict(lower=1.0, upper=0.0), "lower"),
    (dict(quantile=1.0), "quantile"), (dict(pfa=1), "pfa"), (dict(prune=1), "prune"),
    (dict(cs="betting", prune=10), "prune"), (dict(burn_in=1), "burn_in"),
    (dict(scale="iid"), "scale"), (dict(burn_in_effective=1), "burn_in_effective"),
    (dict(burn_in_max=20), "burn_in_max"), (dict(burn_in_max=True), "burn_in_max")])
def test_parameters_are_validated(params, word):
    with pytest.raises(ValueError, match=word):
        ConfSeqDetector(**params)
    with pytest.raises(ValueError, match=word):
        create("cs", **params)


# --------------------------------------------------------------------------------------
# Statistics (seeded Monte Carlo; the long versions are marked slow)
# --------------------------------------------------------------------------------------


def _no_change(kind: str, rng: np.random.Generator, n: int) -> np.ndarray:
    if kind == "gauss":
        return rng.normal(0, 1, n)
    if kind == "beta":
        return rng.beta(2, 6, n)
    # heavy-ish tails, bounded: a Student t(3) clipped to [-10, 10] mapped to [0, 1]
    return (np.clip(rng.standard_t(3, n), -10, 10) + 10) / 20


ARL_CASES = [("subgaussian", {"sigma": 1.0}, "gauss"), ("subgaussian", {}, "gauss"),
             ("subgaussian", {}, "t3"), ("hoeffding", {}, "beta"), ("hoeffding", {}, "t3"),
             ("empirical-bernstein", {}, "beta"), ("empirical-bernstein", {}, "t3"),
             ("betting", {}, "beta"), ("betting", {}, "t3"), ("quantile", {}, "gauss"),
             ("quantile", {}, "beta")]


def _arl_lower_bound(cs, extra, kind, alpha, runs, n):
    alarms = 0
    for r in range(runs):
        det = ConfSeqDetector(cs=cs, alpha=alpha, **extra)
        alarms += len(det.update_many(_no_change(kind, np.random.default_rng(r), n)))
    # One-sided 95% Poisson upper bound on the alarm count -> lower bound on the ARL.
    upper_count = stats.chi2.ppf(0.95, 2 * alarms + 2) / 2
    return runs * n / upper_count, alarms


@pytest.mark.parametrize(("cs", "extra", "kind"), ARL_CASES,
                         ids=[f"{c}-{k}-{'sigma' if e else 'free'}" for c, e, k in ARL_CASES])
def test_average_run_length_at_least_one_over_alpha(cs, extra, kind):
    alpha = 0.1
    lcb, alarms = _arl_lower_bound(cs, extra, kind, alpha, runs=4, n=5000)
    assert lcb >= 1 / alpha, (lcb, alarms)


@pytest.mark.slow
@pytest.mark.parametrize(("cs", "extra", "kind"), ARL_CASES)
def test_average_run_length_slow(cs, extra, kind):
    for alpha in (0.05, 0.01):
        lcb, alarms = _arl_lower_bound(cs, extra, kind, alpha, runs=20, n=20000)
        assert lcb >= 1 / alpha, (alpha, lcb, alarms)


def _pfa_frequency_upper(cs, kind, alpha, runs, n):
    hits = 0
    for r in range(runs):
        det = ConfSeqDetector(cs=cs, alpha=alpha, pfa=True)
        hits += len(det.update_many(_no_change(kind, np.random.default_rng(10_000 + r), n))) > 0
    upper = stats.beta.ppf(0.95, hits + 1, runs - hits) if hits < runs else 1.0
    return upper, hits


@pytest.mark.parametrize(("cs", "kind"), [("subgaussian", "gauss"), ("hoeffding", "beta"),
                                          ("empirical-bernstein", "t3"), ("betting", "beta"),
                                          ("quantile", "gauss")])
def test_pfa_false_alarm_frequency_at_most_alpha(cs, kind):
    upper, hits = _pfa_frequency_upper(cs, kind, alpha=0.1, runs=60, n=1000)
    assert upper <= 0.1, (upper, hits)


@pytest.mark.slow
@pytest.mark.parametrize("cs", CS_CHOICES)
def test_pfa_slow(cs):
    kind = "gauss" if cs in ("subgaussian", "quantile") else "beta"
    upper, hits = _pfa_frequency_upper(cs, kind, alpha=0.05, runs=300, n=5000)
    assert upper <= 0.05, (upper, hits)


@pytest.mark.parametrize("cs", ["subgaussian", "empirical-bernstein", "betting", "quantile"])
def test_delay_shrinks_as_the_shift_grows(cs):
    means = []
    for shift in (0.05, 0.1, 0.2):
        delays = []
        for r in range(12):
            rng = np.random.default_rng(r)
            xs = np.r_[rng.beta(2, 6, 500), rng.beta(2, 6, 3000) + shift]
            xs = np.clip(xs, 0, 1)
            alarms = ConfSeqDetector(cs=cs, alpha=0.01).update_many(xs)
            after = alarms[alarms >= 500]
            delays.append((after[0] if after.size else len(xs)) - 500)
        # The median: a false alarm shortly before the change restarts the burn-in over it,
        # and the change is then part of the burn-in (missed, or found thousands of values
        # later); the mean of 12 runs is that run's.
        means.append(np.median(delays))
    assert means[0] > means[1] > means[2], means


# --------------------------------------------------------------------------------------
# Locating and restarting (operator)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("locate", ["cs", "mean"])
def test_operator_locates_changes_on_seeded_streams(locate):
    # One change at 3000 of a shift of 1 sd: the located change is near it, far nearer
    # than the alarm; the CS start is mostly an estimate from above (6 of these 40 seeds
    # more than 2 records before the change, with the long-run and the marginal scale).
    # Medians: a run with a false alarm shortly before the change locates within what
    # followed that alarm (one of 40 runs is 851 records off with the mean split).
    errs, delays, early = [], [], 0
    for r in range(40):
        rng = np.random.default_rng(10_000 + r)
        x = rng.normal(0.0, 1.0, 4000)
        x[3000:] += 1.0
        outs = create("cs", locate=locate).process_batch(
            [{"value": float(v), "ts": 100.0 + i} for i, v in enumerate(x)])
        hit = next((i, o) for i, o in enumerate(outs) if o["alarm"] and i >= 3000)
        assert hit[1]["change_ts"] == 100.0 + hit[1]["change_at"]
        errs.append(abs(hit[1]["change_at"] - 3000))
        delays.append(hit[0] - 3000)
        assert all("change_at" not in o for o in outs if not o["alarm"])
        early += hit[1]["change_at"] < 3000 - 2
    errs = np.array(errs)
    assert np.median(errs) <= 2 and np.median(errs) < np.median(delays) / 3, (errs, delays)
    assert np.mean(errs <= 5) >= 0.75, errs
    if locate == "cs":
        assert early <= 10, early


@pytest.mark.parametrize("params", [dict(restart=True), dict(restart=True, locate="mean"),
                                    dict(locate=False), dict(cs="betting", lower=-8, upper=8),
                                    dict(restart=True, field="v", locate_window=50)])
def test_operator_batch_equals_loop_and_state_round_trip(params):
    rng = np.random.default_rng(3)
    vector = params.get("field") == "v"
    x = rng.normal(0, 1, (900, 2) if vector else 900)
    x[300:] += 2.0
    x[450:] -= 2.5
    x = np.clip(x, -7.9, 7.9)
    field = params.get("field", "value")
    recs = [{field: (x[i].tolist() if vector else float(x[i])), "ts": float(i)}
            for i in range(len(x))]
    batch = create("cs", **params).process_batch(recs)
    op = create("cs", **params)
    loop = [op.process(r)[0] for r in recs[:500]]
    copy_op = create("cs", **params)
    copy_op.load_state_dict(op.state_dict())
    loop += [copy_op.process(r)[0] for r in recs[500:]]
    assert loop == batch
    alarms = [o for o in batch if o["alarm"]]
    assert len(alarms) >= (1 if "lower" in params else 2)
    assert all(("change_at" in o) == (params.get("locate") is not False) for o in alarms)


def test_restart_refeeds_the_post_change_values():
    rng = np.random.default_rng(2)
    x = np.r_[rng.normal(0, 1, 600), rng.normal(1.5, 1, 150), rng.normal(3, 1, 600)]
    recs = [{"value": float(v)} for v in x]
    for scale in ("long-run", "marginal"):
        plain = create("cs", scale=scale).process_batch(recs)
        again_op = create("cs", scale=scale, restart=True)
        again = again_op.process_batch(recs)
        a = [i for i, o in enumerate(plain) if o["alarm"]]
        b = [i for i, o in enumerate(again) if o["alarm"]]
        assert a[0] == b[0]
        # The restarted detector's burn-in started at the located change: at the alarm it
        # holds the values from there on.
        op = create("cs", scale=scale, restart=True)
        at_alarm = op.process_batch(recs[:a[0] + 1])[-1]
        assert at_alarm["alarm"]
        det = op._detectors[0]
        assert det._scalars[5] == a[0] + 1 - at_alarm["change_at"]  # S_NBURN
        if scale == "marginal":  # a fixed burn-in: its interval is finite again sooner
            def finite_after(outs, alarm=a[0]):
                return next(i for i in range(alarm + 1, len(outs)) if outs[i]["lower"] is not None)
            assert finite_after(again) < finite_after(plain)
    with pytest.raises(ValueError, match="locate"):
        create("cs", cs="betting", locate="cs")
    with pytest.raises(ValueError, match="restart"):
        create("cs", restart=1)


def _lower_hull(ys: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The lower convex hull of the points ``(i, ys[i])``, built as the kernels build it:
    x, y and the number of points."""
    hx: list[float] = []
    hy: list[float] = []
    for px, py in enumerate(ys):
        while len(hx) >= 2 and ((hx[-1] - hx[-2]) * (py - hy[-2])
                                - (hy[-1] - hy[-2]) * (px - hx[-2])) <= 0.0:
            hx.pop()
            hy.pop()
        hx.append(float(px))
        hy.append(float(py))
    return np.array(hx), np.array(hy), len(hx)


def test_hull_walk_matches_binary_search_from_any_hint():
    """The tangent query's pointer walk returns the binary search's index from every start."""
    from shiftwatch.operators.confseq.kernels import hull_argmax_slope, hull_walk_argmax

    rng = np.random.default_rng(13)
    checked = 0
    for _ in range(200):
        walk = np.r_[0.0, np.cumsum(rng.normal(size=int(rng.integers(2, 300))))]
        hxa, hya, h = _lower_hull(walk[:-1])
        n = float(walk.size - 1)
        for d in (0.0, 1.0, 10.0, 100.0):
            qy = walk[-1] - d
            want = hull_argmax_slope(hxa, hya, h, n, qy)
            for hint in {0, h // 2, h - 1, h + 5}:
                assert hull_walk_argmax(hxa, hya, h, n, qy, hint) == want
                checked += 1
    assert checked > 1000


def test_one_walk_for_all_lambdas_matches_a_binary_search_each():
    """The shared-hull kernels' tangent queries (one walk over the hull for all lambdas,
    ``qy`` decreasing) give each query the binary search's index."""
    from shiftwatch.operators.confseq.kernels import hull_argmax_slope, hull_tangents_walk

    rng = np.random.default_rng(17)
    grid = ConfSeqDetector(cs="subgaussian", sigma=1.0)._grid
    checked = 0
    for trial in range(300):
        steps = int(rng.integers(2, 400))
        walk = np.r_[0.0, np.cumsum(rng.normal(rng.uniform(-0.5, 0.5), 1.0, size=steps))]
        hxa, hya, h = _lower_hull(walk[:-1])
        n = float(steps)
        offsets = grid[2] if trial % 2 else np.sort(rng.exponential(5.0, 10))
        qys = walk[-1] - offsets
        got = np.empty(qys.size, dtype=np.int64)
        hull_tangents_walk(hxa, hya, h, n, qys, got)
        assert got.tolist() == [hull_argmax_slope(hxa, hya, h, n, q) for q in qys]
        checked += qys.size
    assert checked == 3000


def _kernel_without_filter():
    """``cs_hull_run`` compiled from its source with the skip filter switched off: the
    tangent queries then run on every step, as before the filter existed."""
    import inspect
    import types as pytypes

    from shiftwatch.operators.confseq import kernels as confseq_kernels

    src = inspect.getsource(confseq_kernels)
    marker = "                if r != -np.inf:\n"
    assert src.count(marker) == 1  # the filter's guard, as the test expects to find it
    src = src.replace(marker, "                if False:\n").replace("cache=True", "cache=False")
    mod = pytypes.ModuleType("confseq_kernels_nofilter")
    exec(compile(src, "confseq_kernels_nofilter", "exec"), mod.__dict__)
    return mod.cs_hull_run


@pytest.mark.parametrize("params", [{"sigma": 1.0}, {}, {"alpha": 1e-6},
                                    {"cs": "hoeffding", "lower": -6.0, "upper": 6.0}])
def test_skip_filter_changes_no_output(params):
    """Every output (alarm, interval, located start and its ts) and the state are the same
    with the filter as with the tangent queries run on every step, on streams with changes
    of many sizes (bit for bit: the filter only skips steps it proves cannot matter)."""
    run = _kernel_without_filter()
    steps = alarms = 0
    for seed in range(6):
        rng = np.random.default_rng(seed)
        x = rng.normal(0.0, 1.0, 30_000)
        for c in rng.integers(0, x.size, 5):
            x[c:] += rng.choice([-1.0, 1.0]) * rng.uniform(0.05, 1.5)
        x = np.ascontiguousarray(np.clip(x, -5.9, 5.9))
        ts = np.arange(x.size, dtype=float) * 2.0
        fast, ref = ConfSeqDetector(**params), ConfSeqDetector(**params)
        out_fast = fast._run(x, ts=ts)
        out_ref = np.empty_like(out_fast)
        done = 0
        while done < x.size:
            done = run(x, done, False, False, ref._grid, ref._hull_x, ref._hull_y,
                       ref._hull_size, ref._walk, ref._scalars, ref._burn, ref._ring_y,
                       ref._ring_best, out_ref, False, ref._hint, ts, ref._hull_t,
                       ref._ring_t, ref._support, ref._burn_cfg)
            if done < x.size:
                ref._grow()
        ref._last[:] = out_ref[:, -1]
        assert np.array_equal(out_fast, out_ref, equal_nan=True), (params, seed)
        alarms += int(out_fast[0].sum())
        a, b = fast.state_dict(), ref.state_dict()
        assert all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)
        steps += x.size
    assert steps == 180_000 and alarms >= 6  # the comparison covers alarms


def test_state_of_an_earlier_release_loads_and_keeps_ts_from_its_window():
    """A state written before hull points kept their ts (no ``_hull_t``, 12 scalars, 4-row
    ``_last``, the ts in the operator's locate window) restores; the located start's ts comes
    back from the window."""
    rng = np.random.default_rng(5)
    x = np.r_[rng.normal(0, 1, 600), rng.normal(1.5, 1, 400)]
    recs = [{"value": float(v), "ts": 100.0 + i} for i, v in enumerate(x)]
    op = create("cs")
    op.process_batch(recs[:603])
    state = op.state_dict()
    det = state["state"]["detectors"][0]
    old_det = {k: v for k, v in det.items() if k not in ("_hull_t", "_ring_t")}
    old_det["_scalars"] = det["_scalars"][:12]
    old_det["_last"] = det["_last"][:4]
    window = {"capacity": 1000, "dim": 0, "count": 603, "size": 603, "values": None,
              "ts": np.array([r["ts"] for r in recs[:603]])}
    old = {"operator": "cs", "state": {**state["state"], "detectors": [old_det],
                                       "window": window}}
    restored = create("cs")
    restored.load_state_dict(old)
    want = op.process_batch(recs[603:])
    got = restored.process_batch(recs[603:])
    assert got == want and any(o["alarm"] and "change_ts" in o for o in got)


def test_states_of_the_marginal_burn_in_restore_into_the_long_run_scale():
    # Changelogs written before the long-run scale hold the burn-in's raw values (the layout
    # scale="marginal" still has): they restore, an unfinished burn-in as if the long-run
    # detector had seen its values, a finished one keeping the scale it learned.
    from shiftwatch.operators.confseq.detector import ConfSeqDetector

    rng = np.random.default_rng(3)
    xs = rng.normal(size=200)
    for seen in (10, 80):
        old = ConfSeqDetector(scale="marginal")
        for x in xs[:seen]:
            old.update(float(x))
        new = ConfSeqDetector()
        new.load_state_dict(old.state_dict())
        if seen < old.burn_in:
            ref = ConfSeqDetector()
            for x in xs[:seen]:
                ref.update(float(x))
            for k, v in ref.state_dict().items():
                assert np.array_equal(new.state_dict()[k], v, equal_nan=True), k
        else:
            from shiftwatch.operators.confseq.kernels import S_CENTER, S_SCALE

            for s in (S_CENTER, S_SCALE):
                assert new.state_dict()["_scalars"][s] == old.state_dict()["_scalars"][s]
        for x in xs[seen:]:
            new.update(float(x))  # and it runs on


def test_change_at_has_the_meaning_it_has_on_shape_and_in_outputs():
    """Issue 34 (11): one name for a located change on the detectors' Python API: the
    position of the first changed value among the values the detector took, the same on
    ConfSeqDetector as on ShapeDetector and as ``change_at`` in the operator's outputs; it
    survives a state_dict round trip, and a state without the count says None."""
    from shiftwatch.operators import create

    rng = np.random.default_rng(5)
    x = np.r_[rng.normal(0, 1, 700), rng.normal(1.5, 1, 700)]
    det = ConfSeqDetector()
    located = []
    for i, v in enumerate(x):
        det.update(float(v))
        if det.drift_detected:
            assert det.change_at == i - det.change_lag
            located.append(det.change_at)
        else:
            assert det.change_at is None
    assert located and abs(located[0] - 700) < 60
    op = create("cs")
    outs = op.process_batch([{"value": float(v)} for v in x])
    assert [o["change_at"] for o in outs if o["alarm"]] == located
    # restored half way, the count goes on
    half = ConfSeqDetector()
    half.update_many(x[:650])
    probe = ConfSeqDetector()
    probe.load_state_dict(half.state_dict())
    first = int(probe.update_many(x[650:])[0])  # the first alarm after the restore
    again = ConfSeqDetector()
    again.load_state_dict(half.state_dict())
    again.update_many(x[650:651 + first])  # ends with that alarm
    assert again.drift_detected and again.change_at is not None
    assert 650 + first - again.change_lag == again.change_at
    # a state written before the count (14 scalars) restores with change_at unknown
    old = half.state_dict()
    old["_scalars"] = old["_scalars"][:14]
    legacy = ConfSeqDetector()
    legacy.load_state_dict(old)
    legacy.update_many(x[650:651 + first])
    assert legacy.change_lag is not None and legacy.change_at is None
