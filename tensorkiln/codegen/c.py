"""C99 + OpenMP code generation from loop IR.

## C backend (for docs/architecture.md)

`generate_c(program)` turns one `Program` (all kernels of one graph) into one
C translation unit, so a graph costs one compiler call however many kernels
it has:

- a prelude (c_prelude.py) with the helpers that give C the IR's semantics:
  floor division/modulo, NaN-propagating min/max, float16/bfloat16
  conversions, and the error state;
- one `static void kernel_<name>(...)` function per kernel, preceded by a
  comment naming the graph nodes it implements. Parameters are
  `T *restrict name` (`const` when the kernel only reads them): the program
  never passes one buffer twice to a kernel, so they do not alias;
- one exported entry, `int tk_entry(void *const *args, void *arena)`: `args`
  holds the inputs, outputs and constants in signature order; intermediates
  live at fixed offsets in `arena`, which the runtime allocates once (a
  memory planner only has to choose the offsets). The entry calls the
  kernels in order and returns 0, or the code of the first failure;
- `tk_last_error()`, `tk_arena_bytes()` and `tk_signature()` for the runtime;
- in a program with runtime calls (collectives: a kernel whose body is a
  `RuntimeCall`), a hook pointer the runtime sets through the exported
  `tk_set_runtime_hook` (runtime/hooks.py), and each call as
  `tk_runtime_hook("what", out, in)`: the generated code never links MPI.

Loop kinds map to: `parallel` -> `#pragma omp parallel for` (with
`collapse(n)` over perfectly nested parallel loops, and `if(cond)` when the
loop's `threads_if` decides at run time); `vectorized` ->
`#pragma omp simd`, which with `-O3 -march=native` gives real AVX2/AVX-512
vector code and stays a plain C loop to read (GCC vector types would make
the source harder to read for no gain at this level); `unrolled` ->
`#pragma GCC unroll`. A scalar that a parallel or vectorized loop updates as
`acc = acc op x` (op: + * min max) becomes a `reduction(op:acc)` clause; any
other loop-carried scalar makes that loop serial, with a comment saying why.

Next-row prefetch (`RowPrefetch`): in a loop over rows whose body makes
several passes over one row (a row kernel: softmax, layer norm), the second
pass prefetches the next row of the buffers the first pass streamed, so the
memory works while the cached row is computed on.

Debug mode (`generate_c(program, debug=True)`) checks every load and store
whose index the interval analysis cannot prove in range: a failed check
records "kernel K: load of B[i] out of bounds (buffer size n)", skips the
access (a store is dropped, a load reads element 0), and the entry returns
non-zero, which the runtime raises as a Python exception. SIMD pragmas are
left out in debug mode (a check has side effects). The runtime compiles
debug code with -O1 -g -fsanitize=undefined, and -fsanitize=address on
request: see tensorkiln/runtime/c_compiler.py for why ASan is opt-in.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from tensorkiln.codegen.c_prelude import C_TYPES, PROMOTED_INTS, c_prelude
from tensorkiln.codegen.c_stream import STREAM_HELPERS, stream_copy, streams
from tensorkiln.loops.bounds import Bounds
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import (
    BinOp, Bitcast, Call, Cast, Const, Expr, Load, Select, Unary, Var, is_size_var, lift, walk,
)
from tensorkiln.loops.math import MATH_FUNCTIONS
from tensorkiln.loops.ir import (
    Alloc, Assign, Block, Concurrent, For, If, Kernel, Let, NativeCall, Pointer, ProgramCall, RuntimeCall, Stmt,
    Store, While, iter_stmts, simplify_kernel, stmt_exprs,
)
from tensorkiln.codegen.c_names import c_name, check_unique_c_names, kernel_function_name, program_function_name
from tensorkiln.codegen.c_native import native_helpers
from tensorkiln.codegen.c_prefetch import RowPrefetch, row_prefetch
from tensorkiln.loops.program import Program
from tensorkiln.loops.types import int_range, is_bool, is_float, itemsize
from tensorkiln.runtime.signature import ArgSpec, Signature
from tensorkiln.shapes.symint import upper_bound

STACK_LIMIT_BYTES = 16 * 1024  # local buffers up to this size live on the stack
INDENT = "    "

# Binary operators written infix in C: symbol and C precedence (higher binds tighter).
_INFIX = {
    "add": ("+", 12), "sub": ("-", 12), "mul": ("*", 13), "div": ("/", 13),
    "lt": ("<", 10), "le": ("<=", 10), "eq": ("==", 9), "ne": ("!=", 9),
    "and": ("&&", 5), "or": ("||", 4),
    "bitand": ("&", 8), "bitxor": ("^", 7), "bitor": ("|", 6), "shl": ("<<", 11), "shr": (">>", 11),
}
_ATOM, _UNARY, _TERNARY = 16, 15, 3
_REDUCTION_OPS = {"add": "+", "mul": "*", "min": "min", "max": "max"}


@dataclass(frozen=True)
class CSource:
    """Generated C text and the calling signature of its entry function."""

    text: str
    signature: Signature
    debug: bool
    program_name: str


def _comment(text: str) -> str:
    return text.replace("*/", "* /")


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


def _float_bound(e: Expr) -> "Const | None":
    """`e` when it is a float constant other than NaN (min/max against it need no NaN test)."""
    if isinstance(e, Const) and is_float(e.dtype) and e.value == e.value:
        return e
    return None


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


_SELECT_TYPES = ("float32", "float64")  # the prelude's tk_select_<type>


def _constant_divisor(e: BinOp) -> bool:
    """An integer division or modulo by a constant that cannot trap (not 0, not -1)."""
    return isinstance(e.b, Const) and e.b.value not in (0, -1)


class _KernelWriter:
    """Emits one kernel function; tracks loop ranges (for bounds) and the parallel context."""

    def __init__(self, kernel: Kernel, debug: bool, aliased: frozenset = frozenset()):
        self.kernel = kernel
        self.debug = debug
        self.aliased = aliased  # buffers updated in place: their pointers may alias, so no restrict
        self.lines: list[str] = []
        self.ranges: dict[str, tuple[int, int]] = {}
        self.written = kernel.written_buffers()
        self.prefetch_at: dict[int, RowPrefetch] = {}  # id of a pass -> the next rows it prefetches
        self.prefetching: Optional[RowPrefetch] = None  # set while such a pass is written
        self.native_sources: dict[str, str] = {}  # function -> C definition, of the NativeCalls written
        self.may_stream = not debug and streams(kernel.body)  # some loop is a stream copy (c_stream.py)
        self.streamed = False  # a loop became tk_stream_f32 calls: the file needs the helpers
        # where a failed sub-program call leaves: the kernel, or (inside an OpenMP section, which a
        # return may not leave) the end of that section
        self.failure_exit = "return;"
        self.sections = 0

    # ---- expressions

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
                # truncate, saturate, NaN to 0: one inline helper, its operand evaluated once
                return f"tk_to_{e.dtype}_{e.x.dtype}({inner})", _ATOM
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
        symbol, prec = _INFIX[op]
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
        other = "max" if op == "min" else "min"
        if isinstance(value, BinOp) and value.operator == other:
            inner_bound, inner = _float_bound(value.b), value.a
            if inner_bound is None:
                inner_bound, inner = _float_bound(value.a), value.b
            low, high = (inner_bound, bound) if op == "min" else (bound, inner_bound)
            if inner_bound is not None and low.value <= high.value:
                # min(max(x, low), high) = max(min(x, high), low) = clamp(x, low, high)
                return (f"tk_clamp_{dtype}({self.expr(inner)[0]}, {self.expr(low)[0]}, "
                        f"{self.expr(high)[0]})", _ATOM)
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
            code = f'tk_checked_index({code}, {self.size_c(buffer)}, "{self.kernel.name}", "{buffer.name}")'
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

    # ---- statements

    def emit(self, depth: int, line: str) -> None:
        self.lines.append(INDENT * depth + line if line else "")

    def stmt(self, s: Stmt, depth: int, in_parallel: bool, in_simd: bool) -> None:
        plan = self.prefetch_at.pop(id(s), None)
        if plan is not None:  # the pass that prefetches the next row: its first block loop does
            self.prefetching = plan
            self.stmt(s, depth, in_parallel, in_simd)
            self.prefetching = None
            return
        if isinstance(s, Block):
            for child in s.stmts:
                self.stmt(child, depth, in_parallel, in_simd)
        elif isinstance(s, For):
            self.loop(s, depth, in_parallel, in_simd)
        elif isinstance(s, Store):
            self.store(s, depth)
        elif isinstance(s, Let):
            self.emit(depth, f"{C_TYPES[s.var.dtype]} {c_name(s.var.name)} = {self.expr(s.value)[0]};")
        elif isinstance(s, Assign):
            self.assign(s, depth)
        elif isinstance(s, If):
            self.emit(depth, f"if ({self.expr(s.cond)[0]}) {{")
            self.stmt(s.then, depth + 1, in_parallel, in_simd)
            if s.else_ is not None:
                self.emit(depth, "} else {")
                self.stmt(s.else_, depth + 1, in_parallel, in_simd)
            self.emit(depth, "}")
        elif isinstance(s, Alloc):
            self.alloc(s, depth, in_parallel, in_simd)
        elif isinstance(s, RuntimeCall):
            self.runtime_call(s, depth)
        elif isinstance(s, NativeCall):
            self.native_call(s, depth)
        elif isinstance(s, ProgramCall):
            self.program_call(s, depth)
        elif isinstance(s, Concurrent):
            self.concurrent(s, depth, in_parallel, in_simd)
        elif isinstance(s, While):
            self.emit(depth, f"while ({self.expr(s.cond)[0]}) {{")
            self.stmt(s.body, depth + 1, in_parallel, in_simd)
            self.emit(depth, "}")
        else:
            raise TypeError(f"cannot generate C for {s!r}")

    def program_call(self, s: ProgramCall, depth: int) -> None:
        """A call of a sub-program's entry (a branch or loop body); its failure is the kernel's."""
        def address(a: Pointer) -> str:
            offset = self.expr(a.offset)[0]
            name = c_name(a.buffer.name)
            return f"(void *){name}" if offset == "0" else f"(void *)&{name}[{offset}]"

        arena = address(s.arena) if s.arena is not None else "0"
        self.emit(depth, "{")
        self.emit(depth + 1, f"void *tk_args[] = {{{', '.join(address(a) for a in s.args) or '0'}}};")
        self.emit(depth + 1, f"if ({program_function_name(s.program)}(tk_args, {arena}) != TK_OK) {self.failure_exit}")
        self.emit(depth, "}")

    def concurrent(self, s: Concurrent, depth: int, in_parallel: bool, in_simd: bool) -> None:
        """Independent parts as OpenMP sections, one thread each (serially inside a parallel region);
        a failure in one part ends that part, and the others stop at their next sub-program call."""
        if in_parallel or in_simd or len(s.parts) < 2:
            for part in s.parts:
                self.stmt(part, depth, in_parallel, in_simd)
            return
        self.emit(depth, f"#pragma omp parallel sections num_threads({len(s.parts)})")
        self.emit(depth, "{")
        outer_exit = self.failure_exit
        for part in s.parts:
            self.sections += 1
            label = f"tk_section{self.sections}_end"
            self.failure_exit = f"goto {label};"
            self.emit(depth + 1, "#pragma omp section")
            self.emit(depth + 1, "{")
            start = len(self.lines)
            self.stmt(part, depth + 2, True, False)
            if any(f"goto {label};" in line for line in self.lines[start:]):
                self.emit(depth + 1, f"{label}: ;")
            self.emit(depth + 1, "}")
        self.failure_exit = outer_exit
        self.emit(depth, "}")

    def runtime_call(self, s: RuntimeCall, depth: int) -> None:
        """A call of the runtime hook (RUNTIME_HOOK); a failure is the kernel's error."""
        if len(s.writes) > 1 or len(s.reads) > 1:
            raise TypeError(f"a runtime call writes at most one buffer and reads at most one, got {s!r}")
        what = s.what.replace("\\", "\\\\").replace('"', '\\"')
        out = c_name(s.writes[0].name) if s.writes else "0"
        source = c_name(s.reads[0].name) if s.reads else "0"
        self.emit(depth, f'if (tk_runtime_hook == 0 || tk_runtime_hook("{what}", {out}, {source}) != 0)')
        self.emit(depth + 1, f'tk_fail(TK_ERR_RUNTIME, "runtime call failed: {what}");')

    def native_call(self, s: NativeCall, depth: int) -> None:
        """A C helper's call (its definition goes once into the file: `native_sources`): the call's
        own source, or the helper of that name in codegen/c_native.py."""
        args = [f"&{c_name(a.buffer.name)}[{self.expr(a.offset)[0]}]" if isinstance(a, Pointer)
                else self.expr(a)[0] for a in s.args]
        self.native_sources.setdefault(s.function, s.source or native_helpers({s.function}))
        self.emit(depth, f"{s.function}({', '.join(args)});")

    def store(self, s: Store, depth: int) -> None:
        buffer = s.buffer
        value = self.expr(_rounding_dropped(s.value) if buffer.dtype == "bfloat16" else s.value)[0]
        if buffer.dtype == "float16":
            value = f"tk_f32_to_f16({value})"
        elif buffer.dtype == "bfloat16":
            widened = "tk_bf16_to_f32("
            if isinstance(s.value, Load) and s.value.buffer.dtype == "bfloat16" and value.startswith(widened):
                value = value[len(widened):-1]  # a bf16 copied from a bf16 buffer: its bits (widening, rounding exact)
            else:
                value = f"tk_f32_to_bf16({value})"
        code, checked = self.index(buffer, s.index)
        target = f"{c_name(buffer.name)}[{code}] = {value};"
        if checked:
            self.emit(depth, f'if (tk_in_bounds({code}, {self.size_c(buffer)}, "{self.kernel.name}", '
                             f'"{buffer.name}", "store")) {{')
            self.emit(depth + 1, target)
            self.emit(depth, "}")
        else:
            self.emit(depth, target)

    def assign(self, s: Assign, depth: int) -> None:
        name = c_name(s.var.name)
        v = s.value
        # acc = acc + x reads better as acc += x
        if isinstance(v, BinOp) and v.operator in ("add", "sub", "mul") and v.a == s.var:
            symbol = _INFIX[v.operator][0]
            self.emit(depth, f"{name} {symbol}= {self.expr(v.b)[0]};")
            return
        self.emit(depth, f"{name} = {self.expr(v)[0]};")

    def alloc(self, s: Alloc, depth: int, in_parallel: bool, in_simd: bool) -> None:
        buffer = s.buffer
        ctype = C_TYPES[buffer.dtype]
        name = c_name(buffer.name)
        size = max(buffer.size, 1)
        # a run-time size goes on the stack only where its symbols' bounds keep it small: asking its
        # trace-time value would pin a size class (a guard) for a choice the heap serves at every size
        if upper_bound(buffer.nbytes) <= STACK_LIMIT_BYTES:
            self.emit(depth, "{")
            # Accessed through a restrict pointer: with the array itself, GCC 12 loses track that two
            # local arrays are distinct once it vectorizes their accesses, and then keeps register
            # tiles (a micro-kernel's accumulators) in memory.
            count = size if isinstance(size, int) else self.size_c(buffer)
            self.emit(depth + 1, f"{ctype} tk_local_{name}[{count}] __attribute__((aligned(64)));  /* {buffer} */")
            self.emit(depth + 1, f"{ctype} *restrict {name} = tk_local_{name};")
            self.stmt(s.body, depth + 1, in_parallel, in_simd)
            self.emit(depth, "}")
            return
        self.emit(depth, "{")
        self.emit(depth + 1, f"/* {buffer}: {buffer.nbytes} bytes, too large for the stack */")
        nbytes = f"{buffer.nbytes}u" if isinstance(buffer.nbytes, int) else \
            f"(size_t)({self.size_c(buffer)}) * sizeof({ctype})"
        self.emit(depth + 1, f'{ctype} *{name} = ({ctype} *)tk_alloc({nbytes}, '
                             f'"{self.kernel.name}", "{buffer.name}");')
        self.emit(depth + 1, f"if ({name} != NULL) {{")
        self.stmt(s.body, depth + 2, in_parallel, in_simd)
        self.emit(depth + 2, f"free({name});")
        self.emit(depth + 1, "}")
        self.emit(depth, "}")

    def loop(self, s: For, depth: int, in_parallel: bool, in_simd: bool) -> None:
        copy = stream_copy(s) if self.may_stream else None
        if copy is not None:
            store, dst_base, src_base = copy
            self.streamed = True
            self.emit(depth, f"tk_stream_f32(&{c_name(store.buffer.name)}[{self.expr(dst_base)[0]}], "
                             f"&{c_name(store.value.buffer.name)}[{self.expr(src_base)[0]}], "
                             f"{self.expr(s.extent)[0]});")
            return
        # the thread that made streaming stores fences them: after a serial loop that holds them,
        # or at the end of each thread's share of a parallel one
        fence = self.may_stream and not in_parallel and streams(s)
        if fence and s.kind == "parallel" and not in_simd and self._parallel_clauses(s)[1] is None:
            self.emit(depth, f"#pragma omp parallel{self._threads_if(s)}")
            self.emit(depth, "{")
            self.loop_nest(s, depth + 1, in_parallel, in_simd, shared=True)
            self.emit(depth + 1, "tk_stream_fence();")
            self.emit(depth, "}")
            return
        self.loop_nest(s, depth, in_parallel, in_simd)
        if fence:
            self.emit(depth, "tk_stream_fence();")

    def loop_nest(self, s: For, depth: int, in_parallel: bool, in_simd: bool, shared: bool = False) -> None:
        """The C loops of `s`; `shared`: inside an `omp parallel` region already (`omp for`, not `omp parallel for`)."""
        nest = [s]
        pragma: Optional[str] = None
        note: Optional[str] = None
        kind = "vectorized" if s.kind == "streamed" else s.kind
        if kind == "parallel" and (in_parallel or in_simd):
            kind, note = "serial", "parallel loop inside a parallel/simd region: runs serially"
        if kind == "vectorized" and in_simd:
            kind, note = "serial", "vectorized loop inside a simd loop: runs as a plain loop"
        if kind == "vectorized" and self.debug:
            kind, note = "serial", "simd off in debug mode (bounds checks have side effects)"
        if kind == "parallel":
            nest = self._collapsible(s)
        if kind in ("parallel", "vectorized"):
            clauses, problem = _reduction_clauses(nest[-1].body, [loop.var.name for loop in nest])
            if problem is not None:
                kind, note, nest = "serial", f"{s.kind} loop left serial: {problem}", [s]
            else:
                head = ("omp for" if shared else "omp parallel for") if kind == "parallel" else "omp simd"
                collapse = f" collapse({len(nest)})" if len(nest) > 1 else ""
                threads_if = self._threads_if(s) if kind == "parallel" and not shared else ""
                pragma = f"#pragma {head}{collapse}{clauses}{threads_if}"
        if kind == "unrolled":
            extent = s.extent.value if isinstance(s.extent, Const) else 8
            pragma = f"#pragma GCC unroll {min(max(int(extent), 1), 65534)}"
        if note:
            self.emit(depth, f"/* {note} */")
        if pragma:
            self.emit(depth, pragma)
        for level, loop in enumerate(nest):
            extent = self.expr(loop.extent)[0]
            hi = self.bounds()(loop.extent)[1]
            var = c_name(loop.var.name)
            self.emit(depth + level, f"for (int64_t {var} = 0; {var} < {extent}; {var}++) {{")
            self.ranges[loop.var.name] = (0, max(hi - 1, 0))
        inner = nest[-1]
        if not self.debug:
            plan = row_prefetch(inner)
            if plan is not None:
                self.prefetch_at[id(plan.pass_stmt)] = plan
            if self.prefetching is not None and kind == "serial":
                lines = self.prefetching.lines(inner, self)
                if lines:
                    self.prefetching = None
                    self.emit(depth + len(nest), "/* the next row streams from memory while this pass computes */")
                    for line in lines:
                        self.emit(depth + len(nest), line)
        self.stmt(inner.body, depth + len(nest), in_parallel or kind == "parallel", in_simd or kind == "vectorized")
        for level in reversed(range(len(nest))):
            self.emit(depth + level, "}")
            self.ranges.pop(nest[level].var.name, None)

    def _threads_if(self, s: For) -> str:
        """OpenMP's `if` clause of a parallel loop that spreads over threads only at some run-time sizes."""
        return "" if s.threads_if is None else f" if({self.expr(s.threads_if)[0]})"

    def _parallel_clauses(self, s: For) -> tuple[str, Optional[str]]:
        """The reduction clauses of parallel loop `s` with the loops collapsed into it, or the problem."""
        nest = self._collapsible(s)
        return _reduction_clauses(nest[-1].body, [loop.var.name for loop in nest])

    def _collapsible(self, s: For) -> list[For]:
        """The perfectly nested parallel loops starting at `s` whose extents do not depend on each other."""
        nest = [s]
        while True:
            body = nest[-1].body
            if isinstance(body, Block) and len(body.stmts) == 1:
                body = body.stmts[0]
            if not (isinstance(body, For) and body.kind == "parallel"):
                return nest
            outer_vars = {loop.var.name for loop in nest}
            if any(isinstance(n, Var) and n.name in outer_vars for n in walk(body.extent)):
                return nest
            nest.append(body)

    # ---- the function

    def function(self) -> list[str]:
        k = self.kernel
        declared = {p.name for p in k.params}
        for s in iter_stmts(k.body):
            if isinstance(s, (For, Let)):
                declared.add(s.var.name)
            elif isinstance(s, Alloc):
                declared.add(s.buffer.name)
        check_unique_c_names(sorted(declared), f"kernel {k.name}")
        params = []
        for p in k.params:
            const = "" if p.name in self.written else "const "
            restrict = "" if p.name in self.aliased else "restrict "
            params.append(f"{const}{C_TYPES[p.dtype]} *{restrict}{c_name(p.name)}")
        self.emit(0, "/*")
        self.emit(0, f" * kernel {k.name}")
        for line in k.comment.splitlines():
            self.emit(0, _comment(f" *   {line}".rstrip()))
        for p in k.params:
            role = "written" if p.name in self.written else "read"
            self.emit(0, _comment(f" *   {p} ({role})"))
        self.emit(0, " */")
        head = f"static void {kernel_function_name(k)}("
        if len(head) + sum(len(p) + 2 for p in params) > 100:  # one parameter per line
            self.emit(0, head)
            for n, param in enumerate(params):
                self.emit(1, param + ("," if n < len(params) - 1 else ")"))
        else:
            self.emit(0, f"{head}{', '.join(params) or 'void'})")
        self.emit(0, "{")
        for size in _kernel_size_vars(k):  # a local copy: the compiler sees it cannot change in the kernel
            self.emit(1, f"const int64_t {c_name(size)} = tk_size_{size};")
        used = {n.buffer.name for s in iter_stmts(k.body) for e in stmt_exprs(s) for n in walk(e)
                if isinstance(n, Load)} | {s.buffer.name for s in iter_stmts(k.body) if isinstance(s, Store)} | \
            {b.name for s in iter_stmts(k.body) if isinstance(s, RuntimeCall) for b in s.writes + s.reads}
        used |= {a.buffer.name for s in iter_stmts(k.body) if isinstance(s, NativeCall) for a in s.args
                 if isinstance(a, Pointer)}
        used |= {a.buffer.name for s in iter_stmts(k.body) if isinstance(s, ProgramCall) for a in s.pointers()}
        for p in k.params:
            if p.name not in used:
                self.emit(1, f"(void){c_name(p.name)};  /* unused */")
        self.stmt(k.body, 1, False, False)
        self.emit(0, "}")
        return self.lines


