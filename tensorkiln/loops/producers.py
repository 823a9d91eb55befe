"""Schedule primitives that place a buffer's producer: compute_inline, compute_at, cache_write and
pack (cache_read).

`compute_inline` and `compute_at` move an Alloc'ed producer into its readers or
into one of their loops; `cache_write` accumulates into a local buffer and
stores once; `pack` copies the part of a buffer a loop reads into a local one.
Like the loop primitives of schedule.py (which hands these on and holds the
rules they check and the doctests' example kernels), each returns a new,
simplified kernel or raises `ScheduleError` saying why it would not keep the
kernel's meaning.
"""
from __future__ import annotations

import math
from typing import Optional

from tensorkiln.loops import expr as E
from tensorkiln.loops.bounds import Bounds
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.ir import Alloc, Assign, Block, For, Kernel, Let, Stmt, Store, block, iter_stmts, stmt_exprs
from tensorkiln.loops.placement import placement_problems, reads_in_order
from tensorkiln.loops.simplify import build_linear, linear_form, simplify
from tensorkiln.loops.types import STORAGE_ONLY
from tensorkiln.loops.nest import (
    ScheduleError, _const_extent, _declared_inside, _fresh, _loads, _loop_ranges, _loop_vars_inside, _loops,
    _map_all_exprs, _map_expr_tree, _rename_loops, _replace, _rewrite, _single_body, _substitute_expr,
    _uses, carried_dependences, substitute,
)


def _find_alloc(kernel: Kernel, buffer: str) -> Alloc:
    found = [s for s in iter_stmts(kernel.body) if isinstance(s, Alloc) and s.buffer.name == buffer]
    if not found:
        raise ScheduleError(f"kernel {kernel.name}: no allocated (local) buffer {buffer!r}; compute_at and "
                            "compute_inline work on Alloc'ed producers")
    return found[0]


def _producer(alloc: Alloc) -> tuple[Block, int, Stmt]:
    body = alloc.body
    stmts = body.stmts if isinstance(body, Block) else (body,)
    name = alloc.buffer.name
    writers = [k for k, s in enumerate(stmts) if any(isinstance(x, Store) and x.buffer.name == name
                                                     for x in iter_stmts(s))]
    if len(writers) != 1:
        raise ScheduleError(f"buffer {name} must be written by exactly one statement of its Alloc's body, "
                            f"found {len(writers)}")
    k = writers[0]
    return Block(tuple(stmts)), k, stmts[k]


