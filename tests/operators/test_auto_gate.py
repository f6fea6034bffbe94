"""``auto``'s default since issue 48's "side by side" round (benchmarks/results/auto.md):
every univariate key long enough goes to ``class``, and the level detector runs beside it
with its alarms kept only when the level moved by ``level_gate`` (3) pooled standard
deviations (:class:`shiftwatch.operators.locate.LevelGate`)."""

from __future__ import annotations

import numpy as np
import pytest

from shiftwatch.operators import create
from shiftwatch.operators.locate import LevelGate
from shiftwatch.operators.state_codec import dumps_state, loads_state

OLD = {"period": "shape", "aperiodic": "level", "level_gate": None,
       "multichannel_delta": None}


def records(y: np.ndarray) -> list[dict]:
    return [{"key": "k", "ts": float(i), "offset": i,
             "value": float(v) if np.ndim(v) == 0 else [float(u) for u in v]}
            for i, v in enumerate(y)]


def alarms(outs: list[dict]) -> list[tuple[str, int]]:
    return [(o["route"], o["change_at"]) for o in outs if o.get("alarm")]


def shape_then_level(n: int = 3000, seed: int = 0) -> np.ndarray:
    """A change of period at 1000 (class sees it, the mean does not move) and a level shift
    of 6 noise sd at 2000 (class's z-normalised subsequences cannot see it)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    y = np.where(t < 1000, np.sin(2 * np.pi * t / 10), np.sin(2 * np.pi * t / 23))
    return y + 0.3 * rng.normal(size=n) + np.where(t >= 2000, 6.0, 0.0)


def test_the_default_is_class_with_a_gated_level_detector():
    p = create("auto").all_params()
    assert (p["period"], p["aperiodic"], p["level_gate"], p["level_gate_stat"],
            p["multichannel_delta"]) == ("shape+class", "class", 3.0, "mean", 0.2)


def test_class_finds_the_change_of_shape_and_the_gated_level_detector_the_level_shift():
    y = shape_then_level()
    outs = create("auto").process_batch(records(y))
    found = alarms(outs)
    assert outs[-1]["route"] == "class"
    assert any(r == "class" and abs(c - 1000) < 60 for r, c in found), found
    assert any(r == "level" and abs(c - 2000) <= 10 for r, c in found), found
    assert len(found) == 2, found  # one alarm each, no duplicate
    # class alone misses the level shift; without the gate's detector beside it, too
    alone = [o["change_at"] for o in create("class").process_batch(records(y)) if o["alarm"]]
    assert not any(abs(c - 2000) <= 50 for c in alone)
    bare = alarms(create("auto", level_gate=None).process_batch(records(y)))
    assert not any(abs(c - 2000) <= 50 for _, c in bare)


def test_the_gate_drops_small_level_moves_the_old_default_alarmed_on():
    """ADWIN alarms on a 1-sd shift; its effect size (about 1) is below the gate (3). A
    6-sd shift passes. Both on a key shorter than class's warm-up (the level route)."""
    rng = np.random.default_rng(11)
    small = np.r_[rng.normal(0, 1, 200), rng.normal(1.0, 1, 200)]
    big = np.r_[rng.normal(0, 1, 200), rng.normal(6.0, 1, 200)]
    assert alarms(create("auto", **OLD).process_batch(records(small)))
    assert alarms(create("auto").process_batch(records(small))) == []
    got = alarms(create("auto").process_batch(records(big)))
    assert len(got) == 1 and got[0][0] == "level" and abs(got[0][1] - 200) <= 3


def test_a_change_both_detectors_see_is_reported_once():
    """A change of period and level together: class and the level detector both locate
    it; the later one, within 32 records of the other's, is dropped."""
    rng = np.random.default_rng(4)
    t = np.arange(2400)
    y = np.where(t < 1200, np.sin(2 * np.pi * t / 10), 8 + np.sin(2 * np.pi * t / 23))
    y = y + 0.3 * rng.normal(size=2400)
    found = alarms(create("auto").process_batch(records(y)))
    near = [c for _, c in found if abs(c - 1200) < 100]
    assert len(near) == 1, found
    # each detector alone locates it
    assert any(abs(c - 1200) < 100 for _, c in
               alarms(create("auto", level_gate=None).process_batch(records(y))))
    assert any(abs(c - 1200) < 100 for _, c in
               alarms(create("auto", **{**OLD, "aperiodic": "class"}).process_batch(records(y))))


