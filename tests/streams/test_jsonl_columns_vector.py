"""The JSON Lines column reader with vector values (``jsonl_columns(..., vectors=True)``):
chunks whose ``values`` are ``(rows, d)`` float64 arrays that are the record path's items,
item for item, on messy files (bad elements, strings, NaN, huge numbers, nested lists, missing
values, blank lines, CRLF, bytes that are not UTF-8, ``.gz`` and truncated ``.gz``, list keys,
dotted value paths), in chunks cut in the middle of lines; and the files it refuses
(:func:`~shiftwatch.streams.jsonl_columns.unfit`), named at the same line whatever the chunk
size."""

from __future__ import annotations

import gzip
import random
import re

import numpy as np
import pytest
from test_columnar_replay_helpers import chunk_items
from test_columnar_replay_helpers import norm_key as _norm_key
from test_columnar_replay_helpers import spell as _spell

from shiftwatch.records import DeadLetter
from shiftwatch.streams import jsonl_columns as jc
from shiftwatch.streams.files import JsonlSource
from shiftwatch.streams.jsonl_columns import ColumnsUnfit, jsonl_columns, unfit

CHUNKS = [64, 257, 1 << 16]

# Elements the record path refuses in a vector (or that the fast path leaves to it).
_BAD_ELEMENTS = ['"1.5"', '"x"', '""', "true", "false", "null", "NaN", "Infinity",
                 "-Infinity", "1e400", "-1e400", "1e200", "-1e151", '{"a": 1}',
                 "12345678901234567890", "1" * 120, "1e9999999999", "[1, 2]", "[]"]
# Values that are not a list of numbers at all (dead letters, or unfit when accepted).
_BAD_VALUES = ['"[1, 2, 3]"', "null", "true", '{"x": [1, 2, 3]}', "[1, [2, 3]]",
               "[[1], [2, 3]]", "[1, 2, {}]", '"abc"']
_BAD_LINES = ["{oops", "[1, 2, 3]", '"text"', "42", "null", "{}", '{"key": "k1"}',
              '{"value": [1, 2, 3]}{"x": 1}', '{"value": [1, 2, 3}', "\ufeff{\"value\": [1]}",
              '{"a": ' + "[" * 70 + "]" * 70 + ', "value": [1, 2, 3]}']
_BLANKS = ["", "   ", "\t", "\x0c", "\u00a0"]


def _vec(rng, d, level=0.0):
    # column j near 10 * j: a row whose elements were reordered is another row
    out = []
    for j in range(d):
        x = rng.gauss(10.0 * j + level, 1.0)
        r = rng.random()
        out.append(repr(round(x, rng.randrange(1, 17))) if r > 0.1 else
                   f"{x:.3e}" if r > 0.05 else str(int(x * 1000)))
    return out


