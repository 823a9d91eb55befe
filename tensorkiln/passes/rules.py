"""Algebraic simplification as declarative rewrite rules, applied to a fixed point.

Each Rule is a pattern, a replacement built from the match, an optional
condition, and its kind:

- "exact": an identity wherever it fires; the result differs at most by the
  rounding of the operations it removes (x * 1 -> x, exp(log(x)) -> x for x > 0);
- "fold": moves arithmetic onto constants (weights), so results may differ in
  the last bits, as in every inference engine's constant folding; this is how
  batch norm folds into the preceding conv or linear layer (opt_level >= 2);
- "fast_math": valid for real numbers but not for every float (x - x -> 0 is
  wrong for inf and NaN); used for floats only with tk.jit(fast_math=True),
  always for integers.

Every rule carries an example program; the test suite applies each rule alone
to its example and compares both sides on random inputs, so a rule that is
not an identity fails the suite.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import dtypes as dt
from ..ir.graph import Graph, Node, constant_node, evaluate, make_node
from ..ir.ops import Attrs, infer_type
from .pattern import C, K, P, Pat, X, constant_array, match
from ..ir.rewrite import rewrite_graph, with_inputs

Match = dict[str, Node]


@dataclass(frozen=True)
class Rule:
    """One rewrite: `name` states the identity it encodes."""

    name: str
    pattern: Pat
    build: Callable[[Match, Node], Node | None]
    kind: str = "exact"  # exact | fold | fast_math
    when: Callable[[Match, Node], bool] | None = None
    example: Callable | None = None  # a function of tensors whose trace the rule fires on
    example_shapes: tuple = ((3, 4),)
    example_dtype: str = "float32"
    single_use: tuple[str, ...] = ()  # bound nodes that must have no other reader (or work would be duplicated)


# ---- node builders --------------------------------------------------------------------

def node(op: str, *inputs: Node, like: Node, **attrs) -> Node:
    """A new node carrying `like`'s scope and source line."""
    return make_node(op, list(inputs), Attrs(attrs), like.scope, like.location)


def fold(op: str, *inputs: Node, **attrs) -> Node:
    """Evaluate an op on constant nodes now; returns a constant node."""
    attrs_ = Attrs(attrs)
    out_type = infer_type(op, [i.type for i in inputs], attrs_)
    value = evaluate(op, attrs_, [i.attrs["value"].array for i in inputs], [i.type for i in inputs], out_type)
    return constant_node(value, out_type.dtype)


def scalar_like(value, like: Node) -> Node:
    """A 0-d constant of `like`'s dtype."""
    return constant_node(dt.to_storage(np.asarray(value), like.dtype), like.dtype)


# ---- conditions ----------------------------------------------------------------------

def is_positive(n: Node) -> bool:
    """Provably > 0 everywhere."""
    if n.op in ("exp", "sigmoid"):
        return True
    if n.op == "constant":
        values = constant_array(n)
        return values.size > 0 and bool(np.all(values > 0))
    return False


def exact_reciprocal(c: Node) -> bool:
    """1/c is exactly representable for every element (c a power of two)."""
    values = constant_array(c)
    if not n_float(c) or values.size == 0 or not np.all(np.isfinite(values)) or np.any(values == 0):
        return False
    mantissa, _ = np.frexp(values)
    return bool(np.all(np.abs(mantissa) == 0.5))


def weight_output(n: Node) -> bool:
    """A conv2d/matmul result with constant weights, possibly plus a constant bias.

    Distributing a scale over (x - a) is only done here, where it lets batch norm
    fold into the weights: elsewhere x*s - a*s could cancel catastrophically.
    """
    if n.op == "add" and any(i.op == "constant" for i in n.inputs):
        n = next(i for i in n.inputs if i.op != "constant") if any(i.op != "constant" for i in n.inputs) else n
    return n.op in ("conv2d", "matmul") and n.inputs[1].op == "constant"


