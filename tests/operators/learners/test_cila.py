"""CILA operator: losses against a slow reference, boundaries, lambda, buffer, state, resume."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shiftwatch.operators import create, dumps_state, loads_state  # noqa: E402
from shiftwatch.operators.learners.cila import CILA, adaptive_lambda  # noqa: E402
from shiftwatch.operators.learners.cila_losses import asymmetric_supcon, relation_distillation  # noqa: E402
from shiftwatch.records import BadInput  # noqa: E402

SMALL = {"buffer_size": 12, "batch_size": 8, "hidden_sizes": [16], "embedding_dim": 8,
         "projection_dim": 8, "probe_epochs": 10, "seed": 3}


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---- losses against the formulas of REFERENCES.md section 4, written as loops ----------


def supcon_reference(z, labels, anchors, tau=0.5):
    n = len(z)
    total = 0.0
    for i in range(n):
        if not anchors[i]:
            continue
        positives = [p for p in range(n) if p != i and labels[p] == labels[i]]
        if not positives:
            continue
        denom = sum(math.exp(float(z[i] @ z[a]) / tau) for a in range(n) if a != i)
        s = sum(math.log(math.exp(float(z[i] @ z[p]) / tau) / denom) for p in positives)
        total += -(tau / 0.07) * s / len(positives)
    return total / n


def ird_reference(z, z_prev, k_cur=0.2, k_prev=0.01):
    n = len(z)

    def p(zz, i, j, k):
        denom = sum(math.exp(float(zz[i] @ zz[m]) / k) for m in range(n) if m != i)
        return math.exp(float(zz[i] @ zz[j]) / k) / denom

    total = 0.0
    for i in range(n):
        for j in range(n):
            if j != i:
                total += -p(z_prev, i, j, k_prev) * math.log(p(z, i, j, k_cur))
    return total / n


@pytest.mark.parametrize("seed", range(4))
def test_supcon_matches_reference(seed):
    g = torch.Generator().manual_seed(seed)
    z = torch.nn.functional.normalize(torch.randn(10, 5, generator=g, dtype=torch.float64), dim=1)
    labels = torch.randint(0, 3, (10,), generator=g)
    anchors = torch.rand(10, generator=g) < 0.6
    got = float(asymmetric_supcon(z, labels, anchors, 0.5))
    assert got == pytest.approx(supcon_reference(z, labels.tolist(), anchors.tolist()), rel=1e-10)


def test_supcon_without_anchors_or_positives_is_zero():
    z = torch.nn.functional.normalize(torch.randn(4, 3, dtype=torch.float64), dim=1)
    assert float(asymmetric_supcon(z, torch.arange(4), torch.ones(4, dtype=torch.bool))) == 0.0
    assert float(asymmetric_supcon(z, torch.zeros(4, dtype=torch.long),
                                   torch.zeros(4, dtype=torch.bool))) == 0.0


@pytest.mark.parametrize("seed", range(4))
def test_ird_matches_reference(seed):
    g = torch.Generator().manual_seed(seed)
    # Nearby projections keep the 0.01-temperature softmax within float64 range in the loop.
    z = torch.nn.functional.normalize(torch.randn(8, 4, generator=g, dtype=torch.float64), dim=1)
    z_prev = torch.nn.functional.normalize(
        z + 0.3 * torch.randn(8, 4, generator=g, dtype=torch.float64), dim=1)
    got = float(relation_distillation(z, z_prev, 0.2, 0.01))
    assert got == pytest.approx(ird_reference(z, z_prev), rel=1e-9)


def test_ird_gradient_flows_only_into_current():
    z = torch.nn.functional.normalize(torch.randn(6, 3), dim=1).requires_grad_(True)
    z_prev = torch.nn.functional.normalize(torch.randn(6, 3), dim=1).requires_grad_(True)
    relation_distillation(z, z_prev).backward()
    assert z.grad is not None and z_prev.grad is None


# ---- lambda ------------------------------------------------------------------------------


def test_adaptive_lambda_forms():
    losses = [(10.0, 0.0), (8.0, 3.0), (6.0, 3.0)]  # r = kappa * 6 / 24
    assert adaptive_lambda(losses[:1], 2.0) == 1.0
    assert adaptive_lambda(losses, 2.0, "pure") == pytest.approx(0.5)
    assert adaptive_lambda(losses, 2.0, "max") == 1.0
    assert adaptive_lambda(losses, 2.0, "min") == pytest.approx(0.5)
    assert adaptive_lambda(losses, 8.0, "max") == pytest.approx(2.0)
    assert adaptive_lambda(losses, 8.0, "min") == 1.0


def _tasks(n_tasks=3, per_class=16, d=6, seed=0, classes_per_task=2):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 2.0, (n_tasks * classes_per_task, d))
    out = []
    for t in range(n_tasks):
        cs = np.arange(t * classes_per_task, (t + 1) * classes_per_task)
        for c in rng.permutation(np.repeat(cs, per_class)):
            out.append({"key": "k", "offset": len(out), "task": t, "y": int(c),
                        "value": (centres[c] + rng.normal(0, 0.5, d)).tolist()})
    return out


@pytest.mark.parametrize("form", ["pure", "max", "min"])
def test_cila_lambda_follows_task_losses(form):
    op = CILA(**SMALL, lambda_form=form, kappa=4.0)
    op.process_batch(_tasks(4))
    lams, losses = op.lambdas, op.task_losses
    assert len(lams) == 4 and len(losses) == 3
    assert lams[0] == 0.0 and lams[1] == 1.0
    for t in (2, 3):
        assert lams[t] == pytest.approx(adaptive_lambda(losses[:t], 4.0, form))
    assert losses[0][1] == 0.0 and all(d > 0 for _, d in losses[1:])


def test_co2l_lambda_fixed_at_one():
    op = CILA(**SMALL, method="co2l", kappa=50.0)
    op.process_batch(_tasks(4))
    assert op.lambdas == [0.0, 1.0, 1.0, 1.0]


# ---- boundaries, buffer, probe ------------------------------------------------------------


def test_boundaries_from_task_label_and_alarm():
    stream = _tasks(3)
    by_task = [o["boundary"] for o in CILA(**SMALL).process_batch(stream)]
    assert [i for i, b in enumerate(by_task) if b] == [32, 64]
    unlabelled_tasks = [{k: v for k, v in r.items() if k != "task"} for r in stream]
    by_label = CILA(**SMALL, boundary="label", min_task_length=5).process_batch(unlabelled_tasks)
    assert [i for i, o in enumerate(by_label) if o["boundary"]] == [32, 64]
    alarms = [{**r, "alarm": r["offset"] in (32, 40, 64)} for r in unlabelled_tasks]
    by_alarm = CILA(**SMALL, min_task_length=10).process_batch(alarms)  # auto -> alarm field
    assert [i for i, o in enumerate(by_alarm) if o["boundary"]] == [32, 64]


def test_inner_detector_finds_unlabelled_boundaries():
    stream = [{k: v for k, v in r.items() if k != "task"} for r in _tasks(3)]
    op = CILA(**SMALL, boundary="alarm", min_task_length=10, detector="river:PageHinkley",
              detector_params={"field": "y", "threshold": 10.0})
    found = [i for i, o in enumerate(op.process_batch(stream)) if o["boundary"]]
    assert len(found) == 2 and 32 <= found[0] < 42 and 64 <= found[1] < 74
    assert op.state_dict()["state"]["detector"]["operator"] == "river:PageHinkley"


def test_buffer_is_class_balanced_and_probe_refit_on_it():
    op = CILA(**{**SMALL, "buffer_size": 10})
    op.process_batch(_tasks(3))
    op.end_task()
    counts = {c: op.buffer_labels.count(c) for c in set(op.buffer_labels)}
    assert sorted(counts) == [0, 1, 2, 3, 4, 5]
    assert max(counts.values()) - min(counts.values()) <= 1 and sum(counts.values()) == 10
    assert op.classes_ == [op.classes_[i] for i in range(6)]


def test_finetune_keeps_no_buffer_and_er_does():
    stream = _tasks(2)
    ft, er = CILA(**SMALL, method="finetune"), CILA(**SMALL, method="er")
    ft.process_batch(stream)
    er.process_batch(stream)
    assert ft.buffer_labels == [] and len(er.buffer_labels) == 12
    assert ft.lambdas == er.lambdas == [0.0, 1.0]


def test_predict_only_records_leave_state_alone():
    stream = _tasks(2)
    op = CILA(**SMALL)
    op.process_batch(stream[:40])
    before = dumps_state(op.state_dict())
    out = op.process({**stream[45], "train": False}) + op.process({"value": stream[46]["value"]})
    assert dumps_state(op.state_dict()) == before
    assert all(o["y_pred"] in op.classes_ for o in out)


def test_first_prediction_is_none_and_new_label_never_predicted_at_first_sight():
    stream = _tasks(2)
    op = CILA(**SMALL)
    out = op.process_batch(stream)
    assert out[0]["y_pred"] is None
    first_seen = {}
    for i, r in enumerate(stream):
        first_seen.setdefault(r["y"], i)
    for label, i in first_seen.items():
        assert out[i]["y_pred"] != label


def test_custom_encoder_factory():
    def factory(n):
        return torch.nn.Sequential(torch.nn.Linear(n, 12), torch.nn.Tanh())

    op = CILA(**SMALL, encoder=factory)
    out = op.process_batch(_tasks(2))
    assert op.decision_scores(np.zeros((3, 6))).shape == (3, 4)
    restored = CILA(**SMALL, encoder=factory)
    restored.load_state_dict(loads_state(dumps_state(op.state_dict())))
    assert np.array_equal(restored.decision_scores(np.ones((2, 6))),
                          op.decision_scores(np.ones((2, 6))))
    assert len(out) == 64


def test_global_rngs_untouched():
    torch_state, np_state = torch.random.get_rng_state(), np.random.get_state()[1].copy()
    CILA(**SMALL).process_batch(_tasks(2))
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    assert np.array_equal(np.random.get_state()[1], np_state)


def test_threads_and_flush_mode_restored():
    torch.set_num_threads(2)
    CILA(**SMALL).process_batch(_tasks(1))
    assert torch.get_num_threads() == 2
    assert torch.tensor([1e-40]).mul_(1.0)[0] != 0  # subnormals are not flushed out here


def test_importing_the_learners_does_not_import_torch():
    code = ("import sys\n"
            "import shiftwatch.operators, shiftwatch.operators.learners.cila, "
            "shiftwatch.operators.learners.hare_tortoise\n"
            "from shiftwatch.operators.registry import list_operators\n"
            "names = {i.name for i in list_operators()}\n"
            "assert {'cila', 'hare-tortoise'} <= names, names\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    # ... and constructing one does.
    code = "import sys\nfrom shiftwatch.operators.learners.cila import CILA\nCILA()\n" \
           "print('torch' in sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


def test_checkpoint_parameter_names_are_kept():
    op = CILA(**SMALL, n_features=6)
    state = op.state_dict()["state"]
    assert list(state["encoder"]) == ["net.0.weight", "net.0.bias", "net.2.weight",
                                      "net.2.bias"]
    assert list(state["projector"]) == ["net.0.weight", "net.0.bias", "net.2.weight",
                                        "net.2.bias"]


# ---- state: resume equals uninterrupted ---------------------------------------------------


@pytest.mark.parametrize("method", ["cila", "er"])
@pytest.mark.parametrize("cut", [13, 32, 50, 70])
def test_resume_equals_uninterrupted(method, cut):
    stream = _tasks(3)
    params = {**SMALL, "method": method, "kappa": 3.0}
    whole = create("cila", **params)
    expected = whole.process_batch(stream)
    whole.end_task()
    first = create("cila", **params)
    head = first.process_batch(stream[:cut])
    blob = dumps_state(first.state_dict())
    del first
    resumed = create("cila", **params)  # a new process would start from here
    resumed.load_state_dict(loads_state(blob))
    got = head + resumed.process_batch(stream[cut:])
    resumed.end_task()
    assert got == expected
    assert dumps_state(resumed.state_dict()) == dumps_state(whole.state_dict())
    X = np.array([r["value"] for r in stream])
    assert np.array_equal(resumed.decision_scores(X), whole.decision_scores(X))


def test_state_holds_every_part():
    op = CILA(**SMALL)
    op.process_batch(_tasks(2)[:45])
    state = op.state_dict()["state"]
    for part in ("encoder", "projector", "frozen_encoder", "frozen_projector", "optimizer",
                 "buffer_x", "buffer_y", "task_losses", "lambdas", "probe_w", "rng"):
        assert state[part] is not None, part
    assert isinstance(state["rng"], torch.Tensor) and state["optimizer"]["state"]


# ---- parameters and input -----------------------------------------------------------------


@pytest.mark.parametrize(("param", "value"), [
    ("method", "lwf"), ("lambda_form", "avg"), ("kappa", 0.0), ("buffer_size", -1),
    ("batch_size", 0), ("augment", ["blur"]), ("augment_strength", 1.5), ("boundary", "x"),
    ("hidden_sizes", [0]), ("threads", 0), ("temperature", float("nan")),
    ("detector", "river:NoSuchDetector"),
])
def test_invalid_params_name_the_parameter(param, value):
    with pytest.raises(ValueError, match=param):
        create("cila", **{param: value})


def test_bad_input_before_first_record_keeps_fresh_state():
    op = CILA(**SMALL)
    fresh = dumps_state(op.state_dict())
    for bad in CILA._bad_records({}):
        if bad.get("value") == [1.0, 2.0]:  # a valid first vector while the length is unknown
            continue
        with pytest.raises(BadInput):
            op.process(bad)
    assert dumps_state(op.state_dict()) == fresh


def test_defaults_predict_a_new_tasks_classes_while_it_runs():
    # Split-Digits, 3 tasks of two classes, one pass: the default probe (20 steps per training
    # step) keeps y_pred up with experience replay on the same buffer; one step lags behind.
    datasets = pytest.importorskip("sklearn.datasets")
    d = datasets.load_digits()
    rng = np.random.default_rng(0)
    records = []
    for t in range(3):
        idx = rng.permutation(np.flatnonzero(np.isin(d.target, [2 * t, 2 * t + 1])))
        records += [{"value": (d.data[i] / 16).tolist(), "y": int(d.target[i]), "task": t}
                    for i in idx]

    def second_half(**params):
        outs = CILA(seed=0, **params).process_batch(records)
        half = len(records) // 2
        return np.mean([o["y_pred"] == r["y"]
                        for o, r in zip(outs[half:], records[half:], strict=True)])

    er, default, one = second_half(method="er"), second_half(), second_half(probe_steps=1)
    assert er > 0.4 and default >= 0.9 * er, (er, default)
    assert one < default - 0.1, (one, default)


def test_probe_steps_is_validated():
    with pytest.raises(ValueError, match="probe_steps"):
        CILA(probe_steps=-1)


def test_probe_steps_change_only_the_online_prediction():
    # The online probe is behind y_pred only: the encoder and the probe refitted from zero at
    # a boundary (hence every accuracy after a task) do not depend on probe_steps. (The
    # default warm refit starts from the online probe, so there they do.)
    records = CILA._test_stream(SMALL)
    ops = [CILA(**SMALL, probe_steps=k, probe_refit="zero") for k in (1, 20)]
    outs = [op.process_batch(records) for op in ops]
    for op in ops:
        op.end_task()
    for a, b in zip(ops[0]._encoder.parameters(), ops[1]._encoder.parameters(), strict=True):
        assert torch.equal(a, b)
    x = np.array([r["value"] for r in records])
    np.testing.assert_array_equal(ops[0].decision_scores(x), ops[1].decision_scores(x))
    assert [o["y_pred"] for o in outs[0]] != [o["y_pred"] for o in outs[1]]
