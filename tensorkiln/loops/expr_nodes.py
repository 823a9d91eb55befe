"""Expression nodes of the loop IR: the classes of an expression tree, and the operator names they accept.

An expression is an immutable tree of small nodes: `Var`, `Const`, `BinOp`,
`Unary`, `Call` (a math function), `Select`, `Cast`, `Bitcast` and `Load`. Every node
has a `dtype` (a compute dtype: never float16/bfloat16, see types.py), an
`op` name, its `children`, and `with_children` to rebuild it; the pattern
matcher and the simplifier only use that uniform interface. Each node checks
its operands' dtypes when it is made (no implicit promotion).

Python operators build trees (`i * 64 + j`, `x // 4`, `-x`); `==` stays
structural equality, so comparisons are spelled `lt(a, b)`, `eq(a, b)`, ...
(expr_build.py). expr.py describes the semantics and gathers the public names.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

from tensorkiln.errors import DTypeError
from tensorkiln.loops.buffer import Buffer, check_identifier
from tensorkiln.loops.expr_format import format_expr
from tensorkiln.loops.math import MATH_FUNCTIONS
from tensorkiln.loops.types import INDEX_DTYPE, STORAGE_ONLY, check_dtype, int_range, is_bool, is_float, is_int

ARITHMETIC_OPS = frozenset({"add", "sub", "mul", "div", "floordiv", "mod", "min", "max"})
COMPARISON_OPS = frozenset({"lt", "le", "eq", "ne"})
LOGICAL_OPS = frozenset({"and", "or"})
# on integers; a shift's count (b) must lie in [0, bits of the dtype): C leaves other counts undefined,
# so the graph's shift ops clamp it and choose the out-of-range result themselves (ir/ops/bitwise.py)
BITWISE_OPS = frozenset({"bitand", "bitor", "bitxor", "shl", "shr"})
BINARY_OPS = ARITHMETIC_OPS | COMPARISON_OPS | LOGICAL_OPS | BITWISE_OPS
COMMUTATIVE_OPS = frozenset({"add", "mul", "min", "max", "eq", "ne", "and", "or", "bitand", "bitor", "bitxor"})
UNARY_OPS = frozenset({"neg", "not"})

Number = Union[int, float, bool]

# Size symbols (tensorkiln/shapes): int64 variables named `s_<name>` that no loop or let binds;
# the generated code reads their values per call (codegen/c_entry.py). Sizes are >= 2.
SIZE_VAR_PREFIX = "s_"
SIZE_VAR_RANGE = (2, 2 ** 31 - 1)


def is_size_var(name: str) -> bool:
    """True for the name of a size symbol's variable (`s_batch`)."""
    return name.startswith(SIZE_VAR_PREFIX)


def symbolic_expr(value) -> "Expr | None":
    """The int64 expression of a symbolic size (a tensorkiln.shapes SymInt), else None."""
    return getattr(value, "symbolic_expr", None) if not isinstance(value, (int, Expr)) else None