def n_float(n: Node) -> bool:
    return n.dtype.is_floating


def widening(inner: dt.DType, middle: dt.DType) -> bool:
    """`middle` represents every value of `inner` exactly."""
    if inner == middle:
        return True
    if inner.is_bool:
        return True
    if inner.is_integer and middle.is_integer:
        if inner.is_unsigned:  # uint8 fits a wider signed type or an unsigned one at least as wide
            return middle.bits > inner.bits or (middle.is_unsigned and middle.bits >= inner.bits)
        return not middle.is_unsigned and middle.bits >= inner.bits
    if inner.is_integer and middle.is_floating:
        mantissa = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}[middle.name]
        magnitude_bits = inner.bits if inner.is_unsigned else inner.bits - 1
        return magnitude_bits <= mantissa
    if inner.is_floating and middle.is_floating:
        if middle.name == "float64":
            return True
        return middle.name == "float32" and inner.name in ("float16", "bfloat16")
    return False


def per_channel_of(scale: Node, contraction: Node) -> bool:
    """`scale` multiplies a conv2d output per output channel, or a matmul output per column."""
    shape = scale.shape
    if contraction.op == "conv2d":
        channels = contraction.shape[1]
        squeezed = tuple(d for d in shape)
        while len(squeezed) > 3 and squeezed[0] == 1:
            squeezed = squeezed[1:]
        return squeezed in ((channels, 1, 1), (1, 1, 1)) or shape == () or squeezed == (1,)
    if contraction.op == "matmul":
        columns = contraction.shape[-1]
        return all(d == 1 for d in shape[:-1]) and (not shape or shape[-1] in (1, columns))
    return False


def _weight_scaled(m: Match, like: Node) -> Node | None:
    """conv2d(x, W) * s -> conv2d(x, W * s'), matmul(x, W) * s -> matmul(x, W * s')."""
    contraction, scale = m["y"], m["s"]
    x, weight = contraction.inputs
    if weight.op != "constant" or not per_channel_of(scale, contraction):
        return None
    values = constant_array(scale)
    if contraction.op == "conv2d":
        channels = contraction.shape[1]
        per_channel = np.broadcast_to(values.reshape(-1), (channels,)) if values.size in (1, channels) else None
        if per_channel is None:
            return None
        factor = per_channel.reshape(channels, 1, 1, 1)
    else:
        columns = contraction.shape[-1]
        factor = np.broadcast_to(values.reshape(-1), (columns,))
    new_weight = constant_node(dt.to_storage(constant_array(weight) * factor, weight.dtype), weight.dtype)
    return make_node(contraction.op, [x, new_weight], contraction.attrs, contraction.scope, contraction.location)


def _expanded_axes(e: Node) -> set[int]:
    src, out = e.inputs[0].shape, e.shape
    lead = len(out) - len(src)
    return set(range(lead)) | {lead + k for k, d in enumerate(src) if d == 1 and out[lead + k] != 1}


def _reduce_of_expand(m: Match, like: Node) -> Node | None:
    e = m["e"]
    axes = set(like.attrs["axes"])
    if not axes or not axes <= _expanded_axes(e):
        return None
    x = e.inputs[0]
    reduced = node("reshape", x, like=like, shape=like.shape) if x.type.size == like.type.size else None
    if reduced is None:  # keep the remaining broadcast
        keep = like.attrs["keepdims"]
        out_shape = tuple(1 if (i in axes and keep) else d for i, d in enumerate(e.shape) if keep or i not in axes)
        lead = len(e.shape) - len(x.shape)
        src_dims = [1 if (lead + k) in axes else d for k, d in enumerate(x.shape)]
        base = x if tuple(src_dims) == x.shape else None
        if base is None:
            return None
        reshaped = base if len(out_shape) == len(base.shape) else None
        if reshaped is None:
            return None
        reduced = node("expand", base, like=like, shape=out_shape)
    if like.op == "reduce_sum":
        count = int(np.prod([e.shape[a] for a in axes], dtype=np.int64))
        return node("mul", reduced, scalar_like(count, like), like=like)
    return reduced


