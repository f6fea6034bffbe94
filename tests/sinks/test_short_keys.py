"""Issue 36 (5): a key shorter than the detector's warm-up could not alarm; the report, the
page and the console say so instead of letting "no alarm" read as "no change"."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from shiftwatch.deploy import cli
from shiftwatch.operators import create
from shiftwatch.operators.sensitivity import warm_up_of


def _csv(tmp_path, lengths: dict[str, int]):
    rng = np.random.default_rng(5)
    rows = ["sensor,ts,temp"]
    for key, n in lengths.items():
        for i in range(n):
            rows.append(f"{key},{i},{rng.normal(20 + 6 * (i >= n // 2), 0.5):.3f}")
    path = tmp_path / "short.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize(("operator", "warm"), [("river:ADWIN", 32), ("cs", 30),
                                                ("shape", 64), ("auto", 32)])
def test_keys_below_the_warm_up_are_listed(tmp_path, capsys, operator, warm):
    lengths = {"long": 400, "short": 21, "edge": warm, "below": warm - 1}
    out = tmp_path / "out"
    rc = cli.main(["replay", str(_csv(tmp_path, lengths)), "--source-opt", "key=sensor",
                   "--source-opt", "value=temp", "--operator", operator, "--out", str(out),
                   "--no-progress", "--quiet", "--no-plots"])
    err = capsys.readouterr().err
    assert rc == 0, err
    report = json.loads((out / "report.json").read_text())
    short = report["short_keys"]
    assert short["warm_up"] == warm and short["operator"] == operator
    assert short["count"] == 2 and report["summary"]["short_keys"] == 2
    assert {k["key"]: k["n_records"] for k in short["first"]} == {"short": 21,
                                                                   "below": warm - 1}
    assert (f"2 keys had fewer records than {operator}'s warm-up of {warm}: it could not "
            f"alarm on them (report.json: short_keys)") in err
    page = (out / "report.html").read_text()
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>',
                                page, re.S).group(1))
    assert data["short_keys"]["count"] == 2


def test_no_note_when_every_key_is_long_enough(tmp_path, capsys):
    out = tmp_path / "out"
    rc = cli.main(["replay", str(_csv(tmp_path, {"a": 300, "b": 200})), "--source-opt",
                   "key=sensor", "--source-opt", "value=temp", "--operator", "cs", "--out",
                   str(out), "--no-progress", "--quiet", "--no-plots"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "short_keys" not in json.loads((out / "report.json").read_text())
    assert "warm-up" not in err


def test_the_warm_up_is_a_lower_bound_on_the_first_alarm():
    """No detector alarms before its warm-up, on a shift of 50 sd at the second record."""
    z = np.r_[0.0, np.full(1200, 50.0)] + np.random.default_rng(1).normal(0, 1, 1201)
    recs = [{"ts": float(i), "value": float(v)} for i, v in enumerate(z)]
    for name in ("river:ADWIN", "river:PageHinkley", "river:KSWIN", "cs", "shape", "auto"):
        op = create(name, **({"seed": 1} if name == "river:KSWIN" else {}))
        first = next((i for i, o in enumerate(op.process_batch(recs)) if o["alarm"]), None)
        warm = warm_up_of(op)
        assert first is None or first + 1 >= warm, (name, first, warm)
