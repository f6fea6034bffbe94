"""Synthetic generators: seeded reproducibility, shapes, geometry, and a real change."""

from __future__ import annotations

import numpy as np
import pytest

from shiftwatch.streams.synthetic import (
    BetaStream,
    GaussianShift,
    GrassmannStream,
    WishartSPDStream,
    random_spd_scale,
)


def values(src):
    return np.array([r["value"] for r in src])


@pytest.mark.parametrize("make", [
    lambda s: GaussianShift(n=300, change_points=(150,), seed=s),
    lambda s: GaussianShift(n=300, change_points=(150,), dim=3, seed=s),
    lambda s: BetaStream(n=300, change_point=100, seed=s),
    lambda s: WishartSPDStream(n=50, change_point=25, dim=4, df=5, seed=s),
    lambda s: GrassmannStream(n=30, change_point=15, ambient=8, rank=3, seed=s),
])
def test_seeded_reproducible_and_records_well_formed(make):
    a, b, c = list(make(7)), list(make(7)), list(make(8))
    assert a == b
    assert a != c
    src = make(7)
    assert list(src) == a  # iterating again restarts the stream
    assert len(a) == src.length
    assert [r["ts"] for r in a] == [float(i) for i in range(len(a))]
    assert all(set(r) == {"key", "ts", "value"} and r["key"] is None for r in a)
    assert list(src.annotations) == ["truth"]


def test_gaussian_mean_and_variance_shift_and_shapes():
    x = values(GaussianShift(n=4000, change_points=(1000, 3000), means=(0, 2, 2),
                             sigmas=(1, 1, 3), seed=0))
    assert x.shape == (4000,)
    assert abs(x[:1000].mean()) < 0.1 and abs(x[1000:3000].mean() - 2) < 0.1
    assert abs(x[1000:3000].std() - 1) < 0.1 and abs(x[3000:].std() - 3) < 0.2
    v = values(GaussianShift(n=10, change_points=(5,), means=(0, [1, 2]), dim=2))
    assert v.shape == (10, 2)
    assert isinstance(next(iter(GaussianShift(n=3, change_points=(1,))))["value"], float)
    assert GaussianShift(n=10, change_points=(3, 6), means=(0, 1, 2),
                         sigmas=(1, 1, 1)).annotations == {"truth": [3, 6]}


@pytest.mark.parametrize("kwargs, match", [
    ({"change_points": (0,)}, "change_points"),
    ({"change_points": (600, 500), "means": (0, 1, 2), "sigmas": (1, 1, 1)}, "change_points"),
    ({"means": (0,)}, "one entry per segment"),
    ({"sigmas": (1, 0)}, "sigmas must be finite and > 0"),
    ({"dim": 0}, "dim"),
    ({"n": 0}, "n must be"),
])
def test_gaussian_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GaussianShift(**kwargs)


def test_beta_mean_shift_keeps_concentration_and_is_real():
    for shift in (0.05, 0.1, 0.175):
        a, b = BetaStream.post_for_mean_shift((2.0, 6.0), shift)
        assert a + b == pytest.approx(8.0)
        assert a / (a + b) == pytest.approx(0.25 + shift)
    src = BetaStream.with_mean_shift(0.175, n=6000, change_point=3000, seed=1)
    x = values(src)
    assert np.all((x >= 0) & (x <= 1))
    assert src.means == pytest.approx((0.25, 0.425))
    assert abs(x[:3000].mean() - 0.25) < 0.01 and abs(x[3000:].mean() - 0.425) < 0.01
    assert BetaStream(n=10, change_point=None).annotations == {"truth": []}
    with pytest.raises(ValueError, match="outside"):
        BetaStream.post_for_mean_shift((2.0, 6.0), 0.8)
    with pytest.raises(ValueError, match="change_point"):
        BetaStream(n=10, change_point=10)
    with pytest.raises(ValueError, match="pre"):
        BetaStream(pre=(0, 1))


def test_random_spd_scale_follows_the_papers_recipe():
    rng = np.random.default_rng(1)
    u, _, _ = np.linalg.svd(rng.standard_normal((8, 8)))
    e = rng.random(8) + 1e-6
    c = 1.6 * rng.random()
    m0, m1, c_used = random_spd_scale(np.random.default_rng(1), 8)
    assert c_used == c
    np.testing.assert_allclose(m0, u @ np.diag(e / e.sum() + 1e-6) @ u.T, atol=1e-15)
    np.testing.assert_allclose(m1, u @ np.diag((e + c) / (e + c).sum() + 1e-6) @ u.T,
                               atol=1e-15)


def test_wishart_spd_shapes_and_mean_matches_df_times_scale():
    src = WishartSPDStream(seed=1)  # the paper's setting: n=2000, change at 1500, 8x8, df=11
    x = values(src)
    assert x.shape == (2000, 8, 8) and src.annotations == {"truth": [1500]}
    assert np.array_equal(x, x.transpose(0, 2, 1))
    assert np.linalg.eigvalsh(x).min() > 0
    m0, m1 = src.scale_before, src.scale_after
    assert np.abs(x[:1500].mean(0) - 11 * m0).max() < 0.15
    assert np.abs(x[1500:].mean(0) - 11 * m1).max() < 0.2
    # the change is larger than the estimation error
    assert np.abs(11 * (m1 - m0)).max() > 0.3
    # an explicit c equal to the drawn one gives the same stream
    same = WishartSPDStream(n=20, change_point=10, c=src.eig_offset, seed=1)
    assert list(same) == list(WishartSPDStream(n=20, change_point=10, seed=1))
    with pytest.raises(ValueError, match="df"):
        WishartSPDStream(dim=8, df=3)


def test_grassmann_points_orthonormal_and_change_is_real():
    src = GrassmannStream(n=400, change_point=200, ambient=20, rank=5, shift=1.0, seed=1)
    x = values(src)
    assert x.shape == (400, 20, 5)
    gram = np.einsum("tij,tik->tjk", x, x)
    np.testing.assert_allclose(gram, np.broadcast_to(np.eye(5), gram.shape), atol=1e-10)
    # mean projection matrices before/after differ more than two halves of the same segment
    p = np.einsum("tij,tkj->tik", x, x)
    within = np.linalg.norm(p[:100].mean(0) - p[100:200].mean(0))
    across = np.linalg.norm(p[100:200].mean(0) - p[200:300].mean(0))
    assert across > 3 * within
    with pytest.raises(ValueError, match="rank"):
        GrassmannStream(ambient=3, rank=4)


def test_scale_seed_fixes_the_change_across_sample_seeds():
    import numpy as np

    from shiftwatch.streams.synthetic import GrassmannStream, WishartSPDStream

    a = WishartSPDStream(n=6, change_point=3, dim=3, df=4, seed=1, scale_seed=9)
    b = WishartSPDStream(n=6, change_point=3, dim=3, df=4, seed=2, scale_seed=9)
    assert np.array_equal(a.scale_after, b.scale_after)
    assert not np.array_equal([r["value"] for r in a], [r["value"] for r in b])
    # default: parameters follow the seed, as before
    c = WishartSPDStream(n=6, change_point=3, dim=3, df=4, seed=2)
    assert not np.array_equal(a.scale_after, c.scale_after)
    g1 = [r["value"] for r in GrassmannStream(n=3, change_point=2, ambient=6, rank=2, seed=1,
                                               scale_seed=5)]
    g2 = [r["value"] for r in GrassmannStream(n=3, change_point=2, ambient=6, rank=2, seed=1,
                                               scale_seed=5)]
    assert np.array_equal(g1, g2)
