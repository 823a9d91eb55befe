"""BERT-base with a symbolic sequence length: programs compiled over many lengths, and latency against
programs specialized to one length and against ONNX Runtime on the same ONNX model.

    python benchmarks/dynamic_bert.py [--lengths 24] [--samples 16,128,384]
        [--pairs 5] [--parts native,onnx,kernels] [--layers 2] [--json FILE]

tensorkiln's own BERT-base (tensorkiln.models.bert_base, float32, batch 1, random weights and
tokens), tk.jit(model, dynamic={"input_ids": {1: "seq"}}) under no_grad, called once at each of
`--lengths` distinct sequence lengths spread over [2, 512] (a size symbol is at least 2; length 1
specializes): the programs it compiled (size classes where a kernel's blocking changes) and the
seconds all calls took, compiling included. Then, at each sampled length, the per-call latency of
that symbolic function against tk.jit(model, dynamic=False) specialized to the length, timed in
alternating blocks (tools/timing.alternating_blocks: medians of the blocks and of the per-round
ratios; ratio > 1: the symbolic program is slower).

The onnx part (benchmarks/dynamic/bert_onnx.py): the PyTorch reference BERT-base encoder
(tools/torch_reference.BertEncoder: 12 layers, hidden 768, 512 positions, a pooler and a 2-class head)
exported to ONNX with dim_param axes ("batch", "seq") on input_ids and attention_mask; tk.onnx.load of
that file (batch and seq size symbols) called once at each length (batch 1) and at batch 2, 3 and 5,
programs counted; then at each sampled length, per call, tensorkiln against a program compiled from
the same encoder exported with every size fixed at that length (specialized) and against ONNX Runtime
on the same file (one session, IOBinding bound per length, 2 intra-op threads, all graph
optimizations), the three in alternating blocks; outputs agree to 1e-4 relative.

The kernels part (not in the default --parts): the same encoder with --layers layers, imported from
the file with dim_params (symbolic) and from one exported with every size fixed (specialized), at
batch 1 and each sampled length: each kernel's time (`profile`, 40 calls), medians of --pairs rounds
taken in turns, side by side.
Threads: the OpenMP default (all cores) with its default wait policy (a waiting thread spins a
moment before it sleeps, as ONNX Runtime's pool does); each block starts after a pause, so neither
engine's spinning threads run into the other's block. OMP_WAIT_POLICY=passive (what `make test` sets
so that two test processes share the cores) makes each of a call's ~90 parallel regions wake sleeping
threads: measure with it only on a machine shared with other jobs, and say so. The machine's speed
drifts, so read the ratios: the median of the pairs' ratios, beside the ratio of the medians and the
number of pairs won.
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
from benchmarks.dynamic.bert_onnx import kernels_part, onnx_part  # noqa: E402
from tensorkiln.models import bert_base  # noqa: E402
from tensorkiln.tools.timing import alternating_blocks  # noqa: E402


def lengths(count: int) -> list[int]:
    """`count` distinct lengths spread over [2, 512], shuffled so sizes do not arrive in order."""
    values = sorted({int(round(v)) for v in np.geomspace(2, 512, count)})
    while len(values) < count:
        values = sorted(set(values) | {values[-1] - len(values)})
    return list(np.random.default_rng(0).permutation(values))


def tokens(length: int) -> np.ndarray:
    return np.random.default_rng(length).integers(0, 30522, (1, length)).astype(np.int64)


def native_part(args) -> dict:
    """tensorkiln's own BERT-base, symbolic against specialized."""
    tk.manual_seed(0)
    model = bert_base()
    model.eval()
    rows, results = [], {}
    with tk.no_grad():
        symbolic = tk.jit(model, dynamic={"input_ids": {1: "seq"}})
        start = time.perf_counter()
        for n in lengths(args.lengths):
            symbolic(tokens(n))
        seconds = time.perf_counter() - start
        results["compiles"] = {"lengths": args.lengths, "programs": symbolic.compile_count, "seconds": seconds}
        print(f"\n{args.lengths} distinct lengths in [2, 512]: {symbolic.compile_count} programs compiled, "
              f"{seconds:.1f} s for all calls (compiling included)")
        for n in [int(s) for s in args.samples.split(",")]:
            x = tokens(n)
            specialized = tk.jit(model, dynamic=False)
            np.testing.assert_allclose(symbolic(x).numpy(), specialized(x).numpy(), rtol=2e-3, atol=2e-3)
            times = alternating_blocks({"symbolic": lambda: symbolic(x), "specialized": lambda: specialized(x)},
                                       pairs=args.pairs)
            ratio = float(np.median([a / b for a, b in zip(times["symbolic"], times["specialized"])]))
            sym, spec = float(np.median(times["symbolic"])), float(np.median(times["specialized"]))
            rows.append([str(n), f"{sym * 1e3:.2f}", f"{spec * 1e3:.2f}", f"{ratio:.3f}"])
            results[str(n)] = {"symbolic_s": sym, "specialized_s": spec, "ratio": ratio}
    print_table(["seq", "symbolic ms", "specialized ms", "symbolic / specialized"], rows)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, default=24)
    parser.add_argument("--samples", default="16,128,384")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--parts", default="native,onnx")
    parser.add_argument("--layers", type=int, default=2, help="encoder layers of the kernels part")
    parser.add_argument("--json")
    args = parser.parse_args()
    print(machine_summary())
    results = {}
    if "native" in args.parts.split(","):
        results["native"] = native_part(args)
    if "onnx" in args.parts.split(","):
        results["onnx"] = onnx_part(lengths(args.lengths), [int(s) for s in args.samples.split(",")], args.pairs)
    if "kernels" in args.parts.split(","):
        for n in [int(s) for s in args.samples.split(",")]:
            results[f"kernels_{n}"] = kernels_part(args.layers, n, args.pairs)
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
