from __future__ import annotations

import pytest

from shiftwatch.deploy.kafka.changelog import encode_entry, encode_group, encode_marker, restore


def _entries(cid, key, slot, state):
    return encode_entry("in", 3, cid, 0, key, slot, state, 4)


@pytest.mark.parametrize("key, value", [
    (b"in/3/k/0/zero/0/ghost", b'{"id": 1}\n"x"'),   # a bad slot number
    (b"in/3/k/0/0/0/c", b"not a header\n"),           # a bad header
])
def test_malformed_entries_fail_the_restore_naming_the_entry(key, value):
    # Once skipped with a warning (the restore then went on with what was left); a damaged
    # entry may hold a key's newest state, so the restore fails and names it.
    msgs = _entries(1, "a", 0, b'"a1"') + _entries(1, "b", 0, b'"b1"')
    msgs.append((key, value))
    msgs.append(encode_marker("in", 3, 1, 40, [2], []))
    with pytest.raises(ValueError, match="cannot be read") as info:
        restore(msgs, "in", 3)
    assert info.value.key == key


def test_a_marker_whose_entry_is_malformed_fails_restore():
    # A damaged entry at or below the marker may hold a key's newest state: restoring
    # without it would resume from an older state, so it fails, naming the entry.
    msgs = _entries(1, "a", 0, b'"a1"')
    msgs.append((b"in/3/k/0/0/0/b", b"garbage"))
    msgs.append(encode_marker("in", 3, 1, 40, [2], []))
    with pytest.raises(ValueError, match="cannot be read") as info:
        restore(msgs, "in", 3)
    assert info.value.key == b"in/3/k/0/0/0/b"


def test_a_damaged_group_is_an_error_not_an_older_state():
    msgs = list(encode_group("in", 3, 1, [(0, "a", b'"a1"')], 64))
    msgs.append(encode_marker("in", 3, 1, 40, [1], []))
    msgs.append((b"in/3/g/2/0", b"garbage"))  # checkpoint 2's group, damaged
    msgs.append(encode_marker("in", 3, 2, 50, [1], []))
    with pytest.raises(ValueError, match="cannot be read") as info:
        restore(msgs, "in", 3)
    assert info.value.key == b"in/3/g/2/0"
    # the same damage above the marker is a crashed checkpoint's junk, not an error
    msgs = msgs[:-1]
    assert restore(msgs, "in", 3).junk == [b"in/3/g/2/0"]


def test_the_old_full_state_format_is_not_read():
    # 0.1.0 wrote "T/P/<slot>/<chunk>" full-state checkpoints; nothing needs them now.
    old = [(b"in/3/1/0", b'{"id": 7, "offset": 120, "chunk": 0, "chunks": 1, "bytes": 2}\n{}')]
    assert restore(old, "in", 3) is None


def _general_encode(obj):
    """The codec's rule without its exact-type fast path (the isinstance chain of
    ``encode_state``), as the oracle for that fast path."""
    import base64
    import math
    from collections.abc import Mapping

    import numpy as np

    from shiftwatch.operators.state_codec import encode_state

    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, bool):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        return x if math.isfinite(x) else {"__float__": repr(x)}
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        arr = np.ascontiguousarray(obj)
        from shiftwatch.operators.state_codec import _f8_run  # runs: their own tests

        run = _f8_run(arr)
        if run is not None:
            return run
        if arr.dtype == object:
            return {"__ndarray__": None, "items": [_general_encode(v) for v in arr.reshape(-1)],
                    "shape": list(arr.shape)}
        return {"__ndarray__": base64.b64encode(arr.tobytes()).decode("ascii"),
                "dtype": arr.dtype.str, "shape": list(arr.shape)}
    if isinstance(obj, Mapping):
        reserved = {"__ndarray__", "__tuple__", "__dict_items__", "__float__"}
        if all(isinstance(k, str) for k in obj) and reserved.isdisjoint(obj):
            return {k: _general_encode(v) for k, v in obj.items()}
        return {"__dict_items__": [[_general_encode(k), _general_encode(v)]
                                   for k, v in obj.items()]}
    if isinstance(obj, tuple):
        return {"__tuple__": [_general_encode(v) for v in obj]}
    if isinstance(obj, list):
        return [_general_encode(v) for v in obj]
    return encode_state(obj)  # extension types: the codec's hooks


