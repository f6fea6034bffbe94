"""``auto``: the routing rule per key, the equivalence with the detector it routes to, and
series shorter than any burn-in (issue 36, items 4 and 5). The contract checks (state round
trip, Keyed, bad records) run for ``auto`` in tests/operators/test_checks.py."""

from __future__ import annotations

import numpy as np
import pytest

from shiftwatch.operators import create
from shiftwatch.operators.auto import CLEAR_RULES

#: ``auto``'s default before ``level_gate`` (2026-12-07, benchmarks/results/auto.md): periodic
#: keys to ``shape``, the others to ADWIN alone. These tests are about those two routes; the
#: default's (``class`` with a gated ADWIN beside it) are in test_auto_gate.py.
OLD = {"period": "shape", "aperiodic": "level", "level_gate": None,
       "multichannel_delta": None}


def records(y: np.ndarray) -> list[dict]:
    return [{"key": "k", "ts": float(i), "offset": i,
             "value": float(v) if np.ndim(v) == 0 else [float(u) for u in v]}
            for i, v in enumerate(y)]


def alarms(outs: list[dict]) -> list[tuple[str, int]]:
    return [(o["route"], o["change_at"]) for o in outs if o.get("alarm")]


def period_change(n: int = 3000, at: int = 1500, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    y = np.where(t < at, np.sin(2 * np.pi * t / 10), np.sin(2 * np.pi * t / 17))
    return y + 0.3 * rng.normal(size=n)


def test_routes_follow_shape_s_own_time_scale_rule():
    t = np.arange(400)
    rng = np.random.default_rng(1)
    cases = {"sine": np.sin(2 * np.pi * t / 16) + 0.1 * rng.normal(size=400),
             "red noise": np.cumsum(rng.normal(size=400)),
             "second channel periodic": np.c_[rng.normal(size=400), np.sin(2 * np.pi * t / 9)]}
    routes = {}
    for name, y in cases.items():
        outs = create("auto", **OLD, multichannel="period").process_batch(records(y))
        routes[name] = outs[-1]["route"]
        shape = create("shape")
        shape.process_batch(records(y))
        rule = shape._detector.time_scale["rule"]
        assert (outs[-1]["route"] == "shape") == (rule in CLEAR_RULES), (name, rule)
    assert routes == {"sine": "shape", "red noise": "level", "second channel periodic": "shape"}


def test_a_periodic_key_goes_to_shape_and_alarms_as_shape_does():
    y = period_change()
    outs = create("auto", **OLD).process_batch(records(y))
    routes = [o["route"] for o in outs]
    switch = routes.index("shape")
    assert switch in (63, 127, 255, 383)  # decided at a checkpoint of the burn-in
    assert set(routes[switch:]) == {"shape"}
    shape_outs = create("shape").process_batch(records(y))
    want = [o["change_at"] for o in shape_outs if o["alarm"]]
    assert [c for _, c in alarms(outs)] == want
    assert any(abs(c - 1500) < 40 for c in want)


def test_an_aperiodic_key_stays_with_the_level_detector():
    rng = np.random.default_rng(5)
    z = np.r_[rng.normal(0, 1, 800), rng.normal(2.5, 1, 800)]
    outs = create("auto", **OLD).process_batch(records(z))
    assert {o["route"] for o in outs} == {"level"}
    found = alarms(outs)
    assert found and all(r == "level" for r, _ in found)
    assert min(abs(c - 800) for _, c in found) <= 15


def test_a_short_series_can_alarm_before_any_burn_in_ends():
    """The level detector runs from the first record: a 3-sd shift in the middle of 80
    records alarms (River's ADWIN checks every 32 records and needs about 30 each side;
    series of 21 or 37 records, as TCPD has, are below what its statistic allows)."""
    rng = np.random.default_rng(80)
    z = np.r_[rng.normal(0, 1, 40), rng.normal(3, 1, 40)]
    found = alarms(create("auto", **OLD).process_batch(records(z)))
    assert found == [("level", 40)]


def test_multichannel_level_routes_every_vector_key_to_the_level_detector():
    t = np.arange(1200)
    rng = np.random.default_rng(4)
    y = np.c_[np.sin(2 * np.pi * t / 12), rng.normal(size=1200)]
    y[600:, 1] += 3.0
    by_period = create("auto", **OLD, multichannel="period").process_batch(records(y))
    assert by_period[-1]["route"] == "shape"
    level = create("auto", **OLD).process_batch(records(y))  # the default
    assert {o["route"] for o in level} == {"level"}
    assert any(abs(c - 600) <= 10 for _, c in alarms(level))


@pytest.mark.parametrize("cut", [10, 63, 64, 200, 500, 2000])
def test_cutting_anywhere_and_restoring_gives_the_same_outputs(cut):
    from shiftwatch.operators.state_codec import dumps_state, loads_state

    y = period_change(2400, 1200, seed=3)
    recs = records(y)
    whole = create("auto", **OLD).process_batch(recs)
    first = create("auto", **OLD)
    head = first.process_batch(recs[:cut])
    second = create("auto", **OLD)
    second.load_state_dict(loads_state(dumps_state(first.state_dict())))
    assert head + second.process_batch(recs[cut:]) == whole


def test_bad_input_is_a_dead_letter_and_leaves_the_state_alone():
    op = create("auto", **OLD)
    recs = records(period_change(400, 300))
    bad = [{"key": "k", "value": "x"}, {"key": "k", "value": [1.0, 2.0]},
           {"key": "k", "value": float("nan")}, {"key": "k"}]
    mixed = recs[:100] + bad + recs[100:]
    outs = op.process_batch(mixed)
    dead = [o for o in outs if not isinstance(o, dict)]
    assert len(dead) == 4
    clean = create("auto", **OLD).process_batch(recs)
    assert [o for o in outs if isinstance(o, dict)] == clean


def test_parameters_are_checked():
    with pytest.raises(ValueError, match="multichannel"):
        create("auto", **OLD, multichannel="joint")
    with pytest.raises(ValueError, match="threshold"):
        create("auto", shape_params={"threshold": -1})
    with pytest.raises(ValueError, match="field"):
        create("auto", level_params={"field": "x"})


def two_quick_changes(seed: int = 5) -> np.ndarray:
    """Level shifts at 1000 and 1030: the second falls in ``cs``'s re-burn-in."""
    rng = np.random.default_rng(seed)
    return np.r_[rng.normal(0, 1, 1000), rng.normal(2, 1, 30), rng.normal(7, 1, 400)]


def test_the_relay_reports_cs_where_it_judges_and_a_restarted_adwin_in_its_burn_in():
    y = two_quick_changes()
    cs = create("cs").process_batch(records(y))
    relay = create("auto", **OLD, level="relay").process_batch(records(y))
    adwin = create("auto", **OLD).process_batch(records(y))
    first_cs = next(i for i, o in enumerate(cs) if o["alarm"])
    got = [(i, o["change_at"]) for i, o in enumerate(relay) if o["alarm"]]
    # cs's alarm is the relay's (same record, same location) ...
    assert got[0] == (first_cs, cs[first_cs]["change_at"])
    assert abs(got[0][1] - 1000) <= 5
    # ... and the ADWIN restarted after it, counting from the key's start, finds the second
    # change while cs re-learns its scale; plain ADWIN reports only one alarm here
    assert len(got) == 2 and abs(got[1][1] - 1030) <= 5 and first_cs < got[1][0]
    assert len(alarms(adwin)) == 1
    assert all(o["route"] == "level" for o in relay)


def test_the_handover_is_adwin_until_cs_is_bounded_then_cs_alone():
    rng = np.random.default_rng(8)
    y = rng.normal(size=1500)
    y[900:] += 1.5
    recs = records(y)
    cs = create("cs").process_batch(recs)
    adwin = create("auto", **OLD).process_batch(recs)
    hand = create("auto", **OLD, level="handover").process_batch(recs)
    start = next(i for i, o in enumerate(cs) if o["lower"] is not None or o["alarm"])
    assert 0 < start < 900
    keys = ("alarm", "change_at")
    assert [{k: o.get(k) for k in keys} for o in hand[:start]] == \
        [{k: o.get(k) for k in keys} for o in adwin[:start]]
    assert [{k: o.get(k) for k in keys} for o in hand[start:]] == \
        [{k: o.get(k) for k in keys} for o in cs[start:]]
    assert any(abs(o["change_at"] - 900) <= 10 for o in hand[start:] if o["alarm"])


@pytest.mark.parametrize("level", ["handover", "relay"])
def test_cs_level_routes_go_record_by_record_as_in_batches(level):
    y = two_quick_changes(seed=6)
    recs = records(y)
    batch = create("auto", **OLD, level=level).process_batch(recs)
    op = create("auto", **OLD, level=level)
    assert [op.process(r)[0] for r in recs] == batch
    op = create("auto", **OLD, level=level)
    assert [o for k in range(0, len(recs), 97) for o in op.process_batch(recs[k:k + 97])] \
        == batch


@pytest.mark.parametrize("level", ["handover", "relay"])
@pytest.mark.parametrize("cut", [10, 500, 1002, 1010, 1100])
def test_cs_level_routes_restore_anywhere(level, cut):
    from shiftwatch.operators.state_codec import dumps_state, loads_state

    recs = records(two_quick_changes(seed=7))
    whole = create("auto", **OLD, level=level).process_batch(recs)
    first = create("auto", **OLD, level=level)
    head = first.process_batch(recs[:cut])
    second = create("auto", **OLD, level=level)
    second.load_state_dict(loads_state(dumps_state(first.state_dict())))
    assert head + second.process_batch(recs[cut:]) == whole
    with pytest.raises(ValueError, match="cs state"):
        create("auto", **OLD, level=level).load_state_dict(create("auto", **OLD).state_dict())


def test_the_level_route_is_checked():
    with pytest.raises(ValueError, match="level must be one of"):
        create("auto", level="cs")


def test_strictness_scales_both_routes_and_one_leaves_the_defaults():
    op = create("auto", **OLD, strictness=2.0, level="relay")
    assert op._new_shape().all_params()["threshold"] == 12.0
    assert op._new_adwin().all_params()["delta"] == pytest.approx(0.002 ** 2)
    assert op._new_cs().all_params()["alpha"] == pytest.approx(0.001 ** 2)
    own = create("auto", **OLD, strictness=0.5, shape_params={"threshold": 4.0},
                 level_params={"delta": 0.01})
    assert own._new_shape().all_params()["threshold"] == 2.0
    assert own._new_adwin().all_params()["delta"] == pytest.approx(0.1)
    recs = records(period_change(2400, 1200, seed=5))
    assert create("auto", **OLD, strictness=1.0).process_batch(recs) == \
        create("auto", **OLD).process_batch(recs)


@pytest.mark.parametrize("periodic", [True, False])
def test_more_strictness_fewer_alarms_on_both_routes(periodic):
    rng = np.random.default_rng(9)
    if periodic:
        t = np.arange(6000)
        y = np.sin(2 * np.pi * t / 12) + 0.6 * rng.normal(size=6000)
    else:
        y = np.zeros(6000)
        for i in range(1, 6000):
            y[i] = 0.9 * y[i - 1] + rng.normal()
    counts = []
    for k in (0.3, 1.0, 3.0):
        outs = create("auto", **OLD, strictness=k).process_batch(records(y))
        assert {o["route"] for o in outs[500:]} == {"shape" if periodic else "level"}
        counts.append(sum(o["alarm"] for o in outs))
    assert counts[0] >= counts[1] >= counts[2] and counts[0] > counts[2], counts


def test_strictness_is_checked():
    for bad in (0, -1.0, float("nan"), "2", True):
        with pytest.raises(ValueError, match="strictness must be a positive number"):
            create("auto", strictness=bad)
    with pytest.raises(ValueError, match="numeric shape threshold"):
        create("auto", strictness=2.0, shape_params={"threshold": "null"})
    create("auto", shape_params={"threshold": "null"})  # strictness 1: fine


# ---- aperiodic="class": keys without a clear period go to class at its warm-up --------


def red_noise_change(n: int = 2400, at: int = 1200, seed: int = 2) -> np.ndarray:
    """Aperiodic: AR(1) 0.9 noise, then a change of texture (AR(1) -0.5) at ``at``."""
    rng = np.random.default_rng(seed)
    e = rng.normal(size=n)
    y = np.zeros(n)
    for i in range(1, n):
        y[i] = (0.9 if i < at else -0.5) * y[i - 1] + e[i]
    return y


APERIODIC = {**OLD, "aperiodic": "class", "class_params": {"window": 2000}}


def test_an_aperiodic_key_goes_to_class_at_its_warm_up_and_alarms_as_class_does():
    y = red_noise_change()
    outs = create("auto", **APERIODIC).process_batch(records(y))
    routes = [o["route"] for o in outs]
    assert set(routes[:499]) == {"level"}  # no clear period: the level detector first
    assert set(routes[499:]) == {"class"}  # handed over at class's 500th record
    # After the hand-over the alarms are class's own on the whole key (its replay of the
    # first 500 records alarms, if at all, on the record that handed over).
    direct = create("class", window=2000).process_batch(records(y))
    want = [o["change_at"] for o in direct if o["alarm"] and o["offset"] >= 499]
    got = [c for r, c in alarms(outs) if r == "class"]
    assert got == want and any(abs(c - 1200) < 60 for c in got)
    # The old default kept the key with the level detector throughout.
    assert {o["route"] for o in create("auto", **OLD).process_batch(records(y))} == {"level"}


def test_aperiodic_class_leaves_periodic_short_and_multichannel_keys_as_they_were():
    for y in (period_change(2400, 1200, seed=3),  # periodic: shape at a checkpoint
              red_noise_change(400, 200),  # shorter than class's warm-up: level only
              np.c_[red_noise_change(1200, 600), red_noise_change(1200, 600, seed=9)]):
        assert create("auto", **APERIODIC).process_batch(records(y)) \
            == create("auto", **OLD).process_batch(records(y))


@pytest.mark.parametrize("cut", [100, 384, 450, 500, 501, 1500])
def test_aperiodic_class_restores_anywhere(cut):
    from shiftwatch.operators.state_codec import dumps_state, loads_state

    recs = records(red_noise_change())
    whole = create("auto", **APERIODIC).process_batch(recs)
    first = create("auto", **APERIODIC)
    head = first.process_batch(recs[:cut])
    second = create("auto", **APERIODIC)
    second.load_state_dict(loads_state(dumps_state(first.state_dict())))
    assert head + second.process_batch(recs[cut:]) == whole
    one = create("auto", **APERIODIC)
    assert [o for r in recs for o in one.process(r)] == whole
    with pytest.raises(ValueError, match="aperiodic"):
        create("auto", **OLD).load_state_dict(first.state_dict())
    with pytest.raises(ValueError, match="aperiodic"):
        create("auto", aperiodic="shape")
