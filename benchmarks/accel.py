"""Time tensorkiln's systolic-array model on ResNet-18, optionally against SCALE-Sim.

    PYTHONPATH=. python3 benchmarks/accel.py
    PYTHONPATH=. python3 benchmarks/accel.py --vs-scalesim /tmp/scalesim-venv/bin/python

For each dataflow (ws, os, is) on a 32x32 array with 64 KiB SRAMs (SCALE-Sim's
example configuration, CALC bandwidth mode) it models all 21 conv and fc layers
of ResNet-18 (tensorkiln/hw/topologies/resnet18.csv). With --vs-scalesim it
also runs SCALE-Sim 3.0 on the same .cfg and .csv, times it, and checks that
the per-layer compute cycles ("Total Cycles") and SRAM access counts are
identical. SCALE-Sim takes about two minutes per dataflow; pass --dataflows to
run fewer. The "closed forms" column times the cycle and SRAM closed forms alone
(fold plan, SRAM traffic and window of every layer; no DRAM model).
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tensorkiln import hw  # noqa: E402
from tensorkiln.hw.api import clear_caches  # noqa: E402
from tensorkiln.hw.dataflow import plan_folds, sram_traffic, sram_window  # noqa: E402
from tensorkiln.hw.scalesim_cfg import ScaleSimConfig, write_config  # noqa: E402

TOPOLOGY = REPO / "tensorkiln" / "hw" / "topologies" / "resnet18.csv"
EXACT_COLUMNS = ("Total Cycles", "SRAM IFMAP Reads", "SRAM Filter Reads", "SRAM OFMAP Writes")


def time_tensorkiln(layers: list[hw.Layer], array: hw.ArrayConfig,
                    repeats: int) -> tuple[float, hw.SimReport]:
    """Median wall time of one full-network model run, after a warm-up.

    Every timed run starts with cold caches (the model memoizes footprints), so
    the number is what a user's first call costs.
    """
    report = hw.simulate(layers, array=array)
    times = []
    for _ in range(repeats):
        clear_caches()
        start = time.perf_counter()
        report = hw.simulate(layers, array=array)
        times.append(time.perf_counter() - start)
    return statistics.median(times), report


def time_closed_forms(layers: list[hw.Layer], array: hw.ArrayConfig, repeats: int) -> float:
    """Median wall time of the cycle and SRAM closed forms over all layers (the model less its DRAM part)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for layer in layers:
            plan = plan_folds(layer.gemm_dims, array.rows, array.cols, array.dataflow)
            sram_traffic(layer.gemm_dims, plan)
            sram_window(plan, layer)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_scalesim(python: str, cfg: Path, topology: Path, work: Path) -> tuple[float, Path]:
    """Run SCALE-Sim once; return its wall time and its report directory."""
    layout = work / "layout.csv"
    layout.write_text("Layer name,\n")
    start = time.perf_counter()
    subprocess.run([python, "-m", "scalesim.scale", "-c", str(cfg), "-t", str(topology),
                    "-l", str(layout), "-p", str(work / "out"), "-s", "N"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=work)
    elapsed = time.perf_counter() - start
    return elapsed, work / "out" / cfg.stem


def compare(ours: Path, theirs: Path) -> list[str]:
    """Differences in the exact columns between our reports and SCALE-Sim's."""
    problems = []
    for name in ("COMPUTE_REPORT.csv", "DETAILED_ACCESS_REPORT.csv"):
        a = hw.read_scalesim_report(ours / name)
        b = hw.read_scalesim_report(theirs / name)
        if len(a) != len(b):
            problems.append(f"{name}: {len(a)} rows vs {len(b)}")
            continue
        for i, (ra, rb) in enumerate(zip(a, b)):
            for col in EXACT_COLUMNS:
                if col in ra and ra[col] != rb[col]:
                    problems.append(f"{name} layer {i} {col}: {ra[col]} vs {rb[col]}")
    return problems


def main() -> int:
    """Run the benchmark and print a markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vs-scalesim", metavar="PYTHON",
                    help="python of a virtual environment with scalesim==3.0.0")
    ap.add_argument("--dataflows", default="ws,os,is")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--save-scalesim", metavar="DIR",
                    help="copy SCALE-Sim's reports to DIR/32x32_<df>/ (for test fixtures)")
    args = ap.parse_args()

    layers = hw.read_topology(TOPOLOGY)
    rows = []
    all_ok = True
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        for df in args.dataflows.split(","):
            array = hw.SCALESIM_32.with_(dataflow=df, name=f"32x32_{df}")
            t_ours, report = time_tensorkiln(layers, array, args.repeats)
            row = {"df": df, "cycles": report.totals.compute_cycles, "ours": t_ours,
                   "closed": time_closed_forms(layers, array, args.repeats)}
            if args.vs_scalesim:
                work = tmpdir / df
                work.mkdir()
                cfg = work / f"32x32_{df}.cfg"
                write_config(ScaleSimConfig.from_array(array, run_name=f"32x32_{df}"), cfg)
                t_theirs, their_dir = run_scalesim(args.vs_scalesim, cfg, TOPOLOGY, work)
                report.to_csv(work / "ours")
                problems = compare(work / "ours", their_dir)
                all_ok &= not problems
                row.update(theirs=t_theirs, identical="yes" if not problems else
                           f"NO ({len(problems)} differences)")
                for p in problems[:10]:
                    print("  mismatch:", p, file=sys.stderr)
                if args.save_scalesim:
                    dest = Path(args.save_scalesim) / f"32x32_{df}"
                    dest.mkdir(parents=True, exist_ok=True)
                    for name in hw.scalesim_reports.REPORT_FILES:
                        shutil.copy(their_dir / name, dest / name)
            rows.append(row)
            print(f"done {df}", file=sys.stderr)

    print(f"ResNet-18 ({len(layers)} conv/fc layers), 32x32 array, 64 KiB SRAMs, "
          f"tensorkiln median of {args.repeats} cold runs")
    print()
    if args.vs_scalesim:
        print("| dataflow | compute cycles | tensorkiln | closed forms | SCALE-Sim 3.0 | speed-up | "
              "cycles & SRAM counts identical |")
        print("|---|---:|---:|---:|---:|---:|---|")
        for r in rows:
            print(f"| {r['df']} | {r['cycles']:,} | {r['ours'] * 1e3:.2f} ms | {r['closed'] * 1e3:.2f} ms | "
                  f"{r['theirs']:.1f} s | {r['theirs'] / r['ours']:,.0f}x | {r['identical']} |")
    else:
        print("| dataflow | compute cycles | tensorkiln | closed forms |")
        print("|---|---:|---:|---:|")
        for r in rows:
            print(f"| {r['df']} | {r['cycles']:,} | {r['ours'] * 1e3:.2f} ms | {r['closed'] * 1e3:.2f} ms |")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
