"""Ghost atoms and migration between the sub-boxes of a decomposed run, LAMMPS's `Comm` in brief.

A rank's arrays hold its own atoms first and ghost atoms after them: copies
of other ranks' atoms (or its own periodic images) within the ghost cutoff
(pair cutoff + skin) of its sub-box, with coordinates shifted by a box length
where they come across the periodic boundary, so a pair's distance is
x_i - x_j with no minimum-image rule.

- `exchange` (at a re-neighbouring step, LAMMPS's Comm::exchange): along x,
  then y, then z, the atoms that have left the sub-box go to the neighbour on
  that side with their velocities and ids.
- `borders` (LAMMPS's Comm::borders): along x, then y, then z, two swaps
  each: the atoms within the ghost cutoff of the low face go to the low
  neighbour, those near the high face to the high one. A dimension's swaps
  send the rank's own atoms and the ghosts of the earlier dimensions, so
  ghosts are forwarded and edge and corner images arrive in three sweeps. A
  neighbour that is the rank itself (one rank along a dimension) is a copy.
- `forward` (every step between re-neighbourings): the ghosts' positions
  again, along the same swaps in the same order.
- `reverse` (after each force computation, Newton's third law on): the forces
  accumulated on ghosts are sent back along the swaps in reverse order and
  added to the atoms they copy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorkiln.md.domain import Domain
from tensorkiln.md.lattice import MDInputError
from tensorkiln.runtime import communicator

# Tags of the messages, so that the two swaps of a dimension never match each other's messages.
_COUNT_TAG, _DATA_TAG = 9100, 9200


@dataclass(frozen=True)
class Swap:
    """One message of the ghost pattern: `send` rows go to rank `send_to`, shifted by `shift`; `count` rows
    arrive from rank `recv_from` into rows [first, first + count)."""

    send_to: int
    recv_from: int
    send: np.ndarray  # int64 row indices
    shift: np.ndarray  # [3] added to sent positions
    first: int
    count: int
    tag: int


def _send_recv(me: int, data: np.ndarray, send_to: int, recv_from: int, rows: int, tag: int) -> np.ndarray:
    """Send `data` to `send_to` and receive `rows` rows like it from `recv_from` (a copy when both are me)."""
    if send_to == me and recv_from == me:
        return data.copy()
    out = np.empty((rows,) + data.shape[1:], data.dtype)
    communicator.send_recv(np.ascontiguousarray(data), send_to, out, recv_from, tag)
    return out


def _count(me: int, n: int, send_to: int, recv_from: int, tag: int) -> int:
    return int(_send_recv(me, np.array([n], np.int64), send_to, recv_from, 1, _COUNT_TAG + tag)[0])


def _transfer(me: int, data: np.ndarray, send_to: int, recv_from: int, tag: int) -> np.ndarray:
    """Send a variable number of rows: their count first, then the rows."""
    rows = _count(me, len(data), send_to, recv_from, tag)
    return _send_recv(me, data, send_to, recv_from, rows, _DATA_TAG + tag)


def exchange(domain: Domain, x: np.ndarray, v: np.ndarray, ids: np.ndarray):
    """Migrate the atoms (positions wrapped into the box) that left this rank's sub-box; returns the
    rank's own atoms (x, v, ids) afterwards."""
    me = domain.rank
    for dim in range(3):
        p = domain.grid[dim]
        if p == 1:
            continue
        mine = domain.coordinates[dim]
        where = domain.owner_coordinate(x, dim)
        low, high = where == (mine - 1) % p, where == (mine + 1) % p
        stray = ~(low | high | (where == mine))
        if stray.any():
            raise MDInputError(f"rank {me}: {int(stray.sum())} atom(s) moved more than a sub-box along "
                               f"{'xyz'[dim]} between two neighbour-list builds (rebuild more often)")
        packed = np.concatenate([x, v, ids[:, None].astype(np.float64)], axis=1)
        directions = [(-1, low | high)] if p == 2 else [(-1, low), (1, high)]  # with 2 ranks both sides are one
        arrived = []
        for direction, leaving in directions:
            send_to, recv_from = domain.neighbor(dim, direction), domain.neighbor(dim, -direction)
            arrived.append(_transfer(me, packed[leaving], send_to, recv_from, 10 * dim + (direction > 0)))
        stays = ~(low | high)
        packed = np.concatenate([packed[stays]] + arrived)
        x, v, ids = packed[:, :3].copy(), packed[:, 3:6].copy(), packed[:, 6].astype(np.int32)
    return np.ascontiguousarray(x), np.ascontiguousarray(v), ids


def borders(domain: Domain, x: np.ndarray, ids: np.ndarray, cutoff: float):
    """Ghost atoms within `cutoff` of the sub-box: returns (x, ids) of the own atoms followed by the
    ghosts, and the swaps that `forward` and `reverse` repeat."""
    me = domain.rank
    lengths = domain.box.lengths
    lo, hi = domain.sub_lo, domain.sub_hi
    swaps: list[Swap] = []
    for dim in range(3):
        candidates = len(x)  # own atoms and the ghosts of the earlier dimensions
        coordinate = domain.coordinates[dim]
        received = []
        for side, direction in enumerate((-1, 1)):
            near = (x[:candidates, dim] < lo[dim] + cutoff) if direction < 0 else \
                (x[:candidates, dim] >= hi[dim] - cutoff)
            send = np.nonzero(near)[0]
            shift = np.zeros(3)
            # crossing the periodic boundary: the receiver sees these atoms one box length away
            if direction < 0 and coordinate == 0:
                shift[dim] = lengths[dim]
            elif direction > 0 and coordinate == domain.grid[dim] - 1:
                shift[dim] = -lengths[dim]
            send_to, recv_from = domain.neighbor(dim, direction), domain.neighbor(dim, -direction)
            tag = 10 * dim + side
            packed = np.concatenate([x[send] + shift, ids[send, None].astype(np.float64)], axis=1)
            arrived = _transfer(me, packed, send_to, recv_from, tag)
            first = len(x) + sum(len(r) for r in received)
            swaps.append(Swap(send_to, recv_from, send, shift, first, len(arrived), tag))
            received.append(arrived)
        x = np.concatenate([x] + [r[:, :3] for r in received])
        ids = np.concatenate([ids] + [r[:, 3].astype(np.int32) for r in received])
    return np.ascontiguousarray(x), ids, swaps


def forward(domain: Domain, swaps: list[Swap], x: np.ndarray) -> None:
    """Refresh the ghosts' positions in x (rows of own atoms first, ghosts after) from their owners."""
    for swap in swaps:
        sent = x[swap.send] + swap.shift
        x[swap.first:swap.first + swap.count] = _send_recv(domain.rank, sent, swap.send_to, swap.recv_from,
                                                           swap.count, _DATA_TAG + swap.tag)


def reverse(domain: Domain, swaps: list[Swap], f: np.ndarray) -> None:
    """Add the forces accumulated on ghosts to the atoms they copy (swaps backwards, messages reversed)."""
    for swap in reversed(swaps):
        ghost_forces = f[swap.first:swap.first + swap.count]
        back = _send_recv(domain.rank, ghost_forces, swap.recv_from, swap.send_to, len(swap.send),
                          _DATA_TAG + swap.tag)
        f[swap.send] += back  # one swap sends an atom at most once, so the rows are distinct
