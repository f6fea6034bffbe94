"""CsvSource and JsonlSource: column mapping, dead letters with line numbers, gz, ts."""

from __future__ import annotations

import gzip
import json

import pytest

from shiftwatch.records import DeadLetter
from shiftwatch.streams.files import CsvSource, JsonlSource, parse_ts


def write(path, text, gz=False):
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def split(items):
    good = [i for i in items if isinstance(i, dict)]
    dead = [i for i in items if isinstance(i, DeadLetter)]
    assert len(good) + len(dead) == len(items)
    return good, dead


CSV_TEXT = (
    "ts,sensor,value,label\n"    # line 1
    "0,a,1.5,0\n"                # 2 good
    "1,a,2.5\n"                  # 3 wrong column count
    "2,b,abc,1\n"                # 4 non-number
    "3,b,nan,1\n"                # 5 NaN
    "4,b,,1\n"                   # 6 empty
    "\n"                         # 7 blank: skipped
    "5,a,3.5,1\n"                # 8 good
    "x,a,4.5,1\n"                # 9 bad ts
    "7,a,inf,0\n"                # 10 infinite
    '8,"a,b",5.5,cat\n'          # 11 good, quoted key with a comma
)


def test_csv_dead_letters_carry_line_numbers_and_good_records_survive(tmp_path):
    path = write(tmp_path / "log.csv", CSV_TEXT)
    src = CsvSource(path, value="value", key="sensor", ts="ts", y="label")
    good, dead = split(list(src))
    assert good == [
        {"key": "a", "ts": 0.0, "value": 1.5, "y": 0},
        {"key": "a", "ts": 5.0, "value": 3.5, "y": 1},
        {"key": "a,b", "ts": 8.0, "value": 5.5, "y": "cat"},
    ]
    assert [d.origin["line"] for d in dead] == [3, 4, 5, 6, 9, 10]
    assert all(d.origin["file"] == str(path) for d in dead)
    reasons = [d.reason for d in dead]
    assert "expected 4 fields, got 3" in reasons[0]
    assert "not a number" in reasons[1]
    assert "not finite" in reasons[2]
    assert "empty" in reasons[3]
    assert reasons[4].startswith("ts")
    assert "not finite" in reasons[5]
    assert dead[0].raw == "1,a,2.5"
    assert dead[1].to_record()["raw"] == "2,b,abc,1"
    assert src.name == "log" and src.length is None and src.annotations is None


def test_csv_multi_column_value_default_key_and_no_invented_ts(tmp_path):
    path = write(tmp_path / "v.csv", "x,y,z\n1,2,3\n4,5,6\n7,8,bad\n9,10,11\n")
    src = CsvSource(path, value=["z", "x"])
    good, dead = split(list(src))
    # without a ts column a record has no time (issue 34: none is invented from the count);
    # key defaults to None.
    assert good == [{"key": None, "value": [3.0, 1.0]},
                    {"key": None, "value": [6.0, 4.0]},
                    {"key": None, "value": [11.0, 9.0]}]
    assert [d.origin["line"] for d in dead] == [4]
    assert src.columns == ["z", "x"]


def test_csv_gz_tsv_and_ts_format(tmp_path):
    text = "when\tv\n2024-01-01 00:00:00\t1\n2024-01-01 00:00:30\t2\n01/01/2024\t3\n"
    path = write(tmp_path / "d.tsv.gz", text, gz=True)
    src = CsvSource(path, value="v", ts="when", delimiter="\t", ts_format="%Y-%m-%d %H:%M:%S")
    good, dead = split(list(src))
    assert [r["ts"] for r in good] == [1704067200.0, 1704067230.0]
    assert [d.origin["line"] for d in dead] == [4]
    assert "does not match format" in dead[0].reason
    assert src.name == "d"


def test_csv_iso_ts_with_timezone(tmp_path):
    path = write(tmp_path / "d.csv", "t,v\n2024-01-01T01:00:00+01:00,1\n2024-01-01T00:00:00Z,2\n")
    good = list(CsvSource(path, value="v", ts="t", ts_format="iso"))
    assert [r["ts"] for r in good] == [1704067200.0, 1704067200.0]


