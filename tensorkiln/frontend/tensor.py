"""Tensor: eager values and traced (symbolic) values behind one class.

An eager tensor holds a numpy array (in its dtype's storage type) and every
operation computes at once with the op's reference implementation. Inside a
`tk.jit` trace, operations on symbolic tensors build graph nodes instead.
Both paths go through `apply`, so shapes, dtypes and errors are identical.

The class here holds a tensor's state, its dtype conversions and the ways
out of tensorkiln (numpy(), item(), ...); the one-operand primitives with a
method in the op table become methods here too. The modules above this one
add the other methods (`tensor_methods`): tensor_arithmetic.py (operators,
comparisons, clamp), tensor_reductions.py (sum, max, argmax, all, ...),
tensor_movement.py (permute, expand, squeeze, narrow, gather, ...),
functions.py (reshape, matmul, mean, var, where, ...), indexing.py
(`__getitem__`), nn/functional/ (softmax, gelu, ...) and
autodiff/tensor_api.py (requires_grad, backward, in-place methods).
tensorkiln/__init__.py loads them all before anything uses a Tensor.
"""
from __future__ import annotations

from collections import namedtuple
from types import FunctionType
from typing import Any, Sequence

import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import AxisError, TraceError, at_user_line, user_location
from ..ir.graph import Node, evaluate, make_node
from ..ir.ops import REGISTRY, Attrs, OpDef, TensorType, infer_type
from .trace import Trace, current_trace
from .autodiff.mode import is_grad_enabled
from .autodiff.tape import record
from ..shapes import is_symbolic, prod

MinMax = namedtuple("MinMax", ["values", "indices"])


def apply(op: str, inputs: Sequence["Tensor"], **attrs: Any) -> "Tensor":
    """Apply primitive `op`: compute now (eager) or record a node (tracing).

    When grad mode is on and an input requires grad, the result also gets a
    tape node (op, attrs, inputs) that backward() reads (autodiff/tape.py).
    """
    attrs_ = Attrs(attrs)
    out = _apply(op, inputs, attrs_)
    for t in inputs:
        if t._requires_grad:
            if is_grad_enabled():
                record(op, attrs_, inputs, out)
            break
    return out


def _apply(op: str, inputs: Sequence["Tensor"], attrs_: Attrs) -> "Tensor":
    trace = current_trace()
    # Inside a trace, eager state (parameters, buffers, optimizer state) is read symbolically too,
    # so a compiled function reads its value on every call instead of baking it in.
    # So is an op on eager values whose attributes hold a size symbol (a constant sliced to a symbolic
    # length): its result has a symbolic shape, which only the graph can hold.
    if any(t._node is not None for t in inputs) or (trace is not None and (
            any(trace.is_state(t) for t in inputs) or _symbolic_attrs(attrs_))):
        for t in inputs:
            if t._node is not None and t._trace is not trace and (trace is None or not trace.reaches(t._trace)):
                raise TraceError(at_user_line(
                    f"{op}: a traced tensor was used outside the tk.jit function that created it"))
        nodes = [trace.node_of(t) for t in inputs]
        node = make_node(op, nodes, attrs_, trace.scope, user_location())
        return Tensor._from_node(node, trace)
    types = [t.type for t in inputs]
    out_type = infer_type(op, types, attrs_)
    value = evaluate(op, attrs_, [t._value for t in inputs], types, out_type)
    return Tensor._from_value(value, out_type.dtype)


def _symbolic_attrs(attrs: Attrs) -> bool:
    """Any attribute value (or element of a tuple of them) is a size symbol."""
    for value in attrs.values():
        if is_symbolic(value) or (isinstance(value, tuple) and any(is_symbolic(v) for v in value)):
            return True
    return False


def normalize_dim(dim: int, ndim: int, op: str = "") -> int:
    """A possibly negative dimension as an index in [0, ndim)."""
    if not isinstance(dim, (int, np.integer)):
        raise TypeError(f"{op}: dimension must be an int, got {dim!r}")
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise AxisError(at_user_line(
            f"{op}: dimension {dim} is out of range for a tensor of rank {ndim}"))
    return int(dim) % max(ndim, 1)


