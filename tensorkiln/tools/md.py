"""`tensorkiln md IN_FILE`: run a LAMMPS input script (the Lennard-Jones subset) through the compiled kernels."""
from __future__ import annotations

import argparse
import sys

from tensorkiln.md.input_script import InputScript
from tensorkiln.md.lattice import MDInputError


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tensorkiln md", description="run a LAMMPS input script (the "
                                     "Lennard-Jones benchmark subset) with compiled kernels; LAMMPS-style output")
    parser.add_argument("input", help="the input script, e.g. in.lj")
    parser.add_argument("-var", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                        help="set an index variable before the script runs (as LAMMPS's -var)")
    parser.add_argument("--threads", type=int, default=None, help="OpenMP threads (default: OMP_NUM_THREADS or all cores)")
    args = parser.parse_args(argv)
    try:
        InputScript(lambda line: print(line, flush=True), dict(args.var), args.threads).run_file(args.input)
    except MDInputError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"ERROR: cannot read {args.input}: {error.strerror}", file=sys.stderr)
        return 1
    return 0
