"""The shared check suite over every registered operator and every unit-test parameter set."""

from __future__ import annotations

import pytest

from shiftwatch.operators import registered_names, resolve
from shiftwatch.operators.checks import _CHECKS, OPT_OUTS, yield_checks


def _cases():
    for name in registered_names():
        ctor = resolve(name)
        for i, params in enumerate(ctor._unit_test_params()):
            for check in _CHECKS:
                marks = ()
                reason = OPT_OUTS.get(name, {}).get(check.__name__)
                if reason:
                    marks = (pytest.mark.skip(reason=f"opt-out: {reason}"),)
                yield pytest.param(name, params, check, marks=marks,
                                   id=f"{name}-{i}-{check.__name__}")


@pytest.mark.parametrize(("name", "params", "check"), list(_cases()))
def test_operator_check(name, params, check):
    check(name, dict(params))


def test_opt_outs_name_real_operators_and_checks():
    names = set(registered_names())
    checks = {c.__name__ for c in _CHECKS}
    for name, skipped in OPT_OUTS.items():
        assert name in names, name
        assert set(skipped) <= checks, skipped
        assert all(isinstance(r, str) and r for r in skipped.values())


def test_yield_checks_honours_opt_outs(monkeypatch):
    monkeypatch.setitem(OPT_OUTS, "river:NoDrift", {"check_keyed": "testing the table"})
    got = [c.__name__ for c in yield_checks("river:NoDrift", {})]
    assert "check_keyed" not in got and len(got) == len(_CHECKS) - 1
