"""GPT-2 small's decode step with weight-only quantization: tensorkiln fp32, bf16, int8 and int4
weights, against ONNX Runtime's dynamic int8 and OpenVINO's default, timed in turns; and the
accuracy of the quantized logits over a fixed prompt and 32+ decoded tokens.

    python benchmarks/weight_only.py [--threads 2] [--steps 32] [--rounds 8] [--prefill] [--profile]
                                     [--json out/weight_only.json]

The model is tools/torch_reference.GPT2 at GPT-2 small's size with seeded random weights (no
downloads), loaded into tensorkiln's GPT-2 (tensorkiln.models) as `tensorkiln bench gpt2` does. A
prompt of 128 tokens is prefilled, then `--steps` tokens are decoded greedily by tensorkiln fp32;
every other precision decodes the same tokens (teacher forcing), and each step's logits are compared
with fp32's: the largest |logit - fp32 logit| over the largest |fp32 logit| (per step, the worst step
reported) and the share of steps whose top-1 token is fp32's.

Timing: one decode step at position 128 + steps - 1 of a cache preallocated for the prompt and the
steps, every framework timed in blocks in turns (tools/timing.interleaved_medians), medians. Peers:
ONNX Runtime on the decode step exported by torch.onnx.export (past keys and values as inputs,
concatenated: the reference's own decode) quantized by `onnxruntime.quantization.quantize_dynamic`
(int8 weights, int8 activations quantized per call), with IOBinding; ONNX Runtime fp32 on the same
file unquantized; OpenVINO with its defaults (bf16 on a CPU with AVX512-BF16). Weight bytes per step:
every matmul weight (the 48 linear layers and the 768 x 50257 head) in the precision's storage,
scales included; GB/s is those bytes over the step's median, beside the machine's read bandwidth
measured in the same run (a tensorkiln sum over 512 MiB). `--prefill` also times each tensorkiln
precision's prefill of the prompt in turns (128 rows per weight: the weight-only helpers' many-row
tiles, not the float GEMM). `--profile` prints each precision's decode step by kernel kind
(`f.profile()`: matmuls, attention, rows ...).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import machine_summary, print_table, write_json  # noqa: E402

PROMPT = 128
SCHEMES = ("fp32", "bf16", "int8w", "int4w", "int4w-g128")  # tensorkiln precisions
GOALS = {"int8w": 1.8, "int4w": 3.0}  # decode speed-up over tensorkiln fp32 asked of each


def weight_bytes(config, precision: str) -> int:
    """Bytes of every matmul weight of one decode step, stored at `precision` (scales included)."""
    from tensorkiln.passes.weight_only import weight_only_spec
    e = config.n_embd
    shapes = [(e, 3 * e), (e, e), (e, 4 * e), (4 * e, e)] * config.n_layer + [(e, config.vocab_size)]
    spec = weight_only_spec(precision)
    total = 0
    for k, n in shapes:
        if spec is None:
            total += k * n * (2 if precision in ("bf16", "openvino") else 1 if precision == "ort-int8" else 4)
        else:
            group = min(spec.group or k, k)
            total += k * n * spec.bits // 8 + -(-k // group) * n * 4
    return total


def read_bandwidth() -> float:
    """GB/s of a tensorkiln sum over 512 MiB of float32 (all threads): the machine's read bandwidth now."""
    import tensorkiln as tk
    from tensorkiln.tools.timing import median_seconds
    data = np.ones(128 * 2 ** 20, dtype=np.float32)
    total = tk.jit(lambda x: x.sum())
    total(data)
    return data.nbytes / median_seconds(lambda: total(data), repeat=9) / 1e9


def build(threads: int | None):
    import torch
    from tensorkiln.models import GPT2Config, GPT2LMHeadModel
    from tensorkiln.tools import torch_reference as ref
    config = GPT2Config()
    torch.manual_seed(0)
    reference = ref.GPT2(config.vocab_size, config.n_positions, config.n_embd, config.n_layer, config.n_head).eval()
    ours = GPT2LMHeadModel(config)
    ours.load_hf_state_dict({k: v.detach().numpy() for k, v in reference.state_dict().items()})
    ours.eval()
    return config, reference, ours


