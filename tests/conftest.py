"""Test-session settings shared by every folder.

Under pytest-xdist (the README's command runs ``-n 6 --dist loadgroup``) the workers take
tests in collection order, so the longest tests (a wheel or image install, a Kafka broker's
group joins and timeouts) are put first: they start at once, spread over the workers, and
the short tests fill the gaps, instead of a long test starting last and running alone at
the end.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Files and folders whose tests take longest (measured, 2 cores: the image's and the wheel's
#: install and run every operator, 100-150 s each; the README's examples 100 s; a stage that
#: loses its cluster up to 140 s; the integration folder 18 min serially, mostly waiting),
#: longest first; everything else keeps its order after them.
LONG_FIRST = (
    HERE / "test_dockerfile.py",
    HERE / "test_wheel.py",
    HERE / "integration" / "test_broker_outage.py",
    HERE / "test_readme_examples.py",
    HERE / "integration",
    HERE / "test_docs_site.py",
)


def _rank(item) -> int:
    path = Path(str(item.fspath)).resolve()
    for rank, first in enumerate(LONG_FIRST):
        if path == first or first in path.parents:
            return rank
    return len(LONG_FIRST)


def pytest_collection_modifyitems(config, items):
    # Only under xdist (config.workerinput exists on its workers): every worker sorts the
    # same collection the same way (a stable sort), as xdist requires.
    if hasattr(config, "workerinput"):
        items.sort(key=_rank)


def pytest_sessionstart(session):
    """Every worker starts with the default SIGINT and SIGTERM dispositions. A pytest-xdist
    worker can inherit SIGINT ignored (execnet), and then the tests that interrupt a replay,
    and the child processes they stop with a signal (which inherit an ignored disposition),
    see nothing: which tests failed depended on the worker they were scheduled on."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