class Expr:
    """Base class of expression nodes; Python's arithmetic operators build trees."""

    __slots__ = ()

    dtype: str  # provided by every subclass (a field or a property)

    @property
    def op(self) -> str:
        """Name of the node kind or operator ("add", "load", "var", ...)."""
        raise NotImplementedError

    @property
    def children(self) -> tuple["Expr", ...]:
        """Sub-expressions, in order."""
        return ()

    def with_children(self, children: tuple["Expr", ...]) -> "Expr":
        """A copy of this node with new sub-expressions (same arity)."""
        return self

    def __add__(self, other: "Expr | Number") -> "Expr":
        return BinOp("add", self, lift(other, self))

    def __radd__(self, other: Number) -> "Expr":
        return BinOp("add", lift(other, self), self)

    def __sub__(self, other: "Expr | Number") -> "Expr":
        return BinOp("sub", self, lift(other, self))

    def __rsub__(self, other: Number) -> "Expr":
        return BinOp("sub", lift(other, self), self)

    def __mul__(self, other: "Expr | Number") -> "Expr":
        return BinOp("mul", self, lift(other, self))

    def __rmul__(self, other: Number) -> "Expr":
        return BinOp("mul", lift(other, self), self)

    def __truediv__(self, other: "Expr | Number") -> "Expr":
        return BinOp("div", self, lift(other, self))

    def __rtruediv__(self, other: Number) -> "Expr":
        return BinOp("div", lift(other, self), self)

    def __floordiv__(self, other: "Expr | Number") -> "Expr":
        return BinOp("floordiv", self, lift(other, self))

    def __rfloordiv__(self, other: Number) -> "Expr":
        return BinOp("floordiv", lift(other, self), self)

    def __mod__(self, other: "Expr | Number") -> "Expr":
        return BinOp("mod", self, lift(other, self))

    def __rmod__(self, other: Number) -> "Expr":
        return BinOp("mod", lift(other, self), self)

    def __neg__(self) -> "Expr":
        return Unary("neg", self)

    def __str__(self) -> str:
        return format_expr(self)

    def __getstate__(self) -> dict:
        # a hash cached by `_cache_hash` holds for this process only (str hashes are salted per process):
        # a pickled node (a kernel sent to a tuning worker) computes its own again
        state = dict(self.__dict__)
        state.pop(_HASH, None)
        return state


_HASH = "_hash"  # the attribute of a node that holds its cached hash


def _cache_hash(cls: type) -> type:
    """Give an expression class a hash computed once per node: the dataclass's hash walks the whole
    tree, and the simplifier and codegen hash the same subtrees millions of times (dict and set keys)."""
    computed = cls.__hash__

    def __hash__(self) -> int:
        cached = self.__dict__.get(_HASH)
        if cached is None:
            cached = computed(self)
            object.__setattr__(self, _HASH, cached)  # a frozen dataclass: the field values stay as they are
        return cached

    cls.__hash__ = __hash__
    return cls


def lift(value: "Expr | Number", like: Expr) -> Expr:
    """Turn a Python number into a Const of `like`'s dtype; pass expressions through."""
    if isinstance(value, Expr):
        return value
    sized = symbolic_expr(value)
    if sized is not None:
        return sized if like.dtype == INDEX_DTYPE else Cast(sized, like.dtype)
    if isinstance(value, (bool, np.bool_)):
        return Const(bool(value), "bool")
    if isinstance(value, (int, np.integer)):
        if is_bool(like.dtype):
            raise DTypeError(f"cannot combine integer {value} with bool expression {like}")
        return Const(value, like.dtype)
    if isinstance(value, (float, np.floating)):
        if not is_float(like.dtype):
            raise DTypeError(f"cannot combine float {value} with {like.dtype} expression {like}")
        return Const(value, like.dtype)
    raise TypeError(f"cannot use {type(value).__name__} {value!r} in an expression")


def _check_compute_dtype(dtype: str, where: str) -> str:
    check_dtype(dtype)
    if dtype in STORAGE_ONLY:
        raise DTypeError(
            f"{where}: {dtype} is a storage type; compute in float32 and store into a {dtype} buffer"
        )
    return dtype


@dataclass(frozen=True, eq=True)
class Var(Expr):
    """A named scalar: a loop variable or a local declared by `Let`."""

    name: str
    dtype: str = INDEX_DTYPE

    def __post_init__(self) -> None:
        check_identifier(self.name, "variable")
        _check_compute_dtype(self.dtype, f"variable {self.name}")

    @property
    def op(self) -> str:
        return "var"


@dataclass(frozen=True, eq=False)
class Const(Expr):
    """A literal of a given dtype; float32 values are rounded to float32 on creation."""

    value: Number
    dtype: str = INDEX_DTYPE

    def __post_init__(self) -> None:
        _check_compute_dtype(self.dtype, f"constant {self.value!r}")
        object.__setattr__(self, "value", normalize_value(self.value, self.dtype))

    def _key(self) -> tuple:
        # float.hex keeps -0.0 apart from 0.0 and makes NaN equal to itself:
        # structural equality must not merge constants that compute differently.
        value = self.value.hex() if isinstance(self.value, float) else self.value
        return (self.dtype, value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Const) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    @property
    def op(self) -> str:
        return "const"


