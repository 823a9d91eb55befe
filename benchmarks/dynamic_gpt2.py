"""GPT-2 small with a symbolic prompt length (prefill) and a symbolic KV-cache length (decode step):
programs compiled over many lengths, per-call time against programs specialized to one length, and
tokens/s generating 32 tokens after each prompt against ONNX Runtime.

    OMP_WAIT_POLICY=passive python benchmarks/dynamic_gpt2.py [--lengths 16] [--samples 16,128,384]
        [--pairs 4] [--parts prefill,decode,generate] [--generate-samples all|16,128] [--json FILE]

tensorkiln's GPT-2 small (tensorkiln.models, float32, batch 1) with the weights of the PyTorch
reference model (tools/torch_reference.GPT2, random initialization), under no_grad.

- prefill: tk.jit(model, dynamic={"input_ids": {1: tk.Dim("seq", max=1024)}}) called once at each
  of `--lengths` distinct prompt lengths spread over [8, 512] (causal attention: its mask is a
  comparison of iotas, read by the fused attention kernel as key <= query);
- decode: tk.jit(model.decode_step, donate_argnums=2, dynamic=...) with every KV cache's length
  axis the symbol "kv" (at most 1024), called once at each of `--lengths` cache lengths over
  [8, 512], the token at the cache's last position.

Each part prints the programs compiled and the seconds all the calls took (compiling included), the
seconds one program specialized to a length takes to compile (tk.jit(..., dynamic=False), at each
sampled length), and at each sampled length the per-call time of the symbolic program, the
specialized one and PyTorch eager (the reference model: prefill `model(ids)`, decode
`model.decode_static` with a preallocated cache of the same length, written in place; 2 threads,
torch.no_grad), timed in alternating blocks (tools/timing.alternating_blocks: medians of the blocks
and of the per-round ratios; ratio > 1: the symbolic program is slower), with the symbolic program's
GFLOP/s against the machine's peak FMA rate (benchmarks/kernels.py's measure_limits). The logits of
the symbolic and specialized programs must agree to 1e-5 relative (max |difference| / max |logit|).

- generate (benchmarks/dynamic/gpt2_generate.py): greedy generation of 32 tokens after each of `--lengths`
  prompt lengths in [8, 512]: tensorkiln's symbolic prefill (cache sized prompt + 32) and symbolic
  decode step (programs counted: the goal is at most 2 prefill and 1 decode program) against ONNX
  Runtime running the reference model's prefill and decode graphs exported with dim_param axes
  (the prompt and past lengths), IOBinding, 2 intra-op threads, all graph optimizations; tokens/s
  of each whole generation (prefill included), timed in turns at every prompt length (or those of
  `--generate-samples`; `--pairs` rounds); the tokens both generate are compared.
The machine may be shared: read ratios measured side by side, not absolute times.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tensorkiln as tk  # noqa: E402
from benchmarks.common import machine_summary, print_table, write_json  # noqa: E402
from benchmarks.dynamic.gpt2_generate import generate_part, print_generate_table  # noqa: E402
from benchmarks.kernels import measure_limits  # noqa: E402
from tensorkiln.models import GPT2Config, GPT2LMHeadModel  # noqa: E402
from tensorkiln.tools.timing import alternating_blocks  # noqa: E402

CONFIG = GPT2Config()
MAX_POSITIONS = CONFIG.n_positions
TOLERANCE = 1e-5


def lengths(count: int) -> list[int]:
    """`count` distinct lengths spread over [8, 512], shuffled so sizes do not arrive in order."""
    values = sorted({int(round(v)) for v in np.geomspace(8, 512, count)})
    while len(values) < count:
        values = sorted(set(values) | {values[-1] - len(values)})
    return [int(v) for v in np.random.default_rng(0).permutation(values)]


def models():
    """(tensorkiln GPT-2, PyTorch reference) with the same weights."""
    import torch
    from tensorkiln.tools import torch_reference as ref
    torch.manual_seed(0)
    torch.set_num_threads(2)
    reference = ref.GPT2(CONFIG.vocab_size, CONFIG.n_positions, CONFIG.n_embd, CONFIG.n_layer, CONFIG.n_head).eval()
    ours = GPT2LMHeadModel(CONFIG)
    ours.load_hf_state_dict({k: v.detach().numpy() for k, v in reference.state_dict().items()})
    ours.eval()
    return ours, reference


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def prefill_flops(n: int) -> float:
    """Multiply-adds x 2 of a prompt of n tokens: the layers' GEMMs, attention (causal: half), the head."""
    d, layers = CONFIG.n_embd, CONFIG.n_layer
    gemms = n * d * (3 * d + d + 4 * d + 4 * d)
    attention = n * n * d  # q k^T and P v over the lower triangle: 2 x (n^2 / 2) x d
    return 2.0 * (layers * (gemms + attention) + n * d * CONFIG.vocab_size)


