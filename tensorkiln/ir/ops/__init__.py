"""The op registry and every primitive op (importing this package registers them)."""
from . import (backend, backend_bf16, bitwise, collective, contraction, elementwise, elementwise_more,  # noqa: F401
               movement, quantized, reduce, sources)  # (registration)
from .registry import (REGISTRY, Attrs, ConstantValue, MappingType, OpDef, OpKind, TensorType,
                       get_op, infer_type, register)

__all__ = ["REGISTRY", "Attrs", "ConstantValue", "MappingType", "OpDef", "OpKind", "TensorType",
           "get_op", "infer_type", "register"]
