from __future__ import annotations

import logging

import pytest

from shiftwatch.deploy.kafka_changelog import encode_entry, encode_marker, restore


def _entries(cid, key, slot, state):
    return encode_entry("in", 3, cid, 0, key, slot, state, 4)


def test_malformed_entries_are_logged_with_partition_and_key(caplog):
    msgs = _entries(1, "a", 0, b'"a1"') + _entries(1, "b", 0, b'"b1"')
    msgs.append((b"in/3/k/0/zero/0/ghost", b'{"id": 1}\n"x"'))      # a bad slot number
    msgs.append((b"in/3/k/0/0/0/c", b"not a header\n"))              # a bad header
    msgs.append(encode_marker("in", 3, 1, 40, [2], []))
    with caplog.at_level(logging.WARNING, logger="shiftwatch.kafka"):
        r = restore(msgs, "in", 3)
    assert r.states == [{"a": b'"a1"', "b": b'"b1"'}]
    logged = [rec.getMessage() for rec in caplog.records]
    assert len(logged) == 2
    assert all("changelog in/3" in m for m in logged)
    assert any("ghost" in m for m in logged) and any("/c" in m for m in logged)


def test_a_marker_whose_entry_is_malformed_fails_restore(caplog):
    msgs = _entries(1, "a", 0, b'"a1"')
    msgs.append((b"in/3/k/0/0/0/b", b"garbage"))
    msgs.append(encode_marker("in", 3, 1, 40, [2], []))
    with pytest.raises(ValueError, match="covers"):
        restore(msgs, "in", 3)
    assert any("in/3/k/0/0/0/b" in rec.getMessage() for rec in caplog.records)


def test_the_old_full_state_format_is_not_read():
    # 0.1.0 wrote "T/P/<slot>/<chunk>" full-state checkpoints; nothing needs them now.
    old = [(b"in/3/1/0", b'{"id": 7, "offset": 120, "chunk": 0, "chunks": 1, "bytes": 2}\n{}')]
    assert restore(old, "in", 3) is None
