"""`tensorkiln md IN_FILE`: run a LAMMPS input script (the Lennard-Jones subset) through the compiled kernels.

Started by mpiexec on several ranks (`tensorkiln launch -n 2 -- tensorkiln md in.lj`), each rank runs
its sub-box of a spatial decomposition and rank 0 prints the output.
"""
from __future__ import annotations

import argparse
import os
import sys

from tensorkiln.md.input_script import InputScript
from tensorkiln.md.lattice import MDInputError
from tensorkiln.runtime import communicator

# What MPICH's and Open MPI's launchers tell each process about the size of the job.
_WORLD_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")


def launched_ranks() -> int:
    """The number of ranks mpiexec started this process with (1 when it was not started by mpiexec)."""
    for name in _WORLD_SIZE_VARIABLES:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tensorkiln md", description="run a LAMMPS input script (the "
                                     "Lennard-Jones benchmark subset) with compiled kernels; LAMMPS-style output")
    parser.add_argument("input", help="the input script, e.g. in.lj")
    parser.add_argument("-var", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                        help="set an index variable before the script runs (as LAMMPS's -var)")
    parser.add_argument("--threads", type=int, default=None, help="OpenMP threads (default: OMP_NUM_THREADS or all cores)")
    parser.add_argument("--timing", action="store_true",
                        help="after each run, print where its time went: LAMMPS's timing breakdown (Pair, Neigh, "
                             "Comm, Output, Modify, Other) and the time inside each compiled program")
    args = parser.parse_args(argv)
    ranks, rank = launched_ranks(), 0
    if ranks > 1:
        communicator.init()
        ranks, rank = communicator.world_size(), communicator.rank()
    out = (lambda line: print(line, flush=True)) if rank == 0 else (lambda line: None)
    try:
        InputScript(out, dict(args.var), args.threads, ranks, rank, args.timing).run_file(args.input)
    except MDInputError as error:
        return _fail(f"ERROR: {error}", ranks, rank)
    except OSError as error:
        return _fail(f"ERROR: cannot read {args.input}: {error.strerror}", ranks, rank)
    return 0


def _fail(message: str, ranks: int, rank: int) -> int:
    """Print the error (once when every rank has it) and, with several ranks, end them all: a rank that
    stopped alone would leave the others waiting for its messages."""
    if ranks == 1:
        print(message, file=sys.stderr)
        return 1
    print(f"{message} (rank {rank} of {ranks})", file=sys.stderr, flush=True)
    communicator.world().comm.Abort(1)
    return 1
