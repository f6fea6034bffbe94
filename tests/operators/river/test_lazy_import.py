"""``river:NAME`` imports only the River module that defines the detector
(``operators/river/lazy_import.py``), and ``river.drift`` still works whole afterwards."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_detector_imports_neither_scipy_stats_nor_sklearn():
    _run("""
        import sys
        from shiftwatch.operators import create
        ops = [create("river:ADWIN"), create("river:PageHinkley"), create("river:DDM")]
        for op in ops:
            op.process({"key": "a", "value": 0.0})
        heavy = [m for m in ("sklearn", "scipy.stats", "pandas") if m in sys.modules]
        assert not heavy, heavy
        assert "river.drift.kswin" not in sys.modules
        """)


def test_river_drift_is_whole_once_asked_for():
    _run("""
        from shiftwatch.operators import create
        from shiftwatch.operators.river.adapter import river_detector_names
        from shiftwatch.operators.river.lazy_import import imported_detectors
        adwin, ddm = create("river:ADWIN"), create("river:DDM")
        import river.drift
        from river.drift import KSWIN
        from river.drift.binary import DDM
        assert river.drift.ADWIN is adwin.river_class and DDM is ddm.river_class
        assert KSWIN.__module__ == "river.drift.kswin"
        assert river.drift.datasets.AirlinePassengers.__module__.startswith("river.")
        assert "datasets" in river.drift.__all__ and "DDM" in river.drift.binary.__all__
        names = river_detector_names()
        assert names == sorted(imported_detectors()), names
        for name in names:
            assert create(f"river:{name}").river_class is imported_detectors()[name]
        try:
            river.drift.NoSuchThing
        except AttributeError as exc:
            assert "NoSuchThing" in str(exc)
        else:
            raise AssertionError("no AttributeError")
        """)


def test_river_drift_imported_first_is_used_as_it_is():
    _run("""
        import river.drift
        from shiftwatch.operators import create
        assert create("river:KSWIN").river_class is river.drift.KSWIN
        assert create("river:HDDMA").river_class is river.drift.binary.HDDM_A \\
            if hasattr(river.drift.binary, "HDDM_A") else river.drift.binary.HDDMA
        """)
