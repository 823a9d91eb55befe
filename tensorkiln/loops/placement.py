"""When a producer's iterations may run inside a consumer loop: the legality rules of `compute_at`.

`compute_at` (producers.py) moves a producer loop nest P, written before a
consumer loop C in its buffer's Alloc body, into C: producer iteration v runs
at the start of consumer iteration v. The kernel keeps its meaning when

1. *order*: consumer iteration v reads only points of the buffer that producer
   iterations <= v write (`reads_in_order`); where C is parallel or vectorized
   its iterations run in no fixed order, so each reads only points its own
   producer iteration writes;
2. *inputs*: nothing the move passes over - the statements from P's old place
   to the end of the one holding C, C's own body included - writes a buffer or
   scalar P reads, or declares a name P reads (P would see new values);
3. *other effects*: nothing the move passes over reads or writes a buffer or
   scalar that P writes besides the produced buffer (a row correction that P
   also applies to a running sum, which a later loop then updates in place:
   moved past that update, P would scale the wrong sum, and that loop would
   read values P had not yet written);
4. *once*: inside another loop or a condition, C runs its iterations several
   times (or not at all), so P runs each iteration as often: it may then write
   nothing but the produced buffer; and no loop around C within the buffer's
   scope may be parallel (its threads would write the shared buffer at once).

`placement_problems` checks 2-4 and names the first statement that breaks one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tensorkiln.loops import expr as E
from tensorkiln.loops.bounds import Bounds
from tensorkiln.loops.ir import (
    Alloc, Assign, Block, Concurrent, For, If, Let, NativeCall, Pointer, ProgramCall, RuntimeCall, Stmt, Store, While,
    format_stmt, iter_stmts, stmt_exprs,
)


@dataclass(frozen=True)
class Footprint:
    """The names a statement reads, writes and declares (buffers and scalars alike; its own locals left out)."""

    reads: frozenset[str]
    writes: frozenset[str]
    declares: frozenset[str]


def footprint(stmt: Stmt) -> Footprint:
    """What `stmt` reads and writes outside itself: loads, stores, scalar updates and calls' buffers.

    Buffers allocated and names declared (loops, lets) inside `stmt` are its own, not in `reads` or `writes`."""
    declares = {s.var.name for s in iter_stmts(stmt) if isinstance(s, (For, Let))}
    allocated = {s.buffer.name for s in iter_stmts(stmt) if isinstance(s, Alloc)}
    reads: set[str] = set()
    writes: set[str] = set()
    for s in iter_stmts(stmt):
        if isinstance(s, Store):
            writes.add(s.buffer.name)
        elif isinstance(s, Assign):
            writes.add(s.var.name)
        elif isinstance(s, (NativeCall, ProgramCall)):
            # a call writes the buffers it names and may read any buffer it is given a pointer to
            writes.update(s.writes)
            pointers = s.pointers() if isinstance(s, ProgramCall) else [a for a in s.args if isinstance(a, Pointer)]
            reads.update(p.buffer.name for p in pointers)
        elif isinstance(s, RuntimeCall):
            writes.update(b.name for b in s.writes)
            reads.update(b.name for b in s.reads)
        for e in stmt_exprs(s):
            for n in E.walk(e):
                if isinstance(n, E.Load):
                    reads.add(n.buffer.name)
                elif isinstance(n, E.Var):
                    reads.add(n.name)
    own = declares | allocated
    return Footprint(frozenset(reads - own), frozenset(writes - own), frozenset(declares | allocated))


def _first_line(stmt: Stmt) -> str:
    """The statement's first line of IR, to name it in a message."""
    return format_stmt(stmt)[0].strip()


def ancestors(root: Stmt, target: Stmt) -> list[Stmt] | None:
    """The statements from `root` down to `target`'s parent, outermost first (None: `target` is not in `root`)."""
    if root is target:
        return []
    children: tuple[Stmt, ...]
    if isinstance(root, (For, Alloc, While)):
        children = (root.body,)
    elif isinstance(root, If):
        children = (root.then,) if root.else_ is None else (root.then, root.else_)
    elif isinstance(root, Block):
        children = root.stmts
    elif isinstance(root, Concurrent):
        children = root.parts
    else:
        children = ()
    for child in children:
        path = ancestors(child, target)
        if path is not None:
            return [root] + path
    return None


def placement_problems(producer: For, buffer: str, passed: list[Stmt], consumer: For) -> list[str]:
    """Why running `producer`'s iterations inside `consumer` would change the result (empty: it would not).

    `passed` are the statements the move passes over: those after the producer in the buffer's Alloc body, up
    to and including the one that holds `consumer` (rules 2-4 of the module docstring)."""
    mine = footprint(producer)
    other_writes = mine.writes - {buffer}
    problems = []
    for stmt in passed:
        theirs = footprint(stmt)
        where = f"`{_first_line(stmt)}`"
        for name in sorted(mine.reads & theirs.writes):
            problems.append(f"the producer reads {name}, which {where} (passed over by the move) writes: computed "
                            "later, it would read the new values")
        for name in sorted(mine.reads & theirs.declares):
            problems.append(f"the producer reads {name}, a name {where} (passed over by the move) declares")
        for name in sorted(other_writes & (theirs.reads | theirs.writes)):
            what = "updates" if name in theirs.writes and name in theirs.reads else \
                "writes" if name in theirs.writes else "reads"
            problems.append(f"the producer also writes {name}, which {where} (passed over by the move) {what}: "
                            "moved past it, the producer's values of it would come in the wrong order")
    holder = next((s for s in passed if ancestors(s, consumer) is not None), None)
    around = [s for s in (ancestors(holder, consumer) or []) if isinstance(s, (For, While, If))] \
        if holder is not None else []
    for s in around:
        if isinstance(s, For) and s.kind == "parallel":
            problems.append(f"loop {s.var.name} around loop {consumer.var.name} is parallel: its threads would all "
                            f"write {buffer}, which is shared between them")
    if around and other_writes:
        problems.append(f"loop {consumer.var.name} runs inside `{_first_line(around[-1])}`, so the producer would "
                        f"run as often as it does, and it also writes {', '.join(sorted(other_writes))}")
    return problems


def reads_in_order(write_idx: E.Expr, pvar: str, read_idx: E.Expr, cvar: str, ranges_w, ranges_r, extent: int,
                   own_only: bool = False) -> bool:
    """Does consumer iteration v read only locations written by producer iterations <= v (interval bounds)?

    With `own_only` (a consumer whose iterations run in no fixed order), only by producer iteration v: the
    read must miss what every other iteration writes."""
    written = [Bounds({**ranges_w, pvar: (v, v)})(write_idx) for v in range(extent)]
    for v in range(extent):
        lo, hi = Bounds({**ranges_r, cvar: (v, v)})(read_idx)
        if math.isinf(lo) or math.isinf(hi):
            return False
        done_lo = min(w[0] for w in written[:v + 1])
        done_hi = max(w[1] for w in written[:v + 1])
        if lo < done_lo or hi > done_hi:
            return False
        others = written[v + 1:] + (written[:v] if own_only else [])
        if any(not (hi < w[0] or lo > w[1]) for w in others):
            return False
    return True
