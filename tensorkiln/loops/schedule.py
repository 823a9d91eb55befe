"""Schedule primitives: pure functions from a Kernel to a new Kernel, and Schedule, a replayable list of them.

Each primitive names loops by their variable and buffers by their name,
checks that the transformation keeps the kernel's meaning, and raises
`ScheduleError` naming the loop and the reason when it would not. The rules:

- a loop whose iterations share a stored location (its variable does not
  index a location that the loop accumulates into, or a scalar declared
  outside it is updated inside) is a *reduction axis*: it may not become
  parallel or vectorized (use `rfactor` first, or `cache_write`);
- a buffer that a loop nest writes and also reads at another index carries a
  dependence between iterations: such a nest is not reordered, parallelized
  or vectorized;
- reorder, fuse and tile need perfectly nested loops whose extents do not
  depend on a loop that would move inside them.

Every primitive returns a simplified, verified kernel. A `Schedule` is plain
data, a list of `Step(name, args)`, that prints, saves to JSON and re-applies::

    sched = Schedule([Step("split", ("j", 4)), Step("vectorize", ("j_i",))])
    kernel = sched.apply(kernel)

The doctests below run in the test suite (tests/loops/test_schedule.py), so
the before/after IR shown in each docstring is checked. They share this
example, a 6x10 elementwise kernel and a row sum:

>>> from tensorkiln.loops.schedule import _example_kernel, _example_sum
>>> print(_example_kernel())
kernel scale(out: float32[6, 10], a: float32[6, 10]):
  for i in 0..6:
    for j in 0..10:
      out[i*10 + j] = a[i*10 + j]*2.0
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Callable, Optional

from tensorkiln.loops import expr as E
from tensorkiln.loops.bounds import Bounds
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.ir import Alloc, Assign, For, Kernel, Let, Stmt, Store, block, iter_stmts, stmt_exprs
from tensorkiln.loops.types import int_range, is_float
from tensorkiln.loops.nest import (  # noqa: F401  (substitute, substitute_expr, carried_dependences: handed on)
    ScheduleError, _allocated_inside, _const_extent, _declared_inside, _fresh, _loads, _loop_ranges,
    _loop_vars_inside, _loops, _order_dependences, _replace, _rewrite, _single_body, carried_dependences,
    substitute, substitute_expr,
)
from tensorkiln.loops.producers import (  # noqa: F401  (handed on: primitives of a Schedule)
    cache_read, cache_write, compute_at, compute_inline, pack,
)
from tensorkiln.loops.tensorize import tensorize


# ================================================================ primitives


SPLIT_TAILS = ("min", "shift_inwards")


def split(kernel: Kernel, loop: str, factor: int, tail: str = "min", outer: Optional[str] = None,
          inner: Optional[str] = None) -> Kernel:
    """Split loop `loop` into an outer and an inner loop; the inner one runs `factor` iterations.

    Preconditions: the loop exists and its name is unique; factor >= 1. The
    new loops are named `<loop>_o` and `<loop>_i` unless `outer`/`inner` name
    them (`outer` may reuse `loop`'s own name); both keep the serial kind (the
    original kind is dropped: re-apply it to the one you mean).

    The remainder, when the extent is not a multiple of `factor`:

    - tail="min": the last inner loop is shorter, `min(factor, extent - o*factor)`;
      any extent works.
    - tail="shift_inwards" (Halide's tail strategy for pure definitions): every
      inner loop runs exactly `factor` iterations, and the last block is shifted
      back to end at the extent, `loop = min(o*factor, extent - factor) + i`, so
      a few points are computed twice. Only for a constant extent, and refused
      when the body reads a buffer it writes or updates an outer scalar (a point
      computed twice would be accumulated twice). An extent below `factor`
      becomes one block of the whole extent.

    Parameters
    ----------
    kernel: the kernel to transform.
    loop: the variable name of the loop to split.
    factor: the inner loop's extent.
    tail: "min" or "shift_inwards", see above.
    outer, inner: names of the new loops.

    Returns
    -------
    A new kernel; `loop` is replaced by `loop_o * factor + loop_i`.

    Before and after:

    >>> print(split(_example_kernel(), "j", 4))
    kernel scale(out: float32[6, 10], a: float32[6, 10]):
      for i in 0..6:
        for j_o in 0..3:
          for j_i in 0..min(4, 10 - j_o*4):
            out[i*10 + j_o*4 + j_i] = a[i*10 + j_o*4 + j_i]*2.0
    >>> print(split(_example_kernel(), "j", 4, tail="shift_inwards"))
    kernel scale(out: float32[6, 10], a: float32[6, 10]):
      for i in 0..6:
        for j_o in 0..3:
          for j_i in 0..4:
            out[i*10 + j_i + min(j_o*4, 6)] = a[i*10 + j_i + min(j_o*4, 6)]*2.0
    """
    if not isinstance(factor, int) or factor < 1:
        raise ScheduleError(f"split of loop {loop}: factor must be a positive integer, got {factor!r}")
    if tail not in SPLIT_TAILS:
        raise ScheduleError(f"split of loop {loop}: tail must be one of {SPLIT_TAILS}, got {tail!r}")
    target = _loops(kernel, loop)
    taken = kernel.declared_names() - {loop}
    for name in (outer, inner):
        if name is not None and (name in taken or name == (inner if name is outer else outer)):
            raise ScheduleError(f"split of loop {loop}: the name {name!r} is already used in kernel {kernel.name}")
    taken |= {n for n in (outer, inner) if n is not None}
    outer_var = E.Var(outer if outer is not None else _fresh(kernel, f"{loop}_o", taken | {loop}))
    inner_var = E.Var(inner if inner is not None else _fresh(kernel, f"{loop}_i", taken | {loop}))
    extent = target.extent
    if tail == "shift_inwards":
        return _split_shift_inwards(kernel, target, factor, outer_var, inner_var)
    if isinstance(extent, E.Const):
        n = int(extent.value)
        outer_extent: E.Expr = E.const(-(-n // factor))
        inner_extent: E.Expr = E.const(factor) if n % factor == 0 else \
            E.minimum(E.const(factor), extent - outer_var * factor)
    else:
        outer_extent = (extent + (factor - 1)) // factor
        inner_extent = E.minimum(E.const(factor), extent - outer_var * factor)
    body = substitute(target.body, {loop: outer_var * factor + inner_var})
    new = For(outer_var, outer_extent, For(inner_var, inner_extent, body))
    return _replace(kernel, target, new)


def _split_shift_inwards(kernel: Kernel, target: For, factor: int, outer: E.Var, inner: E.Var) -> Kernel:
    """split's "shift_inwards" tail: equal blocks, the last one moved back to end at the extent."""
    loop = target.var.name
    n = _const_extent(target, f"split of loop {loop} with tail shift_inwards")
    if n % factor:
        problems = [p for p in carried_dependences(target) if "reduction axis" in p or "written and read" in p]
        problems += [f"it reads {ld.buffer.name}, which it writes" for ld in _loads(target.body)
                     if ld.buffer.name in target_written(target)]
        if problems:
            raise ScheduleError(f"split of loop {loop} with tail shift_inwards: the last block recomputes points, "
                                f"but {problems[0]}; use tail='min'")
    factor = min(factor, n)
    if n % factor == 0:
        value: E.Expr = outer * factor + inner
    else:
        value = E.minimum(outer * factor, E.const(n - factor)) + inner
    body = substitute(target.body, {loop: value})
    new = For(outer, E.const(-(-n // factor)), For(inner, E.const(factor), body))
    return _replace(kernel, target, new)


def target_written(loop: For) -> set[str]:
    """Names of the buffers that statements inside `loop` store into (buffers allocated inside excluded)."""
    private = _allocated_inside(loop.body)
    return {s.buffer.name for s in iter_stmts(loop.body) if isinstance(s, Store) and s.buffer.name not in private}


def _chain(kernel: Kernel, names: tuple[str, ...], what: str) -> list[For]:
    """The perfectly nested loops from the outermost to the innermost of `names`."""
    loops = [_loops(kernel, n) for n in names]
    outermost = next((l for l in loops if all(any(x is l2 for x in iter_stmts(l)) for l2 in loops)), None)
    if outermost is None:
        raise ScheduleError(f"{what}: loops {', '.join(names)} are not nested inside one another")
    chain = [outermost]
    wanted = {id(l) for l in loops}
    while not all(any(c is l for c in chain) for l in loops):
        inner = _single_body(chain[-1])
        if not isinstance(inner, For):
            missing = [l.var.name for l in loops if not any(c is l for c in chain)]
            raise ScheduleError(f"{what}: loop {chain[-1].var.name} is not perfectly nested around "
                                f"{', '.join(missing)} (other statements sit between them)")
        chain.append(inner)
    del wanted
    return chain


def reorder(kernel: Kernel, *loops: str) -> Kernel:
    """Reorder perfectly nested loops: the named loops take, in the given order, the positions they held.

    Preconditions: the loops form one perfectly nested chain (loops of the
    chain that are not named stay where they are); no loop's extent uses a
    loop that would move inside it; the nest carries no dependence other than
    reductions (a buffer written and read at another index, or a scalar
    updated by a non-reduction, is refused). Reductions may change order
    among themselves: the sum is reassociated, as by vectorization.

    Parameters
    ----------
    kernel: the kernel to transform.
    loops: loop names, outermost first in the new order.

    Returns
    -------
    A new kernel with the loops permuted.

    >>> print(reorder(_example_kernel(), "j", "i"))
    kernel scale(out: float32[6, 10], a: float32[6, 10]):
      for j in 0..10:
        for i in 0..6:
          out[i*10 + j] = a[i*10 + j]*2.0
    """
    if len(set(loops)) != len(loops) or len(loops) < 2:
        raise ScheduleError(f"reorder needs two or more distinct loops, got {loops}")
    chain = _chain(kernel, loops, "reorder")
    named = {l: None for l in loops}
    positions = [k for k, c in enumerate(chain) if c.var.name in named]
    order = list(chain)
    for pos, name in zip(positions, loops):
        order[pos] = next(c for c in chain if c.var.name == name)
    body = _single_body(chain[-1])
    problems = _order_dependences(body)
    if problems:
        raise ScheduleError(f"reorder of {', '.join(loops)}: {problems[0]}; reordering could change the result")
    for k, c in enumerate(order):
        inner_names = {x.var.name for x in order[:k]}
        # a loop's extent may only use loops outside it in the new order
        outer_needed = E.free_vars(c.extent) & {x.var.name for x in chain}
        if not outer_needed <= inner_names:
            bad = sorted(outer_needed - inner_names)[0]
            raise ScheduleError(f"reorder: the extent of loop {c.var.name} ({E.format_expr(c.extent)}) uses loop "
                                f"{bad}, which would move inside it")
    new: Stmt = body
    for c in reversed(order):
        new = For(c.var, c.extent, new, c.kind)
    return _replace(kernel, chain[0], new)


def tile(kernel: Kernel, i: str, j: str, fi: int, fj: int) -> Kernel:
    """Tile the perfect nest (i, j) into (i_o, j_o, i_i, j_i) blocks of fi x fj.

    Preconditions: those of split, and j is perfectly nested inside i (the
    reorder that follows must be legal).

    >>> print(tile(_example_kernel(), "i", "j", 4, 8))
    kernel scale(out: float32[6, 10], a: float32[6, 10]):
      for i_o in 0..2:
        for j_o in 0..2:
          for i_i in 0..min(4, 6 - i_o*4):
            for j_i in 0..min(8, 10 - j_o*8):
              out[i_o*40 + i_i*10 + j_o*8 + j_i] = a[i_o*40 + i_i*10 + j_o*8 + j_i]*2.0
    """
    _chain(kernel, (i, j), "tile")
    kernel = split(kernel, i, fi)
    kernel = split(kernel, j, fj)
    return reorder(kernel, f"{i}_o", f"{j}_o", f"{i}_i", f"{j}_i")


def fuse(kernel: Kernel, outer: str, inner: str, fused: Optional[str] = None) -> Kernel:
    """Fuse two perfectly nested loops into one loop `<outer>_<inner>` (or `fused`) over the product of
    their extents.

    Preconditions: `inner` is the only statement in `outer`'s body, and its
    extent does not use `outer`; `fused`, if given, names no other loop.

    >>> print(fuse(_example_kernel(), "i", "j"))
    kernel scale(out: float32[6, 10], a: float32[6, 10]):
      for i_j in 0..60:
        out[i_j] = a[i_j]*2.0
    """
    o = _loops(kernel, outer)
    body = _single_body(o)
    if not (isinstance(body, For) and body.var.name == inner):
        raise ScheduleError(f"fuse: loop {inner} is not the only statement in the body of loop {outer}")
    if outer in E.free_vars(body.extent):
        raise ScheduleError(f"fuse: the extent of loop {inner} ({E.format_expr(body.extent)}) depends on {outer}")
    if fused is not None and fused in kernel.declared_names() - {outer, inner}:
        raise ScheduleError(f"fuse of loops {outer} and {inner}: the name {fused!r} is already used in kernel "
                            f"{kernel.name}")
    fused = E.Var(fused if fused is not None else _fresh(kernel, f"{outer}_{inner}"))
    ext_in = body.extent
    new_body = substitute(body.body, {outer: fused // ext_in, inner: fused % ext_in})
    kind = o.kind if o.kind == body.kind else "serial"
    return _replace(kernel, o, For(fused, o.extent * ext_in, new_body, kind))


def _set_kind(kernel: Kernel, loop: str, kind: str) -> Kernel:
    target = _loops(kernel, loop)
    return _replace(kernel, target, For(target.var, target.extent, target.body, kind))


def unroll(kernel: Kernel, loop: str) -> Kernel:
    """Mark `loop` unrolled (the C compiler unrolls it fully).

    Preconditions: the extent is a constant of at most 1024, or a `min()`
    whose bound is.

    >>> print(unroll(_example_kernel(), "i"))
    kernel scale(out: float32[6, 10], a: float32[6, 10]):
      for i in 0..6 (unrolled):
        for j in 0..10:
          out[i*10 + j] = a[i*10 + j]*2.0
    """
    target = _loops(kernel, loop)
    hi = Bounds(_loop_ranges(kernel))(target.extent)[1]
    if math.isinf(hi) or hi > 1024:
        raise ScheduleError(f"unroll of loop {loop}: its extent {E.format_expr(target.extent)} is not a "
                            "constant of at most 1024")
    return _set_kind(kernel, loop, "unrolled")


def vectorize(kernel: Kernel, loop: str) -> Kernel:
    """Mark `loop` vectorized (SIMD lanes).

    Preconditions: `loop` is innermost (contains no loop) and its iterations
    are independent: not a reduction axis (rfactor first), no dependence.

    >>> print(vectorize(_example_kernel(), "j"))
    kernel scale(out: float32[6, 10], a: float32[6, 10]):
      for i in 0..6:
        for j in 0..10 (vectorized):
          out[i*10 + j] = a[i*10 + j]*2.0
    >>> try:
    ...     vectorize(_example_sum(), "j")
    ... except ScheduleError as err:
    ...     print(err)
    cannot vectorize loop j: it is a reduction axis: every iteration updates the scalar acc, declared outside the loop (rfactor it first)
    """
    target = _loops(kernel, loop)
    if _loop_vars_inside(target.body):
        raise ScheduleError(f"cannot vectorize loop {loop}: it contains loop(s) "
                            f"{', '.join(sorted(_loop_vars_inside(target.body)))}; only an innermost loop is vectorized")
    problems = carried_dependences(target)
    if problems:
        raise ScheduleError(f"cannot vectorize loop {loop}: {problems[0]} (rfactor it first)")
    return _set_kind(kernel, loop, "vectorized")


def parallel(kernel: Kernel, loop: str) -> Kernel:
    """Mark `loop` parallel (its iterations run on OpenMP threads).

    Preconditions: its iterations are independent (not a reduction axis, no
    dependence between iterations).

    >>> print(parallel(_example_kernel(), "i"))
    kernel scale(out: float32[6, 10], a: float32[6, 10]):
      for i in 0..6 (parallel):
        for j in 0..10:
          out[i*10 + j] = a[i*10 + j]*2.0
    """
    target = _loops(kernel, loop)
    problems = carried_dependences(target)
    if problems:
        raise ScheduleError(f"cannot parallelize loop {loop}: {problems[0]} (rfactor it first)")
    return _set_kind(kernel, loop, "parallel")


_IDENTITY = {"add": 0, "mul": 1}


def _identity(op: str, dtype: str) -> E.Const:
    if op in _IDENTITY:
        return E.Const(float(_IDENTITY[op]) if is_float(dtype) else _IDENTITY[op], dtype)
    if is_float(dtype):
        return E.Const(math.inf if op == "min" else -math.inf, dtype)
    lo, hi = int_range(dtype)
    return E.Const(hi if op == "min" else lo, dtype)


def rfactor(kernel: Kernel, loop: str, factor: int) -> Kernel:
    """Split reduction loop `loop` into `factor` partial accumulators, combined after the loop.

    The scalar accumulator `acc` updated as `acc = acc op x` (op: + * min
    max) becomes a local buffer `<acc>_rf[factor]`: the loop is split into
    `<loop>_o` and `<loop>_i`, and `<loop>_i` indexes the partial sums, so
    it may be vectorized or parallelized. The sum is reassociated.

    Preconditions: inside `loop`, exactly one scalar declared outside it is
    assigned, always as `acc = acc op x` with x not reading acc; factor >= 1.

    >>> k = rfactor(_example_sum(), "j", 4)
    >>> print(k)
    kernel rowsum(out: float32[6], a: float32[6, 10]):
      for i in 0..6:
        acc: float32 = 0.0
        alloc acc_rf: float32[4]:
          for acc_rf_init in 0..4:
            acc_rf[acc_rf_init] = 0.0
          for j_o in 0..3:
            for j_i in 0..min(4, 10 - j_o*4):
              acc_rf[j_i] = acc_rf[j_i] + a[i*10 + j_o*4 + j_i]
          for acc_rf_r in 0..4:
            acc = acc + acc_rf[acc_rf_r]
        out[i] = acc
    >>> print(vectorize(k, "j_i").body.body.stmts[1].body.stmts[1])
    for j_o in 0..3:
      for j_i in 0..min(4, 10 - j_o*4) (vectorized):
        acc_rf[j_i] = acc_rf[j_i] + a[i*10 + j_o*4 + j_i]
    """
    if not isinstance(factor, int) or factor < 1:
        raise ScheduleError(f"rfactor of loop {loop}: factor must be a positive integer, got {factor!r}")
    target = _loops(kernel, loop)
    local = _declared_inside(target.body)
    assigns = [s for s in iter_stmts(target.body) if isinstance(s, Assign) and s.var.name not in local]
    accs = {s.var.name for s in assigns}
    if len(accs) != 1:
        raise ScheduleError(f"rfactor of loop {loop}: it must update exactly one outer scalar, found "
                            f"{sorted(accs) or 'none'}")
    acc = assigns[0].var
    ops = set()
    for s in assigns:
        v = s.value
        if not (isinstance(v, E.BinOp) and v.operator in ("add", "mul", "min", "max") and v.a == acc
                and acc.name not in E.free_vars(v.b)):
            raise ScheduleError(f"rfactor of loop {loop}: {acc.name} = {E.format_expr(v)} is not acc = acc op x")
        ops.add(v.operator)
    if len(ops) != 1:
        raise ScheduleError(f"rfactor of loop {loop}: {acc.name} is reduced with several operators {sorted(ops)}")
    op = ops.pop()
    reads = [n for s in iter_stmts(target.body) for e in stmt_exprs(s) for n in E.walk(e)
             if isinstance(n, E.Var) and n.name == acc.name]
    if len(reads) != len(assigns):
        raise ScheduleError(f"rfactor of loop {loop}: {acc.name} is read inside the loop besides its update")
    taken = kernel.declared_names()
    rf = Buffer(_fresh(kernel, f"{acc.name}_rf", taken), acc.dtype, (factor,), scope="local")
    init_v, red_v = E.Var(_fresh(kernel, f"{rf.name}_init", taken)), E.Var(_fresh(kernel, f"{rf.name}_r", taken))
    split_kernel = split(kernel, loop, factor)
    outer = _loops(split_kernel, f"{loop}_o")
    inner_v = _single_body(outer).var

    def to_partial(s: Stmt) -> Optional[Stmt]:
        if isinstance(s, Assign) and s.var.name == acc.name:
            return Store(rf, inner_v, E.BinOp(op, E.Load(rf, inner_v), s.value.b))
        return None

    new_outer = _rewrite(outer, to_partial)
    combined = block(
        For(init_v, E.const(factor), Store(rf, init_v, _identity(op, acc.dtype))),
        new_outer,
        For(red_v, E.const(factor), Assign(acc, E.BinOp(op, acc, E.Load(rf, red_v)))))
    return _replace(split_kernel, outer, Alloc(rf, combined))


# ================================================================ Schedule: primitives as data

PRIMITIVES: dict[str, Callable[..., Kernel]] = {
    "split": split, "tile": tile, "reorder": reorder, "fuse": fuse, "unroll": unroll, "vectorize": vectorize,
    "parallel": parallel, "compute_at": compute_at, "compute_inline": compute_inline, "cache_write": cache_write,
    "cache_read": pack, "pack": pack, "rfactor": rfactor, "tensorize": tensorize,
}


@dataclass(frozen=True)
class Step:
    """One primitive application: its name and arguments (loop/buffer names, factors, intrinsic names)."""

    name: str
    args: tuple = ()

    def __post_init__(self) -> None:
        if self.name not in PRIMITIVES:
            raise ScheduleError(f"unknown schedule primitive {self.name!r} (known: {', '.join(sorted(PRIMITIVES))})")
        object.__setattr__(self, "args", tuple(self.args))

    def __str__(self) -> str:
        return f"{self.name}({', '.join(repr(a) for a in self.args)})"


@dataclass(frozen=True)
class Schedule:
    """A replayable list of primitive applications.

    >>> s = Schedule([Step("split", ("j", 4)), Step("vectorize", ("j_i",)), Step("parallel", ("i",))])
    >>> print(s)
    split('j', 4)
    vectorize('j_i')
    parallel('i')
    >>> Schedule.from_json(s.to_json()) == s
    True
    >>> print(s.apply(_example_kernel()))
    kernel scale(out: float32[6, 10], a: float32[6, 10]):
      for i in 0..6 (parallel):
        for j_o in 0..3:
          for j_i in 0..min(4, 10 - j_o*4) (vectorized):
            out[i*10 + j_o*4 + j_i] = a[i*10 + j_o*4 + j_i]*2.0
    """

    steps: tuple[Step, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))

    def apply(self, kernel: Kernel) -> Kernel:
        """Apply every step in order; a refused step raises ScheduleError naming the step."""
        for n, step in enumerate(self.steps):
            try:
                kernel = PRIMITIVES[step.name](kernel, *step.args)
            except ScheduleError as err:
                raise ScheduleError(f"schedule step {n} {step}: {err}") from None
        return kernel

    def then(self, name: str, *args) -> "Schedule":
        """This schedule with one more step."""
        return Schedule(self.steps + (Step(name, args),))

    def to_json(self) -> str:
        """JSON text: a list of {"primitive": name, "args": [...]}."""
        return json.dumps([{"primitive": s.name, "args": list(s.args)} for s in self.steps])

    @staticmethod
    def from_json(text: str) -> "Schedule":
        """The schedule that `to_json` wrote."""
        return Schedule(tuple(Step(d["primitive"], tuple(d["args"])) for d in json.loads(text)))

    def __str__(self) -> str:
        return "\n".join(str(s) for s in self.steps)


# ================================================================ doctest examples


def _example_kernel() -> Kernel:
    out, a = Buffer("out", "float32", (6, 10)), Buffer("a", "float32", (6, 10))
    i, j = E.Var("i"), E.Var("j")
    return Kernel("scale", (out, a), For(i, 6, For(j, 10, Store(out, i * 10 + j, E.Load(a, i * 10 + j) * 2.0))))


def _example_sum() -> Kernel:
    out, a = Buffer("out", "float32", (6,)), Buffer("a", "float32", (6, 10))
    i, j, acc = E.Var("i"), E.Var("j"), E.Var("acc", "float32")
    body = For(i, 6, block(Let(acc, E.Const(0.0, "float32")),
                           For(j, 10, Assign(acc, acc + E.Load(a, i * 10 + j))),
                           Store(out, i, acc)))
    return Kernel("rowsum", (out, a), body)


def _example_accumulate() -> Kernel:
    out, a = Buffer("out", "float32", (4,)), Buffer("a", "float32", (4, 5))
    i, j = E.Var("i"), E.Var("j")
    body = For(i, 4, block(Store(out, i, E.Const(0.0, "float32")),
                           For(j, 5, Store(out, i, E.Load(out, i) + E.Load(a, i * 5 + j)))))
    return Kernel("rowsum", (out, a), body)


def _example_producer() -> Kernel:
    out, a = Buffer("out", "float32", (4, 3)), Buffer("a", "float32", (4, 3))
    t = Buffer("t", "float32", (4, 3), scope="local")
    p, q, i, j = E.Var("p"), E.Var("q"), E.Var("i"), E.Var("j")
    body = Alloc(t, block(For(p, 4, For(q, 3, Store(t, p * 3 + q, E.Load(a, p * 3 + q) * 2.0))),
                          For(i, 4, For(j, 3, Store(out, i * 3 + j, E.Load(t, i * 3 + j) + 1.0)))))
    return Kernel("twice_plus", (out, a), body)
