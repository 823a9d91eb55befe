"""The lj/cut pair style: 4 eps ((sigma/r)^12 - (sigma/r)^6) below a cutoff, and LAMMPS's coefficients."""
from __future__ import annotations

from dataclasses import dataclass

from tensorkiln.md.lattice import MDInputError


@dataclass(frozen=True)
class LJCut:
    """Lennard-Jones between one atom type and itself, cut at `cutoff` (energy not shifted unless `shift`)."""

    epsilon: float = 1.0
    sigma: float = 1.0
    cutoff: float = 2.5
    shift: bool = False

    def __post_init__(self) -> None:
        if not (self.epsilon >= 0 and self.sigma > 0 and self.cutoff > 0):
            raise MDInputError(f"lj/cut needs epsilon >= 0, sigma > 0, cutoff > 0; got epsilon={self.epsilon}, "
                               f"sigma={self.sigma}, cutoff={self.cutoff}")

    @property
    def lj1(self) -> float:
        return 48.0 * self.epsilon * self.sigma ** 12.0

    @property
    def lj2(self) -> float:
        return 24.0 * self.epsilon * self.sigma ** 6.0

    @property
    def lj3(self) -> float:
        return 4.0 * self.epsilon * self.sigma ** 12.0

    @property
    def lj4(self) -> float:
        return 4.0 * self.epsilon * self.sigma ** 6.0

    @property
    def offset(self) -> float:
        """Energy subtracted per pair (0 unless shifted so the energy is 0 at the cutoff)."""
        if not self.shift:
            return 0.0
        ratio = self.sigma / self.cutoff
        return 4.0 * self.epsilon * (ratio ** 12.0 - ratio ** 6.0)