def compute_inline(kernel: Kernel, buffer: str) -> Kernel:
    """Inline the Alloc'ed producer `buffer` into its readers and drop the buffer.

    Preconditions: one loop nest writes the buffer, a perfect nest ending in
    one store `buffer[row-major index of the nest's variables] = value`, with
    constant extents covering the buffer exactly; the value does not read the
    buffer; nothing after the producer writes a buffer the value reads.

    >>> from tensorkiln.loops.schedule import _example_producer
    >>> k = _example_producer()
    >>> print(k)
    kernel twice_plus(out: float32[4, 3], a: float32[4, 3]):
      alloc t: float32[4, 3]:
        for p in 0..4:
          for q in 0..3:
            t[p*3 + q] = a[p*3 + q]*2.0
        for i in 0..4:
          for j in 0..3:
            out[i*3 + j] = t[i*3 + j] + 1.0
    >>> print(compute_inline(k, "t"))
    kernel twice_plus(out: float32[4, 3], a: float32[4, 3]):
      for i in 0..4:
        for j in 0..3:
          out[i*3 + j] = a[i*3 + j]*2.0 + 1.0
    """
    alloc = _find_alloc(kernel, buffer)
    stmts, k, nest = _producer(alloc)
    loops: list[For] = []
    node: Stmt = nest
    while isinstance(node, For):
        loops.append(node)
        node = _single_body(node)
    if not isinstance(node, Store) or node.buffer.name != buffer:
        raise ScheduleError(f"compute_inline of {buffer}: its producer is not a perfect loop nest ending in one "
                            f"store to {buffer}")
    extents = [_const_extent(l, f"compute_inline of {buffer}") for l in loops]
    terms, constant = linear_form(simplify(node.index))
    stride, expected = 1, {}
    for l, n in reversed(list(zip(loops, extents))):
        expected[l.var] = stride
        stride *= n
    unit = {l.var for l, n in zip(loops, extents) if n == 1}  # always 0: their terms do not matter
    actual = {t: c for t, c in terms.items() if c and t not in unit}
    if constant != 0 or stride != alloc.buffer.size or actual != {v: c for v, c in expected.items() if v not in unit}:
        raise ScheduleError(f"compute_inline of {buffer}: the producer stores at {E.format_expr(node.index)}, "
                            "not at the row-major index of its loops over the whole buffer")
    if any(ld.buffer.name == buffer for ld in E.walk(node.value) if isinstance(ld, E.Load)):
        raise ScheduleError(f"compute_inline of {buffer}: the producer reads {buffer} itself")
    read = {ld.buffer.name for ld in E.walk(node.value) if isinstance(ld, E.Load)}
    rest = stmts.stmts[:k] + stmts.stmts[k + 1:]
    later_writes = {s.buffer.name for r in stmts.stmts[k + 1:] for s in iter_stmts(r) if isinstance(s, Store)}
    if read & later_writes:
        raise ScheduleError(f"compute_inline of {buffer}: later statements write {sorted(read & later_writes)[0]}, "
                            "which the producer reads")

    def inline(e: E.Expr) -> Optional[E.Expr]:
        if isinstance(e, E.Load) and e.buffer.name == buffer:
            index = _map_expr_tree(e.index, inline)
            mapping = {}
            for l, n in zip(loops, extents):
                s = expected[l.var]
                mapping[l.var.name] = E.const(0) if n == 1 else (index // s) % n if s != 1 else index % n
            return _substitute_expr(node.value, mapping)
        return None

    new_body = _map_all_exprs(block(*rest) if rest else Block(()), inline)
    if any(isinstance(s, Store) and s.buffer.name == buffer for s in iter_stmts(new_body)):
        raise ScheduleError(f"compute_inline of {buffer}: another statement writes it")
    return _replace(kernel, alloc, new_body)


def compute_at(kernel: Kernel, buffer: str, loop: str) -> Kernel:
    """Compute the Alloc'ed producer `buffer` inside consumer loop `loop`, one producer iteration per iteration.

    Preconditions: the producer is one loop nest, before the consumer in the
    Alloc's body, whose outer loop has the extent of `loop` (a constant of at
    most 65536); consumer iteration v reads only locations written by producer
    iterations <= v (checked with interval bounds), so producing row v at the
    start of iteration v is enough; and the move passes over nothing that
    writes what the producer reads or touches what else it writes
    (placement.py states the rules). The producer's loops and lets are renamed
    where another statement of the kernel uses their names.

    >>> from tensorkiln.loops.schedule import _example_producer
    >>> print(compute_at(_example_producer(), "t", "i"))
    kernel twice_plus(out: float32[4, 3], a: float32[4, 3]):
      alloc t: float32[4, 3]:
        for i in 0..4:
          for q in 0..3:
            t[i*3 + q] = a[i*3 + q]*2.0
          for j in 0..3:
            out[i*3 + j] = t[i*3 + j] + 1.0
    """
    alloc = _find_alloc(kernel, buffer)
    stmts, k, nest = _producer(alloc)
    if not isinstance(nest, For):
        raise ScheduleError(f"compute_at of {buffer}: its producer is not a loop")
    consumer = _loops(kernel, loop)
    later = stmts.stmts[k + 1:]
    if not any(any(x is consumer for x in iter_stmts(s)) for s in later):
        raise ScheduleError(f"compute_at of {buffer}: loop {loop} is not after the producer in {buffer}'s scope")
    n = _const_extent(nest, f"compute_at of {buffer}")
    if _const_extent(consumer, f"compute_at of {buffer}") != n:
        raise ScheduleError(f"compute_at of {buffer}: producer loop {nest.var.name} runs {n} iterations, "
                            f"loop {loop} runs {E.format_expr(consumer.extent)}")
    if n > 65536:
        raise ScheduleError(f"compute_at of {buffer}: loop {loop} is too long to check ({n} > 65536)")
    w_ranges = {l.var.name: (0, max(Bounds({})(l.extent)[1] - 1, 0)) for l in iter_stmts(nest) if isinstance(l, For)}
    r_ranges = _loop_ranges(kernel)
    writes = [s.index for s in iter_stmts(nest) if isinstance(s, Store) and s.buffer.name == buffer]
    reads = [ld.index for ld in _loads(consumer.body) if ld.buffer.name == buffer]
    reads_elsewhere = [ld for s in later for ld in _loads(s) if ld.buffer.name == buffer]
    if len(reads_elsewhere) != len(reads):
        raise ScheduleError(f"compute_at of {buffer}: it is also read outside loop {loop}")
    unordered = consumer.kind in ("parallel", "vectorized")  # iterations that run in no fixed order
    for r in reads:
        for w in writes:
            if not reads_in_order(w, nest.var.name, r, loop, w_ranges, r_ranges, n, own_only=unordered):
                which = f"other producer iterations write (loop {loop} is {consumer.kind})" if unordered \
                    and reads_in_order(w, nest.var.name, r, loop, w_ranges, r_ranges, n) \
                    else "later producer iterations write"
                raise ScheduleError(f"compute_at of {buffer}: iteration {loop} reads {buffer}[{E.format_expr(r)}], "
                                    f"which {which}")
    if unordered and carried_dependences(nest):
        raise ScheduleError(f"compute_at of {buffer}: loop {loop} is {consumer.kind}, but the producer's iterations "
                            f"depend on one another: {carried_dependences(nest)[0]}")
    holder = next(k2 for k2, s in enumerate(later) if any(x is consumer for x in iter_stmts(s)))
    problems = placement_problems(nest, buffer, list(later[:holder + 1]), consumer)
    if problems:
        raise ScheduleError(f"compute_at of {buffer} at loop {loop}: {problems[0]}")
    renames = _renames(kernel, nest, consumer)
    produced = substitute(nest.body, renames)
    produced = _rename_loops(produced, {k: v for k, v in renames.items() if k != nest.var.name})
    new_consumer = For(consumer.var, consumer.extent, block(produced, consumer.body), consumer.kind)
    rest = stmts.stmts[:k] + stmts.stmts[k + 1:]
    new_alloc_body = _rewrite(block(*rest), lambda s: new_consumer if s is consumer else None)
    return _replace(kernel, alloc, Alloc(alloc.buffer, new_alloc_body))


def _renames(kernel: Kernel, nest: For, consumer: For) -> dict[str, E.Expr]:
    """The producer's variable becomes the consumer's; its inner loops and lets take fresh names where the kernel
    uses theirs elsewhere (moved into the consumer's body, a let of the same name would hide one declared
    around it from the consumer's reads)."""
    outside = Kernel("outside", (), _rewrite(kernel.body, lambda s: Block(()) if s is nest else None))
    used = outside.declared_names() | {v for s in iter_stmts(outside.body) for e in stmt_exprs(s)
                                       for v in E.free_vars(e)}
    taken = kernel.declared_names() | used
    renames: dict[str, E.Expr] = {nest.var.name: consumer.var}
    for s in iter_stmts(nest.body):
        if isinstance(s, (For, Let)) and s.var.name in used and s.var.name not in renames:
            renames[s.var.name] = E.Var(_fresh(kernel, s.var.name, taken), s.var.dtype)
    return renames


def cache_write(kernel: Kernel, buffer: str, loop: str) -> Kernel:
    """Accumulate `buffer`'s element updated by `loop` in a local scalar; write it once after the loop.

    Preconditions: inside `loop` every store to and load from `buffer` uses
    one index that depends on no loop variable of `loop` (the loop is a
    reduction axis of that element); `buffer` is not a 16-bit storage type
    (those round at every store). A store of an initial value to the same
    index just before the loop becomes the scalar's initial value.

    >>> from tensorkiln.loops.schedule import _example_accumulate
    >>> k = _example_accumulate()
    >>> print(k)
    kernel rowsum(out: float32[4], a: float32[4, 5]):
      for i in 0..4:
        out[i] = 0.0
        for j in 0..5:
          out[i] = out[i] + a[i*5 + j]
    >>> print(cache_write(k, "out", "j"))
    kernel rowsum(out: float32[4], a: float32[4, 5]):
      for i in 0..4:
        out_local: float32 = 0.0
        for j in 0..5:
          out_local = out_local + a[i*5 + j]
        out[i] = out_local
    """
    target = _loops(kernel, loop)
    inner_vars = _loop_vars_inside(target) | _declared_inside(target)
    indices = {s.index for s in iter_stmts(target.body) if isinstance(s, Store) and s.buffer.name == buffer}
    indices |= {ld.index for ld in _loads(target.body) if ld.buffer.name == buffer}
    if len(indices) != 1:
        raise ScheduleError(f"cache_write of {buffer} at loop {loop}: it is accessed at {len(indices)} different "
                            "indices inside the loop (need exactly one)")
    index = next(iter(indices))
    if _uses(index, inner_vars):
        raise ScheduleError(f"cache_write of {buffer} at loop {loop}: the index {E.format_expr(index)} changes "
                            "inside the loop")
    buf = next(s.buffer for s in iter_stmts(target.body) if isinstance(s, Store) and s.buffer.name == buffer) \
        if any(isinstance(s, Store) and s.buffer.name == buffer for s in iter_stmts(target.body)) else None
    if buf is None:
        raise ScheduleError(f"cache_write of {buffer} at loop {loop}: the loop does not write {buffer}")
    if buf.dtype in STORAGE_ONLY:
        raise ScheduleError(f"cache_write of {buffer}: {buf.dtype} rounds at every store; a local accumulator "
                            "would change the result")
    local = E.Var(_fresh(kernel, f"{buffer}_local"), buf.value_dtype)

    def to_local(e: E.Expr) -> Optional[E.Expr]:
        return local if isinstance(e, E.Load) and e.buffer.name == buffer else None

    body = _map_all_exprs(target.body, to_local)
    body = _rewrite(body, lambda s: Assign(local, s.value) if isinstance(s, Store) and s.buffer.name == buffer
                    else None)
    new_loop = For(target.var, target.extent, body, target.kind)
    # Absorb `buffer[index] = init` right before the loop in its block.
    parent = next((s for s in iter_stmts(kernel.body) if isinstance(s, Block)
                   and any(x is target for x in s.stmts)), None)
    if parent is not None:
        pos = next(k for k, x in enumerate(parent.stmts) if x is target)
        prev = parent.stmts[pos - 1] if pos else None
        if isinstance(prev, Store) and prev.buffer.name == buffer and prev.index == index \
                and not any(isinstance(n, E.Load) and n.buffer.name == buffer for n in E.walk(prev.value)):
            new_block = block(*parent.stmts[:pos - 1], Let(local, prev.value), new_loop,
                              Store(buf, index, local), *parent.stmts[pos + 1:])
            return _replace(kernel, parent, new_block)
    return _replace(kernel, target, block(Let(local, E.Load(buf, index)), new_loop, Store(buf, index, local)))


def pack(kernel: Kernel, buffer: str, loop: str) -> Kernel:
    """Copy the tile of `buffer` that one iteration of `loop` reads into a local contiguous buffer first.

    The local buffer `<buffer>_pack` is laid out in the order of the loops
    inside `loop` (outermost first), so a transposed operand becomes
    contiguous along the innermost loop. Also known as cache_read.

    Preconditions: `loop` does not write `buffer`; every load of `buffer`
    inside it has the same index, affine in the loop variables inside `loop`
    with constant coefficients; those loops have bounded extents and the
    tile has at most 1 << 22 elements.

    >>> from tensorkiln.loops.schedule import _example_kernel
    >>> print(pack(_example_kernel(), "a", "i"))
    kernel scale(out: float32[6, 10], a: float32[6, 10]):
      for i in 0..6:
        alloc a_pack: float32[10]:
          for a_pack_j in 0..10:
            a_pack[a_pack_j] = a[i*10 + a_pack_j]
          for j in 0..10:
            out[i*10 + j] = a_pack[j]*2.0
    """
    target = _loops(kernel, loop)
    if any(isinstance(s, Store) and s.buffer.name == buffer for s in iter_stmts(target.body)):
        raise ScheduleError(f"pack of {buffer} at loop {loop}: the loop writes {buffer}")
    loads = [ld for ld in _loads(target.body) if ld.buffer.name == buffer]
    if not loads:
        raise ScheduleError(f"pack of {buffer} at loop {loop}: the loop does not read {buffer}")
    if len({ld.index for ld in loads}) != 1:
        raise ScheduleError(f"pack of {buffer} at loop {loop}: it is read at several indices "
                            f"({', '.join(sorted({E.format_expr(ld.index) for ld in loads}))})")
    src = loads[0].buffer
    index = loads[0].index
    inner = [s for s in iter_stmts(target.body) if isinstance(s, For)]
    inner_names = {s.var.name for s in inner}
    terms, constant = linear_form(index)
    coeffs: list[tuple[For, int]] = []
    base_terms = {}
    for t, c in terms.items():
        if isinstance(t, E.Var) and t.name in inner_names:
            coeffs.append((next(s for s in inner if s.var.name == t.name), c))
        elif _uses(t, inner_names):
            raise ScheduleError(f"pack of {buffer} at loop {loop}: index {E.format_expr(index)} is not affine in "
                                "the loops inside it")
        else:
            base_terms[t] = c
    coeffs.sort(key=lambda lc: inner.index(lc[0]))
    extents = []
    ranges = _loop_ranges(kernel)
    for l, _ in coeffs:
        hi = Bounds(ranges)(l.extent)[1]
        if math.isinf(hi) or hi > 1 << 22:
            raise ScheduleError(f"pack of {buffer} at loop {loop}: the extent of loop {l.var.name} is unbounded")
        extents.append(int(hi))
    size = math.prod(extents) if extents else 1
    if size > 1 << 22:
        raise ScheduleError(f"pack of {buffer} at loop {loop}: the tile has {size} elements (limit {1 << 22})")
    taken = kernel.declared_names()
    local = Buffer(_fresh(kernel, f"{buffer}_pack", taken), src.dtype, tuple(extents) or (1,), scope="local")
    copy_vars = [E.Var(_fresh(kernel, f"{local.name}_{l.var.name}", taken)) for l, _ in coeffs]
    base = build_linear(base_terms, constant, index.dtype)
    source = base
    for (l, c), w in zip(coeffs, copy_vars):
        source = source + w * c
    source = E.minimum(E.maximum(source, 0), src.size - 1)

    def local_index(vs: list[E.Expr]) -> E.Expr:
        flat: E.Expr = E.const(0)
        for v, n in zip(vs, extents):
            flat = flat * n + v
        return flat

    copy: Stmt = Store(local, local_index(copy_vars), E.Load(src, source))
    for w, n in reversed(list(zip(copy_vars, extents))):
        copy = For(w, E.const(n), copy)
    packed_index = local_index([l.var for l, _ in coeffs])
    body = _map_all_exprs(target.body, lambda e: E.Load(local, packed_index)
                          if isinstance(e, E.Load) and e.buffer.name == buffer else None)
    new = For(target.var, target.extent, Alloc(local, block(copy, body)), target.kind)
    return _replace(kernel, target, new)


cache_read = pack
