"""Hare & Tortoise operator: resume, EMA/reset against hand computations, baselines, inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shiftwatch.operators import BadInput, Keyed, create, dumps_state, loads_state  # noqa: E402
from shiftwatch.operators.learners.hare_tortoise import HareTortoise  # noqa: E402

# Resets on the step schedule only (no inner detector): the hand computations below.
SMALL = {"in_dim": 5, "n_classes": 3, "hidden": [16], "batch_size": 8, "buffer_size": 40,
         "ema_momentum": 0.9, "reset_every": 7, "seed": 11, "reset_on": None}
#: SMALL with the defaults' reset rules: DDM on the 0/1 loss, a period in records, warm-ups.
ALARMS = {**{k: v for k, v in SMALL.items() if k not in ("reset_every", "reset_on")},
          "reset_on": "alarm", "reset_every_records": 40, "min_reset_gap": 16,
          "reset_lr_warmup": 3}


@pytest.fixture(autouse=True)
def one_thread():
    # Tiny networks run faster on one thread, and far faster on a shared, loaded machine.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def stream(n=600, seed=0, d=5, k=3, tasks=2):
    rng = np.random.default_rng(seed)
    means = rng.normal(0, 2, (tasks, k, d))
    out = []
    for i in range(n):
        task = i * tasks // n
        c = int(rng.integers(k))
        out.append({"key": "s", "ts": float(i), "offset": i, "task": task, "y": c,
                    "value": (means[task, c] + rng.normal(0, 1, d)).tolist()})
    return out


def run(op, records):
    return [o for r in records for o in op.process(r)]


def params_of(net):
    return [p.detach().clone() for p in net.parameters()]


# ---- resume ---------------------------------------------------------------------------


@pytest.mark.parametrize("extra", [{}, {"method": "shrink-perturb"}, {"replay_ratio": 3},
                                   {"predict_with": "hare", "replay_size": 3},
                                   {**ALARMS, "reset_to": "head"}, {**ALARMS, "reset_to": "full"},
                                   {**ALARMS, "reset_to": "tortoise"}])
def test_resume_equals_uninterrupted(extra):
    params = {**SMALL, **extra}
    if "reset_every_records" in params:
        params.pop("reset_every")
    records = stream(tasks=3)
    for i in range(len(records)):
        if 400 <= i < 480:  # a label change the inner detector finds (checked below)
            records[i]["y"] = (records[i]["y"] + 1) % 3
    whole = create("hare-tortoise", **params)
    expected = run(whole, records)
    for cuts in ([123], [50, 301, 302, 555]):
        op = create("hare-tortoise", **params)
        got, start = [], 0
        for cut in [*cuts, len(records)]:
            got += run(op, records[start:cut])
            blob = dumps_state(op.state_dict())
            json.loads(blob)  # plain JSON
            op = create("hare-tortoise", **params)  # a new process: nothing carried over
            op.load_state_dict(loads_state(blob))
            start = cut
        assert got == expected
        assert dumps_state(op.state_dict()) == dumps_state(whole.state_dict())
    base = 75 * params.get("replay_ratio", 1)
    if whole.n_alarm_resets:  # the default boost after an alarm reset: 4 steps a micro-batch
        assert whole.n_steps > base
    else:
        assert whole.n_steps == base
    if extra.get("reset_on") == "alarm":
        assert whole.n_alarm_resets >= 1 and whole.n_resets >= 1


def test_state_is_safe_json_with_tensors_and_everything_in_it():
    op = create("hare-tortoise", **SMALL)
    run(op, stream(n=101))
    state = json.loads(dumps_state(op.state_dict()))["state"]
    assert set(state) == {"hare", "tortoise", "optimizer", "rng", "buffer_x", "buffer_y",
                          "batch_x", "batch_y", "n_seen", "n_steps", "n_resets",
                          "n_task_changes", "task", "ema_t", "n_alarm_resets",
                          "since_alarm_reset", "detector", "since_reset", "opt_steps"}
    assert "__tensor__" in state["hare"]["0.weight"]
    assert state["n_steps"] == 12 and len(state["batch_y"]["shape"]) == 1
    back = loads_state(dumps_state(op.state_dict()))["state"]
    assert isinstance(back["hare"]["0.weight"], torch.Tensor)
    # The state shares no memory with the live networks.
    assert back["hare"]["0.weight"].data_ptr() != op.hare[0].weight.data_ptr()


def test_global_torch_rng_untouched_and_seed_reproducible():
    before = torch.get_rng_state()
    a = create("hare-tortoise", **SMALL, model=lambda: torch.nn.Sequential(
        torch.nn.Linear(5, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 3)))
    out_a = run(a, stream(n=200))
    assert torch.equal(torch.get_rng_state(), before)
    b = a.clone()
    assert run(b, stream(n=200)) == out_a
    c = a.clone(seed=12)
    assert run(c, stream(n=200)) != out_a


# ---- the step, the EMA and the reset against hand computations -------------------------


def warmed(t, m=0.9, warmup=2.0):
    """The EMA momentum of update t (0-based) with the warm-up, computed by hand."""
    return m if warmup is None else min(m, t / (t + warmup))


@pytest.mark.parametrize("warmup", [2.0, None, 1.0, 10.0])
def test_step_is_adamw_with_clipping_and_ema_matches_hand_computation(warmup):
    op = create("hare-tortoise", **{**SMALL, "reset_every": 1000, "ema_warmup": warmup})
    rng = np.random.default_rng(1)
    x = rng.normal(0, 3, (12, 5)).astype(np.float32)
    y = rng.integers(0, 3, 12)
    # Reference: a plain copy of the Hare with its own AdamW (fused as the operator's is:
    # the fused kernel rounds differently from the per-tensor loop on some CPUs, so that one
    # is compared to a tolerance), zero_grad every step, clip 0.5.
    ref = HareTortoise(**SMALL).hare  # the same seed gives the same initial network
    loop = HareTortoise(**SMALL).hare
    pairs = zip(ref.parameters(), op.hare.parameters(), strict=True)
    assert all(torch.equal(p, q) for p, q in pairs)
    fused = bool(op._opt.defaults.get("fused"))
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-3, weight_decay=1e-3, fused=fused)
    opt_loop = torch.optim.AdamW(loop.parameters(), lr=1e-3, weight_decay=1e-3)
    tortoise = params_of(op.tortoise)
    for step in range(12):
        for net, o in ((ref, opt), (loop, opt_loop)):
            o.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(x)),
                                                     torch.from_numpy(y))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
            o.step()
        op.learn_many(x, y)
        for p, q, r in zip(ref.parameters(), op.hare.parameters(), loop.parameters(),
                           strict=True):
            assert torch.equal(p, q), f"Hare differs from AdamW at step {step}"
            torch.testing.assert_close(q, r, rtol=1e-5, atol=1e-6)
        pairs = zip(tortoise, ref.parameters(), strict=True)
        m = warmed(step, warmup=warmup)
        tortoise = [m * t + (1 - m) * h.detach() for t, h in pairs]
        for t, q in zip(tortoise, op.tortoise.parameters(), strict=True):
            torch.testing.assert_close(q, t, rtol=1e-6, atol=1e-7)
    assert op.n_steps == 12 and op.n_resets == 0
    assert op.ema_momentum_now == warmed(12, warmup=warmup)


def test_warmup_reaches_the_momentum_and_resumes_from_its_step_count():
    op = create("hare-tortoise", **{**SMALL, "ema_momentum": 0.99})
    assert op.ema_momentum_now == 0.0  # the first update copies the Hare: no weight on init
    x, y = np.zeros((2, 5)), np.zeros(2, dtype=int)
    for _ in range(5):
        op.learn_many(x, y)
    assert op.ema_momentum_now == 5 / 7
    back = create("hare-tortoise", **{**SMALL, "ema_momentum": 0.99})
    back.load_state_dict(loads_state(dumps_state(op.state_dict())))
    assert back.ema_momentum_now == 5 / 7
    # k m / (1 - m) = 198 updates: the paper's momentum from then on, not before.
    op._ema_t = 197
    assert op.ema_momentum_now == 197 / 199 < 0.99
    op._ema_t = 198
    assert op.ema_momentum_now == 0.99
    # A state without the warm-up counter (written before it existed) counts every step.
    old = op.state_dict()
    del old["state"]["ema_t"]
    back.load_state_dict(old)
    assert back.ema_momentum_now == warmed(5, m=0.99)


@pytest.mark.parametrize("k", [1.0, 2.0])
def test_warmup_tortoise_is_the_polynomially_weighted_average_of_hare_iterates(k):
    # k = 1: the running mean of the Hare's iterates; k = 2: weights 1, 2, 3, ...; neither
    # puts any weight on the initialisation.
    op = create("hare-tortoise", **{**SMALL, "ema_momentum": 0.999, "reset_every": 1000,
                                    "ema_warmup": k})
    rng = np.random.default_rng(4)
    iterates = []
    for _ in range(9):
        op.learn_many(rng.normal(0, 2, (8, 5)), rng.integers(0, 3, 8))
        iterates.append(params_of(op.hare))
    w = np.arange(1, 10, dtype=float) ** (k - 1)
    for j, t in enumerate(op.tortoise.parameters()):
        want = sum(wi * it[j].double() for wi, it in zip(w, iterates, strict=True)) / w.sum()
        torch.testing.assert_close(t.double(), want, rtol=1e-5, atol=1e-6)


def test_ema_covers_float_buffers_and_copies_integer_buffers():
    def net():
        return torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.BatchNorm1d(6),
                                   torch.nn.Linear(6, 3))

    op = create("hare-tortoise", **{**SMALL, "reset_every": 1000, "ema_warmup": None},
                model=net)
    x = np.random.default_rng(2).normal(3, 2, (16, 5))
    t_mean = op.tortoise[1].running_mean.clone()
    op.learn_many(x, np.zeros(16, dtype=int))
    h_mean = op.hare[1].running_mean
    assert not torch.equal(h_mean, t_mean)
    torch.testing.assert_close(op.tortoise[1].running_mean, 0.9 * t_mean + 0.1 * h_mean)
    assert int(op.tortoise[1].num_batches_tracked) == int(op.hare[1].num_batches_tracked) == 1


def test_reset_copies_values_keeps_optimiser_state_and_never_aliases():
    op = create("hare-tortoise", **{**SMALL, "reset_every": 3, "ema_warmup": None})
    rng = np.random.default_rng(3)
    x, y = rng.normal(0, 1, (8, 5)), rng.integers(0, 3, 8)
    for _ in range(2):
        op.learn_many(x, y)
    assert op.n_resets == 0
    assert not all(torch.equal(h, t) for h, t in
                   zip(op.hare.parameters(), op.tortoise.parameters(), strict=True))
    op.learn_many(x, y)
    assert op.n_resets == 1
    for h, t in zip(op.hare.state_dict().values(), op.tortoise.state_dict().values(), strict=True):
        assert torch.equal(h, t)
        assert h.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
    # The optimiser still drives the Hare's own tensors and kept its moments and step count.
    opt_params = op._opt.param_groups[0]["params"]
    assert all(p is q for p, q in zip(opt_params, op.hare.parameters(), strict=True))
    state = op._opt.state[opt_params[0]]
    assert float(state["step"]) == 3 and float(state["exp_avg"].abs().sum()) > 0
    # A later step moves the Hare; the Tortoise moves only by the EMA.
    tortoise = params_of(op.tortoise)
    op.learn_many(x, y)
    hare = params_of(op.hare)
    for t0, t1, h in zip(tortoise, op.tortoise.parameters(), hare, strict=True):
        torch.testing.assert_close(t1, 0.9 * t0 + 0.1 * h, rtol=1e-6, atol=1e-7)
    assert not all(torch.equal(a, b) for a, b in zip(tortoise, hare, strict=True))


def test_stream_schedule_micro_batches_replay_and_resets():
    op = create("hare-tortoise", **{**SMALL, "replay_ratio": 2, "reset_every": 5})
    records = stream(n=100)
    run(op, records[:7])
    assert op.n_steps == 0 and op.buffer_len == 0  # micro-batch not full yet
    run(op, records[7:8])
    assert op.n_steps == 2 and op.buffer_len == 8
    run(op, records[8:100])
    assert op.n_steps == 2 * 12 and op.n_resets == 24 // 5
    assert op.buffer_len == 40 and op._replay.seen == 96


def test_unlabelled_and_evaluation_only_records_are_predicted_not_learned():
    op = create("hare-tortoise", **SMALL)
    before = dumps_state(op.state_dict())
    records = stream(n=50)
    unlabelled = [{k: v for k, v in r.items() if k != "y"} for r in records]
    held_out = [{**r, "train": False} for r in records]
    outs = run(op, unlabelled + held_out)
    assert len(outs) == 100 and all("y_pred" in o and "y_pred_tortoise" in o for o in outs)
    assert dumps_state(op.state_dict()) == before


# ---- baselines -------------------------------------------------------------------------


def test_warm_and_ema_baselines():
    records = stream(n=400)
    warm = create("hare-tortoise", **SMALL, method="warm")
    outs = run(warm, records)
    assert warm.tortoise is None and set(outs[0]) == {"key", "ts", "offset", "y", "task",
                                                      "y_pred"}
    ema = create("hare-tortoise", **SMALL, method="ema")
    outs = run(ema, records)
    assert ema.n_steps == 50 and ema.n_resets == 0 and "y_pred_tortoise" in outs[0]
    # Without EMA and resets the Hare is plain training: warm's network equals EMA's Hare.
    for p, q in zip(warm.hare.parameters(), ema.hare.parameters(), strict=True):
        assert torch.equal(p, q)


def test_task_change_interventions():
    records = stream(n=80, tasks=2)  # task 0 -> 1 at record 40
    for method in ("hare-tortoise", "ema", "warm"):
        op = create("hare-tortoise", **SMALL, method=method)
        plain = create("hare-tortoise", **SMALL, method=method)
        run(op, records)
        run(plain, [{**r, "task": None} for r in records])
        assert op.n_task_changes == 1 and plain.n_task_changes == 0
        assert dumps_state({"h": op.hare.state_dict()}) == dumps_state(
            {"h": plain.hare.state_dict()}), method


def test_shrink_perturb_matches_definition():
    op = create("hare-tortoise", **SMALL, method="shrink-perturb", shrink=0.2)
    run(op, stream(n=40, tasks=1))
    before = params_of(op.hare)
    gen_state = op._gen.get_state()
    op.task_change()
    after = params_of(op.hare)
    op._gen.set_state(gen_state)
    fresh = params_of(op._build())  # the new initialisation task_change drew
    for b, a, f in zip(before, after, fresh, strict=True):
        torch.testing.assert_close(a, 0.2 * b + 0.8 * f)
    assert not all(torch.equal(f, p) for f, p in zip(fresh, params_of(HareTortoise(**SMALL)
                                                                       .hare), strict=True))


def test_head_reset_reinitialises_only_the_last_layer():
    op = create("hare-tortoise", **SMALL, method="head-reset")
    run(op, stream(n=40, tasks=1))
    before = params_of(op.hare)
    gen_state = op._gen.get_state()
    run(op, [{**r, "task": 1} for r in stream(n=1, seed=5, tasks=1)])  # a task change
    assert op.n_task_changes == 1
    after = params_of(op.hare)
    op._gen.set_state(gen_state)
    fresh = params_of(op._build())
    assert torch.equal(after[0], before[0]) and torch.equal(after[1], before[1])
    assert torch.equal(after[2], fresh[2]) and torch.equal(after[3], fresh[3])


# ---- input and parameters ---------------------------------------------------------------


@pytest.mark.parametrize(("record", "reason"), [
    ({"value": [0.0] * 4, "y": 0}, "shape"),
    ({"value": [0.0] * 4 + [float("nan")], "y": 0}, "NaN"),
    ({"value": [0.0] * 5, "y": 3}, "0..2"),
    ({"value": [0.0] * 5, "y": True}, "integer"),
    ({"value": [0.0] * 5, "y": "1"}, "integer"),
])
def test_bad_input_leaves_model_untouched(record, reason):
    op = create("hare-tortoise", **SMALL)
    run(op, stream(n=37))
    before = dumps_state(op.state_dict())
    with pytest.raises(BadInput, match=reason):
        op.process(record)
    assert dumps_state(op.state_dict()) == before
    out = Keyed(create("hare-tortoise", **SMALL)).process_batch([{**record, "key": 1}])
    assert out[0].reason and "\n" not in out[0].reason


@pytest.mark.parametrize(("param", "value"), [
    ("method", "hare"), ("ema_momentum", 1.0), ("reset_every", 0), ("hidden", "big"),
    ("predict_with", "both"), ("n_classes", 1), ("model", 3), ("clip_norm", -1.0),
    ("seed", -1), ("replay_size", -2), ("batch_size", 2.0), ("reset_every_records", 0),
    ("reset_lr_warmup", -1), ("reset_to", "hare"), ("reset_lr_warmup", 1.5),
])
def test_invalid_parameters_name_themselves(param, value):
    with pytest.raises(ValueError, match=param):
        create("hare-tortoise", **{**SMALL, param: value})


def test_model_factory_must_return_a_module():
    with pytest.raises(ValueError, match="model"):
        HareTortoise(in_dim=2, n_classes=2, model=lambda: "not a network")


def test_torch_state_codec_round_trips_dtypes():
    from shiftwatch.operators.state_codec import decode_state, encode_state

    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.uint8,
                  torch.bool):
        t = (torch.arange(6) % 3).to(dtype).reshape(2, 3)
        back = decode_state(json.loads(json.dumps(encode_state({"t": t}))))["t"]
        assert back.dtype == dtype and torch.equal(back, t)
    # A plain dict that happens to use the marker is escaped, not mistaken for a tensor.
    odd = {"__tensor__": "not base64", "dtype": "float32", "shape": []}
    assert decode_state(json.loads(json.dumps(encode_state(odd)))) == odd


# ---- micro-batch inference, alarm resets, two stages in one process ----------------------


@pytest.mark.parametrize("extra", [{}, {"method": "shrink-perturb"}, {"predict_with": "hare"},
                                   {"reset_on": "alarm", "detector": "river:DDM",
                                    "min_reset_gap": 20}])
def test_process_batch_predicts_in_runs_with_the_outputs_of_one_by_one(extra):
    params = {**SMALL, **extra}
    records = stream(n=400, tasks=3)
    for i, r in enumerate(records):
        if i % 13 == 4:
            r["y"] = None
        if i % 17 == 6:
            r["train"] = False
        if i % 29 == 8:
            r["value"] = [0.0] * 4  # bad: a dead letter at its place
    one = create("hare-tortoise", **params)
    expected = []
    for r in records:
        try:
            expected += one.process(r)
        except BadInput:
            expected.append("dead")
    many = create("hare-tortoise", **params)
    got = []
    for start in range(0, 400, 150):  # batches that end mid micro-batch
        got += many.process_batch(records[start:start + 150])
    got = [o if isinstance(o, dict) else "dead" for o in got]
    assert got == expected
    assert dumps_state(many.state_dict()) == dumps_state(one.state_dict())
    assert many.n_steps > 30


def test_process_batch_runs_one_forward_per_training_step(monkeypatch):
    from shiftwatch.operators.learners import ht_support

    op = create("hare-tortoise", **SMALL)
    calls = []
    # The default MLP runs its forward passes by hand (ht_support.stack_forward), the Hare's
    # and the Tortoise's; count the Hare's.
    forward = ht_support.stack_forward
    hare_w = op.hare[0].weight

    def counted(weights, biases, x, keep=None):
        if weights[0] is hare_w:
            calls.append(len(x))
        return forward(weights, biases, x, keep)

    monkeypatch.setattr(ht_support, "stack_forward", counted)
    op.process_batch(stream(n=80))
    # 10 steps of 8 records: 10 prediction forwards of 8 rows, plus 10 training forwards.
    assert sorted(calls) == sorted([8] * 10 + [8 + 8] * 9 + [8])


def test_chained_alarm_resets_the_hare_and_empties_the_buffer():
    params = {**SMALL, "reset_every": 1000, "reset_on": "alarm", "min_reset_gap": 16,
              "detector": None}
    op = create("hare-tortoise", **params)
    records = stream(n=120)
    run(op, records[:64])
    assert op.buffer_len == 40 and op.n_alarm_resets == 0
    hare_before = params_of(op.hare)
    run(op, [{**records[64], "y": None, "alarm": True}])  # predicted, then the reset
    assert op.n_alarm_resets == 1 and op.buffer_len == 0 and op.ema_momentum_now == 0.0
    for h, t in zip(op.hare.parameters(), op.tortoise.parameters(), strict=True):
        assert torch.equal(h, t)
    assert not all(torch.equal(a, b) for a, b in zip(hare_before, params_of(op.hare),
                                                     strict=True))
    run(op, [{**r, "alarm": True} for r in records[65:81]])  # within min_reset_gap (16)
    assert op.n_alarm_resets == 1
    run(op, [{**records[81], "alarm": True}])
    assert op.n_alarm_resets == 2
    # Without reset_on the alarm field is ignored.
    plain = create("hare-tortoise", **SMALL)
    run(plain, [{**r, "alarm": True} for r in records])
    assert plain.n_alarm_resets == 0


def test_input_alarms_reset_input_reset_to_and_inner_alarms_reset_to():
    # A record's own alarm (a detector on the inputs, chained before) resets input_reset_to;
    # the inner detector's alarm resets reset_to and wins when both fire on one record.
    params = {**SMALL, "reset_every": 1000, "reset_on": "alarm", "min_reset_gap": 0,
              "detector": None, "reset_to": "full", "input_reset_to": "keep"}
    op = create("hare-tortoise", **params)
    records = stream(n=120)
    run(op, records[:64])
    before = params_of(op.hare)
    run(op, [{**records[64], "y": None, "alarm": True}])
    assert op.n_alarm_resets == 1 and op.buffer_len == 0 and op._opt.state == {}
    assert all(torch.equal(a, b) for a, b in zip(before, params_of(op.hare), strict=True))
    for h, t in zip(op.hare.parameters(), op.tortoise.parameters(), strict=True):
        assert torch.equal(h, t)
    # The inner detector's alarm on the same kind of record: a full reset (reset_to).
    inner = create("hare-tortoise", **{**params, "detector": "river:DDM"})
    run(inner, records[:64])
    class Alarming:  # an inner detector that alarms on every value
        def process(self, record):
            return [{"alarm": True}]

    inner._detector = Alarming()
    before = params_of(inner.hare)
    run(inner, [{**records[64], "alarm": True}])
    assert inner.n_alarm_resets == 1
    assert not any(torch.equal(a, b) for a, b in zip(before, params_of(inner.hare),
                                                     strict=True))
    with pytest.raises(ValueError, match="input_reset_to"):
        create("hare-tortoise", **{**params, "input_reset_to": "everything"})
    with pytest.raises(ValueError, match="reset to one of"):
        op.alarm_reset("everything")


def test_full_reset_reinitialises_networks_and_optimiser():
    params = {**SMALL, "method": "warm", "reset_on": "alarm", "reset_to": "full",
              "min_reset_gap": 0, "detector": None}
    op = create("hare-tortoise", **params)
    run(op, stream(n=64))
    op.alarm_reset()
    assert op.buffer_len == 0 and op._opt.state == {}
    assert all(p is q for p, q in zip(op._opt.param_groups[0]["params"], op.hare.parameters(),
                                      strict=True))
    fresh = params_of(create("hare-tortoise", **params).hare)
    assert not all(torch.equal(a, b) for a, b in zip(fresh, params_of(op.hare), strict=True))
    with pytest.raises(ValueError, match="reset_to"):
        create("hare-tortoise", **{**params, "reset_to": "everything"})
    # Without a Tortoise, reset_to="tortoise" keeps the network (fresh optimiser, no replay).
    keep = create("hare-tortoise", **{**params, "reset_to": "tortoise"})
    run(keep, stream(n=64))
    before = params_of(keep.hare)
    keep.alarm_reset()
    assert keep.buffer_len == 0 and keep._opt.state == {}
    assert all(torch.equal(a, b) for a, b in zip(before, params_of(keep.hare), strict=True))


def test_loss_detector_resets_after_a_label_permutation_and_learns_faster():
    # Two tasks: the same inputs, the labels permuted at record 600. The inner detector on the
    # learner's own 0/1 loss finds the change, and the reset learner does better after it.
    rng = np.random.default_rng(5)
    means = rng.normal(0, 2, (3, 5))
    records = []
    for i in range(1200):
        c = int(rng.integers(3))
        y = c if i < 600 else (c + 1) % 3
        records.append({"value": (means[c] + rng.normal(0, 1, 5)).tolist(), "y": y})
    base = {**SMALL, "reset_every": 1000, "ema_momentum": 0.99, "buffer_size": 400}
    plain = create("hare-tortoise", **base)
    reset = create("hare-tortoise", **{**base, "reset_on": "alarm"}, reset_to="full",
                   detector="river:DDM", min_reset_gap=100)
    acc = {}
    for name, op in (("plain", plain), ("reset", reset)):
        outs = op.process_batch(records)
        acc[name] = np.mean([o["y_pred"] == o["y"] for o in outs[600:900]])
    assert reset.n_alarm_resets >= 1
    assert acc["reset"] > acc["plain"] + 0.05, acc


def test_two_learner_stages_in_threads_of_one_process():
    import threading

    records = stream(n=300)
    params = [{**SMALL, "threads": 1}, {**SMALL, "method": "ema", "threads": 2, "seed": 4}]
    expected = [create("hare-tortoise", **p).process_batch(records) for p in params]
    got: dict[int, list] = {}

    def stage(i: int) -> None:
        op = create("hare-tortoise", **params[i])
        got[i] = [o for r in records for o in op.process(r)]

    before = torch.get_num_threads()
    workers = [threading.Thread(target=stage, args=(i,)) for i in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert got[0] == expected[0] and got[1] == expected[1]
    assert torch.get_num_threads() == before


def test_defaults_learn_from_the_first_records_of_a_short_stream():
    # 600 digits records, one pass: the defaults (predicting with the Hare) and the Tortoise
    # with the default EMA warm-up keep up with a plain MLP trained by AdamW on the same
    # stream; a Tortoise with the fixed momentum 0.999 stays near chance.
    datasets = pytest.importorskip("sklearn.datasets")
    d = datasets.load_digits()
    order = np.random.default_rng(0).permutation(len(d.target))[:600]
    records = [{"value": d.data[i].tolist(), "y": int(d.target[i])} for i in order]

    def second_half(**params):
        op = create("hare-tortoise", in_dim=64, n_classes=10, seed=0, **params)
        outs = op.process_batch(records)
        return np.mean([o["y_pred"] == o["y"] for o in outs[300:]])

    plain = second_half(method="warm", buffer_size=0, clip_norm=None, weight_decay=0.01,
                        reset_on=None)
    default = second_half()
    tortoise = second_half(predict_with="tortoise")
    no_warmup = second_half(ema_warmup=None, ema_momentum=0.999, predict_with="tortoise")
    assert plain > 0.7 and default >= 0.9 * plain, (plain, default)
    assert tortoise >= 0.9 * plain, (plain, tortoise)
    assert no_warmup < 0.3, no_warmup


# ---- the defaults' reset rules: a period in records, fresh optimisers at alarm resets ----


def test_both_reset_periods_cannot_be_given():
    with pytest.raises(ValueError, match="reset_every"):
        create("hare-tortoise", **{**SMALL, "reset_every_records": 64})


def test_default_reset_period_is_two_ema_horizons_in_records():
    op = HareTortoise(in_dim=3, n_classes=2)
    assert op.reset_every is None and op.reset_every_records is None
    assert op.batch_size == 8 and op.replay_ratio == 1  # the update budget 1/8 (issue 49)
    assert op.reset_period_records == 2 * 8 * 100  # m = 0.99: 100 steps of 8 records
    assert HareTortoise(in_dim=3, n_classes=2, ema_momentum=0.9, batch_size=8,
                        replay_ratio=2).reset_period_records == 80  # 20 steps of 4 new records
    assert HareTortoise(in_dim=3, n_classes=2, reset_every_records=77).reset_period_records == 77
    assert HareTortoise(in_dim=3, n_classes=2, reset_every=5).reset_period_records is None


def test_reset_cadence_in_records_fires_at_the_stated_record_count():
    params = {**ALARMS, "detector": None, "reset_every_records": 24}  # 3 micro-batches of 8
    op = create("hare-tortoise", **params)
    records = stream(n=200)
    unlabelled = {**records[0], "y": None}
    run(op, records[:23] + [unlabelled] * 5)  # unlabelled records do not count
    assert op.n_resets == 0
    run(op, records[23:24])
    assert op.n_resets == 1
    for h, t in zip(op.hare.parameters(), op.tortoise.parameters(), strict=True):
        assert torch.equal(h, t)
    run(op, records[24:47])
    assert op.n_resets == 1
    run(op, records[47:48])
    assert op.n_resets == 2
    # An alarm reset restarts the count: the next periodic reset is 24 records after it.
    run(op, records[48:52])
    op.alarm_reset()  # mid micro-batch: the 4 records before it count no more
    run(op, records[52:79])  # steps after records 55, 63, 71 (20 records since the reset)
    assert op.n_resets == 2
    run(op, records[79:80])  # the step after record 79 (28 records since the reset)
    assert op.n_resets == 3


@pytest.mark.parametrize("reset_to", ["tortoise", "head", "full", "keep"])
def test_alarm_reset_gives_a_fresh_optimiser_whose_lr_warms_up_linearly(reset_to):
    params = {**ALARMS, "detector": None, "reset_lr_warmup": 4, "reset_to": reset_to,
              "lr": 0.01, "reset_every_records": 10_000, "alarm_replay_ratio": None}
    op = create("hare-tortoise", **params)
    records = stream(n=200, tasks=1)
    run(op, records[:40])
    assert op.lr_now == 0.01 and op._opt.param_groups[0]["lr"] == 0.01
    old_opt = op._opt
    hare_before = params_of(op.hare)
    op.alarm_reset()
    assert op._opt is not old_opt and op._opt.state == {} and op.buffer_len == 0
    assert all(p is q for p, q in zip(op._opt.param_groups[0]["params"], op.hare.parameters(),
                                      strict=True))
    for h, t in zip(op.hare.state_dict().values(), op.tortoise.state_dict().values(),
                    strict=True):
        assert torch.equal(h, t)
    after = params_of(op.hare)
    changed = [not torch.equal(a, b) for a, b in zip(hare_before, after, strict=True)]
    # Layers: [0.weight, 0.bias, 2.weight, 2.bias] of the 5-16-3 MLP.
    assert changed == {"tortoise": [True] * 4, "head": [False, False, True, True],
                       "full": [True] * 4, "keep": [False] * 4}[reset_to]
    lrs = []
    for i in range(6):  # one micro-batch of 8 records = one step each
        run(op, records[40 + 8 * i:48 + 8 * i])
        lrs.append(op._opt.param_groups[0]["lr"])
        assert float(op._opt.state[op._opt.param_groups[0]["params"][0]]["step"]) == i + 1
    assert lrs == pytest.approx([0.0025, 0.005, 0.0075, 0.01, 0.01, 0.01])
    assert op.lr_now == 0.01


def test_a_state_saved_during_the_lr_warm_up_resumes_it():
    params = {**ALARMS, "detector": None, "reset_lr_warmup": 5, "lr": 0.01,
              "reset_every_records": 10_000, "alarm_replay_ratio": None}
    records = stream(n=200, tasks=1)
    whole = create("hare-tortoise", **params)
    run(whole, records[:40])
    whole.alarm_reset()
    run(whole, records[40:56])  # two warm-up steps
    assert whole.lr_now == pytest.approx(0.006)
    part = create("hare-tortoise", **params)
    part.load_state_dict(loads_state(dumps_state(whole.state_dict())))
    assert part.lr_now == pytest.approx(0.006)
    assert run(part, records[56:120]) == run(whole, records[56:120])
    assert dumps_state(part.state_dict()) == dumps_state(whole.state_dict())
    assert part._opt.param_groups[0]["lr"] == 0.01


def test_defaults_run_the_inner_detector_and_reset_after_a_label_permutation():
    # Same inputs, labels permuted at record 600: the default DDM on the 0/1 loss resets.
    rng = np.random.default_rng(5)
    means = rng.normal(0, 2, (3, 5))
    records = []
    for i in range(1200):
        c = int(rng.integers(3))
        records.append({"value": (means[c] + rng.normal(0, 1, 5)).tolist(),
                        "y": c if i < 600 else (c + 1) % 3})
    small = {"in_dim": 5, "n_classes": 3, "hidden": [16], "batch_size": 8, "lr": 0.01, "seed": 0}
    op = create("hare-tortoise", **small)  # the default reset rules
    outs = op.process_batch(records)
    assert op.n_alarm_resets >= 1 and op.lr_now == op.lr
    plain = create("hare-tortoise", **small, reset_on=None)
    plain_outs = plain.process_batch(records)
    assert plain.n_alarm_resets == 0

    def acc(o):
        return np.mean([r["y_pred"] == r["y"] for r in o[700:900]])

    assert acc(outs) > acc(plain_outs), (acc(outs), acc(plain_outs))


def test_the_optimiser_is_fused_and_a_state_of_the_unfused_one_resumes_fused():
    op = create("hare-tortoise", **SMALL)
    assert op._opt.param_groups[0]["fused"] is True
    # A state written by an operator whose AdamW was the per-tensor loop (before fusing).
    old = create("hare-tortoise", **SMALL)
    old._opt = torch.optim.AdamW(old.hare.parameters(), lr=old.lr,
                                 weight_decay=old.weight_decay)
    records = stream(n=300)
    run(old, records[:150])
    state = loads_state(dumps_state(old.state_dict()))
    assert not state["state"]["optimizer"]["param_groups"][0].get("fused")
    new = create("hare-tortoise", **SMALL)
    new.load_state_dict(state)
    assert new._opt.param_groups[0]["fused"] is True
    # The fused update is the same AdamW: the two continue to the same predictions.
    a, b = run(old, records[150:]), run(new, records[150:])
    assert [o["y_pred"] for o in a] == [o["y_pred"] for o in b]
    for p, q in zip(old.hare.parameters(), new.hare.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-5)


def test_alarm_boost_runs_more_steps_only_after_an_alarm_reset():
    params = {**SMALL, "reset_every": 1000, "reset_on": "alarm", "min_reset_gap": 0,
              "detector": None, "alarm_replay_ratio": 3, "alarm_boost_records": 24}
    op = create("hare-tortoise", **params)
    records = stream(n=200)
    run(op, records[:64])  # no alarm yet: one step per micro-batch of 8
    assert op.n_steps == 8
    run(op, [{**records[64], "alarm": True}] + records[65:72])  # the reset, then 8 records
    assert op.n_alarm_resets == 1 and op.n_steps == 8 + 3
    run(op, records[72:88])  # records 9..24 after the reset: still boosted
    assert op.n_steps == 8 + 3 * 3
    run(op, records[88:104])  # past alarm_boost_records: back to replay_ratio
    assert op.n_steps == 8 + 3 * 3 + 2
    restored = create("hare-tortoise", **params)  # the window survives a restore
    a = create("hare-tortoise", **params)
    run(a, records[:64] + [{**records[64], "alarm": True}] + records[65:80])
    restored.load_state_dict(a.state_dict())
    assert run(restored, records[80:120]) == run(a, records[80:120])
    assert restored.n_steps == a.n_steps
    plain = create("hare-tortoise", **{**params, "alarm_replay_ratio": None})
    run(plain, records[:64] + [{**records[64], "alarm": True}] + records[65:104])
    assert plain.n_steps == 13
    for bad in ({"alarm_replay_ratio": 0}, {"alarm_boost_records": -1},
                {"alarm_replay_ratio": 2.0}):
        with pytest.raises(ValueError, match="alarm_"):
            create("hare-tortoise", **{**SMALL, **bad})
