"""C expressions of the loop IR: literals that read back exactly, operators with C's precedence,
loads, and the interval proofs that let an expression go without a branch or a bounds check.

`ExprWriter` is the expression half of a kernel's writer (c_kernel.py adds the
statements); on its own it spells sizes outside any kernel (the entry's arena
offsets, c_entry.py).
"""
from __future__ import annotations

import numpy as np

from tensorkiln.codegen.c_names import c_name
from tensorkiln.codegen.c_prelude import C_TYPES, IN_RANGE_CAST_TYPES, PROMOTED_INTS
from tensorkiln.loops.bounds import Bounds
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import BinOp, Bitcast, Call, Cast, Const, Expr, Load, Select, Unary, Var, lift, walk
from tensorkiln.loops.math import MATH_FUNCTIONS
from tensorkiln.loops.types import int_range, is_bool, is_float, itemsize

# Binary operators written infix in C: symbol and C precedence (higher binds tighter).
INFIX = {
    "add": ("+", 12), "sub": ("-", 12), "mul": ("*", 13), "div": ("/", 13),
    "lt": ("<", 10), "le": ("<=", 10), "eq": ("==", 9), "ne": ("!=", 9),
    "and": ("&&", 5), "or": ("||", 4),
    "bitand": ("&", 8), "bitxor": ("^", 7), "bitor": ("|", 6), "shl": ("<<", 11), "shr": (">>", 11),
}
_ATOM, _UNARY, _TERNARY = 16, 15, 3
_SELECT_TYPES = ("float32", "float64")  # the prelude's tk_select_<type>


def format_c_const(value: object, dtype: str) -> str:
    """A C literal for `value` of `dtype` that reads back exactly."""
    if is_bool(dtype):
        return "true" if value else "false"
    if is_float(dtype):
        x = float(value)  # type: ignore[arg-type]
        if x != x:
            return "NAN"
        if x in (float("inf"), float("-inf")):
            return "INFINITY" if x > 0 else "-INFINITY"
        if dtype == "float32":
            text = str(np.float32(x))  # numpy's shortest repr that round-trips through float32
            if not any(ch in text for ch in ".e"):
                text += ".0"
            return text + "f"
        text = repr(x)
        return text if any(ch in text for ch in ".e") else text + ".0"
    v = int(value)  # type: ignore[arg-type]
    if dtype == "int64" and v == int_range("int64")[0]:
        return "INT64_MIN"
    if dtype == "int32" and v == int_range("int32")[0]:
        return "INT32_MIN"  # -2147483648 would be a long in C
    if dtype == "int64" and not -(2**31) < v < 2**31:
        return f"INT64_C({v})"
    if dtype == "uint64" and v >= 2**31:
        return f"UINT64_C({v})"  # above INT64_MAX a plain literal would not fit any signed type
    return str(v)


def _smallest_size(buffer: Buffer) -> int:
    """The fewest elements `buffer` can have: its size, or for a symbolic size its value with every
    size symbol at its lower bound (what proofs of in-range indices may rely on)."""
    size = buffer.size
    if isinstance(size, int):
        return size
    return max(int(Bounds()(lift(size, Const(0)))[0]), 0)


def _float_bound(e: Expr) -> "Const | None":
    """`e` when it is a float constant other than NaN (min/max against it need no NaN test)."""
    if isinstance(e, Const) and is_float(e.dtype) and e.value == e.value:
        return e
    return None


def _clamp(e: Expr) -> "tuple[Expr, Const, Const] | None":
    """(x, low, high) when `e` is min(max(x, low), high) or max(min(x, high), low) with constant bounds,
    low <= high (either operand order), else None."""
    if not (isinstance(e, BinOp) and e.operator in ("min", "max") and is_float(e.dtype)):
        return None
    bound, value = _float_bound(e.b), e.a
    if bound is None:
        bound, value = _float_bound(e.a), e.b
    other = "max" if e.operator == "min" else "min"
    if bound is None or not (isinstance(value, BinOp) and value.operator == other):
        return None
    inner_bound, inner = _float_bound(value.b), value.a
    if inner_bound is None:
        inner_bound, inner = _float_bound(value.a), value.b
    if inner_bound is None:
        return None
    low, high = (inner_bound, bound) if e.operator == "min" else (bound, inner_bound)
    return (inner, low, high) if low.value <= high.value else None


def _clamped_within(e: Expr, dtype: str) -> bool:
    """`e` is a clamp whose bounds lie within integer `dtype`'s range (so its value is, or is NaN), and
    the in-range cast exists for that type."""
    clamp = _clamp(e)
    if clamp is None or dtype not in IN_RANGE_CAST_TYPES:
        return False
    lo, hi = int_range(dtype)
    return lo <= clamp[1].value and clamp[2].value <= hi


def _int_literal(e: Expr) -> bool:
    """True when `e` would be typed `int` in C though the IR says int64 (a literal, or made of them)."""
    if isinstance(e, Const):
        return True
    if isinstance(e, Select):
        return _int_literal(e.a) and _int_literal(e.b)
    if isinstance(e, Unary):
        return _int_literal(e.x)
    return False  # variables, loads and casts are int64_t; operators get an int64 operand