def normalize_value(value: Number, dtype: str) -> Number:
    """Coerce a Python/numpy number to the exact value `dtype` holds."""
    if is_bool(dtype):
        return bool(value)
    if is_int(dtype):
        if isinstance(value, (float, np.floating)) and not float(value).is_integer():
            raise DTypeError(f"constant {value!r} is not an integer but dtype is {dtype}")
        value = int(value)
        lo, hi = int_range(dtype)
        if not lo <= value <= hi:
            raise DTypeError(f"constant {value} does not fit in {dtype}")
        return value
    if dtype == "float32":
        with np.errstate(over="ignore"):
            return float(np.float32(value))
    return float(value)


@dataclass(frozen=True, eq=True)
class BinOp(Expr):
    """A binary operator; both operands have the same dtype (no implicit promotion)."""

    operator: str
    a: Expr
    b: Expr

    def __post_init__(self) -> None:
        if self.operator not in BINARY_OPS:
            raise ValueError(f"unknown binary operator {self.operator!r}")
        if self.a.dtype != self.b.dtype:
            raise DTypeError(
                f"operands of {self.operator} have different dtypes: {self.a} is {self.a.dtype}, "
                f"{self.b} is {self.b.dtype}; insert a Cast"
            )
        dtype = self.a.dtype
        if self.operator in LOGICAL_OPS and not is_bool(dtype):
            raise DTypeError(f"{self.operator} needs bool operands, got {dtype}")
        if self.operator in BITWISE_OPS and not is_int(dtype):
            raise DTypeError(f"{self.operator} needs integer operands, got {dtype}")
        if self.operator in ARITHMETIC_OPS and is_bool(dtype):
            raise DTypeError(f"{self.operator} needs numeric operands, got bool")
        if self.operator == "div" and not is_float(dtype):
            raise DTypeError(f"div (true division) needs float operands, got {dtype}; use floordiv")

    @property
    def op(self) -> str:
        return self.operator

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return "bool" if self.operator in COMPARISON_OPS else self.a.dtype

    @property
    def children(self) -> tuple[Expr, ...]:
        return (self.a, self.b)

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        a, b = children
        return self if (a is self.a and b is self.b) else BinOp(self.operator, a, b)


@dataclass(frozen=True, eq=True)
class Unary(Expr):
    """Negation ("neg", numeric) or logical not ("not", bool)."""

    operator: str
    x: Expr

    def __post_init__(self) -> None:
        if self.operator not in UNARY_OPS:
            raise ValueError(f"unknown unary operator {self.operator!r}")
        if self.operator == "not" and not is_bool(self.x.dtype):
            raise DTypeError(f"not needs a bool operand, got {self.x.dtype}")
        if self.operator == "neg" and is_bool(self.x.dtype):
            raise DTypeError("neg needs a numeric operand, got bool")

    @property
    def op(self) -> str:
        return self.operator

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.x.dtype

    @property
    def children(self) -> tuple[Expr, ...]:
        return (self.x,)

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        (x,) = children
        return self if x is self.x else Unary(self.operator, x)


