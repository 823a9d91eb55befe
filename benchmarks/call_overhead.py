"""Per-call overhead of compiled calls, each against its peer in the same run, timed in turns.

    OMP_WAIT_POLICY=passive python benchmarks/call_overhead.py [--rounds 15] [--calls 2000] [--threads N]

Rows:
- the tiny graph `tk.jit(lambda x: x * 2 + 1)` on a float32[16] numpy array vs one numpy
  ufunc (`np.add(x, 1.0)`) and numpy's own `x * 2 + 1` (two ufuncs);
- the MLP 784-512-512-10 (tensorkiln.models.MLP) at batch 1, `tk.jit(model)` on a numpy
  array, called under `tk.no_grad()` as an inference engine runs it (the weights are baked in
  as constants and packed into panels at compile time) and, for comparison, with gradients
  enabled (the weights are graph inputs, read as they are), vs ONNX Runtime (CPU provider) on the same weights (an ONNX graph of Gemm and Relu
  nodes) run with `run_with_iobinding`, its input and output bound once.

Every round times a block of `--calls` calls of each function in turn, so a slow phase of
a shared machine hits them all alike; a row gives the median per-call time over the rounds
and the range (fastest to slowest round). Results are discarded as they come, so a
compiled call recycles its output array.

`--separate-processes`: the batch-1 MLP only, tensorkiln (under tk.no_grad()) and ONNX
Runtime (IOBinding) each in its own worker process with its own thread pool, at its
default settings (libgomp's and ONNX Runtime's spin-waits on). In one process the two
pools spin against each other for the same cores; here the parent asks each worker in
turn for a block of calls (order reversed every round, a pause before each block so the
idle pool has gone to sleep) and prints medians and the per-pair ratio.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorkiln as tk  # noqa: E402
from common import machine_summary, print_table  # noqa: E402
from tensorkiln.models import MLP  # noqa: E402


def per_call_rounds(runs: dict[str, Callable[[], object]], rounds: int, calls: int) -> dict[str, list[float]]:
    """Seconds per call of each function in every round; a round times `calls` calls of each in turn."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values():  # warm up: compile, bind, allocate
        for _ in range(10):
            fn()
    for _ in range(rounds):
        for name, fn in runs.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - start) / calls)
    return times


def summary(seconds: list[float], unit: float, suffix: str) -> tuple[str, str]:
    """(median, fastest-slowest range) of per-call times, in `unit`."""
    values = np.asarray(seconds) / unit
    return f"{np.median(values):.2f} {suffix}", f"{values.min():.2f}-{values.max():.2f}"


def mlp_onnx(model: MLP, path: str) -> None:
    """Write `model`'s weights as an ONNX graph of Gemm (transB) and Relu nodes."""
    import onnx  # optional dependency: only the ONNX Runtime peer needs it
    from onnx import TensorProto, helper, numpy_helper
    linears = [m for m in model.layers if hasattr(m, "weight")]
    nodes, initializers, name = [], [], "x"
    for k, layer in enumerate(linears):
        w, b = f"w{k}", f"b{k}"
        initializers += [numpy_helper.from_array(layer.weight.numpy(), w), numpy_helper.from_array(layer.bias.numpy(), b)]
        out = "y" if k == len(linears) - 1 else f"h{k}"
        nodes.append(helper.make_node("Gemm", [name, w, b], [out + ("" if out == "y" else "_pre")], transB=1))
        if out != "y":
            nodes.append(helper.make_node("Relu", [out + "_pre"], [out]))
        name = out
    sizes = (linears[0].in_features, linears[-1].out_features)
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, sizes[0]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, sizes[1]])], initializers)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def ort_iobinding(model: MLP, x: np.ndarray, threads: int) -> tuple[Callable[[], object], np.ndarray, str]:
    """(a call of ONNX Runtime with input and output bound once, its output array, its settings)."""
    import tempfile
    import onnxruntime
    path = os.path.join(tempfile.mkdtemp(prefix="tensorkiln-overhead-"), "mlp.onnx")
    mlp_onnx(model, path)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    y = np.empty((1, 10), np.float32)
    binding = session.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("y", "cpu", 0, np.float32, list(y.shape), y.ctypes.data)
    settings = f"onnxruntime {onnxruntime.__version__}, CPU, {threads} intra-op threads, IOBinding"
    return (lambda: session.run_with_iobinding(binding)), y, settings


def mlp_worker(framework: str, threads: int, calls: int) -> None:
    """Serve blocks of batch-1 MLP calls: print "ready", then one block's seconds per call for every line read."""
    model = MLP().eval()
    batch = np.random.default_rng(0).standard_normal((1, 784), dtype=np.float32)
    if framework == "tensorkiln":
        compiled = tk.jit(model)

        def run():
            with tk.no_grad():
                return compiled(batch)
        expected = run().numpy()
    else:
        run, y, _ = ort_iobinding(model, batch, threads)
        run()
        expected = y.copy()
    for _ in range(50):
        run()
    print("ready", float(np.abs(expected).sum()), flush=True)
    for _ in sys.stdin:
        start = time.perf_counter()
        for _ in range(calls):
            run()
        print((time.perf_counter() - start) / calls, flush=True)


