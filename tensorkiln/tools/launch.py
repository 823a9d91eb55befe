"""`tensorkiln launch -n N [--threads T] [--log-dir DIR] [--timeout S] [--wait auto|spin|yield] script.py args...`."""
from __future__ import annotations

import argparse

from ..distributed.launch import launch
from ..distributed.wait_policy import WAIT_POLICIES


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="tensorkiln launch",
        description="run a Python program on N MPI ranks with the installed MPI's mpiexec")
    parser.add_argument("-n", "--nproc", type=int, required=True, help="number of ranks")
    parser.add_argument("--threads", type=int, default=1, help="OpenMP threads per rank (default 1)")
    parser.add_argument("--log-dir", default=None, help="write each rank's output to its own file here")
    parser.add_argument("--timeout", type=int, default=None, help="end every rank after this many seconds")
    parser.add_argument("--wait", choices=WAIT_POLICIES, default="auto",
                        help="how a rank waits for a message: spin (about 1 us per message, holds its core) or "
                             "yield (sleeps between polls: frees the core, about 100 us per message); auto "
                             "(default) spins when ranks x threads <= the cores this process may use less those "
                             "other work keeps busy now, else yields")
    parser.add_argument("--busy-poll", action="store_true", help="the same as --wait spin")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="script.py and its arguments (or -m module)")
    args = parser.parse_args(argv)
    return launch(args.nproc, args.program, args.threads, args.log_dir, args.timeout, args.busy_poll, args.wait)