def messy_vector_jsonl(path, n=1200, d=3, keys=7, seed=0, ts=True, key=True, crlf=False,
                       bad=0.08, gz=False, key_kind="str", dotted=False, undecodable=None):
    """A JSON Lines file of ``n`` lines ``{"key", "ts", "value": [d numbers]}`` (the value
    under ``m.v`` when ``dotted``), about ``bad`` of them broken: a bad element, a bad value,
    a bad ts or key, a missing field, a bad or blank line (none changes the length of an
    accepted vector)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        j = rng.randrange(keys)
        k = {"str": f'"k{j}"', "int": str(j * 1000), "list": f'["k{j}", {j}]'}[key_kind]
        t = str(i // 2) if rng.random() > 0.03 else repr(float(i - 40))
        elems = _vec(rng, d, 3.0 if i > n // 2 else 0.0)
        v = None
        drop = None
        if rng.random() < bad:
            which = rng.randrange(6)
            if which <= 1:
                for _ in range(rng.choice([1, 1, 2])):  # (a list alone would be a matrix)
                    elems[rng.randrange(d)] = rng.choice(_BAD_ELEMENTS[:-3 if d == 1 else None])
            elif which == 2:
                v = rng.choice(_BAD_VALUES)
            elif which == 3 and ts:
                t = rng.choice(['"12"', "null", "1e400", "[3]", "NaN", "true"])
            elif which == 4 and key:
                k = rng.choice(['{"a": 1}', "null", '""', '["x", ["y", 2]]', '"\\u00e9"'])
            else:
                if rng.random() < 0.5:
                    drop = rng.choice(["key", "ts", "value"])
                else:
                    out.append(rng.choice(_BAD_LINES + _BLANKS))
                    continue
        if v is None:
            sep = rng.choice([", ", ",", " , "])
            v = "[" + sep.join(elems) + "]"
        fields = []
        if key and drop != "key":
            fields.append(f'"key": {k}' if rng.random() < 0.5 else f'"key":{k}')
        if ts and drop != "ts":
            fields.append(f'"ts": {t}')
        if drop != "value":
            fields.append(f'"m": {{"v": {v}, "w": 1}}' if dotted else f'"value": {v}')
        rng.shuffle(fields)
        out.append("{" + ", ".join(fields) + "}")
    text = ("\r\n" if crlf else "\n").join(out) + ("\n" if seed % 2 else "")
    data = text.encode("utf-8", "surrogatepass")
    if undecodable if undecodable is not None else seed % 3 == 0:
        data = data.replace(b'"k3"', b'"k\xff3"', 2)  # not UTF-8
    if gz:
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def _bits(v) -> bytes:
    return np.asarray(v, dtype=np.float64).tobytes()


def record_items(src):
    """The record path's items: ("dead", record) or ("rec", key, ts, shape, value bits)."""
    return [("dead", it.to_record()) if isinstance(it, DeadLetter) else
            ("rec", _spell(_norm_key(it.get("key"))), _spell(it.get("ts")),
             np.shape(it["value"]), _bits(it["value"])) for it in src]


def column_items(chunks, d):
    """The chunks' items, spelled as :func:`record_items`; checks each chunk's arrays."""
    chunks = list(chunks)
    for c in chunks:
        v = c.values
        assert v.dtype == np.float64 and v.flags.c_contiguous
        assert v.shape == (len(c), d)
        assert len(c.lines) == len(c.keys) == v.shape[0]
        assert np.all(np.diff(c.lines) > 0)
    return chunk_items(chunks, lambda c, i: (
        "rec", _spell(c.keys[i]), _spell(None if c.ts is None else float(c.ts[i])), (d,),
        c.values[i].tobytes()))


def _opts(kw):
    opts = {"key": "key"} if kw.get("key", True) else {}
    if kw.get("ts", True):
        opts["ts"] = "ts"
    if kw.get("dotted"):
        opts["value"] = "m.v"
    return opts


def _compare(path, opts, chunk, d, monkeypatch=None, expect_fast=0.5):
    """The record path's items and the column reader's are equal (and blank lines
    counted alike); most records by the fast path when ``monkeypatch`` is given."""
    src = JsonlSource(path, **opts)
    want = record_items(src)
    blank = src.blank_lines
    slow = []
    if monkeypatch is not None:
        real = jc._slow_line
        monkeypatch.setattr(jc, "_slow_line", lambda *a: slow.append(1) or real(*a))
    src = JsonlSource(path, **opts)
    if not any(w[0] == "rec" for w in want):
        d = 0  # (no record: no length)
    got = column_items(jsonl_columns(src, chunk, vectors=True), d)
    assert got == want
    assert src.blank_lines == blank
    if monkeypatch is not None:
        n_rec = sum(1 for w in want if w[0] == "rec")
        assert n_rec - len(slow) >= expect_fast * n_rec
    return want


_CASES = [dict(), dict(ts=False), dict(key=False), dict(crlf=True), dict(gz=True),
          dict(bad=0.3), dict(key_kind="int"), dict(key_kind="list"), dict(bad=0.0),
          dict(dotted=True), dict(d=1), dict(d=12, crlf=True, gz=True, bad=0.2),
          dict(dotted=True, key_kind="list", bad=0.15)]


