"""The fast ADWIN state writer (``operators/river/adwin_state.py``) and the sparse ``xorb``
patch: the same documents and patches as the generic codec, exact round trips, and
malformed patches refused with a ValueError (never a crash or a wrong state)."""

from __future__ import annotations

import base64
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from river import drift

from shiftwatch.operators import create
from shiftwatch.operators.object_state import decode_object, encode_object
from shiftwatch.operators.river.adwin_state import (
    adwin_doc,
    adwin_from_doc,
    adwin_parts,
    adwin_patch,
    fast_path_ok,
)
from shiftwatch.operators.state_codec import (
    apply_state_patch,
    diff_state,
    dumps_state,
    loads_state,
    xorb_data,
)


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


@pytest.mark.parametrize("params", [{}, {"delta": 0.1, "clock": 4}, {"grace_period": 50}])
def test_fast_writer_equals_the_generic_codec(params):
    assert fast_path_ok()
    rng = np.random.default_rng(11)
    x = np.r_[rng.normal(0, 1, 600), rng.normal(3, 2, 500), rng.exponential(1, 400)]
    det = drift.ADWIN(**params)
    prev_parts = prev_doc = None
    i = 0
    while i < len(x):
        k = int(rng.integers(1, 90))
        for v in x[i:i + k]:
            det.update(float(v))
        i += k
        parts = adwin_parts(det)
        doc = encode_object(det)
        assert adwin_doc(parts) == doc
        if prev_parts is not None:
            ops = adwin_patch(prev_parts, parts, ["d"])
            assert ops == diff_state(prev_doc, doc, ["d"])
            # through bytes, as the changelog holds them
            got = apply_state_patch(loads_state(dumps_state({"d": prev_doc})),
                                    loads_state(dumps_state(ops)))
            assert got["d"] == doc
            twin = decode_object(got["d"])
            assert twin._helper.__getstate__() == det._helper.__getstate__()
        prev_parts, prev_doc = parts, doc


def test_what_the_fast_writer_does_not_cover_takes_the_generic_path():
    class Mine(drift.ADWIN):
        pass

    det = drift.ADWIN()
    det.update(1.0)
    assert adwin_parts(det) is not None
    assert adwin_parts(Mine()) is None
    det.extra = 1
    assert adwin_parts(det) is None
    det2 = drift.ADWIN()
    det2.delta = float("nan")  # not finite: the generic codec tags it
    assert adwin_parts(det2) is None
    assert adwin_parts(drift.PageHinkley()) is None


def test_an_operator_whose_token_predates_the_fast_writer_still_patches():
    op = create("river:ADWIN")
    op.process_batch([{"value": float(v)} for v in range(50)])
    old = dumps_state(op.state_dict())
    state, token = op.state_with_token()
    # an older token (documents, no parts): the generic diff is used
    old_token = (*token[:3], [encode_object(op._detector)], None)
    op.process_batch([{"value": float(v)} for v in range(50, 60)])
    patch, new_token = op.state_patch(old_token)
    assert patch is not None and new_token[4] is not None
    got = apply_state_patch(loads_state(old), loads_state(dumps_state(patch)))
    assert dumps_state(got) == dumps_state(op.state_dict())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.binary(max_size=300), st.data())
def test_xorb_round_trips_any_bytes(old, new, data):
    # mostly small changes (what a patch is for), sometimes arbitrary ones
    if data.draw(st.booleans()) and old:
        b = bytearray(old)
        for i in data.draw(st.lists(st.integers(0, len(b) - 1), max_size=8)):
            b[i] ^= data.draw(st.integers(1, 255))
        new = bytes(b) + new[:data.draw(st.integers(0, 3))]
    enc = xorb_data(old, new)
    if enc is None:
        return
    assert len(enc) + 16 < len(_b64(new))
    got = apply_state_patch({"s": _b64(old)}, [["xorb", ["s"], enc, len(new)]])
    assert got["s"] == _b64(new)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120), st.binary(max_size=120), st.integers(-2, 200))