def _whole_reduce_of_view(m: Match, like: Node) -> Node | None:
    """A max/min over every axis of a permute or reshape of x: the same elements, read as x lies in memory
    (one contiguous run, which the reduction walks in lanes), reshaped to the reduction's shape."""
    view = m["v"]
    if set(like.attrs["axes"]) != set(range(len(view.shape))) or not view.shape:
        return None
    x = m["x"]
    whole = node(like.op, x, like=like, axes=tuple(range(len(x.shape))), keepdims=False)
    return whole if like.shape == () else node("reshape", whole, like=like, shape=like.shape)


def _composed_permute(m: Match, like: Node) -> Node:
    inner, outer = m["p"].attrs["perm"], like.attrs["perm"]
    perm = tuple(inner[i] for i in outer)
    x = m["x"]
    return x if perm == tuple(range(len(perm))) else node("permute", x, like=like, perm=perm)


def _cast_of_cast(m: Match, like: Node) -> Node | None:
    x, middle = m["x"], m["c"]
    if not widening(x.dtype, middle.dtype):
        return None
    return x if like.dtype == x.dtype else node("cast", x, like=like, dtype=like.dtype)


def _scalar_for(c: Node, x: Node) -> bool:
    """c holds one value and broadcasts against x without adding dimensions."""
    return c.type.size == 1 and c.ndim <= x.ndim and c.dtype == x.dtype


def _unmerged_batch(m: Match, like: Node) -> Node | None:
    """reshape(matmul(reshape(a), reshape(b))) that merges a's and b's batch axes into one and splits the
    product's back (a bmm of views, as PyTorch's decompositions write a batched matmul): matmul(a, b)."""
    a, b, mm = m["a"], m["b"], m["mm"]
    ra, rb = mm.inputs
    batch = a.shape[:-2]
    if len(batch) < 2 or b.shape[:-2] != batch or len(mm.shape) != 3 or like.shape != batch + mm.shape[-2:]:
        return None
    if ra.shape[-2:] != a.shape[-2:] or rb.shape[-2:] != b.shape[-2:] or ra.ndim != 3 or rb.ndim != 3:
        return None
    return node("matmul", a, b, like=like)


def _example_weight() -> np.ndarray:
    """A weight for rule examples: an array, which `x @ w` reads as a float32 constant."""
    return np.linspace(-1.0, 1.0, 20, dtype=np.float32).reshape(4, 5)


