"""Schedule sketches: the tunable loop structure of kernels that have no template.

An elementwise group, a reduction, a row kernel or a fused attention kernel
is lowered with its default loop nest (schedule_defaults.py, reduction.py,
templates/rows.py, templates/attention.py), none of which asks the tuner.
A *sketch* is a short sequence of schedule primitives (loops/schedule.py)
applied on top of that nest, chosen by rules from what the nest holds, as in
Ansor's sketch generation; its knobs (`SketchConfig`) say which rules apply
and with what factor:

- `fuse`: the two outermost perfectly nested independent loops become one
  (its iterations spread over threads as the outer one's did);
- `tile`: the innermost independent vectorized loop is split into blocks of
  `tile` lanes; the inner loop is vectorized (a constant trip count);
- `unroll`: the loop directly around the vector loop is split by `unroll`
  and its inner part unrolled (several rows per iteration);
- `grain`: the outermost parallel loop is split by `grain`, each thread's
  task running that many of its iterations (fewer, larger tasks);
- `parallel`: a kernel the default left serial (below the size that pays
  for threads) runs its outermost independent loop on threads;
- `rfactor`: the innermost loop reducing into a scalar (acc = acc op x)
  keeps `rfactor` partial accumulators, combined after it, and its inner
  part is vectorized;
- `cache_write`: the k-th serial loop that accumulates into elements of a
  buffer through a perfect nest of independent loops (the per-lane partial
  sums of a row kernel, an attention kernel's output tile) moves innermost
  (`reorder`) and each element it updates is kept in a local scalar, written
  back once after it (`cache_write`);
- `compute_at`: the k-th local buffer written by one loop nest and read by a
  later loop of the same extent is produced inside that loop, one
  iteration's part just before it is used (`compute_at`).

`cache_write` and `compute_at` act last, on the kernel the other rules made,
with its loops renamed apart first (a lowering reuses a loop name in several
nests; renaming a loop variable changes nothing else).

The default (every knob 0) applies no primitive, so an untuned kernel is
exactly the lowering's. Every primitive checks its own legality: a sketch
whose step would change the kernel's meaning raises the primitive's
`ScheduleError`, and such a configuration is not a member of the space
(`sketch_legal`). A tuning record's configuration is read back through
`tuned.configured` like a template's, with the same check.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
from collections import OrderedDict
from dataclasses import dataclass

from ..loops import expr as E
from ..loops import schedule as S
from ..loops.ir import Alloc, Block, For, Kernel, Stmt, Store, iter_stmts, stmt_exprs
from ..loops.nest import ScheduleError, _rewrite, carried_dependences, substitute
from .tuned import configured, workload_key

SKETCHED_KINDS = ("injective", "reduction", "row", "attention")  # lowered without a tuned template


@dataclass(frozen=True)
class SketchConfig:
    """The knobs of a sketch (see the module docstring); 0 leaves that part of the nest as lowered."""

    # quiet: a kernel comment names only the knobs that are not 0
    fuse: int = dataclasses.field(default=0, metadata={"quiet": True})
    tile: int = dataclasses.field(default=0, metadata={"quiet": True})
    unroll: int = dataclasses.field(default=0, metadata={"quiet": True})
    grain: int = dataclasses.field(default=0, metadata={"quiet": True})
    parallel: int = dataclasses.field(default=0, metadata={"quiet": True})
    rfactor: int = dataclasses.field(default=0, metadata={"quiet": True})
    cache_write: int = dataclasses.field(default=0, metadata={"quiet": True})
    compute_at: int = dataclasses.field(default=0, metadata={"quiet": True})


@dataclass(frozen=True)
class NestFacts:
    """What the sketch rules read of a kernel: the loops each rule would act on (None: the rule does not apply)."""

    fusable: tuple[For, For] | None  # two outermost perfectly nested independent loops
    vector: For | None  # the innermost independent vectorized loop
    around: For | None  # the loop whose only statement is `vector`
    parallel: For | None  # the outermost parallel loop
    serial_outer: For | None  # the outermost independent loop, where no loop is parallel
    reduction: For | None  # the innermost loop that updates an outer scalar
    accumulating: int = 0  # loops the cache_write rule can act on (after renaming loops apart)
    producers: int = 0  # (buffer, loop) pairs the compute_at rule can act on

    def extent(self, loop: For | None) -> int:
        """The loop's constant extent (0 when it has none)."""
        return int(loop.extent.value) if loop is not None and isinstance(loop.extent, E.Const) else 0


