"""shiftwatch's detectors as River drift detectors (issue 24, item 13): River's generic checks,
River's models that take a drift detector, ``clone(include_attributes=True)`` and what
``update`` takes, each against River's own ADWIN."""

from __future__ import annotations

import decimal
import fractions

import numpy as np
import pytest
from river import checks, drift, forest, tree
from river.datasets import synth

from shiftwatch.operators.clasp.detector import ClassDetector
from shiftwatch.operators.confseq.detector import ConfSeqDetector
from shiftwatch.operators.drift_detector import NotANumber
from shiftwatch.operators.riemannian.karcher import KarcherDetector
from shiftwatch.operators.shape.detector import ShapeDetector
from shiftwatch.records import BadInput
from shiftwatch.streams.synthetic import WishartSPDStream

DETECTORS = {
    "cs": lambda: ConfSeqDetector(),
    "cs-betting": lambda: ConfSeqDetector(cs="betting", lower=-10.0, upper=10.0),
    "karcher": lambda: KarcherDetector("spd", threshold=0.35, update="retraction"),
    "shape": lambda: ShapeDetector(),
    "class": lambda: ClassDetector(window=1000, n_warmup=200),
}


@pytest.mark.parametrize("name", DETECTORS)
def test_river_generic_checks_pass(name):
    """``river.checks.check_estimator`` runs every check of ``river.checks.yield_checks``
    (repr, clone, pickling, parameters, tags, ...). On River's own drift detectors it cannot
    run: they have neither ``_unit_test_skips`` nor ``_tags`` (check_tags fails on ADWIN)."""
    det = DETECTORS[name]()
    ran = [c.__name__ for c in checks.yield_checks(det)]
    assert len(ran) >= 14 and "check_clone_is_idempotent" in ran and "check_tags" in ran
    checks.check_estimator(det)
    with pytest.raises(AttributeError):
        checks.check_estimator(drift.ADWIN())


def _scalar_stream() -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.r_[rng.normal(0, 1, 700), rng.normal(1.5, 1, 300)]


def _streams(name: str) -> tuple[list, int]:
    """A stream with a change for each detector, and where to clone it."""
    if name == "karcher":
        return [r["value"] for r in WishartSPDStream(n=1000, change_point=600, seed=1)], 300
    if name in ("shape", "class"):
        rng = np.random.default_rng(1)
        t = np.arange(3000)
        y = np.where(t < 1500, np.sin(2 * np.pi * t / 10), np.sin(2 * np.pi * t / 17))
        return list(y + 0.3 * rng.normal(size=3000)), 1000  # after the period is fixed
    return [float(v) for v in _scalar_stream()], 300


def _alarms(det, xs, offset: int = 0) -> list[int]:
    out = []
    for i, x in enumerate(xs):
        det.update(x)
        if det.drift_detected:
            out.append(offset + i)
    return out


@pytest.mark.parametrize("name", ["adwin", *DETECTORS])
def test_clone_with_attributes_carries_the_learned_state_as_river_adwin_does(name):
    """River's ADWIN keeps what it learned in ``clone(include_attributes=True)`` (River's
    models call it); after 300 values our clones alarmed ``[]`` where the original alarmed."""
    make = drift.ADWIN if name == "adwin" else DETECTORS[name]
    xs, at = _streams("cs" if name == "adwin" else name)
    det = make()
    _alarms(det, xs[:at])
    twin = det.clone(include_attributes=True)
    fresh = det.clone()
    assert type(twin) is type(det) and twin._get_params() == det._get_params()
    if name != "adwin":  # a plain clone starts afresh, as River's does
        assert str(fresh.state_dict()) == str(make().state_dict())
    original = _alarms(det, xs[at:], at)
    assert original, name  # the stream has a change each detector finds
    assert _alarms(twin, xs[at:], at) == original


