"""The op registry: the one place an op is defined.

An OpDef says everything that is true of one primitive: how it infers its
result type from its operands (raising ShapeError/DTypeError on bad input), how
the numpy reference computes it, its gradient rule (or NOT_DIFFERENTIABLE), its
fusion mapping type (from DNNFusion) and cheapness, its loop-IR lowering when
it is elementwise, and the names users and importers reach it by. Every layer
of the compiler reads this table; adding an op is one `register(...)` call (an
elementwise op: one row in elementwise.py) plus its tests.
"""
from __future__ import annotations

import enum
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ...dtypes import DType
from ...errors import DTypeError, ShapeError, UnsupportedOpError, at_user_line


class MappingType(enum.Enum):
    """How output elements depend on input elements (DNNFusion's classification)."""

    ONE_TO_ONE = "one-to-one"      # elementwise: out[i] from in[i]
    ONE_TO_MANY = "one-to-many"    # expand, sliding windows: one input feeds several outputs
    MANY_TO_MANY = "many-to-many"  # reductions, matmul, conv: each output reads many inputs
    REORGANIZE = "reorganize"      # reshape, slice, pad, concat: same elements, new index space
    SHUFFLE = "shuffle"            # permute: same elements, permuted axes


class OpKind(enum.Enum):
    """Coarse role of an op, used by fusion and lowering."""

    SOURCE = "source"
    ELEMENTWISE = "elementwise"
    REDUCTION = "reduction"
    MOVEMENT = "movement"
    CONTRACTION = "contraction"
    CONTROL = "control"            # cond, while_loop, scan and their results (control.py): sub-graphs run in turn


@dataclass(frozen=True)
class TensorType:
    """Static type of a value: shape and dtype."""

    shape: tuple[int, ...]
    dtype: DType

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)  # a Python int: never wraps (check_size keeps it within int64)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __str__(self) -> str:
        return f"{self.dtype.short}[{','.join(map(str, self.shape))}]"


class ConstantValue:
    """An array held by a `constant` node; hashed and compared by content, never copied."""

    __slots__ = ("array", "_digest", "__weakref__")

    def __init__(self, array: np.ndarray, digest: str | None = None):
        """`digest`: a content identity already known (e.g. derived from the array's source), or None."""
        self.array = array
        self._digest: str | None = digest

    @property
    def digest(self) -> str:
        if self._digest is None:
            data = np.ascontiguousarray(self.array)
            h = hashlib.sha1(data.reshape(-1).view(np.uint8) if data.size else b"")  # no copy of the bytes
            h.update(str((data.dtype.str, data.shape)).encode())
            self._digest = h.hexdigest()
        return self._digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __eq__(self, other) -> bool:
        return isinstance(other, ConstantValue) and (self is other or self.digest == other.digest)

    def __repr__(self) -> str:
        a = self.array
        if a.size <= 4:
            return np.array2string(a.reshape(-1) if a.ndim > 1 else a, separator=",").replace("\n", "")
        return f"<{a.dtype}{list(a.shape)} #{self.digest[:8]}>"


class Attrs(Mapping):
    """Immutable, hashable mapping of op attributes."""

    __slots__ = ("_items", "_dict", "_hash")

    def __init__(self, values: Mapping[str, Any] | None = None, **kwargs):
        merged = dict(values or {}, **kwargs)
        self._items = tuple(sorted(merged.items()))
        self._dict = dict(self._items)
        self._hash = hash(self._items)

    def __getitem__(self, key: str) -> Any:
        return self._dict[key]

    def __iter__(self):
        return iter(self._dict)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, Attrs) and self._items == other._items

    def replace(self, **changes) -> "Attrs":
        return Attrs(self._dict, **changes)

    def __repr__(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self._items)


InferFn = Callable[[list[TensorType], Attrs], TensorType]
ReferenceFn = Callable[[list[np.ndarray], Attrs, TensorType], np.ndarray]