def separate_processes(rounds: int, calls: int, threads: int) -> None:
    """The MLP in two worker processes, blocks in turns; prints medians and per-pair ratios."""
    import subprocess
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.pop("OMP_WAIT_POLICY", None)  # each framework at its default (spinning) wait policy
    workers = {}
    for framework in ("tensorkiln", "onnxruntime"):
        workers[framework] = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", framework, "--threads", str(threads),
             "--calls", str(calls)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    checksums = {name: float(w.stdout.readline().split()[1]) for name, w in workers.items()}
    if not np.isclose(checksums["tensorkiln"], checksums["onnxruntime"], rtol=1e-4):
        raise SystemExit(f"outputs differ: {checksums}")
    times: dict[str, list[float]] = {name: [] for name in workers}
    order = list(workers)
    for _ in range(rounds):
        for name in order:
            time.sleep(0.2)  # the other worker's pool stops spinning and sleeps
            workers[name].stdin.write("go\n")
            workers[name].stdin.flush()
            times[name].append(float(workers[name].stdout.readline()))
        order.reverse()
    for w in workers.values():
        w.stdin.close()
        w.wait()
    ratios = [ort / ours for ours, ort in zip(times["tensorkiln"], times["onnxruntime"])]
    print(f"MLP 784-512-512-10, batch 1, float32, {threads} threads, each framework in its own process; "
          f"{rounds} rounds of {calls} calls, in turns")
    rows = [["tensorkiln tk.jit(MLP()) under tk.no_grad(), libgomp default wait policy",
             *summary(times["tensorkiln"], 1e-6, "us")],
            [f"onnxruntime CPU, {threads} intra-op threads, IOBinding, default spinning",
             *summary(times["onnxruntime"], 1e-6, "us")]]
    print_table(["call", "median per call", "range (us)"], rows)
    print(f"onnxruntime / tensorkiln per pair of blocks: median {np.median(ratios):.2f}x, "
          f"range {min(ratios):.2f}-{max(ratios):.2f}x (above 1: tensorkiln faster)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="rounds of timing every function in turn")
    parser.add_argument("--calls", type=int, default=2000, help="calls per function per round (tiny graph)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="ONNX Runtime intra-op threads")
    parser.add_argument("--separate-processes", action="store_true",
                        help="only the batch-1 MLP, each framework in its own process")
    parser.add_argument("--worker", choices=("tensorkiln", "onnxruntime"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return mlp_worker(args.worker, args.threads, args.calls)
    if args.separate_processes:
        return separate_processes(args.rounds, max(args.calls // 4, 50), args.threads)
    print(f"machine: {machine_summary()}")
    print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')} "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}; "
          f"{args.rounds} rounds, medians per call, range = fastest-slowest round\n")

    x = np.arange(16, dtype=np.float32)
    tiny = tk.jit(lambda v: v * 2 + 1)
    np.testing.assert_allclose(tiny(x).numpy(), x * 2 + 1)
    small = per_call_rounds({"tk.jit(lambda x: x * 2 + 1)(x)": lambda: tiny(x),
                             "np.add(x, 1.0)": lambda: np.add(x, 1.0),
                             "x * 2 + 1 (numpy)": lambda: x * 2 + 1}, args.rounds, args.calls)
    rows = [[f"{name}, float32[16]", *summary(t, 1e-6, "us")] for name, t in small.items()]

    model = MLP().eval()
    batch = np.random.default_rng(0).standard_normal((1, 784), dtype=np.float32)
    compiled, trainable = tk.jit(model), tk.jit(model)

    def inference():
        with tk.no_grad():  # as ONNX Runtime and torch.no_grad(): weights are constants, packed at compile time
            return compiled(batch)

    runs = {"tk.jit(MLP())(x) under tk.no_grad(), batch 1": inference,
            "tk.jit(MLP())(x), gradients enabled (weights are inputs)": lambda: trainable(batch)}
    try:
        run_ort, y, settings = ort_iobinding(model, batch, args.threads)
        run_ort()
        np.testing.assert_allclose(y, inference().numpy(), rtol=1e-4, atol=1e-4)
        runs[f"MLP 784-512-512-10, batch 1: {settings}"] = run_ort
    except ImportError:
        print("onnx / onnxruntime not installed: the MLP runs without its peer")
    mlp_times = per_call_rounds(runs, args.rounds, max(args.calls // 20, 20))
    rows += [[name, *summary(t, 1e-6, "us")] for name, t in mlp_times.items()]
    print_table(["call", "median per call", "range (us)"], rows)


if __name__ == "__main__":
    main()
