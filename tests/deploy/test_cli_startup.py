"""`shiftwatch --help`, `operators` and `sources` load none of the heavy libraries."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ["numba", "torch", "matplotlib", "kafka"]

_CODE = f"""
import contextlib, io, json, sys
from shiftwatch.deploy.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        rc = main(sys.argv[1:])
    except SystemExit as exc:  # --help exits through argparse
        rc = exc.code
print(json.dumps({{"rc": rc, "lines": len(out.getvalue().splitlines()),
                  "loaded": sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))}}))
"""


@pytest.mark.parametrize("args, min_lines", [(["--help"], 5), (["operators"], 40),
                                             (["operators", "--json"], 40), (["sources"], 10)])
def test_listing_commands_import_no_heavy_library(args, min_lines):
    proc = subprocess.run([sys.executable, "-c", _CODE, *args], capture_output=True, text=True,
                          check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["rc"] == 0
    assert result["lines"] >= min_lines  # the command did its work
    assert result["loaded"] == []


def test_the_check_would_see_a_heavy_import():
    # Guard against a test that cannot fail: creating an operator that needs Numba loads it.
    code = _CODE.replace("from shiftwatch.deploy.cli import main",
                         "from shiftwatch.deploy.cli import main\n"
                         "from shiftwatch.operators import create; create('cs')")
    proc = subprocess.run([sys.executable, "-c", code, "--help"], capture_output=True,
                          text=True, check=True)
    assert "numba" in json.loads(proc.stdout.strip().splitlines()[-1])["loaded"]
