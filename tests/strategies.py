"""Hypothesis strategies that build random tensor programs, for differential testing.

`random_programs()` draws a `RandomProgram`: a straight-line program over a
pool of ops (elementwise unary/binary with broadcasting, where, casts,
reductions, movement: reshape/permute/slice/expand/concat/pad/flip/index,
matmul, softmax/log_softmax) together with its input arrays. Call it with
tensors (eager, or symbolic inside tk.jit) to run it:

    @given(program=random_programs())
    def test_something(program):
        eager = program(*program.tensors())
        traced = tk.jit(program)(*program.inputs)

Every step is recorded as data, so a failing example prints as readable
pseudo-code, and the same program can be replayed against any backend
(eager, the reference interpreter, compiled C).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

import tensorkiln as tk
import tensorkiln.nn.functional as F

UNARY = ("neg", "abs", "exp", "tanh", "sigmoid", "relu", "sin", "sqrt_abs", "log1p_abs", "square", "gelu", "erf")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "where_gt")
REDUCE = ("sum", "mean", "amax", "amin")
MOVEMENT = ("reshape", "permute", "slice", "expand", "concat", "pad", "flip", "unsqueeze", "index")
OTHER = ("matmul", "softmax", "log_softmax", "cast")
ALL_OPS = UNARY + BINARY + REDUCE + MOVEMENT + OTHER


@dataclass(frozen=True)
class Step:
    """One line of a program: out = op(operands..., **params)."""

    op: str
    operands: tuple[int, ...]
    params: tuple = ()

    def text(self, out: int) -> str:
        args = ", ".join(f"v{i}" for i in self.operands)
        extra = ", ".join(f"{k}={v!r}" for k, v in self.params)
        return f"v{out} = {self.op}({args}{', ' if args and extra else ''}{extra})"


@dataclass
class RandomProgram:
    """A straight-line tensor program and its inputs (numpy arrays in the inputs' dtypes)."""

    inputs: list[np.ndarray]
    dtype: object
    steps: list[Step] = field(default_factory=list)
    outputs: tuple[int, ...] = ()
    __name__ = "random_program"

    def __iter__(self):
        """`fn, arrays = program`: the program as a function and its input arrays."""
        return iter((self, self.inputs))

    def _repr_pretty_(self, printer, cycle) -> None:  # how hypothesis prints a falsifying example
        printer.text(repr(self))

    def tensors(self) -> list:
        """The inputs as eager tensors of the program's dtype (use these for bfloat16 programs)."""
        return [tk.tensor(a, dtype=self.dtype) for a in self.inputs]

    def __call__(self, *tensors):
        values = list(tensors)
        for step in self.steps:
            values.append(apply_step(step, [values[i] for i in step.operands]))
        result = tuple(values[i] for i in self.outputs)
        return result[0] if len(result) == 1 else result

    def __repr__(self) -> str:
        lines = [f"RandomProgram({self.dtype.name}):"]
        lines += [f"  v{i}: input {tuple(a.shape)}" for i, a in enumerate(self.inputs)]
        lines += ["  " + s.text(len(self.inputs) + k) for k, s in enumerate(self.steps)]
        lines.append(f"  return {', '.join(f'v{i}' for i in self.outputs)}")
        return "\n".join(lines)


def apply_step(step: Step, args: list):
    """Run one step on tensors (eager or traced)."""
    p = dict(step.params)
    op = step.op
    x = args[0] if args else None
    if op in ("neg", "abs", "exp", "tanh", "sigmoid", "relu", "sin", "square", "erf"):
        return getattr(x, op)()
    if op == "sqrt_abs":
        return x.abs().sqrt()
    if op == "log1p_abs":
        return x.abs().log1p()
    if op == "gelu":
        return F.gelu(x, approximate=p["approximate"])
    if op in ("add", "sub", "mul", "div", "maximum", "minimum"):
        y = args[1] if len(args) > 1 else p["scalar"]
        if op == "div":
            y = y.abs() + 0.5 if isinstance(y, tk.Tensor) else abs(y) + 0.5
        return {"add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y, "div": lambda: x / y,
                "maximum": lambda: tk.maximum(x, y), "minimum": lambda: tk.minimum(x, y)}[op]()
    if op == "where_gt":
        return tk.where(x > args[1], x, args[1])
    if op in ("sum", "mean", "amax", "amin"):
        return getattr(x, op)(p["dim"], keepdim=p["keepdim"])
    if op == "reshape":
        return x.reshape(p["shape"])
    if op == "permute":
        return x.permute(p["perm"])
    if op == "slice":
        return x[p["key"]]
    if op == "expand":
        return x.expand(p["shape"])
    if op == "concat":
        return tk.cat(args, dim=p["dim"])
    if op == "pad":
        return F.pad(x, p["pads"], value=p["value"])
    if op == "flip":
        return x.flip(p["dims"])
    if op == "unsqueeze":
        return x.unsqueeze(p["dim"])
    if op == "index":
        return x[p["key"]]
    if op == "matmul":
        return args[0] @ args[1]
    if op in ("softmax", "log_softmax"):
        return getattr(x, op)(p["dim"])
    if op == "cast":
        return x.to(p["dtype"]).to(p["back"])
    raise ValueError(op)


def _broadcast_partner_shape(draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with `shape` to `shape`: trailing dims, some set to 1."""
    keep = draw(st.integers(0, len(shape)))
    tail = shape[len(shape) - keep:]
    return tuple(1 if draw(st.booleans()) else d for d in tail)


def _factorizations(n: int) -> list[tuple[int, ...]]:
    shapes = [(n,), (1, n), (n, 1)]
    for a in range(2, n):
        if n % a == 0:
            shapes.append((a, n // a))
            for b in range(2, n // a):
                if (n // a) % b == 0:
                    shapes.append((a, b, n // a // b))
    return shapes


@st.composite
def random_programs(draw, max_steps: int = 8, dtypes=(tk.float32, tk.float64), ops=ALL_OPS,
                    max_side: int = 4, min_rank: int = 0, max_rank: int = 3) -> RandomProgram:
    """A random straight-line program over `ops`, with its input arrays (small shapes, values in [-2, 2]).

    The first input has rank in [min_rank, max_rank]; later inputs are made to fit the ops that need them.
    """
    dtype = draw(st.sampled_from(dtypes))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    shapes: list[tuple[int, ...]] = []
    inputs: list[np.ndarray] = []
    steps: list[Step] = []

    def new_input(shape):
        # inputs come first in the program: renumber later steps' operands when one is added
        array = rng.uniform(-2, 2, size=shape).astype(np.float64)
        inputs.append(tk.tensor(array, dtype=dtype).numpy().astype(dtype.storage if dtype is not tk.bfloat16
                                                                    else np.float32))
        position = len(inputs) - 1
        shifted = [Step(s.op, tuple(i + 1 if i >= position else i for i in s.operands), s.params) for s in steps]
        steps[:] = shifted
        shapes.insert(position, tuple(shape))
        return position

    side = st.integers(1, max_side)
    new_input(tuple(draw(st.lists(side, min_size=min_rank, max_size=max_rank))))
    n_steps = draw(st.integers(1, max_steps))
    for _ in range(n_steps):
        op = draw(st.sampled_from(ops))
        a = draw(st.integers(0, len(shapes) - 1))
        sa = shapes[a]
        params: dict = {}
        operands = [a]
        out_shape = sa
        if op in UNARY:
            if op == "gelu":
                params["approximate"] = draw(st.sampled_from(["none", "tanh"]))
        elif op in BINARY:
            if op != "where_gt" and draw(st.integers(0, 3)) == 0:
                params["scalar"] = draw(st.sampled_from([0.5, -1.5, 2.0, 3]))
            else:
                partners = [i for i, s in enumerate(shapes) if _broadcasts(s, sa)]
                if partners and draw(st.booleans()):
                    b = draw(st.sampled_from(partners))
                else:
                    b = new_input(_broadcast_partner_shape(draw, sa))
                    a = a + 1 if b <= a else a
                operands = [a, b] if draw(st.booleans()) else [b, a]
                out_shape = tuple(np.broadcast_shapes(shapes[a], shapes[b]))
        elif op in REDUCE:
            if sa:
                dims = draw(st.lists(st.integers(-len(sa), len(sa) - 1), min_size=1, max_size=len(sa),
                                     unique_by=lambda d: d % len(sa)))
                dim = tuple(dims) if len(dims) > 1 or draw(st.booleans()) else dims[0]
            else:
                dim = None
            keepdim = draw(st.booleans())
            params.update(dim=dim, keepdim=keepdim)
            axes = range(len(sa)) if dim is None else {d % len(sa) for d in np.atleast_1d(dim)}
            out_shape = tuple(1 if i in axes else s for i, s in enumerate(sa)) if keepdim else \
                tuple(s for i, s in enumerate(sa) if i not in axes)
        elif op == "reshape":
            n = int(np.prod(sa))
            target = draw(st.sampled_from(_factorizations(n)))
            if draw(st.booleans()) and len(target) > 1:
                shown = list(target)
                shown[draw(st.integers(0, len(target) - 1))] = -1
                params["shape"] = tuple(shown)
            else:
                params["shape"] = target
            out_shape = target
        elif op == "permute":
            perm = tuple(draw(st.permutations(range(len(sa)))))
            params["perm"] = perm
            out_shape = tuple(sa[i] for i in perm)
        elif op == "slice" and sa:
            key = []
            for d in sa:
                start = draw(st.none() | st.integers(-d, d - 1))
                stop = draw(st.none() | st.integers(-d - 1, d))
                step = draw(st.sampled_from([None, 1, 2, -1, -2]))
                key.append(slice(start, stop, step))
            params["key"] = tuple(key)
            out_shape = np.empty(sa)[tuple(key)].shape
        elif op == "index" and sa:
            d = draw(st.integers(0, len(sa) - 1))
            kind = draw(st.sampled_from(["int", "array", "none"]))
            if kind == "int":
                item = draw(st.integers(-sa[d], sa[d] - 1))
            elif kind == "array":
                item = np.asarray(draw(st.lists(st.integers(-sa[d], sa[d] - 1), min_size=1, max_size=4)))
            else:
                item = None
            key = (slice(None),) * d + (item,)
            params["key"] = key
            out_shape = np.empty(sa)[key].shape
        elif op == "expand":
            lead = draw(st.lists(side, max_size=1))
            target = tuple(lead) + tuple(draw(side) if s == 1 else s for s in sa)
            params["shape"] = target
            out_shape = target
        elif op == "concat" and sa:
            d = draw(st.integers(-len(sa), len(sa) - 1))
            other = list(sa)
            other[d] = draw(side)
            same = [i for i, s in enumerate(shapes) if s == tuple(other)]
            if same and draw(st.booleans()):
                b = draw(st.sampled_from(same))
            else:
                b = new_input(tuple(other))
                a = a + 1 if b <= a else a
            operands = [a, b]
            params["dim"] = d
            out_shape = list(sa)
            out_shape[d] = sa[d] + other[d]
            out_shape = tuple(out_shape)
        elif op == "pad" and sa:
            k = draw(st.integers(1, min(2, len(sa))))
            pads = tuple(draw(st.integers(0, 2)) for _ in range(2 * k))
            params.update(pads=pads, value=draw(st.sampled_from([0.0, -1.0, 2.5])))
            out = list(sa)
            for i in range(k):
                out[len(sa) - 1 - i] += pads[2 * i] + pads[2 * i + 1]
            out_shape = tuple(out)
        elif op == "flip" and sa:
            params["dims"] = tuple(draw(st.lists(st.integers(0, len(sa) - 1), min_size=1, unique=True)))
        elif op == "unsqueeze":
            params["dim"] = draw(st.integers(-len(sa) - 1, len(sa)))
            out_shape = np.expand_dims(np.empty(sa), params["dim"]).shape
        elif op == "matmul" and sa:
            k = sa[-1]
            n = draw(side)
            rhs = (k, n)
            if len(sa) >= 2 and draw(st.booleans()):  # a batched right operand, broadcasting against a's batch
                rhs = (draw(st.sampled_from([1, sa[-3]])) if len(sa) >= 3 else draw(side), k, n)
            elif draw(st.booleans()):
                rhs = (k,)  # matrix-vector (or vector-vector) product
            b = new_input(rhs)
            a = a + 1 if b <= a else a
            operands = [a, b]
            out_shape = np.matmul(np.empty(sa), np.empty(rhs)).shape
        elif op in ("softmax", "log_softmax") and sa:
            params["dim"] = draw(st.integers(-len(sa), len(sa) - 1))
        elif op == "cast":
            params.update(dtype=draw(st.sampled_from([tk.float16, tk.bfloat16, tk.float64, tk.int32, tk.int16,
                                                      tk.uint8])),
                          back=dtype)
        else:
            continue  # the op does not apply to a 0-d value
        if 0 in tuple(out_shape):
            continue  # keep values non-empty: max/softmax of an empty axis is an error, not a program
        steps.append(Step(op, tuple(operands), tuple(sorted(params.items(), key=lambda kv: kv[0]))))
        shapes.append(tuple(int(s) for s in out_shape))
    n_values = len(shapes)
    extra = draw(st.lists(st.integers(len(inputs), n_values - 1), max_size=2, unique=True)) \
        if n_values > len(inputs) else []
    outputs = tuple(dict.fromkeys([n_values - 1] + extra))
    return RandomProgram(inputs=inputs, dtype=dtype, steps=steps, outputs=outputs)


def _broadcasts(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    """`small` broadcasts against `big` (in either direction)."""
    try:
        np.broadcast_shapes(small, big)
    except ValueError:
        return False
    return True
