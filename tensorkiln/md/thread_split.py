"""How the force kernel splits its atoms among threads: chunks of equal pairs, run in two colours.

With a half list (Newton's third law) a pair's force goes to both atoms, so
two threads could add to the same atom j at once. The atoms are sorted by
cell, cells are numbered z-major, and the stencil keeps the mirror cell that
lies in i's z-plane or above (neighbor_kernels.py): a chunk of consecutive
atoms writes only to the z-planes it spans and the `reach` planes above them.
The atoms are cut into 2 x threads chunks holding equal numbers of listed
pairs (equal work, not equal cells); chunks 0, 2, 4, ... run at once (one per
thread), then chunks 1, 3, 5, .... Two chunks of one colour have a chunk of
the other colour between them, and where that chunk separates them by at
least `reach` whole planes (also around the periodic ring of planes), no atom
is written by two threads at once. Then the threads add into the one force
array: no per-thread copies to clear and sum, and the split follows the
work as the liquid moves.

`split_for_threads` (serial, O(atoms), once per neighbour-list build) writes
`chunk_start` and `coloured[0]` = 1 where the separation holds; the caller
falls back to per-thread force copies where it does not (few atoms or
planes for the threads).
"""
from __future__ import annotations

from dataclasses import dataclass

from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Const, Load, Var, cast, ge, logical_or, lt, maximum, minimum, where
from tensorkiln.loops.ir import Assign, For, Kernel, Let, Store, block
from tensorkiln.md.loop_helpers import I64, i64, index, let


@dataclass(frozen=True)
class SplitBuffers:
    """The buffers of the split for `threads` threads of `atoms` atoms."""

    atoms: int
    threads: int

    @property
    def chunks(self) -> int:
        return 2 * self.threads

    @property
    def chunk_start(self) -> Buffer:
        return Buffer("chunk_start", "int32", (self.chunks + 1,))

    @property
    def coloured(self) -> Buffer:
        return Buffer("coloured", "int32", (1,))

    @property
    def neighbor_count(self) -> Buffer:
        return Buffer("neighbor_count", "int32", (self.atoms, 2))

    @property
    def cell(self) -> Buffer:
        return Buffer("cell", "int32", (self.atoms,))


def split_for_threads(b: SplitBuffers, cells_per_plane: int, planes: int, reach: int) -> Kernel:
    """chunk_start: 2 x threads chunks of consecutive atoms with about equal listed pairs; coloured[0] = 1
    when chunks of one colour are at least `reach` z-planes apart (planes of `cells_per_plane` cells)."""
    n, chunks = b.atoms, b.chunks
    i, c, c2 = Var("i"), Var("c"), Var("c2")
    total, running = Var("total_pairs", I64), Var("running", I64)

    def pairs(atom):
        return index(Load(b.neighbor_count, atom * 2)) + index(Load(b.neighbor_count, atom * 2 + 1))

    count_all = For(i, n, Assign(total, total + pairs(i)))
    clear = For(c, chunks + 1, Store(b.chunk_start, c, Const(0, "int32")))
    # atom i belongs to the chunk its first pair falls in; chunk_start[c + 1] ends up one past its last atom
    ii = Var("ii")
    decl_chunk, chunk = let("chunk", minimum(running * chunks // maximum(total, i64(1)), i64(chunks - 1)))
    assign = For(ii, n, block(decl_chunk, Store(b.chunk_start, chunk + 1, cast(ii + 1, "int32")),
                              Assign(running, running + pairs(ii))))
    # a chunk that got no atom starts and ends where the one before it ends
    fill = For(c2, chunks, Store(b.chunk_start, c2 + 1,
                                 maximum(Load(b.chunk_start, c2 + 1), Load(b.chunk_start, c2))))

    # the separation: for each chunk c, whole planes strictly between chunk c-1's last plane and chunk
    # c+1's first (around the ring: chunk -1 is the last chunk, one ring of planes lower)
    k = Var("k")
    bad = Var("bad", I64)

    def plane_of(atom):
        return index(Load(b.cell, minimum(maximum(atom, i64(0)), i64(n - 1)))) // cells_per_plane

    before = (k + (chunks - 1)) % chunks
    after = (k + 1) % chunks
    start_before, end_before = index(Load(b.chunk_start, before)), index(Load(b.chunk_start, before + 1))
    start_after, end_after = index(Load(b.chunk_start, after)), index(Load(b.chunk_start, after + 1))
    decl_top, top = let("top_before", plane_of(end_before - 1) - where(lt(k, i64(1)), i64(planes), i64(0)))
    decl_bottom, bottom = let("bottom_after", plane_of(start_after)
                              + where(ge(k, i64(chunks - 1)), i64(planes), i64(0)))
    empty = logical_or(ge(start_before, end_before), ge(start_after, end_after))
    too_close = lt(bottom - top - 1, i64(reach))
    check = For(k, chunks, block(decl_top, decl_bottom,
                                 Assign(bad, bad + cast(logical_or(empty, too_close), I64))))
    body = block(Let(total, i64(0)), Let(running, i64(0)), Let(bad, i64(0)), count_all, clear, assign, fill,
                 check, Store(b.coloured, i64(0), cast(lt(bad, i64(1)), "int32")))
    return Kernel("split_for_threads", (b.neighbor_count, b.cell, b.chunk_start, b.coloured), body,
                  f"{chunks} chunks of about equal pairs for {b.threads} threads in two colours; coloured when "
                  f"chunks of one colour are at least {reach} z-planes ({cells_per_plane} cells each) apart")
