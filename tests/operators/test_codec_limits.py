"""The decoder's limits on hostile input (issue 22): messages nested deeper than
``MAX_DEPTH``, numbers of more than ``MAX_DIGITS`` digits and messages larger than
``MAX_MESSAGE_BYTES`` are a ``BadInput`` with a reason, whether they come as bytes (a Kafka
message) or text (a JSONL line); what is within the limits decodes as before."""

from __future__ import annotations

import json

import pytest

from shiftwatch import codec
from shiftwatch.codec import (
    MAX_DEPTH,
    MAX_DIGITS,
    MAX_MESSAGE_BYTES,
    decode_record,
    parse_object,
)
from shiftwatch.records import BadInput


def both(text: str) -> list:
    """The message as a Kafka value (bytes) and as a JSONL line (text)."""
    return [text.encode("utf-8", errors="surrogatepass"), text]


def nested_lists(depth: int) -> str:
    # an object holding depth - 1 levels of lists: depth levels in all
    return '{"key": "s1", "value": 1, "m": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1000, 100_000])
@pytest.mark.parametrize("shape", ["lists", "objects", "unclosed", "value"])
def test_deep_nesting_is_bad_input(depth, shape):
    text = {"lists": "[" * depth + "]" * depth,
            "objects": '{"a":' * depth + "1" + "}" * depth,  # orjson 3.8 crashed on 100,000
            "unclosed": '{"value": 1, "m": ' + "[" * depth,
            "value": '{"value": ' + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "}"}[shape]
    for data in both(text):
        with pytest.raises(BadInput, match=f"JSON nested deeper than {MAX_DEPTH} levels"):
            parse_object(data)
        with pytest.raises(BadInput, match="nested deeper"):
            decode_record(data, b"k")


def test_nesting_up_to_the_limit_decodes():
    for data in both(nested_lists(MAX_DEPTH)):
        assert parse_object(data) == json.loads(nested_lists(MAX_DEPTH))
    for data in both(nested_lists(MAX_DEPTH + 1)):
        with pytest.raises(BadInput, match=rf"\({MAX_DEPTH + 1} levels\)"):
            parse_object(data)


@pytest.mark.parametrize("text", [
    '{"value": 1, "s": "' + "[" * 5000 + '"}',
    '{"value": 1, "s": "\\"' + "{" * 5000 + '"}',  # an escaped quote does not end the string
    '{"value": 1, "s": "\\\\", "m": [' + "[1], " * 5000 + "[1]]}",  # nor a doubled backslash
    '{"value": 1, "m": ' + json.dumps([[[i, i + 1]] for i in range(3000)]) + "}",
])
def test_brackets_in_strings_and_wide_records_decode(text):
    for data in both(text):
        assert parse_object(data) == json.loads(text)


@pytest.mark.parametrize(("text", "digits"), [
    ('{"key": "s1", "value": ' + "9" * 5000 + "}", 5000),  # ValueError before (int limit)
    ('{"key": "s1", "value": -' + "9" * 101 + "}", 101),
    ('{"value": 1, "ts": ' + "1" * 400 + "}", 400),
    ('{"value": 1, "meta": {"x": [1, ' + "2" * 200 + "]}}", 200),
    ('{"value": 0.' + "0" * 150 + "1}", 152),
    ('{"value": 1.5e' + "9" * 120 + "}", 122),
    ('{"value": ' + "1" * 40 + "." + "1" * 40 + "e" + "1" * 40 + "}", 120),
])
def test_long_numbers_are_bad_input(text, digits):
    for data in both(text):
        with pytest.raises(BadInput, match=rf"number with more than {MAX_DIGITS} digits "
                                           rf"\({digits} digits\)"):
            parse_object(data)


def test_numbers_up_to_the_limit_and_digits_in_strings_decode():
    hundred = "9" * MAX_DIGITS
    text = ('{"key": "' + "7" * 500 + '", "value": 1e99, "ts": 5, "big": ' + hundred
            + ', "neg": -' + hundred + ', "f": 0.' + "1" * (MAX_DIGITS - 1) + "}")
    for data in both(text):
        got = parse_object(data)
        assert got == json.loads(text) and got["big"] == int(hundred)
    assert decode_record(b'{"value": ' + b"1" + b"0" * 99 + b"}")["value"] == 1e99


def test_huge_messages_are_bad_input():
    pad = MAX_MESSAGE_BYTES - len('{"value": 1, "s": ""}')
    fits = '{"value": 1, "s": "' + "x" * pad + '"}'
    assert len(fits) == MAX_MESSAGE_BYTES
    for data in both(fits):
        assert parse_object(data)["value"] == 1
    over = '{"value": 1, "s": "' + "x" * (pad + 1) + '"}'
    wide = '{"value": 1, "s": "' + "\u00e9" * (pad // 2 + 1) + '"}'  # 2 bytes a character
    for data in [*both(over), *both(wide), bytearray(over.encode())]:
        with pytest.raises(BadInput, match=f"larger than {MAX_MESSAGE_BYTES} bytes"):
            parse_object(data)


def test_messages_that_are_not_text_are_bad_input():
    for data in (5, 1.5, ["{}"], {"value": 1}, memoryview(b"{}")):
        with pytest.raises(BadInput, match="not JSON text or bytes"):
            parse_object(data)


def test_values_beyond_max_abs_are_rejected_at_decode():
    for text in ('{"value": 1e300}', '{"value": [1, -2e151]}', '{"value": 1, "ts": 1e200}'):
        with pytest.raises(BadInput, match="beyond the magnitude limit max_abs=1e\\+150"):
            decode_record(text.encode())
    assert decode_record(b'{"value": -1e150, "ts": 1e150}') == {"value": -1e150, "ts": 1e150}


def test_small_messages_skip_the_depth_scan(monkeypatch):
    # The fast path stays fast: a message with few brackets is never scanned for its depth.
    def fail(data):
        raise AssertionError("scanned")

    monkeypatch.setattr(codec, "_nesting_depth", fail)
    assert decode_record(b'{"key": "s1", "ts": 1.5, "value": [[1, 2], [3, 4]]}', b"k")[
        "value"] == [[1.0, 2.0], [3.0, 4.0]]
    with pytest.raises(AssertionError, match="scanned"):
        parse_object(b'{"value": [' + b"[1], " * MAX_DEPTH + b"[1]]}")
