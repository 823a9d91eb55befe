"""Expression nodes: construction, type rules, printing and reference semantics."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensorkiln.errors import DTypeError
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.bounds import Bounds
from tensorkiln.loops.expr import (
    BinOp, Bitcast, Call, Cast, Const, Expr, Load, Select, Unary, Var, call, cast, evaluate, format_expr, free_vars,
    logical_and, lt, maximum, minimum, where,
)

i, j = Var("i"), Var("j")
x = Var("x", "float32")


def test_operators_build_trees_and_lift_numbers():
    e = i * 64 + j
    assert e.op == "add" and e.dtype == "int64"
    assert (x * 2).b == Const(2.0, "float32")
    assert str(e) == "i*64 + j"
    assert free_vars(e) == {"i", "j"}


def test_printing_uses_minimal_parentheses():
    assert format_expr((i + 1) * 4) == "(i + 1)*4"
    assert format_expr(i - (j - 1)) == "i - (j - 1)"
    assert format_expr(i - j - 1) == "i - j - 1"
    assert format_expr(-(i + j)) == "-(i + j)"
    assert format_expr(where(lt(i, j), x, x * 2.0)) == "where(i < j, x, x*2.0)"
    a = Buffer("a", "float16", (8,))
    assert format_expr(call("exp", Load(a, i)) + 0.5) == "exp(a[i]) + 0.5"
    assert format_expr(Cast(i, "float32")) == "float32(i)"


def test_every_node_kind_prints():
    a = Buffer("a", "float32", (8,))
    bits = Cast(i, "int32")
    examples = {Var: i, Const: Const(-2), BinOp: maximum(i, j) * 2, Unary: -(i + j), Call: call("exp", x),
                Select: where(lt(i, j), x, 1.0), Cast: Cast(i, "float32"), Bitcast: Bitcast(bits, "float32"),
                Load: Load(a, i % 8)}
    assert set(examples) == set(Expr.__subclasses__()), "a node kind without a printing example"
    texts = {kind: format_expr(e) for kind, e in examples.items()}
    assert texts == {Var: "i", Const: "-2", BinOp: "max(i, j)*2", Unary: "-(i + j)", Call: "exp(x)",
                     Select: "where(i < j, x, 1.0)", Cast: "float32(i)", Bitcast: "bitcast_float32(int32(i))",
                     Load: "a[i%8]"}
    with pytest.raises(TypeError, match="not an expression"):
        format_expr(3)


def test_dtype_rules_are_enforced():
    with pytest.raises(DTypeError, match="different dtypes"):
        i + x
    with pytest.raises(DTypeError, match="true division"):
        i / j
    with pytest.raises(DTypeError, match="bool operands"):
        logical_and(i, j)
    with pytest.raises(DTypeError, match="storage type"):
        Var("h", "float16")
    with pytest.raises(DTypeError, match="does not fit"):
        Const(300, "int8")
    with pytest.raises(DTypeError):
        Call("exp", (i,))
    with pytest.raises(DTypeError, match="must be an integer"):
        Load(Buffer("a", "float32", (4,)), x)


def test_loads_from_storage_types_are_float32():
    assert Load(Buffer("h", "float16", (4,)), i).dtype == "float32"
    assert Load(Buffer("b", "bfloat16", (4,)), i).dtype == "float32"


def test_constants_round_to_their_dtype_and_compare_by_bits():
    assert Const(0.1, "float32").value == float(np.float32(0.1))
    assert Const(-0.0, "float32") != Const(0.0, "float32")
    assert Const(float("nan"), "float32") == Const(float("nan"), "float32")
    assert cast(i, "int64") is i


def test_evaluate_uses_floor_semantics_and_wraps_integers():
    n = Var("n")
    assert evaluate(n // 4, {"n": -7}) == -2
    assert evaluate(n % 4, {"n": -7}) == 1
    b = Var("b", "int8")
    assert evaluate(b + Const(100, "int8"), {"b": 100}) == -56
    assert evaluate(Cast(x, "int32"), {"x": -2.7}) == -2
    assert math.isnan(evaluate(maximum(x, Const(0.0, "float32")), {"x": float("nan")}))
    assert evaluate(minimum(x, Const(1.0, "float32")), {"x": 3.0}) == 1.0
    arr = np.arange(6, dtype=np.float32)
    assert evaluate(Load(Buffer("a", "float32", (6,)), i + 1), {"i": 2}, {"a": arr}) == 3.0


def test_bounds_of_index_expressions():
    bounds = Bounds({"i": (0, 3), "j": (0, 7)})
    assert bounds(i * 8 + j) == (0, 31)
    assert bounds((i * 8 + j) // 8) == (0, 3)
    assert bounds(Var("n") % 5) == (0, 4)
    assert bounds(minimum(i, Const(2))) == (0, 2)
    assert bounds(lt(i, Const(4))) == (1, 1)


def test_bounds_of_ceiling_divisions_and_run_time_divisors():
    """The simplifier spells -(-s // 48) as s - s*47//48: its interval is ceil(s / 48)'s, positive, and a
    division or remainder by it keeps a non-negative numerator's sign (C's own / and %)."""
    s, task = Var("s"), Var("task")
    bounds = Bounds({"s": (1, 1000), "task": (0, 99)})
    blocks = s - (s * 47) // 48
    assert bounds(blocks) == (1, 21) and bounds(s - (47 * s) // 48) == (1, 21)
    assert bounds(task // blocks) == (0, 99) and bounds(task % blocks) == (0, 20)
    assert bounds(s - (s * 49) // 48) == (-1019, 999)  # c > d: not the form, the plain difference


@pytest.mark.parametrize("seed", range(6))
def test_bounds_contain_every_value(seed):
    """Each interval holds every value the expression takes over its variables' ranges (brute force)."""
    rng = np.random.default_rng(seed)
    lo_a, lo_b = (int(v) for v in rng.integers(-20, 20, 2))
    ranges = {"a": (lo_a, lo_a + int(rng.integers(0, 30))), "b": (lo_b, lo_b + int(rng.integers(0, 30))),
              "p": (1, int(rng.integers(1, 30)))}
    a, b, p = Var("a"), Var("b"), Var("p")
    c, d = (int(v) for v in sorted(rng.integers(0, 64, 2)))
    d = max(d, 1)
    bounds = Bounds(ranges)
    for expr in (a - (a * c) // d, a - (c * a) // d, a // p, a % p, (a + b) // p, b % (p + 3), a - (a * c) // d + b):
        lo, hi = bounds(expr)
        values = [evaluate(expr, {"a": va, "b": vb, "p": vp}) for va in range(ranges["a"][0], ranges["a"][1] + 1)
                  for vb in range(ranges["b"][0], ranges["b"][1] + 1) for vp in range(1, ranges["p"][1] + 1)]
        assert lo <= min(values) and max(values) <= hi, (format_expr(expr), ranges, (lo, hi))


def test_dtype_table_agrees_with_tensorkiln_dtypes():
    from tensorkiln import dtypes
    from tensorkiln.loops import types
    from tensorkiln.runtime.signature import numpy_dtypes

    # the loop IR also has uint16 and uint32, the image pipelines' types (tensorkiln/pipeline/)
    assert set(types.DTYPE_NAMES) == {d.name for d in dtypes.ALL_DTYPES} | {"uint16", "uint32"}
    for d in dtypes.ALL_DTYPES:
        assert types.itemsize(d.name) == d.itemsize
        assert types.is_float(d.name) == d.is_floating and types.is_int(d.name) == d.is_integer
        assert types.compute_dtype(d.name) == d.compute.name
        assert d.storage in numpy_dtypes(d.name)


def test_a_node_hashes_once_and_a_pickled_node_hashes_again():
    """The hash is cached on the node (the simplifier hashes the same subtrees over and over), equal trees
    built apart hash alike, and pickling drops the cache: str hashes differ from process to process."""
    import pickle
    buf = Buffer("a", "float32", (8,))
    nodes = [i * 64 + j, Cast(i, "float32"), Load(buf, i + 1), Select(lt(i, j), x, x * 2.0),
             call("exp", x), Unary("neg", x), Bitcast(x, "int32"), Const(-0.0, "float32")]
    for node in nodes:
        twin = pickle.loads(pickle.dumps(node))
        assert "_hash" not in twin.__dict__ and twin == node
        assert hash(twin) == hash(node) and "_hash" in node.__dict__
        assert "_hash" not in pickle.loads(pickle.dumps(node)).__dict__  # not even once cached
    assert hash(i * 64 + j) == hash(nodes[0]) and len({i * 64 + j, nodes[0]}) == 1
    assert Const(-0.0, "float32") != Const(0.0, "float32")  # still apart, cached or not
