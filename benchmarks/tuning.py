"""The auto-tuner on SGEMM and on shapes of real models that no test tunes: tuned vs default vs a peer, one run.

    python benchmarks/tuning.py [--trials 64] [--seconds 60] [--strategy evolutionary] [--json out.json]
    python benchmarks/tuning.py --hidden 3 [--seed 0]   # 3 real models' shapes drawn at random from HIDDEN

For each case the tuner (tensorkiln.tune.tune_workload) searches the
template's space (the GEMM's, or a convolution layer's: algorithm, NCHWc
tile, task order) with at most --trials candidates and --seconds of tuning,
every candidate measured in a worker subprocess against the default in
turns, into a fresh records file. Then, in this process and in turns
(tensorkiln.tools.timing.alternating_blocks: --pairs rounds, medians), three functions
compute the same float32 result: tensorkiln with the analytic configuration
("default"), tensorkiln with the tuned one ("tuned"), and the peer: numpy's
matmul (OpenBLAS, all threads) for a GEMM, ONNX Runtime's Conv
(one Conv node in a session with 2 threads) for a layer. Figures are GFLOP/s (2 flops per
multiply-add) and ratios, plus the fraction of the machine's FMA peak
measured by benchmarks/kernels.py's probe. A case whose search found nothing
faster keeps the default (tuned = default: the default is measured in the
same run and wins ties).

The three model shapes (MobileNetV2's 1x1 expansion at 14x14, GPT-2's MLP
projection, ResNet-18's stage-3 3x3 layer) appear in no test; the median
improvement over the default is printed for them. TVM MetaSchedule at the
same trial count: benchmarks/tuning_tvm.py.

`--hidden N --seed S` instead draws N shapes (seeded) from HIDDEN, a list of
GEMM and convolution layers of real models (BERT-base's FFN and projections,
ResNet-18's 3x3 layers at 14x14 and 7x7, MobileNetV2's 1x1 layers): the
tuner is handed only each drawn shape's workload key, never the list, and
each is tuned with at most --trials (64) candidates. The table then has the
untuned/tuned/peer figures of each, and the median improvement over the
default is printed with a check that no tuned kernel is slower than its
default beyond the noise of this run (the middle half of the per-round
tuned/default ratios above 1); one that is has its record withdrawn, as
the in-model check does (tensorkiln/tune/model_check.py).
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from tensorkiln.kernels.templates.conv_choice import ConvShape, conv_workload  # noqa: E402
from tensorkiln.kernels.templates.gemm import gemm_workload  # noqa: E402
from tensorkiln.kernels.tuned import parse_workload, target_key  # noqa: E402
from tensorkiln.runtime.tuning_records import TuningRecord, append_record  # noqa: E402
from tensorkiln.tools.timing import alternating_blocks  # noqa: E402
from tensorkiln.tune import tune_workload  # noqa: E402
from tensorkiln.tune.workloads import benchmark_of  # noqa: E402

from common import machine_summary, print_table, write_json  # noqa: E402

# name, workload key, whether it is one of the model shapes no test tunes
CASES = [
    ("SGEMM 1024", gemm_workload(1024, 1024, 1024, "float32"), False),
    ("SGEMM 2048", gemm_workload(2048, 2048, 2048, "float32"), False),
    ("MobileNetV2 1x1 expand 64->384 at 14x14 (weights)",
     conv_workload(ConvShape(1, 64, 14, 14, 384, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), True)), True),
    ("GPT-2 MLP c_proj, 64x3072 @ 3072x768 (weights)", gemm_workload(64, 768, 3072, "float32", True), True),
    ("ResNet-18 stage 3, 3x3 256->256 at 14x14 (weights)",
     conv_workload(ConvShape(1, 256, 14, 14, 256, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), True)), True),
]


def _conv(c: int, hw: int, k: int, r: int, stride: int = 1) -> str:
    pad = r // 2
    return conv_workload(ConvShape(1, c, hw, hw, k, r, r, (stride, stride), (pad,) * 4, (1, 1), True))


# GEMM and convolution layers of real models (batch 1, weights constant), for --hidden: drawn at random
HIDDEN = [
    ("BERT-base FFN up, 128x768 @ 768x3072 (weights)", gemm_workload(128, 3072, 768, "float32", True)),
    ("BERT-base FFN down, 128x3072 @ 3072x768 (weights)", gemm_workload(128, 768, 3072, "float32", True)),
    ("BERT-base Q/K/V/output projection, 128x768 @ 768x768 (weights)",
     gemm_workload(128, 768, 768, "float32", True)),
    ("ResNet-18 stage 3, 3x3 256->256 at 14x14 (weights)", _conv(256, 14, 256, 3)),
    ("ResNet-18 stage 4, 3x3 512->512 at 7x7 (weights)", _conv(512, 7, 512, 3)),
    ("ResNet-18 stage 3 entry, 3x3 128->256 stride 2, 28x28 to 14x14 (weights)", _conv(128, 28, 256, 3, 2)),
    ("ResNet-18 stage 4 entry, 3x3 256->512 stride 2, 14x14 to 7x7 (weights)", _conv(256, 14, 512, 3, 2)),
    ("MobileNetV2 1x1 expand 64->384 at 14x14 (weights)", _conv(64, 14, 384, 1)),
    ("MobileNetV2 1x1 project 384->96 at 14x14 (weights)", _conv(384, 14, 96, 1)),
    ("MobileNetV2 1x1 expand 96->576 at 14x14 (weights)", _conv(96, 14, 576, 1)),
    ("MobileNetV2 1x1 expand 160->960 at 7x7 (weights)", _conv(160, 7, 960, 1)),
    ("MobileNetV2 1x1 project 960->320 at 7x7 (weights)", _conv(960, 7, 320, 1)),
    ("MobileNetV2 1x1 last layer 320->1280 at 7x7 (weights)", _conv(320, 7, 1280, 1)),
]


def hidden_cases(count: int, seed: int) -> list[tuple[str, str, bool]]:
    """`count` cases of HIDDEN drawn at random (seeded); only their keys reach the tuner."""
    return [(name, key, True) for name, key in random.Random(seed).sample(HIDDEN, count)]


def flops(workload: str) -> float:
    template, facts = parse_workload(workload)
    if template == "conv":
        from tensorkiln.kernels.templates.conv_choice import shape_of_workload
        shape = shape_of_workload(workload)
        oh, ow = shape.out_hw
        return 2.0 * shape.n * shape.k * oh * ow * shape.c * shape.kh * shape.kw
    return 2.0 * int(facts["m"]) * int(facts["n"]) * int(facts["k"])


def ort_conv(workload: str, x: np.ndarray):
    """("ONNX Runtime (2 threads)", a callable running the layer as one ONNX Conv in an ORT session)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from tensorkiln.kernels.templates.conv_choice import shape_of_workload
    shape = shape_of_workload(workload)
    w = np.random.default_rng(1).uniform(-1, 1, (shape.k, shape.c, shape.kh, shape.kw)).astype(np.float32)
    oh, ow = shape.out_hw
    pt, pb, pl, pr = shape.padding
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=list(shape.stride), pads=[pt, pl, pb, pr],
                            dilations=list(shape.dilation))
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [shape.n, shape.k, oh, ow])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return "ONNX Runtime (2 threads)", lambda: session.run(None, {"x": x})


