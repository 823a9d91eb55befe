"""The systems the MD tests run: lattice blocks, melts (LAMMPS's `velocity ... loop geom`), random boxes, and
in.lj-style input scripts of a chosen size."""
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


def lj_script(cells=(4, 4, 4), every: int = 20, thermo: int = 10, run: int = 25) -> str:
    """LAMMPS's in.lj (fcc 0.8442, T 1.44, cutoff 2.5, skin 0.3) over a block of `cells`, `neigh_modify every`."""
    x, y, z = cells
    return f"""units lj
atom_style atomic
lattice fcc 0.8442
region box block 0 {x} 0 {y} 0 {z}
create_box 1 box
create_atoms 1 box
mass 1 1.0
velocity all create 1.44 87287 loop geom
pair_style lj/cut 2.5
pair_coeff 1 1 1.0 1.0 2.5
neighbor 0.3 bin
neigh_modify delay 0 every {every} check no
fix 1 all nve
thermo {thermo}
run {run}
"""
