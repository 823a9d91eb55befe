"""Tensor's elementwise arithmetic: Python's operators, their named aliases, comparisons and clamp.

Each operator promotes its operands to their common dtype (Python scalars are
weak) and applies one primitive; true division and the float-valued binary
functions make integer operands float32 first.
"""
from __future__ import annotations

from .. import dtypes as dt
from ..errors import DTypeError, at_user_line
from .tensor import apply, as_tensor, promote, tensor_methods


@tensor_methods
class TensorArithmetic:
    """Tensor's elementwise operators (added to Tensor: tensor.py is below this module)."""

    __slots__ = ()

    # Tensors hash by identity: a class body that defines __eq__ gets __hash__ = None otherwise.
    __hash__ = object.__hash__

    def _binary(self, op: str, other, reverse: bool = False, float_result: bool = False) -> "Tensor":
        a, b = (other, self) if reverse else (self, other)
        (a, b), dtype = promote(a, b)
        if float_result and not dtype.is_floating:
            a, b = a.to(dt.DEFAULT_FLOAT), b.to(dt.DEFAULT_FLOAT)
        return apply(op, [a, b])

    def __add__(self, o): return self._binary("add", o)
    def __radd__(self, o): return self._binary("add", o, True)
    def __sub__(self, o): return self._binary("sub", o)
    def __rsub__(self, o): return self._binary("sub", o, True)
    def __mul__(self, o): return self._binary("mul", o)
    def __rmul__(self, o): return self._binary("mul", o, True)
    def __truediv__(self, o): return self._binary("div", o, float_result=True)
    def __rtruediv__(self, o): return self._binary("div", o, True, float_result=True)
    def __floordiv__(self, o): return self._binary("floor_div", o)
    def __rfloordiv__(self, o): return self._binary("floor_div", o, True)
    def __mod__(self, o): return self._binary("mod", o)
    def __rmod__(self, o): return self._binary("mod", o, True)
    def __pow__(self, o): return self._binary("pow", o)
    def __rpow__(self, o): return self._binary("pow", o, True)
    def __and__(self, o): return self._binary("and", o)
    def __rand__(self, o): return self._binary("and", o, True)
    def __or__(self, o): return self._binary("or", o)
    def __ror__(self, o): return self._binary("or", o, True)
    def __xor__(self, o): return self._binary("xor", o)
    def __rxor__(self, o): return self._binary("xor", o, True)
    def __eq__(self, o): return self._binary("eq", o)  # type: ignore[override]
    def __ne__(self, o): return self._binary("ne", o)  # type: ignore[override]
    def __lt__(self, o): return self._binary("lt", o)
    def __le__(self, o): return self._binary("le", o)
    def __gt__(self, o): return self._binary("gt", o)
    def __ge__(self, o): return self._binary("ge", o)
    def __neg__(self): return apply("neg", [self])
    def __pos__(self): return self
    def __abs__(self): return self.abs()

    def __invert__(self):
        if not self._dtype.is_bool:
            raise DTypeError(at_user_line(f"~: expects a bool tensor, got {self._dtype.name}"))
        return apply("not", [self])

    add = __add__
    sub = __sub__
    mul = __mul__
    div = __truediv__
    pow = __pow__
    eq = __eq__
    ne = __ne__
    lt = __lt__
    le = __le__
    gt = __gt__
    ge = __ge__
    remainder = __mod__
    floor_divide = __floordiv__

    # PyTorch's logical ops treat any nonzero value as true and return bool (&, |, ^ are bitwise on ints).
    def logical_and(self, other): return self.to(dt.bool_)._binary("and", as_tensor(other).to(dt.bool_))
    def logical_or(self, other): return self.to(dt.bool_)._binary("or", as_tensor(other).to(dt.bool_))
    def logical_xor(self, other): return self.to(dt.bool_)._binary("xor", as_tensor(other).to(dt.bool_))

    def logical_not(self):
        return apply("not", [self.to(dt.bool_)])

    def maximum(self, other): return self._binary("maximum", other)
    def minimum(self, other): return self._binary("minimum", other)

    def isnan(self): return apply("isnan", [self]) if self._dtype.is_floating else self != self
    def isinf(self): return apply("isinf", [self]) if self._dtype.is_floating else self != self
    def atan2(self, other): return self._binary("atan2", other, float_result=True)
    def fmod(self, other): return self._binary("fmod", other)
    def hypot(self, other): return self._binary("hypot", other, float_result=True)
    def nextafter(self, other): return self._binary("nextafter", other)

    def square(self): return self * self

    def clamp(self, min=None, max=None) -> "Tensor":  # noqa: A002 (PyTorch's names)
        """Limit values to [min, max]; either bound may be None."""
        out = self
        if min is not None:
            out = out.maximum(min)
        if max is not None:
            out = out.minimum(max)
        return out

    clip = clamp
