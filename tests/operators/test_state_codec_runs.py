"""Float64 runs in the state codec (issue 25): a window's ``ts`` that is an arithmetic run or
integers a few apart is written as ``arange`` or ``delta``; every array comes back bit for bit,
whatever its values, and the decoder refuses what the encoder would not write."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shiftwatch.operators.state_codec import (
    apply_state_patch,
    decode_state,
    dumps_state,
    encode_state,
    loads_state,
)


def round_trip(arr: np.ndarray) -> np.ndarray:
    back = loads_state(dumps_state({"a": arr}))["a"]
    assert back.dtype == arr.dtype and back.shape == arr.shape
    return back


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


@pytest.mark.parametrize("arr, form", [
    (np.arange(1000) * 1000.0 + 7, "arange"),          # a key's ts in the Quix benchmark
    (np.array([float(f"{1.7e9 + k / 100:.2f}") for k in range(500)]), "delta"),  # 100 Hz, text
    (np.array([float(f"{20 + np.sin(k / 9):.2f}") for k in range(300)]), "delta"),  # readings
    (np.array([-1.5, -1.25, 3.5, 0.0625] * 3), "delta"),  # 4 decimals, int32
    (np.array([-1.5, -1.25, 3.5, 0.0625]), None),        # saves too little
    (np.array([1.5, 2.5, 3.125, 4.5]), None),            # more decimals inside: not looked for
    (np.arange(4.0), "arange"),
    (np.array([1.0, 2.0, 4.0, 5.0, 9.0]), "delta"),
    (1.7e12 + np.cumsum(np.r_[0, 1000 + np.arange(-3, 300) % 7]), "delta"),  # epoch ms, jitter
    (np.arange(8) * 40000.0 + np.arange(8) % 2, "delta"),  # int16 too small: int32
    (np.random.default_rng(0).normal(size=100), None),   # values: the plain form
    (np.array([0.0, -0.0, 1.0, 2.0]), None),             # -0.0 is not an integer's float
    (np.array([-0.0, 0.25, 0.5, 0.75] * 4), None),       # nor with decimals
    (np.array([0.25, -0.0, 0.5, 0.75] * 4), None),
    (np.array([np.nan, 1.0, 2.0, 3.0]), None),           # a missing ts
    (np.array([1.0, 2.0, 3.0, 2.0 ** 54]), None),        # beyond 2**53
    (np.array([0.0, 1.0, 2.0 ** 40, 2.0 ** 41]), None),  # a difference beyond int32
    (np.arange(3.0), None),                              # too short to bother
])
def test_forms_and_exact_round_trip(arr, form):
    enc = encode_state(arr)
    assert (("arange" in enc and "arange") or ("delta" in enc and "delta") or None) == form
    assert same_bits(round_trip(arr), arr)
    if form is not None:  # and smaller than the plain form
        plain = len(json.dumps(encode_state(arr.astype(">f8"))))
        assert len(json.dumps(enc)) < plain


@settings(max_examples=300, deadline=None)
@given(hnp.arrays(np.float64, st.integers(0, 40),
                  elements=st.floats(allow_nan=True, allow_infinity=True, width=64)))
def test_any_float64_array_round_trips(arr):
    assert same_bits(round_trip(arr), arr)


NEAR_RUNS = [-0.0, 0.0, 1.0, -1.0, 0.25, 0.5, -2.25, 0.1, 0.001, 1e-9, 1.5e-9, 3.0, 1e6 + 0.5,
             2.0 ** 53, 2.0 ** 53 + 2, -2.0 ** 53, 1e300, 5e-324, float("nan"), float("inf")]


@settings(max_examples=500, deadline=None)
@given(hnp.arrays(np.float64, st.integers(4, 40), elements=st.sampled_from(NEAR_RUNS)))
def test_arrays_near_the_forms_round_trip(arr):
    assert same_bits(round_trip(arr), arr)


@settings(max_examples=300, deadline=None)
@given(st.floats(-1e15, 1e15), st.floats(-1e6, 1e6), st.integers(4, 300))
def test_runs_round_trip(first, step, n):
    arr = np.arange(n, dtype=np.float64) * step + first
    assert same_bits(round_trip(arr), arr)
    ints = np.floor(arr)
    assert same_bits(round_trip(ints), ints)


@settings(max_examples=200, deadline=None)
@given(st.integers(-2 ** 53, 2 ** 53), st.lists(st.integers(-2 ** 33, 2 ** 33), min_size=3,
                                                 max_size=60))
def test_integers_round_trip(first, steps):
    arr = (first + np.cumsum(np.array([0, *steps], dtype=np.int64))).astype(np.float64)
    assert same_bits(round_trip(arr), arr)


def test_a_window_patch_of_runs_applies():
    old = {"ts": np.arange(10) * 3.0}
    patch = loads_state(dumps_state([["append", ["ts"], np.arange(10, 16) * 3.0, 12]]))
    assert same_bits(apply_state_patch(old, patch)["ts"], np.arange(4, 16) * 3.0)


GOOD_ARANGE = {"__ndarray__": "", "dtype": "<f8", "shape": [5], "arange": [1.0, 2.0]}
GOOD_DELTA = encode_state(np.array([1.0, 2.0, 4.0, 5.0, 9.0]))


@pytest.mark.parametrize("bad", [
    {**GOOD_ARANGE, "dtype": "<f4"},
    {**GOOD_ARANGE, "shape": [3]},                    # shorter than the encoder writes
    {**GOOD_ARANGE, "shape": [2, 3]},
    {**GOOD_ARANGE, "shape": [5.0]},
    {**GOOD_ARANGE, "shape": [1 << 40]},              # no 8 TB array from 60 bytes
    {**GOOD_ARANGE, "arange": [1.0]},
    {**GOOD_ARANGE, "arange": [1.0, True]},
    {**GOOD_ARANGE, "arange": [1.0, "2"]},
    {**GOOD_ARANGE, "__ndarray__": "AAAA"},
    {**GOOD_ARANGE, "extra": 1},
    {**GOOD_DELTA, "delta": [1, "<i8", 0]},
    {**GOOD_DELTA, "delta": [1.0, "<i1", 0]},
    {**GOOD_DELTA, "delta": [2 ** 60, "<i1", 0]},
    {**GOOD_DELTA, "delta": [1, "<i1"]},
    {**GOOD_DELTA, "delta": [1, "<i1", 10]},
    {**GOOD_DELTA, "delta": [1, "<i1", -1]},
    {**GOOD_DELTA, "delta": [1, "<i1", 1.0]},
    {**GOOD_DELTA, "__ndarray__": GOOD_DELTA["__ndarray__"][:-4]},  # too few differences
    {**GOOD_DELTA, "__ndarray__": "!!!!"},
    {**GOOD_DELTA, "__ndarray__": None, "items": []},
    {"__ndarray__": "f39/", "dtype": "<f8", "shape": [4], "delta": [2 ** 53, "<i1", 0]},
])
def test_malformed_runs_are_refused(bad):
    with pytest.raises(ValueError):
        decode_state(bad)