@pytest.mark.parametrize("case", range(len(_CASES)))
@pytest.mark.parametrize("chunk", CHUNKS)
def test_vector_chunks_give_the_record_path_items(monkeypatch, tmp_path, case, chunk):
    kw = dict(_CASES[case])
    d = kw.pop("d", 3)
    path = messy_vector_jsonl(tmp_path / ("s.jsonl.gz" if kw.get("gz") else "s.jsonl"),
                              d=d, seed=case, **kw)
    want = _compare(path, _opts(kw), chunk, d, monkeypatch,
                    0.5 if kw.get("bad", 0.08) < 0.3 else 0.2)
    n_dead = sum(1 for w in want if w[0] == "dead")
    assert kw.get("bad") == 0.0 or n_dead > 10
    assert unfit(JsonlSource(path, **_opts(kw)), vectors=True) is None


def test_every_bad_element_and_value_alone(tmp_path):
    """Each bad element (in each place of the vector), bad value and bad line between good
    lines, in one file and each as a block of its own."""
    good = '{"key": "k", "ts": 1, "value": [0.5, -1.25, 3]}'
    lines = []
    for e in _BAD_ELEMENTS:
        lines += ['{"key": "k", "ts": 1, "value": [' + ", ".join(
            e if j == at else str(j) for j in range(3)) + "]}" for at in range(3)]
    lines += ['{"key": "k", "ts": 1, "value": ' + v + "}" for v in _BAD_VALUES]
    lines += _BAD_LINES + _BLANKS + ['{"key": "k", "ts": 1}', '{"key": "k", "value": [1, 2, 3]}',
                                     '{"key": {"a": 1}, "ts": 1, "value": [1, 2, 3]}']
    body = "\n".join(x for line in lines for x in (good, line)) + "\n"
    path = tmp_path / "all.jsonl"
    path.write_text(body, encoding="utf-8", errors="surrogatepass")
    for chunk in CHUNKS:
        want = _compare(path, {"key": "key", "ts": "ts"}, chunk, 3)
        assert sum(1 for w in want if w[0] == "dead") > 70
    one = tmp_path / "one.jsonl"
    for line in lines:
        one.write_text(f"{good}\n{line}\n{line}\n", encoding="utf-8", errors="surrogatepass")
        _compare(one, {"key": "key", "ts": "ts"}, 1 << 16, 3)


def test_reasons_of_refused_vectors(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"value": [1, 2]}\n{"value": [1, "x"]}\n{"value": [1, NaN]}\n'
                    '{"value": [1, 1e200]}\n{"value": [1, [2]]}\n{"value": [1, null]}\n'
                    '{"value": [1, true]}\n')
    reasons = [it.reason for it in JsonlSource(path) if isinstance(it, DeadLetter)]
    assert len(reasons) == 6
    for chunk in CHUNKS:
        (c,) = [c for c in jsonl_columns(JsonlSource(path), chunk, vectors=True) if len(c)]
        assert c.values.tolist() == [[1.0, 2.0]]
        dead = [x.reason for c in jsonl_columns(JsonlSource(path), chunk, vectors=True)
                for _, x in c.dead]
        assert dead == reasons
    assert "beyond the magnitude limit" in reasons[2]
    assert "NaN" in reasons[1]