R = Rule
RULES: list[Rule] = [
    # ---- identity elements
    R("x + 0 -> x", P("add", X("x"), K(0)), lambda m, n: m["x"],
      example=lambda x: x + 0.0),
    R("x - 0 -> x", P("sub", X("x"), K(0)), lambda m, n: m["x"], example=lambda x: x - 0.0),
    R("x * 1 -> x", P("mul", X("x"), K(1)), lambda m, n: m["x"], example=lambda x: x * 1.0),
    R("x / 1 -> x", P("div", X("x"), K(1)), lambda m, n: m["x"], example=lambda x: x / 1.0),
    R("x ** 1 -> x", P("pow", X("x"), K(1)), lambda m, n: m["x"], example=lambda x: x ** 1.0),
    # ---- self cancellation and idempotence
    R("x - x -> 0", P("sub", X("x"), X("x")), lambda m, n: node("expand", scalar_like(0, n), like=n, shape=n.shape),
      kind="fast_math", example=lambda x: x - x),
    R("-(-x) -> x", P("neg", P("neg", X("x"))), lambda m, n: m["x"], example=lambda x: -(-x)),
    R("relu(relu(x)) -> relu(x)", P("relu", P("relu", X("x"), name="r")), lambda m, n: m["r"],
      example=lambda x: x.relu().relu()),
    R("where(c, x, x) -> x", P("where", X("c"), X("x"), X("x")), lambda m, n: m["x"],
      example=lambda x: x.where(x > 0, x)),
    # a constant condition that is everywhere true or false (a mask with nothing masked, as
    # scaled_dot_product_attention's decomposition builds for a model called without one) picks one side
    R("where(all true, x, y) -> x", P("where", C("c"), X("x"), X("y")), lambda m, n: m["x"],
      when=lambda m, n: bool(constant_array(m["c"]).all()),
      example=lambda x: x.where(np.ones((1, 4), bool), x * 2.0)),
    R("where(all false, x, y) -> y", P("where", C("c"), X("x"), X("y")), lambda m, n: m["y"],
      when=lambda m, n: not constant_array(m["c"]).any(),
      example=lambda x: x.where(np.zeros((3, 1), bool), x * 3.0)),
    # ---- movement chains
    R("permute(permute(x)) -> permute(x) or x", P("permute", P("permute", X("x"), name="p")), _composed_permute,
      example=lambda x: x.permute(1, 0).permute(1, 0) + x.reshape(2, 6, 1).permute(2, 0, 1).permute(1, 2, 0).sum()),
    R("reshape(reshape(x)) -> reshape(x)", P("reshape", P("reshape", X("x"))),
      lambda m, n: m["x"] if m["x"].shape == n.shape else node("reshape", m["x"], like=n, shape=n.shape),
      example=lambda x: x.reshape(12).reshape(2, 6) * 2),
    R("reshape(matmul(reshape(a), reshape(b))) over merged batch axes -> matmul(a, b)",
      P("reshape", P("matmul", P("reshape", X("a")), P("reshape", X("b")), name="mm")), _unmerged_batch,
      single_use=("mm",),
      example=lambda x: (x.reshape(2, 3, 2, 2).reshape(6, 2, 2) @ x.reshape(2, 3, 2, 2).reshape(6, 2, 2)
                         ).reshape(2, 3, 2, 2), example_shapes=((2, 12),)),
    R("reduce_max(expand(x)) over broadcast axes -> x", P("reduce_max", P("expand", X("x"), name="e")),
      _reduce_of_expand, example=lambda x: x[:1].expand(5, 4).amax(0)),
    R("reduce_min(expand(x)) over broadcast axes -> x", P("reduce_min", P("expand", X("x"), name="e")),
      _reduce_of_expand, example=lambda x: x[:, None].expand(3, 6, 4).amin(1, keepdim=True)),
    R("reduce_sum(expand(x)) over broadcast axes -> x * n", P("reduce_sum", P("expand", X("x"), name="e")),
      _reduce_of_expand, kind="fast_math", example=lambda x: x[:1].expand(5, 4).sum(0)),
    R("reduce_max(permute(x)) over every axis -> reduce_max(x)", P("reduce_max", P("permute", X("x"), name="v")),
      _whole_reduce_of_view, example=lambda x: x.permute(1, 0).amax((0, 1), keepdim=True) + x.amax()),
    R("reduce_min(permute(x)) over every axis -> reduce_min(x)", P("reduce_min", P("permute", X("x"), name="v")),
      _whole_reduce_of_view, example=lambda x: x.permute(1, 0).amin((0, 1))),
    R("reduce_max(reshape(x)) over every axis -> reduce_max(x)", P("reduce_max", P("reshape", X("x"), name="v")),
      _whole_reduce_of_view, example=lambda x: x.permute(1, 0).reshape(2, 6).amax((1, 0))),
    R("reduce_min(reshape(x)) over every axis -> reduce_min(x)", P("reduce_min", P("reshape", X("x"), name="v")),
      _whole_reduce_of_view, example=lambda x: x.reshape(12).amin(0, keepdim=True)),
    # ---- transcendental and power identities
    R("exp(log(x)) -> x if x > 0", P("exp", P("log", X("x"))), lambda m, n: m["x"],
      when=lambda m, n: is_positive(m["x"]), example=lambda x: x.exp().log().exp()),
    R("log(exp(x)) -> x", P("log", P("exp", X("x"))), lambda m, n: m["x"], kind="fast_math",
      example=lambda x: x.exp().log()),
    R("x ** 2 -> x * x", P("pow", X("x"), K(2)), lambda m, n: node("mul", m["x"], m["x"], like=n)
      if m["x"].shape == n.shape else None, example=lambda x: x ** 2),
    R("x ** 0.5 -> sqrt(x)", P("pow", X("x"), K(0.5)), lambda m, n: node("sqrt", m["x"], like=n)
      if m["x"].shape == n.shape else None, kind="fast_math", example=lambda x: x.abs() ** 0.5),
    R("x / c -> x * (1/c) if 1/c is exact", P("div", X("x"), C("c")),
      lambda m, n: node("mul", m["x"], fold("reciprocal", m["c"]), like=n),
      when=lambda m, n: exact_reciprocal(m["c"]), example=lambda x: x / 4.0),
    R("x / c -> x * (1/c)", P("div", X("x"), C("c")), lambda m, n: node("mul", m["x"], fold("reciprocal", m["c"]), like=n),
      kind="fast_math", when=lambda m, n: n_float(m["c"]), example=lambda x: x / 3.0),
    R("cast(cast(x)) -> cast(x) when the middle type is wider", P("cast", P("cast", X("x"), name="c")), _cast_of_cast,
      example=lambda x: x.to("float64").to("float32") + x.to("int8").to("int32").to("int64").to("float32")),
    # ---- constants gathered together
    R("x*a + x*b -> x*(a+b)", P("add", P("mul", X("x"), C("a")), P("mul", X("x"), C("b"))),
      lambda m, n: node("mul", m["x"], fold("add", m["a"], m["b"]), like=n), kind="fast_math",
      example=lambda x: x * 2.0 + x * 3.0),
    R("(x * a) * b -> x * (a*b)", P("mul", P("mul", X("x"), C("a"), name="inner"), C("b")),
      lambda m, n: node("mul", m["x"], fold("mul", m["a"], m["b"]), like=n), kind="fold", single_use=("inner",),
      example=lambda x: x * 3.0 * 0.5),
    R("(x + a) + b -> x + (a+b)", P("add", P("add", X("x"), C("a"), name="inner"), C("b")),
      lambda m, n: node("add", m["x"], fold("add", m["a"], m["b"]), like=n), kind="fold", single_use=("inner",),
      example=lambda x: x + 1.5 + 2.25),
    R("(x - a) + b -> x + (b-a)", P("add", P("sub", X("x"), C("a"), name="inner"), C("b")),
      lambda m, n: node("add", m["x"], fold("sub", m["b"], m["a"]), like=n), kind="fold", single_use=("inner",),
      example=lambda x: x - 1.5 + 0.25),
    R("(x + a) * s -> x*s + a*s", P("mul", P("add", X("x"), C("a"), name="inner"), C("s")),
      lambda m, n: node("add", node("mul", m["x"], m["s"], like=n), fold("mul", m["a"], m["s"]), like=n),
      kind="fold", single_use=("inner",), when=lambda m, n: weight_output(m["x"]),
      example=lambda x: (x @ _example_weight() + 1.0) * 3.0, example_shapes=((3, 4),)),
    R("(x - a) * s -> x*s - a*s", P("mul", P("sub", X("x"), C("a"), name="inner"), C("s")),
      lambda m, n: node("sub", node("mul", m["x"], m["s"], like=n), fold("mul", m["a"], m["s"]), like=n),
      kind="fold", single_use=("inner",), when=lambda m, n: weight_output(m["x"]),
      example=lambda x: (x @ _example_weight() - 1.0) * 3.0, example_shapes=((3, 4),)),
    # ---- a scale moves up through movement ops, toward a weight it can fold into
    R("permute(x) * c -> permute(x * c) for a scalar c", P("mul", P("permute", X("x"), name="p"), C("c")),
      lambda m, n: node("permute", node("mul", m["x"], m["c"], like=n), like=n, perm=m["p"].attrs["perm"]),
      when=lambda m, n: _scalar_for(m["c"], m["x"]), single_use=("p",),
      example=lambda x: x.permute(1, 0) * 0.125),
    R("reshape(x) * c -> reshape(x * c) for a scalar c", P("mul", P("reshape", X("x"), name="r"), C("c")),
      lambda m, n: node("reshape", node("mul", m["x"], m["c"], like=n), like=n, shape=n.shape),
      when=lambda m, n: _scalar_for(m["c"], m["x"]), single_use=("r",),
      example=lambda x: x.reshape(2, 6) * 0.125),
    # ---- batch norm and scaling folded into the weights of conv2d / matmul
    R("conv2d(x, W) * s -> conv2d(x, W*s)", P("mul", P("conv2d", X("x"), C("w"), name="y"), C("s")),
      _weight_scaled, kind="fold", example=None, single_use=("y",)),
    R("matmul(x, W) * s -> matmul(x, W*s)", P("mul", P("matmul", X("x"), C("w"), name="y"), C("s")),
      _weight_scaled, kind="fold", example=None, single_use=("y",)),
]


