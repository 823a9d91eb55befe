"""Blocked (NCHW[x]c) direct convolution against the NCHW templates, per ResNet-18 layer.

    python benchmarks/layout.py [--calls N] [--batch B] [--models] [--json out/layout.json]

For each convolution layer of ResNet-18 (224x224 input), the same layer with
a fused bias + ReLU is compiled with constant weights, as an inference graph
sees it, three ways: in NCHW (conv.py's algorithm, named in the table); as
`conv2d_nchwc` inside a chain (input and output blocked); and as
`conv2d_nchwc` alone between NCHW layers (it reads NCHW in its padded copy and
writes NCHW). They are called in turn in one process and the lower decile of
each one's times reported (`interleaved_seconds`), so a machine shared with
other processes affects all alike. The last column is what the layout pass's
rule (passes/layout.py) decides for that layer: "blocked" (even alone),
"in a chain" (only with a blocked neighbour: alone, its conversions would cost
more than the kernel gains) or "nchw". With --models, ResNet-18 and MobileNetV2
end to end at opt_level 2, with and without the layout pass.
"""
from __future__ import annotations

import argparse
import os
import sys
from unittest import mock

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorkiln as tk  # noqa: E402
import tensorkiln.nn.functional as F  # noqa: E402
from common import interleaved_seconds, machine_summary, print_table, write_json  # noqa: E402
from tensorkiln.kernels.target import cpu_target  # noqa: E402
from tensorkiln.frontend.tensor import apply  # noqa: E402

from common import RESNET18_CONVS  # noqa: E402


