"""The op registry and every primitive op (importing this package registers them)."""
from . import backend, backend_bf16, contraction, elementwise, movement, reduce, sources  # noqa: F401
from .registry import (REGISTRY, Attrs, ConstantValue, MappingType, OpDef, OpKind, TensorType,
                       get_op, infer_type, register)

__all__ = ["REGISTRY", "Attrs", "ConstantValue", "MappingType", "OpDef", "OpKind", "TensorType",
           "get_op", "infer_type", "register"]
