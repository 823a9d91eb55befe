"""The op registry and every primitive op (importing this package registers them)."""
from . import (backend, backend_bf16, backend_shallow_bf16, bitwise, collective, contraction, control, elementwise,  # noqa: F401
               elementwise_more, iota, movement, quantized, quantized_conv, quantized_winograd, random, reduce,
               sources, special_bessel, special_frexp, special_gamma, special_igamma, special_polynomials,
               weight_only)  # (registration)
from .registry import (REGISTRY, Attrs, ConstantValue, MappingType, OpDef, OpKind, TensorType,
                       get_op, infer_type, register)

__all__ = ["REGISTRY", "Attrs", "ConstantValue", "MappingType", "OpDef", "OpKind", "TensorType",
           "get_op", "infer_type", "register"]
