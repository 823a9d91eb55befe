"""Spatial decomposition of a periodic box over MPI ranks, as LAMMPS's `processors * * *` makes it.

The box is cut into a px x py x pz grid of equal sub-boxes, one per rank;
the grid is the factorization of the rank count with the least sub-box
surface (LAMMPS's `procs2box`: the least communication), the first found
when several tie (px ascending, then py), so 2 ranks on a cube give 1x1x2
as in LAMMPS. Rank r sits at grid coordinates (ix, iy, iz) in MPI_Cart_create's
row-major order, r = (ix * py + iy) * pz + iz. An atom belongs to the rank
whose sub-box holds it: coordinate floor((x - lo) p / L) per axis, one formula
used everywhere, so every atom has exactly one owner.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from tensorkiln.md.lattice import Box, MDInputError


def processor_grid(ranks: int, lengths) -> tuple[int, int, int]:
    """The factorization px * py * pz = ranks whose sub-boxes of a box of `lengths` have the least surface."""
    if ranks < 1:
        raise MDInputError(f"a processor grid needs at least one rank, got {ranks}")
    lx, ly, lz = (float(v) for v in lengths)
    best, best_surface = None, np.inf
    for px, py in itertools.product(range(1, ranks + 1), repeat=2):
        if ranks % (px * py):
            continue
        pz = ranks // (px * py)
        surface = lx * ly / (px * py) + lx * lz / (px * pz) + ly * lz / (py * pz)
        if surface < best_surface * (1 - 1e-12):  # strictly smaller: ties keep the first (LAMMPS's order)
            best, best_surface = (px, py, pz), surface
    return best  # type: ignore[return-value]


@dataclass(frozen=True)
class Domain:
    """This rank's place in the processor grid: its sub-box and its six face neighbours."""

    box: Box
    grid: tuple[int, int, int]
    rank: int

    def __post_init__(self) -> None:
        ranks = int(np.prod(self.grid))
        if not 0 <= self.rank < ranks:
            raise MDInputError(f"rank {self.rank} is not in a {self.grid} processor grid")

    @classmethod
    def for_rank(cls, box: Box, ranks: int, rank: int) -> "Domain":
        """The sub-box of `rank` of `ranks` in the least-surface grid."""
        return cls(box, processor_grid(ranks, box.lengths), rank)

    @property
    def ranks(self) -> int:
        return int(np.prod(self.grid))

    @property
    def coordinates(self) -> tuple[int, int, int]:
        """(ix, iy, iz) of this rank."""
        return self.coordinates_of(self.rank)

    def coordinates_of(self, rank: int) -> tuple[int, int, int]:
        px, py, pz = self.grid
        return rank // (py * pz), (rank // pz) % py, rank % pz

    def rank_at(self, coordinates) -> int:
        """The rank at grid coordinates (taken periodically)."""
        px, py, pz = self.grid
        ix, iy, iz = (int(c) % p for c, p in zip(coordinates, self.grid))
        return (ix * py + iy) * pz + iz

    def neighbor(self, dim: int, direction: int) -> int:
        """The rank next to this one along `dim`, on the low side (direction -1) or the high side (+1)."""
        coordinates = list(self.coordinates)
        coordinates[dim] += direction
        return self.rank_at(coordinates)

    @property
    def sub_lo(self) -> np.ndarray:
        lo, lengths = np.array(self.box.lo), self.box.lengths
        return lo + lengths * np.array(self.coordinates) / np.array(self.grid)

    @property
    def sub_hi(self) -> np.ndarray:
        lo, lengths = np.array(self.box.lo), self.box.lengths
        return lo + lengths * (np.array(self.coordinates) + 1) / np.array(self.grid)

    def owner_coordinate(self, x: np.ndarray, dim: int) -> np.ndarray:
        """The grid coordinate along `dim` of the sub-box holding each position x[:, dim] (wrapped into the box)."""
        p = self.grid[dim]
        scaled = (x[:, dim] - self.box.lo[dim]) * (p / float(self.box.lengths[dim]))
        return np.clip(np.floor(scaled).astype(np.int64), 0, p - 1)

    def owned(self, x: np.ndarray) -> np.ndarray:
        """Mask of the positions (wrapped into the box) that this rank owns."""
        mine = np.ones(len(x), bool)
        for dim, c in enumerate(self.coordinates):
            mine &= self.owner_coordinate(x, dim) == c
        return mine

    def wrap(self, x: np.ndarray) -> np.ndarray:
        """Positions put back into the periodic box [lo, hi) (LAMMPS's pbc())."""
        lo, lengths = np.array(self.box.lo), self.box.lengths
        return x - lengths * np.floor((x - lo) / lengths)

    def check_ghost_cutoff(self, cutoff: float) -> None:
        """One swap per direction reaches the ghosts only when each sub-box is at least `cutoff` wide."""
        widths = self.box.lengths / np.array(self.grid)
        for dim in range(3):
            if self.grid[dim] > 1 and widths[dim] < cutoff:
                raise MDInputError(
                    f"{self.ranks} ranks as a {'x'.join(map(str, self.grid))} grid make sub-boxes "
                    f"{widths[dim]:g} wide along {'xyz'[dim]}, narrower than the neighbour cutoff {cutoff:g} "
                    "(pair cutoff + skin) that ghost atoms must reach: use fewer ranks or a larger box")
