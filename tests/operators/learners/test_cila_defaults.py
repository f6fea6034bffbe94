"""CILA's class-balanced online probe and optional cross-entropy head (issue 35, build 4)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shiftwatch.operators import create, dumps_state, loads_state  # noqa: E402
from shiftwatch.operators.learners.cila import CILA  # noqa: E402

SMALL = {"buffer_size": 12, "batch_size": 8, "hidden_sizes": [16], "embedding_dim": 8,
         "projection_dim": 8, "probe_epochs": 10, "seed": 3}


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(("param", "value"), [
    ("ce_weight", -1.0), ("ce_weight", float("nan")), ("ce_weight", True), ("ce_weight", "1"),
    ("probe_balance", 1), ("probe_balance", "yes"), ("probe_balance", None),
    ("probe_refit", "none"), ("probe_refit", True),
])
def test_new_params_are_validated(param, value):
    with pytest.raises(ValueError, match=param):
        create("cila", **{param: value})


def _captured_probe_weights(probe_balance: bool) -> list:
    """The sample weights of every online probe update on a 3-task stream (the boundary
    refits, ``probe_epochs`` steps each, call the same method: left out)."""
    op = CILA(**SMALL, probe_balance=probe_balance, ce_weight=0.0, probe_steps=7)
    stream = CILA._test_stream(SMALL)
    op.process(stream[0])  # builds the network and its probe
    seen = []
    sgd = op._probe.sgd

    def spy(feats, y, steps, weights=None):
        if steps == op.probe_steps:
            seen.append((y.clone(), None if weights is None else weights.clone()))
        return sgd(feats, y, steps, weights)

    op._probe.sgd = spy
    op.process_batch(stream[1:])
    return seen


def test_balanced_probe_weighs_every_class_of_a_step_equally():
    steps = _captured_probe_weights(True)
    assert len(steps) > 5
    replayed = 0
    for y, w in steps:
        assert w is not None
        per_class = [float(w[y == c].sum()) for c in torch.unique(y)]
        np.testing.assert_allclose(per_class, per_class[0], rtol=1e-5)
        counts = torch.bincount(y)
        replayed += int((counts[counts > 0].min() < counts.max()).item())
    assert replayed > 0  # some steps mixed unequal class counts (else the test proves nothing)
    assert all(w is None for _, w in _captured_probe_weights(False))


def test_ce_head_trains_the_encoder_and_keeps_its_head_at_a_boundary():
    stream = CILA._test_stream(SMALL)
    plain = CILA(**SMALL, ce_weight=0.0)
    head = CILA(**SMALL, ce_weight=1.0)
    plain.process_batch(stream[:40])
    head.process_batch(stream[:40])
    assert not all(torch.equal(a, b) for a, b in zip(
        plain._encoder.parameters(), head._encoder.parameters(), strict=True))
    # At a boundary the head is not refitted from zero (it is what predicts).
    head._train_pending()
    w = head._probe.w.clone()
    head.end_task()
    assert torch.equal(head._probe.w, w)
    plain._train_pending()
    w = plain._probe.w.clone()
    plain.end_task()
    assert not torch.equal(plain._probe.w, w)


def test_ce_head_step_size_is_probe_lr_whatever_the_weight():
    # The head's SGD step is probe_lr times the gradient of the unweighted cross-entropy, so
    # ce_weight scales only the encoder's share: with the encoder held fixed, two weights
    # give the same head.
    stream = CILA._test_stream(SMALL)[:8]
    heads = []
    for weight in (1.0, 7.0):
        op = CILA(**SMALL, ce_weight=weight)
        op.process(stream[0])
        before = op._encoder.state_dict()
        op._optimizer.step = lambda: None  # keep the encoder fixed
        op.process_batch(stream[1:])
        assert all(torch.equal(v, op._encoder.state_dict()[k]) for k, v in before.items())
        heads.append(op._probe.w.clone())
    torch.testing.assert_close(heads[0], heads[1])


def test_warm_refit_starts_from_the_online_probe():
    from shiftwatch.operators.learners.linear_probe import LinearProbe

    probe = LinearProbe(lr=0.5, dim=2, n_classes=2)
    probe.w, probe.b = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([0.5, -0.5])
    feats, ys = torch.eye(2), np.array([0, 1])
    probe.refit(feats, ys, steps=0, warm=True)
    assert probe.w.tolist() == [[1.0, 2.0], [3.0, 4.0]] and probe.b.tolist() == [0.5, -0.5]
    probe.refit(feats, ys, steps=0)
    assert not probe.w.any() and not probe.b.any()
    # In the operator: same encoder either way, another probe after a boundary.
    stream = CILA._test_stream(SMALL)
    ops = [CILA(**SMALL, probe_refit=r) for r in ("zero", "warm")]
    for op in ops:
        op.process_batch(stream[:40])
        op.end_task()
    for a, b in zip(ops[0]._encoder.parameters(), ops[1]._encoder.parameters(), strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(ops[0]._probe.w, ops[1]._probe.w)


@pytest.mark.parametrize("params", [{"ce_weight": 2.0}, {"probe_balance": True},
                                    {"probe_balance": True, "probe_refit": "warm"},
                                    {"probe_balance": False, "ce_weight": 0.0}])
@pytest.mark.parametrize("cut", [13, 50])
def test_resume_equals_uninterrupted_with_new_params(params, cut):
    stream = CILA._test_stream(SMALL)
    p = {**SMALL, "kappa": 3.0, **params}
    whole = create("cila", **p)
    expected = whole.process_batch(stream)
    whole.end_task()
    first = create("cila", **p)
    head = first.process_batch(stream[:cut])
    resumed = create("cila", **p)
    resumed.load_state_dict(loads_state(dumps_state(first.state_dict())))
    got = head + resumed.process_batch(stream[cut:])
    resumed.end_task()
    assert got == expected
    assert dumps_state(resumed.state_dict()) == dumps_state(whole.state_dict())
