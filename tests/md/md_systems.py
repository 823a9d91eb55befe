"""The systems the MD tests run: lattice blocks, melts (LAMMPS's `velocity ... loop geom`), random boxes."""
from __future__ import annotations

import numpy as np

from tensorkiln.md.lattice import Box, Lattice, block_region
from tensorkiln.md.system import System


def lattice_block(style: str = "fcc", density: float = 0.8442, cells=(5, 5, 5)) -> System:
    """A block of cells[0] x cells[1] x cells[2] unit cells (an int: a cube) of a lattice, at rest."""
    nx, ny, nz = (cells,) * 3 if isinstance(cells, int) else cells
    lattice = Lattice.from_density(style, density)
    return System.from_lattice(lattice, block_region(lattice, (0, nx, 0, ny, 0, nz)))


def melt(style: str = "fcc", density: float = 0.8442, cells=(5, 5, 5), temperature: float = 1.44,
         seed: int = 87287) -> System:
    """A lattice block with in.lj's velocities (`velocity all create T SEED loop geom`)."""
    system = lattice_block(style, density, cells)
    system.create_velocities(temperature, seed)
    return system


def random_system(rng, atoms: int, lengths, min_distance: float = 0.8) -> System:
    """Atoms placed at random in a box at a random origin, none closer than min_distance (so LJ forces stay
    moderate)."""
    lengths = np.asarray(lengths, float)
    lo = rng.uniform(-3, 3, size=3)
    points: list[np.ndarray] = []
    while len(points) < atoms:
        p = lo + rng.random(3) * lengths
        if points:
            d = np.array(points) - p
            d -= lengths * np.round(d / lengths)
            if np.min(np.sum(d * d, axis=1)) < min_distance ** 2:
                continue
        points.append(p)
    return System(Box(tuple(lo), tuple(lo + lengths)), np.array(points))
