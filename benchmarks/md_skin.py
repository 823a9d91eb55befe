"""How the neighbour list's skin and rebuild interval trade work for correctness, on in.lj.

    python benchmarks/md_skin.py [--cells 10] [--json out.json]

For each skin and `neigh_modify every E check no|yes` (delay 0), one 200-step
run of in.lj (fcc 0.8442, cutoff 2.5, T 1.44, dt 0.005; 10x10x10 cells = 4,000
atoms by default) on one thread: the number of list builds, the builds that came
after an atom had moved more than half the skin ("dangerous": a pair may have
been missed), the mean neighbours per atom (the force kernel's work), the loop
time, and how far TotEng after 200 steps lies from a reference run that
rebuilds every step with a wide skin (no pair can be missed there). Double
precision; timings from a shared machine are noisy.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from benchmarks.common import print_table, write_json  # noqa: E402
from tensorkiln.md.lattice import Lattice, block_region  # noqa: E402
from tensorkiln.md.pair_lj import LJCut  # noqa: E402
from tensorkiln.md.simulation import NeighborSettings, Simulation  # noqa: E402
from tensorkiln.md.system import System  # noqa: E402

STEPS = 200


def run(cells: int, skin: float, every: int, check: bool):
    lattice = Lattice.from_density("fcc", 0.8442)
    system = System.from_lattice(lattice, block_region(lattice, (0, cells, 0, cells, 0, cells)))
    system.create_velocities(1.44, 87287)
    sim = Simulation(system, LJCut(cutoff=2.5), NeighborSettings(skin=skin, every=every, check=check), threads=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = sim.run(STEPS)
    return result, float(sim.neighbor_counts().mean())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    reference, _ = run(args.cells, 1.0, 1, False)
    exact = reference.rows[-1].tot_eng
    rows, records = [], []
    for skin in (0.1, 0.3, 0.5):
        for every, check in ((1, True), (10, False), (20, False), (20, True)):
            result, neighbours = run(args.cells, skin, every, check)
            error = abs(result.rows[-1].tot_eng - exact) / abs(exact)
            records.append({"skin": skin, "every": every, "check": check, "builds": result.builds,
                            "dangerous_builds": result.dangerous_builds, "neighbours_per_atom": neighbours,
                            "loop_seconds": result.loop_seconds, "tot_eng_error": error})
            rows.append([f"{skin:g}", f"every {every} check {'yes' if check else 'no'}", str(result.builds),
                         str(result.dangerous_builds), f"{neighbours:.1f}", f"{result.loop_seconds:.3f}",
                         f"{error:.1e}"])
    print(f"in.lj, {args.cells}x{args.cells}x{args.cells} cells, {STEPS} steps, 1 thread, double precision")
    print_table(["skin", "rebuild rule", "builds", "dangerous", "neighbours/atom", "loop s",
                 "TotEng error vs exact list"], rows)
    if args.json:
        write_json(args.json, {"runs": records, "reference_tot_eng": exact})
    return 0


if __name__ == "__main__":
    sys.exit(main())
