"""The ClaSS peer's own virtual environment, and a runner for it.

ClaSS (Ermshaus, Schäfer & Leser, PVLDB 17(8), 2024) is run through its authors' package
``claspy``, whose dependencies (numba < 0.62, numpy < 2.3, pandas < 2.4, scikit-learn < 1.8,
scipy < 1.16, and aeon, numba < 0.64) clash with the main project's environment. So it runs
in a venv of its own, made here, and is called through a subprocess.

* :func:`ensure_venv` makes (once) the venv and installs the pinned packages; it returns the
  venv's python. Idempotent: a marker file in the venv records the pins and the base
  interpreter's version, and a venv whose marker matches is used as it is.
* :func:`run_class` feeds series to ``class_peer.py`` (next to this file) in that venv and
  returns its per-series results.

Only the standard library is imported here, so the main environment can import this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_VENV = Path("~/.cache/shiftwatch-peers/class").expanduser()
PEER_SCRIPT = Path(__file__).resolve().with_name("class_peer.py")
MARKER = ".shiftwatch-peer.json"
MARKER_FORMAT = 1

CLASPY_VERSION = "0.2.8"
# The whole tree pip resolved for claspy==0.2.8 on CPython 3.11 (2 cores, linux x86_64),
# pinned so that the peer is reproducible. numba/llvmlite, numpy, scipy, pandas,
# scikit-learn and aeon are the ones that matter for results and speed.
PINS = (
    "claspy==0.2.8",
    "aeon==1.6.0",
    "numba==0.61.2",
    "llvmlite==0.44.0",
    "numpy==2.2.6",
    "scipy==1.15.3",
    "pandas==2.3.3",
    "scikit-learn==1.7.2",
    "statsmodels==0.15.0",
    "matplotlib==3.11.2",
    "networkx==3.6.1",
    "daproli==0.22",
    "Deprecated==1.3.1",
    "joblib==1.6.0",
    "cloudpickle==3.1.3",
    "threadpoolctl==3.8.0",
    "typing_extensions==4.16.0",
    "packaging==26.4",
    "patsy==1.0.3",
    "formulaic==1.2.2",
    "interface_meta==2.0.1",
    "narwhals==2.29.0",
    "wrapt==2.5.2",
    "tqdm==4.70.1",
    "python-dateutil==4.0.0",
    "pytz==2026.6",
    "tzdata==2026.6",
    "contourpy==1.3.3",
    "cycler==0.12.1",
    "fonttools==4.68.0",
    "kiwisolver==1.5.1",
    "pillow==13.0.0",
    "pyparsing==3.3.3",
)


def _venv_python(venv: Path) -> Path:
    if os.name == "nt":
        return venv / "Scripts" / "python.exe"
    return venv / "bin" / "python"


def _base_python_version(python: str) -> str:
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        return platform.python_version()
    out = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"],
        check=True, capture_output=True, text=True,
    )
    return out.stdout.strip()


def _wanted_marker(base_version: str) -> dict:
    return {"format": MARKER_FORMAT, "pins": list(PINS), "python": base_version}


def _read_marker(venv: Path) -> dict | None:
    try:
        return json.loads((venv / MARKER).read_text())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock
            yield
            return
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def peer_env(venv: Path) -> dict:
    """The environment class_peer.py runs with: the caller's, minus what would leak the main
    environment into the venv, plus single-threaded numeric libraries (the streaming path
    of claspy is serial) and a private matplotlib config directory."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")}
    env.update({
        "NUMBA_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": str(venv / ".mplconfig"),
        "PYTHONNOUSERSITE": "1",
    })
    return env


def ensure_venv(venv: str | os.PathLike | None = None, python: str | None = None,
                quiet: bool = True, log=None) -> str:
    """Make the peer venv at ``venv`` (default ``~/.cache/shiftwatch-peers/class``) if it is
    not already there with the right pins, and return the path of its python.

    ``python`` is the base interpreter for ``python -m venv`` (default: this one). The
    first time it runs ``python -m venv``, ``pip install`` of :data:`PINS`, and one JIT
    warm-up of claspy so that numba's on-disk cache is filled; then it writes the marker.
    When the marker matches it does nothing but read it.
    """
    venv = Path(venv).expanduser() if venv is not None else DEFAULT_VENV
    python = python or sys.executable
    vpy = _venv_python(venv)
    say = log or (lambda msg: None)
    base_version = _base_python_version(python)
    wanted = _wanted_marker(base_version)

    def finish() -> None:
        check = subprocess.run(
            [str(vpy), "-c", "from importlib.metadata import version; print(version('claspy'))"],
            check=True, capture_output=True, text=True, env=peer_env(venv),
        )
        if check.stdout.strip() != CLASPY_VERSION:
            raise RuntimeError(f"claspy {check.stdout.strip()!r} installed, "
                               f"wanted {CLASPY_VERSION}")
        # fill numba's cache (claspy's functions are njit(cache=True)); no series
        subprocess.run([str(vpy), str(PEER_SCRIPT)], input='{"series": []}', check=True,
                       capture_output=True, text=True, env=peer_env(venv))

    return make_venv(venv, python, PINS, wanted, finish, quiet, say)