def _paren(code: str, prec: int, need: int) -> str:
    return f"({code})" if prec < need else code


def _constant_divisor(e: BinOp) -> bool:
    """An integer division or modulo by a constant that cannot trap (not 0, not -1)."""
    return isinstance(e.b, Const) and e.b.value not in (0, -1)


class ExprWriter:
    """C code for loop-IR expressions inside one kernel; knows the ranges of the enclosing loops
    (`ranges`, which the statement writer keeps) to prove indices in range and divisions safe."""

    def __init__(self, kernel_name: str, debug: bool):
        self.kernel_name = kernel_name  # named by a debug build's failed checks
        self.debug = debug
        self.ranges: dict[str, tuple[int, int]] = {}
        self.native_sources: dict[str, str] = {}  # function -> C definition, of the calls written

    def bounds(self) -> Bounds:
        return Bounds(self.ranges)

    def expr(self, e: Expr) -> tuple[str, int]:
        """C code for `e` and its precedence.

        Recursive: expression depth is bounded by fusion (kernels/grouping.py, MAX_INLINE_DEPTH)."""
        if isinstance(e, Var):
            return c_name(e.name), _ATOM
        if isinstance(e, Const):
            text = format_c_const(e.value, e.dtype)
            return text, (_UNARY if text.startswith("-") else _ATOM)
        if isinstance(e, BinOp):
            return self.binop(e)
        if isinstance(e, Unary):
            inner, prec = self.expr(e.x)
            symbol = "!" if e.operator == "not" else "-"
            inner = f"({inner})" if prec < _UNARY or inner.startswith("-") else inner
            code = f"{symbol}{inner}"
            if e.dtype in PROMOTED_INTS:  # C computes in int; wrap like numpy (-uint8(1) is 255)
                return f"({C_TYPES[e.dtype]}){_paren(code, _UNARY, _ATOM)}", _UNARY
            return code, _UNARY
        if isinstance(e, Call):
            args = ", ".join(self.expr(a)[0] for a in e.args)
            function = MATH_FUNCTIONS[e.fn]
            for piece in function.source:  # a function libm lacks: its definitions go once into the file
                self.native_sources.setdefault(piece, piece)
            return function.c[e.dtype].format(args=args), _ATOM
        if isinstance(e, Select):
            cond, cp = self.expr(e.cond)
            a, ap = self.expr(e.a)
            b, bp = self.expr(e.b)
            if e.dtype in _SELECT_TYPES and not self.debug and self._always_safe(e.a) and self._always_safe(e.b):
                return f"tk_select_{e.dtype}({cond}, {a}, {b})", _ATOM
            code = f"{_paren(cond, cp, _TERNARY + 1)} ? {_paren(a, ap, _TERNARY + 1)} : {_paren(b, bp, _TERNARY)}"
            return code, _TERNARY
        if isinstance(e, Cast):
            inner, prec = self.expr(e.x)
            if is_bool(e.dtype):
                return f"{_paren(inner, prec, 10)} != 0", 9
            if not is_float(e.dtype) and e.x.dtype in ("float32", "float64"):
                # truncate, saturate, NaN to 0: one inline helper, its operand evaluated once; a clamp's
                # result within the type's range needs only the NaN test
                in_range = "_in_range" if _clamped_within(e.x, e.dtype) else ""
                return f"tk_to_{e.dtype}_{e.x.dtype}{in_range}({inner})", _ATOM
            return f"({C_TYPES[e.dtype]}){_paren(inner, prec, _UNARY)}", _UNARY
        if isinstance(e, Bitcast):
            return f"tk_bitcast_{e.dtype}_{e.x.dtype}({self.expr(e.x)[0]})", _ATOM
        if isinstance(e, Load):
            return self.load(e), _ATOM
        raise TypeError(f"cannot generate C for {e!r}")

    def binop(self, e: BinOp) -> tuple[str, int]:
        op, dtype = e.operator, e.a.dtype
        if op in ("min", "max") and dtype in ("float32", "float64"):
            return self._float_min_max(e)  # before the operands' C: it may skip one level of them
        a, ap = self.expr(e.a)
        b, bp = self.expr(e.b)
        if op in ("min", "max"):
            return f"tk_{op}_{dtype}({a}, {b})", _ATOM
        if op in ("floordiv", "mod"):
            if not is_float(dtype) and self._nonnegative_division(e):
                symbol = "/" if op == "floordiv" else "%"  # truncation equals floor here
                left = _paren(a, ap, 13)
                if dtype == "int64" and _int_literal(e.a) and _int_literal(e.b):
                    left = f"(int64_t){_paren(a, ap, _UNARY)}"
                return f"{left} {symbol} {_paren(b, bp, 14)}", 13
            return f"tk_{op}_{dtype}({a}, {b})", _ATOM
        symbol, prec = INFIX[op]
        left = _paren(a, ap, prec)
        right = _paren(b, bp, prec + 1)
        if op == "or" and isinstance(e.a, BinOp) and e.a.operator == "and":
            left = f"({a})"  # spell out && inside || for the reader (and -Wparentheses)
        if op == "or" and isinstance(e.b, BinOp) and e.b.operator == "and":
            right = f"({b})"
        if dtype == "int64" and op in ("add", "sub", "mul", "floordiv", "mod") and _int_literal(e.a) \
                and _int_literal(e.b):
            left = f"(int64_t){_paren(a, ap, _UNARY)}"  # else C would compute in (32-bit) int
        if op == "shl":
            # shifted as unsigned (a negative or overflowing signed left shift is undefined in C) and
            # wrapped back to the type, as numpy's left_shift wraps
            wide = "uint64_t" if itemsize(dtype) == 8 else "uint32_t"
            return f"({C_TYPES[dtype]})(({wide}){_paren(a, ap, _UNARY)} << {right})", _UNARY
        code = f"{left} {symbol} {right}"
        if dtype in PROMOTED_INTS and op in ("add", "sub", "mul"):
            return f"({C_TYPES[dtype]})({code})", _UNARY  # C computes in int; wrap to the storage type
        return code, prec

    def _float_min_max(self, e: BinOp) -> tuple[str, int]:
        """NaN-propagating float min/max; against a constant bound (and as a clamp between two) a cheaper form."""
        op, dtype = e.operator, e.a.dtype
        bound, value = _float_bound(e.b), e.a
        if bound is None:
            bound, value = _float_bound(e.a), e.b
        if bound is None:
            return f"tk_{op}_{dtype}({self.expr(e.a)[0]}, {self.expr(e.b)[0]})", _ATOM
        clamp = _clamp(e)
        if clamp is not None:  # min(max(x, low), high) = max(min(x, high), low) = clamp(x, low, high)
            inner, low, high = clamp
            return f"tk_clamp_{dtype}({self.expr(inner)[0]}, {self.expr(low)[0]}, {self.expr(high)[0]})", _ATOM
        return f"tk_{op}_bound_{dtype}({self.expr(value)[0]}, {self.expr(bound)[0]})", _ATOM

    def _always_safe(self, e: Expr) -> bool:
        """Evaluating `e` even where a select does not pick it can neither trap nor read out
        of bounds: every load's index provably in range, no integer division, no float-to-int cast.

        Division by a constant other than 0 and -1 cannot trap, so it is allowed in the index of
        a load that is not clamped: a max-pool gradient reads `t[... + c/2]`, and evaluated
        branch-free its select vectorizes instead of mispredicting on every element. A clamped
        index (min/max: a padded read) keeps the conditional, which GCC turns into a masked load.
        """
        bounds = self.bounds()
        for x in walk(e):
            if isinstance(x, Load) and not bounds.within(x.index, 0, _smallest_size(x.buffer) - 1):
                return False
            if isinstance(x, BinOp) and x.operator in ("div", "floordiv", "mod") and not is_float(x.dtype) \
                    and not (_constant_divisor(x) and not self._clamped_load(e)):
                return False
            if isinstance(x, Cast) and not is_float(x.dtype):
                return False
        return True

    @staticmethod
    def _clamped_load(e: Expr) -> bool:
        """True when a load in `e` has a min/max in its index."""
        return any(isinstance(x, Load) and any(isinstance(y, BinOp) and y.operator in ("min", "max")
                                               for y in walk(x.index)) for x in walk(e))

    def _nonnegative_division(self, e: BinOp) -> bool:
        bounds = self.bounds()
        return bounds(e.a)[0] >= 0 and bounds(e.b)[0] > 0

    def size_c(self, buffer: Buffer) -> str:
        """C code for the element count of `buffer` (an expression over size symbols when symbolic)."""
        size = buffer.size
        return str(size) if isinstance(size, int) else self.expr(lift(size, Const(0)))[0]

    def index(self, buffer: Buffer, index: Expr) -> tuple[str, bool]:
        """C code for an index and whether it needs a runtime check (debug mode only)."""
        code = self.expr(index)[0]
        if not self.debug:
            return code, False
        lo, hi = self.bounds()(index)
        return code, not (lo >= 0 and hi < _smallest_size(buffer))

    def load(self, e: Load) -> str:
        buffer = e.buffer
        code, checked = self.index(buffer, e.index)
        if checked:
            code = f'tk_checked_index({code}, {self.size_c(buffer)}, "{self.kernel_name}", "{buffer.name}")'
        access = f"{c_name(buffer.name)}[{code}]"
        if checked and buffer.size == 0:  # nothing can be read: report, and yield 0
            access = f"({code}, ({C_TYPES[buffer.dtype]})0)"
        if buffer.dtype == "float16":
            return f"tk_f16_to_f32({access})"
        if buffer.dtype == "bfloat16":
            return f"tk_bf16_to_f32({access})"
        if buffer.dtype == "bool" and not (checked and buffer.size == 0):
            # read as its byte (0 or 1): GCC 12 finds no vector type for a _Bool load, which
            # left loops that select on a stored mask (dropout) scalar and branchy
            return f"((const uint8_t *){c_name(buffer.name)})[{code}]"
        return access
