"""``tensorkiln accel``: the accelerator model on the command line.

    tensorkiln accel --config ARCH.cfg --topology NET.csv --out DIR [--dataflow ws|os|is|best]
    tensorkiln accel NET.csv --array 32x32 --dataflow best
    tensorkiln accel MODEL.onnx --array 32x32 --dataflow ws
    tensorkiln accel --preset tpu-v1 --topology NET.csv
    tensorkiln accel sweep --topology NET.csv --out DIR [--arrays 16x16,32x32] [--sram-kb 32,64]
    tensorkiln accel presets
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..importers.onnx.model import load, random_inputs
from .api import make_array, simulate
from .arch import DATAFLOWS, PRESETS, SCALESIM_32, ArrayConfig, parse_array_shape, preset
from .errors import AccelConfigError
from .graph_layers import layers_from_graph
from .layer import Layer
from .precision import PRECISIONS
from .scalesim_cfg import read_config
from .sweep import plot_sweep, sweep, write_sweep_csv
from .topology import read_topology

ONNX_UNAVAILABLE = "ONNX import is not available in this build"


def _sram_kb(text: str) -> tuple[float, float, float]:
    parts = [float(p) for p in text.split(",")]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or min(parts) <= 0:
        raise argparse.ArgumentTypeError("give one size or ifmap,filter,ofmap in KiB")
    return parts[0], parts[1], parts[2]


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tensorkiln accel",
        description="Model a network on a systolic-array accelerator (SCALE-Sim compatible).")
    p.add_argument("model", nargs="?", help="a SCALE-Sim topology .csv or an .onnx model")
    p.add_argument("--config", "-c", help="SCALE-Sim architecture .cfg")
    p.add_argument("--topology", "-t", help="SCALE-Sim topology .csv (conv or M,N,K GEMM)")
    p.add_argument("--gemm", action="store_true", help="read the topology as M,N,K rows")
    p.add_argument("--preset", choices=sorted(PRESETS), help="start from a known machine")
    p.add_argument("--array", help="array shape ROWSxCOLS, e.g. 32x32")
    p.add_argument("--dataflow", choices=[*DATAFLOWS, "best"],
                   help="ws, os, is, or best (fastest per layer)")
    p.add_argument("--sram-kb", type=_sram_kb, help="SRAM KiB: one size or ifmap,filter,ofmap")
    p.add_argument("--bandwidth", type=float, help="DRAM words per cycle (default: unlimited)")
    p.add_argument("--precision", choices=sorted(PRECISIONS),
                   help="operand format: word width and energy per MAC/access in pJ (hw/precision.py)")
    p.add_argument("--out", "-o", help="write SCALE-Sim's report CSVs into this directory")
    return p


def _sweep_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tensorkiln accel sweep",
        description="Sweep array shapes x dataflows x SRAM sizes; write sweep.csv (and "
                    "sweep.png when matplotlib is installed).")
    p.add_argument("--topology", "-t", required=True, help="SCALE-Sim topology .csv")
    p.add_argument("--out", "-o", required=True, help="output directory")
    p.add_argument("--config", "-c", help="SCALE-Sim .cfg to take the other settings from")
    p.add_argument("--preset", choices=sorted(PRESETS), help="start from a known machine")
    p.add_argument("--arrays", default="8x8,16x16,32x32,64x64,32x8,8x32",
                   help="comma-separated shapes (default: %(default)s)")
    p.add_argument("--dataflows", default="ws,os,is", help="default: %(default)s")
    p.add_argument("--sram-kb", default="32,64,256",
                   help="sizes in KiB, each used for all three SRAMs (default: %(default)s)")
    p.add_argument("--bandwidth", type=float, help="DRAM words per cycle (default: unlimited)")
    p.add_argument("--precision", choices=sorted(PRECISIONS),
                   help="operand format: word width and energy per MAC/access in pJ (hw/precision.py)")
    return p


def _load_workload(args: argparse.Namespace) -> list[Layer]:
    path = args.topology or args.model
    if path is None:
        raise AccelConfigError("give a topology (--topology NET.csv) or a model path")
    if str(path).lower().endswith(".onnx"):
        return _layers_from_onnx(path)
    return read_topology(path, "gemm" if args.gemm else "auto")


def _layers_from_onnx(path: str) -> list[Layer]:
    try:
        import onnx  # noqa: F401  (optional; the importer needs it)
    except ImportError:
        raise AccelConfigError(ONNX_UNAVAILABLE)
    module = load(path, backend="interpreter")  # only the graph is needed, not compiled code
    graph = module.optimized_graph(**random_inputs(module, dynamic=1))  # batch 1; batch norm folded
    layers = layers_from_graph(graph)
    if not layers:
        raise AccelConfigError(f"{path}: the model has no conv2d or matmul layers")
    return layers


def _base_array(config_path: str | None, preset_name: str | None) -> ArrayConfig:
    """The machine to start from: a .cfg file, else a preset, else SCALE-Sim's 32x32."""
    if config_path:
        return read_config(config_path).to_array()
    return preset(preset_name) if preset_name else SCALESIM_32


