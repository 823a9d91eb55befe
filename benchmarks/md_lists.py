"""The full neighbour list against the half list on in.lj: CPU time of a force call and of a rebuild, in turns.

    python benchmarks/md_lists.py [--cells 20 20 20] [--rounds 7] [--calls 5]

in.lj (fcc 0.8442, cutoff 2.5, skin 0.3, `every 20 check no`, dt 0.005), one
thread, double precision: both `Simulation(..., full_list=True)` (the full
list over runs of cells and the SIMD force kernel) and `full_list=False` (the
half list, Newton's third law, the scalar pair loop) run 20 steps, then, in
turns for `--rounds` rounds, each times `--calls` force calls and one
neighbour-list rebuild (sort and build) by the CPU time of this thread
(`time.thread_time`: a loaded machine moves it less than the wall clock).
Printed: medians per variant, the force plus the rebuild amortized over 20
steps, and the TotEng after the 20 steps of each (equal up to the order of the
sums).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
os.environ.setdefault("OMP_NUM_THREADS", "1")  # before the OpenMP runtime loads

REBUILD_EVERY = 20  # in.lj's `neigh_modify every 20`


def _simulation(cells, full_list: bool):
    from tensorkiln import md
    from tensorkiln.md.simulation import DangerousBuildWarning, NeighborSettings, Simulation
    lattice = md.Lattice.from_density("fcc", 0.8442)
    system = md.System.from_lattice(lattice, md.block_region(lattice, (0, cells[0], 0, cells[1], 0, cells[2])))
    system.create_velocities(1.44, 87287)
    sim = Simulation(system, md.LJCut(cutoff=2.5), NeighborSettings(0.3, 0, REBUILD_EVERY, False), 0.005,
                     threads=1, full_list=full_list)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DangerousBuildWarning)  # in.lj's `check no`: as LAMMPS runs it
        result = sim.run(20)
    return sim, result.rows[-1].tot_eng


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, nargs=3, default=(20, 20, 20))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    from benchmarks.common import machine_summary, print_table
    variants = {"half list, scalar pair loop": False, "full list, SIMD pair loop": True}
    sims = {label: _simulation(args.cells, full) for label, full in variants.items()}
    force = {label: [] for label in sims}
    build = {label: [] for label in sims}
    for _ in range(args.rounds):  # in turns
        for label, (sim, _) in sims.items():
            start = time.thread_time()
            for _ in range(args.calls):
                sim.compute_forces(energy=False)
            force[label].append((time.thread_time() - start) / args.calls)
            start = time.thread_time()
            sim.build_neighbor_list()
            build[label].append(time.thread_time() - start)
    atoms = sims[next(iter(sims))][0].system.atoms
    print(f"in.lj, {atoms} atoms ({'x'.join(map(str, args.cells))} cells), 1 thread, double precision; "
          f"{machine_summary()}; CPU time of this thread, medians of {args.rounds} rounds in turns")
    rows = []
    per_step = {}
    for label, (sim, tot_eng) in sims.items():
        f, b = statistics.median(force[label]), statistics.median(build[label])
        per_step[label] = f + b / REBUILD_EVERY
        rows.append([label, f"{f * 1e3:.2f}", f"{b * 1e3:.1f}", f"{per_step[label] * 1e3:.2f}",
                     str(sim.pair_count()), f"{tot_eng:.15g}"])
    print_table(["variant", "force call ms", "rebuild ms", f"per step ms (rebuild every {REBUILD_EVERY})",
                 "pairs", "TotEng at step 20"], rows)
    half, full = per_step.values()
    print(f"full list / half list, per step: {half / full:.2f}x faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
