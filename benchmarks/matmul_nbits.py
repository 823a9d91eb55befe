"""ONNX int4 weight blocks (com.microsoft MatMulNBits) at decode size: tensorkiln against ONNX Runtime.

    python benchmarks/matmul_nbits.py [--rows 1] [--layers 4] [--block 32] [--threads 2] [--symmetric]
                                      [--json out.json]

A chain of GPT-2-base-sized layers (per layer: 768 -> 2304, 768 -> 768, 768 -> 3072, 3072 -> 768, the
attention and MLP projections; `--layers` of them), each a MatMulNBits node with random 4-bit weights,
block scales and packed zero points (ONNX Runtime's default asymmetric blocks), applied to `--rows`
rows (1: one decode step). Run by:

- tensorkiln fp32: `tk.onnx.load(path)`, the weight dequantized once and multiplied in float32 (4 bytes
  a weight);
- tensorkiln int8w: `tk.onnx.load(path, precision="int8w-g<block>")`, the model's own integers and
  scales in the weight-only kernel (1 byte a weight; the same products, exactly);
- tensorkiln int4w: `precision="int4w-g<block>"`, the same integers at half a byte (q - zero point is
  held as q - 8 plus the block's offset, whose share is a small matmul of A's block sums), A quantized
  to int8 per block (as accuracy_level 4); --symmetric: no zero points (q - 8, `is_symmetric=True`);
- ONNX Runtime: the same file (IOBinding), its MatMulNBits kernel with accuracy_level 0 (float A, as
  the op's definition) and with accuracy_level 4 (A quantized to int8 per block, a file of its own).

Timed in turns (interleaved_medians), medians in ms; bandwidth is the weight bytes each engine reads
per call over its time. The last column is the largest difference from tensorkiln fp32's output,
relative to its largest value.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

SHAPES = ((768, 2304), (768, 768), (768, 3072), (3072, 768))  # (K, N) of one GPT-2-base layer


def _pack(values: np.ndarray) -> np.ndarray:
    """Rows of 4-bit values, two a byte, the low nibble first."""
    return (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)


def build(path: str, rows: int, layers: int, block: int, accuracy_level: int, symmetric: bool = False,
          seed: int = 0) -> None:
    """The chain of MatMulNBits nodes as an ONNX file; the layers alternate K and N (768 <-> 3072)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for layer in range(layers):
        for index, (k, n) in enumerate(SHAPES):
            name = f"l{layer}_{index}"
            blocks = k // block
            q = rng.integers(0, 16, size=(n, k)).astype(np.uint8)
            zeros = rng.integers(0, 16, size=(n, blocks)).astype(np.uint8)
            inits += [numpy_helper.from_array(_pack(q).reshape(n, blocks, block // 2), f"{name}_b"),
                      numpy_helper.from_array(rng.uniform(0.5, 1.5, n * blocks).astype(np.float32) / k, f"{name}_s")]
            if not symmetric:
                inits.append(numpy_helper.from_array(_pack(zeros).reshape(-1), f"{name}_z"))
            source = x if index in (0, 1, 2) else f"l{layer}_2_y"  # the MLP's down projection reads its up one
            attrs = dict(K=k, N=n, bits=4, block_size=block)
            if accuracy_level:
                attrs["accuracy_level"] = accuracy_level
            inputs = [source, f"{name}_b", f"{name}_s"] + ([] if symmetric else [f"{name}_z"])
            nodes.append(helper.make_node("MatMulNBits", inputs,
                                          [f"{name}_y"], domain="com.microsoft", **attrs))
        # the next layer reads the sum of its projections' outputs of width 768 (a residual stream)
        nodes.append(helper.make_node("Add", [f"l{layer}_1_y", f"l{layer}_3_y"], [f"l{layer}_out"]))
        x = f"l{layer}_out"
    outputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)] + \
        [helper.make_tensor_value_info(f"l{layer}_0_y", TensorProto.FLOAT, None) for layer in range(layers)]
    graph = helper.make_graph(nodes, "nbits", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (rows, 768))],
                              outputs, inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--symmetric", action="store_true", help="no zero points (q - 8)")
    parser.add_argument("--json")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import tensorkiln as tk
    from benchmarks.common import machine_summary, write_json
    from tensorkiln.tools.bench_common import onnxruntime_runner
    from tensorkiln.tools.timing import interleaved_medians

    folder = tempfile.mkdtemp(prefix="tensorkiln-nbits-")
    paths = {level: os.path.join(folder, f"nbits{level}.onnx") for level in (0, 4)}
    for level, path in paths.items():
        build(path, args.rows, args.layers, args.block, level, args.symmetric)
    x = np.random.default_rng(1).standard_normal((args.rows, 768)).astype(np.float32)
    fp32, int8w = tk.onnx.load(paths[0]), tk.onnx.load(paths[0], precision=f"int8w-g{args.block}")
    int4w = tk.onnx.load(paths[0], precision=f"int4w-g{args.block}")
    runs = {"tk fp32": lambda: fp32(x=x), "tk int8w": lambda: int8w(x=x), "tk int4w": lambda: int4w(x=x)}
    for level, path in paths.items():
        runs[f"ORT acc{level}"], _ = onnxruntime_runner(path, [x])
    first = lambda out: np.asarray(out[0] if isinstance(out, (list, tuple)) else out)  # noqa: E731
    reference = first(runs["tk fp32"]())
    differences = {name: float(np.max(np.abs(first(run()) - reference)) / np.max(np.abs(reference)))
                   for name, run in runs.items()}
    ms = {name: seconds * 1e3 for name, seconds in interleaved_medians(runs).items()}
    weights = args.layers * sum(k * n for k, n in SHAPES)
    read = {"tk fp32": 4.0, "tk int8w": 1.0, "tk int4w": 0.5, "ORT acc0": 0.5, "ORT acc4": 0.5}  # bytes a weight
    print(f"MatMulNBits, {args.layers} GPT-2-base layers ({weights / 1e6:.1f} M weights, 4-bit"
          f"{' symmetric' if args.symmetric else ''}, blocks of "
          f"{args.block}), {args.rows} row(s), {args.threads} threads; {machine_summary()}; medians of turns")
    print(f"{'engine':>10} {'ms':>8} {'vs tk fp32':>10} {'weight GB/s':>12} {'max rel. diff':>14}")
    for name, value in ms.items():
        print(f"{name:>10} {value:8.3f} {ms['tk fp32'] / value:9.2f}x {weights * read[name] / value / 1e6:12.1f} "
              f"{differences[name]:14.2e}")
    if args.json:
        write_json(args.json, {"rows": args.rows, "layers": args.layers, "block": args.block, "threads": args.threads,
                               "symmetric": args.symmetric, "ms": ms, "relative_difference": differences})
    return 0


if __name__ == "__main__":
    sys.exit(main())
