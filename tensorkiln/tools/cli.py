"""The `tensorkiln` command: demo, run (ONNX models), export (a standalone C library), bench (against
peers), ops (the op table), cache (the compile cache), accel (systolic-array model), md (LAMMPS input
scripts), launch (MPI ranks), tune (search kernel configurations)."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `tensorkiln` console command."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="tensorkiln", description="a small deep-learning compiler")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("demo", help="run the demo models eagerly and compiled, and compare")
    commands.add_parser("accel", help="model a systolic-array accelerator (tensorkiln accel --help)",
                        add_help=False)
    commands.add_parser("bench", help="tensorkiln vs PyTorch, torch.compile, ONNX Runtime on one model "
                        "(tensorkiln bench --help)", add_help=False)
    commands.add_parser("ops", help="list the primitive ops of the op table (tensorkiln ops --help)",
                        add_help=False)
    commands.add_parser("cache", help="the compile cache: info, clear (tensorkiln cache --help)",
                        add_help=False)
    commands.add_parser("run", help="run an ONNX model: outputs, checksums, latency (tensorkiln run --help)",
                        add_help=False)
    commands.add_parser("md", help="run a LAMMPS input script, Lennard-Jones subset (tensorkiln md --help)",
                        add_help=False)
    commands.add_parser("launch", help="run a program on N MPI ranks: tensorkiln launch -n 2 train.py",
                        add_help=False)
    commands.add_parser("export", help="export an ONNX model as a standalone C library (tensorkiln export --help)",
                        add_help=False)
    commands.add_parser("tune", help="tune a model's kernels on this machine (tensorkiln tune --help)",
                        add_help=False)
    # A subcommand's module (and the optional packages it uses) loads only when it runs.
    if argv[:1] == ["accel"]:
        from ..hw.cli import main as accel_main
        return accel_main(argv[1:])
    if argv[:1] == ["bench"]:
        from .bench import main as bench_main
        return bench_main(argv[1:])
    if argv[:1] == ["cache"]:
        from .cache import main as cache_main
        return cache_main(argv[1:])
    if argv[:1] == ["ops"]:
        from .op_table import main as ops_main
        return ops_main(argv[1:])
    if argv[:1] == ["md"]:
        from .md import main as md_main
        return md_main(argv[1:])
    if argv[:1] == ["export"]:
        from .export_cli import main as export_main
        return export_main(argv[1:])
    if argv[:1] == ["run"]:
        from .run_onnx import main as run_main
        return run_main(argv[1:])
    if argv[:1] == ["tune"]:
        from .tune_cli import main as tune_main
        return tune_main(argv[1:])
    if argv[:1] == ["launch"]:
        from .launch import main as launch_main
        return launch_main(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo
        return run_demo()
    parser.print_help()
    return 0 if argv else 2


if __name__ == "__main__":
    sys.exit(main())
