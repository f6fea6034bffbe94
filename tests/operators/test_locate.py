"""The generic change locator: split statistics against brute force, the bounded window."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shiftwatch.operators.locate import (
    ValueWindow,
    locate_change,
    mean_change_split,
    variance_change_split,
)


def brute_mean(x, min_size=1):
    x = np.asarray(x, dtype=float)
    x2 = x[:, None] if x.ndim == 1 else x
    n = len(x2)
    var = x2.var(axis=0) if x2.shape[1] > 1 else np.ones(1)
    best, arg = -1.0, 0
    for k in range(min_size, n - min_size + 1):
        s = sum(k * (n - k) / n * (x2[:k, j].mean() - x2[k:, j].mean()) ** 2 / var[j]
                for j in range(x2.shape[1]))
        if s > best + 1e-12 * max(1.0, abs(best)):
            best, arg = s, k
    return arg, best


def brute_meanvar(x, min_size=2):
    x = np.asarray(x, dtype=float)
    n = len(x)
    best, arg = None, 0
    for k in range(min_size, n - min_size + 1):
        s = n * np.log(x.var()) - k * np.log(x[:k].var()) - (n - k) * np.log(x[k:].var())
        if best is None or s > best + 1e-12 * max(1.0, abs(best)):
            best, arg = s, k
    return arg, best


@pytest.mark.parametrize("seed", range(8))
def test_mean_split_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 120))
    tau = int(rng.integers(1, n))
    x = rng.normal(0, 1, n) + 1e3  # far from zero: the prefix sums must not lose digits
    x[tau:] += rng.normal(0, 2)
    for min_size in (1, 3):
        k, s = mean_change_split(x, min_size=min_size)
        kb, sb = brute_mean(x, min_size=min_size)
        if n >= 2 * min_size:
            assert k == kb
            assert s == pytest.approx(sb, rel=1e-8)


@pytest.mark.parametrize("seed", range(4))
def test_mean_split_vector_matches_brute_force(seed):
    rng = np.random.default_rng(100 + seed)
    x = rng.normal(0, 1, (80, 3)) * np.array([1.0, 5.0, 0.1])
    x[50:, 1] += 4.0
    k, s = mean_change_split(x)
    kb, sb = brute_mean(x)
    assert k == kb and s == pytest.approx(sb, rel=1e-8)


@pytest.mark.parametrize("seed", range(8))
def test_variance_split_matches_brute_force(seed):
    rng = np.random.default_rng(200 + seed)
    n = int(rng.integers(6, 150))
    tau = int(rng.integers(2, n - 1))
    x = rng.normal(5.0, 1, n)
    x[tau:] = 5.0 + (x[tau:] - 5.0) * rng.uniform(0.2, 5.0)
    k, s = variance_change_split(x)
    kb, sb = brute_meanvar(x)
    assert k == kb
    assert s == pytest.approx(sb, rel=1e-7, abs=1e-7)


def test_short_inputs_and_bad_arguments():
    assert mean_change_split([1.0]) == (0, 0.0)
    assert variance_change_split([1.0, 2.0, 3.0]) == (0, 0.0)
    assert locate_change([]) == 0
    with pytest.raises(ValueError, match="kind"):
        locate_change([1.0, 2.0], kind="median")
    with pytest.raises(ValueError, match="min_size"):
        mean_change_split([1.0, 2.0], min_size=0)
    with pytest.raises(ValueError, match="x must be"):
        mean_change_split(np.zeros((2, 2, 2)))


def test_constant_segment_does_not_win_the_variance_split():
    x = np.r_[np.zeros(50), np.random.default_rng(1).normal(0, 1, 50)]
    assert variance_change_split(x)[0] == 50


def test_location_error_shrinks_with_shift_size():
    # Mean absolute error of the mean split on 200 values with a change at 120.
    rng = np.random.default_rng(5)
    errs = {}
    for shift in (0.5, 1.0, 2.0, 4.0):
        e = []
        for _ in range(100):
            x = rng.normal(0, 1, 200)
            x[120:] += shift
            e.append(abs(mean_change_split(x)[0] - 120))
        errs[shift] = float(np.mean(e))
    assert errs[0.5] > errs[1.0] > errs[2.0] >= errs[4.0]
    assert errs[2.0] < 2.0 and errs[4.0] < 0.5


def test_window_keeps_the_last_values_and_positions():
    w = ValueWindow(capacity=5)
    for i in range(12):
        w.push(float(i), ts=100.0 + i)
    assert w.values().tolist() == [7.0, 8.0, 9.0, 10.0, 11.0]
    assert (w.start, w.count, len(w)) == (7, 12, 5)
    assert w.ts_at(9) == 109.0 and w.ts_at(3) is None and w.ts_at(12) is None
    w.drop_before(10)
    assert w.values().tolist() == [10.0, 11.0] and w.start == 10
    w.drop_before(2)  # clamped: forgotten values do not come back
    assert w.values().tolist() == [10.0, 11.0]
    w.push(12.0)
    assert w.ts_at(12) is None and w.values().tolist() == [10.0, 11.0, 12.0]


def test_window_state_round_trip_is_json_able_and_exact():
    rng = np.random.default_rng(0)
    w = ValueWindow(capacity=7, dim=2)
    for i in range(17):
        w.push(rng.normal(size=2), ts=float(i))
    w.drop_before(13)
    state = w.state_dict()
    as_json = json.loads(json.dumps({k: v.tolist() if isinstance(v, np.ndarray) else v
                                     for k, v in state.items()}))
    for s in (state, as_json):
        w2 = ValueWindow.from_state_dict(s)
        assert np.array_equal(w2.values(), w.values())
        assert (w2.start, w2.count, w2.ts_at(15)) == (w.start, w.count, w.ts_at(15))
        x = rng.normal(size=2)
        w2.push(x)
        w3 = ValueWindow.from_state_dict(state)
        w3.push(x)
        assert np.array_equal(w2.values(), w3.values())
    with pytest.raises(ValueError, match="ValueWindow"):
        ValueWindow.from_state_dict({**state, "count": 1})
    with pytest.raises(ValueError, match="capacity"):
        ValueWindow(1)


def test_window_memory_grows_with_what_is_held_and_positions_only_mode():
    w = ValueWindow(capacity=1000)
    w.push_many(np.arange(5.0))
    assert w._buf.shape[0] < 100 and w._ts is None  # no ts pushed: no ts buffer
    w.push_many(np.arange(5.0, 300.0), ts=np.arange(295.0))
    assert 300 <= w._buf.shape[0] <= 1000
    assert w.values().tolist() == list(np.arange(300.0)) and w.ts_at(4) is None
    assert w.ts_at(5) == 0.0 and w.ts_at(299) == 294.0
    w.push_many(np.arange(300.0, 2500.0))
    assert w._buf.shape[0] == 1000 and w.start == 1500
    assert w.values().tolist() == list(np.arange(1500.0, 2500.0))
    light = ValueWindow(capacity=1000, keep_values=False)
    light.push_many(np.zeros(50), ts=np.arange(50.0))
    assert light._buf is None and light.ts_at(49) == 49.0 and len(light) == 50
    with pytest.raises(ValueError, match="keep_values"):
        light.values()
    twin = ValueWindow.from_state_dict(json.loads(json.dumps(
        light.state_dict(), default=lambda a: a.tolist())))
    assert twin.state_dict()["ts"].tolist() == light.state_dict()["ts"].tolist()
    assert twin.count == 50 and twin.start == 0 and not twin.keep_values


def test_window_state_round_trip_after_growth_and_drops():
    rng = np.random.default_rng(3)
    w = ValueWindow(capacity=64, dim=2)
    for k in (3, 20, 50, 7, 90):
        w.push_many(rng.normal(size=(k, 2)), ts=rng.normal(size=k))
        w.drop_before(w.count - k // 2)
        twin = ValueWindow.from_state_dict(w.state_dict())
        assert np.array_equal(twin.values(), w.values()) and twin.start == w.start
        assert [twin.ts_at(p) for p in range(w.start, w.count)] == \
            [w.ts_at(p) for p in range(w.start, w.count)]