def applicable(rule: Rule, node: Node, fast_math: bool, fold_weights: bool) -> bool:
    """May `rule` change `node` under these settings?"""
    if rule.kind == "fold":
        return fold_weights
    if rule.kind == "fast_math":
        return fast_math or not node.dtype.is_floating
    return True


def _fit(replacement: Node, original: Node) -> Node | None:
    """The replacement with the original's exact type (broadcast back if needed), or None."""
    if replacement.type == original.type:
        return replacement
    if replacement.dtype != original.dtype:
        return None
    try:
        return make_node("expand", [replacement], Attrs(shape=original.shape), original.scope, original.location)
    except Exception:  # noqa: BLE001  (shapes that do not broadcast: leave the node alone)
        return None


def simplify_graph(graph: Graph, rules: list[Rule] | None = None, fast_math: bool = False,
                   fold_weights: bool = True, max_rounds: int = 8) -> tuple[Graph, Counter]:
    """Apply rewrite rules bottom-up until none fires (or `max_rounds` sweeps)."""
    rules = RULES if rules is None else rules
    fired: Counter = Counter()
    for _ in range(max_rounds):
        round_fired: Counter = Counter()
        readers = {node_id: len(u) for node_id, u in graph.users().items()}
        readers.update({n.id: 2 for n in graph.outputs})  # an output is read by the caller too
        origin: dict[int, int] = {}  # id of a rebuilt node -> id of the node it replaces

        def single_use(n: Node) -> bool:
            return readers.get(origin.get(n.id, n.id), 1) <= 1

        def visit(n: Node, inputs: list[Node]) -> Node:
            original_id = n.id
            n = with_inputs(n, inputs)
            for _ in range(16):  # a replacement may enable another rule at the same place
                for rule in rules:
                    if not applicable(rule, n, fast_math, fold_weights):
                        continue
                    bindings: Match = {}
                    if not match(rule.pattern, n, bindings):
                        continue
                    if rule.when is not None and not rule.when(bindings, n):
                        continue
                    if not all(single_use(bindings[name]) for name in rule.single_use):
                        continue
                    built = rule.build(bindings, n)
                    replacement = _fit(built, n) if built is not None else None
                    if replacement is None or replacement is n:
                        continue
                    round_fired[rule.name] += 1
                    n = replacement
                    break
                else:
                    break
            origin[n.id] = original_id
            return n

        graph = rewrite_graph(graph, visit)
        fired.update(round_fired)
        if not round_fired:
            break
    return graph, fired
