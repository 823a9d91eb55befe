"""MPI underneath tensorkiln.distributed: the world, process groups, collectives on numpy arrays.

This module is the only one that talks to MPI (through mpi4py, imported when
`init()` runs, so tensorkiln never needs it otherwise). The op table's
collective references and the eager API both call the functions here, with
arrays in their compute dtype. Every collective first checks that the ranks
agree on what they are doing (op, shape, dtype, root): a rank that disagrees
makes every rank raise the same DistributedError naming it, instead of a hang
or a wrong sum. An exception nobody catches ends every rank (MPI_Abort), so a
failing rank never leaves the others waiting.
"""
from __future__ import annotations

import hashlib
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from ..errors import DistributedError, DTypeError, at_user_line

REDUCE_OPS = ("sum", "mean", "max", "min", "prod")
WORLD: tuple[int, ...] = ()  # the `group` of a collective over every rank
ABORT_GRACE_SECONDS = 0.5  # a failing rank's traceback reaches the launcher before Abort ends every rank


def progresses_in_background(environ: dict[str, str] | None = None) -> bool:
    """Whether the MPI library moves a started collective's bytes while the rank computes: only with
    MPICH's progress thread (MPIR_CVAR_ASYNC_PROGRESS=1, which costs a core). Otherwise they move
    inside MPI calls, as between ranks that share memory and have one thread each."""
    environ = os.environ if environ is None else environ
    return environ.get("MPIR_CVAR_ASYNC_PROGRESS", "0").strip() not in ("", "0")


@dataclass
class _World:
    """The MPI state of this process (one per process, made by init())."""

    mpi: Any  # the mpi4py.MPI module
    comm: Any  # MPI.COMM_WORLD
    groups: dict[tuple[int, ...], Any] = field(default_factory=dict)  # ranks -> communicator (None: not a member)
    check_agreement: bool = True
    sequence: int = 0  # collectives made so far in graphs (see next_sequence)


_world: _World | None = None


def init(check_agreement: bool = True) -> None:
    """Start MPI (once per process); world size 1 when the program was not started by mpiexec."""
    global _world
    if _world is not None:
        return
    try:
        from mpi4py import MPI
    except ImportError as err:
        raise DistributedError("tensorkiln.distributed needs MPI: pip install 'tensorkiln[mpi]' (mpi4py and an "
                               f"MPI library such as the mpich wheel); importing mpi4py failed: {err}") from None
    _world = _World(MPI, MPI.COMM_WORLD, check_agreement=check_agreement)
    if MPI.COMM_WORLD.Get_size() > 1:
        _install_abort_on_uncaught_exception()


def is_initialized() -> bool:
    return _world is not None


def world() -> _World:
    if _world is None:
        raise DistributedError("tensorkiln.distributed is not initialized: call dist.init() first")
    return _world


def rank() -> int:
    """This process's rank in the world."""
    return world().comm.Get_rank()


def world_size() -> int:
    return world().comm.Get_size()


def next_sequence() -> int:
    """A number for the next collective recorded in a graph.

    Every rank records the same collectives in the same order, so each gets the same number on every
    rank; as an attribute it keeps CSE from merging two collectives on one rank but not on another
    (whose constants differ), which would pair the wrong calls across ranks.
    """
    w = world()
    w.sequence += 1
    return w.sequence


def where() -> str:
    """'rank r of n', for messages."""
    return f"rank {rank()} of {world_size()}" if _world is not None else "uninitialized rank"


def _install_abort_on_uncaught_exception() -> None:
    """An uncaught exception prints its rank and traceback, then ends every rank of the job."""
    previous = sys.excepthook

    def abort_all(kind, value, tb):
        sys.stderr.write(f"tensorkiln.distributed: {where()} failed; aborting all ranks\n")
        sys.stderr.write("".join(traceback.format_exception(kind, value, tb)))
        sys.stderr.flush()
        if kind is KeyboardInterrupt:
            previous(kind, value, tb)
        # Abort kills every rank at once, mpiexec's output forwarding too: on a loaded machine the lines
        # above were sometimes lost on their way to the launcher's terminal; give them a moment to pass
        time.sleep(ABORT_GRACE_SECONDS)
        world().comm.Abort(1)

    sys.excepthook = abort_all