def _reduction_clauses(body: Stmt, loop_vars: list[str]) -> tuple[str, Optional[str]]:
    """OpenMP reduction clauses for scalars `body` carries across iterations, or a reason it cannot.

    A scalar declared outside the loop may only be updated as `acc = acc op x`
    (op in + * min max, one op per scalar, x not reading acc) and read nowhere
    else in the loop; each such scalar gets `reduction(op:acc)`.
    """
    declared_inside = {s.var.name for s in iter_stmts(body) if isinstance(s, Let)}
    ops: dict[str, str] = {}
    self_reads: dict[str, int] = {}
    for s in iter_stmts(body):
        if not isinstance(s, Assign) or s.var.name in declared_inside:
            continue
        name, v = s.var.name, s.value
        if name in loop_vars:
            return "", f"assigns loop variable {name}"
        if not (isinstance(v, BinOp) and v.operator in _REDUCTION_OPS):
            return "", f"scalar {name} is carried across iterations (not acc = acc op x)"
        other = v.b if v.a == s.var else (v.a if v.b == s.var else None)
        if other is None or any(isinstance(n, Var) and n.name == name for n in walk(other)):
            return "", f"scalar {name} is carried across iterations (not acc = acc op x)"
        if ops.setdefault(name, v.operator) != v.operator:
            return "", f"scalar {name} is reduced with two different operators"
        self_reads[name] = self_reads.get(name, 0) + 1
    for name in ops:
        reads = sum(1 for s in iter_stmts(body) for e in stmt_exprs(s) for n in walk(e)
                    if isinstance(n, Var) and n.name == name)
        if reads != self_reads[name]:
            return "", f"scalar {name} is read inside the loop while being reduced"
    clauses = "".join(f" reduction({_REDUCTION_OPS[op]}:{c_name(name)})" for name, op in sorted(ops.items()))
    return clauses, None