def decode_flops(kv: int) -> float:
    d, layers = CONFIG.n_embd, CONFIG.n_layer
    return 2.0 * (layers * (12 * d * d + 2 * kv * d) + d * CONFIG.vocab_size)


def tokens(n: int) -> np.ndarray:
    return np.random.default_rng(n).integers(0, CONFIG.vocab_size, (1, n)).astype(np.int64)


def cache_dynamic() -> dict:
    """Every KV cache's length axis is the one symbol "kv"."""
    kv = tk.Dim("kv", max=MAX_POSITIONS)
    return {f"caches_{i}": {2: kv} for i in range(2 * CONFIG.n_layer)}


def caches(kv: int) -> list[np.ndarray]:
    rng = np.random.default_rng(kv)
    shape = (1, CONFIG.n_head, kv, CONFIG.n_embd // CONFIG.n_head)
    return [rng.standard_normal(shape).astype(np.float32) * 0.5 for _ in range(2 * CONFIG.n_layer)]


def compile_seconds(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def run_prefill(ours, reference, args, peak: float) -> tuple[dict, list[list[str]]]:
    import torch
    symbolic = tk.jit(ours, dynamic={"input_ids": {1: tk.Dim("seq", max=MAX_POSITIONS)}})
    start = time.perf_counter()
    for n in lengths(args.lengths):
        symbolic(tokens(n))
    seconds = time.perf_counter() - start
    result = {"lengths": args.lengths, "programs": symbolic.compile_count, "seconds": seconds, "samples": {}}
    print(f"\nprefill: {args.lengths} prompt lengths in [8, 512]: {symbolic.compile_count} programs, "
          f"{seconds:.1f} s for all calls (compiling included)")
    rows = []
    for n in args.samples:
        ids = tokens(n)
        specialized = tk.jit(ours, dynamic=False)
        compile_s = compile_seconds(specialized, ids)
        error = relative_error(symbolic(ids).numpy(), specialized(ids).numpy())
        assert error < TOLERANCE, f"prefill {n}: symbolic and specialized logits differ by {error:.2e}"
        torch_ids = torch.from_numpy(ids)

        def torch_eager():
            with torch.no_grad():
                reference(torch_ids)
        times = alternating_blocks({"symbolic": lambda: symbolic(ids), "specialized": lambda: specialized(ids),
                                    "torch": torch_eager}, pairs=args.pairs)
        rows.append(_row("prefill", n, times, compile_s, error, prefill_flops(n), peak))
        result["samples"][str(n)] = _figures(times, compile_s, error)
    return result, rows


def run_decode(ours, reference, args, peak: float) -> tuple[dict, list[list[str]]]:
    import torch
    step = tk.jit(ours.decode_step, donate_argnums=2, dynamic=cache_dynamic())
    token = np.array([[11]], dtype=np.int64)
    start = time.perf_counter()
    for kv in lengths(args.lengths):
        step(token, np.array(kv - 1, dtype=np.int64), caches(kv))
    seconds = time.perf_counter() - start
    result = {"lengths": args.lengths, "programs": step.compile_count, "seconds": seconds, "samples": {}}
    print(f"decode: {args.lengths} KV-cache lengths in [8, 512]: {step.compile_count} programs, "
          f"{seconds:.1f} s for all calls (compiling included)")
    rows = []
    for kv in args.samples:
        pos = np.array(kv - 1, dtype=np.int64)
        specialized = tk.jit(ours.decode_step, donate_argnums=2, dynamic=False)
        compile_s = compile_seconds(specialized, token, pos, caches(kv))
        error = relative_error(step(token, pos, caches(kv))[0].numpy(), specialized(token, pos, caches(kv))[0].numpy())
        assert error < TOLERANCE, f"decode {kv}: symbolic and specialized logits differ by {error:.2e}"
        # each keeps its own caches, written in place at `pos` on every call (the same values each time)
        mine, theirs = caches(kv), caches(kv)
        torch_caches = [(torch.from_numpy(k.copy()), torch.from_numpy(v.copy()))
                        for k, v in zip(caches(kv)[::2], caches(kv)[1::2])]
        torch_token = torch.from_numpy(token)

        def torch_eager():
            with torch.no_grad():
                reference.decode_static(torch_token, torch_caches, kv - 1)
        times = alternating_blocks({"symbolic": lambda: step(token, pos, mine),
                                    "specialized": lambda: specialized(token, pos, theirs),
                                    "torch": torch_eager}, pairs=args.pairs)
        rows.append(_row("decode", kv, times, compile_s, error, decode_flops(kv), peak))
        result["samples"][str(kv)] = _figures(times, compile_s, error)
    return result, rows


def run_generate(ours, reference, args, peak: float) -> tuple[dict, list[list[str]]]:
    timed = None if args.generate_samples == "all" else [int(s) for s in args.generate_samples.split(",")]
    return generate_part(ours, reference, lengths(args.lengths), args.pairs, timed)


def _ratio(times: dict, a: str, b: str) -> float:
    return float(np.median([x / y for x, y in zip(times[a], times[b])]))


def _figures(times: dict, compile_s: float, error: float) -> dict:
    return {"symbolic_s": float(np.median(times["symbolic"])), "specialized_s": float(np.median(times["specialized"])),
            "torch_s": float(np.median(times["torch"])), "symbolic_over_specialized": _ratio(times, "symbolic", "specialized"),
            "symbolic_over_torch": _ratio(times, "symbolic", "torch"), "specialized_compile_s": compile_s,
            "relative_error": error}


def _row(part: str, n: int, times: dict, compile_s: float, error: float, flops: float, peak: float) -> list[str]:
    sym = float(np.median(times["symbolic"]))
    gflops = flops / sym / 1e9
    return [part, str(n), f"{sym * 1e3:.2f}", f"{np.median(times['specialized']) * 1e3:.2f}",
            f"{np.median(times['torch']) * 1e3:.2f}", f"{_ratio(times, 'symbolic', 'specialized'):.3f}",
            f"{_ratio(times, 'symbolic', 'torch'):.3f}", f"{compile_s:.1f}", f"{error:.1e}",
            f"{gflops:.1f} ({100 * gflops / peak:.0f}%)"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, default=16)
    parser.add_argument("--samples", default="16,128,384")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--parts", default="prefill,decode,generate")
    parser.add_argument("--generate-samples", default="all",
                        help="prompt lengths whose generation is timed: 'all' (every length) or a list")
    parser.add_argument("--json")
    args = parser.parse_args()
    args.samples = [int(s) for s in args.samples.split(",")]
    print(machine_summary())
    peak = measure_limits(3)["peak_gflops"]
    print(f"peak FMA rate measured now: {peak:.1f} GFLOP/s")
    ours, reference = models()
    results, rows = {"peak_gflops": peak}, []
    with tk.no_grad():
        for part, run in (("prefill", run_prefill), ("decode", run_decode), ("generate", run_generate)):
            if part in args.parts.split(","):
                results[part], part_rows = run(ours, reference, args, peak)
                if part == "generate":
                    print_generate_table(part_rows)
                else:
                    rows += part_rows
    print()
    if rows:
            print_table(["part", "length", "symbolic ms", "specialized ms", "torch eager ms", "symbolic / specialized",
                     "symbolic / torch", "specialized compile s", "rel. error", "symbolic GFLOP/s (% of peak)"], rows)
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