@dataclass(frozen=True)
class OpDef:
    """Everything the compiler knows about one primitive op."""

    name: str
    kind: OpKind
    mapping: MappingType
    infer: InferFn
    reference: ReferenceFn
    arity: int | None  # None: variadic
    doc: str = ""
    # Gradient rule (ir/ops/gradient.py): rule(grad, inputs, output, attrs, needs, build) -> one gradient
    # or None per input; NOT_DIFFERENTIABLE for an op whose result carries none; None: not given (a gap).
    gradient: Any = None
    # Element expression in loop IR of an elementwise op: lower(args, node) -> Expr, from the operands'
    # expressions at the same index (kernels/inline.py); an op without operands (iota) receives the output
    # index instead; movement and other ops are lowered by kernels/.
    lower: Callable | None = None
    # The lowering receives the output index after the operands' expressions: an element that depends on
    # where it is as well as on its operands (a random number: philox)
    indexed: bool = False
    cheap: bool = False  # one or two instructions per element: a reader recomputes it rather than load it
    # Where users and importers meet the op (elementwise rows): the Tensor method and tk.<name> that
    # apply exactly this op, the ONNX operator and the ATen operator that are exactly this op.
    method: str | None = None
    onnx: str | None = None
    aten: str | None = None
    # Open interval (low, high) of real inputs the op is defined on, as PyTorch's OpInfo says it (None:
    # unbounded); tests sample inside it.
    domain: tuple[float | None, float | None] = (None, None)
    float_only: bool = False  # takes floating operands only: its method makes integer tensors float32 first
    identity_on_integers: bool = False  # ... or returns them unchanged (floor, ceil, round)
    custom_method: bool = False  # the front-end writes `method` itself (it does more than apply the op)
    backend_only: bool = False  # made by graph passes for the C backend; users and importers never see it
    stored_operands: bool = False  # its kernel reads every operand in place from a buffer (a native direct conv)
    # Computed by a call into the runtime, not a loop nest (collectives): runtime_call(attrs, input type,
    # output type) -> the description the runtime hook receives (runtime/hooks.py). Its operand is stored.
    runtime_call: Callable | None = None


REGISTRY: dict[str, OpDef] = {}


def register(name: str, kind: OpKind, mapping: MappingType, infer: InferFn,
             reference: ReferenceFn, arity: int | None, doc: str = "", **facts) -> OpDef:
    """Add a primitive op to the registry; `facts` are OpDef's optional fields (lower, cheap, method ...)."""
    if name in REGISTRY:
        raise ValueError(f"op {name!r} registered twice")
    op = OpDef(name, kind, mapping, infer, reference, arity, doc, **facts)
    REGISTRY[name] = op
    return op


def get_op(name: str) -> OpDef:
    """Look up an op by name."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnsupportedOpError(f"unknown op {name!r}") from None


# Kernels index elements and bytes with int64 (loops/types.py's INDEX_DTYPE): larger tensors cannot be addressed.
MAX_BYTES = 2 ** 63 - 1


def check_size(t: TensorType) -> None:
    """Raise ShapeError when a tensor's element count or byte size does not fit the int64 index type."""
    count = t.size
    if count * max(t.dtype.itemsize, 1) > MAX_BYTES:
        raise ShapeError(f"a result of shape {list(t.shape)} ({count} elements, {count * t.dtype.itemsize} "
                         f"bytes) does not fit a 64-bit index")


def infer_type(name: str, types: list[TensorType], attrs: Attrs,
               location: str | None = None) -> TensorType:
    """Infer an op's result type; bad input raises an error naming op, operands and user line."""
    op = get_op(name)
    if op.arity is not None and len(types) != op.arity:
        raise TypeError(f"{name} takes {op.arity} operands, got {len(types)}")
    try:
        result = op.infer(types, attrs)
        check_size(result)
        return result
    except (ShapeError, DTypeError) as err:
        operands = ", ".join(str(t) for t in types)
        message = f"{name}: {err.args[0]} (operands: {operands})"
        raise type(err)(at_user_line(message, location)) from None
