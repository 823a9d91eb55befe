"""ONNX element types and tensor values in tensorkiln terms: which TensorProto element types
tensorkiln holds (`ONNX_DTYPES`, `tk_dtype`) and eager tensors from TensorProtos
(initializers, Constant values)."""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import UnsupportedOpError
from ...frontend.tensor import Tensor, as_tensor
from .errors import OnnxImportError


# ONNX TensorProto element types tensorkiln holds (the others: string, complex, float8, 4-bit...).
ONNX_DTYPES = {1: dt.float32, 2: dt.uint8, 3: dt.int8, 4: dt.uint16, 5: dt.int16, 6: dt.int32, 7: dt.int64,
               9: dt.bool_, 10: dt.float16, 11: dt.float64, 12: dt.uint32, 13: dt.uint64, 16: dt.bfloat16}


def tk_dtype(elem_type: int) -> dt.DType:
    """The tensorkiln dtype of an ONNX element type; UnsupportedOpError for the others."""
    if elem_type in ONNX_DTYPES:
        return ONNX_DTYPES[elem_type]
    raise UnsupportedOpError(f"element type {elem_type_name(elem_type)} is not supported")


def elem_type_name(elem_type: int) -> str:
    import onnx
    try:
        return onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)


def tensor_from_proto(proto) -> Tensor:
    """An eager tensor from an ONNX TensorProto (external data must have been read into it already)."""
    from onnx import numpy_helper
    dtype = tk_dtype(proto.data_type)
    if proto.data_location == 1:  # EXTERNAL: to_array would read the file relative to the working directory
        raise OnnxImportError(f"tensor {proto.name!r} stores its data in an external file that was not read "
                              "(load the model with tk.onnx.load, which reads it under its containment rules)")
    array = numpy_helper.to_array(proto)
    if dtype is dt.bfloat16:
        array = np.asarray(array).astype(np.float32)
    return as_tensor(np.array(array), dtype)