def _smallest_size(buffer: Buffer) -> int:
    """The fewest elements `buffer` can have: its size, or for a symbolic size its value with every
    size symbol at its lower bound (what proofs of in-range indices may rely on)."""
    size = buffer.size
    if isinstance(size, int):
        return size
    return max(int(Bounds()(lift(size, Const(0)))[0]), 0)


def _size_vars(e: Expr) -> set[str]:
    return {n.name for n in walk(e) if isinstance(n, Var) and is_size_var(n.name)}


def _kernel_size_vars(kernel: Kernel) -> list[str]:
    """The size symbols a kernel reads (loop extents, indices, buffer sizes), sorted."""
    names: set[str] = set()
    for s in iter_stmts(kernel.body):
        for e in stmt_exprs(s):
            names |= _size_vars(e)
    for b in kernel.params:
        if not isinstance(b.size, int):
            names |= _size_vars(lift(b.size, Const(0)))
    return sorted(names)


def _size_code(value) -> str:
    """C code for a size outside any kernel (an arena offset): an int, or an expression over size symbols."""
    if isinstance(value, int):
        return str(value)
    return _KernelWriter(Kernel("entry", (), Block(())), False).expr(lift(value, Const(0)))[0]


def _size_globals(program: Program) -> list[str]:
    """The size symbols' values of the current call, set by the entry, read by the kernels."""
    if not program.sizes:
        return []
    return ["/* size symbols: set by tk_entry from its sizes argument on every call */"] + \
        [f"static int64_t tk_size_{size};" for size in program.sizes] + [""]


