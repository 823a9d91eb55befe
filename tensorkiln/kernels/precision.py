"""Each kernel's precision, as explain(), the compile report and f.profile() show it.

A kernel computes in one of:

- "bf16 (vdpbf16ps)": a GEMM or a blocked direct convolution on bf16 pairs with AVX512-BF16, float32
  accumulation;
- "bf16 (widened to fp32)": the same GEMM (or bf16 direct convolution, conv_nchwc_bf16.py) on a CPU
  without it, bf16 widened to float32;
- "bf16 operands (fp32 kernel)": a contraction whose operands the precision pass rounded, run by a
  float32 template (direct and depthwise convolutions, attention, small matmuls; and, on a target
  without bf16 dot products, the GEMMs and attention of passes/bf16_fp32_gemm.py);
- "int8 (vnni)", "int8 (avx512bw)", "int8 (avx2)", "int8 (maddubsw)", "int8 (portable)": the u8 x s8 GEMM
  (gemm_u8s8.py) or the direct 8-bit convolutions (conv_u8s8.py) with int32 sums, named by their helper's
  kind ("maddubsw": an AVX2 layer whose weights vpmaddubsw sums exactly, int8_avx2.py); "int8 (winograd,
  avx2)": a 3x3 stride-1 layer on Winograd F(2x2, 3x3) with exact 16-bit products (winograd_u8s8.py);
- "int8w", "int4w": float32 activations times int8 / int4 weights dequantized in registers, float32
  sums (weight_only.py); "bf16 (matvec, vdpbf16ps)" and "bf16 (matvec, widened to fp32)": bf16
  weights in the matrix-vector helper of the same file;
- otherwise its compute dtype ("fp32", "fp64", "int64", ...).
"""
from __future__ import annotations

from ..ir.graph import Node
from ..ir.ops.registry import OpKind
from ..loops.ir import Alloc, Kernel, NativeCall, iter_stmts
from .templates.gemm_bf16 import holds_bf16_values

# gemm_u8s8.py's and conv_u8s8.py's helper calls, suffixed by their kind
_INT8_HELPERS = ("tk_gemm_u8s8_", "tk_conv_u8s8_", "tk_depthwise_u8s8_")
_WEIGHT_ONLY = {"tk_w8_matmul_": "int8w", "tk_w4_matmul_": "int4w",  # weight_only.py's helper calls
                "tk_bf16_matvec_": "bf16 (matvec, vdpbf16ps)"}
SHORT_NAMES = {"float32": "fp32", "float64": "fp64", "float16": "fp16", "bfloat16": "bf16"}


def kernel_precision(kernel: Kernel, nodes: list[Node], root: Node | None) -> str:
    """How `kernel`, computing the graph `nodes` and storing `root` (None: a copy), computes."""
    stmts = list(iter_stmts(kernel.body))
    calls = [s.function for s in stmts if isinstance(s, NativeCall)]
    for prefix, name in _WEIGHT_ONLY.items():
        if any(f.startswith(prefix) for f in calls):
            widened = any(f.startswith("tk_bf16_matvec_") and not f.endswith("dpbf16") for f in calls)
            return name.replace("vdpbf16ps", "widened to fp32") if widened else name
    if any(isinstance(s, NativeCall) and s.function.startswith("tk_bf16_") for s in stmts):
        return "bf16 (vdpbf16ps)"
    int8 = [s.function for s in stmts if isinstance(s, NativeCall) and s.function.startswith(_INT8_HELPERS)]
    if int8:
        kind = int8[0].rsplit('_', 1)[1]
        return f"int8 (winograd, {kind})" if "_winograd_" in int8[0] else f"int8 ({kind})"
    if any(isinstance(s, Alloc) and s.buffer.dtype == "bfloat16" for s in stmts) or \
            any(n.op == "conv2d_nchwc_bf16" or _reads_bf16_storage(n, nodes) for n in nodes):  # loop IR widening bf16
        return "bf16 (widened to fp32)"
    contractions = [n for n in nodes if n.kind == OpKind.CONTRACTION]
    if any(any(holds_bf16_values(x) or _rounded_in_fp32(x) for x in c.inputs) for c in contractions):
        return "bf16 operands (fp32 kernel)"
    if root is None:
        return "copy"
    name = root.dtype.compute.name  # float16/bfloat16 storage computes in float32
    return SHORT_NAMES.get(name, name)


def _rounded_in_fp32(node: Node) -> bool:
    """`node` is round_bf16(x), possibly reshaped or transposed (bf16 values held in float32)."""
    while node.kind == OpKind.MOVEMENT and len(node.inputs) == 1:
        node = node.inputs[0]
    return node.op == "round_bf16"


def _reads_bf16_storage(node: Node, nodes: list[Node]) -> bool:
    """A depthwise blocked convolution whose input widens a bfloat16 value stored by another kernel."""
    x = node.inputs[0] if node.op == "conv2d_nchwc" and node.attrs.get("groups", 1) > 1 else None
    ids = {n.id for n in nodes}  # the widening is computed here, from a bf16 value stored elsewhere
    return x is not None and x.op == "cast" and x.inputs[0].dtype.name == "bfloat16" and \
        x.id in ids and x.inputs[0].id not in ids


__all__ = ["kernel_precision"]