def test_loose_values_and_numbers_of_every_spelling(tmp_path):
    """With ``loose``, strings and booleans in a list are read by the record rule; integers,
    exponents, -0 and tiny numbers come bit for bit."""
    rng = random.Random(7)
    spell = ["0", "-0", "-0.0", "1e-400", "5E-3", "123456789012345678", "-1.0e5",
             "0.1", "2.5e-308", "1.7976931348623157e308", "1e150", "-1e150", '"2.5"', "true",
             '" 3 "', '"1_000"', '"nan"']
    lines = []
    for _ in range(500):
        lines.append('{"value": [' + ", ".join(rng.choice(spell) for _ in range(4)) + "]}")
    path = tmp_path / "l.jsonl"
    path.write_text("\n".join(lines) + "\n")
    for loose in (False, True):
        for chunk in CHUNKS:
            want = _compare(path, {"loose": loose}, chunk, 4)
            assert 0 < sum(1 for w in want if w[0] == "rec") < len(lines)


def test_a_row_keeps_its_elements_in_order(tmp_path):
    path = tmp_path / "o.jsonl"
    rows = [[float(i), -2.5 * i, 1e-3 + i, 7.0] for i in range(1, 400)]
    path.write_text("".join(f'{{"value": [{", ".join(map(repr, r))}]}}\n' for r in rows))
    for chunk in CHUNKS:
        chunks = list(jsonl_columns(JsonlSource(path), chunk, vectors=True))
        got = np.concatenate([c.values for c in chunks])
        assert got.tolist() == rows
        # the comparison with the record path sees a row whose elements were reordered
        want = record_items(JsonlSource(path))
        assert column_items(chunks, 4) == want
        swapped = next(c for c in chunks if len(c))
        swapped.values = np.ascontiguousarray(swapped.values[:, ::-1])
        assert column_items(chunks, 4) != want