def _run(argv: list[str]) -> int:
    args = _run_parser().parse_args(argv)
    layers = _load_workload(args)
    config = make_array(array=parse_array_shape(args.array) if args.array else None,
                        dataflow=args.dataflow, sram_kb=args.sram_kb,
                        preset=_base_array(args.config, args.preset),
                        dram_words_per_cycle=args.bandwidth, precision=args.precision)
    report = simulate(layers, array=config, dataflow=args.dataflow)
    print(report.table())
    if args.out:
        for path in report.to_csv(args.out):
            print(f"wrote {path}")
    return 0


def _sweep(argv: list[str]) -> int:
    args = _sweep_parser().parse_args(argv)
    layers = read_topology(args.topology)
    base = _base_array(args.config, args.preset)
    base = make_array(preset=base, dram_words_per_cycle=args.bandwidth, precision=args.precision)
    arrays = [parse_array_shape(a) for a in args.arrays.split(",") if a.strip()]
    dataflows = [d.strip() for d in args.dataflows.split(",") if d.strip()]
    for d in dataflows:
        if d not in DATAFLOWS:
            raise AccelConfigError(f"--dataflows: unknown dataflow {d!r}")
    try:
        sizes = [float(s) for s in args.sram_kb.split(",") if s.strip()]
    except ValueError:
        raise AccelConfigError(f"--sram-kb: expected numbers, got {args.sram_kb!r}")
    points = sweep(layers, arrays, dataflows, sizes, base)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = write_sweep_csv(points, out / "sweep.csv")
    print(f"{'configuration':<22} {'cycles':>14} {'util%':>6} {'DRAM bytes':>13} {'energy':>11}")
    for p in points:
        if p.feasible:
            print(f"{p.label:<22} {p.cycles:>14,} {100 * (p.utilization or 0):>6.1f} "
                  f"{p.dram_bytes:>13,} {p.energy:>11.4g}")
        else:
            print(f"{p.label:<22} infeasible: {p.error}")
    best = min((p for p in points if p.feasible), key=lambda p: (p.cycles or 0, p.energy or 0),
               default=None)
    if best is not None:
        print(f"fastest: {best.label} ({best.cycles:,} cycles)")
    print(f"wrote {csv_path}")
    png = out / "sweep.png"
    if plot_sweep(points, png):
        print(f"wrote {png}")
    else:
        print("matplotlib is not installed (or no configuration fits): no plot")
    return 0


def _presets() -> int:
    for name, a in PRESETS.items():
        bw = f"{a.dram_words_per_cycle:.3g} words/cycle" if a.dram_words_per_cycle else "CALC"
        clock = f", {a.clock_mhz:g} MHz" if a.clock_mhz else ""
        print(f"{name:<16} {a.rows}x{a.cols} {a.dataflow}, SRAM {a.ifmap_sram_kb:g}/"
              f"{a.filter_sram_kb:g}/{a.ofmap_sram_kb:g} KiB, {a.word_bytes}-byte words, "
              f"DRAM {bw}{clock}")
    return 0


def main(argv: list[str]) -> int:
    """Run ``tensorkiln accel`` with the arguments after ``accel``; return the exit status."""
    try:
        if argv and argv[0] == "sweep":
            return _sweep(argv[1:])
        if argv and argv[0] == "presets":
            return _presets()
        return _run(argv)
    except AccelConfigError as err:
        print(f"tensorkiln accel: error: {err}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse's usage errors and --help
        return int(exc.code or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
