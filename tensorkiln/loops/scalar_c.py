"""Scalar Python functions written once, run two ways: as numpy float64 code and as C.

Special functions (Bessel, digamma, erfinv, orthogonal polynomials ...) are short
numeric algorithms: series, Chebyshev or rational approximations, recurrences.
Each is written once as a Python function of float64 scalars in a small subset
of Python, and that one text is both the numpy reference (`reference`, run on
`np.float64` values, so IEEE semantics: overflow gives inf, 0/0 gives NaN) and,
translated here, the C the generated code calls (`c_pieces`). One fact in one
place: the algorithm cannot drift between the oracle and the compiled code;
the tests check both against PyTorch and scipy, which are independent.

The subset: arguments and locals are doubles; `for k in range(a, b[, step])`
(the loop variable is an int64, `int(v)` truncates as C's cast does, so guard
NaN and infinities first); `while`, `if`/`elif`/`else`, `break`, `continue`,
`return`; arithmetic, comparisons (chained too), `and`/`or`/`not`, `a if c else b`;
calls of the math functions in `MATH_NAMES`, of other `ScalarFunction`s and of
the polynomial helpers (`polevl(x, TABLE)`, `p1evl`, `chbevl`); tables are
module-level tuples of floats (`TABLE[i]` reads one, `len(TABLE)` is a constant).
"""
from __future__ import annotations

import ast
import inspect
import math
import textwrap
from fractions import Fraction
from dataclasses import dataclass
from typing import Callable

import numpy as np


def polevl(x, table):
    """Cephes' polevl: table[0] x^(n-1) + ... + table[n-1] (Horner)."""
    result = np.float64(0.0)
    for c in table:
        result = result * x + c
    return result


def p1evl(x, table):
    """Cephes' p1evl: polevl with an implicit leading coefficient 1."""
    result = np.float64(1.0)
    for c in table:
        result = result * x + c
    return result


def chbevl(x, table):
    """Cephes' chbevl: sum of table[i] T_i(x/2)-style Chebyshev series (Clenshaw's recurrence)."""
    b0, b1, b2 = np.float64(table[0]), np.float64(0.0), np.float64(0.0)
    for c in table[1:]:
        b2, b1 = b1, b0
        b0 = x * b1 - b2 + c
    return 0.5 * (b0 - b2)


POLYNOMIAL_C = {
    "polevl": """/* Cephes' polevl: c[0] x^(n-1) + ... + c[n-1], by Horner's rule */
static inline double tk_polevl(double x, const double *c, int n)
{
    double result = 0.0;
    for (int i = 0; i < n; ++i)
        result = result * x + c[i];
    return result;
}""",
    "p1evl": """/* Cephes' p1evl: polevl with an implicit leading coefficient 1 */
static inline double tk_p1evl(double x, const double *c, int n)
{
    double result = 1.0;
    for (int i = 0; i < n; ++i)
        result = result * x + c[i];
    return result;
}""",
    "chbevl": """/* Cephes' chbevl: a Chebyshev series by Clenshaw's recurrence */
static inline double tk_chbevl(double x, const double *c, int n)
{
    double b0 = c[0], b1 = 0.0, b2 = 0.0;
    for (int i = 1; i < n; ++i) {
        b2 = b1;
        b1 = b0;
        b0 = x * b1 - b2 + c[i];
    }
    return 0.5 * (b0 - b2);
}""",
}

def _lgamma(v):
    """log|Gamma(v)|, +inf at the poles (C's lgamma)."""
    try:
        return np.float64(math.lgamma(float(v)))
    except ValueError:
        return np.float64(math.inf)


def _erf(v):
    return np.float64(math.erf(float(v)))


def _erfc(v):
    return np.float64(math.erfc(float(v)))


# The math functions an algorithm may call, bound to numpy's (IEEE) versions for the reference; an
# algorithm's module imports them from here. C spells each as libm does, on doubles.
exp, expm1, log, log1p, log2, sqrt = np.exp, np.expm1, np.log, np.log1p, np.log2, np.sqrt
sin, cos, tan, sinh, cosh, tanh = np.sin, np.cos, np.tan, np.sinh, np.cosh, np.tanh
asin, acos, atan = np.arcsin, np.arccos, np.arctan
fabs, floor, ceil, trunc, rint, pow, fmod = np.fabs, np.floor, np.ceil, np.trunc, np.rint, np.power, np.fmod
copysign, fmin, fmax, isnan, isinf, isfinite = np.copysign, np.fmin, np.fmax, np.isnan, np.isinf, np.isfinite
ldexp = np.ldexp  # x * 2^k for an integer k (int(...)), exact
erf, erfc, lgamma = _erf, _erfc, _lgamma


