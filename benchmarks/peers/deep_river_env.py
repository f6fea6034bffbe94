"""The deep-river peer's own virtual environment (``benchmarks/learners_vs_peers.py``).

deep-river (River-compatible online deep learning on PyTorch) is what a River user who wants
an online neural network would pick. Every release pins torch to an old line (0.3.4, the
newest: ``torch>=2.5,<2.6`` on Linux, ``river>=0.25,<0.26``; 0.3.0-0.3.2: ``torch==2.2.2``;
0.2.x: ``torch~=2.2`` or ``~=1.13``), so ``pip install deep-river torch==2.13.0`` cannot be
resolved (the error is recorded in the venv's marker, see :func:`pin_conflict`). The peer must
run on this machine's CPU build of torch 2.13.0 (the only torch wheel on local disk; a
torch 2.5 from PyPI would pull the CUDA build). So the venv is made in two steps:

1. ``pip install`` of :data:`PINS`: torch ``2.13.0+cpu`` and the tree pip resolved for
   deep-river 0.3.4's other requirements (river 0.25.0, numpy >= 2.3.4, pandas, scikit-learn,
   sortedcontainers, tqdm, torchviz) plus ``pytest``, which ``deep_river/utils/
   estimator_checks.py`` imports at import time without declaring it;
2. ``pip install --no-deps deep-river==0.3.4``: deep-river's torch pin is overridden (it is a
   pure-Python package; its classifier ran unchanged on torch 2.13 here).

:func:`ensure_venv` makes the venv once (idempotent: a marker file records the pins and the
base interpreter's version); :func:`run_deep_river` runs ``deep_river_peer.py`` (next to this
file) in it through a subprocess exchanging JSON. Only the standard library is imported here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_env import (  # noqa: E402
    MARKER,
    _base_python_version,
    _read_marker,
    _venv_python,
    make_venv,
    peer_env,
)

DEFAULT_VENV = Path("~/.cache/shiftwatch-peers/deep-river").expanduser()
PEER_SCRIPT = Path(__file__).resolve().with_name("deep_river_peer.py")
MARKER_FORMAT = 1

DEEP_RIVER_VERSION = "0.3.4"
TORCH_VERSION = "2.13.0+cpu"
# The tree pip resolved (CPython 3.11, linux x86_64) for deep-river 0.3.4's requirements other
# than torch, with torch held at the local CPU wheel; pinned so that the peer is reproducible.
PINS = (
    f"torch=={TORCH_VERSION}",
    "river==0.25.0",
    "numpy==2.4.6",
    "pandas==2.3.3",
    "scikit-learn==1.9.1",
    "scipy==1.17.1",
    "sortedcontainers==2.4.0",
    "tqdm==4.66.6",
    "torchviz==0.0.3",
    "graphviz==0.21",
    "pytest==9.2.0",
    "iniconfig==2.3.1",
    "pluggy==1.7.0",
    "Pygments==2.21.0",
    "altair==6.3.0",
    "attrs==26.1.0",
    "cloudpickle==3.1.3",
    "filelock==4.3.2",
    "fsspec==2026.9.0",
    "Jinja2==3.1.6",
    "joblib==1.6.0",
    "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1",
    "MarkupSafe==3.0.4",
    "mpmath==1.3.0",
    "narwhals==2.29.0",
    "networkx==3.6.1",
    "packaging==26.4",
    "python-dateutil==4.0.0",
    "pytz==2026.6",
    "referencing==0.37.0",
    "rpds-py==2026.9.1",
    "sympy==1.14.0",
    "threadpoolctl==3.8.0",
    "typing_extensions==4.16.0",
    "tzdata==2026.6",
)
NO_DEPS = (f"deep-river=={DEEP_RIVER_VERSION}",)


def pin_conflict(vpy: str, venv: Path) -> str:
    """What pip says to ``install deep-river==<version> torch==2.13.0`` (a dry run in the
    venv): the evidence that deep-river's pins forbid this machine's torch."""
    proc = subprocess.run(
        [vpy, "-m", "pip", "--disable-pip-version-check", "--no-input", "install", "--dry-run",
         f"deep-river=={DEEP_RIVER_VERSION}", "torch==2.13.0"],
        capture_output=True, text=True, env=peer_env(venv))
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines()
             if ln.strip() and not ln.startswith("WARNING: Location")]
    keep = [ln for ln in lines if ln.startswith("ERROR: Cannot install") or "depends on" in ln]
    return f"pip exit code {proc.returncode}: " + " / ".join(ln.strip() for ln in keep)


def ensure_venv(venv: str | Path | None = None, python: str | None = None,
                quiet: bool = True, log=None) -> str:
    """Make the deep-river venv at ``venv`` (default ``~/.cache/shiftwatch-peers/deep-river``)
    if it is not already there with the right pins; return the path of its python."""
    venv = Path(venv).expanduser() if venv is not None else DEFAULT_VENV
    python = python or sys.executable
    vpy = _venv_python(venv)
    say = log or (lambda msg: None)
    wanted = {"format": MARKER_FORMAT, "pins": list(PINS), "no_deps": list(NO_DEPS),
              "python": _base_python_version(python)}
    conflict: dict[str, str] = {}

    def finish() -> None:
        conflict["pip"] = pin_conflict(str(vpy), venv)
        pip = [str(vpy), "-m", "pip", "--disable-pip-version-check", "--no-input"]
        subprocess.run([*pip, *(["-q"] if quiet else []), "install", "--no-deps", *NO_DEPS],
                       check=True, env=peer_env(venv))
        got = versions_of(str(vpy), venv)
        if got.get("deep_river") != DEEP_RIVER_VERSION or got.get("torch") != TORCH_VERSION:
            raise RuntimeError(f"the deep-river venv has {got}, wanted deep-river "
                               f"{DEEP_RIVER_VERSION} and torch {TORCH_VERSION}")

    out = make_venv(venv, python, PINS, wanted, finish, quiet, say)
    if conflict:  # a new venv: keep pip's refusal beside the pins
        marker = _read_marker(venv) or {}
        marker["pin_conflict"] = conflict["pip"]
        (venv / MARKER).write_text(json.dumps(marker, indent=1))
    return out


def versions_of(vpy: str, venv: Path) -> dict:
    out = subprocess.run([vpy, str(PEER_SCRIPT), "--versions"], check=True,
                         capture_output=True, text=True, env=peer_env(venv))
    return json.loads(out.stdout)


def marker(venv: str | Path | None = None) -> dict:
    """The venv's marker: pins, python, creation time and pip's refusal of the plain install."""
    venv = Path(venv).expanduser() if venv is not None else DEFAULT_VENV
    return _read_marker(venv) or {}


def run_deep_river(streams: list[dict], seed: int, params: dict | None = None, venv=None,
                   timeout: float | None = None) -> dict:
    """Run deep-river's classifier test-then-train on each stream (``name``, ``x`` rows,
    ``y`` labels) with a fresh model per stream; returns ``deep_river_peer.py``'s output
    document (versions, per stream ``y_pred``, ``wall_s``, ``records_per_s``)."""
    vpy = ensure_venv(venv)
    venv_path = Path(vpy).parent.parent
    doc = {"seed": seed, "params": dict(params or {}), "streams": [
        {"name": s["name"], "x": [list(map(float, row)) for row in s["x"]],
         "y": [int(v) for v in s["y"]]} for s in streams]}
    proc = subprocess.run([vpy, str(PEER_SCRIPT)], input=json.dumps(doc), capture_output=True,
                          text=True, timeout=timeout, env=peer_env(venv_path))
    if proc.returncode != 0:
        raise RuntimeError(f"deep_river_peer.py failed ({proc.returncode}):\n"
                           f"{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


if __name__ == "__main__":
    t = time.perf_counter()
    print(ensure_venv(quiet=True, log=lambda m: print(m, file=sys.stderr)))
    print(json.dumps(marker(), indent=1), file=sys.stderr)
    print(f"{time.perf_counter() - t:.2f} s", file=sys.stderr)
