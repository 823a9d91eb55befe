"""Symbolic sizes: SymInt, the ShapeEnv of size symbols and guards, and Dim (docs/dynamic_shapes.md)."""
from tensorkiln.shapes.env import Dim, Guard, ShapeEnv, SizeSymbol
from tensorkiln.shapes.symint import (SymInt, has_symbols, hint_of, is_symbolic, prod, same_shape, size_expr, sym_max,
                                      sym_min, upper_bound)

__all__ = ["Dim", "Guard", "ShapeEnv", "SizeSymbol", "SymInt", "has_symbols", "hint_of", "is_symbolic", "prod",
           "same_shape", "size_expr", "sym_max", "sym_min", "upper_bound"]