def test_csv_construction_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        CsvSource(tmp_path / "missing.csv")
    path = write(tmp_path / "h.csv", "a,b\n1,2\n")
    with pytest.raises(ValueError, match="no column 'value' in the header; columns: a, b"):
        CsvSource(path)
    with pytest.raises(ValueError, match="header row is required"):
        CsvSource(write(tmp_path / "e.csv", ""))
    with pytest.raises(ValueError, match="delimiter"):
        CsvSource(path, value="a", delimiter=";;")


def test_csv_annotations_argument(tmp_path):
    path = write(tmp_path / "a.csv", "value\n1\n2\n")
    assert CsvSource(path, annotations=[5, 2]).annotations == {"truth": [2, 5]}
    assert CsvSource(path, annotations={1: [3]}).annotations == {"1": [3]}
    with pytest.raises(ValueError, match="annotations"):
        CsvSource(path, annotations=[-1])


def test_csv_close_releases_open_iteration(tmp_path):
    path = write(tmp_path / "c.csv", "value\n1\n2\n3\n")
    src = CsvSource(path)
    it = iter(src)
    assert next(it)["value"] == 1.0
    src.close()
    assert list(it) == []


JSONL_TEXT = "\n".join([
    json.dumps({"id": "s1", "t": 10, "meta": {"temp": 20.5}, "y": 1}),     # 1 good
    '{"id": "s1", "t": 11, "meta": {"temp": ',                             # 2 bad JSON
    json.dumps([1, 2, 3]),                                                  # 3 not an object
    json.dumps({"id": "s1", "t": 12, "meta": {}}),                          # 4 missing field
    json.dumps({"id": "s2", "t": 13, "meta": {"temp": "warm"}}),            # 5 non-number
    json.dumps({"id": "s2", "t": 14, "meta": {"temp": None}}),              # 6 null
    "",                                                                     # 7 blank
    json.dumps({"id": "s2", "t": 15, "meta": {"temp": 21.0}, "task": 2}),  # 8 good
    json.dumps({"id": "s2", "meta": {"temp": 22.0}}),                       # 9 missing ts
]) + "\n"


def test_jsonl_bad_lines_become_dead_letters(tmp_path):
    path = write(tmp_path / "log.jsonl", JSONL_TEXT)
    src = JsonlSource(path, value="meta.temp", key="id", ts="t", y="y", task="task")
    good, dead = split(list(src))
    assert good == [
        {"key": "s1", "ts": 10.0, "value": 20.5, "y": 1, "task": None},
        {"key": "s2", "ts": 15.0, "value": 21.0, "y": None, "task": 2},
    ]
    assert [d.origin["line"] for d in dead] == [2, 3, 4, 5, 6, 9]
    assert dead[0].reason.startswith("invalid JSON")
    assert "not an object" in dead[1].reason
    assert dead[2].reason == "record has no field 'meta.temp'"
    assert "not a number" in dead[3].reason
    assert dead[5].reason == "record has no field 't'"


def test_jsonl_vector_and_matrix_values_gz(tmp_path):
    rows = [{"a": 1, "b": {"c": 2}, "m": [[1, 2], [3, 4]]},
            {"a": 3, "b": {"c": 4}, "m": [[1, 2], [3]]},
            {"a": 5, "b": {"c": float("nan")}, "m": [[1, float("nan")], [0, 1]]}]
    text = "\n".join(json.dumps(r) for r in rows) + "\n"
    path = write(tmp_path / "m.ndjson.gz", text, gz=True)
    good, dead = split(list(JsonlSource(path, value=["a", "b.c"])))
    assert [r["value"] for r in good] == [[1.0, 2.0], [3.0, 4.0]]
    assert [d.origin["line"] for d in dead] == [3]
    good, dead = split(list(JsonlSource(path, value="m")))
    assert good[0]["value"] == [[1.0, 2.0], [3.0, 4.0]]
    assert [d.origin["line"] for d in dead] == [2, 3]


