"""An atomic system: one atom type in an orthogonal periodic box, with positions and velocities."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tensorkiln.md.lattice import Box, Lattice, MDInputError, create_atoms
from tensorkiln.md.random_park import ParkMiller


@dataclass
class System:
    """Positions and velocities [n, 3] (float64) of atoms of one `mass` in `box`."""

    box: Box
    positions: np.ndarray
    mass: float = 1.0
    velocities: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self.positions = np.ascontiguousarray(self.positions, dtype=np.float64).reshape(-1, 3)
        if self.velocities is None:
            self.velocities = np.zeros_like(self.positions)
        self.velocities = np.ascontiguousarray(self.velocities, dtype=np.float64).reshape(-1, 3)
        if self.velocities.shape != self.positions.shape:
            raise MDInputError(f"velocities {self.velocities.shape} and positions {self.positions.shape} differ")
        if not self.mass > 0:
            raise MDInputError(f"mass must be positive, got {self.mass}")

    @classmethod
    def from_lattice(cls, lattice: Lattice, box: Box, mass: float = 1.0) -> "System":
        """Atoms at every lattice point in the box (LAMMPS `create_atoms 1 box`)."""
        return cls(box, create_atoms(lattice, box), mass)

    @property
    def atoms(self) -> int:
        return self.positions.shape[0]

    @property
    def degrees_of_freedom(self) -> int:
        """3n - 3: the centre of mass's motion does not count (LAMMPS compute temp)."""
        return 3 * self.atoms - 3

    def temperature(self) -> float:
        """Kinetic temperature in LJ units (k_B = 1)."""
        dof = self.degrees_of_freedom
        return float(self.mass * np.sum(self.velocities ** 2) / dof) if dof > 0 else 0.0

    def create_velocities(self, temperature: float, seed: int, zero_momentum: bool = True) -> None:
        """LAMMPS `velocity all create T SEED loop geom`: uniform velocities from a generator reset by each
        atom's coordinates, total momentum removed, scaled to `temperature`."""
        if not 0 < seed < 2 ** 31:
            raise MDInputError(f"velocity seed must be a positive 32-bit integer, got {seed}")
        generators = ParkMiller.from_geometry(seed, self.positions)
        draws = [generators.uniform() - 0.5 for _ in range(3)]
        v = np.stack(draws, axis=1) * (1.0 / np.sqrt(self.mass))
        if zero_momentum:
            v -= v.sum(axis=0) / self.atoms  # equal masses: the centre-of-mass velocity is the mean
        self.velocities = np.ascontiguousarray(v)
        current = self.temperature()
        if current == 0.0:
            raise MDInputError("cannot rescale a zero temperature")
        self.velocities *= np.sqrt(temperature / current)