@pytest.mark.parametrize("name", DETECTORS)
def test_a_clone_with_attributes_is_independent(name):
    xs, at = _streams(name)
    det = DETECTORS[name]()
    _alarms(det, xs[:at])
    before = str(det.state_dict())
    twin = det.clone(include_attributes=True)
    assert str(twin.state_dict()) == before
    _alarms(twin, xs[at:at + 200])
    assert str(det.state_dict()) == before  # feeding the clone left the original alone
    assert str(twin.state_dict()) != before


NOT_NUMBERS = ["1.0", np.str_("1.0"), b"1", None, complex(1, 0)]
NUMBERS = [1, True, np.float32(0.5), np.int64(1), np.array(0.5), decimal.Decimal("0.5"),
           fractions.Fraction(1, 2)]


@pytest.mark.parametrize("value", NOT_NUMBERS, ids=repr)
@pytest.mark.parametrize("cs", ["subgaussian", "betting"])
def test_update_refuses_what_river_adwin_refuses(value, cs):
    """``ConfSeqDetector(cs="betting").update("1.0")`` was accepted: River's ADWIN raises
    ``TypeError`` ("must be real number, not str"); ours raises a TypeError too (also a
    BadInput: a dead letter for shiftwatch's runtime), and leaves the state alone."""
    with pytest.raises(TypeError):
        drift.ADWIN().update(value)
    det = ConfSeqDetector(cs=cs)
    before = str(det.state_dict())
    with pytest.raises(TypeError, match="ConfSeqDetector: update takes a real number") as info:
        det.update(value)
    assert isinstance(info.value, (NotANumber, BadInput))
    assert str(det.state_dict()) == before


@pytest.mark.parametrize("value", NUMBERS, ids=repr)
def test_update_takes_what_river_adwin_takes(value):
    drift.ADWIN().update(value)
    det = ConfSeqDetector(cs="betting")
    det.update(value)
    assert det._scalars is not None and not det.drift_detected


def test_text_is_refused_by_every_detector_and_update_many():
    with pytest.raises(TypeError):
        ConfSeqDetector().update_many(["1.0", "2.0"])
    for det in (KarcherDetector("spd"), ShapeDetector()):
        for bad in ("1.0", None, [["1", "0"], ["0", "1"]]):
            with pytest.raises(TypeError, match="update takes numbers"):
                det.update(bad)
    ShapeDetector().update(1)  # numbers are fine


def _drifting_stream(n: int = 2000):
    return synth.ConceptDriftStream(
        stream=synth.Agrawal(classification_function=0, seed=1),
        drift_stream=synth.Agrawal(classification_function=4, seed=2), position=n // 2,
        width=10, seed=1).take(n)


@pytest.mark.parametrize("model", ["arf", "hatc"])
def test_confseq_detector_drives_rivers_adaptive_models(model):
    """A ConfSeqDetector where River takes a drift detector: the adaptive random forest
    and the Hoeffding adaptive tree clone it per tree or node and feed it their errors."""
    from river import metrics

    if model == "arf":
        m = forest.ARFClassifier(n_models=3, seed=1, drift_detector=ConfSeqDetector(alpha=0.01),
                                 warning_detector=ConfSeqDetector(alpha=0.05))
    else:
        m = tree.HoeffdingAdaptiveTreeClassifier(drift_detector=ConfSeqDetector(alpha=0.01),
                                                 grace_period=50, seed=1)
    acc = metrics.Accuracy()
    for x, y in _drifting_stream():
        y_pred = m.predict_one(x)
        if y_pred is not None:
            acc.update(y, y_pred)
        m.learn_one(x, y)
    assert acc.get() > 0.75, acc
    if model == "arf":  # the change in the middle of the stream, found
        assert all(isinstance(d, ConfSeqDetector) for d in m._drift_detectors)
        assert m.n_drifts_detected() >= 1
    else:  # (River's ADWIN there: 2 alternate trees, 1 switched to)
        assert m.n_alternate_trees >= 1 and m.n_switch_alternate_trees >= 1
