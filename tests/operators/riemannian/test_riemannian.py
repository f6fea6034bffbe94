"""KarcherDetector: regression alarms, the paper's levels, batch == loop, thresholds, state."""

from __future__ import annotations

import numpy as np
import pytest
from geomstats.geometry.spd_matrices import SPDAffineMetric, SPDMatrices

from shiftwatch.operators import create
from shiftwatch.operators.riemannian.grassmann import Grassmann
from shiftwatch.operators.riemannian.karcher import KarcherDetector, calibrate_threshold
from shiftwatch.operators.riemannian.spd import SPD, spd_affine_dist, spd_affine_step
from shiftwatch.operators.state_codec import dumps_state, loads_state
from shiftwatch.records import BadInput, DeadLetter
from shiftwatch.streams.synthetic import GrassmannStream, WishartSPDStream


@pytest.fixture(scope="module")
def spd_stream():
    return np.array([r["value"] for r in WishartSPDStream(n=2000, change_point=1500, seed=1)])


@pytest.fixture(scope="module")
def grassmann_stream():
    return np.array([r["value"] for r in GrassmannStream(n=2000, change_point=1500, seed=1)])


def alarms_of(det, xs):
    out = []
    for t, x in enumerate(xs):
        det.update(x)
        if det.drift_detected:
            out.append(t)
    return out


def test_regression_alarm_indices(spd_stream, grassmann_stream):
    assert alarms_of(KarcherDetector("spd", threshold=0.35, update="retraction"),
                     spd_stream) == [1518]
    g = KarcherDetector("grassmann", update="retraction").score_many(grassmann_stream)
    h = float(g[400:1500].max()) * 1.05
    got = alarms_of(KarcherDetector("grassmann", threshold=h, update="retraction"),
                    grassmann_stream)
    assert len(got) >= 1 and 1500 <= got[0] < 1540


def test_paper_levels_spd_retraction(spd_stream):
    g = KarcherDetector("spd", update="retraction").score_many(spd_stream)
    assert abs(g[400:1500].mean() - 0.196) < 0.02  # authors: 0.196 +- 0.020
    assert 0.33 < g[1500:1600].max() < 0.42


@pytest.mark.parametrize("warm_start", [False, True])
def test_exp_update_matches_geomstats_written_update(spd_stream, warm_start):
    # The paper's recursion (warm_start=False), and the warm start: the t-th sample moves
    # each estimate max(2 step, 1 / t) of the way (the running Karcher mean at first).
    space = SPDMatrices(8, equip=False)
    space.equip_with_metric(SPDAffineMetric)
    metric = space.metric
    xs = spd_stream[:60]
    p0, p1, ref = xs[0], xs[0], [0.0]
    for t, x in enumerate(xs[1:], start=2):
        w = 1.0 / t if warm_start else 0.0
        p0 = metric.exp(max(0.02, w) * metric.log(x, p0), p0)
        p1 = metric.exp(max(0.04, w) * metric.log(x, p1), p1)
        ref.append(float(metric.dist(p0, p1)))
    got = KarcherDetector(SPD(8), warm_start=warm_start).score_many(xs)
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)
    if warm_start:  # both estimates are the running mean until 1 / t < 0.04
        assert np.all(got[:25] < 1e-12) and got[30] > 0.01


@pytest.mark.parametrize("update", ["exp", "retraction"])
def test_fused_spd_kernel_matches_the_step_by_step_lapack_update(update):
    # The allocation-free kernel (own eigensolver, factors reused) against the composition
    # of spd_affine_step / spd_affine_dist (LAPACK eigh, checked against geomstats), on an
    # ill-conditioned Wishart stream (scale with condition number 1e4) of 300 samples.
    rng = np.random.default_rng(3)
    q, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    scale = (q * np.geomspace(1.0, 1e-4, 6)) @ q.T
    g = rng.standard_normal((300, 9, 6)) @ np.linalg.cholesky((scale + scale.T) / 2).T
    xs = np.einsum("tki,tkj->tij", g, g)
    xs = (xs + xs.transpose(0, 2, 1)) / 2
    p0, p1, ref = xs[0], xs[0], [0.0]
    for x in xs[1:]:
        p0 = spd_affine_step(x, p0, 0.02, update == "retraction")
        p1 = spd_affine_step(x, p1, 0.04, update == "retraction")
        ref.append(spd_affine_dist(p0, p1))
    det = KarcherDetector(SPD(6), update=update, threshold=1e9, warm_start=False)
    got, _, _ = det.update_many(xs)
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)
    p0_got, p1_got = det.estimates
    assert np.abs(p0_got - p0).max() < 1e-9 * np.abs(p0).max()
    assert np.abs(p1_got - p1).max() < 1e-9 * np.abs(p1).max()


