"""The parts the torch learners are built from: thread limiter, seeded init, MLP, replay
memories, linear probe and task-boundary rule."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shiftwatch.operators.learners.linear_probe import LinearProbe  # noqa: E402
from shiftwatch.operators.learners.replay import ClassBalancedBuffer, Reservoir, balanced_sample  # noqa: E402
from shiftwatch.operators.learners.task_boundaries import TaskBoundaries  # noqa: E402
from shiftwatch.operators.learners.torch_nets import TorchThreads, check_int, mlp, seeded_init  # noqa: E402


def _flushing() -> bool:
    return bool(torch.tensor([1e-40]).mul_(1.0)[0] == 0)


def test_thread_limiter_sets_and_restores_threads_and_flush_mode():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert not _flushing()
        with TorchThreads(1, flush_denormal=True):
            assert torch.get_num_threads() == 1 and _flushing()
            with TorchThreads(1):  # nested, no flush asked: leaves the mode alone
                assert _flushing()
            assert torch.get_num_threads() == 1 and _flushing()
        assert torch.get_num_threads() == 2 and not _flushing()
        with TorchThreads(None):
            assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), TorchThreads(1, flush_denormal=True):
            raise RuntimeError("restored on errors too")
        assert torch.get_num_threads() == 2 and not _flushing()
    finally:
        torch.set_num_threads(before)


def test_thread_limiter_blocks_of_two_threads_take_turns():
    # Two "stages" in threads of one process, each asking for its own setting. torch's API
    # makes both settings process-wide (how far each is per OS thread depends on the build), so
    # a block that changes them must not overlap another thread's: each block runs, and
    # restores, under its own setting, and the process setting comes back at the end.
    import threading
    import time

    before = torch.get_num_threads()
    torch.set_num_threads(3)
    log: list[tuple[str, int]] = []
    seen: dict[int, list] = {1: [], 2: []}
    start = threading.Barrier(2)

    def stage(threads: int, flush: bool) -> None:
        start.wait()
        for _ in range(10):
            with TorchThreads(threads, flush_denormal=flush):
                log.append(("enter", threads))
                time.sleep(0.002)  # give the other thread time to try to enter
                seen[threads].append((torch.get_num_threads(), _flushing()))
                log.append(("exit", threads))

    try:
        workers = [threading.Thread(target=stage, args=(1, True)),
                   threading.Thread(target=stage, args=(2, False))]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        # Blocks never interleave: every enter is followed by the same thread's exit.
        assert len(log) == 40
        assert all(log[i][0] == "enter" and log[i + 1] == ("exit", log[i][1])
                   for i in range(0, 40, 2))
        assert seen[1] == [(1, True)] * 10 and seen[2] == [(2, False)] * 10
        assert torch.get_num_threads() == 3 and not _flushing()
    finally:
        torch.set_num_threads(before)


def test_seeded_init_is_reproducible_and_leaves_the_global_rng_alone():
    global_state = torch.random.get_rng_state()
    nets = []
    for _ in range(2):
        g = torch.Generator().manual_seed(7)
        with seeded_init(g):
            nets.append(mlp([3, 5, 2], last_relu=True))
    assert torch.equal(torch.random.get_rng_state(), global_state)
    assert all(torch.equal(a, b) for a, b in zip(nets[0].state_dict().values(),
                                                 nets[1].state_dict().values(), strict=True))
    assert [type(m).__name__ for m in nets[0]] == ["Linear", "ReLU", "Linear", "ReLU"]


@pytest.mark.parametrize("value", [0, 1.0, True, "2", None])
def test_check_int_names_the_parameter(value):
    class Owner:
        batch_size = value

    with pytest.raises(ValueError, match="batch_size"):
        check_int(Owner(), "batch_size")


def test_reservoir_keeps_each_offer_with_probability_size_over_n():
    size, n, reps = 4, 16, 1500
    g = torch.Generator().manual_seed(0)
    kept = np.zeros(n)
    for _ in range(reps):
        res = Reservoir(size, 1, np.float32)
        for i in range(n):
            res.add(np.array([i], dtype=np.float32), i, g)
        assert len(res) == size and res.seen == n
        assert np.array_equal(res.x[:, 0].astype(int), res.y)
        kept[res.y] += 1
    # Each of the 16 offers is kept with probability 1/4: a binomial(1500, 0.25) count,
    # standard deviation ~17; 5 standard deviations.
    assert np.all(np.abs(kept - reps * size / n) < 85), kept


def test_balanced_sample_water_fills_the_classes():
    ys = np.array([0] * 10 + [1] * 2 + [2] * 5)
    xs = np.arange(len(ys), dtype=np.float32)[:, None]
    g = torch.Generator().manual_seed(1)
    x, y = balanced_sample(xs, ys, 9, g)
    assert np.bincount(y).tolist() == [4, 2, 3]
    assert np.array_equal(ys[x[:, 0].astype(int)], y)  # rows stay with their labels
    assert np.all(np.diff(x[:, 0]) > 0)  # class by class (here also index order)
    x, y = balanced_sample(xs, ys, 100, g)
    assert len(y) == len(ys)


def test_class_balanced_buffer_merges_and_empties_the_pool():
    g = torch.Generator().manual_seed(2)
    buf = ClassBalancedBuffer(6, 2)
    for task in range(3):
        pool = Reservoir(6, 2, np.float32)
        for i in range(20):
            pool.add(np.full(2, i, dtype=np.float32), 2 * task + i % 2, g)
        buf.merge(pool, g)
        assert len(pool) == 0 and pool.seen == 0
    assert np.bincount(buf.y).tolist() == [1] * 6
    pick = buf.sample(4, g)
    assert len(set(pick.tolist())) == 4 and pick.max() < 6


def test_linear_probe_grows_and_refits_with_equal_class_weights():
    probe = LinearProbe(lr=1.0, dim=2)
    probe.add_class()
    probe.add_class()
    assert probe.w.shape == (2, 2) and probe.b.tolist() == [0.0, 0.0]
    # 9 samples of class 0 at (1, 0), 1 of class 1 at (0.6, 0.8): equal class weights
    # still separate them.
    feats = torch.tensor([[1.0, 0.0]] * 9 + [[0.6, 0.8]])
    ys = np.array([0] * 9 + [1])
    probe.refit(feats, ys, steps=5)
    assert probe.logits(feats).argmax(1).tolist() == ys.tolist()
    unweighted = LinearProbe(lr=1.0, dim=2, n_classes=2)
    unweighted.sgd(feats, torch.from_numpy(ys), steps=5)
    assert unweighted.logits(feats).argmax(1).tolist() == [0] * 10  # the rare class lost
    probe.add_class()
    assert probe.w.shape == (3, 2) and probe.w[2].abs().sum() == 0


@pytest.mark.parametrize("mode, y, task, alarm, records, expected", [
    ("task", 9, 1, True, 0, True),        # the task field changed
    ("task", 9, 0, True, 50, False),      # same task: alarms and labels do not count
    ("task", 9, None, True, 50, False),   # no task field
    ("auto", 0, 1, None, 0, True),        # auto uses the task field when there is one
    ("auto", 9, None, True, 50, True),    # ... else the alarm
    ("auto", 9, None, False, 50, False),  # ... an alarm field that is false
    ("auto", 9, None, None, 50, True),    # ... else a new label
    ("alarm", 0, None, True, 4, False),   # within min_task_length
    ("alarm", 0, None, True, 5, True),
    ("alarm", 9, None, None, 50, False),  # no alarm field: new labels do not count
    ("label", 9, 1, True, 4, False),      # within min_task_length
    ("label", 9, None, None, 5, True),
    ("label", 0, None, True, 50, False),  # a known label
])
def test_task_boundary_rule(mode, y, task, alarm, records, expected):
    tb = TaskBoundaries(mode, min_task_length=5)
    tb.start(0)
    tb.records = records
    assert tb.is_boundary(y, task, alarm, known_labels=[0, 1]) is expected


def test_inner_detector_alarms_join_the_record_alarm():
    tb = TaskBoundaries("alarm", 0, "river:PageHinkley",
                        {"field": "y", "threshold": 1.0, "min_instances": 5})
    alarms = [tb.alarm_of({"y": float(i >= 20) * 10}, None) for i in range(40)]
    assert not any(alarms[:20]) and any(alarms[20:])
    assert tb.alarm_of({"y": 10.0}, True) is True