def test_damaged_gz_and_last_line_without_newline(tmp_path):
    path = messy_vector_jsonl(tmp_path / "s.jsonl.gz", n=3000, seed=8, gz=True)
    data = path.read_bytes()
    for cut in (len(data) * 2 // 3, len(data) - 9, 120):
        bad = tmp_path / f"cut{cut}.jsonl.gz"
        bad.write_bytes(data[:cut])
        for chunk in CHUNKS:
            want = _compare(bad, {"key": "key", "ts": "ts"}, chunk, 3)
            assert "file is truncated after line" in want[-1][1]["reason"]
    plain = tmp_path / "p.jsonl"
    plain.write_text('{"value": [1, 2]}\n\n{"value": [3, 4]}')
    assert len(_compare(plain, {}, 5, 2)) == 2
    cr = tmp_path / "cr.jsonl"
    cr.write_bytes(b'{"value": [1]}\r{"value": [2]}\r\r\n{"value": x}\r{"value": [3]}\r')
    for chunk in (1, 3, 1 << 16):
        assert len(_compare(cr, {}, chunk, 1)) == 4


def test_chunks_without_rows_have_the_width(tmp_path):
    """Chunks before the first record (read ahead), after it, a long line's and a damaged
    tail's are ``(0, d)``; a file without a record gives ``(0, 0)``."""
    path = tmp_path / "e.jsonl"
    head = ["{oops}", "", '{"value": "x"}', '{"value": [1, "a"]}'] * 40
    tail = ['{"value": [1, 2, 3, 4, 5]}', "{bad"] * 3
    long = '{"value": [1, 2, 3, 4, 5], "pad": "' + "x" * 1_100_000 + '"}'
    path.write_text("\n".join(head + tail + [long] + head) + "\n")
    for chunk in CHUNKS:
        src = JsonlSource(path)
        chunks = list(jsonl_columns(src, chunk, vectors=True))
        assert all(c.values.shape == (len(c), 5) for c in chunks)
        assert src.blank_lines == 80
        _compare(path, {}, chunk, 5)
    none = tmp_path / "none.jsonl"
    none.write_text("\n".join(head) + "\n")
    for chunk in CHUNKS:
        chunks = list(jsonl_columns(JsonlSource(none), chunk, vectors=True))
        assert chunks and all(c.values.shape == (0, 0) for c in chunks)
        _compare(none, {}, chunk, 0)
    assert unfit(JsonlSource(none), vectors=True) is None
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert list(jsonl_columns(JsonlSource(empty), vectors=True)) == []


def _first_unfit_line(src):
    """The line of the first accepted record whose value is not a flat list of the first
    one's length (the record path's view of what vectors=True refuses), or None."""
    d = None
    for n, it in enumerate(src):
        if isinstance(it, DeadLetter):
            continue
        v = it["value"]
        shape = len(v) if type(v) is list and v and type(v[0]) is not list else None
        if shape is None or (d is not None and shape != d):
            return src.origins.get(n)["line"]
        d = shape
    return None


@pytest.mark.parametrize("lines, what", [
    (['{"key": "a", "value": [1, 2]}', '{"key": "a", "value": 1}'],
     "line {2}: a value that is a number among vectors of length 2 (line {1})"),
    (['{"value": "x"}', '{"key": "a", "value": 1}', '{"key": "a", "value": [1, 2]}'],
     "line {2}: a value that is a number, not a vector,"),
    (['{"value": [1, 2, 3]}', '{"value": [1, "a"]}', '{"value": [1, 2]}'],
     "line {3}: a vector of length 2 among vectors of length 3 (line {1})"),
    (['{"value": [1, "a"]}', '{"value": [1, 2]}', '{"value": [1, 2, 3]}'],
     "line {3}: a vector of length 3 among vectors of length 2 (line {2})"),
    (['{"value": [1, 2]}', '{"value": [[1, 2], [3, 4]]}'],
     "line {2}: a value that is a nested list (a matrix)"),
    (['{"value": [[1]]}'], "line {1}: a value that is a nested list (a matrix)"),
    (['{"value": [1]}', '{"value": []}'], "line {2}: a value that is an empty list"),
    (['{"key": 1, "value": [1]}', '{"key": 1.0, "value": [1]}'], "line {2}: the key 1.0"),
    (['{"key": 1, "value": [1]}', '{"key": true, "value": [1]}', '{"value": [1, 2]}'],
     "line {2}: the key True"),
    (['{"key": [{"a": 1}], "value": [1]}'], "line {1}: a key that cannot be hashed"),
    (['{"key": NaN, "value": [1, 2]}'], "line {1}: a NaN key"),
    (['{"key": "a", "value": [1, 2]}', '{"key": "a", "value": [1, 2], "x": NaN}',
      '{"key": 0.0, "value": [1, 2]}', '{"key": -0.0, "value": [3, 4]}'],
     "line {4}: the key -0.0"),
    # a key and a value unfit on one line: the value is named
    (['{"key": "a", "value": [1, 2]}', '{"key": "a", "value": [1, 2], "x": NaN}',
      '{"key": 0.0, "value": [1, 2]}', '{"key": -0.0, "value": [3]}'],
     "line {4}: a vector of length 1 among vectors of length 2 (line {1})"),
])
def test_what_vector_columns_cannot_hold(tmp_path, lines, what):
    path = tmp_path / "u.jsonl"
    pad = ['{"key": "a", "value": "pad"}', ""] * 15  # (chunks without rows before them)
    for before in ([], pad):
        path.write_text("\n".join(before + lines) + "\n")
        want = what.format(*(i + len(before) for i in range(10)))
        for chunk in CHUNKS:
            with pytest.raises(ColumnsUnfit, match=re.escape(f"u.jsonl, {want}")):
                list(jsonl_columns(JsonlSource(path, key="key"), chunk, vectors=True))
        reason = unfit(JsonlSource(path, key="key"), vectors=True)
        assert reason is not None and f"u.jsonl, {want}" in reason and "\n" not in reason
        assert reason.endswith(" cannot be read in columns")


@pytest.mark.parametrize("seed", range(6))
def test_unfit_files_name_the_first_line_in_any_chunk_size(tmp_path, seed):
    """Messy files with one record of another shape somewhere: the reason names the line
    the record path gives, in every chunk size; the chunks before it are the record path's
    items."""
    rng = random.Random(seed)
    path = messy_vector_jsonl(tmp_path / "m.jsonl", n=600, seed=seed, undecodable=False)
    lines = path.read_text().splitlines()
    at = rng.randrange(5, len(lines))
    lines[at] = rng.choice(['{"key": "k1", "ts": 1, "value": [1, 2]}',
                            '{"key": "k1", "ts": 1, "value": 2.5}',
                            '{"key": "k1", "ts": 1, "value": [[1, 2, 3]]}',
                            '{"key": "k1", "ts": 1, "value": [1, 2, 3, 4]}',
                            '{"key": "k1", "ts": 1, "value": []}'])
    path.write_text("\n".join(lines) + "\n")
    line = _first_unfit_line(JsonlSource(path, key="key", ts="ts"))
    assert line == at + 1
    want = record_items(JsonlSource(path, key="key", ts="ts"))
    for chunk in CHUNKS:
        got = []
        with pytest.raises(ColumnsUnfit, match=f", line {line}: ") as exc:
            for c in jsonl_columns(JsonlSource(path, key="key", ts="ts"), chunk,
                                   vectors=True):
                got += column_items([c], 3)
        assert got == want[:len(got)]
        assert unfit(JsonlSource(path, key="key", ts="ts"), vectors=True) == str(exc.value)


def test_without_the_flag_nothing_changes(tmp_path):
    path = messy_vector_jsonl(tmp_path / "v.jsonl", n=300, seed=1)
    reason = unfit(JsonlSource(path, key="key", ts="ts"))
    assert "a value that is a list (a vector) cannot be read in columns" in reason
    scalar = tmp_path / "s.jsonl"
    scalar.write_text('{"value": 1.5}\n{"value": "x"}\n{"value": 2}\n')
    chunks = list(jsonl_columns(JsonlSource(scalar)))
    assert [c.values.tolist() for c in chunks] == [[1.5, 2.0]]
    assert unfit(JsonlSource(scalar)) is None
    assert "a value that is a number, not a vector," in unfit(JsonlSource(scalar), vectors=True)


_POOL = ['{"value": [1.5, -2, 3e3]}', '{"value": [0.25, 7, -1e-3]}', '{"value": [1e200, 1]}',
         '{"value": [1, "x"]}', '{"value": [1, 2, 3, 4, 1e300]}', '{"value": [2, NaN, 1]}',
         '{"value": [[1, 2], 3]}', '{"value": "v"}', '{"value": [true, 1, 2]}',
         '{"value": [4, 5, 6], "x": NaN}', '{"value": [7, 8, 9], "y": 12345678901234567890}',
         '{"value": [0.5, 0.5]}', '{"value": 2.5}', '{"value": []}', '{"value": [[1, 2, 3]]}',
         "", "{bad", '{"value": [1, 2, 3], "ts": 1}', '{"ts": 2}']


@pytest.mark.parametrize("seed", range(40))
def test_small_files_of_mixed_shapes(tmp_path, seed):
    """Dead letters of every length before and among the records: ``d`` is the first
    accepted record's length; a file fits exactly when the record path's accepted values are
    all flat lists of that length, and the reason names the first that is not."""
    rng = random.Random(seed)
    good = rng.sample(_POOL[:2] + _POOL[9:11], rng.randrange(1, 5))
    pool = _POOL[2:9] + _POOL[15:19] + (_POOL[11:15] if seed % 3 == 0 else [])
    lines = [rng.choice(good if rng.random() < 0.6 else pool) for _ in range(rng.randrange(1, 60))]
    path = tmp_path / "f.jsonl"
    path.write_text("\n".join(lines) + ("\n" if seed % 2 else ""))
    line = _first_unfit_line(JsonlSource(path))
    for chunk in (1, 20, 64, 257, 1 << 16):
        if line is None:
            _compare(path, {}, chunk, 3)
        else:
            with pytest.raises(ColumnsUnfit, match=f", line {line}: "):
                list(jsonl_columns(JsonlSource(path), chunk, vectors=True))