# ---- groups -----------------------------------------------------------------------------------------

def new_group(ranks) -> tuple[int, ...]:
    """Make a communicator for `ranks` (world ranks); every rank of the world calls it, in the same order."""
    w = world()
    ranks = tuple(sorted(int(r) for r in ranks))
    size = world_size()
    if not ranks or len(set(ranks)) != len(ranks) or ranks[0] < 0 or ranks[-1] >= size:
        raise DistributedError(f"{where()}: new_group needs distinct ranks in [0, {size}), got {list(ranks)}")
    agree(f"new_group({list(ranks)})", (ranks,), WORLD)
    if ranks == tuple(range(size)):
        return WORLD
    if ranks not in w.groups:  # MPI_Comm_create_group is collective over the members only
        member = rank() in ranks
        w.groups[ranks] = w.comm.Create_group(w.comm.Get_group().Incl(list(ranks))) if member else None
    return ranks


def communicator(group: tuple[int, ...]):
    """The communicator of `group` (WORLD: every rank); an error when this rank is not a member."""
    w = world()
    if group == WORLD or group == tuple(range(world_size())):
        return w.comm
    if group not in w.groups:
        raise DistributedError(f"{where()}: group {list(group)} was not made with dist.new_group on this rank")
    comm = w.groups[group]
    if comm is None:
        raise DistributedError(f"{where()}: this rank is not a member of group {list(group)}")
    return comm


def group_size(group: tuple[int, ...]) -> int:
    return world_size() if group == WORLD else len(group)


def group_rank(group: tuple[int, ...]) -> int:
    """This rank's position in `group`."""
    return rank() if group == WORLD else communicator(group).Get_rank()


def group_ranks(group: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(range(world_size())) if group == WORLD else group


# ---- agreement ----------------------------------------------------------------------------------------

def agree(what: str, facts: tuple, group: tuple[int, ...]) -> None:
    """Raise the same DistributedError on every rank of `group` when they disagree on `facts`."""
    if not world().check_agreement:
        return
    comm = communicator(group)
    if comm.Get_size() == 1:
        return
    # 8 bytes per rank (a digest of the facts) instead of pickled tuples; the facts travel only to
    # name a disagreement, and every rank sees one, so every rank makes that second call too
    digests = np.empty(comm.Get_size(), np.uint64)
    comm.Allgather(_digest(facts), digests)
    if (digests == digests[0]).all():
        return
    everyone = comm.allgather(facts)
    ranks = group_ranks(group)
    listing = "; ".join(f"rank {ranks[i]}: {f}" for i, f in enumerate(everyone))
    raise DistributedError(at_user_line(f"{where()}: the ranks disagree on {what} ({listing})"))


@lru_cache(maxsize=4096)
def _digest(facts: tuple) -> np.ndarray:
    """A 64-bit digest of a collective's facts (the same on every rank for the same facts)."""
    digest = hashlib.blake2b(repr(facts).encode(), digest_size=8).digest()
    return np.frombuffer(digest, np.uint64).copy()


def _agree_on_array(what: str, group: tuple[int, ...], array: np.ndarray, *extra) -> None:
    """agree() on an array's shape and dtype and `extra`; the facts are made only when checking (str of a
    dtype costs more than a small all-reduce's MPI call)."""
    if world().check_agreement:
        agree(what, _facts(array, *extra), group)


def _facts(array: np.ndarray, *extra) -> tuple:
    return (tuple(array.shape), str(array.dtype)) + extra


# ---- collectives on arrays -----------------------------------------------------------------------------

def mpi_op(op: str):
    """The MPI reduction operation of `op` (a mean is a sum, divided afterwards)."""
    mpi = world().mpi
    table = {"sum": mpi.SUM, "mean": mpi.SUM, "max": mpi.MAX, "min": mpi.MIN, "prod": mpi.PROD}
    if op not in table:
        raise DistributedError(f"{where()}: unknown reduction {op!r}; one of {', '.join(REDUCE_OPS)}")
    return table[op]


def _sendable(array: np.ndarray) -> np.ndarray:
    """A contiguous array MPI can reduce (booleans travel as bytes)."""
    array = array if array.flags.c_contiguous else array.copy(order="C")  # (ascontiguousarray makes 0-d 1-d)
    return array.view(np.uint8) if array.dtype == np.bool_ else array


def _finish(result: np.ndarray, like: np.ndarray, op: str, size: int) -> np.ndarray:
    if op == "mean":
        if not np.issubdtype(like.dtype, np.floating):
            raise DTypeError(f"{where()}: all_reduce mean needs floating values, got {like.dtype}")
        result = (result / size).astype(like.dtype)
    return result.view(np.bool_) if like.dtype == np.bool_ else result


class PendingCollective:
    """A started collective (MPI's nonblocking form): `wait()` finishes it and returns the result.

    The arrays it reads and writes stay referenced here until then, as MPI requires.
    """

    def __init__(self, request, finish: Callable[[], np.ndarray]):
        self._request, self._finish = request, finish

    def wait(self) -> np.ndarray:
        self._request.Wait()
        return self._finish()


def start_all_reduce(array: np.ndarray, op: str = "sum", group: tuple[int, ...] = WORLD) -> PendingCollective:
    """Start an all_reduce: every rank gets the elementwise reduction of every rank's array."""
    comm = communicator(group)
    _agree_on_array("all_reduce", group, array, op)
    send = _sendable(array)
    out = np.empty_like(send)
    request = comm.Iallreduce(send, out, op=mpi_op(op))
    return PendingCollective(request, lambda: _finish(out, array, op, comm.Get_size()))


def _axis_first(array: np.ndarray, axis: int) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(array, axis, 0))