@pytest.mark.parametrize("stat", ["mean", "median", "winsorised"])
def test_record_by_record_batches_and_restores_give_the_same_outputs(stat):
    recs = records(shape_then_level(2600, seed=2))
    whole = create("auto", level_gate_stat=stat).process_batch(recs)
    assert len(alarms(whole)) >= 2
    one = create("auto", level_gate_stat=stat)
    assert [o for r in recs for o in one.process(r)] == whole
    op = create("auto", level_gate_stat=stat)
    assert [o for k in range(0, len(recs), 97) for o in op.process_batch(recs[k:k + 97])] \
        == whole
    for cut in (10, 499, 500, 1001, 2003):
        first = create("auto", level_gate_stat=stat)
        head = first.process_batch(recs[:cut])
        second = create("auto", level_gate_stat=stat)
        second.load_state_dict(loads_state(dumps_state(first.state_dict())))
        assert head + second.process_batch(recs[cut:]) == whole, cut


def test_a_spike_silences_the_mean_gate_but_not_the_median_one():
    """The documented weakness of the default's mean form (auto.md): a 50-sd value among
    the 250 before a 6-sd shift hides it (d about 6 / sqrt(1 + 50^2 / 250) = 1.8); the median
    form keeps it, as ADWIN alone does."""
    rng = np.random.default_rng(12)
    y = np.r_[rng.normal(0, 1, 250), rng.normal(6.0, 1, 150)]
    y[100] = 50.0
    mean = alarms(create("auto").process_batch(records(y)))
    median = alarms(create("auto", level_gate_stat="median").process_batch(records(y)))
    assert not any(abs(c - 250) <= 5 for _, c in mean), mean
    assert any(abs(c - 250) <= 5 for _, c in median), median
    assert any(abs(c - 250) <= 5 for _, c in
               alarms(create("auto", **OLD).process_batch(records(y))))


def test_gate_memory_is_bounded_by_its_window():
    g = LevelGate(3.0, window=100)
    for _ in range(50):
        g.push(np.zeros(37))
        g.trim()
        assert g.state_dict()["vals"].__len__() <= 100
    assert g.count == 50 * 37
    big = LevelGate(3.0, window=10)
    with pytest.raises(ValueError, match="window"):
        big.load_state_dict({"vals": [0.0] * 11, "n": 11, "last_level": -1, "last_routed": -1})
    op = create("auto")
    op.process_batch(records(np.random.default_rng(0).normal(size=5000)))
    assert len(op.state_dict()["state"]["gate"]["vals"]) <= 1000


def test_effect_size_matches_its_formula():
    rng = np.random.default_rng(5)
    x = np.r_[rng.normal(0, 1, 300), rng.normal(2, 2, 100)]
    g = LevelGate(3.0, stat="mean")
    g.push(x)
    a, b = x[:300], x[300:]
    pooled = (a.var() * 300 + b.var() * 100) / 400
    assert g.effect(300, at=399) == pytest.approx(abs(b.mean() - a.mean()) / np.sqrt(pooled))
    assert np.isnan(g.effect(399, at=399))  # one value after: cannot judge
    assert g.judge(399, at=399, kind="level")  # ... so the alarm is kept
    with pytest.raises(ValueError, match="stat"):
        LevelGate(3.0, stat="trimmed")


def test_level_gate_parameters_and_states_are_checked():
    for bad in (0, -1.0, float("nan"), True, "3"):
        with pytest.raises(ValueError, match="level_gate must be a positive number"):
            create("auto", level_gate=bad)
    with pytest.raises(ValueError, match="level_gate_stat"):
        create("auto", level_gate_stat="mode")
    gated = create("auto")
    gated.process_batch(records(np.zeros(20)))
    with pytest.raises(ValueError, match="level gate"):
        create("auto", level_gate=None).load_state_dict(gated.state_dict())
    with pytest.raises(ValueError, match="level gate"):
        create("auto").load_state_dict(create("auto", level_gate=None).state_dict())


