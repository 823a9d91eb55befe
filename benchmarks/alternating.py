"""tensorkiln against one peer, block by block: the ratio of each pair of blocks run side by side.

    OMP_WAIT_POLICY=passive python benchmarks/alternating.py [MODEL ...] [--peer onnxruntime]
        [--pairs 8] [--batch 1] [--threads 2] [--precision fp32] [--json FILE]

MODEL is any of `tensorkiln bench`'s models (resnet18, mobilenetv2, bert, gpt2, mlp;
gpt2 gives two rows, prefill and one decode step). Each model is compiled by
tensorkiln (`tk.from_torch`, or tensorkiln's own GPT-2 with the same weights) and by
the peer exactly as `tensorkiln bench` does (ONNX Runtime with IOBinding, OpenVINO
with its defaults or with f32 precision, torch.compile...). Then `--pairs` rounds
each run a block of calls of both, the order reversed every round, a pause before
each block (tools/timing.alternating_blocks). A shared machine's speed drifts by up
to 2x over minutes, so a ratio means most when its two blocks ran next to each
other: every row prints the median of the per-pair ratios (peer time / tensorkiln
time: above 1 means tensorkiln is faster) and their range, besides the median
per-call times. Precision: fp32 for every framework except OpenVINO's default,
which computes in bf16 on a CPU with AVX512-BF16; `--precision bf16` compiles
tensorkiln with precision="bf16" (as `tensorkiln bench --precision bf16`).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tensorkiln.tools.bench import MODELS, PEERS, measure  # noqa: E402
from tensorkiln.tools.bench_gpt2 import measure_gpt2  # noqa: E402
from tensorkiln.tools.timing import alternating_blocks  # noqa: E402


def pair_ratios(blocks: dict[str, list[float]], peer: str) -> list[float]:
    """Peer time / tensorkiln time of each pair of blocks that ran side by side."""
    return [theirs / ours for ours, theirs in zip(blocks["tensorkiln"], blocks[peer])]


def model_rows(name: str, peer: str, pairs: int, batch: int, precision: str = "fp32") -> dict[str, dict]:
    """Row name -> figures of one model (GPT-2: its prefill and decode rows)."""
    blocks_per_call: list[dict[str, list[float]]] = []

    def timer(runs: dict, repeat: int, rounds: int) -> dict[str, float]:
        blocks = alternating_blocks(runs, pairs)
        blocks_per_call.append(blocks)
        return {framework: float(np.median(seconds)) for framework, seconds in blocks.items()}

    progress = lambda message: print(f"  .. {message}", file=sys.stderr, flush=True)  # noqa: E731
    if name == "gpt2":
        steps = measure_gpt2(batch, [peer], repeat=1, progress=progress, timer=timer, precision=precision)
        names = ["gpt2 prefill", "gpt2 decode"]
    else:
        steps = (measure(name, batch, [peer], repeat=1, timer=timer, precision=precision),)
        names = [name]
    rows = {}
    for row_name, figures, blocks in zip(names, steps, blocks_per_call):
        if peer not in figures:
            raise SystemExit(f"{peer} is not installed or could not run {row_name}")
        ratios = pair_ratios(blocks, peer)
        rows[row_name] = {
            "tensorkiln_s": float(np.median(blocks["tensorkiln"])), "peer_s": float(np.median(blocks[peer])),
            "ratio_median": float(np.median(ratios)), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "ratios": ratios, "agrees": figures["tensorkiln"]["agrees"] and figures[peer]["agrees"]}
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS), help=f"some of {', '.join(MODELS)}")
    parser.add_argument("--peer", default="onnxruntime", choices=[p for p in PEERS if p != "torch"] + ["torch"])
    parser.add_argument("--pairs", type=int, default=8, help="rounds of one block of each, side by side")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2, help="threads for both frameworks")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="tensorkiln's precision")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # read when the first library loads OpenMP
    import torch  # optional dependency: the reference models, as in `tensorkiln bench`
    torch.set_num_threads(args.threads)
    results = {}
    for name in args.models:
        results.update(model_rows(name, args.peer, args.pairs, args.batch, args.precision))
    print(f"\ntensorkiln ({args.precision}) against {args.peer}, {args.pairs} pairs of blocks side by side, "
          f"batch {args.batch}, {args.threads} threads; ratio = {args.peer} time / tensorkiln time")
    print(f"{'model':14} {'tensorkiln':>12} {args.peer:>14} {'ratio median':>13} {'range':>13}  agrees")
    for row_name, r in results.items():
        print(f"{row_name:14} {r['tensorkiln_s'] * 1e3:9.3f} ms {r['peer_s'] * 1e3:11.3f} ms "
              f"{r['ratio_median']:12.2f}x {r['ratio_min']:5.2f}-{r['ratio_max']:.2f}x  "
              f"{'yes' if r['agrees'] else 'NO'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"peer": args.peer, "pairs": args.pairs, "batch": args.batch, "threads": args.threads,
                       "precision": args.precision,
                       "results": results}, f, indent=2)
    return 0 if all(r["agrees"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