def _loops(kernel: Kernel) -> list[For]:
    return [s for s in iter_stmts(kernel.body) if isinstance(s, For)]


def _only_statement(loop: For) -> Stmt:
    """The loop's body, looking through blocks of one statement."""
    body = loop.body
    while isinstance(body, Block) and len(body.stmts) == 1:
        body = body.stmts[0]
    return body


def _innermost(loop: For) -> bool:
    return not any(isinstance(s, For) for s in iter_stmts(loop.body))


def nest_facts(kernel: Kernel) -> NestFacts:
    """The loops of `kernel` the sketch rules act on; a loop whose name is not unique is never chosen."""
    loops = _loops(kernel)
    counts: dict[str, int] = {}
    for loop in loops:
        counts[loop.var.name] = counts.get(loop.var.name, 0) + 1
    loops = [l for l in loops if counts[l.var.name] == 1]
    independent = [l for l in loops if not carried_dependences(l)]
    free = {id(l) for l in independent}  # loops compared by identity: two may print alike
    top = kernel.body if isinstance(kernel.body, For) else None
    fusable = None
    if top is not None and id(top) in free:
        inner = _only_statement(top)
        if isinstance(inner, For) and id(inner) in free:
            fusable = (top, inner)
    vector = next((l for l in reversed(independent) if l.kind == "vectorized" and _innermost(l)), None)
    around = next((l for l in loops if vector is not None and _only_statement(l) is vector), None)
    parallel = next((l for l in loops if l.kind == "parallel"), None)
    serial_outer = None if parallel is not None or any(l.kind == "parallel" for l in _loops(kernel)) \
        else next(iter(independent), None)
    reduction = next((l for l in reversed(loops) if _innermost(l) and id(l) not in free), None)
    renamed = unique_loop_names(kernel)
    return NestFacts(fusable, vector, around, parallel, serial_outer, reduction,
                     len(accumulating_loops(renamed)), len(producer_pairs(renamed)))


def unique_loop_names(kernel: Kernel) -> Kernel:
    """`kernel` with every loop whose variable name an earlier loop already has renamed apart (`e1_lane1`).
    Only names change: each loop's variable is replaced in its own body."""
    while True:
        seen: set[str] = set()
        duplicate = None
        for stmt in iter_stmts(kernel.body):
            if isinstance(stmt, For):
                if stmt.var.name in seen:
                    duplicate = stmt
                    break
                seen.add(stmt.var.name)
        if duplicate is None:
            return kernel
        var = E.Var(_free(kernel, duplicate.var.name))
        renamed = For(var, duplicate.extent, substitute(duplicate.body, {duplicate.var.name: var}), duplicate.kind)
        kernel = Kernel(kernel.name, kernel.params, _rewrite(kernel.body, lambda x: renamed if x is duplicate else None),
                        kernel.comment)


def _perfect_chain(loop: For) -> list[For]:
    """The loops perfectly nested directly inside `loop`, outermost first."""
    chain, inner = [], _only_statement(loop)
    while isinstance(inner, For):
        chain.append(inner)
        inner = _only_statement(inner)
    return chain


def accumulating_loops(kernel: Kernel) -> list[tuple[For, list[For], list[str]]]:
    """(loop, the perfect nest inside it, the buffers it accumulates into) for each serial loop of constant
    extent that carries a dependence, directly around a perfect nest of independent loops, whose stores all
    go to indices that do not use the loop (each element is updated once per iteration: an accumulator)."""
    found = []
    for loop in _loops(kernel):
        if loop.kind != "serial" or not isinstance(loop.extent, E.Const) or not carried_dependences(loop):
            continue
        chain = _perfect_chain(loop)
        if not chain or any(carried_dependences(c) for c in chain):
            continue
        stores = [x for x in iter_stmts(chain[-1].body) if isinstance(x, Store)]
        if stores and all(loop.var.name not in E.free_vars(x.index) for x in stores):
            found.append((loop, chain, sorted({x.buffer.name for x in stores})))
    return found


def producer_pairs(kernel: Kernel) -> list[tuple[str, For]]:
    """(buffer, consumer loop) for each local buffer written by one loop nest of its Alloc's body and each loop
    after it in that body (or nested in a later statement) that reads it and has the producer's outer extent."""
    found = []
    for alloc in (x for x in iter_stmts(kernel.body) if isinstance(x, Alloc)):
        stmts = alloc.body.stmts if isinstance(alloc.body, Block) else (alloc.body,)
        name = alloc.buffer.name
        writers = [k for k, x in enumerate(stmts) if any(isinstance(y, Store) and y.buffer.name == name
                                                         for y in iter_stmts(x))]
        if len(writers) != 1 or not isinstance(stmts[writers[0]], For):
            continue
        extent = stmts[writers[0]].extent
        for later in stmts[writers[0] + 1:]:
            for loop in (x for x in iter_stmts(later) if isinstance(x, For)):
                reads = any(isinstance(n, E.Load) and n.buffer.name == name
                            for y in iter_stmts(loop.body) for e in stmt_exprs(y) for n in E.walk(e))
                if reads and loop.extent == extent:
                    found.append((name, loop))
    return found