def _signature(program: Program) -> Signature:
    def specs(buffers: tuple[Buffer, ...], role: str) -> tuple[ArgSpec, ...]:
        return tuple(ArgSpec(b.name, b.dtype, tuple(d if isinstance(d, int) else str(d) for d in b.shape), role)
                     for b in buffers)

    # a symbolic program's arena size depends on the sizes: the caller computes it per call
    arena = program.arena_bytes if not program.sizes else 0
    return Signature(specs(program.inputs, "input"), specs(program.outputs, "output"),
                     specs(program.constants, "constant"), arena, sizes=program.sizes)


def _entry(program: Program, signature: Signature, profile: bool = False, sub: bool = False) -> list[str]:
    """The entry function of `program`: exported `tk_entry`, or, for a sub-program, its static
    `tk_program_<name>` that a control-flow kernel calls."""
    check_unique_c_names([b.name for b in program.buffers], f"program {program.name}")
    lines = _profile_counters(program) if profile else []
    lines += ["/*", f" * entry for {'sub-' if sub else ''}program {program.name}", " *   args, in order:"]
    for i, arg in enumerate(signature.args):
        lines.append(_comment(f" *     [{i}] {arg.role} {arg.describe()}"))
    layout = program.arena_layout()
    if program.sizes:
        lines.append(_comment(f" *     [{len(signature.args)}] sizes: int64[{len(program.sizes)}] "
                              f"({', '.join(program.sizes)})"))
    if program.temps:
        lines.append(f" *   arena ({program.arena_bytes} bytes):")
        for t in program.temps:
            lines.append(_comment(f" *     +{layout[t.name]} {t}"))
    head = f"static int {program_function_name(program.name)}" if sub else "TK_EXPORT int tk_entry"
    lines += [" */", f"{head}(void *const *args, void *arena)", "{"]
    if program.sizes:  # read once per call (a sub-program: from the outer entry's); kernels take local copies
        if not sub:
            lines.append(f"{INDENT}const int64_t *tk_sizes = (const int64_t *)args[{len(signature.args)}];")
        for i, size in enumerate(program.sizes):
            value = f"tk_size_{size}" if sub else f"tk_size_{size} = tk_sizes[{i}]"
            lines.append(f"{INDENT}const int64_t {c_name(size)} = {value}; (void){c_name(size)};")
    used = {p.name for k in program.kernels for p in k.params}
    for i, arg in enumerate(signature.args):
        buffer = next(b for b in program.buffers if b.name == arg.name)
        ctype = C_TYPES[buffer.dtype]
        const = "const " if arg.role in ("input", "constant") else ""
        unused = "" if arg.name in used else " (void)" + c_name(arg.name) + ";"
        lines.append(f"{INDENT}{const}{ctype} *{c_name(arg.name)} = ({const}{ctype} *)args[{i}];{unused}")
    for t in program.temps:
        ctype = C_TYPES[t.dtype]
        unused = "" if t.name in used else " (void)" + c_name(t.name) + ";"
        offset = _size_code(layout[t.name])
        lines.append(f"{INDENT}{ctype} *{c_name(t.name)} = ({ctype} *)((char *)arena + {offset});{unused}")
    if not program.temps:
        lines.append(f"{INDENT}(void)arena;")
    lines += [f"{INDENT}(void){c_name(size)};" for size in program.sizes]
    if not sub:  # a sub-program runs only while the status is OK; a concurrent part's failure must stand
        lines.append(f"{INDENT}tk_status = TK_OK;")
    if profile:
        lines.append(f"{INDENT}double tk_clock = omp_get_wtime();")
    for i, k in enumerate(program.kernels):
        call_args = ", ".join(c_name(p.name) for p in k.params)
        lines.append(f"{INDENT}{kernel_function_name(k)}({call_args});")
        lines.append(f"{INDENT}if (tk_status != TK_OK) return tk_status;")
        if profile:
            lines.append(f"{INDENT}tk_clock = tk_profile_tick({i}, tk_clock);")
    lines += [f"{INDENT}return TK_OK;", "}"]
    return lines


