"""One kernel as a C function: its statements and loops, written over the expressions of c_expr.py.

`KernelWriter.function()` gives the `static void kernel_<name>(...)` function:
a comment naming the graph nodes and the parameters, `restrict` pointers
(`const` where only read), the size symbols copied into locals, then the body.
Loops get their OpenMP pragmas (c_openmp.py), stream copies become
`tk_stream_f32` calls (c_stream.py), and row kernels prefetch their next row
(c_prefetch.py).
"""
from __future__ import annotations

from typing import Optional

from tensorkiln.codegen.c_expr import INFIX, ExprWriter
from tensorkiln.codegen.c_names import INDENT, c_comment, c_name, check_unique_c_names, kernel_function_name, \
    program_function_name
from tensorkiln.codegen.c_native import native_helpers
from tensorkiln.codegen.c_openmp import collapsible, nest_clauses
from tensorkiln.codegen.c_prefetch import RowPrefetch, row_prefetch
from tensorkiln.codegen.c_prelude import C_TYPES
from tensorkiln.codegen.c_stream import stream_copy, streams
from tensorkiln.loops.expr import BinOp, Call, Const, Expr, Load, Select, Var, is_size_var, lift, walk
from tensorkiln.loops.ir import (
    Alloc, Assign, Block, Concurrent, For, If, Kernel, Let, NativeCall, Pointer, ProgramCall, RuntimeCall, Stmt,
    Store, While, iter_stmts, stmt_exprs,
)
from tensorkiln.shapes.symint import upper_bound

STACK_LIMIT_BYTES = 16 * 1024  # local buffers up to this size live on the stack


class KernelWriter(ExprWriter):
    """Emits one kernel function; tracks loop ranges (for bounds) and the parallel context."""

    def __init__(self, kernel: Kernel, debug: bool, aliased: frozenset = frozenset()):
        super().__init__(kernel.name, debug)
        self.kernel = kernel
        self.aliased = aliased  # buffers updated in place: their pointers may alias, so no restrict
        self.lines: list[str] = []
        self.written = kernel.written_buffers()
        self.prefetch_at: dict[int, RowPrefetch] = {}  # id of a pass -> the next rows it prefetches
        self.prefetching: Optional[RowPrefetch] = None  # set while such a pass is written
        self.may_stream = not debug and streams(kernel.body)  # some loop is a stream copy (c_stream.py)
        self.streamed = False  # a loop became tk_stream_f32 calls: the file needs the helpers
        # where a failed sub-program call leaves: the kernel, or (inside an OpenMP section, which a
        # return may not leave) the end of that section
        self.failure_exit = "return;"
        self.sections = 0

    # ---- statements

    def emit(self, depth: int, line: str) -> None:
        """Append one line of C at indentation `depth`."""
        self.lines.append(INDENT * depth + line if line else "")

    def stmt(self, s: Stmt, depth: int, in_parallel: bool, in_simd: bool) -> None:
        """The C of statement `s`; `in_parallel`/`in_simd`: inside an OpenMP parallel or simd loop."""
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
            # its value's interval holds where the name is read: divisions by it or of it that provably
            # take non-negative operands are then C's / and %, not helpers with sign tests
            self.ranges[s.var.name] = self.bounds()(s.value)
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
        """A call of the runtime hook (c_entry.py's RUNTIME_HOOK); a failure is the kernel's error."""
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
        """A store, converted to the buffer's storage type; in debug mode, only where its index is in range."""
        buffer = s.buffer
        value = self.expr(rounding_dropped(s.value) if buffer.dtype == "bfloat16" else s.value)[0]
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
        """An update of a scalar (`acc += x` where it reads so)."""
        name = c_name(s.var.name)
        v = s.value
        # acc = acc + x reads better as acc += x
        if isinstance(v, BinOp) and v.operator in ("add", "sub", "mul") and v.a == s.var:
            symbol = INFIX[v.operator][0]
            self.emit(depth, f"{name} {symbol}= {self.expr(v.b)[0]};")
            return
        self.emit(depth, f"{name} = {self.expr(v)[0]};")

    def alloc(self, s: Alloc, depth: int, in_parallel: bool, in_simd: bool) -> None:
        """A local buffer around its body: on the stack up to STACK_LIMIT_BYTES, else from the thread's
        scratch stack (the prelude's tk_alloc and tk_free)."""
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
        self.emit(depth + 2, f"tk_free({name});")
        self.emit(depth + 1, "}")
        self.emit(depth, "}")

    # ---- loops

    def loop(self, s: For, depth: int, in_parallel: bool, in_simd: bool) -> None:
        """A loop: a stream copy's call, or its C loops with the fence its streaming stores need."""
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
        if fence and s.kind == "parallel" and not in_simd and nest_clauses(collapsible(s))[1] is None:
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
            nest = collapsible(s)
        if kind in ("parallel", "vectorized"):
            clauses, problem = nest_clauses(nest)
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

    # ---- the function

    def function(self) -> list[str]:
        """The kernel's C function, as lines."""
        k = self.kernel
        check_unique_c_names(sorted(k.declared_names()), f"kernel {k.name}")
        params = []
        for p in k.params:
            const = "" if p.name in self.written else "const "
            restrict = "" if p.name in self.aliased else "restrict "
            params.append(f"{const}{C_TYPES[p.dtype]} *{restrict}{c_name(p.name)}")
        self.emit(0, "/*")
        self.emit(0, f" * kernel {k.name}")
        for line in k.comment.splitlines():
            self.emit(0, c_comment(f" *   {line}".rstrip()))
        for p in k.params:
            role = "written" if p.name in self.written else "read"
            self.emit(0, c_comment(f" *   {p} ({role})"))
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


def rounding_dropped(value: Expr) -> Expr:
    """A value stored into a bfloat16 buffer without its rounding to bf16: the store rounds, and
    rounding twice to nearest even gives the same bits as rounding once (NaN stays the same quiet
    NaN), so a convolution's or GEMM's epilogue that ends in round_bf16 converts once, not three times."""
    if isinstance(value, Call) and value.fn == "round_bf16" and value.args[0].dtype == "float32":
        return value.args[0]
    if isinstance(value, Select):
        return Select(value.cond, rounding_dropped(value.a), rounding_dropped(value.b))
    return value
