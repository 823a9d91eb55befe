"""Loop IR: statements over flat buffers, and the kernels made of them.

## Loop IR (for docs/architecture.md)

A fused group of graph nodes becomes one `Kernel`: a name, the `Buffer`s it
takes as parameters, a body of statements, and a comment naming the graph
nodes it implements. The statements are few:

- `For(var, extent, body, kind)`: `var` runs over `[0, extent)`; `kind` is
  `serial`, `parallel` (OpenMP threads), `vectorized` (SIMD lanes),
  `unrolled`, or `streamed`: a vectorized copy `dst[base + i] = src[i]`
  whose stores bypass the cache (non-temporal), for outputs far larger than
  the last-level cache; any other body runs as `vectorized`. Loops always
  start at 0; a tiled loop with a tail uses `min(...)` in its extent or an
  `If` in its body.
- `Store(buffer, index, value)`: `buffer[index] = value`, with one flat
  (row-major) index. Reads are `Load` expressions (expr.py).
- `Let(var, value)` declares a scalar local (a reduction's accumulator),
  visible to the statements after it in the same `Block`; `Assign(var, value)`
  updates it.
- `Alloc(buffer, body)`: a temporary buffer local to `body` (on the C stack
  when small, on the heap otherwise).
- `If(cond, then, else_)` and `Block(stmts)`.
- `NativeCall(function, args, writes, source)`: a call of a C helper that
  loop IR cannot express (vector intrinsics such as `vpdpbusd`), on pointers
  into buffers (`Pointer(buffer, offset)`) and scalar expressions; `source`
  is the helper's C definition, which the C backend emits once per file.
- `While(cond, body)`: `while (cond) body` (a while_loop's trip count is known
  only at run time).
- `ProgramCall(program, args, writes, arena)`: run the entry of a sub-program
  (a branch or loop body of a control-flow op, program.py's `subprograms`) on
  pointers into buffers, one per buffer of its signature, and its own arena.

Index expressions are ordinary expressions of int64 loop variables; the
simplifier (simplify.py) reduces them to a canonical affine form using the
loop ranges (`simplify_kernel`). The IR is immutable: a schedule primitive
is a function from IR to IR. `str(kernel)` prints indented loop nests:

    kernel add_bias(out: float32[4, 8], x: float32[4, 8], b: float32[8]):
      # graph nodes: %3 = add(%1, %2)
      for i in 0..4 (parallel):
        for j in 0..8 (vectorized):
          out[i*8 + j] = x[i*8 + j] + b[j]

Expressions have numpy's semantics (floor `//` and `%`, wrapping integers,
NaN-propagating min/max; `evaluate` in expr_eval.py is the reference). Names are
C identifiers, kept as they are in the generated C, so a name may not be
declared again while it is in scope (sibling loops may both use `i`);
`verify_kernel` checks names, types and buffers and says what is wrong.

float16 and bfloat16 exist only in buffers: a load yields float32, a store
rounds to nearest even. A `Program` (program.py) gathers the kernels of one
graph with its inputs, outputs, constants and arena-resident intermediates;
the C backend turns one Program into one translation unit with one entry.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Optional

from tensorkiln.errors import TensorKilnError
from tensorkiln.loops.bounds import Bounds
from tensorkiln.loops.buffer import Buffer, check_identifier
from tensorkiln.loops.expr import SIZE_VAR_PREFIX, Const, Expr, Load, Var, format_expr, is_size_var, symbolic_expr, walk
from tensorkiln.loops.simplify import simplify
from tensorkiln.loops.types import INDEX_DTYPE, is_bool, is_int

LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled", "streamed")


class LoopIRError(TensorKilnError, ValueError):
    """Malformed loop IR: an unbound variable, an unknown buffer, a type mismatch, ..."""


class Stmt:
    """Base class of statements."""

    __slots__ = ()

    def __str__(self) -> str:
        return "\n".join(format_stmt(self))


@dataclass(frozen=True)
class For(Stmt):
    """`for var in 0..extent (kind): body`.

    `threads_if`, on a parallel loop: a bool expression of run-time sizes; the loop spreads over
    threads only when it holds (OpenMP's `if` clause), so one program serves small sizes serially
    and large ones in parallel. None: always.
    """

    var: Var
    extent: Expr
    body: Stmt
    kind: str = "serial"
    threads_if: Optional[Expr] = None

    def __post_init__(self) -> None:
        if isinstance(self.extent, int):
            object.__setattr__(self, "extent", Const(self.extent, INDEX_DTYPE))
        elif symbolic_expr(self.extent) is not None:  # a symbolic size (tensorkiln.shapes)
            object.__setattr__(self, "extent", symbolic_expr(self.extent))
        if self.kind not in LOOP_KINDS:
            raise LoopIRError(f"loop {self.var.name}: kind must be one of {LOOP_KINDS}, got {self.kind!r}")
        if is_size_var(self.var.name):  # the program would read it as a run-time size argument
            raise LoopIRError(f"loop {self.var.name}: the name of a size symbol ({SIZE_VAR_PREFIX}*) cannot be a loop variable")
        if self.var.dtype != INDEX_DTYPE or self.extent.dtype != INDEX_DTYPE:
            raise LoopIRError(f"loop {self.var.name}: variable and extent must be {INDEX_DTYPE}")
        if self.threads_if is not None and (self.kind != "parallel" or self.threads_if.dtype != "bool"):
            raise LoopIRError(f"loop {self.var.name}: threads_if needs a parallel loop and a bool condition")


@dataclass(frozen=True)
class Store(Stmt):
    """`buffer[index] = value` (a float32 value stored into float16/bfloat16 is rounded)."""

    buffer: Buffer
    index: Expr
    value: Expr

    def __post_init__(self) -> None:
        if not is_int(self.index.dtype):
            raise LoopIRError(f"index into {self.buffer.name} must be an integer, got {self.index.dtype}")
        if self.value.dtype != self.buffer.value_dtype:
            raise LoopIRError(
                f"store into {self.buffer.name} ({self.buffer.dtype}) needs a {self.buffer.value_dtype} "
                f"value, got {self.value.dtype}: {format_expr(self.value)}"
            )


@dataclass(frozen=True)
class Let(Stmt):
    """Declare the scalar local `var = value`; it lives until the end of the enclosing Block."""

    var: Var
    value: Expr

    def __post_init__(self) -> None:
        if self.var.dtype != self.value.dtype:
            raise LoopIRError(f"let {self.var.name}: {self.var.dtype} variable, {self.value.dtype} value")


@dataclass(frozen=True)
class Assign(Stmt):
    """Update the scalar local `var` (declared by an enclosing or earlier Let)."""

    var: Var
    value: Expr

    def __post_init__(self) -> None:
        if self.var.dtype != self.value.dtype:
            raise LoopIRError(f"assign {self.var.name}: {self.var.dtype} variable, {self.value.dtype} value")


@dataclass(frozen=True)
class Alloc(Stmt):
    """A temporary `buffer` (scope "local") that exists while `body` runs."""

    buffer: Buffer
    body: Stmt

    def __post_init__(self) -> None:
        if self.buffer.scope != "local":
            raise LoopIRError(f"alloc {self.buffer.name}: an allocated buffer must have scope 'local'")


@dataclass(frozen=True)
class If(Stmt):
    """`if cond: then else: else_`."""

    cond: Expr
    then: Stmt
    else_: Optional[Stmt] = None

    def __post_init__(self) -> None:
        if not is_bool(self.cond.dtype):
            raise LoopIRError(f"if condition must be bool, got {self.cond.dtype}: {format_expr(self.cond)}")


@dataclass(frozen=True)
class Block(Stmt):
    """Statements in order."""

    stmts: tuple[Stmt, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "stmts", tuple(self.stmts))


@dataclass(frozen=True)
class RuntimeCall(Stmt):
    """A call into the runtime from generated code: `what` describes the work (a collective), which
    reads the whole of `reads` and writes the whole of `writes` (runtime/hooks.py runs it)."""

    what: str
    writes: tuple[Buffer, ...]
    reads: tuple[Buffer, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "writes", tuple(self.writes))
        object.__setattr__(self, "reads", tuple(self.reads))


@dataclass(frozen=True)
class Pointer:
    """The address of `buffer[offset]`: an argument of a NativeCall."""

    buffer: Buffer
    offset: Expr


@dataclass(frozen=True)
class NativeCall(Stmt):
    """`function(args...)`: a C helper for what loop IR cannot say (a micro-kernel of vector
    intrinsics: vdpbf16ps, vpdpbusd), called on buffer pointers and scalars.

    Its C text is `source`, or, where that is empty, the helper of that name in
    codegen/c_native.py. `writes` names the buffers it stores into through their
    Pointer arguments (none: it writes only local buffers); it reads the other
    pointers' buffers. The IR cannot check inside the helper: the template that makes
    the call keeps it within what its arguments describe.
    """

    function: str
    args: tuple
    writes: tuple[str, ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        check_identifier(self.function, "native function")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "writes", tuple(self.writes))
        pointers = {a.buffer.name for a in self.args if isinstance(a, Pointer)}
        if not set(self.writes) <= pointers:
            raise LoopIRError(f"{self.function}: writes {sorted(set(self.writes) - pointers)}, "
                              f"which no pointer argument holds")
        for a in self.args:
            if isinstance(a, Pointer) and not is_int(a.offset.dtype):
                raise LoopIRError(f"{self.function}: offset into {a.buffer.name} must be an integer")
            if not isinstance(a, (Pointer, Expr)):
                raise LoopIRError(f"{self.function}: argument {a!r} is neither a Pointer nor an expression")

    def exprs(self) -> tuple[Expr, ...]:
        """The offsets and scalar arguments, in order."""
        return tuple(a.offset if isinstance(a, Pointer) else a for a in self.args)

    def with_exprs(self, fn: Callable[[Expr], Expr]) -> "NativeCall":
        """This call with fn applied to its scalar arguments and pointer offsets."""
        return NativeCall(self.function, tuple(Pointer(a.buffer, fn(a.offset)) if isinstance(a, Pointer)
                                               else fn(a) for a in self.args), self.writes, self.source)


@dataclass(frozen=True)
class While(Stmt):
    """`while cond: body`; `cond` is evaluated before every iteration."""

    cond: Expr
    body: Stmt

    def __post_init__(self) -> None:
        if not is_bool(self.cond.dtype):
            raise LoopIRError(f"while condition must be bool, got {self.cond.dtype}: {format_expr(self.cond)}")


@dataclass(frozen=True)
class Concurrent(Stmt):
    """Independent statements that may run at the same time, each on one thread (OpenMP sections).

    No part may write a buffer another part reads or writes (kernels/concurrent.py checks this
    before building one); each part runs as written, its parallel loops on its own thread.
    """

    parts: tuple[Stmt, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", tuple(self.parts))


@dataclass(frozen=True)
class ProgramCall(Stmt):
    """Run sub-program `program` (a Program of `Program.subprograms`) on `args`: one Pointer per
    buffer of its signature (inputs, outputs, constants, in order), `arena` its intermediates'
    memory (None when it has none). It writes the buffers named in `writes` (through the pointers
    given for its outputs) and reads the others."""

    program: str
    args: tuple[Pointer, ...]
    writes: tuple[str, ...]
    arena: Optional[Pointer] = None

    def __post_init__(self) -> None:
        check_identifier(self.program, "program")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "writes", tuple(self.writes))
        for a in self.pointers():
            if not isinstance(a, Pointer) or not is_int(a.offset.dtype):
                raise LoopIRError(f"call of {self.program}: argument {a!r} is not a Pointer with an integer offset")

    def pointers(self) -> tuple[Pointer, ...]:
        """The argument pointers and the arena pointer."""
        return self.args + ((self.arena,) if self.arena is not None else ())

    def exprs(self) -> tuple[Expr, ...]:
        return tuple(a.offset for a in self.pointers())

    def with_exprs(self, fn: Callable[[Expr], Expr]) -> "ProgramCall":
        """This call with fn applied to its pointer offsets."""
        def moved(a: Optional[Pointer]) -> Optional[Pointer]:
            return None if a is None else Pointer(a.buffer, fn(a.offset))
        return ProgramCall(self.program, tuple(moved(a) for a in self.args), self.writes, moved(self.arena))


def block(*stmts: Stmt) -> Stmt:
    """A Block of `stmts`, flattening nested Blocks; a single statement is returned as is."""
    flat: list[Stmt] = []
    for stmt in stmts:
        flat.extend(stmt.stmts if isinstance(stmt, Block) else (stmt,))
    return flat[0] if len(flat) == 1 else Block(tuple(flat))


@dataclass(frozen=True)
class Kernel:
    """One function of the generated code: a loop nest over its parameter buffers."""

    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    comment: str = ""

    def __post_init__(self) -> None:
        check_identifier(self.name, "kernel")
        object.__setattr__(self, "params", tuple(self.params))

    def __str__(self) -> str:
        params = ", ".join(str(p) for p in self.params)
        lines = [f"kernel {self.name}({params}):"]
        lines += [f"  # {line}" for line in self.comment.splitlines()]
        lines += format_stmt(self.body, 1)
        return "\n".join(lines)

    def declared_names(self) -> set[str]:
        """Names the kernel binds: its parameters, loop variables, lets and local buffers."""
        names = {p.name for p in self.params}
        for s in iter_stmts(self.body):
            if isinstance(s, (For, Let)):
                names.add(s.var.name)
            elif isinstance(s, Alloc):
                names.add(s.buffer.name)
        return names

    def written_buffers(self) -> set[str]:
        """Names of the buffers this kernel stores into."""
        names = {s.buffer.name for s in iter_stmts(self.body) if isinstance(s, Store)}
        names |= {name for s in iter_stmts(self.body) if isinstance(s, (NativeCall, ProgramCall)) for name in s.writes}
        return names | {b.name for s in iter_stmts(self.body) if isinstance(s, RuntimeCall) for b in s.writes}


# ---------------------------------------------------------------- traversal


def iter_stmts(stmt: Stmt) -> Iterator[Stmt]:
    """Every statement in `stmt`, parents before children."""
    yield stmt
    if isinstance(stmt, (For, Alloc, While)):
        yield from iter_stmts(stmt.body)
    elif isinstance(stmt, If):
        yield from iter_stmts(stmt.then)
        if stmt.else_ is not None:
            yield from iter_stmts(stmt.else_)
    elif isinstance(stmt, Block):
        for s in stmt.stmts:
            yield from iter_stmts(s)
    elif isinstance(stmt, Concurrent):
        for s in stmt.parts:
            yield from iter_stmts(s)


def stmt_exprs(stmt: Stmt) -> tuple[Expr, ...]:
    """The expressions directly held by one statement (not those of nested statements)."""
    if isinstance(stmt, For):
        return (stmt.extent,) if stmt.threads_if is None else (stmt.extent, stmt.threads_if)
    if isinstance(stmt, Store):
        return (stmt.index, stmt.value)
    if isinstance(stmt, (Let, Assign)):
        return (stmt.value,)
    if isinstance(stmt, If):
        return (stmt.cond,)
    if isinstance(stmt, While):
        return (stmt.cond,)
    if isinstance(stmt, (NativeCall, ProgramCall)):
        return stmt.exprs()
    return ()


def map_exprs(stmt: Stmt, fn: Callable[[Expr, Mapping[str, tuple[int, int]]], Expr],
              ranges: Optional[dict[str, tuple[int, int]]] = None) -> Stmt:
    """Rebuild `stmt` with fn(expr, loop_ranges) applied to each expression it holds.

    `loop_ranges` maps each enclosing loop variable to its inclusive range.
    """
    ranges = dict(ranges or {})
    if isinstance(stmt, For):
        extent = fn(stmt.extent, ranges)
        hi = Bounds(ranges)(extent)[1]
        inner = dict(ranges)
        inner[stmt.var.name] = (0, max(hi - 1, 0))
        threads_if = None if stmt.threads_if is None else fn(stmt.threads_if, ranges)
        return For(stmt.var, extent, map_exprs(stmt.body, fn, inner), stmt.kind, threads_if)
    if isinstance(stmt, Store):
        return Store(stmt.buffer, fn(stmt.index, ranges), fn(stmt.value, ranges))
    if isinstance(stmt, Let):
        return Let(stmt.var, fn(stmt.value, ranges))
    if isinstance(stmt, Assign):
        return Assign(stmt.var, fn(stmt.value, ranges))
    if isinstance(stmt, Alloc):
        return Alloc(stmt.buffer, map_exprs(stmt.body, fn, ranges))
    if isinstance(stmt, If):
        else_ = None if stmt.else_ is None else map_exprs(stmt.else_, fn, ranges)
        return If(fn(stmt.cond, ranges), map_exprs(stmt.then, fn, ranges), else_)
    if isinstance(stmt, Block):
        return Block(tuple(map_exprs(s, fn, ranges) for s in stmt.stmts))
    if isinstance(stmt, Concurrent):
        return Concurrent(tuple(map_exprs(s, fn, ranges) for s in stmt.parts))
    if isinstance(stmt, RuntimeCall):
        return stmt
    if isinstance(stmt, (NativeCall, ProgramCall)):
        return stmt.with_exprs(lambda e: fn(e, ranges))
    if isinstance(stmt, While):
        return While(fn(stmt.cond, ranges), map_exprs(stmt.body, fn, ranges))
    raise LoopIRError(f"not a statement: {stmt!r}")


def simplify_kernel(kernel: Kernel) -> Kernel:
    """Simplify every expression of `kernel` using its loops' ranges."""
    body = map_exprs(kernel.body, lambda e, ranges: simplify(e, ranges))
    return Kernel(kernel.name, kernel.params, body, kernel.comment)


# ---------------------------------------------------------------- verification


def verify_kernel(kernel: Kernel) -> None:
    """Raise LoopIRError unless every buffer, variable and name in `kernel` is well formed."""
    names = [p.name for p in kernel.params]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise LoopIRError(f"kernel {kernel.name}: parameter(s) {sorted(duplicates)} given twice")
    for p in kernel.params:
        if p.scope != "global":
            raise LoopIRError(f"kernel {kernel.name}: parameter {p.name} must have scope 'global'")
    _Verifier(kernel).check(kernel.body, {p.name: p for p in kernel.params}, {})


class _Verifier:
    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.loop_vars = {s.var.name for s in iter_stmts(kernel.body) if isinstance(s, For)}

    def fail(self, message: str) -> None:
        raise LoopIRError(f"kernel {self.kernel.name}: {message}")

    def check_expr(self, expr: Expr, buffers: dict[str, Buffer], scalars: dict[str, Var]) -> None:
        for node in walk(expr):
            if isinstance(node, Var):
                bound = scalars.get(node.name)
                if bound is None and is_size_var(node.name) and node.dtype == INDEX_DTYPE:
                    continue  # a size symbol: the entry sets it per call
                if bound is None:
                    self.fail(f"variable {node.name} is used outside any loop or let that defines it")
                if bound.dtype != node.dtype:
                    self.fail(f"variable {node.name} is {bound.dtype} but used as {node.dtype}")
            elif isinstance(node, Load):
                self.check_buffer(node.buffer, buffers)

    def check_buffer(self, buffer: Buffer, buffers: dict[str, Buffer]) -> None:
        known = buffers.get(buffer.name)
        if known is None:
            self.fail(f"buffer {buffer.name} is neither a parameter nor allocated here")
        if known != buffer:
            self.fail(f"buffer {buffer.name} is used as {buffer} but declared as {known}")

    def declare(self, name: str, buffers: dict[str, Buffer], scalars: dict[str, Var]) -> None:
        # No shadowing: the C code uses IR names as they are, and a name in scope has one meaning.
        if name in buffers or name in scalars:
            self.fail(f"name {name} is declared again while already in scope")

    def check(self, stmt: Stmt, buffers: dict[str, Buffer], scalars: dict[str, Var]) -> None:
        if isinstance(stmt, For):
            self.check_expr(stmt.extent, buffers, scalars)
            self.declare(stmt.var.name, buffers, scalars)
            self.check(stmt.body, buffers, {**scalars, stmt.var.name: stmt.var})
        elif isinstance(stmt, Store):
            self.check_buffer(stmt.buffer, buffers)
            self.check_expr(stmt.index, buffers, scalars)
            self.check_expr(stmt.value, buffers, scalars)
        elif isinstance(stmt, Let):
            self.check_expr(stmt.value, buffers, scalars)
            self.declare(stmt.var.name, buffers, scalars)
            scalars[stmt.var.name] = stmt.var  # visible to later statements of this Block
        elif isinstance(stmt, Assign):
            if stmt.var.name not in scalars or stmt.var.name in self.loop_vars:
                self.fail(f"assignment to {stmt.var.name}, which no let declares")
            self.check_expr(stmt.value, buffers, scalars)
            if scalars[stmt.var.name].dtype != stmt.var.dtype:
                self.fail(f"assignment to {stmt.var.name} as {stmt.var.dtype}, declared {scalars[stmt.var.name].dtype}")
        elif isinstance(stmt, Alloc):
            self.declare(stmt.buffer.name, buffers, scalars)
            self.check(stmt.body, {**buffers, stmt.buffer.name: stmt.buffer}, dict(scalars))
        elif isinstance(stmt, If):
            self.check_expr(stmt.cond, buffers, scalars)
            self.check(stmt.then, buffers, dict(scalars))
            if stmt.else_ is not None:
                self.check(stmt.else_, buffers, dict(scalars))
        elif isinstance(stmt, Block):
            inner = dict(scalars)
            for s in stmt.stmts:
                self.check(s, buffers, inner)
        elif isinstance(stmt, Concurrent):
            for s in stmt.parts:
                self.check(s, buffers, dict(scalars))
        elif isinstance(stmt, RuntimeCall):
            for b in stmt.writes + stmt.reads:
                self.check_buffer(b, buffers)
        elif isinstance(stmt, NativeCall):
            for a in stmt.args:
                if isinstance(a, Pointer):
                    self.check_buffer(a.buffer, buffers)
                self.check_expr(a.offset if isinstance(a, Pointer) else a, buffers, scalars)
        elif isinstance(stmt, ProgramCall):
            for a in stmt.pointers():
                self.check_buffer(a.buffer, buffers)
                self.check_expr(a.offset, buffers, scalars)
            unknown = set(stmt.writes) - {a.buffer.name for a in stmt.args}
            if unknown:
                self.fail(f"call of {stmt.program} writes {sorted(unknown)}, which no argument holds")
        elif isinstance(stmt, While):
            self.check_expr(stmt.cond, buffers, scalars)
            self.check(stmt.body, buffers, dict(scalars))
        else:
            self.fail(f"not a statement: {stmt!r}")


# ---------------------------------------------------------------- printing


def format_stmt(stmt: Stmt, depth: int = 0) -> list[str]:
    """Indented lines for `stmt`, two spaces per level."""
    pad = "  " * depth
    if isinstance(stmt, For):
        kind = "" if stmt.kind == "serial" else f" ({stmt.kind})"
        if stmt.threads_if is not None:
            kind = f" (parallel if {format_expr(stmt.threads_if)})"
        head = f"{pad}for {stmt.var.name} in 0..{format_expr(stmt.extent)}{kind}:"
        return [head] + format_stmt(stmt.body, depth + 1)
    if isinstance(stmt, Store):
        return [f"{pad}{stmt.buffer.name}[{format_expr(stmt.index)}] = {format_expr(stmt.value)}"]
    if isinstance(stmt, Let):
        return [f"{pad}{stmt.var.name}: {stmt.var.dtype} = {format_expr(stmt.value)}"]
    if isinstance(stmt, Assign):
        return [f"{pad}{stmt.var.name} = {format_expr(stmt.value)}"]
    if isinstance(stmt, Alloc):
        return [f"{pad}alloc {stmt.buffer}:"] + format_stmt(stmt.body, depth + 1)
    if isinstance(stmt, If):
        lines = [f"{pad}if {format_expr(stmt.cond)}:"] + format_stmt(stmt.then, depth + 1)
        if stmt.else_ is not None:
            lines += [f"{pad}else:"] + format_stmt(stmt.else_, depth + 1)
        return lines
    if isinstance(stmt, Block):
        lines = [line for s in stmt.stmts for line in format_stmt(s, depth)]
        return lines or [f"{pad}pass"]
    if isinstance(stmt, Concurrent):
        return [line for k, s in enumerate(stmt.parts)
                for line in [f"{pad}concurrently, part {k}:"] + format_stmt(s, depth + 1)]
    if isinstance(stmt, RuntimeCall):
        return [f"{pad}{', '.join(b.name for b in stmt.writes)} = runtime({stmt.what!r}; "
                f"{', '.join(b.name for b in stmt.reads)})"]
    if isinstance(stmt, NativeCall):
        args = ", ".join(f"&{a.buffer.name}[{format_expr(a.offset)}]" if isinstance(a, Pointer) else format_expr(a)
                         for a in stmt.args)
        return [f"{pad}native {stmt.function}({args})"]
    if isinstance(stmt, ProgramCall):
        args = ", ".join(f"&{a.buffer.name}[{format_expr(a.offset)}]" for a in stmt.args)
        arena = f"; arena &{stmt.arena.buffer.name}[{format_expr(stmt.arena.offset)}]" if stmt.arena else ""
        return [f"{pad}call program {stmt.program}({args}{arena})"]
    if isinstance(stmt, While):
        return [f"{pad}while {format_expr(stmt.cond)}:"] + format_stmt(stmt.body, depth + 1)
    raise LoopIRError(f"not a statement: {stmt!r}")