def fma(a, b, c):
    """a*b + c rounded once (exact rational arithmetic), in the operands' float type."""
    if not all(np.isfinite([a, b, c])):
        return a * b + c
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    return np.float32(float(exact)) if isinstance(a, np.float32) else np.float64(float(exact))
MATH_NAMES = ("exp", "expm1", "log", "log1p", "log2", "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh",
              "asin", "acos", "atan", "fabs", "floor", "ceil", "trunc", "rint", "pow", "fmod", "copysign", "fmin", "fmax",
              "isnan", "isinf", "isfinite", "erf", "erfc", "lgamma", "fma", "ldexp")


@dataclass
class ScalarFunction:
    """A scalar algorithm of float64 arguments, as numpy (`reference`) and as C (`c_pieces`)."""

    python: Callable
    doc: str
    native: bool = False  # float32 computed in float32, as PyTorch does (else every dtype in float64)

    @property
    def name(self) -> str:
        return self.python.__name__

    @property
    def c_name(self) -> str:
        return f"tk_{self.name}"

    @property
    def arity(self) -> int:
        return len(inspect.signature(self.python).parameters)

    def __call__(self, *args):
        """The algorithm on scalars: float64, or float32 for a native function given float32 ones."""
        scalar = np.float32 if self.native and any(isinstance(a, np.float32) for a in args) else np.float64
        return self.python(*(scalar(a) for a in args))

    def reference(self, *arrays: np.ndarray) -> np.ndarray:
        """The function over broadcast arrays, in float64, returned in the first array's float dtype."""
        arrays = [np.asarray(a) for a in arrays]
        dtype = arrays[0].dtype if arrays[0].dtype.kind == "f" else np.dtype(np.float64)
        # numpy float32 scalars compute in float32 (Python's numbers are weak), as C's float does
        scalar = np.float32 if self.native and dtype == np.float32 else np.float64
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
        flat = [np.broadcast_to(a.astype(scalar), shape).reshape(-1) for a in arrays]
        out = np.empty(int(np.prod(shape)), dtype=scalar)
        with np.errstate(all="ignore"):
            for i in range(out.size):
                out[i] = self.python(*(f[i] for f in flat))
        return out.reshape(shape).astype(dtype)

    def c_pieces(self) -> tuple[str, ...]:
        """The C definitions: helpers and tables this function uses, then the double and float versions."""
        writer = _CWriter(self, "double")
        body = writer.function()
        pieces: list[str] = []
        for helper in sorted(writer.helpers):
            pieces.append(POLYNOMIAL_C[helper])
        for callee in writer.callees:
            for piece in callee.c_pieces():
                if piece not in pieces:
                    pieces.append(piece)
        for name, values in writer.tables.items():
            rows = ",\n".join("    " + ", ".join(repr(float(v)) for v in values[i:i + 3])
                              for i in range(0, len(values), 3))
            pieces.append(f"static const double {_table_name(name)}[{len(values)}] = {{\n{rows},\n}};")
        if self.native:
            pieces.append(body + "\n\n" + _CWriter(self, "float").function())
            return tuple(pieces)
        params = ", ".join(f"float {p}" for p in inspect.signature(self.python).parameters)
        args = ", ".join(f"(double){p}" for p in inspect.signature(self.python).parameters)
        pieces.append(body + f"\n\nstatic inline float {self.c_name}f({params})\n{{\n"
                             f"    return (float){self.c_name}({args});\n}}")
        return tuple(pieces)


def scalar_function(python: Callable | None = None, *, native: bool = False):
    """Wrap a scalar algorithm (see the module docstring for the subset it may use); `native=True`
    computes float32 in float32 (C's float, numpy's float32 scalars) rather than in float64."""
    if python is None:
        return lambda fn: scalar_function(fn, native=native)
    return ScalarFunction(python, inspect.getdoc(python) or python.__name__, native)


_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


