"""Stateful stream operators: the operator contract, the registry and the built-in operators.

Importing this package registers every built-in operator, so ``create(name, **params)`` and
``list_operators()`` see them all.

>>> from operators import create, registered_names
>>> "river:PageHinkley" in registered_names()
True
>>> create("river:PageHinkley", threshold=5.0)
RiverDetector(detector='PageHinkley', field='value', threshold=5.0)
"""

from __future__ import annotations

from shiftwatch.operators.base import (
    PASSTHROUGH_FIELDS,
    BadInput,
    DeadLetter,
    Keyed,
    Operator,
    OperatorInfo,
    as_array,
    as_scalar,
    create,
    decode_state,
    dumps_state,
    encode_state,
    get_field,
    list_operators,
    loads_state,
    register,
    register_prefix,
    register_state_extension,
    registered_names,
    resolve,
)
from shiftwatch.operators.cila import CILA
from shiftwatch.operators.confseq import ConfSeqDetector, ConfSeqOperator
from shiftwatch.operators.hare_tortoise import HareTortoise
from shiftwatch.operators.manifold_transforms import (
    NormalizeSphere,
    WindowCovariance,
    WindowSubspace,
)
from shiftwatch.operators.manifolds import SPD, Grassmann, Manifold, Sphere
from shiftwatch.operators.object_state import StateRefused, decode_object, encode_object
from shiftwatch.operators.riemannian import KarcherDetector, KarcherOperator, calibrate_threshold
from shiftwatch.operators.river_adapter import RiverDetector, river_detector_names
from shiftwatch.operators.transforms import Standardize

__all__ = [
    "BadInput",
    "DeadLetter",
    "Operator",
    "OperatorInfo",
    "Keyed",
    "PASSTHROUGH_FIELDS",
    "register",
    "register_prefix",
    "create",
    "resolve",
    "list_operators",
    "registered_names",
    "get_field",
    "as_scalar",
    "as_array",
    "encode_state",
    "decode_state",
    "dumps_state",
    "loads_state",
    "register_state_extension",
    "StateRefused",
    "encode_object",
    "decode_object",
    "RiverDetector",
    "river_detector_names",
    "Standardize",
    "HareTortoise",
    "ConfSeqDetector",
    "ConfSeqOperator",
    "Manifold",
    "SPD",
    "Grassmann",
    "Sphere",
    "KarcherDetector",
    "KarcherOperator",
    "calibrate_threshold",
    "WindowCovariance",
    "WindowSubspace",
    "NormalizeSphere",
    "CILA",
]
