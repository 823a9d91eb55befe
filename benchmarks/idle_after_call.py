"""How long each engine's worker threads stay busy after a call, and what that costs the next engine's call.

    python benchmarks/idle_after_call.py [--threads 2] [--rounds 9] [--calls 10] [--json out.json]

Each installed engine (numpy's OpenBLAS, PyTorch, ONNX Runtime, OpenVINO, tensorkiln) computes the
same float32 product, 128 x 768 by a constant 768 x 3072 (BERT-base's FFN up projection), with
`--threads` threads. After its last call this process's CPU time is polled in IDLE_POLL_SECONDS windows
(tools/timing.py): "busy ms" is how long the windows stay above IDLE_CPU_SHARE of a core, the median
over `--rounds`. Then `--calls` of tensorkiln's product (about 50 ms of calls) are timed right after
each engine's call and after `wait_until_idle`, in turns (medians over `--rounds` of the time per
call): "tk right after" / "tk after the wait" is what the engine's spinning threads cost the calls
that follow it on this machine's cores, which is why the benchmarks' timers (`interleaved_medians`,
`alternating_blocks`) wait for an idle process between blocks.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from common import machine_summary, print_table, write_json  # noqa: E402
from tensorkiln.tools.timing import IDLE_CPU_SHARE, busy_share, wait_until_idle  # noqa: E402

M, K, N = 128, 768, 3072
WATCH_SECONDS = 0.5  # how long the CPU time is watched after a call


def matmul_file(folder: str, weight: np.ndarray) -> str:
    """A one-node ONNX MatMul by the constant `weight`."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "matmul",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [M, N])],
                              [numpy_helper.from_array(weight, "w")])
    path = os.path.join(folder, "matmul.onnx")
    onnx.save(helper.make_model(graph), path)
    return path


def engines(path: str, x: np.ndarray, weight: np.ndarray, threads: int) -> dict:
    """name -> a call of the product, for every engine installed; each checked against numpy's."""
    import tensorkiln as tk
    runs = {"numpy (OpenBLAS)": lambda: x @ weight}
    try:
        import torch
        torch.set_num_threads(threads)
        tx, tw = torch.from_numpy(x), torch.from_numpy(weight)
        runs["torch"] = lambda: (tx @ tw).numpy()
    except ImportError:
        pass
    try:
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        runs["onnxruntime"] = lambda: session.run(None, {"x": x})[0]
    except ImportError:
        pass
    try:
        import openvino as ov
        request = ov.Core().compile_model(path, "CPU", {"INFERENCE_NUM_THREADS": threads,
                                                        "INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
        runs["openvino"] = lambda: next(iter(request.infer({"x": x}).values()))
    except ImportError:
        pass
    model = tk.onnx.load(path)
    runs["tensorkiln"] = lambda: model(x=x)[0]
    want = x.astype(np.float64) @ weight
    for name, run in runs.items():
        got = np.asarray(run(), np.float64)
        if np.abs(got - want).max() > 1e-3 * np.abs(want).max():
            raise SystemExit(f"{name}: the product differs from numpy's")
    return runs


def busy_seconds(run) -> float:
    """Seconds after `run()` returns until the last poll that found the process busy (at most WATCH_SECONDS)."""
    run()
    start = time.perf_counter()
    last_busy = 0.0
    while time.perf_counter() - start < WATCH_SECONDS:
        if busy_share() >= IDLE_CPU_SHARE:
            last_busy = time.perf_counter() - start
    return last_busy


def timed(run, calls: int) -> float:
    """Seconds per call of `calls` calls of `run`."""
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=10, help="tensorkiln calls timed after each engine's call")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K), dtype=np.float32)
    weight = rng.standard_normal((K, N), dtype=np.float32)
    print(f"{machine_summary()}; float32 {M} x {K} x {N}, {args.threads} threads, {args.rounds} rounds of {args.calls} "
          "calls\n")
    with tempfile.TemporaryDirectory() as folder:
        runs = engines(matmul_file(folder, weight), x, weight, args.threads)
        ours = runs["tensorkiln"]
        results, rows = {}, []
        for name, run in runs.items():
            busy = [busy_seconds(run) for _ in range(args.rounds)]
            after, waited = [], []
            for _ in range(args.rounds):  # in turns: right after the engine's call, then after the wait
                run()
                after.append(timed(ours, args.calls))
                run()
                wait_until_idle()
                waited.append(timed(ours, args.calls))
            results[name] = {"busy_s": float(np.median(busy)), "tk_right_after_s": float(np.median(after)),
                             "tk_after_wait_s": float(np.median(waited))}
            r = results[name]
            rows.append([name, f"{r['busy_s'] * 1e3:.0f}", f"{r['tk_right_after_s'] * 1e3:.2f}",
                         f"{r['tk_after_wait_s'] * 1e3:.2f}", f"{r['tk_right_after_s'] / r['tk_after_wait_s']:.2f}x"])
    print_table(["engine", "busy ms after its call", "tk ms right after", "tk ms after the wait",
                 "right after / after the wait"], rows)
    if args.json:
        write_json(args.json, {"machine": machine_summary(), "threads": args.threads, "engines": results})


if __name__ == "__main__":
    main()
