"""Where Numba has no folder to cache compiled kernels in (no ``NUMBA_CACHE_DIR``, a
``__pycache__`` it cannot write, no home: a container's user running root's install), the
detectors still import and run: ``shiftwatch._jit.njit`` compiles such a kernel without a
cache and warns once. Plain ``numba.njit(cache=True)`` refuses to decorate there, which is
what made every detector fail to import in the image (issue 37)."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r'''
import json, warnings
import numba
import numba.core.caching as caching

caching.CacheImpl._locator_classes = []  # no folder to cache in, anywhere


def plain(x):
    return x + 1


try:
    numba.njit(cache=True)(plain)
    refused = False
except RuntimeError as exc:
    refused = "cannot cache function" in str(exc)

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from shiftwatch.operators import create
    from shiftwatch.operators.confseq.operator import ConfSeqOperator

    params = {}
    outs = create("cs").process_batch(ConfSeqOperator._test_stream(params, seed=0))
    shape = create("shape")
    shape.process_batch(type(shape)._test_stream({}, seed=0))
mine = [str(w.message) for w in caught if "shiftwatch: Numba" in str(w.message)]
print(json.dumps({"refused": refused, "outputs": len(outs),
                  "alarms": sum(bool(o.get("alarm")) for o in outs), "warnings": mine}))
'''


def test_detectors_run_without_a_cache_folder_and_say_so_once(tmp_path):
    script = tmp_path / "no_cache.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["refused"], "plain numba.njit(cache=True) should refuse here (the condition)"
    assert got["outputs"] == 300 and got["alarms"] >= 1
    assert len(got["warnings"]) == 1 and "NUMBA_CACHE_DIR" in got["warnings"][0]