class _CWriter:
    """Translates one ScalarFunction's Python source to a C function of doubles."""

    def __init__(self, function: ScalarFunction, ctype: str):
        self.function_ = function
        self.ctype = ctype  # "double", or "float" for a native function's float32 version
        self.suffix = "f" if ctype == "float" else ""
        self.globals = function.python.__globals__
        self.tables: dict[str, tuple] = {}
        self.helpers: set[str] = set()
        self.callees: list[ScalarFunction] = []
        self.locals: set[str] = set()
        self.ints: set[str] = set()

    def fail(self, node: ast.AST, what: str):
        raise SyntaxError(f"{self.function_.name}: {what} is outside the scalar subset "
                          f"(line {getattr(node, 'lineno', '?')})")

    def function(self) -> str:
        tree = ast.parse(textwrap.dedent(inspect.getsource(self.function_.python)))
        fn = tree.body[0]
        assert isinstance(fn, ast.FunctionDef)
        params = [a.arg for a in fn.args.args]
        self.locals = set(params)
        body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        for node in ast.walk(fn):
            if isinstance(node, ast.For):
                self.ints.add(node.target.id)
        assigned = sorted({t.id for node in ast.walk(fn) for t in _targets(node)} - set(params) - self.ints)
        lines = [f"    {self.ctype} {', '.join(assigned)};"] if assigned else []
        lines += [f"    int64_t {', '.join(sorted(self.ints))};"] if self.ints else []
        self.locals |= set(assigned) | self.ints
        for s in body:
            lines += self.stmt(s, 1)
        doc = "\n".join(" * " + line if line else " *" for line in self.function_.doc.splitlines())
        signature = ", ".join(f"{self.ctype} {p}" for p in params)
        t = self.ctype
        prototypes = "".join(f"static inline {t} {c.c_name}{self.suffix}({', '.join([t] * c.arity)});\n"
                             for c in self.callees)
        return (f"/* {self.function_.name} ({t}):\n{doc}\n */\n{prototypes}"
                f"static inline {t} {self.function_.c_name}{self.suffix}({signature})\n{{\n"
                + "\n".join(lines) + "\n}")

    # ---- statements

    def stmt(self, s: ast.stmt, depth: int) -> list[str]:
        pad = "    " * depth
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            return [f"{pad}{s.targets[0].id} = {self.expr(s.value)};"]
        if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and type(s.op) in _BINARY:
            return [f"{pad}{s.target.id} {_BINARY[type(s.op)]}= {self.expr(s.value)};"]
        if isinstance(s, ast.Return) and s.value is not None:
            return [f"{pad}return {self.expr(s.value)};"]
        if isinstance(s, ast.If):
            lines = [f"{pad}if ({self.expr(s.test)}) {{"] + self.block(s.body, depth + 1)
            while len(s.orelse) == 1 and isinstance(s.orelse[0], ast.If):
                s = s.orelse[0]
                lines += [f"{pad}}} else if ({self.expr(s.test)}) {{"] + self.block(s.body, depth + 1)
            if s.orelse:
                lines += [f"{pad}}} else {{"] + self.block(s.orelse, depth + 1)
            return lines + [f"{pad}}}"]
        if isinstance(s, ast.While) and not s.orelse:
            return [f"{pad}while ({self.expr(s.test)}) {{"] + self.block(s.body, depth + 1) + [f"{pad}}}"]
        if isinstance(s, ast.For) and not s.orelse and isinstance(s.iter, ast.Call) \
                and isinstance(s.iter.func, ast.Name) and s.iter.func.id == "range":
            bounds = [self.index(a) for a in s.iter.args]
            start, stop = (bounds[0], bounds[1]) if len(bounds) > 1 else ("0", bounds[0])
            step = bounds[2] if len(bounds) > 2 else "1"
            var = s.target.id
            step_node = s.iter.args[2] if len(s.iter.args) > 2 else None
            descending = isinstance(step_node, ast.UnaryOp) and isinstance(step_node.op, ast.USub)
            compare = ">" if descending else "<"
            return ([f"{pad}for ({var} = {start}; {var} {compare} {stop}; {var} += {step}) {{"]
                    + self.block(s.body, depth + 1) + [f"{pad}}}"])
        if isinstance(s, ast.Break):
            return [f"{pad}break;"]
        if isinstance(s, ast.Continue):
            return [f"{pad}continue;"]
        self.fail(s, type(s).__name__)

    def block(self, body: list[ast.stmt], depth: int) -> list[str]:
        return [line for s in body for line in self.stmt(s, depth)]

    # ---- expressions (fully parenthesized: the reader sees the Python's grouping)

    def expr(self, e: ast.expr) -> str:
        if isinstance(e, ast.Constant) and isinstance(e.value, (int, float)) and not isinstance(e.value, bool):
            return _literal(e.value, self.suffix)
        if isinstance(e, ast.Name):
            if e.id in self.locals:
                return e.id
            value = self.globals.get(e.id)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return _literal(value, self.suffix)
            self.fail(e, f"the name {e.id!r}")
        if isinstance(e, ast.BinOp) and type(e.op) in _BINARY:
            return f"({self.expr(e.left)} {_BINARY[type(e.op)]} {self.expr(e.right)})"
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            return f"(-{self.expr(e.operand)})"
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            return f"(!{self.expr(e.operand)})"
        if isinstance(e, ast.BoolOp):
            joiner = " && " if isinstance(e.op, ast.And) else " || "
            return "(" + joiner.join(self.expr(v) for v in e.values) + ")"
        if isinstance(e, ast.Compare) and all(type(op) in _COMPARE for op in e.ops):
            operands = [e.left] + e.comparators
            parts = [f"({self.expr(a)} {_COMPARE[type(op)]} {self.expr(b)})"
                     for a, op, b in zip(operands, e.ops, operands[1:])]
            return parts[0] if len(parts) == 1 else "(" + " && ".join(parts) + ")"
        if isinstance(e, ast.IfExp):
            return f"({self.expr(e.test)} ? {self.expr(e.body)} : {self.expr(e.orelse)})"
        if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Name):
            return f"{self.table(e.value)}[{self.index(e.slice)}]"
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name):
            return self.call(e)
        self.fail(e, ast.dump(e)[:60])

    def index(self, e: ast.expr) -> str:
        """An integer expression (a table index, a range bound): int constants, loop variables, + - *."""
        if isinstance(e, ast.Constant) and isinstance(e.value, int) and not isinstance(e.value, bool):
            return str(e.value)
        if isinstance(e, ast.Name) and e.id in self.ints:
            return e.id
        if isinstance(e, ast.BinOp) and type(e.op) in (ast.Add, ast.Sub, ast.Mult):
            return f"({self.index(e.left)} {_BINARY[type(e.op)]} {self.index(e.right)})"
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            return f"(-{self.index(e.operand)})"
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "int":
            return self.expr(e)
        self.fail(e, "a non-integer index or range bound")

    def table(self, name: ast.Name) -> str:
        values = self.globals.get(name.id)
        if self.ctype != "double":
            self.fail(name, "a table in a native function")
        if not isinstance(values, tuple):
            self.fail(name, f"the table {name.id!r} (tables are module-level tuples)")
        self.tables[name.id] = values
        return _table_name(name.id)

    def call(self, e: ast.Call) -> str:
        name = e.func.id
        if name == "len" and len(e.args) == 1 and isinstance(e.args[0], ast.Name):
            self.table(e.args[0])
            return str(len(self.globals[e.args[0].id]))
        if name == "int" and len(e.args) == 1:
            return f"((int64_t){self.expr(e.args[0])})"
        if name == "float" and len(e.args) == 1:
            return f"(({self.ctype}){self.expr(e.args[0])})"
        if name in POLYNOMIAL_C and len(e.args) == 2 and isinstance(e.args[1], ast.Name):
            self.helpers.add(name)
            table = self.table(e.args[1])
            return f"tk_{name}({self.expr(e.args[0])}, {table}, {len(self.globals[e.args[1].id])})"
        if name in MATH_NAMES:
            spelled = name if name.startswith("is") else name + self.suffix  # isnan ... are type-generic
            return f"{spelled}({', '.join(self.expr(a) for a in e.args)})"
        callee = self.globals.get(name)
        if isinstance(callee, ScalarFunction):
            if callee not in self.callees:
                self.callees.append(callee)
            return f"{callee.c_name}{self.suffix}({', '.join(self.expr(a) for a in e.args)})"
        self.fail(e, f"a call of {name!r}")


def _targets(node: ast.AST) -> list[ast.Name]:
    if isinstance(node, ast.Assign):
        return [t for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
        return [node.target]
    return []


def _table_name(name: str) -> str:
    """A table's C name: tables are module-level names, unique across the algorithms' modules."""
    return f"tk_table_{name.lower()}"


def _literal(value: float, suffix: str = "") -> str:
    """A C literal (double, or float with suffix "f") that reads back exactly."""
    value = float(value)
    if value != value:
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    text = repr(value)
    return (text if any(ch in text for ch in ".e") else text + ".0") + suffix