def compile_scheme(ours, precision: str, ids: np.ndarray, length: int):
    """(prefill, step, caches after the prompt, compile seconds) of tensorkiln at `precision`."""
    import tensorkiln as tk
    from tensorkiln.frontend.autodiff import no_grad
    with no_grad():
        start = time.perf_counter()
        prefill = tk.jit(ours.prefill, precision=precision)
        step = tk.jit(ours.decode_step, donate_argnums=2, precision=precision)
        logits, caches = prefill(tk.tensor(ids), length)
        step(tk.tensor(ids[:, :1]), tk.tensor(np.int64(PROMPT)), caches)  # compiles; rewritten below
        seconds = time.perf_counter() - start
    return prefill, step, seconds


def decode_run(prefill, step, ids: np.ndarray, tokens: list[int], length: int) -> list[np.ndarray]:
    """The last-position logits of the prompt and of each forced token."""
    import tensorkiln as tk
    logits, caches = prefill(tk.tensor(ids), length)
    out = [logits.numpy()[0, -1].copy()]
    for i, token in enumerate(tokens[:-1]):
        logits, caches = step(tk.tensor(np.array([[token]], dtype=np.int64)), tk.tensor(np.int64(PROMPT + i)), caches)
        out.append(logits.numpy()[0, -1].copy())
    return out


