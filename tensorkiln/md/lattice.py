"""Lattices and atom creation as LAMMPS's `lattice`, `region block`, `create_box` and `create_atoms` do them.

In LJ units `lattice fcc RHO` sets the lattice constant so that the number
density is RHO: a = (basis atoms / RHO)^(1/3). A region given in lattice units
is scaled by a. `create_atoms 1 box` places an atom at every lattice point
(cell index + basis offset, times a) that lies inside the box, where a point
on the upper face of a periodic box belongs to the lower face instead (LAMMPS
shrinks the upper bound by 2e-6 box lengths and widens the lower one by 1e-6,
so rounding in the scaled coordinates cannot create an atom twice).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorkiln.errors import TensorKilnError

BASES: dict[str, tuple[tuple[float, float, float], ...]] = {
    "sc": ((0.0, 0.0, 0.0),),
    "bcc": ((0.0, 0.0, 0.0), (0.5, 0.5, 0.5)),
    "fcc": ((0.0, 0.0, 0.0), (0.5, 0.5, 0.0), (0.5, 0.0, 0.5), (0.0, 0.5, 0.5)),
}
BOUNDARY_EPSILON = 1.0e-6  # LAMMPS's create_atoms EPSILON, in box lengths


class MDInputError(TensorKilnError, ValueError):
    """A molecular-dynamics setup the program cannot run (bad lattice, region, box, ...)."""


@dataclass(frozen=True)
class Lattice:
    """A cubic lattice: its style (sc, bcc, fcc) and lattice constant (the cubic cell's edge)."""

    style: str
    constant: float

    @classmethod
    def from_density(cls, style: str, density: float) -> "Lattice":
        """The lattice of `style` whose number density is `density` (LAMMPS `lattice STYLE RHO` in LJ units)."""
        if style not in BASES:
            raise MDInputError(f"lattice style {style!r} is not supported; use one of {sorted(BASES)}")
        if not density > 0:
            raise MDInputError(f"lattice density must be positive, got {density}")
        return cls(style, (len(BASES[style]) / 1.0 / density) ** (1.0 / 3.0))

    @property
    def basis(self) -> np.ndarray:
        """Basis offsets in cell units, shape [n, 3]."""
        return np.array(BASES[self.style])


@dataclass(frozen=True)
class Box:
    """An orthogonal periodic box [lo, hi) in each dimension."""

    lo: tuple[float, float, float]
    hi: tuple[float, float, float]

    def __post_init__(self) -> None:
        if any(not h > l for l, h in zip(self.lo, self.hi)):
            raise MDInputError(f"box must have hi > lo in every dimension, got lo={self.lo} hi={self.hi}")

    @property
    def lengths(self) -> np.ndarray:
        return np.array(self.hi) - np.array(self.lo)

    @property
    def volume(self) -> float:
        return float(np.prod(self.lengths))


def block_region(lattice: Lattice, bounds: tuple[float, float, float, float, float, float]) -> Box:
    """`region ID block xlo xhi ylo yhi zlo zhi` in lattice units, as a box in distance units."""
    a = lattice.constant
    lo = tuple(bounds[2 * d] * a for d in range(3))
    hi = tuple(bounds[2 * d + 1] * a for d in range(3))
    return Box(lo, hi)  # type: ignore[arg-type]


def create_atoms(lattice: Lattice, box: Box, region: Box | None = None) -> np.ndarray:
    """Positions [n, 3] of the lattice points in `box` (and in `region`, when given), in LAMMPS's order:
    z cells outermost, then y, then x, then the basis atoms of each cell."""
    a = lattice.constant
    basis = lattice.basis
    region = region or box
    eps = BOUNDARY_EPSILON * box.lengths
    sub_lo = np.array(box.lo) - eps
    sub_hi = np.array(box.hi) - 2.0 * eps
    ranges = [range(int(np.floor(box.lo[d] / a)) - 1, int(np.ceil(box.hi[d] / a)) + 1) for d in range(3)]
    k, j, i, m = np.meshgrid(np.array(ranges[2]), np.array(ranges[1]), np.array(ranges[0]),
                             np.arange(len(basis)), indexing="ij")
    cells = np.stack([i.ravel(), j.ravel(), k.ravel()], axis=1).astype(np.float64)
    points = (cells + basis[m.ravel()]) * a
    inside = np.all((points >= np.array(region.lo)) & (points <= np.array(region.hi)), axis=1)
    inside &= np.all((points >= sub_lo) & (points < sub_hi), axis=1)
    return np.ascontiguousarray(points[inside])
