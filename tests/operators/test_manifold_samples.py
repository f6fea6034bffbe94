from __future__ import annotations

import numpy as np
import pytest

from shiftwatch.operators import manifold_samples
from shiftwatch.streams import synthetic


@pytest.mark.parametrize("kind, params", [
    ("WishartSPDStream", {"n": 30, "change_point": 12, "dim": 3, "df": 6, "seed": 4}),
    ("WishartSPDStream", {"n": 10, "change_point": None, "dim": 2, "df": 3, "c": 0.7, "seed": 1}),
    ("GrassmannStream", {"n": 25, "change_point": 9, "ambient": 6, "rank": 2, "shift": 1.0,
                         "seed": 3}),
])
def test_operator_side_generators_equal_the_stream_sources(kind, params):
    # The copy the operators' check suite uses must not drift from streams.synthetic.
    ours = [r["value"] for r in getattr(manifold_samples, kind)(**params)]
    theirs = [r["value"] for r in getattr(synthetic, kind)(**params)]
    assert len(ours) == params["n"]
    np.testing.assert_array_equal(np.array(ours), np.array(theirs))


def test_random_spd_scale_is_the_same_function_of_the_generator():
    a = manifold_samples.random_spd_scale(np.random.default_rng(5), 4)
    b = synthetic.random_spd_scale(np.random.default_rng(5), 4)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