def test_jsonl_missing_file():
    with pytest.raises(FileNotFoundError):
        JsonlSource("/nonexistent/x.jsonl")


def test_parse_ts():
    assert parse_ts("3", None) == 3.0
    assert parse_ts("2024-01-01", "%Y-%m-%d") == 1704067200.0


def test_extra_fields_are_copied(tmp_path):
    import pytest

    from shiftwatch.streams.files import CsvSource, JsonlSource

    j = tmp_path / "a.jsonl"
    j.write_text('{"value": 1, "train": false, "meta": {"s": 2}}\n{"value": 2}\n')
    recs = list(JsonlSource(j, extra=["train", "meta"]))
    assert recs[0]["train"] is False and recs[0]["meta"] == {"s": 2}
    assert "train" not in recs[1]
    c = tmp_path / "a.csv"
    c.write_text("value,train,site\n1,false,7\n2,true,x\n")
    recs = list(CsvSource(c, extra=["train", "site"]))
    assert [(r["train"], r["site"]) for r in recs] == [(False, 7), (True, "x")]
    with pytest.raises(ValueError, match="extra"):
        CsvSource(c, extra=["value"])
    with pytest.raises(ValueError, match="no column"):
        CsvSource(c, extra=["nope"])


# --------------------------------------------------------------------------------------
# Damaged .gz files: what was read before the damage is kept, the tail is one dead letter
# --------------------------------------------------------------------------------------


def _noisy_lines(n, header=None):
    import random

    rng = random.Random(5)
    rows = [f'{{"k": "s{i % 3}", "v": {rng.gauss(0, 1):.6f}}}' if header is None
            else f"s{i % 3},{rng.gauss(0, 1):.6f}" for i in range(n)]
    return ([header] if header else []) + rows