def test_malformed_xorb_data_is_refused_not_misapplied(old, raw, length):
    op = ["xorb", ["s"], _b64(raw), length]
    try:
        got = apply_state_patch({"s": _b64(old)}, [op])
    except ValueError:
        return
    # whatever applies is exactly the change the data describes: re-encoding it gives the
    # same data (the encoder's output is canonical)
    new = base64.b64decode(got["s"])
    assert len(new) == length
    padded = (old[:length] + bytes(max(0, length - len(old))))
    x = bytes(a ^ b for a, b in zip(padded, new, strict=True))
    nw = (length + 7) // 8
    words = [x[8 * w:8 * w + 8] for w in range(nw)]
    nz = [w for w in words if any(w)]
    word_bits = np.array([any(w) for w in words], dtype=bool)
    byte_bits = np.array([[c != 0 for c in w.ljust(8, b"\0")] for w in nz],
                         dtype=bool).reshape(-1)
    rebuilt = np.packbits(word_bits).tobytes() + np.packbits(byte_bits).tobytes() + \
        bytes(c for w in nz for c in w if c)
    assert rebuilt == raw


def test_changelogs_written_with_xor64_still_apply():
    old = bytes(range(200))
    new = old[:50] + b"\xff\xfe" + old[52:] + b"more"
    x = bytes(a ^ b for a, b in zip(old.ljust(len(new), b"\0"), new, strict=True))
    op = ["xor64", ["s"], _b64(zlib.compress(x, 6)), len(new)]
    assert apply_state_patch({"s": _b64(old)}, [op])["s"] == _b64(new)
    with pytest.raises(ValueError):
        apply_state_patch({"s": _b64(old)}, [["xor64", ["s"], _b64(b"junk"), len(new)]])


def test_fast_decoder_rebuilds_what_the_generic_one_does():
    rng = np.random.default_rng(3)
    det = drift.ADWIN(delta=0.01)
    for v in np.r_[rng.normal(0, 1, 300), rng.normal(2, 1, 300)]:
        det.update(float(v))
    doc = loads_state(dumps_state(encode_object(det)))  # through bytes
    fast, slow = adwin_from_doc(doc), decode_object(doc)
    assert type(fast) is drift.ADWIN and encode_object(fast) == encode_object(slow) == doc
    for v in rng.normal(5, 1, 200):  # both go on alike
        fast.update(float(v))
        slow.update(float(v))
        assert (fast.drift_detected, fast.estimation) == (slow.drift_detected, slow.estimation)


def _mutations(doc):
    import copy
    out = []
    for path, value in [((), "x"), (("!obj",), True), (("new", "!global"), "os:system"),
                        (("args", 0, "!global"), "river.drift.page_hinkley:PageHinkley"),
                        (("state", "!dict", 0, 0), "_other"), (("state", "!dict", 1, 1), "1"),
                        (("state", "!dict", 6, 1, "new", "!global"), "builtins:eval"),
                        (("state", "!dict", 6, 1, "args", 1), {"!float": "nan"}),
                        (("state", "!dict", 6, 1, "state", "mutable"), 0),
                        (("state", "!dict", 6, 1, "state", "!bytes"), "AAAA")]:
        d = copy.deepcopy(doc)
        if not path:
            out.append(value)
            continue
        parent = d
        for p in path[:-1]:
            parent = parent[p]
        parent[path[-1]] = value
        out.append(d)
    return out


def test_fast_decoder_takes_only_its_own_layout():
    det = drift.ADWIN()
    for v in range(100):
        det.update(float(v % 7))
    doc = encode_object(det)
    for bad in _mutations(doc):
        # not the layout (or bytes the helper refuses): the generic decoder decides
        assert adwin_from_doc(bad) is None


def test_bytes_the_helper_cannot_read_are_a_refused_state_not_a_panic():
    from shiftwatch.operators.object_state import StateRefused

    det = drift.ADWIN()
    det.update(1.0)
    doc = encode_object(det)
    doc["state"]["!dict"][6][1]["state"]["!bytes"] = "AAAA"
    with pytest.raises(StateRefused, match="refused its state"):
        decode_object(doc)
    op = create("river:ADWIN", locate=False)
    op.process({"value": 1.0})
    state = op.state_dict()
    state["state"]["detectors"][0]["state"]["!dict"][6][1]["state"]["!bytes"] = "AAAA"
    with pytest.raises(ValueError):
        create("river:ADWIN", locate=False).load_state_dict(state)
