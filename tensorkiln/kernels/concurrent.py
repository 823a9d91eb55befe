"""Independent control-flow kernels run at the same time: one kernel of OpenMP sections.

A loop over time (a scan, a while_loop) runs its body's kernels one step after
another, and a small body (an LSTM cell at batch 8) leaves most of a core's
time to the cost of starting threads per step. Two such loops that do not
depend on each other, like the two directions of a bidirectional recurrence,
can instead run side by side, one thread each, with no synchronization per
step: here they become ONE kernel whose body is a `Concurrent` statement of
their bodies (printed as `#pragma omp parallel sections`).

Before memory planning every buffer has one writer, so two kernels are
independent when neither writes a buffer the other reads or writes. The
earlier kernel moves down to the later one when no kernel between them
touches what it writes or writes what it reads; the merged kernel takes both
kernels' parameters, so the memory planner keeps all their buffers apart for
its whole run. Only loops of the same trip count are paired (a while_loop's
is unknown, a cond has none): neither thread then waits long for the other.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..loops import expr as E
from ..loops.ir import Concurrent, For, Kernel, ProgramCall, iter_stmts
from .schedule_defaults import thread_count


@dataclass(frozen=True)
class _Access:
    reads: frozenset[str]
    writes: frozenset[str]

    @staticmethod
    def of(kernel: Kernel) -> "_Access":
        writes = frozenset(kernel.written_buffers())
        return _Access(frozenset(p.name for p in kernel.params) - writes, writes)

    def conflicts(self, other: "_Access") -> bool:
        """One writes what the other reads or writes."""
        return bool(self.writes & (other.reads | other.writes) or other.writes & self.reads)


def _step_loop(kernel: Kernel) -> E.Expr | None:
    """The trip count of a control-flow kernel's loop over sub-program calls (a scan), else None."""
    for s in iter_stmts(kernel.body):
        if isinstance(s, For) and any(isinstance(c, ProgramCall) for c in iter_stmts(s.body)):
            return s.extent
    return None


def concurrent_control(kernels: list[Kernel], threads: int | None = None) -> tuple[list[Kernel], dict[str, list[str]]]:
    """`kernels` with independent loops over sub-program calls of the same trip count (scans of one
    length) merged into Concurrent kernels, at most one part per thread; also {merged kernel name:
    the names of its parts}. Unchanged on one thread."""
    threads = threads or thread_count()
    order = list(kernels)
    merged: dict[str, list[str]] = {}
    index = 0
    while index < len(order) and threads >= 2:
        trips = _step_loop(order[index])
        if trips is None or isinstance(order[index].body, Concurrent):
            index += 1
            continue
        positions, moving = [index], _Access.of(order[index])
        for j in range(index + 1, len(order)):
            if len(positions) == threads:
                break
            access = _Access.of(order[j])
            if moving.conflicts(access):
                break  # the parts found so far cannot move past (or run beside) a kernel that needs them
            if _step_loop(order[j]) == trips and not isinstance(order[j].body, Concurrent):
                positions.append(j)  # joins; the earlier parts move down to its place
                moving = _Access(moving.reads | access.reads, moving.writes | access.writes)
        if len(positions) == 1:
            index += 1
            continue
        parts = [order[p] for p in positions]
        kernel = _merge(parts)
        merged[kernel.name] = [p.name for p in parts]
        order[positions[-1]] = kernel
        for p in reversed(positions[:-1]):
            del order[p]
    return order, merged


def _merge(parts: list[Kernel]) -> Kernel:
    params = tuple(dict.fromkeys(p for k in parts for p in k.params))
    comment = "\n".join(f"concurrently with {', '.join(o.name for o in parts if o is not k)}: {k.name}\n{k.comment}"
                        for k in parts)
    return Kernel("_".join(k.name for k in parts), params, Concurrent(tuple(k.body for k in parts)), comment)


__all__ = ["concurrent_control"]