@pytest.mark.parametrize("manifold", ["spd", "spd-log-euclidean", "spd-bures-wasserstein"])
@pytest.mark.parametrize("update", ["exp", "retraction"])
def test_every_spd_metric_reacts_to_the_change(spd_stream, manifold, update):
    g = KarcherDetector(manifold, update=update).score_many(spd_stream)
    assert np.all(np.isfinite(g))
    assert g[1500:1600].max() > 1.4 * np.percentile(g[400:1500], 99)


def test_log_euclidean_retraction_is_the_exact_step(spd_stream):
    a = KarcherDetector("spd-log-euclidean", update="exp").score_many(spd_stream[:100])
    b = KarcherDetector("spd-log-euclidean", update="retraction").score_many(spd_stream[:100])
    assert np.array_equal(a, b)


@pytest.mark.parametrize("threshold", [0.3, "adaptive", "calibrated"])
def test_update_many_and_operator_batch_equal_the_loop(spd_stream, threshold):
    params = {"threshold": threshold, "burn_in": 100, "calibration": 200, "target_arl": 300.0}
    xs = spd_stream[:1700]
    loop = KarcherDetector("spd", **params)
    g_loop, a_loop = [], []
    for x in xs:
        loop.update(x)
        g_loop.append(loop.statistic)
        a_loop.append(loop.drift_detected)
    many = KarcherDetector("spd", **params)
    g, a, _ = many.update_many(xs)
    assert np.array_equal(g, g_loop) and a.tolist() == a_loop
    assert dumps_state(many.state_dict()) == dumps_state(loop.state_dict())
    records = [{"value": x.tolist(), "ts": float(i)} for i, x in enumerate(xs)]
    op_loop = create("karcher", **params)
    outs = [o for r in records for o in op_loop.process(r)]
    assert create("karcher", **params).process_batch(records) == outs


@pytest.mark.parametrize("params", [{}, {"threshold": 0.25}, {"threshold": "adaptive"},
                                    {"warm_start": False, "threshold": "adaptive"}])
def test_defaults_batch_equals_loop_and_restores_mid_warm_start(spd_stream, params):
    # The default burn-in (derived) and warm start (one kernel call per warm sample), with
    # resets at alarms: update_many == the update loop, and a state saved inside the warm
    # phase restores and continues the same.
    xs = spd_stream[:1700]
    loop = KarcherDetector("spd", **params)
    g_loop, a_loop = [], []
    for x in xs:
        loop.update(x)
        g_loop.append(loop.statistic)
        a_loop.append(loop.drift_detected)
    g, a, _ = KarcherDetector("spd", **params).update_many(xs)
    assert np.array_equal(g, g_loop) and a.tolist() == a_loop and sum(a_loop) >= 1
    first = KarcherDetector("spd", **params)
    first.update_many(xs[:20])
    restored = KarcherDetector("spd", **params)
    restored.load_state_dict(loads_state(dumps_state(first.state_dict())))
    g2, a2, _ = restored.update_many(xs[20:])
    assert np.array_equal(g2, g[20:]) and np.array_equal(a2, a[20:])


def test_default_burn_in_is_what_the_statistic_needs():
    # burn_in=None: the slow estimate's memory 1 / (2 step_slow) plus the fast one's.
    assert KarcherDetector().burn_in_length == 50 + 25
    assert KarcherDetector(step_slow=0.05, step_fast=0.1).burn_in_length == 10 + 5
    assert KarcherDetector(burn_in=400).burn_in_length == 400


def test_adaptive_threshold_alarms_on_a_short_stream():
    # A few hundred records (a change at 150 of 300): the derived burn-in and warm start with
    # the authors' adaptive threshold find it; burn_in=400, warm_start=False (the defaults
    # before issue 23) could not alarm at all, nor can the default calibrated threshold,
    # whose burn-in and calibration (75 + 500) are longer than the stream.
    xs = np.array([r["value"] for r in WishartSPDStream(n=300, change_point=150, seed=3,
                                                         dim=4, c=1.0)])
    got = alarms_of(KarcherDetector("spd", threshold="adaptive"), xs)
    assert any(150 <= t < 220 for t in got), got
    assert alarms_of(KarcherDetector("spd", threshold="adaptive", burn_in=400,
                                     warm_start=False), xs) == []
    assert alarms_of(KarcherDetector("spd"), xs) == []