def _what_survives(compressed: bytes) -> list[str]:
    """The complete lines zlib itself can recover from ``compressed`` (a cut gzip stream)."""
    import zlib

    text = zlib.decompressobj(wbits=31).decompress(compressed).decode()
    return text.split("\n")


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_truncated_gz_keeps_every_line_before_the_cut_and_dead_letters_the_tail(tmp_path,
                                                                                   kind):
    lines = _noisy_lines(3000, "k,v" if kind == "csv" else None)
    data = gzip.compress(("\n".join(lines) + "\n").encode())
    cut = data[: len(data) // 2]
    path = tmp_path / f"log.{kind}.gz"
    path.write_bytes(cut)
    *complete, partial = _what_survives(cut)
    first = 2 if kind == "csv" else 1  # the CSV header is line 1
    from shiftwatch.streams import open_source

    src = open_source(str(path), value="v", key="k")  # what replay and produce read it with
    assert isinstance(src, CsvSource if kind == "csv" else JsonlSource)
    good, dead = split(list(src))  # no EOFError
    assert len(good) == len(complete) - (first - 1) > 1000
    assert good[-1]["value"] == float(complete[-1].rstrip("}").rsplit(",", 1)[-1].split()[-1])
    assert len(dead) == 1
    assert dead[0].reason == (f"file is truncated after line {len(complete)}: compressed stream "
                              "ended early")
    assert dead[0].origin == {"file": str(path), "line": len(complete) + 1}
    assert dead[0].raw == partial and partial  # the line the cut went through, as far as it got


def test_a_gz_cut_right_after_a_line_break_has_an_empty_tail(tmp_path):
    import zlib

    body = "".join(f"{i}\n" for i in range(50)).encode()
    comp = zlib.compressobj(wbits=31)
    data = comp.compress(b"value\n" + body) + comp.flush(zlib.Z_SYNC_FLUSH)  # no end marker
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(data)
    good, dead = split(list(CsvSource(path)))
    assert [r["value"] for r in good] == [float(i) for i in range(50)]
    assert [(d.origin["line"], d.raw) for d in dead] == [(52, "")]
    assert dead[0].reason.startswith("file is truncated after line 51")


def test_a_gz_with_a_bad_crc_keeps_its_records_and_says_so(tmp_path):
    data = bytearray(gzip.compress(b"value\n1\n2\n3\n"))
    data[-8] ^= 0xFF  # the stored CRC-32
    path = tmp_path / "crc.csv.gz"
    path.write_bytes(bytes(data))
    good, dead = split(list(CsvSource(path)))  # no BadGzipFile
    assert [r["value"] for r in good] == [1.0, 2.0, 3.0]
    assert len(dead) == 1 and dead[0].origin["line"] == 5
    assert dead[0].reason.startswith("gzip CRC check failed after line 4 (0x")
    assert "the lines before it may be damaged" in dead[0].reason


def test_corrupt_deflate_data_ends_the_file_with_a_dead_letter(tmp_path):
    second = bytearray(gzip.compress(b"4\n5\n"))
    second[10] |= 0b110  # the first deflate block's type: 3, which does not exist
    path = tmp_path / "bad.csv.gz"
    path.write_bytes(gzip.compress(b"value\n1\n2\n3\n") + bytes(second))  # two members
    good, dead = split(list(CsvSource(path)))  # no zlib.error
    assert [r["value"] for r in good] == [1.0, 2.0, 3.0]
    assert [(d.origin["line"], d.reason) for d in dead] == [
        (5, "compressed data is corrupt after line 4: Error -3 while decompressing data: "
            "invalid block type")]


def test_a_gz_damaged_in_its_first_line_or_not_gzip_cannot_be_opened(tmp_path):
    import os

    header = b"value," + os.urandom(3000).hex().encode()  # does not compress
    (tmp_path / "h.csv.gz").write_bytes(gzip.compress(header + b"\n1\n")[:1000])
    with pytest.raises(ValueError, match=r"cannot read .*h\.csv\.gz: compressed stream ended "
                                         r"early in line 1"):
        CsvSource(tmp_path / "h.csv.gz")
    (tmp_path / "plain.jsonl.gz").write_text('{"value": 1}\n')
    with pytest.raises(ValueError, match="cannot read .*Not a gzipped file"):
        JsonlSource(tmp_path / "plain.jsonl.gz")


# --------------------------------------------------------------------------------------
# CSV cells: numbers by the JSON grammar, RFC 4180 quoting, UTF-8
# --------------------------------------------------------------------------------------

_NOT_A_NUMBER = "is not a number"


@pytest.mark.parametrize("cell, expected", [
    ("1.5", 1.5), ("-0", 0.0), ("+2", 2.0), ("  3.25 ", 3.25), ("1e3", 1000.0),
    ("1E-2", 0.01), ("-1.5e+2", -150.0), ("0.000001", 1e-06),
    ("12345678901234567890", 1.2345678901234567e19),
    ("1_000", _NOT_A_NUMBER),        # float() reads 1000
    ("\u0661\u0662", _NOT_A_NUMBER),  # Arabic-Indic digits: float() reads 12
    ("\uff11\uff12", _NOT_A_NUMBER),  # full-width digits
    ("01", _NOT_A_NUMBER), (".5", _NOT_A_NUMBER), ("5.", _NOT_A_NUMBER), ("0x10", _NOT_A_NUMBER),
    ("1 000", _NOT_A_NUMBER), ("--1", _NOT_A_NUMBER), ("1e", _NOT_A_NUMBER), ("abc", _NOT_A_NUMBER),
    ("nan", "is not finite"), ("-inf", "is not finite"), ("Infinity", "is not finite"),
    ("1e999", "is not finite"),
    pytest.param("1" * 5000, "v: number has more than 100 digits", id="5000 digits"),
    pytest.param("0." + "0" * 99 + "1", "v: number has more than 100 digits", id="101 digits"),
])
def test_numeric_cells_follow_the_json_number_grammar(tmp_path, cell, expected):
    path = write(tmp_path / "n.csv", f'v\n"{cell}"\n')
    (item,) = list(CsvSource(path, value="v"))
    if isinstance(expected, float):
        assert item == {"key": None, "value": expected}
    else:
        assert isinstance(item, DeadLetter) and expected in item.reason


def test_ts_cells_follow_the_grammar_and_long_labels_are_refused(tmp_path):
    path = write(tmp_path / "t.csv", "t,v,y\n1_0,1,a\n2,1,1_0\n3,1,0042\n4,1," + "9" * 2000
                 + "\n5,1,7\n")
    good, dead = split(list(CsvSource(path, value="v", ts="t", y="y")))
    assert [(r["ts"], r["y"]) for r in good] == [(2.0, "1_0"), (3.0, "0042"), (5.0, 7)]
    assert [d.origin["line"] for d in dead] == [2, 5]
    assert dead[0].reason == "ts '1_0' is not a number (give ts_format to parse dates)"
    assert dead[1].reason == "y: number has more than 100 digits"


def test_broken_quoting_is_a_dead_letter_and_rfc_4180_quoting_is_read(tmp_path):
    text = ('k,v\n'
            '"a,b",1\n'               # 2 a quoted delimiter
            '"say ""hi""",2\n'        # 3 doubled quotes inside quotes
            'c,"3\n'                  # 4 a quote never closed
            '"d"e,4\n'                # 5 text after the closing quote
            'f"g,5\n'                 # 6 a quote in an unquoted field
            '"",6\n')                 # 7 an empty quoted key
    good, dead = split(list(CsvSource(write(tmp_path / "q.csv", text), value="v", key="k")))
    assert [(r["key"], r["value"]) for r in good] == [("a,b", 1.0), ('say "hi"', 2.0),
                                                       ("", 6.0)]
    assert [(d.origin["line"], d.reason) for d in dead] == [
        (4, "broken quoting: field 2 opens a quote that is not closed"),
        (5, "broken quoting: field 1 has text after its closing quote"),
        (6, "broken quoting: field 1 has a quote but is not quoted"),
    ]
    assert dead[0].raw == 'c,"3'


def test_lines_that_are_not_utf8_are_dead_letters_with_their_exact_bytes(tmp_path):
    path = tmp_path / "u.csv"
    path.write_bytes(b"\xef\xbb\xbfk,v\n"           # a byte-order mark is dropped
                     b"caf\xc3\xa9,1\n"             # 2 valid UTF-8
                     b"\xff,2\n"                    # 3 invalid byte
                     b"\xfe,3\n"                    # 4 another: must not merge with line 3
                     b"x\xc3,4\n")                  # 5 a cut two-byte sequence
    good, dead = split(list(CsvSource(path, value="v", key="k")))
    assert good == [{"key": "caf\u00e9", "value": 1.0}]
    assert [d.origin["line"] for d in dead] == [3, 4, 5]
    assert [d.reason for d in dead] == [
        "line is not valid UTF-8, got byte 0xff at column 1",
        "line is not valid UTF-8, got byte 0xfe at column 1",
        "line is not valid UTF-8, got byte 0xc3 at column 2",
    ]
    records = [d.to_record() for d in dead]
    import base64

    assert [base64.b64decode(r["raw_base64"]) for r in records] == [b"\xff,2", b"\xfe,3",
                                                                   b"x\xc3,4"]
    jpath = tmp_path / "u.jsonl"
    jpath.write_bytes(b'{"k": "\xff", "v": 1}\n{"k": "\xfe", "v": 2}\n{"k": "ok", "v": 3}\n')
    good, dead = split(list(JsonlSource(jpath, value="v", key="k")))
    assert [r["key"] for r in good] == ["ok"] and [d.origin["line"] for d in dead] == [1, 2]


def test_a_header_that_is_not_utf8_or_badly_quoted_is_an_error(tmp_path):
    path = tmp_path / "h.csv"
    path.write_bytes(b"k\xff,v\n1,2\n")
    with pytest.raises(ValueError, match=r"the header \(line 1\): line is not valid UTF-8"):
        CsvSource(path, value="v")
    with pytest.raises(ValueError, match=r"the header \(line 1\): broken quoting"):
        CsvSource(write(tmp_path / "q.csv", 'k,"v\n1,2\n'), value="v")
