"""The lazy registry: the table of built-in operators and listing without importing them."""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys

import pytest

from shiftwatch.operators import registry
from shiftwatch.operators.river.source_info import river_operator_infos
from shiftwatch.operators.source_info import class_info_from_source

HEAVY = ("numba", "torch", "matplotlib", "kafka")


@pytest.mark.parametrize("name", sorted(registry.BUILTIN_OPERATORS))
def test_every_table_entry_registers_that_name_with_that_class(name):
    module, _, cls_name = registry.BUILTIN_OPERATORS[name].partition(":")
    cls = getattr(importlib.import_module(module), cls_name)
    assert registry._REGISTRY[name] is cls
    assert cls.name == name
    assert registry.resolve(name) is cls


def test_every_registered_module_operator_is_in_the_table():
    # Import every operator module: nothing may register a name the table does not declare.
    for spec in set(registry.BUILTIN_OPERATORS.values()):
        importlib.import_module(spec.partition(":")[0])
    builtin = {n for n, c in registry._REGISTRY.items()
               if c.__module__.startswith("shiftwatch.operators.")}
    assert builtin == set(registry.BUILTIN_OPERATORS)


def _from_class(name: str, cls) -> registry.OperatorInfo:
    doc = inspect.getdoc(cls) or ""
    params = {p.name: ("required" if p.default is p.empty else p.default)
              for p in inspect.signature(cls).parameters.values()
              if p.kind is not p.VAR_KEYWORD}
    return registry.OperatorInfo(name, doc.split("\n")[0], params, cls.input_kind)


@pytest.mark.parametrize("name", sorted(registry.BUILTIN_OPERATORS))
def test_info_read_from_source_equals_the_imported_class(name):
    module, _, cls_name = registry.BUILTIN_OPERATORS[name].partition(":")
    from_source = class_info_from_source(module, cls_name, name)
    assert from_source is not None, f"{name}: source not readable, listing would import it"
    cls = getattr(importlib.import_module(module), cls_name)
    assert from_source == _from_class(name, cls)


def test_river_infos_read_from_source_equal_the_adapter():
    from shiftwatch.operators.river.adapter import river_detector_names

    from_source = river_operator_infos()
    assert from_source is not None
    real = [registry.resolve(f"river:{n}").info() for n in river_detector_names()]
    assert [i.name for i in from_source] == [i.name for i in real]
    assert from_source == real


def test_unknown_operator_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown operator 'nope'"):
        registry.create("nope")


_LIST = f"""
import json, sys
from shiftwatch.operators import list_operators, registered_names
infos = list_operators()
print(json.dumps({{"modules": sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}
                                    or m.startswith('shiftwatch.operators.')
                                    or m == 'river.drift'),
                  "names": registered_names(),
                  "infos": [[i.name, i.summary, repr(i.params), i.input_kind] for i in infos]}}))
"""


def test_listing_imports_no_operator_module_and_equals_the_imported_listing():
    out = subprocess.run([sys.executable, "-c", _LIST], capture_output=True, text=True,
                         check=True)
    lazy = json.loads(out.stdout)
    loaded = set(lazy["modules"])
    assert not loaded & set(HEAVY), loaded
    assert "river.drift" not in loaded
    for spec in registry.BUILTIN_OPERATORS.values():
        assert spec.partition(":")[0] not in loaded
    # The same listing with every operator module imported (the classes' own signatures).
    for spec in set(registry.BUILTIN_OPERATORS.values()):
        importlib.import_module(spec.partition(":")[0])
    registry.registered_names()  # River's detectors through the adapter
    eager = [[i.name, i.summary, repr(i.params), i.input_kind]
             for i in (_real_info(n) for n in lazy["names"])]
    assert lazy["infos"] == eager
    assert lazy["names"] == registry.registered_names()


def _real_info(name: str) -> registry.OperatorInfo:
    ctor = registry.resolve(name)
    return ctor.info() if callable(getattr(ctor, "info", None)) else _from_class(name, ctor)


def test_every_parameter_error_names_the_operator():
    # River's convention: "cs: alpha must be ...". Every registered operator, every
    # parameter given an absurd value: each error raised is one line that names the operator.
    from shiftwatch.operators import create, list_operators

    seen = 0
    for info in list_operators():
        for param in info.params:
            if param in ("model", "encoder"):  # factories: any callable
                continue
            try:
                create(info.name, **{param: object()})
            except ValueError as exc:
                msg = str(exc)
                assert msg.startswith((f"{info.name}:", f"operator {info.name!r}")), msg
                assert "\n" not in msg.strip(), msg
                seen += 1
    assert seen > 50