def _free(kernel: Kernel, base: str) -> str:
    """A loop name not yet used in `kernel`."""
    taken = {l.var.name for l in _loops(kernel)} | {p.name for p in kernel.params}
    name, k = base, 1
    while name in taken:
        name, k = f"{base}{k}", k + 1
    return name


class _Sketcher:
    """Applies steps one at a time (their names depend on the kernel so far) and keeps them as a Schedule."""

    def __init__(self, kernel: Kernel):
        self.kernel, self.steps = kernel, S.Schedule()

    def step(self, name: str, *args) -> None:
        self.steps = self.steps.then(name, *args)
        self.kernel = S.PRIMITIVES[name](self.kernel, *args)

    def split(self, loop: str, factor: int) -> tuple[str, str]:
        outer, inner = _free(self.kernel, f"{loop}_o"), _free(self.kernel, f"{loop}_i")
        self.step("split", loop, factor, "min", outer, inner)
        return outer, inner


def sketch(kernel: Kernel, config: SketchConfig) -> tuple[Kernel, S.Schedule]:
    """`kernel` with the sketch `config` applied, and the primitive steps it took.

    Raises ScheduleError (the refusing primitive's message) when a step is illegal, or when a knob
    asks for a rule that does not apply to this kernel or a factor that changes nothing."""
    facts = nest_facts(kernel)
    s = _Sketcher(kernel)
    vector = facts.vector.var.name if facts.vector is not None else None
    vector_parallel = False
    if config.fuse:
        if facts.fusable is None:
            raise ScheduleError(f"sketch of {kernel.name}: fuse needs two perfectly nested independent loops")
        outer, inner = facts.fusable
        fused = _free(s.kernel, f"{outer.var.name}_{inner.var.name}")
        s.step("fuse", outer.var.name, inner.var.name, fused)
        if inner.var.name == vector:
            vector, vector_parallel = fused, outer.kind == "parallel"
            if not config.tile:
                s.step("vectorize", fused)
        elif outer.kind == "parallel":
            s.step("parallel", fused)
    if config.tile:
        extent = facts.extent(facts.vector) * (facts.extent(facts.fusable[0]) if config.fuse else 1)
        if vector is None or not 0 < config.tile < extent:
            raise ScheduleError(f"sketch of {kernel.name}: tile {config.tile} needs a vectorized loop longer than it")
        block, lanes = s.split(vector, config.tile)
        s.step("vectorize", lanes)
        if vector_parallel:
            s.step("parallel", block)
        vector = lanes
    if config.unroll:
        around = facts.around
        if around is None or config.fuse or facts.extent(around) <= config.unroll:
            raise ScheduleError(f"sketch of {kernel.name}: unroll {config.unroll} needs a loop around the vector loop "
                                "longer than it")
        rows, unrolled = s.split(around.var.name, config.unroll)
        s.step("unroll", unrolled)
        if around.kind == "parallel":
            s.step("parallel", rows)
    if config.grain:
        loop = facts.parallel
        if loop is None or config.fuse or config.unroll and loop is facts.around \
                or facts.extent(loop) <= config.grain:
            raise ScheduleError(f"sketch of {kernel.name}: grain {config.grain} needs a parallel loop longer than it")
        tasks, _ = s.split(loop.var.name, config.grain)
        s.step("parallel", tasks)
    if config.parallel:
        if facts.serial_outer is None or config.fuse:
            raise ScheduleError(f"sketch of {kernel.name}: parallel needs a serial kernel with an independent loop")
        s.step("parallel", facts.serial_outer.var.name)
    if config.rfactor:
        loop = facts.reduction
        if loop is None or facts.extent(loop) <= config.rfactor:
            raise ScheduleError(f"sketch of {kernel.name}: rfactor {config.rfactor} needs a reduction loop longer "
                                "than it")
        s.step("rfactor", loop.var.name, config.rfactor)
        s.step("vectorize", f"{loop.var.name}_i")
    if config.cache_write or config.compute_at:
        s.kernel = unique_loop_names(s.kernel)
    if config.cache_write:
        candidates = accumulating_loops(s.kernel)
        if not 0 < config.cache_write <= len(candidates):
            raise ScheduleError(f"sketch of {kernel.name}: cache_write {config.cache_write} needs that many loops "
                                f"accumulating into a buffer, found {len(candidates)}")
        loop, chain, buffers = candidates[config.cache_write - 1]
        s.step("reorder", *[c.var.name for c in chain], loop.var.name)
        for buffer in buffers:
            s.step("cache_write", buffer, loop.var.name)
    if config.compute_at:
        pairs = producer_pairs(s.kernel)
        if not 0 < config.compute_at <= len(pairs):
            raise ScheduleError(f"sketch of {kernel.name}: compute_at {config.compute_at} needs that many local "
                                f"buffers produced before a loop of their producer's extent, found {len(pairs)}")
        buffer, loop = pairs[config.compute_at - 1]
        s.step("compute_at", buffer, loop.var.name)
    return s.kernel, s.steps