def _profile_counters(program: Program) -> list[str]:
    """Per-kernel wall-clock counters of a profiling build, and their export."""
    n = max(len(program.kernels), 1)
    return [
        "/* profiling build: seconds spent in each kernel, summed over calls */",
        "#include <omp.h>",
        f"static double tk_profile_seconds[{n}];",
        "",
        "static double tk_profile_tick(int kernel, double since)",
        "{",
        f"{INDENT}double now = omp_get_wtime();",
        f"{INDENT}tk_profile_seconds[kernel] += now - since;",
        f"{INDENT}return now;",
        "}",
        "",
        "TK_EXPORT void tk_profile_read(double *seconds)",
        "{",
        f"{INDENT}for (int i = 0; i < {n}; i++) {{",
        f"{INDENT * 2}seconds[i] = tk_profile_seconds[i];",
        f"{INDENT * 2}tk_profile_seconds[i] = 0.0;",
        f"{INDENT}}}",
        "}",
        "",
    ]


def _exports(signature: Signature) -> list[str]:
    encoded = signature.encode().replace("\\", "\\\\").replace('"', '\\"')
    return [
        "TK_EXPORT const char *tk_last_error(void)",
        "{",
        f"{INDENT}return tk_message;",
        "}",
        "",
        "TK_EXPORT int64_t tk_arena_bytes(void)",
        "{",
        f"{INDENT}return {signature.arena_bytes};",
        "}",
        "",
        "TK_EXPORT const char *tk_signature(void)",
        "{",
        f'{INDENT}return "{encoded}";',
        "}",
    ]