def test_reset_on_alarm(spd_stream):
    det = KarcherDetector("spd", threshold=0.3, burn_in=50)
    got = alarms_of(det, spd_stream)
    # after each alarm the estimates restart, so alarms are at least burn_in apart
    assert got and all(b - a > 50 for a, b in zip(got, got[1:], strict=False))
    det = KarcherDetector("spd", threshold=0.3, burn_in=50, reset_on_alarm=False)
    got_no_reset = alarms_of(det, spd_stream)
    assert len(got_no_reset) > len(got)


def test_score_many_leaves_the_detector_unchanged(spd_stream):
    det = KarcherDetector("spd")
    for x in spd_stream[:10]:
        det.update(x)
    before = dumps_state(det.state_dict())
    g = det.score_many(spd_stream[10:20])
    assert dumps_state(det.state_dict()) == before
    for x, gx in zip(spd_stream[10:20], g, strict=True):
        det.update(x)
        assert det.statistic == gx
    with pytest.raises(BadInput, match="shape"):
        det.score_many(np.zeros((3, 4, 4)))


def test_bad_input_leaves_state_untouched_and_becomes_a_dead_letter(spd_stream):
    det = KarcherDetector("spd", burn_in=10)
    for x in spd_stream[:20]:
        det.update(x)
    before = dumps_state(det.state_dict())
    bad = [np.eye(3), np.full((8, 8), np.nan), spd_stream[0] + np.triu(np.ones((8, 8)), 1),
           -spd_stream[0]]
    for b in bad:
        with pytest.raises(BadInput):
            det.update(b)
        assert dumps_state(det.state_dict()) == before
    op = create("karcher", burn_in=10)
    recs = [{"value": x.tolist()} for x in spd_stream[:5]] + [{"value": (-spd_stream[0]).tolist()}]
    out = op.process_batch(recs)
    assert isinstance(out[-1], DeadLetter) and "positive definite" in out[-1].reason


def test_state_roundtrip_mid_stream(grassmann_stream):
    det = KarcherDetector(Grassmann(20, 5), threshold="adaptive", burn_in=50)
    for x in grassmann_stream[:300]:
        det.update(x)
    twin = det.clone()
    twin.load_state_dict(loads_state(dumps_state(det.state_dict())))
    g1, a1, _ = det.update_many(grassmann_stream[300:600])
    g2, a2, _ = twin.update_many(grassmann_stream[300:600])
    assert np.array_equal(g1, g2) and np.array_equal(a1, a2)


@pytest.mark.parametrize("warm_start", [False, True])
def test_adaptive_threshold_follows_the_authors_rule(spd_stream, warm_start):
    # The authors' moments from 0; with the warm start divided by their total weight
    # 1 - 0.995^n (the weighted moments of the statistics seen, without a zero past).
    det = KarcherDetector("spd", threshold="adaptive", burn_in=10, reset_on_alarm=False,
                          warm_start=warm_start)
    m = v = w = 0.0
    for x in spd_stream[:200]:
        det.update(x)
        g = det.statistic
        m = 0.995 * m + 0.005 * g
        v = 0.995 * v + 0.005 * g * g
        w = 0.995 * w + 0.005
        mm, vv = (m / w, v / w) if warm_start else (m, v)
        assert det.threshold_value == pytest.approx(mm + 1.64 * np.sqrt(max(vv - mm * mm, 0)),
                                                    rel=1e-12, abs=1e-15)


def test_calibrated_threshold_hits_its_target_roughly():
    # An AR(1) log-statistic with known behaviour: the realised ARL is within a factor 2.
    rng = np.random.default_rng(3)
    z = np.zeros(400_000)
    e = rng.normal(size=z.size) * np.sqrt(1 - 0.95 ** 2)
    for t in range(1, z.size):
        z[t] = 0.95 * z[t - 1] + e[t]
    g = np.exp(0.1 * z)
    h = calibrate_threshold(g[:3000], 500)
    # run lengths with a restart 100 samples after each crossing (as a burn-in would)
    lengths, pos = [], 0
    for i in np.flatnonzero(g[3000:] >= h):
        if i >= pos:
            lengths.append(i - pos + 1)
            pos = i + 100
    assert len(lengths) > 100
    assert 250 < np.mean(lengths) < 1000


