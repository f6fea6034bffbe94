"""Torch tensors in a state_dict: a safe extension of the state codec (no pickle, no torch.load).

Importing this module (which imports torch) registers, with
:func:`shiftwatch.operators.state_codec.register_state_extension`, an encoder for CPU
``torch.Tensor`` values and its decoder under the marker ``"__tensor__"``. A tensor becomes
``{"__tensor__": base64 raw bytes, "dtype": "float32", "shape": [...]}``, so round-trips are
bit-exact and a changelog stays plain JSON. Learner operators (Hare & Tortoise, CILA) keep
their networks' and optimisers' ``state_dict`` values as tensors and rely on this.

Examples
--------
>>> import json, torch
>>> from shiftwatch.operators.state_codec import decode_state, encode_state
>>> t = torch.tensor([[1.5, -2.0]], dtype=torch.float32)
>>> doc = json.dumps(encode_state({"w": t, "step": torch.tensor(3.0)}))
>>> back = decode_state(json.loads(doc))
>>> back["w"].dtype, back["w"].tolist(), torch.equal(back["w"], t)
(torch.float32, [[1.5, -2.0]], True)
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import torch

from shiftwatch.operators.state_codec import register_state_extension

__all__ = ["TENSOR_MARKER", "encode_tensor", "decode_tensor", "tensor_to_numpy"]

TENSOR_MARKER = "__tensor__"

# Every dtype the codec accepts, by its short name; bfloat16 has no NumPy twin and travels
# as its raw 16-bit pattern.
_DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d
    for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.uint8,
              torch.int8, torch.int16, torch.int32, torch.int64, torch.bool,
              torch.complex64, torch.complex128)
}


def tensor_to_numpy(t: torch.Tensor) -> np.ndarray:
    """A NumPy copy of a CPU tensor (bfloat16 as its int16 bit pattern)."""
    t = t.detach()
    if t.device.type != "cpu":
        raise TypeError(f"only CPU tensors can go in a state_dict, got one on {t.device}")
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.contiguous().numpy().copy()


def encode_tensor(obj: Any) -> Any:
    """The JSON-able form of a tensor, or ``NotImplemented`` for anything else."""
    if not isinstance(obj, torch.Tensor):
        return NotImplemented
    name = str(obj.dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise TypeError(f"cannot encode a {obj.dtype} tensor in a state_dict")
    if obj.is_sparse or obj.layout != torch.strided:
        raise TypeError("cannot encode a sparse tensor in a state_dict")
    arr = np.ascontiguousarray(tensor_to_numpy(obj))
    return {TENSOR_MARKER: base64.b64encode(arr.tobytes()).decode("ascii"), "dtype": name,
            "shape": list(obj.shape)}


def decode_tensor(obj: Any) -> Any:
    """Inverse of :func:`encode_tensor`; ``NotImplemented`` for dicts without the marker."""
    if not isinstance(obj, dict) or TENSOR_MARKER not in obj:
        return NotImplemented
    dtype = _DTYPES.get(obj.get("dtype"))  # type: ignore[arg-type]
    if dtype is None:
        raise ValueError(f"state_dict holds a tensor of unknown dtype {obj.get('dtype')!r}")
    carrier = torch.int16 if dtype == torch.bfloat16 else dtype
    np_dtype = torch.empty((), dtype=carrier).numpy().dtype
    buf = base64.b64decode(obj[TENSOR_MARKER])
    arr = np.frombuffer(buf, dtype=np_dtype).copy().reshape(obj["shape"])
    t = torch.from_numpy(arr)
    return t.view(dtype) if dtype == torch.bfloat16 else t


register_state_extension(encode_tensor, decode_tensor, marker=TENSOR_MARKER)