def test_multichannel_keys_are_not_gated():
    rng = np.random.default_rng(4)
    t = np.arange(1200)
    y = np.c_[np.sin(2 * np.pi * t / 12), rng.normal(size=1200)]
    y[600:, 1] += 1.0  # a 1-sd shift: below the gate, but multichannel keys have none
    assert alarms(create("auto").process_batch(records(y))) == \
        alarms(create("auto", **OLD).process_batch(records(y)))
    assert alarms(create("auto").process_batch(records(y)))


def test_strictness_keeps_class_s_threshold_a_positive_p_value():
    op = create("auto", strictness=10.0)
    assert op._new_class().all_params()["threshold"] == 1e-300


def test_multichannel_keys_get_the_chosen_adwin_delta_and_keep_it_across_a_restore():
    rng = np.random.default_rng(4)
    y = rng.normal(size=(3000, 3))
    y[1500:, 1] += 1.0
    recs = records(y)
    op = create("auto")
    whole = op.process_batch(recs)
    assert op._level[1].all_params()["delta"] == 0.2
    for cut in (1, 700, 2000):
        a = create("auto")
        head = a.process_batch(recs[:cut])
        b = create("auto")
        b.load_state_dict(loads_state(dumps_state(a.state_dict())))
        assert b._level[1].all_params()["delta"] == 0.2
        assert head + b.process_batch(recs[cut:]) == whole
    # a univariate key keeps River's delta; None gives multichannel keys level_params'
    uni = create("auto")
    uni.process_batch(records(rng.normal(size=50)))
    assert uni._level[1].all_params()["delta"] == 0.002
    old = create("auto", multichannel_delta=None)
    old.process_batch(recs[:10])
    assert old._level[1].all_params()["delta"] == 0.002
    # strictness raises it to its power, as it does the univariate delta
    strict = create("auto", strictness=2.0)
    strict.process_batch(recs[:10])
    assert strict._level[1].all_params()["delta"] == pytest.approx(0.04)
    for bad in (0, 1, 1.5, True, "0.2"):
        with pytest.raises(ValueError, match="multichannel_delta"):
            create("auto", multichannel_delta=bad)


def test_multichannel_gate_keeps_a_shift_in_one_channel_and_drops_quiet_alarms():
    rng = np.random.default_rng(7)
    quiet = records(rng.normal(size=(18000, 3)))
    assert len(alarms(create("auto").process_batch(quiet))) >= 3  # delta 0.2, no gate
    assert alarms(create("auto", multichannel_gate=3.0).process_batch(quiet)) == []
    y = rng.normal(size=(2000, 3))
    y[1000:, 1] += 4.0  # one channel of three moves by 4 sd
    recs = records(y)
    op = create("auto", multichannel_gate=3.0)
    whole = op.process_batch(recs)
    assert [at for _, at in alarms(whole)] == [1000]
    assert op._gate is not None and op._gate.channels == 3
    for cut in (1, 999, 1500):  # restores, record by record, batches: the same outputs
        a = create("auto", multichannel_gate=3.0)
        head = a.process_batch(recs[:cut])
        b = create("auto", multichannel_gate=3.0)
        b.load_state_dict(loads_state(dumps_state(a.state_dict())))
        assert head + [o for r in recs[cut:] for o in b.process(r)] == whole
    with pytest.raises(ValueError, match="multichannel_gate must be a positive number"):
        create("auto", multichannel_gate=0)
    with pytest.raises(ValueError, match="level gate"):  # a gate's state needs a gate
        create("auto", level_gate=None).load_state_dict(op.state_dict())
    # a univariate key's gate is level_gate's, whatever multichannel_gate is
    uni = create("auto", multichannel_gate=1.0)
    uni.process_batch(records(rng.normal(size=50)))
    assert uni._gate.gate == 3.0 and uni._gate.channels == 1


