"""Stateful stream operators: the operator contract, the registry and the built-in operators.

Records, dead letters and the field helpers live on the ground floor,
:mod:`shiftwatch.records` (re-exported here). The operators' common modules are split by
concern: :mod:`~shiftwatch.operators.state_codec` (the JSON state codec),
:mod:`~shiftwatch.operators.contract` (:class:`Operator`),
:mod:`~shiftwatch.operators.registry` (operators by name), :mod:`~shiftwatch.operators.keyed`
and :mod:`~shiftwatch.operators.with_input`.

Every public name below is imported on first use (PEP 562), and the registry imports an
operator's module only when that operator is created, so ``import shiftwatch.operators`` loads
neither Numba nor PyTorch.

>>> from shiftwatch.operators import create, registered_names
>>> "river:PageHinkley" in registered_names()
True
>>> create("standardize", burn_in=10)
Standardize(field='value', burn_in=10, emit_burn_in=True, min_std=1e-09)
"""

from __future__ import annotations

from shiftwatch._lazy import lazy_exports

#: public name -> module that defines it (imported on first attribute access)
_LAZY = {
    "BadInput": "shiftwatch.records",
    "DeadLetter": "shiftwatch.records",
    "PASSTHROUGH_FIELDS": "shiftwatch.records",
    "get_field": "shiftwatch.records",
    "as_scalar": "shiftwatch.records",
    "as_array": "shiftwatch.records",
    "encode_state": ".state_codec",
    "decode_state": ".state_codec",
    "dumps_state": ".state_codec",
    "loads_state": ".state_codec",
    "register_state_extension": ".state_codec",
    "Operator": ".contract",
    "OperatorInfo": ".registry",
    "register": ".registry",
    "register_prefix": ".registry",
    "create": ".registry",
    "resolve": ".registry",
    "list_operators": ".registry",
    "registered_names": ".registry",
    "Keyed": ".keyed",
    "WithInput": ".with_input",
    "StateRefused": ".object_state",
    "encode_object": ".object_state",
    "decode_object": ".object_state",
    "RiverDetector": ".river.adapter",
    "river_detector_names": ".river.adapter",
    "Standardize": ".transforms",
    "HareTortoise": ".learners.hare_tortoise",
    "ConfSeqDetector": ".confseq.detector",
    "ConfSeqOperator": ".confseq.operator",
    "Manifold": ".riemannian.base",
    "SPD": ".riemannian.spd",
    "Grassmann": ".riemannian.grassmann",
    "Sphere": ".riemannian.sphere",
    "KarcherDetector": ".riemannian.karcher",
    "KarcherOperator": ".riemannian.operator",
    "calibrate_threshold": ".riemannian.karcher",
    "WindowCovariance": ".riemannian.transforms",
    "WindowSubspace": ".riemannian.transforms",
    "NormalizeSphere": ".riemannian.transforms",
    "CILA": ".learners.cila",
    "DelayEmbed": ".embed",
    "ShapeDetector": ".shape.detector",
    "ShapeOperator": ".shape.operator",
    "AutoDetect": ".auto",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