def layer_variants(batch: int, c: int, h: int, o: int, k: int, s: int, p: int, rng):
    """The layer with bias + ReLU compiled three ways, and the NCHW conv2d node.

    Returns ({"nchw": fn, "chain": fn, "alone": fn}, {name: input}, node): the NCHW
    templates; conv2d_nchwc inside a chain (blocked input and output); and
    conv2d_nchwc alone (NCHW input and output, the conversions in its copy and
    store), which is what the pass makes of a convolution between NCHW layers.
    """
    from tensorkiln.passes.layout import block_size, input_block
    kb = block_size(o)
    cb = input_block(c)
    x = rng.standard_normal((batch, c, h, h), dtype=np.float32)
    w = (rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    wt, bt = tk.tensor(w), tk.tensor(b)
    xb = np.ascontiguousarray(x.reshape(batch, c // cb, cb, h, h).transpose(0, 1, 3, 4, 2))
    wb = tk.tensor(np.ascontiguousarray(w.reshape(o // kb, kb, c // cb, cb, k, k).transpose(0, 2, 4, 5, 3, 1)))
    bb = tk.tensor(b.reshape(1, o // kb, 1, 1, kb))
    conv = dict(stride=(s, s), padding=(p,) * 4, dilation=(1, 1))
    with mock.patch("tensorkiln.passes.layout.blocked_conv_choice", lambda node: None):  # the NCHW path
        nchw = tk.jit(lambda x: F.conv2d(x, wt, bt, stride=s, padding=p).relu())
        nchw(x)
    fns = {
        "nchw": nchw,
        "chain": tk.jit(lambda x: (apply("conv2d_nchwc", [x, wb], out_layout="nchwc", **conv) + bb).relu()),
        "alone": tk.jit(lambda x: (apply("conv2d_nchwc", [x, wb], out_layout="nchw", **conv)
                                   + bt.reshape(1, o, 1, 1)).relu()),
    }
    inputs = {"nchw": x, "chain": xb, "alone": x}
    for name, fn in fns.items():
        fn(inputs[name])  # compile now
    node = next(n for n in fns["nchw"].graph(x).nodes if n.op == "conv2d")
    return fns, inputs, node


def rule(node) -> str:
    """What the layout pass does with this layer: blocked alone too, blocked in a chain only, or NCHW."""
    from tensorkiln.passes.layout import MAX_CONVERSION_SHARE, blocked_conv_choice, conversion_share
    if not blocked_conv_choice(node):
        return "nchw"
    return "blocked" if conversion_share(node) <= MAX_CONVERSION_SHARE else "in a chain"


def nchw_algorithm(node) -> str:
    """The NCHW template conv.py's rule picks for this conv2d node."""
    from tensorkiln.loops.buffer import Buffer
    from tensorkiln.kernels.templates.conv import conv_algorithm
    return conv_algorithm(node, Buffer("probe", node.dtype.name, node.shape))


def end_to_end(batch: int, calls: int) -> list[dict]:
    """ResNet-18 and MobileNetV2 (224x224) at opt_level 2, with and without the layout pass."""
    from functional_models import resnet18
    from tensorkiln import models
    tk.manual_seed(0)
    mobilenet = models.MobileNetV2()
    mobilenet.eval()
    x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)
    rows = []
    with tk.no_grad():
        for name, fn in (("ResNet-18", resnet18()), ("MobileNetV2", mobilenet)):
            blocked = tk.jit(fn)
            blocked(x)
            with mock.patch("tensorkiln.passes.layout.blocked_conv_choice", lambda node: None):
                nchw = tk.jit(fn)
                nchw(x)
            fired = next(p.fired for p in blocked.report(x).passes if p.name == "layout")
            t_blocked, t_nchw = interleaved_seconds([lambda: blocked(x), lambda: nchw(x)], calls)
            rows.append({"model": name, "batch": batch, "layout_ms": t_blocked * 1e3, "nchw_ms": t_nchw * 1e3,
                         "blocked_convs": fired.get("conv2d -> conv2d_nchwc", 0),
                         "convs": sum(n.op == "conv2d" for n in nchw.optimized_graph(x).nodes)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls of each variant, alternating")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--json", default=None)
    parser.add_argument("--only", default=None, help="substring of the layer names to run")
    parser.add_argument("--models", action="store_true", help="also ResNet-18 and MobileNetV2 end to end")
    args = parser.parse_args()
    target = cpu_target()
    print(f"machine: {machine_summary()}; vector width {target.vector_bytes * 8} bits; batch {args.batch}\n")
    rng = np.random.default_rng(0)
    rows = []
    for name, c, h, o, k, s, p in RESNET18_CONVS:
        if args.only and args.only not in name:
            continue
        fns, inputs, node = layer_variants(args.batch, c, h, o, k, s, p, rng)
        kinds = list(fns)
        times = dict(zip(kinds, interleaved_seconds([lambda k=k: fns[k](inputs[k]) for k in kinds], args.calls)))
        oh = (h + 2 * p - k) // s + 1
        flops = 2 * args.batch * o * oh * oh * c * k * k
        rows.append({"layer": name, "shape": f"{c}x{h}x{h} -> {o}x{oh}x{oh}",
                     "nchw_algorithm": nchw_algorithm(node),
                     **{f"{kind}_ms": t * 1e3 for kind, t in times.items()},
                     **{f"{kind}_gflops": flops / t / 1e9 for kind, t in times.items()},
                     "rule": rule(node)})
    print_table(["layer", "shape", "NCHW algorithm", "NCHW ms", "GFLOP/s", "chain ms", "GFLOP/s", "alone ms",
                 "GFLOP/s", "NCHW / chain", "NCHW / alone", "rule"],
                [[r["layer"], r["shape"], r["nchw_algorithm"], f"{r['nchw_ms']:.3f}", f"{r['nchw_gflops']:.0f}",
                  f"{r['chain_ms']:.3f}", f"{r['chain_gflops']:.0f}", f"{r['alone_ms']:.3f}",
                  f"{r['alone_gflops']:.0f}", f"{r['nchw_ms'] / r['chain_ms']:.2f}x",
                  f"{r['nchw_ms'] / r['alone_ms']:.2f}x", r["rule"]] for r in rows])
    if args.models:
        models = end_to_end(args.batch, max(args.calls // 10, 10))
        print()
        print_table(["model", "batch", "opt_level 2", "without the layout pass", "speedup", "convs blocked"],
                    [[r["model"], str(r["batch"]), f"{r['layout_ms']:.2f} ms", f"{r['nchw_ms']:.2f} ms",
                      f"{r['nchw_ms'] / r['layout_ms']:.2f}x", f"{r['blocked_convs']} of {r['convs']}"]
                     for r in models])
        rows += models
    if args.json:
        write_json(args.json, {r.get("layer") or f"{r['model']} batch {r['batch']}": r for r in rows})


if __name__ == "__main__":
    main()