def peer(workload: str, inputs: list[np.ndarray]):
    """(name, a callable computing the same result at the peer's best settings)."""
    template, _ = parse_workload(workload)
    if template == "conv":
        return ort_conv(workload, inputs[0])
    facts = parse_workload(workload)[1]
    a = inputs[0]
    b = inputs[1] if len(inputs) == 2 else \
        np.random.default_rng(0).uniform(-1, 1, (int(facts["k"]), int(facts["n"]))).astype(np.float32)
    return "numpy", lambda: a @ b


def run_case(name: str, key: str, hidden: bool, args) -> dict:
    start = time.monotonic()
    result = tune_workload(key, trials=args.trials, seconds=args.seconds, strategy=args.strategy)
    tuning_seconds = time.monotonic() - start
    bench = benchmark_of(key)
    default = bench.build(None)
    tuned = bench.build(result.best_config if result.tuned else None)
    for fn in (default, tuned):
        assert np.abs(fn(*bench.inputs).numpy() - bench.reference).max() <= bench.tolerance, name
    peer_name, peer_fn = peer(key, bench.inputs)
    runs = {"default": lambda: default(*bench.inputs), "tuned": lambda: tuned(*bench.inputs), "peer": peer_fn}
    rounds = alternating_blocks(runs, pairs=args.pairs, min_block_seconds=0.2, pause_seconds=0.05)
    medians = {who: statistics.median(times) for who, times in rounds.items()}
    per_round = sorted(t / d for t, d in zip(rounds["tuned"], rounds["default"]))
    gflops = {who: flops(key) / s / 1e9 for who, s in medians.items()}
    return {"case": name, "workload": key, "hidden": hidden, "peer": peer_name, "trials": len(result.trials),
            "tuning_seconds": tuning_seconds, "tuned": result.tuned, "best_config": result.best_config,
            "default_config": result.default_config, "failed_trials": len(result.failures), "gflops": gflops,
            "cost_model": result.cost_model, "search_ratio": result.best_seconds / result.default_seconds,
            "tuned_over_default_rounds": per_round,
            "convergence": [best / result.default_seconds for _, best in result.convergence()]}


