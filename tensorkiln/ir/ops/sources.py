"""Source ops: graph inputs and constants (weights, literals)."""
from __future__ import annotations

from .registry import MappingType, OpKind, register


def _no_reference(inputs, attrs, out):
    raise RuntimeError("graph inputs are bound by the interpreter, not computed")


register("input", OpKind.SOURCE, MappingType.ONE_TO_ONE,
         lambda types, attrs: attrs["type"], _no_reference, 0,
         doc="A graph parameter; attrs: name, index, type.")
register("constant", OpKind.SOURCE, MappingType.ONE_TO_ONE,
         lambda types, attrs: attrs["type"], lambda i, a, o: a["value"].array, 0,
         doc="A constant array; attrs: value (ConstantValue), type.")
