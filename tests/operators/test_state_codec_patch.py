"""State patches: ``apply_state_patch`` of an operator's ``state_patch`` on its previous
state_dict (as the changelog stores both, through the state codec) gives its state_dict."""

from __future__ import annotations

import numpy as np
import pytest

from shiftwatch.operators import create
from shiftwatch.operators.locate import ValueWindow
from shiftwatch.operators.state_codec import (
    apply_state_patch,
    diff_state,
    dumps_state,
    loads_state,
)


def _walk(op, records, rng, locate=True):
    """Feed ``records`` in random slices; after each, check the patch against the previous
    version (through bytes, as the changelog has them). Returns how many patches applied."""
    i, base, token, applied = 0, None, None, 0
    while i < len(records):
        k = int(rng.integers(1, 60))
        op.process_batch(records[i:i + k])
        i += k
        whole = dumps_state(op.state_dict())
        state, tok = op.state_with_token()
        assert dumps_state(state) == whole
        if base is not None:
            patch, tok2 = op.state_patch(token)
            if patch is not None:
                data = dumps_state(patch)
                got = apply_state_patch(loads_state(base), loads_state(data))
                assert dumps_state(got) == whole
                assert len(data) < len(whole)
                applied += 1
        base, token = whole, tok
    return applied


@pytest.mark.parametrize("detector,params", [
    ("river:ADWIN", {}), ("river:ADWIN", {"locate_window": 40}),
    ("river:ADWIN", {"locate": False}), ("river:PageHinkley", {"locate": "meanvar"}),
    ("river:KSWIN", {"seed": 1, "locate_window": 100})])
def test_patch_of_the_previous_version_gives_the_state(detector, params):
    rng = np.random.default_rng(5)
    x = np.r_[rng.normal(0, 1, 400), rng.normal(4, 1, 300), rng.normal(-2, 1, 400)]
    # ts: present, missing, then present again (the ts buffer appears late)
    recs = [{"value": float(v), **({"ts": float(j)} if j > 150 and j % 11 else {})}
            for j, v in enumerate(x)]
    op = create(detector, **params)
    assert op.state_with_token()[1] is None and op.state_patch(None) == (None, None)
    assert _walk(op, recs, rng) > 10


def test_vector_values_and_a_window_that_overflows():
    rng = np.random.default_rng(2)
    x = np.r_[rng.normal(0, 1, (300, 3)), rng.normal(3, 1, (300, 3))]
    op = create("river:ADWIN", locate_window=16)
    recs = [{"ts": float(j), "value": v.tolist()} for j, v in enumerate(x)]
    assert _walk(op, recs, rng) > 3
    # more values than the window holds since the token: no patch (it would be no smaller)
    token = op.state_with_token()[1]
    op.process_batch(recs[:40])
    assert op.state_patch(token)[0] is None


def test_a_patch_is_only_for_the_same_operator_and_window():
    a, b = create("river:ADWIN"), create("river:ADWIN")
    recs = [{"ts": float(j), "value": float(j % 5)} for j in range(30)]
    a.process_batch(recs[:10])
    b.process_batch(recs[:5])
    token = a.state_with_token()[1]
    b.process_batch(recs[5:20])  # b's count passes a's: still not a's window
    assert b.state_patch(token)[0] is None
    a.load_state_dict(a.state_dict())  # a new window object
    assert a.state_patch(token)[0] is None


def test_window_patch_after_drop_and_empty():
    w = ValueWindow(capacity=8)
    w.push_many([1.0, 2.0, 3.0], ts=[1.0, 2.0, 3.0])
    base, token = w.state_dict(), w.patch_token()
    w.drop_before(3)  # nothing held
    got = apply_state_patch({"w": base}, w.state_patch(token, ["w"]))["w"]
    assert dumps_state(got) == dumps_state(w.state_dict())
    token = w.patch_token()
    w.push(4.0, ts=4.0)
    got = apply_state_patch({"w": got}, w.state_patch(token, ["w"]))["w"]
    assert dumps_state(got) == dumps_state(w.state_dict()) and got["values"].tolist() == [4.0]
    token = w.patch_token()  # nothing new: the patch only sets the same counters
    got = apply_state_patch({"w": got}, w.state_patch(token, ["w"]))["w"]
    assert dumps_state(got) == dumps_state(w.state_dict())


def test_apply_state_patch_refuses_what_does_not_apply():
    s = {"a": [1, 2], "w": {"v": np.zeros(2)}}
    for patch in ("x", [["nope", ["a"], 1]], [["set", ["b", "c"], 1]],
                  [["append", ["w", "v"], np.zeros(1), 4]],
                  [["append", ["w", "v"], np.zeros((1, 2)), 1]],
                  [["set", ["a", 5], 0]], [["append", ["w", "v"], np.zeros(1), -1]]):
        with pytest.raises(ValueError):
            apply_state_patch(s, patch)
    assert apply_state_patch(s, [["append", ["a"], [3], 2]])["a"] == [2, 3]
    assert apply_state_patch(s, [["set", [], 7]]) == 7


def test_diff_state_is_exact_on_floats_and_odd_strings():
    import base64

    old = {"x": 0.0, "l": [1, 2.5, True], "s": "A" * 100, "b": base64.b64encode(bytes(90)).decode()}
    new = {"x": -0.0, "l": [1, 2.5, 1], "s": "B" * 100, "b": base64.b64encode(bytes(80)).decode()}
    ops = diff_state(old, new)
    got = apply_state_patch(loads_state(dumps_state(old)), loads_state(dumps_state(ops)))
    assert dumps_state(got) == dumps_state(new)
    assert repr(got["x"]) == "-0.0" and got["l"][2] == 1 and got["l"][2] is not True
    assert diff_state(new, new) == []