def make_venv(venv: Path, python: str, pins, wanted: dict, finish, quiet: bool = True,
              say=lambda msg: None) -> str:
    """The python of a venv at ``venv`` with ``pins`` installed, made (under a lock) unless
    its marker already holds ``wanted``; ``finish()`` checks and warms a new one before the
    marker is written. Shared by the peers' venvs (ClaSS here, Quix in quix_env.py)."""
    vpy = _venv_python(venv)

    def ready() -> bool:
        marker = _read_marker(venv) or {}
        return vpy.exists() and all(marker.get(k) == v for k, v in wanted.items())

    if ready():
        return str(vpy)
    with _lock(venv.parent / (venv.name + ".lock")):
        if ready():  # another process may have finished meanwhile
            return str(vpy)
        if venv.exists() and any(venv.iterdir()) and not (venv / "pyvenv.cfg").exists():
            raise RuntimeError(f"{venv} exists, is not empty and is not a venv: not touching it")
        t0 = time.perf_counter()
        say(f"creating venv {venv} with {python} ({wanted.get('python')})")
        # --clear: a venv without a matching marker is stale or half made
        subprocess.run([python, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(vpy), "-m", "pip", "--disable-pip-version-check", "--no-input"]
        if quiet:
            pip.append("-q")
        subprocess.run([*pip, "install", *pins], check=True, env=peer_env(venv))
        finish()
        (venv / MARKER).write_text(json.dumps(
            {**wanted, "created_s": round(time.perf_counter() - t0, 1),
             "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
             "platform": platform.platform()}, indent=1))
        say(f"venv ready in {time.perf_counter() - t0:.1f} s")
    return str(vpy)


def run_class_doc(series_list, params: dict | None = None, venv=None, timeout: float | None = None,
                  jit_warmup: bool = True) -> dict:
    """Run class_peer.py on ``series_list`` and return its whole output document.

    Each item of ``series_list`` is a mapping with ``values`` (1-d list, or a list of
    rows for multivariate series), and optionally ``name`` and ``params``; ``params`` here
    are defaults for every series, overridden by an item's own.
    """
    vpy = ensure_venv(venv)
    venv_path = Path(vpy).parent.parent
    series = []
    for i, s in enumerate(series_list):
        values = s["values"]
        if hasattr(values, "tolist"):
            values = values.tolist()
        series.append({"name": s.get("name", str(i)), "values": values,
                       "params": dict(s.get("params") or {})})
    doc = {"series": series, "params": dict(params or {}), "jit_warmup": jit_warmup}
    proc = subprocess.run([vpy, str(PEER_SCRIPT)], input=json.dumps(doc), capture_output=True,
                          text=True, timeout=timeout, env=peer_env(venv_path))
    if proc.returncode != 0:
        raise RuntimeError(f"class_peer.py failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    out = json.loads(proc.stdout)
    out["stderr"] = proc.stderr
    return out


def run_class(series_list, params: dict | None = None, venv=None, timeout: float | None = None,
              jit_warmup: bool = True) -> list[dict]:
    """Run ClaSS on each series; one result dict per series, in order (see class_peer.py:
    ``change_points``, ``reported_at``, ``wall_s``, ``records_per_s``, ``params``,
    ``status``, ``error``, ``warnings``...)."""
    doc = run_class_doc(series_list, params, venv=venv, timeout=timeout, jit_warmup=jit_warmup)
    for r in doc["results"]:
        r["claspy_version"] = doc["claspy_version"]
    return doc["results"]


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="make the ClaSS peer venv; print its python")
    ap.add_argument("--venv", default=None)
    ap.add_argument("--python", default=None)
    a = ap.parse_args()
    t = time.perf_counter()
    print(ensure_venv(a.venv, a.python, quiet=True, log=lambda m: print(m, file=sys.stderr)))
    print(f"{time.perf_counter() - t:.2f} s", file=sys.stderr)
