"""The Quix Streams peer's own virtual environment (``benchmarks/kafka_vs_quix.py``).

Quix Streams (``quixstreams``, on confluent-kafka / librdkafka and RocksDB) is what a user
who wants per-key drift detection on Kafka in Python would otherwise write. The project does
not depend on it: it runs in a venv of its own, made here like the ClaSS peer's
(:mod:`peer_env`), and the app (``quix_app.py`` next to this file) is started in it as a
subprocess.

:func:`ensure_venv` makes (once) the venv with the pinned packages and returns its python.
Idempotent: a marker file in the venv records the pins and the base interpreter's version,
and a venv whose marker matches is used as it is. River is pinned to the main environment's
release (0.26.1) so that the peer's ADWIN is the same code as shiftwatch's ``river:ADWIN``,
and NumPy to the main environment's 2.3.5.

Only the standard library is imported here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_env import _base_python_version, _venv_python, make_venv, peer_env  # noqa: E402

DEFAULT_VENV = Path("~/.cache/shiftwatch-peers/quix").expanduser()
APP_SCRIPT = Path(__file__).resolve().with_name("quix_app.py")
MARKER = ".shiftwatch-peer.json"
MARKER_FORMAT = 1

QUIXSTREAMS_VERSION = "3.28.1"
RIVER_VERSION = "0.26.1"
# The tree pip resolved for quixstreams==3.28.1 + river==0.26.1 on CPython 3.11 (linux
# x86_64), numpy held at the main environment's 2.3.5; pinned so the peer is reproducible.
# confluent-kafka (librdkafka), rocksdict (RocksDB), orjson and river matter for speed.
PINS = (
    f"quixstreams=={QUIXSTREAMS_VERSION}",
    f"river=={RIVER_VERSION}",
    "confluent-kafka==2.12.2",
    "rocksdict==0.3.29",
    "orjson==3.13.0",
    "numpy==2.3.5",
    "scipy==1.17.1",
    "annotated-types==0.8.0",
    "anyio==4.16.0",
    "attrs==26.1.0",
    "Authlib==1.9.10",
    "avro==1.12.2",
    "cachetools==8.0.2",
    "certifi==2026.10.19.post1",
    "cffi==2.1.1",
    "charset-normalizer==3.5.3",
    "cryptography==50.0.2",
    "fastavro==1.13.1",
    "googleapis-common-protos==1.76.0",
    "h11==0.16.0",
    "httpcore==1.0.9",
    "httpx==0.28.1",
    "idna==3.20",
    "joserfc==1.8.0",
    "jsonlines==4.0.0",
    "jsonpath-ng==1.16.0",
    "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1",
    "markdown-it-py==4.3.0",
    "mdurl==0.1.2",
    "narwhals==2.29.0",
    "protobuf==7.36.2",
    "pycparser==3.12",
    "pydantic==2.13.5",
    "pydantic-settings==2.15.0",
    "pydantic_core==2.46.5",
    "Pygments==2.21.0",
    "pyrsistent==0.20.0",
    "python-dotenv==1.2.4",
    "referencing==0.37.0",
    "requests==2.34.2",
    "rich==15.0.0",
    "rpds-py==2026.9.1",
    "typing-inspection==0.4.5",
    "typing_extensions==4.16.0",
    "urllib3==2.8.0",
)


def ensure_venv(venv: str | Path | None = None, python: str | None = None,
                quiet: bool = True, log=None) -> str:
    """Make the Quix venv at ``venv`` (default ``~/.cache/shiftwatch-peers/quix``) if it is
    not already there with the right pins; return the path of its python."""
    venv = Path(venv).expanduser() if venv is not None else DEFAULT_VENV
    python = python or sys.executable
    vpy = _venv_python(venv)
    say = log or (lambda msg: None)
    wanted = {"format": MARKER_FORMAT, "pins": list(PINS),
              "python": _base_python_version(python)}

    def finish() -> None:
        check = subprocess.run(
            [str(vpy), str(APP_SCRIPT), "--versions"], check=True, capture_output=True,
            text=True, env=peer_env(venv))
        got = json.loads(check.stdout)
        if got.get("quixstreams") != QUIXSTREAMS_VERSION or got.get("river") != RIVER_VERSION:
            raise RuntimeError(f"the Quix venv has {got}, wanted quixstreams "
                               f"{QUIXSTREAMS_VERSION} and river {RIVER_VERSION}")

    return make_venv(venv, python, PINS, wanted, finish, quiet, say)


def versions(venv: str | Path | None = None) -> dict:
    """The peer's package versions (quixstreams, confluent-kafka, librdkafka, river, ...)."""
    vpy = ensure_venv(venv)
    out = subprocess.run([vpy, str(APP_SCRIPT), "--versions"], check=True,
                         capture_output=True, text=True,
                         env=peer_env(Path(vpy).parent.parent))
    return json.loads(out.stdout)


if __name__ == "__main__":
    t = time.perf_counter()
    print(ensure_venv(quiet=True, log=lambda m: print(m, file=sys.stderr)))
    print(f"{time.perf_counter() - t:.2f} s", file=sys.stderr)