def never_slower_verdict(r: dict) -> str:
    """Whether the tuned kernel was slower than its default in the final turns beyond their noise: the
    per-round tuned/default ratios' middle half must reach 1.0 (a kept default compares a build with itself)."""
    ratios = r["tuned_over_default_rounds"]
    low, high = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
    median = statistics.median(ratios)
    where = f"tuned/default time per round: median {median:.3f}, middle half {low:.3f}-{high:.3f}"
    if not r["tuned"]:
        return f"default kept (the same kernel twice; {where})"
    if low > 1.0:
        return f"slower than the default beyond this run's noise: its record withdrawn ({where})"
    return f"not slower than the default ({where})"


def withdraw_if_slower(r: dict) -> None:
    """Append the record that withdraws a tuned configuration the final turns found slower beyond their noise
    (the middle half of the per-round ratios above 1): the default wins, as in the in-model check."""
    ratios = r["tuned_over_default_rounds"]
    if r["tuned"] and ratios[len(ratios) // 4] > 1.0:
        seconds = {who: flops(r["workload"]) / g / 1e9 for who, g in r["gflops"].items()}
        append_record(TuningRecord(r["workload"], target_key(), dict(r["best_config"]),
                                   max(seconds["tuned"], seconds["default"]), seconds["default"], 0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--strategy", default="evolutionary")
    parser.add_argument("--cases", nargs="*", type=int, help="indices into CASES (default: all)")
    parser.add_argument("--hidden", type=int, help="tune this many shapes drawn at random from HIDDEN instead")
    parser.add_argument("--seed", type=int, default=0, help="the draw of --hidden")
    parser.add_argument("--pairs", type=int, default=11, help="rounds of turns of the final timing")
    parser.add_argument("--json")
    args = parser.parse_args()
    from kernels import measure_limits
    peak = measure_limits(5)["peak_gflops"]
    os.environ["TENSORKILN_TUNING_RECORDS"] = os.path.join(tempfile.mkdtemp(prefix="tk-tuning-"), "records.jsonl")
    print(f"auto-tuner, {machine_summary()}; FMA peak {peak:.0f} GFLOP/s; float32; at most {args.trials} trials and "
          f"{args.seconds:.0f} s of tuning per case ({args.strategy}); GFLOP/s are medians of turns")
    rows, results = [], []
    cases = hidden_cases(args.hidden, args.seed) if args.hidden else \
        [case for index, case in enumerate(CASES) if not args.cases or index in args.cases]
    if args.hidden:
        print(f"{args.hidden} shapes drawn from {len(HIDDEN)} real-model layers with seed {args.seed}")
    for case in cases:
        r = run_case(*case, args)
        results.append(r)
        g = r["gflops"]
        rows.append([r["case"], f"{g['default']:.0f}", f"{g['tuned']:.0f}", f"{r['peer']}: {g['peer']:.0f}",
                     f"{g['tuned'] / g['default']:.2f}", f"{g['tuned'] / g['peer']:.2f}",
                     f"{g['default'] / g['peer']:.2f}", f"{g['tuned'] / peak:.0%}",
                     f"{1 / r['search_ratio']:.2f}", f"{r['trials']} / {r['tuning_seconds']:.0f} s"])
        print(f"  {r['case']}: best {r['best_config']} (default {r['default_config']}), "
              f"{r['failed_trials']} failed, cost model: {r['cost_model']}", flush=True)
    print_table(["case", "default", "tuned", "peer", "tuned/default", "tuned/peer", "default/peer", "of peak",
                 "search speedup", "trials / time"], rows)
    print("search speedup: default time / best time as the tuner confirmed it (worker, in turns); 1.00: the "
          "default was kept")
    hidden = [r["gflops"]["tuned"] / r["gflops"]["default"] for r in results if r["hidden"]]
    if hidden:
        print(f"model shapes no test tunes: median improvement over the default {statistics.median(hidden):.2f}x "
              f"(final turns), {statistics.median(1 / r['search_ratio'] for r in results if r['hidden']):.2f}x "
              f"(the tuner's confirmed measurement)")
    for r in results:
        withdraw_if_slower(r)
        print(f"  {r['case']}: {never_slower_verdict(r)}")
    if args.json:
        write_json(args.json, {"peak_gflops": peak, "cases": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
