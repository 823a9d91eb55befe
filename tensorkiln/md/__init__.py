"""Molecular dynamics through the compiler: Lennard-Jones with cell-list neighbour lists and velocity Verlet.

    from tensorkiln import md
    lattice = md.Lattice.from_density("fcc", 0.8442)
    system = md.System.from_lattice(lattice, md.block_region(lattice, (0, 10, 0, 10, 0, 10)))
    system.create_velocities(1.44, 87287)                 # LAMMPS's `velocity ... loop geom`
    sim = md.Simulation(system, md.LJCut(cutoff=2.5), md.NeighborSettings(skin=0.3, every=20, check=False))
    result = sim.run(100, thermo_every=50, out=print)     # LAMMPS's thermo table and Loop time line

The force, neighbour-list and integrator kernels are loop IR compiled to C
with OpenMP (force_kernels.py, neighbor_kernels.py, integrate_kernels.py,
programs.py); `InputScript` reads LAMMPS input scripts (`tensorkiln md IN_FILE`);
`DecomposedSimulation` runs one sub-box per MPI rank (decomposed.py).
See docs/md.md.
"""
from tensorkiln.md.decomposed import DecomposedSimulation
from tensorkiln.md.input_script import InputScript
from tensorkiln.md.lattice import Box, Lattice, MDInputError, block_region, create_atoms
from tensorkiln.md.pair_lj import LJCut
from tensorkiln.md.simulation import DangerousBuildWarning, NeighborSettings, RunResult, Simulation
from tensorkiln.md.system import System
from tensorkiln.md.thermo import ThermoRow

__all__ = ["Box", "DangerousBuildWarning", "DecomposedSimulation", "InputScript", "LJCut", "Lattice", "MDInputError",
           "NeighborSettings", "RunResult", "Simulation", "System", "ThermoRow", "block_region", "create_atoms"]
