"""Tensors and dtypes between torch and tensorkiln (shared by the graph converter and the lowering table)."""
from __future__ import annotations

import numpy as np
import torch

from ... import dtypes as dt
from ...errors import UnsupportedOpError
from ...frontend.tensor import Tensor

_TORCH_TO_TK = {
    torch.float32: dt.float32, torch.float64: dt.float64, torch.float16: dt.float16,
    torch.bfloat16: dt.bfloat16, torch.int64: dt.int64, torch.int32: dt.int32, torch.int16: dt.int16,
    torch.int8: dt.int8, torch.uint8: dt.uint8, torch.bool: dt.bool_,
}
_TK_TO_TORCH = {v.name: k for k, v in _TORCH_TO_TK.items()}


def tk_dtype(dtype: torch.dtype) -> dt.DType:
    """The tensorkiln dtype of a torch dtype (UnsupportedOpError for complex, uint16, float8, ...)."""
    try:
        return _TORCH_TO_TK[dtype]
    except KeyError:
        raise UnsupportedOpError(f"torch dtype {dtype} has no tensorkiln equivalent "
                                 f"(supported: {', '.join(str(d) for d in _TORCH_TO_TK)})") from None


def torch_dtype(dtype: dt.DType) -> torch.dtype:
    return _TK_TO_TORCH[dtype.name]


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A torch CPU tensor as a numpy array in tensorkiln's storage type (shares memory where possible)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == torch.bfloat16:  # tensorkiln stores bfloat16 as its uint16 bit pattern
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def to_tk(t: torch.Tensor, copy: bool = False) -> Tensor:
    """A torch tensor as an eager tk Tensor (a snapshot when copy=True)."""
    array = to_numpy(t)
    return Tensor._from_value(np.array(array) if copy else array, tk_dtype(t.dtype))


def to_torch(t: Tensor) -> torch.Tensor:
    """An eager tk Tensor as a torch tensor sharing its memory."""
    value = t._value
    if t.dtype is dt.bfloat16:
        # ascontiguousarray makes a 0-d array 1-d: the shape is put back
        bits = np.ascontiguousarray(value).view(np.int16).reshape(value.shape)
        return torch.from_numpy(bits).view(torch.bfloat16)
    if not value.flags.writeable:  # torch.from_numpy warns on read-only arrays
        value = value.copy()
    return torch.from_numpy(value)
