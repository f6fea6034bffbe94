"""Compile the Numba kernels the test suite uses into their on-disk cache, once, before the
pytest-xdist workers start (tests/conftest.py runs this in the controller).

Every kernel is ``@njit(cache=True)``: compiled on its first call in a process, loaded from
``__pycache__`` afterwards. On a fresh clone no cache exists, so each of the six workers
compiled the same kernels at the same time (about 160 s of CPU on 2 cores, measured: 565 s
of CPU for the suite on a cold cache against 402 s on a warm one). Compiling them here once,
split over as many processes as there are cores, leaves the workers only loading them.

The jobs run what the library runs (every operator on its own test stream, record by record
and in batches; the per-value ``update`` API; ``Keyed(cs)`` as a fleet; the manifolds'
geometric methods; the columnar replay), so they compile the specializations the tests
call, not a hand-kept list of signatures. A kernel a job misses is compiled by the first
test that calls it, as before: nothing here can make a test pass or fail.

Run as ``python tests/numba_warm.py CLAIMS`` in as many processes as there are cores, with
CLAIMS the same empty folder: each process takes the next job no other has claimed.
"""

from __future__ import annotations

import os
import sys

import numpy as np

_LEARNERS = ("cila", "hare-tortoise")  # PyTorch, no Numba kernels


def operator(name: str, index: int) -> None:
    """Operator ``name`` with its ``index``-th unit-test parameters over its test stream,
    record by record and as one batch."""
    from itertools import islice

    from shiftwatch.operators import create, resolve

    params = next(islice(resolve(name)._unit_test_params(), index, None))
    op = create(name, **params)
    records = type(op)._test_stream(params, seed=0)
    for r in records:
        op.process(r)
    create(name, **params).process_batch(records)


def cs_update_and_fleet() -> None:
    from shiftwatch.operators import ConfSeqDetector, Keyed, create

    rng = np.random.default_rng(0)
    x = rng.normal(size=400)
    x[200:] += 3.0
    x = np.clip(x, -5.9, 5.9)
    for params in ({}, {"cs": "betting", "lower": -6.0, "upper": 6.0},
                   {"cs": "empirical-bernstein", "lower": -6.0, "upper": 6.0}):
        det = ConfSeqDetector(**params)
        for v in x:
            det.update(float(v))
    for params in ({}, {"cs": "hoeffding", "lower": -6.0, "upper": 6.0}):
        fleet = Keyed(create("cs", **params))
        records = [{"key": f"s{i % 7}", "offset": i, "ts": float(i),
                    "value": float(v)} for i, v in enumerate(np.tile(x, 10))]
        for i in range(0, len(records), 500):
            fleet.process_batch(records[i:i + 500])


def manifolds() -> None:
    from shiftwatch.operators.riemannian.linalg import sym_eigh_small, sym_eigvalsh_small
    from shiftwatch.operators.riemannian.manifolds import manifold_from_spec

    rng = np.random.default_rng(0)
    q = rng.normal(size=(3, 3))
    sym_eigh_small(q + q.T), sym_eigvalsh_small(q + q.T)
    for spec in ("spd-affine", "spd-log-euclidean", "spd-bures-wasserstein"):
        m = manifold_from_spec(spec, (3, 3))
        a, b = (q @ q.T + 3 * np.eye(3) for q in rng.normal(size=(2, 3, 3)))
        t = m.log(b, a)
        m.exp(t, a), m.retract(t, a), m.dist(a, b)
        m.step(b, a, 0.1), m.step(b, a, 0.1, retraction=True)
    g = manifold_from_spec("grassmann", (5, 2))
    a, b = (np.linalg.qr(rng.normal(size=(5, 2)))[0] for _ in range(2))
    t = g.log(b, a)
    g.exp(t, a), g.retract(t, a), g.dist(a, b), g.step(b, a, 0.1, retraction=True)
    s = manifold_from_spec("sphere", (4,))
    a, b = (v / np.linalg.norm(v) for v in rng.normal(size=(2, 4)))
    t = s.log(b, a)
    s.exp(t, a), s.retract(t, a), s.dist(a, b)


def csv_scan() -> None:
    """The replay's compiled CSV scan (streams/csv_kernel.py), through the column reader."""
    import tempfile

    from shiftwatch.streams.columns import csv_columns
    from shiftwatch.streams.files import CsvSource

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/s.csv"
        with open(path, "w") as f:
            f.write("key,ts,value\n" + "".join(f"k{i % 600},{i},{i / 7:.4f}\n"
                                                for i in range(1300)))  # (a table rehash)
        for _ in csv_columns(CsvSource(path, key="key", ts="ts")):
            pass
        with open(path, "w") as f:  # (vectors: their own scan; a long number float reads)
            f.write("key,ts,a,b\n" + "".join(f"k{i % 3},{i},{i / 7!r},{i}\n"
                                               for i in range(50)))
        for _ in csv_columns(CsvSource(path, key="key", ts="ts", value=["a", "b"]),
                             vectors=True):
            pass
    from shiftwatch.streams.csv_kernel import first_appearance

    first_appearance(np.arange(5, dtype=np.int64) % 3, 3)


def report_charts() -> None:
    """report.html's chart data (sinks/report_kernel.py)."""
    from shiftwatch.sinks.html_report import _reduce

    _reduce([np.arange(100.0)], 20)


#: The other jobs, by name.
EXTRA = {f.__name__: f for f in (cs_update_and_fleet, manifolds, csv_scan, report_charts)}
#: Compiling the Riemannian kernels takes half of the whole (31 of 57 s of CPU, measured):
#: jobs go longest first so that the processes finish together.
FIRST = ("karcher", "auto", "cs_update_and_fleet", "manifolds", "cs")


def jobs() -> list[str]:
    """Every job's name: ``NAME#I`` for an operator's I-th parameter set, then EXTRA's."""
    from shiftwatch.operators import registered_names, resolve

    out = [f"{n}#{i}" for n in registered_names() if n not in _LEARNERS
           for i, _ in enumerate(resolve(n)._unit_test_params())]
    out += list(EXTRA)
    rank = {n: i for i, n in enumerate(FIRST)}
    return sorted(out, key=lambda j: rank.get(j.split("#")[0], len(FIRST)))


def run(job: str) -> None:
    name, _, index = job.partition("#")
    if index:
        operator(name, int(index))
    else:
        EXTRA[name]()


def main(argv: list[str]) -> int:
    """``numba_warm.py CLAIMS``: run every job not yet claimed in the folder CLAIMS by
    another process of the same warm-up (a claim is a file created exclusively), so that
    however long each job takes, the processes share them out."""
    claims = argv[0]
    for job in jobs():
        try:
            os.close(os.open(os.path.join(claims, job.replace("/", "_")),
                             os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            continue
        run(job)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
