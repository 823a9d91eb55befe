"""`tensorkiln launch -n N [--threads T] [--log-dir DIR] [--timeout S] [--busy-poll] script.py args...`."""
from __future__ import annotations

import argparse

from ..distributed.launch import launch


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="tensorkiln launch",
        description="run a Python program on N MPI ranks with the installed MPI's mpiexec")
    parser.add_argument("-n", "--nproc", type=int, required=True, help="number of ranks")
    parser.add_argument("--threads", type=int, default=1, help="OpenMP threads per rank (default 1)")
    parser.add_argument("--log-dir", default=None, help="write each rank's output to its own file here")
    parser.add_argument("--timeout", type=int, default=None, help="end every rank after this many seconds")
    parser.add_argument("--busy-poll", action="store_true",
                        help="let a waiting rank spin (MPI's default) instead of yielding its core")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="script.py and its arguments (or -m module)")
    args = parser.parse_args(argv)
    return launch(args.nproc, args.program, args.threads, args.log_dir, args.timeout, args.busy_poll)