def test_checkpoint_state_encoding_equals_the_codec():
    """``encode_state``'s exact-type fast path gives the value of its general rule (and
    checkpoint bytes that ``loads_state`` reads back to the same state) on odd values and real
    operator states."""
    import json

    import numpy as np

    from shiftwatch.deploy.kafka.checkpoint import state_bytes
    from shiftwatch.deploy.pipeline import parse_pipeline
    from shiftwatch.operators.state_codec import dumps_state, encode_state, loads_state

    class D(dict):
        pass

    class S(str):
        pass

    grid = np.arange(6.0).reshape(2, 3)
    cases = [0, -5, 2**70, 1.5, -0.0, float("nan"), float("-inf"), True, None, "x", S("s"),
             [1, [2.5, "a"]], (1, (2.0,)), {"a": 1}, {1: "a"}, {(1, 2): 3}, {"__tuple__": 1},
             {"__ndarray__": "x", "b": 2}, D(a=1), {"d": D(b=[1])}, np.float32(1.5),
             np.int64(3), np.bool_(True), np.array(2.0), grid, np.asfortranarray(grid),
             grid[:, ::2], np.array([1, 2], dtype=">i4"), np.array([True, False]),
             np.array(["a", None], dtype=object), np.zeros((0, 3)), np.array(["ab", "c"])]
    states = [*cases, cases, {"all": cases}]
    for name in ("cs", "river:ADWIN", "river:PageHinkley", "standardize"):
        cfg = parse_pipeline({"pipeline": "p", "kafka": {"bootstrap_servers": "x:1"},
                              "stages": [{"name": "s", "input": "in", "output": "out",
                                          "operator": name, "params": {}}]})
        op = cfg.stages[0].operators[0].build()
        op.process_batch([{"key": "a", "ts": float(i), "value": float(np.sin(i))}
                          for i in range(150)])
        states.append(op.state_dict())
    for s in states:
        fast, ref = encode_state(s), _general_encode(s)
        assert json.dumps(fast) == json.dumps(ref)
        assert dumps_state(loads_state(state_bytes(s))) == dumps_state(s)


@pytest.mark.parametrize("index, body, words", [
    (b'{"v":2,"keys":[[0,"a",3]]}', b"abcd", "covers 3 bytes, the body has 4"),
    (b'{"v":2,"keys":[[0,"a",5]]}', b"abcd", "covers 5 bytes"),
    (b'{"v":2,"keys":[[0,"a",-1],[0,"b",5]]}', b"abcd", "negative length"),
    (b'{"v":2,"keys":[[0,"a","4"]]}', b"abcd", "a length '4'"),
    (b'{"v":2,"keys":[[true,"a",4]]}', b"abcd", "an operator True"),
    (b'{"v":2,"keys":[[-1,"a",4]]}', b"abcd", "negative operator"),
    (b'{"v":2,"keys":[[0,7,4]]}', b"abcd", "a key 7"),
    (b'{"v":3,"keys":[[0,"a",4]]}', b"abcd", "not lists of 4"),
    (b'{"v":3,"keys":[[0,"a",4,1.5]]}', b"abcd", "a base 1.5"),
    (b'{"v":2,"keys":{"a":1}}', b"", "not lists of 3"),
    (b'{"v":4,"keys":[]}', b"", "not a version 2 or 3"),
])
def test_a_group_index_that_does_not_describe_its_body_is_refused(index, body, words):
    from shiftwatch.deploy.kafka.changelog import decode_group_entries

    with pytest.raises(ValueError, match=words):
        decode_group_entries(index + b"\n" + body)
    head = b'{"id":1,"chunk":0,"chunks":1,"bytes":%d}\n' % (len(index) + 1 + len(body))
    msgs = [(b"in/3/g/1/0", head + index + b"\n" + body),
            encode_marker("in", 3, 1, 40, [1], [])]
    with pytest.raises(ValueError, match="group entry 1 cannot be read") as info:
        restore(msgs, "in", 3)
    assert info.value.key == b"in/3/g/1/0"


def test_group_entries_slice_every_state_from_the_payload():
    from shiftwatch.deploy.kafka.changelog import decode_group_entries

    states = [(0, "a", b'"a"'), (1, "a", b""), (0, "\x00json:[1]", b"[1,2]"), (2, "b", b"{}")]
    got = decode_group_entries(encode_group("in", 0, 1, states, 10**6)[0][1].partition(
        b"\n")[2])
    assert got == [(*s, -1) for s in states]
    assert all(type(s) is bytes for _, _, s, _ in got)
    patched = [(0, "a", b"xy", 3), (0, "b", b"z", -1)]
    got = decode_group_entries(encode_group("in", 0, 4, patched, 10**6)[0][1].partition(
        b"\n")[2])
    assert got == patched