def test_parameter_validation():
    for kwargs, msg in [({"manifold": "torus"}, "manifold must be"),
                        ({"step_slow": 0.0}, "step_slow must be"),
                        ({"step_slow": 0.05, "step_fast": 0.02}, "step_slow must be <"),
                        ({"threshold": "auto"}, "threshold must be"),
                        ({"threshold": -1.0}, "threshold must be"),
                        ({"update": "euler"}, "update must be"),
                        ({"burn_in": 0}, "burn_in must be"),
                        ({"burn_in": 2.5}, "burn_in must be"),
                        ({"warm_start": 1}, "warm_start must be"),
                        ({"calibration": 5}, "calibration must be")]:
        with pytest.raises(ValueError, match=msg):
            KarcherDetector(**kwargs)
        with pytest.raises(ValueError, match=msg):
            create("karcher", **kwargs)


@pytest.mark.parametrize(("transform", "params", "manifold"), [
    ("window_covariance", {"window": 20}, "spd"),
    ("window_subspace", {"window": 20, "rank": 2}, "grassmann"),
    ("normalize_sphere", {}, "sphere"),
])
def test_transforms_feed_karcher(transform, params, manifold):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 4))
    x[200:, 1] += 1.5 * x[200:, 0]  # a change in the correlation structure
    x[:, 0] += 2.0  # keep the sphere points away from the origin
    records = [{"value": v.tolist(), "offset": i} for i, v in enumerate(x)]
    points = create(transform, **params).process_batch(records)
    assert not any(isinstance(p, DeadLetter) for p in points)
    out = create("karcher", manifold=manifold, burn_in=30, step_slow=0.02,
                 step_fast=0.05).process_batch(points)
    assert len(out) == len(points) and not any(isinstance(o, DeadLetter) for o in out)
    g = np.array([o["statistic"] for o in out])
    assert np.all(np.isfinite(g))


def test_operator_locates_the_change_and_keeps_a_bounded_window():
    from shiftwatch.operators import create
    from shiftwatch.streams.synthetic import WishartSPDStream

    errs, delays = [], []
    for seed in range(6):
        recs = [{"value": r["value"], "ts": float(i)} for i, r in enumerate(
            WishartSPDStream(n=1000, change_point=600, dim=3, df=6, seed=seed + 1))]
        params = dict(manifold="spd", burn_in=100, update="retraction", locate_window=300)
        op = create("karcher", **params)
        outs = op.process_batch(recs[:700])
        twin = create("karcher", **params)
        twin.load_state_dict(op.state_dict())
        assert len(op._window) <= 300 and twin._window.count == 700
        outs += twin.process_batch(recs[700:])
        hit = next(((i, o) for i, o in enumerate(outs) if o["alarm"] and i >= 600), None)
        if hit is None:
            continue
        assert hit[1]["change_ts"] == float(hit[1]["change_at"])
        errs.append(abs(hit[1]["change_at"] - 600))
        delays.append(hit[0] - 600)
    assert len(errs) >= 3 and np.median(errs) < np.median(delays), (errs, delays)


@pytest.mark.parametrize("params", [
    {"threshold": 0.24, "reset_on_alarm": False},
    {"threshold": "calibrated", "calibration": 50, "target_arl": 40.0, "reset_on_alarm": False},
    {"threshold": "calibrated", "calibration": 50, "target_arl": 40.0},
    {"threshold": 0.22, "burn_in": 7},
])
@pytest.mark.parametrize("stop", [False, True])
@pytest.mark.parametrize("run", [7, 512])
def test_judging_in_arrays_equals_the_loop(monkeypatch, spd_stream, params, stop, run):
    """``update_many`` judges the burn-in, the calibration and the values below a fixed
    threshold in arrays, and runs the kernel ``KERNEL_RUN`` samples at a time: the
    statistics, alarms, thresholds and state are the loop's, with and without resets, whole
    or stopped at each alarm."""
    monkeypatch.setattr(KarcherDetector, "KERNEL_RUN", run)
    xs = spd_stream[:1200]
    loop = KarcherDetector("spd", **params)
    g_loop, a_loop, h_loop = [], [], []
    for x in xs:
        loop.update(x)
        g_loop.append(loop.statistic)
        a_loop.append(loop.drift_detected)
        h_loop.append(np.nan if loop.threshold_value is None else loop.threshold_value)
    many = KarcherDetector("spd", **params)
    parts = []
    i = 0
    while i < len(xs):  # (stopped at each alarm, or in pieces of 333)
        got = many.update_many(xs[i:i + 333], stop_at_alarm=stop)
        parts.append(got)
        i += len(got[0])
    g, a, h = (np.concatenate([p[k] for p in parts]) for k in range(3))
    assert np.array_equal(g, g_loop) and a.tolist() == a_loop
    assert np.array_equal(h, h_loop, equal_nan=True)
    assert sum(a_loop) >= 2
    assert dumps_state(many.state_dict()) == dumps_state(loop.state_dict())