def normalize_dims(dim, ndim: int, op: str = "") -> tuple[int, ...]:
    """None (all), an int or a sequence of ints -> sorted tuple of dims."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, (int, np.integer)):
        dim = (dim,)
    dims = tuple(sorted(normalize_dim(d, ndim, op) for d in dim))
    if len(set(dims)) != len(dims):
        raise AxisError(at_user_line(f"{op}: dimension repeated in {list(dim)}"))
    return dims if ndim else ()  # a 0-d tensor accepts dim 0 / -1 (as PyTorch) and has nothing to reduce


def _pick(name: str, a, b, default=None):
    """Accept PyTorch's and numpy's spelling of one argument (dim/axis, keepdim/keepdims)."""
    if a is not None and b is not None:
        raise TypeError(f"give either {name} or its numpy spelling, not both")
    return a if a is not None else (b if b is not None else default)


def _is_scalar(value) -> bool:
    return isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating))


def scalar_tensor(value, dtype: DType) -> "Tensor":
    """A 0-d eager tensor of `dtype` holding a Python scalar; a size symbol gives a traced one."""
    if is_symbolic(value):
        return size_tensor(value, dtype)
    return Tensor._from_value(dt.to_storage(np.asarray(value), dtype), dtype)


def size_tensor(size, dtype: DType = dt.int64) -> "Tensor":
    """A 0-d tensor of a size symbol's run-time value (a one-element `iota` starting there), so that
    `x + x.shape[1]` in a dynamic trace reads the size instead of baking in the traced one."""
    return apply("iota", [], length=1, start=size, step=1, dtype=dtype).reshape(())


def promote(*values) -> tuple[list["Tensor"], DType]:
    """Convert operands to Tensors of their common dtype (Python scalars and size symbols are weak)."""
    values = [v if isinstance(v, Tensor) or _is_scalar(v) or is_symbolic(v) else as_tensor(v) for v in values]
    tensors = [v.dtype for v in values if isinstance(v, Tensor)]
    scalars = [dt.scalar_category(1 if is_symbolic(v) else v) for v in values if not isinstance(v, Tensor)]
    dtype = dt.result_type(tensors, scalars)
    return [v.to(dtype) if isinstance(v, Tensor) else scalar_tensor(v, dtype) for v in values], dtype


def as_tensor(value, dtype=None) -> "Tensor":
    """A Tensor from a Tensor, numpy array, Python scalar or nested list (no copy when possible)."""
    if isinstance(value, Tensor):
        return value if dtype is None else value.to(dtype)
    if dtype is not None:
        dtype = dt.as_dtype(dtype)
    if is_symbolic(value):
        return size_tensor(value, dtype or dt.int64)
    if isinstance(value, (np.ndarray, np.generic)):  # numpy scalars keep their dtype, like 0-d arrays
        array = np.asarray(value)
    elif _is_scalar(value):
        array = np.asarray(value)
        if dtype is None:
            dtype = dt.result_type([], [dt.scalar_category(value)])
    else:
        array = np.asarray(_unwrap_nested(value))
        if dtype is None and array.dtype.kind == "f":
            dtype = dt.DEFAULT_FLOAT  # Python floats become float32, as in PyTorch
    if array.dtype == object:
        raise TypeError(f"cannot make a tensor from {type(value).__name__} {value!r}")
    if dtype is None:
        dtype = dt.from_numpy_dtype(array.dtype)
    return Tensor._from_value(dt.to_storage(array, dtype), dtype)


def _unwrap_nested(value):
    if isinstance(value, Tensor):
        return value.numpy()
    if isinstance(value, (list, tuple)):
        return [_unwrap_nested(v) for v in value]
    return value


class Tensor:
    """An n-dimensional array: eager (holds a value) or traced (holds a graph node).

    Autodiff state (requires_grad, .grad, the tape node that made it) and the
    in-place methods live in autodiff/tensor_api.py; methods built on
    composites live with them (see the module docstring).
    """

    __slots__ = ("_value", "_dtype", "_node", "_trace", "_requires_grad", "_grad", "_grad_fn", "__weakref__")
    __array_priority__ = 1000  # numpy defers to our reflected operators

    def __init__(self, data, dtype=None):
        t = as_tensor(data, dtype)
        self._value, self._dtype, self._node, self._trace = t._value, t._dtype, t._node, t._trace
        self._requires_grad, self._grad, self._grad_fn = False, None, None

    @classmethod
    def _from_value(cls, value: np.ndarray, dtype: DType) -> "Tensor":
        t = object.__new__(cls)
        t._value, t._dtype, t._node, t._trace = value, dtype, None, None
        t._requires_grad, t._grad, t._grad_fn = False, None, None
        return t

    @classmethod
    def _from_node(cls, node: Node, trace: Trace) -> "Tensor":
        t = object.__new__(cls)
        t._value, t._dtype, t._node, t._trace = None, node.dtype, node, trace
        t._requires_grad, t._grad, t._grad_fn = False, None, None
        return t

    # ---- basic properties --------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._node.shape if self._node is not None else self._value.shape

    @property
    def dtype(self) -> DType:
        return self._dtype

    @property
    def type(self) -> TensorType:
        return TensorType(tuple(self.shape), self._dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_traced(self) -> bool:
        """True for a symbolic tensor inside a tk.jit trace."""
        return self._node is not None

    def dim(self) -> int:
        return self.ndim

    def size(self, dim: int | None = None):
        """The shape, or the size of one dimension."""
        return self.shape if dim is None else self.shape[normalize_dim(dim, self.ndim, "size")]

    def numel(self) -> int:
        return prod(self.shape)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    # ---- leaving tensorkiln ------------------------------------------------
    def _concrete(self, what: str) -> np.ndarray:
        if self._node is not None:
            raise TraceError(at_user_line(
                f"{what} needs a concrete value, but this tensor is traced inside tk.jit "
                "(its value is not known until the compiled function runs); "
                "use tk.where instead of Python control flow on tensor values"))
        return self._value

    def numpy(self) -> np.ndarray:
        """The value as a numpy array (bfloat16 values are widened to float32)."""
        value = self._concrete("numpy()")
        return dt.f32_from_bf16_bits(value) if self._dtype is dt.bfloat16 else value

    def __array__(self, dtype=None, copy=None):
        array = self.numpy()
        return array.astype(dtype) if dtype is not None else array

    def item(self):
        """The single value of a one-element tensor as a Python scalar."""
        value = self.numpy()
        if value.size != 1:
            raise ValueError(f"item() needs a tensor with one element, this one has {value.size}")
        return value.reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __bool__(self) -> bool:
        value = self._concrete("bool()")
        if value.size != 1:
            raise ValueError("the truth value of a tensor with more than one element is ambiguous")
        return bool(value.reshape(()))

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if not (self._dtype.is_integer or self._dtype.is_bool):
            raise TypeError("only integer tensors can be used as an index")
        return int(self.item())

    def __repr__(self) -> str:
        if self._node is not None:
            return f"Tensor(traced {self.type}, op={self._node.op})"
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        return f"tensor({body}, dtype={self._dtype!r})"

    # ---- dtype conversion --------------------------------------------------
    def to(self, dtype) -> "Tensor":
        """Cast to `dtype` (a no-op when already of that dtype)."""
        dtype = dt.as_dtype(dtype)
        return self if dtype == self._dtype else apply("cast", [self], dtype=dtype)

    astype = to
    type_as = lambda self, other: self.to(other.dtype)  # noqa: E731
    float = lambda self: self.to(dt.float32)  # noqa: E731
    double = lambda self: self.to(dt.float64)  # noqa: E731
    half = lambda self: self.to(dt.float16)  # noqa: E731
    bfloat16 = lambda self: self.to(dt.bfloat16)  # noqa: E731
    byte = lambda self: self.to(dt.uint8)  # noqa: E731
    short = lambda self: self.to(dt.int16)  # noqa: E731
    int = lambda self: self.to(dt.int32)  # noqa: E731
    long = lambda self: self.to(dt.int64)  # noqa: E731
    bool = lambda self: self.to(dt.bool_)  # noqa: E731

    def contiguous(self) -> "Tensor":
        return self

    def clone(self) -> "Tensor":
        if self._requires_grad and is_grad_enabled():  # differentiable copy
            return apply("cast", [self], dtype=self._dtype)
        return Tensor._from_value(self._value.copy(), self._dtype) if self._node is None else self

    def detach(self) -> "Tensor":
        """The same value cut from the tape: it does not require grad (shares memory, as in PyTorch)."""
        if not self._requires_grad:
            return self
        trace = current_trace()
        if trace is not None and self._node is None:  # a parameter read inside tk.jit: a graph input
            node = trace.constant_for(self)
            trace.mark_state(self)
            return Tensor._from_node(node, trace)
        t = object.__new__(Tensor)
        t._value, t._dtype, t._node, t._trace = self._value, self._dtype, self._node, self._trace
        t._requires_grad, t._grad, t._grad_fn = False, None, None
        return t


_NOT_METHODS = {"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__slots__", "__annotations__"}


def _primitive_method(op: OpDef):
    """The Tensor method of a one-operand primitive row (`OpDef.method`): float-only ops make an
    integer tensor float32 first, or return it unchanged when they are the identity on integers."""
    def method(self: Tensor) -> Tensor:
        if op.float_only and not self._dtype.is_floating:
            if op.identity_on_integers:
                return self
            return apply(op.name, [self.to(dt.DEFAULT_FLOAT)])
        return apply(op.name, [self])
    method.__name__ = method.__qualname__ = op.method
    method.__doc__ = f"x.{op.method}(): the `{op.name}` primitive ({op.doc})."
    return method


for _op in REGISTRY.values():
    if _op.method and _op.arity == 1 and not _op.custom_method:
        setattr(Tensor, _op.method, _primitive_method(_op))


def tensor_methods(cls: type) -> type:
    """Class decorator: add the methods and properties defined in `cls`'s body to Tensor.

    For the modules above this one (which import it, so it cannot import
    them) that implement Tensor methods with what they define.
    """
    for name, member in vars(cls).items():
        if name not in _NOT_METHODS:
            _name_as_tensor_method(member, cls.__qualname__)
            setattr(Tensor, name, member)
    return cls


def _name_as_tensor_method(member: Any, owner: str) -> None:
    """Give a function (or a property's getter) written in class `owner` the qualified name it would have
    in Tensor's own body, so that messages and tracebacks say `Tensor.sum()` wherever sum is written."""
    function = member.fget if isinstance(member, property) else member
    qualname = getattr(function, "__qualname__", "")
    if isinstance(function, FunctionType) and qualname.startswith(owner + "."):  # an alias is renamed once
        function.__qualname__ = "Tensor." + qualname[len(owner) + 1:]