def ort_dynamic_int8(path: str) -> str:
    """`path` quantized by ONNX Runtime's quantize_dynamic (int8 weights)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    quantized = path.replace(".onnx", "_dynamic_int8.onnx")
    quantize_dynamic(path, quantized, weight_type=QuantType.QInt8)
    return quantized


def time_prefills(compiled: dict, schemes: list[str], ids: np.ndarray, length: int, args) -> dict[str, float]:
    """ms of each scheme's prefill of the prompt (a matrix of PROMPT rows per weight: the weight-only
    helpers' many-row tiles), timed in turns, printed against tensorkiln fp32's."""
    import tensorkiln as tk
    from tensorkiln.frontend.autodiff import no_grad
    from tensorkiln.tools.timing import interleaved_medians
    runs = {scheme: (lambda prefill=compiled[scheme][0]: prefill(tk.tensor(ids), length)[0]) for scheme in schemes}
    print(f"timing the {PROMPT}-token prefill of {', '.join(runs)} in turns ...", flush=True)
    with no_grad():
        latency = interleaved_medians(runs, args.rounds, args.rounds)
    base = latency.get("fp32")
    print_table(["tensorkiln", f"prefill ms ({PROMPT} tokens)", "vs tk fp32"],
                [[scheme, f"{seconds * 1e3:.1f}", f"{base / seconds:.2f}x" if base else "-"]
                 for scheme, seconds in latency.items()])
    return {scheme: seconds * 1e3 for scheme, seconds in latency.items()}


def profile_steps(compiled: dict, schemes: list[str], token, position, ids: np.ndarray, length: int) -> dict:
    """ms of each scheme's decode step by kernel kind (f.profile(): a timing build, mean of 20 calls),
    printed as one table: where each precision's step spends its time."""
    import tensorkiln as tk
    from tensorkiln.frontend.autodiff import no_grad
    by_kind: dict[str, dict[str, float]] = {}
    with no_grad():
        for scheme in schemes:
            prefill, step = compiled[scheme]
            caches = prefill(tk.tensor(ids), length)[1]
            totals: dict[str, float] = {}
            for kernel in step.profile(token, position, caches).kernels:
                totals[kernel.kind] = totals.get(kernel.kind, 0.0) + kernel.seconds * 1e3
            by_kind[scheme] = totals
    kinds = sorted({kind for totals in by_kind.values() for kind in totals},
                   key=lambda kind: -max(totals.get(kind, 0.0) for totals in by_kind.values()))
    print("\ndecode step by kernel kind (f.profile(), ms per call)")
    print_table(["tensorkiln", *kinds, "all kernels"],
                [[scheme, *(f"{totals.get(kind, 0.0):.2f}" for kind in kinds), f"{sum(totals.values()):.2f}"]
                 for scheme, totals in by_kind.items()])
    return by_kind


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=32, help="decoded tokens compared (32 or more)")
    parser.add_argument("--rounds", type=int, default=8, help="rounds of timing every framework in turn")
    parser.add_argument("--repeat", type=int, default=40, help="timed calls per framework, at least")
    parser.add_argument("--schemes", default=",".join(SCHEMES), help="tensorkiln precisions")
    parser.add_argument("--peers", default="onnxruntime-int8,onnxruntime,openvino")
    parser.add_argument("--prefill", action="store_true",
                        help="also time each tensorkiln precision's prefill of the prompt, in turns")
    parser.add_argument("--profile", action="store_true",
                        help="also print each precision's decode step by kernel kind (f.profile())")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before the first library loads OpenMP
    import torch
    import tensorkiln as tk
    from tensorkiln.frontend.autodiff import no_grad
    from tensorkiln.tools.bench_common import onnxruntime_runner, openvino_default_precision, openvino_runner
    from tensorkiln.tools.bench_gpt2 import _onnx_files
    from tensorkiln.tools.timing import interleaved_medians
    torch.set_num_threads(args.threads)
    schemes = [s for s in args.schemes.split(",") if s]
    peers = [p for p in args.peers.split(",") if p]
    config, reference, ours = build(args.threads)
    length = PROMPT + args.steps
    ids = np.random.default_rng(1).integers(0, config.vocab_size, (1, PROMPT)).astype(np.int64)
    print(machine_summary(), f"threads {args.threads}; GPT-2 small, seeded random weights", flush=True)

    compiled, compile_s = {}, {}
    for scheme in ["fp32"] + [s for s in schemes if s != "fp32"]:
        print(f"compiling tensorkiln {scheme} prefill and decode step ...", flush=True)
        prefill, step, seconds = compile_scheme(ours, scheme, ids, length)
        compiled[scheme], compile_s[scheme] = (prefill, step), seconds

    # accuracy: fp32 decodes greedily; every precision decodes the same tokens
    with no_grad():
        fp32_prefill, fp32_step = compiled["fp32"]
        tokens, logits = [], []
        state = fp32_prefill(tk.tensor(ids), length)
        last, caches = state[0].numpy()[0, -1].copy(), state[1]
        for i in range(args.steps):
            logits.append(last)
            tokens.append(int(last.argmax()))
            if i == args.steps - 1:
                break
            out, caches = fp32_step(tk.tensor(np.array([[tokens[-1]]], dtype=np.int64)), tk.tensor(np.int64(PROMPT + i)),
                                    caches)
            last = out.numpy()[0, -1].copy()
        accuracy = {}
        for scheme in schemes:
            if scheme == "fp32":
                continue
            got = decode_run(*compiled[scheme], ids, tokens, length)
            errors = [float(np.abs(g - f).max() / np.abs(f).max()) for g, f in zip(got, logits)]
            agree = float(np.mean([int(g.argmax()) == t for g, t in zip(got, tokens)]))
            accuracy[scheme] = {"max_rel_error": max(errors), "median_rel_error": float(np.median(errors)),
                                "top1_agreement": agree}

    # timing: one decode step at the last position, every framework in turns
    runs, bytes_of = {}, {}
    position = tk.tensor(np.int64(length - 1))
    token = tk.tensor(np.array([[tokens[-1]]], dtype=np.int64))
    with no_grad():
        for scheme in schemes:
            prefill, step = compiled[scheme]
            caches = prefill(tk.tensor(ids), length)[1]
            runs[f"tensorkiln {scheme}"] = (lambda step=step, caches=caches: step(token, position, caches)[0])
            bytes_of[f"tensorkiln {scheme}"] = weight_bytes(config, scheme)
    onnx_peers = [p for p in peers if p.startswith("onnxruntime") or p.startswith("openvino")]
    if onnx_peers:
        print("exporting the decode step to ONNX ...", flush=True)
        with torch.no_grad():
            prompt = torch.from_numpy(ids)
            _, presents = reference(prompt)
            next_ids = torch.tensor([[tokens[0]]])
            path, arrays = _onnx_files(reference, prompt, next_ids, presents)["decode"]
        for peer in onnx_peers:
            try:
                if peer == "onnxruntime-int8":
                    run, _ = onnxruntime_runner(ort_dynamic_int8(path), arrays)
                    name, nominal = "onnxruntime dynamic int8 (IOBinding)", "ort-int8"
                elif peer == "onnxruntime":
                    run, _ = onnxruntime_runner(path, arrays)
                    name, nominal = "onnxruntime fp32 (IOBinding)", "fp32"
                else:
                    run, _ = openvino_runner(path, arrays, None)
                    ov_precision = openvino_default_precision(path)
                    name = f"openvino default ({ov_precision})"
                    nominal = "openvino" if ov_precision == "bf16" else "fp32"
            except ImportError:
                print(f"{peer} is not installed: skipped")
                continue
            runs[name], bytes_of[name] = run, weight_bytes(config, nominal)
    print(f"timing {', '.join(runs)} in turns ...", flush=True)
    bandwidth_before = read_bandwidth()
    with no_grad(), torch.no_grad():
        latency = interleaved_medians(runs, args.repeat, args.rounds)
    bandwidth = max(bandwidth_before, read_bandwidth())

    base = latency.get("tensorkiln fp32")
    rows, results = [], {}
    for name, seconds in latency.items():
        gbs = bytes_of[name] / seconds / 1e9
        results[name] = {"latency_ms": seconds * 1e3, "weight_mb": bytes_of[name] / 1e6, "gb_per_s": gbs,
                         "speedup_vs_tk_fp32": base / seconds if base else None}
        scheme = name.split(" ", 1)[1] if name.startswith("tensorkiln ") else None
        acc = accuracy.get(scheme, {})
        rows.append([name, f"{seconds * 1e3:.2f}", f"{base / seconds:.2f}x" if base else "-",
                     f"{bytes_of[name] / 1e6:.0f}", f"{gbs:.1f}", f"{100 * gbs / bandwidth:.0f}%",
                     f"{acc['max_rel_error']:.1e}" if acc else "-", f"{100 * acc['top1_agreement']:.0f}%" if acc else "-"])
    print(f"\nGPT-2 small decode step (1 token, cache of {length}), {args.threads} threads, medians of "
          f"{args.rounds} rounds in turns; machine read bandwidth {bandwidth:.1f} GB/s (tensorkiln sum, same run)")
    print_table(["framework", "ms", "vs tk fp32", "weight MB", "GB/s", "of bandwidth",
                 f"max rel err ({args.steps} steps)", "top-1 agrees"], rows)
    print("(peers' weight MB nominal: ORT int8 1 byte, OpenVINO bf16 2 and f32 4 bytes per weight)")
    for scheme, goal in GOALS.items():
        name = f"tensorkiln {scheme}"
        if name in latency and base:
            print(f"{scheme}: {base / latency[name]:.2f}x tensorkiln fp32 (goal {goal}x)")
    ort = latency.get("onnxruntime dynamic int8 (IOBinding)")
    if ort and "tensorkiln int8w" in latency:
        print(f"int8w vs ONNX Runtime dynamic int8: {ort / latency['tensorkiln int8w']:.2f}x")
    prefill = time_prefills(compiled, schemes, ids, length, args) if args.prefill else {}
    kinds = profile_steps(compiled, schemes, token, position, ids, length) if args.profile else {}
    if args.json:
        write_json(args.json, {"machine": machine_summary(), "threads": args.threads, "steps": args.steps,
                               "bandwidth_gb_per_s": bandwidth, "decode": results, "accuracy": accuracy,
                               "compile_s": compile_s, "prefill_ms": prefill,
                               "profile_ms_by_kind": kinds})
    return 0


if __name__ == "__main__":
    sys.exit(main())
