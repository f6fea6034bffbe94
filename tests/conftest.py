"""Test-session settings shared by every folder.

Under pytest-xdist (the README's command runs ``-n 6 --dist loadgroup``) the workers take
tests from one queue in collection order. The order is set here: the longest tests first (a
wheel or image install, the README's examples: they start at once, instead of one starting
last and running alone at the end), then the Kafka tests, which mostly wait (group joins,
timeouts), spread evenly among the rest, which mostly compute: about half the workers wait
on a broker while the others keep both cores busy. With the Kafka tests all first (as
before), the cores were 35-90% idle for the first 100 s and then saturated (vmstat, 2 cores).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# The suite writes bytecode even where PYTHONDONTWRITEBYTECODE is set (it is on the
# development machine): otherwise every worker and each of the hundreds of `shiftwatch`
# processes the tests start compiles every module it imports from source again (a worker's
# collection: 7.9 s of CPU against 5.5 s with the bytecode written). Set here, in the
# controller, before the workers and the warm-up start, so they inherit it.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    sys.dont_write_bytecode = False

#: Files whose tests take longest (measured, 2 cores: the image's and the wheel's install and
#: run every operator, 45-50 s each; the README's examples 50 s), longest first.
LONG_FIRST = (
    HERE / "test_dockerfile.py",
    HERE / "test_wheel.py",
    HERE / "test_readme_examples.py",
)
#: The tests that mostly wait on a broker, in this order among themselves (a stage that loses
#: its cluster takes longest).
WAITING = (HERE / "integration" / "test_broker_outage.py", HERE / "integration")
#: Their share of the workers' time (measured on a warm run: 786 s of wall time for the 99
#: Kafka tests, 689 s for the other 2,178 tests), and the mean wall time of one of each.
WAITING_SHARE = 0.53
WAITING_S, OTHER_S = 8.0, 0.3


def _rank(item, order) -> int:
    path = Path(str(item.fspath)).resolve()
    for rank, first in enumerate(order):
        if path == first or first in path.parents:
            return rank
    return len(order)


def _interleave(waiting: list, other: list) -> list:
    """Both lists in their own order, merged so that the expected time spent on waiting
    tests keeps to WAITING_SHARE of the time spent so far."""
    out, w, o, tw, to = [], 0, 0, 0.0, 0.0
    while w < len(waiting) or o < len(other):
        if o == len(other) or (w < len(waiting)
                               and tw * (1 - WAITING_SHARE) <= to * WAITING_SHARE):
            out.append(waiting[w])
            w, tw = w + 1, tw + WAITING_S
        else:
            out.append(other[o])
            o, to = o + 1, to + OTHER_S
    return out


def pytest_collection_modifyitems(config, items):
    # Only under xdist (config.workerinput exists on its workers): every worker sorts the
    # same collection the same way (a stable sort), as xdist requires.
    if hasattr(config, "workerinput"):
        ranks = {id(i): (_rank(i, LONG_FIRST), _rank(i, WAITING)) for i in items}
        first = sorted((i for i in items if ranks[id(i)][0] < len(LONG_FIRST)),
                       key=lambda i: ranks[id(i)][0])
        rest = [i for i in items if ranks[id(i)][0] == len(LONG_FIRST)]
        waiting = sorted((i for i in rest if ranks[id(i)][1] < len(WAITING)),
                         key=lambda i: ranks[id(i)][1])
        other = [i for i in rest if ranks[id(i)][1] == len(WAITING)]
        items[:] = first + _interleave(waiting, other)


def pytest_sessionstart(session):
    """Every worker starts with the default SIGINT and SIGTERM dispositions. A pytest-xdist
    worker can inherit SIGINT ignored (execnet), and then the tests that interrupt a replay,
    and the child processes they stop with a signal (which inherit an ignored disposition),
    see nothing: which tests failed depended on the worker they were scheduled on."""
    import signal
    import threading

    _warm_numba(session.config)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _warm_numba(config) -> None:
    """In the pytest-xdist controller, before its workers start (its own sessionstart is
    trylast): compile the Numba kernels once into their cache (tests/numba_warm.py, one
    process per core sharing out the jobs), so the workers load them instead of each
    compiling them at once."""
    import os
    import subprocess
    import sys
    import tempfile
    import time

    if hasattr(config, "workerinput") or (config.getoption("numprocesses", None) or 0) < 2:
        return
    n = max(1, min(os.cpu_count() or 1, 4))
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="numba-warm-") as claims:
        procs = [subprocess.Popen([sys.executable, str(HERE / "numba_warm.py"), claims],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for _ in range(n)]
        failed = []
        for p in procs:
            try:
                _, err = p.communicate(timeout=600)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
            if p.returncode:
                failed += err.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        what = f"; a job failed (its tests compile what it missed): {failed}" if failed else ""
        reporter.write_line(f"Numba kernels compiled into their cache in "
                            f"{time.monotonic() - t0:.0f} s ({n} processes){what}")