def start_all_gather(array: np.ndarray, axis: int = 0, group: tuple[int, ...] = WORLD) -> PendingCollective:
    """Start an all_gather: every rank's array, concatenated along `axis` in rank order."""
    comm = communicator(group)
    _agree_on_array("all_gather", group, array, axis)
    send = _sendable(_axis_first(array, axis))
    out = np.empty((comm.Get_size() * send.shape[0],) + send.shape[1:], send.dtype)
    request = comm.Iallgather(send, out)
    return PendingCollective(request, lambda: np.moveaxis(
        out.view(np.bool_) if array.dtype == np.bool_ else out, 0, axis))


def start_reduce_scatter(array: np.ndarray, op: str = "sum", axis: int = 0,
                         group: tuple[int, ...] = WORLD) -> PendingCollective:
    """Start a reduce_scatter: the reduction over the ranks, rank r keeping the r-th of equal blocks."""
    comm = communicator(group)
    size = comm.Get_size()
    _agree_on_array("reduce_scatter", group, array, op, axis)
    if array.shape[axis] % size:
        raise DistributedError(f"{where()}: reduce_scatter along axis {axis} of shape {list(array.shape)} needs "
                               f"a length divisible by the group size {size}")
    send = _sendable(_axis_first(array, axis))
    out = np.empty((send.shape[0] // size,) + send.shape[1:], send.dtype)
    request = comm.Ireduce_scatter_block(send, out, op=mpi_op(op))
    return PendingCollective(request, lambda: np.moveaxis(_finish(out, array, op, size), 0, axis))


def start_broadcast(array: np.ndarray, root: int = 0, group: tuple[int, ...] = WORLD) -> PendingCollective:
    """Start a broadcast: every rank gets the array of world rank `root`."""
    comm = communicator(group)
    ranks = group_ranks(group)
    if root not in ranks:
        raise DistributedError(f"{where()}: broadcast root {root} is not in group {list(ranks)}")
    _agree_on_array("broadcast", group, array, root)
    out = _sendable(array).copy()
    request = comm.Ibcast(out, root=ranks.index(root))
    return PendingCollective(request, lambda: out.view(np.bool_) if array.dtype == np.bool_ else out)


def all_reduce(array: np.ndarray, op: str = "sum", group: tuple[int, ...] = WORLD) -> np.ndarray:
    """start_all_reduce(...).wait() as one blocking MPI_Allreduce (cheaper: no request to make and finish)."""
    comm = communicator(group)
    _agree_on_array("all_reduce", group, array, op)
    send = _sendable(array)
    out = np.empty_like(send)
    comm.Allreduce(send, out, op=mpi_op(op))
    return _finish(out, array, op, comm.Get_size())


def all_gather(array: np.ndarray, axis: int = 0, group: tuple[int, ...] = WORLD) -> np.ndarray:
    return start_all_gather(array, axis, group).wait()


def reduce_scatter(array: np.ndarray, op: str = "sum", axis: int = 0,
                   group: tuple[int, ...] = WORLD) -> np.ndarray:
    return start_reduce_scatter(array, op, axis, group).wait()


def broadcast(array: np.ndarray, root: int = 0, group: tuple[int, ...] = WORLD) -> np.ndarray:
    return start_broadcast(array, root, group).wait()


def barrier(group: tuple[int, ...] = WORLD) -> None:
    communicator(group).Barrier()


# ---- point to point ------------------------------------------------------------------------------------
# Plain MPI semantics (no agreement check: only two ranks take part): a message is an array whose
# shape and dtype the receiver knows, matched by source and tag.

def _peer(peer: int, group: tuple[int, ...], verb: str) -> int:
    ranks = group_ranks(group)
    if peer not in ranks or peer == rank():
        raise DistributedError(f"{where()}: cannot {verb} rank {peer} (group {list(ranks)})")
    return ranks.index(peer)


def send(array: np.ndarray, dst: int, tag: int = 0, group: tuple[int, ...] = WORLD) -> None:
    """Send an array to world rank `dst` (returns when the buffer may be reused)."""
    communicator(group).Send(_sendable(array), dest=_peer(dst, group, "send to"), tag=tag)


def recv(out: np.ndarray, src: int, tag: int = 0, group: tuple[int, ...] = WORLD) -> np.ndarray:
    """Receive into `out` (its shape and dtype are the message's) from world rank `src`."""
    comm = communicator(group)
    status = world().mpi.Status()
    comm.Recv(_sendable(out), source=_peer(src, group, "receive from"), tag=tag, status=status)
    expected = out.nbytes
    if status.Get_count(world().mpi.BYTE) != expected:
        raise DistributedError(f"{where()}: the message from rank {src} (tag {tag}) has "
                               f"{status.Get_count(world().mpi.BYTE)} bytes; {list(out.shape)} {out.dtype} "
                               f"needs {expected}")
    return out


class Pending:
    """A started send or receive: `wait()` returns when it is done (the received array, for a receive)."""

    def __init__(self, request, array: np.ndarray | None):
        self._request, self._array = request, array

    def wait(self) -> np.ndarray | None:
        self._request.Wait()
        return self._array

    def done(self) -> bool:
        return bool(self._request.Test())


def start_send(array: np.ndarray, dst: int, tag: int = 0, group: tuple[int, ...] = WORLD) -> Pending:
    """Start sending (MPI_Isend); the array must not change until wait()."""
    send_buffer = _sendable(array)
    return Pending(communicator(group).Isend(send_buffer, dest=_peer(dst, group, "send to"), tag=tag), None)


def start_recv(out: np.ndarray, src: int, tag: int = 0, group: tuple[int, ...] = WORLD) -> Pending:
    """Start receiving into `out` (MPI_Irecv)."""
    return Pending(communicator(group).Irecv(_sendable(out), source=_peer(src, group, "receive from"), tag=tag),
                   out)


def send_recv(array: np.ndarray, dst: int, out: np.ndarray, src: int, tag: int = 0,
              group: tuple[int, ...] = WORLD) -> np.ndarray:
    """Send to `dst` and receive from `src` at once (MPI_Sendrecv: a halo exchange without deadlock)."""
    communicator(group).Sendrecv(_sendable(array), dest=_peer(dst, group, "send to"), sendtag=tag,
                                 recvbuf=_sendable(out), source=_peer(src, group, "receive from"), recvtag=tag)
    return out
