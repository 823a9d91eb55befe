"""Run every benchmark, one after another, and write their results into one JSON file (`make bench`).

    python benchmarks/run_all.py [--out bench-results.json] [--quick]

Each entry runs one command: the scripts in this folder and `tensorkiln bench`
for every model against the installed peers (PyTorch, torch.compile, ONNX
Runtime; `make bench` installs them through the project's `bench` extra).
Scripts with a --json option write their figures into the combined file;
for the others the file holds what they printed. Every figure in docs/ names
one of these commands (tensorkiln/tools/doc_figures.py checks that a figure names
a command; tests/tools/test_doc_figures.py that every script here is registered).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TENSORKILN = [sys.executable, "-m", "tensorkiln.tools.cli"]

# name -> (command, takes --json)
BENCHMARKS: dict[str, tuple[list[str], bool]] = {
    "compiled_vs_numpy": ([sys.executable, os.path.join(HERE, "compiled_vs_numpy.py")], True),
    "graph_optimizer": ([sys.executable, os.path.join(HERE, "graph_optimizer.py")], True),
    "training": ([sys.executable, os.path.join(HERE, "training.py")], False),
    "torch_training": ([sys.executable, os.path.join(HERE, "torch_training.py")], True),
    "kernels": ([sys.executable, os.path.join(HERE, "kernels.py")], True),
    "layout": ([sys.executable, os.path.join(HERE, "layout.py")], True),
    "conv_algorithms": ([sys.executable, os.path.join(HERE, "conv_algorithms.py")], True),
    "resnet_convs": ([sys.executable, os.path.join(HERE, "resnet_convs.py")], True),
    "accel": ([sys.executable, os.path.join(HERE, "accel.py")], False),
    "deploy": ([sys.executable, os.path.join(HERE, "deploy.py")], True),
    "call_overhead": ([sys.executable, os.path.join(HERE, "call_overhead.py")], False),
    "call_overhead_processes": ([sys.executable, os.path.join(HERE, "call_overhead.py"), "--separate-processes",
                                 "--calls", "20000"], False),
    "alternating": ([sys.executable, os.path.join(HERE, "alternating.py")], True),
    "idle_after_call": ([sys.executable, os.path.join(HERE, "idle_after_call.py")], True),
    "pipelines": ([sys.executable, os.path.join(HERE, "pipelines.py")], True),
    "distributed": ([sys.executable, os.path.join(HERE, "distributed.py"), "--plot",
                     os.path.join(os.path.dirname(HERE), "docs", "distributed_scaling.png")], True),
    "tp_decode": ([sys.executable, os.path.join(HERE, "tp_decode.py")], True),
    "matvec_prefetch": ([sys.executable, os.path.join(HERE, "matvec_prefetch.py"), "--ways", "none,described"], True),
    "gemm_transposed_pack": ([sys.executable, os.path.join(HERE, "gemm_transposed_pack.py")], True),
    "ptq_onnx_models": ([sys.executable, os.path.join(HERE, "ptq_onnx_models.py")], True),
    "pipeline_parallel": ([sys.executable, os.path.join(HERE, "pipeline_parallel.py")], True),
    # the first float32 sample of every OpInfo, tensorkiln and Inductor (`make opinfo` runs every sample)
    "opinfo": ([sys.executable, "-m", "tensorkiln.tools.opinfo_conformance", "--samples", "1", "--inductor",
                "--fallback"], True),
    "random_numbers": ([sys.executable, os.path.join(HERE, "random_numbers.py")], True),
    "int8_gemm": ([sys.executable, os.path.join(HERE, "int8_gemm.py")], True),
    "int8_models": ([sys.executable, os.path.join(HERE, "int8_models.py")], True),
    "int8_models_qoperator": ([sys.executable, os.path.join(HERE, "int8_models.py"), "resnet18", "mobilenetv2",
                               "--format", "QOperator"], True),
    "int8_dot_paths": ([sys.executable, os.path.join(HERE, "int8_dot_paths.py")], True),
    "int8_maddubsw": ([sys.executable, os.path.join(HERE, "int8_maddubsw.py")], True),
    "models_int8": (TENSORKILN + ["bench", "resnet18", "mobilenetv2", "bert", "mlp", "--precision", "int8",
                                  "--threads", "2"], True),
    "int8_convs": ([sys.executable, os.path.join(HERE, "int8_convs.py")], True),
    "int8_layer_profile": ([sys.executable, os.path.join(HERE, "int8_layer_profile.py")], True),
    "int8_ort_profile": ([sys.executable, os.path.join(HERE, "int8_ort_profile.py")], True),
    "models": (TENSORKILN + ["bench", "resnet18", "mobilenetv2", "bert", "gpt2", "mlp", "--threads", "2"], True),
    "resnet18_batch8": (TENSORKILN + ["bench", "resnet18", "--batch", "8", "--threads", "2"], True),
    "mlp_batch64": (TENSORKILN + ["bench", "mlp", "--batch", "64", "--threads", "2"], True),
    "md_lj": ([sys.executable, os.path.join(HERE, "md_lj.py")], True),
    "md_skin": ([sys.executable, os.path.join(HERE, "md_skin.py")], True),
    "md_mpi": ([sys.executable, os.path.join(HERE, "md_mpi.py")], True),
    "md_lists": ([sys.executable, os.path.join(HERE, "md_lists.py")], True),
    "models_bf16": (TENSORKILN + ["bench", "resnet18", "mobilenetv2", "bert", "gpt2", "--precision", "bf16",
                                  "--threads", "2"], True),
    "bf16_gemm": ([sys.executable, os.path.join(HERE, "bf16_gemm.py")], True),
    "bf16_convs": ([sys.executable, os.path.join(HERE, "bf16_convs.py")], True),
    "bf16_attention": ([sys.executable, os.path.join(HERE, "bf16_attention.py")], True),
    "bf16_accuracy": ([sys.executable, os.path.join(HERE, "bf16_accuracy.py")], True),
    # tensorkiln's bf16 kernels next to OpenVINO's layers (PERF_COUNT), grouped by class
    "bf16_profile": ([sys.executable, os.path.join(HERE, "bf16_profile.py")], True),
    # each float32 1x1 layer of MobileNetV2 against OpenVINO's and the FMA peak (one thread)
    "pointwise_layers": ([sys.executable, os.path.join(HERE, "pointwise_layers.py"), "--statistic", "min"], True),
    # whole models against OpenVINO's default, CPU time and wall time in turns (one thread)
    "bf16_models": ([sys.executable, os.path.join(HERE, "bf16_models.py")], True),
    # ResNet-18 on a CPU without AVX512-BF16: the widened AVX2 tiles, the widening loop IR, OpenVINO
    "bf16_widened": ([sys.executable, os.path.join(HERE, "bf16_widened.py"), "--threads", "1"], True),
    # bf16 CNNs on a CPU without AVX512-BF16 against tensorkiln's fp32 and OpenVINO, with the choices before
    "bf16_no_dot": ([sys.executable, os.path.join(HERE, "bf16_no_dot.py"), "--threads", "2"], True),
    # this tree against a checkout in turns; run here against itself, the noise floor of its ratios
    "against_checkout": ([sys.executable, os.path.join(HERE, "against_checkout.py"), os.path.dirname(HERE),
                          "mobilenetv2", "--pairs", "4"], True),
    "kernel_profiles": ([sys.executable, os.path.join(HERE, "kernel_profiles.py")], True),
    "onnx_lstm": ([sys.executable, os.path.join(HERE, "onnx_lstm.py")], True),
    "compile_time": ([sys.executable, os.path.join(HERE, "compile_time.py")], True),
    "tuning": ([sys.executable, os.path.join(HERE, "tuning.py")], True),
    "tuning_sketch": ([sys.executable, os.path.join(HERE, "tuning_sketch.py")], True),
    # ResNet-18 and BERT-base tuned (records checked inside the model), all builds timed in turns
    "tuning_models": ([sys.executable, os.path.join(HERE, "tuning_models.py")], True),
    # TVM MetaSchedule at the same trial count (skips, saying why, without apache-tvm: pip install .[tvm])
    "tuning_tvm": ([sys.executable, os.path.join(HERE, "tuning_tvm.py")], True),
    "onnx_lstm_scan": ([sys.executable, os.path.join(HERE, "onnx_lstm_scan.py")], True),
    "dynamic_shapes": ([sys.executable, os.path.join(HERE, "dynamic_shapes.py")], True),
    "dynamic_bert": ([sys.executable, os.path.join(HERE, "dynamic_bert.py")], True),
    "dynamic_gpt2": ([sys.executable, os.path.join(HERE, "dynamic_gpt2.py")], True),
    "dynamic_lstm": ([sys.executable, os.path.join(HERE, "dynamic_lstm.py")], True),
    "dynamic_resnet": ([sys.executable, os.path.join(HERE, "dynamic_resnet.py")], True),
    # every ONNX backend conformance case through the generated C and through ONNX Runtime
    "onnx_conformance_counts": ([sys.executable, os.path.join(HERE, "onnx_conformance_counts.py")], True),
    "ptq_accuracy": ([sys.executable, os.path.join(HERE, "ptq_accuracy.py")], True),
    "ptq_hf_models": ([sys.executable, os.path.join(HERE, "ptq_hf_models.py")], True),
    "matmul_nbits": ([sys.executable, os.path.join(HERE, "matmul_nbits.py"), "--layers", "12"], True),
    # GPT-2's decode step with int8 / int4 / bf16 weights, ONNX Runtime dynamic int8, OpenVINO; each prefill
    "weight_only": ([sys.executable, os.path.join(HERE, "weight_only.py"), "--prefill", "--profile"], True),
    # Hugging Face architectures through both torch paths; BERT, Llama, ViT against eager and Inductor
    "hf_models": ([sys.executable, os.path.join(HERE, "hf_models.py")], True),
}


def run(name: str, command: list[str], takes_json: bool, scratch: str) -> dict:
    """Run one benchmark; its figures (or its printed output) and how it went."""
    path = os.path.join(scratch, f"{name}.json")
    argv = command + (["--json", path] if takes_json else [])
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr[-4000:] if done.returncode else "")
    entry = {"command": " ".join(argv[1:] if argv[0] == sys.executable else argv), "exit_status": done.returncode,
             "seconds": time.perf_counter() - start}
    if takes_json and os.path.exists(path):
        with open(path) as f:
            entry["results"] = json.load(f)
    else:
        entry["output"] = done.stdout
    return entry


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench-results.json", help="the combined JSON file")
    parser.add_argument("--only", nargs="*", default=None, help="run only these entries: " + ", ".join(BENCHMARKS))
    args = parser.parse_args()
    chosen = args.only or list(BENCHMARKS)
    unknown = [name for name in chosen if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmarks {unknown}; known: {', '.join(BENCHMARKS)}")
    combined, status = {}, 0
    with tempfile.TemporaryDirectory() as scratch:
        for name in chosen:
            print(f"\n=== {name}", flush=True)
            combined[name] = run(name, *BENCHMARKS[name], scratch)
            status |= combined[name]["exit_status"] != 0
    with open(args.out, "w") as f:
        json.dump(combined, f, indent=2)
    print(f"\nwrote {args.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