@dataclass(frozen=True, eq=True)
class Call(Expr):
    """A math function of float arguments (see loops/math.py)."""

    fn: str
    args: tuple[Expr, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        if self.fn not in MATH_FUNCTIONS:
            raise ValueError(f"unknown math function {self.fn!r}; known: {', '.join(sorted(MATH_FUNCTIONS))}")
        if len(self.args) != MATH_FUNCTIONS[self.fn].arity:
            raise ValueError(f"{self.fn} takes {MATH_FUNCTIONS[self.fn].arity} argument(s), got {len(self.args)}")
        signature = MATH_FUNCTIONS[self.fn].signature
        if signature is not None:
            if tuple(a.dtype for a in self.args) != signature[0]:
                raise DTypeError(f"{self.fn} needs arguments of dtypes {signature[0]}, "
                                 f"got {tuple(a.dtype for a in self.args)}")
            return
        dtypes = {a.dtype for a in self.args}
        if len(dtypes) != 1 or not is_float(next(iter(dtypes))):
            raise DTypeError(f"{self.fn} needs float arguments of one dtype, got {sorted(dtypes)}")

    @property
    def op(self) -> str:
        return self.fn

    @property
    def dtype(self) -> str:  # type: ignore[override]
        signature = MATH_FUNCTIONS[self.fn].signature
        return signature[1] if signature is not None else self.args[0].dtype

    @property
    def children(self) -> tuple[Expr, ...]:
        return self.args

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        return self if children == self.args else Call(self.fn, tuple(children))


@dataclass(frozen=True, eq=True)
class Select(Expr):
    """`where(cond, a, b)`: a if cond else b (both branches are side-effect free)."""

    cond: Expr
    a: Expr
    b: Expr

    def __post_init__(self) -> None:
        if not is_bool(self.cond.dtype):
            raise DTypeError(f"where needs a bool condition, got {self.cond.dtype}")
        if self.a.dtype != self.b.dtype:
            raise DTypeError(f"where branches differ in dtype: {self.a.dtype} vs {self.b.dtype}")

    @property
    def op(self) -> str:
        return "where"

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.a.dtype

    @property
    def children(self) -> tuple[Expr, ...]:
        return (self.cond, self.a, self.b)

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        c, a, b = children
        return self if (c is self.cond and a is self.a and b is self.b) else Select(c, a, b)


@dataclass(frozen=True, eq=True)
class Cast(Expr):
    """Convert a value to another compute dtype. Float -> int truncates toward zero and saturates at
    the integer type's range, NaN giving 0 (numpy and C leave those conversions undefined)."""

    x: Expr
    dtype: str

    def __post_init__(self) -> None:
        _check_compute_dtype(self.dtype, "cast")

    @property
    def op(self) -> str:
        return "cast"

    @property
    def children(self) -> tuple[Expr, ...]:
        return (self.x,)

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        (x,) = children
        return self if x is self.x else Cast(x, self.dtype)


@dataclass(frozen=True, eq=True)
class Bitcast(Expr):
    """The bits of a float value read as an integer of the same width, or the reverse (float32 with
    int32/uint32, float64 with int64/uint64): no value is converted."""

    x: Expr
    dtype: str

    def __post_init__(self) -> None:
        pair = tuple(sorted((self.x.dtype, self.dtype)))
        if pair not in BITCAST_PAIRS:
            raise DTypeError(f"bitcast from {self.x.dtype} to {self.dtype}: only float32 with int32/uint32 and "
                             "float64 with int64/uint64 are reinterpreted (integers of one width convert by cast)")

    @property
    def op(self) -> str:
        return "bitcast"

    @property
    def children(self) -> tuple[Expr, ...]:
        return (self.x,)

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        (x,) = children
        return self if x is self.x else Bitcast(x, self.dtype)


# the dtype pairs Bitcast reinterprets (each sorted by name)
BITCAST_PAIRS = frozenset({("float32", "int32"), ("float32", "uint32"), ("float64", "int64"), ("float64", "uint64")})


@dataclass(frozen=True, eq=True)
class Load(Expr):
    """Element `index` (flat, row-major) of `buffer`; float16/bfloat16 load as float32."""

    buffer: Buffer
    index: Expr

    def __post_init__(self) -> None:
        if not is_int(self.index.dtype):
            raise DTypeError(f"index into {self.buffer.name} must be an integer, got {self.index.dtype}")

    @property
    def op(self) -> str:
        return "load"

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.buffer.value_dtype

    @property
    def children(self) -> tuple[Expr, ...]:
        return (self.index,)

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        (index,) = children
        return self if index is self.index else Load(self.buffer, index)


for _node_class in (Var, Const, BinOp, Unary, Call, Select, Cast, Bitcast, Load):
    _cache_hash(_node_class)