def test_level_gate_on_channels_judges_the_largest_channel():
    g = LevelGate(3.0, channels=2)
    rng = np.random.default_rng(1)
    g.push(np.c_[rng.normal(size=300), rng.normal(size=300)])
    g.push(np.c_[rng.normal(0.2, 1, 50), rng.normal(6, 1, 50)])
    d = g.effect(300, at=349)
    one = LevelGate(3.0)
    one.push(g._vals[:, 1])
    assert d == pytest.approx(one.effect(300, at=349)) and d > 4
    s = g.state_dict()
    assert np.asarray(s["vals"]).shape == (350, 2)
    h = LevelGate(3.0, channels=2)
    h.load_state_dict(s)
    assert h.effect(300, at=349) == d
    with pytest.raises(ValueError, match="channels"):
        LevelGate(3.0, channels=3).load_state_dict(s)
    with pytest.raises(ValueError, match="channels"):
        LevelGate(3.0).load_state_dict(s)


def test_a_periodic_key_is_shape_s_until_class_s_warm_up_then_class_s():
    """``period="shape+class"``: a change of amplitude at 300 (which ``class`` cannot see,
    and which comes before its warm-up) is ``shape``'s; a change of period at 1500 after the
    hand-over is ``class``'s; record, batch and restored runs agree."""
    rng = np.random.default_rng(3)
    t = np.arange(3000)
    y = np.sin(2 * np.pi * t / 10) * np.where(t < 300, 1.0, 3.0)
    y = np.where(t < 1500, y, 3 * np.sin(2 * np.pi * t / 17)) + 0.3 * rng.normal(size=3000)
    recs = records(y)
    outs = create("auto").process_batch(recs)
    routes = [o["route"] for o in outs]
    assert routes.index("shape") in (63, 127, 255, 383) and routes.index("class") == 500
    found = alarms(outs)
    assert any(r == "shape" and abs(c - 300) < 30 for r, c in found), found
    assert any(r == "class" and abs(c - 1500) < 60 for r, c in found), found
    assert not any(abs(c - 300) < 30 for _, c in
                   alarms(create("auto", period="class").process_batch(recs)))
    one = create("auto")
    assert [o for r in recs for o in one.process(r)] == outs
    for cut in (100, 499, 500, 501, 1600):
        a = create("auto")
        head = a.process_batch(recs[:cut])
        b = create("auto")
        b.load_state_dict(loads_state(dumps_state(a.state_dict())))
        assert head + b.process_batch(recs[cut:]) == outs, cut
    assert len(a.state_dict()["state"]["buf"]) == 0  # the buffer goes with the hand-over


def test_multichannel_restart_puts_every_channel_back_at_the_located_change():
    rng = np.random.default_rng(5)
    y = rng.normal(size=(2000, 3))
    y[1000:] += [1.0, 0.8, 0.6]  # one change, seen by the channels at different lags
    recs = records(y)
    op = create("auto", multichannel_restart=True)
    whole = op.process_batch(recs)
    assert op._level[1].all_params()["restart"] is True
    assert op._level[1].all_params()["delta"] == 0.2
    ats = [at for _, at in alarms(whole)]
    assert ats and abs(ats[0] - 1000) <= 25
    for cut in (1, 1010, 1500):  # restores keep the option and give the same outputs
        a = create("auto", multichannel_restart=True)
        head = a.process_batch(recs[:cut])
        b = create("auto", multichannel_restart=True)
        b.load_state_dict(loads_state(dumps_state(a.state_dict())))
        assert b._level[1].all_params()["restart"] is True
        assert head + b.process_batch(recs[cut:]) == whole
    # River's delta with a restart; a univariate key's ADWIN is untouched
    plain = create("auto", multichannel_restart=True, multichannel_delta=None)
    plain.process_batch(recs[:10])
    assert plain._level[1].all_params()["delta"] == 0.002
    assert plain._level[1].all_params()["restart"] is True
    uni = create("auto", multichannel_restart=True)
    uni.process_batch(records(rng.normal(size=50)))
    assert uni._level[1].all_params()["restart"] is False
    with pytest.raises(ValueError, match="multichannel_restart"):
        create("auto", multichannel_restart="yes")