# Work the generated code asks of the runtime (a collective over MPI): the runtime installs the hook when it
# loads the library; an exported library run without one fails cleanly instead of calling through null.
RUNTIME_HOOK = """/* runtime calls: int hook(const char *what, void *out, const void *in), 0 on success */
enum { TK_ERR_RUNTIME = 3 };
static int (*tk_runtime_hook)(const char *, void *, const void *);

TK_EXPORT void tk_set_runtime_hook(int (*hook)(const char *, void *, const void *))
{
    tk_runtime_hook = hook;
}"""


def generate_c(program: Program, debug: bool = False, simplify: bool = True, profile: bool = False) -> CSource:
    """Generate one C translation unit for `program` (see the module docstring for its layout).

    profile=True times every kernel call in the entry and exports
    `tk_profile_read(double *seconds)` (one slot per kernel, reset on read).
    """
    signature = _signature(program)
    parts = [c_prelude(), ""]
    if any(isinstance(s, RuntimeCall) for k in program.kernels for s in iter_stmts(k.body)):
        parts += [RUNTIME_HOOK, ""]
    natives: dict[str, str] = {}
    natives_end = 1  # helpers go after the prelude, in the order first called (a later one may call an earlier)
    parts += _size_globals(program)
    for part in program.all_programs():  # sub-programs (control-flow bodies) before their callers
        outer = part is program
        parts.append(f"/* ================= {'program' if outer else 'sub-program'} {part.name}: "
                     f"{len(part.kernels)} kernel(s){' (debug: bounds checks on)' if debug else ''} ================= */")
        for kernel in part.kernels:
            if simplify:
                kernel = simplify_kernel(kernel)
            parts.append("")
            aliased = frozenset(name for pair in part.aliases for name in pair)
            writer = _KernelWriter(kernel, debug, aliased)
            parts.extend(writer.function())
            if writer.streamed and STREAM_HELPERS not in parts:
                parts.insert(1, STREAM_HELPERS)
                natives_end += 1
            for function, source in writer.native_sources.items():
                if natives.setdefault(function, source) != source:
                    raise ValueError(f"two definitions of the native helper {function}")
                elif source not in parts:
                    parts.insert(natives_end, source)
                    natives_end += 1
        parts.append("")
        if not outer:
            parts.extend(_entry(part, _signature(part), sub=True))
            parts.append("")
    parts.extend(_entry(program, signature, profile))
    parts.append("")
    parts.extend(_exports(signature))
    return CSource("\n".join(parts) + "\n", signature, debug, program.name)


def _rounding_dropped(value: Expr) -> Expr:
    """A value stored into a bfloat16 buffer without its rounding to bf16: the store rounds, and
    rounding twice to nearest even gives the same bits as rounding once (NaN stays the same quiet
    NaN), so a convolution's or GEMM's epilogue that ends in round_bf16 converts once, not three times."""
    if isinstance(value, Call) and value.fn == "round_bf16" and value.args[0].dtype == "float32":
        return value.args[0]
    if isinstance(value, Select):
        return Select(value.cond, _rounding_dropped(value.a), _rounding_dropped(value.b))
    return value
