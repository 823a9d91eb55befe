"""The op registry and every primitive op (importing this package registers them)."""
from . import backend, contraction, elementwise, movement, quantized, reduce, sources  # noqa: F401  (registration)
from .registry import (REGISTRY, Attrs, ConstantValue, MappingType, OpDef, OpKind, TensorType,
                       get_op, infer_type, register)

__all__ = ["REGISTRY", "Attrs", "ConstantValue", "MappingType", "OpDef", "OpKind", "TensorType",
           "get_op", "infer_type", "register"]
