"""Exported models from C: latency against the Python call, create time, library size against the weights.

    python benchmarks/deploy.py [--models resnet18 bert] [--rounds 5] [--calls 10] [--json out.json]

For each zoo model (ResNet-18 at 1x3x224x224 float32, BERT-base at 1x128
tokens), traced without gradients and compiled with tk.jit, then exported
(`f.export`, weights embedded up to 256 MiB, beside the library above):

- the C program (deploy_timer.c, linked against libNAME.so, run as its own
  process with no Python in it) must write outputs bit-identical to the
  Python call's;
- latency: the C call, the Python call (tk.jit) and tk.load_compiled's call
  (Python through the C API), timed in turns: every round runs a block of
  calls of each, and the figures are medians over all rounds; the ratio
  C / Python is printed (below 1: C is faster), and "paired", the median
  over rounds of each round's own ratio (the two blocks of a round share
  most of the machine's load);
- NAME_create: median over the rounds (one create per C process);
- size: libNAME.so (and NAME.weights when the weights are beside it)
  against the weights' own bytes.

Every framework runs with OMP_NUM_THREADS (default 2, the machine's cores).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
INPUTS = {"resnet18": "image 1x3x224x224 float32", "bert": "input_ids 1x128 int64"}


def build(name: str):
    """(the zoo model in eval mode, its example input)."""
    import numpy as np
    import tensorkiln as tk
    from tensorkiln.models import create
    tk.manual_seed(0)
    model = create(name).eval()
    rng = np.random.default_rng(0)
    if name == "bert":
        return model, rng.integers(0, model.config.vocab_size, size=(1, 128)).astype(np.int64)
    return model, rng.standard_normal((1, 3, 224, 224)).astype(np.float32)


def c_timer(directory: Path, name: str) -> Path:
    """deploy_timer.c built against the exported libNAME.so."""
    timer = directory / "timer"
    subprocess.run(["cc", "-O2", f"-DMODEL={name}", "-include", f"{name}.h", str(HERE / "deploy_timer.c"),
                    "-L.", f"-l{name}", "-Wl,-rpath,$ORIGIN", "-o", str(timer)], cwd=directory, check=True)
    return timer


def run_c(timer: Path, calls: int, inputs: list[Path], env: dict) -> tuple[float, list[float]]:
    """One C process: (create seconds, per-call seconds)."""
    done = subprocess.run([str(timer), str(calls), *map(str, inputs)], cwd=timer.parent, env=env,
                          capture_output=True, text=True, check=True)
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    return float(lines["create_seconds"]), [float(t) for t in lines["call_seconds"].split()]


def measure(name: str, rounds: int, calls: int, scratch: Path, env: dict) -> dict:
    import numpy as np
    import tensorkiln as tk
    model, x = build(name)
    f = tk.jit(model)
    start = time.perf_counter()
    with tk.no_grad():
        expected = f(x).numpy()
    compile_seconds = time.perf_counter() - start
    directory = scratch / name
    exported = f.export(directory, x, name=name)
    weights_file = directory / f"{name}.weights"
    library_bytes = exported.shared_library.stat().st_size
    side_bytes = weights_file.stat().st_size if weights_file.exists() else 0
    timer = c_timer(directory, name)
    np.ascontiguousarray(x).tofile(directory / "in0.bin")
    loaded = tk.load_compiled(directory)
    loaded_create = []
    for _ in range(3):
        t0 = time.perf_counter()
        tk.load_compiled(directory).close()
        loaded_create.append(time.perf_counter() - t0)

    def python_block() -> list[float]:
        times = []
        with tk.no_grad():
            f(x)
            for _ in range(calls):
                t0 = time.perf_counter()
                f(x)
                times.append(time.perf_counter() - t0)
        return times

    def loaded_block() -> list[float]:
        loaded(x)
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            loaded(x)
            times.append(time.perf_counter() - t0)
        return times

    c_times, py_times, loaded_times, creates, paired = [], [], [], [], []
    for _ in range(rounds):  # in turns: every round sees the machine in the same phase for each
        time.sleep(0.05)
        create, times = run_c(timer, calls, [directory / "in0.bin"], env)
        creates.append(create)
        c_times += times
        time.sleep(0.05)
        python = python_block()
        py_times += python
        paired.append(np.median(times) / np.median(python))  # the same round: the same load, mostly
        time.sleep(0.05)
        loaded_times += loaded_block()
    c_output = (directory / "output0.bin").read_bytes()[:expected.nbytes]
    loaded_output = loaded(x)[0]
    row = {
        "input": INPUTS[name], "compile_s": compile_seconds, "export_s": exported.seconds,
        "bit_identical_c": c_output == expected.tobytes(),
        "bit_identical_load_compiled": bool(np.array_equal(loaded_output, expected)),
        "c_latency_s": float(np.median(c_times)), "python_latency_s": float(np.median(py_times)),
        "load_compiled_latency_s": float(np.median(loaded_times)),
        "create_s": float(np.median(creates)), "load_compiled_s": float(np.median(loaded_create)),
        "weights_storage": exported.manifest.weights_storage, "weights_bytes": exported.weights_bytes,
        "library_bytes": library_bytes, "weights_file_bytes": side_bytes,
        "calls": len(c_times),
    }
    row["c_over_python"] = row["c_latency_s"] / row["python_latency_s"]
    row["c_over_python_by_round"] = [float(r) for r in paired]
    row["c_over_python_paired_median"] = float(np.median(paired))
    row["library_minus_weights_mib"] = (library_bytes + side_bytes - exported.weights_bytes) / 2 ** 20
    shutil.rmtree(directory, ignore_errors=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["resnet18", "bert"], choices=sorted(INPUTS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10, help="timed calls per block")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before the first library loads OpenMP
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    results = {}
    with tempfile.TemporaryDirectory(prefix="tensorkiln-deploy-") as scratch:
        for name in args.models:
            results[name] = measure(name, args.rounds, args.calls, Path(scratch), env)
    print(f"\nexported models, {args.threads} threads; latency: medians of {args.rounds} rounds in turns "
          f"(C process, Python call, load_compiled call), float32")
    header = (f"{'model':<9} {'C':>9} {'Python':>9} {'C/Py':>6} {'paired':>6} {'loaded':>9} {'create':>9} {'weights':>10} "
              f"{'library':>10} {'lib-wts':>8}  bit-identical")
    print(header)
    print("-" * len(header))
    for name, r in results.items():
        library = (r["library_bytes"] + r["weights_file_bytes"]) / 2 ** 20
        print(f"{name:<9} {r['c_latency_s'] * 1e3:>6.2f} ms {r['python_latency_s'] * 1e3:>6.2f} ms "
              f"{r['c_over_python']:>6.3f} {r['c_over_python_paired_median']:>6.3f} "
              f"{r['load_compiled_latency_s'] * 1e3:>6.2f} ms "
              f"{r['create_s'] * 1e3:>6.2f} ms {r['weights_bytes'] / 2 ** 20:>6.1f} MiB {library:>6.1f} MiB "
              f"{r['library_minus_weights_mib']:>+5.2f}M  C {'yes' if r['bit_identical_c'] else 'NO'}, "
              f"load_compiled {'yes' if r['bit_identical_load_compiled'] else 'NO'} "
              f"({r['weights_storage']} weights)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "rounds": args.rounds, "results": results}, f, indent=2)
    return 0 if all(r["bit_identical_c"] and r["bit_identical_load_compiled"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