def sketch_legal(kernel: Kernel, config: SketchConfig) -> bool:
    """Whether the sketch applies to `kernel` (every primitive accepts its step)."""
    try:
        sketch(kernel, config)
    except ScheduleError:
        return False
    return True


# ---- workloads: a key per kernel, and the kernels lowered in this process ------------------------------
_KERNELS: OrderedDict[str, Kernel] = OrderedDict()  # recently lowered sketch kernels by workload (the tuner's)
_KEPT = 512


def _canonical_text(kernel: Kernel) -> str:
    """The kernel's loop IR with its name, comment and parameter names replaced by fixed ones, so the same
    computation in two programs has one workload."""
    text = str(Kernel("k", kernel.params, kernel.body, ""))
    for n, param in enumerate(kernel.params):
        text = re.sub(rf"\b{re.escape(param.name)}\b", f"p{n}", text)
    return text


def sketch_workload(kernel: Kernel, kind: str) -> str:
    """`sketch:kind=reduction:dtype=float32:shape=37x129:nest=<digest>`: the kernel's kind, its output's
    dtype and shape, and a digest of its canonical loop IR (the facts that decide its code)."""
    out = kernel.params[0]
    shape = "x".join(str(d) for d in out.shape) or "1"
    digest = hashlib.sha256(_canonical_text(kernel).encode()).hexdigest()[:12]
    return workload_key("sketch", kind=kind, dtype=out.dtype, shape=shape, nest=digest)


def sketch_kernel(workload: str) -> Kernel | None:
    """The kernel of a sketch workload lowered in this process (None: not seen here)."""
    return _KERNELS.get(workload)


def remember_kernel(workload: str, kernel: Kernel) -> None:
    """Keep `kernel` as `workload`'s (the tuner's search space and measurements start from it)."""
    _KERNELS[workload] = kernel
    _KERNELS.move_to_end(workload)
    while len(_KERNELS) > _KEPT:
        _KERNELS.popitem(last=False)


def has_constant_sizes(kernel: Kernel) -> bool:
    """Whether every buffer of `kernel` has a shape known now (a run-time size has no workload)."""
    return all(isinstance(d, int) for p in kernel.params for d in p.shape)


def measurable_alone(kernel: Kernel) -> bool:
    """Whether `kernel` can be built and timed as a program of its own: sizes known now, and an output
    that is not also one of its inputs (updated in place)."""
    out = kernel.params[0]
    return has_constant_sizes(kernel) and all(p.name != out.name for p in kernel.params[1:])


def sketched(kernel: Kernel, kind: str) -> Kernel:
    """The kernel with its tuned sketch applied (a record for its workload), else unchanged."""
    if not kernel.params or not has_constant_sizes(kernel):
        return kernel
    workload = sketch_workload(kernel, kind)
    remember_kernel(workload, kernel)
    config = configured(workload, SketchConfig(), lambda c: sketch_legal(kernel, c))
    if config == SketchConfig():
        return kernel
    return sketch(kernel, config)[0]


def sketch_config(values: dict) -> SketchConfig:
    """A SketchConfig from a {knob: value} dict (knobs left out are 0)."""
    return dataclasses.replace(SketchConfig(), **values)


__all__ = ["NestFacts", "SKETCHED_KINDS", "SketchConfig", "accumulating_loops", "has_constant_sizes",
           "producer_pairs", "unique_loop_names", "measurable_alone", "nest_facts", "remember_kernel", "sketch", "sketch_config",
           "sketch_kernel", "sketch_legal", "sketch_workload", "sketched"]
