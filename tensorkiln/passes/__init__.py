"""Graph passes and the PassManager that runs them as a pipeline per optimization level.

A pass is a function Graph -> (Graph, Counter of what fired). The manager runs
the pipeline of an opt level, verifies the graph after each pass, records
statistics (nodes before/after, what fired, time) and, given a dump directory
(CompileOptions.dump_dir, TENSORKILN_DUMP_IR), writes the IR after each pass there.
The level and the other values come from the pipeline's CompileOptions
(tensorkiln/driver/options.py), which has checked them.

    level 0: no graph passes; every computing op is its own kernel (no fusion)
    level 1: constant folding, CSE, DCE; elementwise fusion
    level 2: + algebraic simplification (exact rules and weight folding, e.g.
             batch norm into conv); matmuls of one value by constant matrices merged
             into one at precision fp32, and bf16 on the float32 templates
             (sibling_matmuls.py: a layer's Q, K, V projections); fusion of
             epilogues and row reductions (default)
    level 3: level 2 with a second simplification round after CSE
Levels 2 and 3 also run the layout pass when compiling to C (blocked_layouts):
chains of convolutions in channel-blocked layout (layout.py), transform the
constant weights of the convolutions that run as Winograd (winograd_weights.py)
and lay out constant GEMM weights as the micro-kernel's panels (packed_weights.py; int8
ones for the u8 x s8 GEMM: int8_weights.py; with precision="bf16" the blocked convolutions'
weights as bf16 pairs: conv_bf16_weights.py, and the
shallow (RGB stem) ones' as pairs of taps: shallow_bf16_weights.py). Levels 2 and 3 first run qdq_integer.py, which puts the
matmuls and convolutions of dequantized 8-bit values on integers before folding makes float weights,
and int8_layout.py keeps the direct 8-bit convolutions' activations channels-last between them.
Last, sub_graphs.py runs the same pipeline inside the branches and loop bodies of
control-flow ops, which every other pass treats as opaque boundaries.
Fast-math rules (x - x -> 0 on floats, ...) run only with tk.jit(fast_math=True).
With precision="bf16" the precision pass (precision.py) rounds the contractions'
operands to bf16 at every level, after the exact simplifications (batch norm
folded into a convolution's weights first, so the folded weights are rounded); on a target
without bf16 dot products, bf16_fp32_gemm.py then gives the matmuls' rounded operands to the
float32 GEMM and attention templates.
With precision="int8w"/"int4w" the weight_only pass (weight_only.py) quantizes the constant
weights of matmuls at every level, at the same point.
"""
from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from ..ir.graph import Graph, verify
from .constant_fold import fold_constants
from .bf16_fp32_gemm import fp32_kernels_for_bf16, round_conv_operands, round_for_fp32_kernels
from .conv_bf16_weights import pack_conv_bf16_weights
from .cse import eliminate_common_subexpressions
from .dce import eliminate_dead_code
from .layout import block_layouts
from .rules import simplify_graph
from .shallow_bf16_weights import pack_shallow_bf16_weights
from .sibling_matmuls import merge_sibling_matmuls
from .int8_layout import keep_int8_channels_last
from .int8_weights import pack_int8_weights
from .packed_weights import pack_matmul_weights
from .precision import round_to_bf16
from .qdq_integer import integer_qdq_products
from .weight_only import quantize_matmul_weights, weight_only_spec
from .winograd_weights import transform_winograd_weights
from .sub_graphs import has_control_flow, optimize_sub_graphs

PassFn = Callable[[Graph], tuple[Graph, Counter]]


@dataclass
class PassStats:
    """What one pass did to a graph."""

    name: str
    nodes_before: int
    nodes_after: int
    fired: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    graph: Graph | None = field(default=None, repr=False)  # the result, kept when the pass changed it

    def __str__(self) -> str:
        what = ", ".join(f"{k} x{v}" for k, v in sorted(self.fired.items(), key=lambda kv: -kv[1]))
        return (f"{self.name:<16} {self.nodes_before:>5} -> {self.nodes_after:<5} nodes "
                f"{self.seconds * 1e3:6.1f} ms  {what}")


def pipeline(opt_level: int, fast_math: bool = False, blocked_layouts: bool = True,
             precision: str = "fp32") -> list[tuple[str, PassFn]]:
    """The passes of an optimization level, in order.

    blocked_layouts=False leaves out the layout pass (a graph for the reference
    interpreter or for analysis keeps its conv2d nodes in NCHW).
    """
    simplify = lambda g: simplify_graph(g, fast_math=fast_math, fold_weights=True)  # noqa: E731
    passes: list[tuple[str, PassFn]] = []
    if opt_level >= 2:
        passes.append(("qdq_integer", integer_qdq_products))  # before folding turns DQ(weights) into floats
        passes.append(("int8_layout", keep_int8_channels_last))  # before folding: permuted biases fold
    if opt_level >= 1:
        passes.append(("constant_fold", fold_constants))
    if opt_level >= 2:
        passes.append(("simplify", simplify))  # batch norm folds into conv2d before the layout changes
        # weights are constants by now (the bf16 pairs attention reading slices of one product is not yet
        # correct: float32, and bf16 where the float32 templates compute it, bf16_fp32_gemm.py)
        if precision == "fp32" or precision == "bf16" and fp32_kernels_for_bf16():
            passes.append(("sibling_matmuls", merge_sibling_matmuls))
    if precision == "bf16":
        passes.append(("precision", round_to_bf16))
        passes.append(("bf16_fp32_gemm", round_for_fp32_kernels))  # no bf16 dot product: float32 templates
        if opt_level >= 1:
            passes.append(("constant_fold", fold_constants))  # weights the simplifier left as expressions
    weights = weight_only_spec(precision)
    if weights is not None:  # after folding: transposed or folded weights are constants by now
        passes.append(("weight_only", lambda g: quantize_matmul_weights(g, weights)))
    if opt_level >= 2:
        if blocked_layouts:
            passes.append(("layout", block_layouts))
        passes.append(("constant_fold", fold_constants))  # blocked weights and biases
        if blocked_layouts:
            passes.append(("winograd_weights", transform_winograd_weights))
            passes.append(("packed_weights", pack_matmul_weights))
            passes.append(("int8_weights", pack_int8_weights))
            if precision == "bf16":
                passes.append(("conv_bf16_weights", pack_conv_bf16_weights))
                passes.append(("shallow_bf16_weights", pack_shallow_bf16_weights))
                # the convolutions still in NCHW: the float32 implicit GEMM where the target has no bf16 dot
                passes.append(("bf16_fp32_conv", round_conv_operands))
    if opt_level >= 1:
        passes += [("cse", eliminate_common_subexpressions)]
    if opt_level >= 3:
        passes += [("simplify", simplify), ("cse", eliminate_common_subexpressions)]
    if opt_level >= 1:
        passes.append(("dce", eliminate_dead_code))
    return passes


def optimize(graph: Graph, opt_level: int = 2, fast_math: bool = False,
             dump_dir: str | None = None, blocked_layouts: bool = True,
             precision: str = "fp32") -> tuple[Graph, list[PassStats]]:
    """Run the pipeline of `opt_level`; returns the optimized graph and per-pass statistics.

    dump_dir: write the traced graph and the graph after each pass there, one file each.
    """
    stats: list[PassStats] = []
    if dump_dir:
        os.makedirs(dump_dir, exist_ok=True)
        _dump(dump_dir, graph, 0, "traced")
    for index, (name, run) in enumerate(pipeline(opt_level, fast_math, blocked_layouts, precision), start=1):
        before = len(graph)
        start = time.perf_counter()
        graph, fired = run(graph)
        verify(graph)
        stats.append(PassStats(name, before, len(graph), dict(fired), time.perf_counter() - start,
                               graph if fired else None))
        if dump_dir:
            _dump(dump_dir, graph, index, name)
    if opt_level >= 1 and has_control_flow(graph):  # the same pipeline inside every branch and loop body
        before, start = len(graph), time.perf_counter()
        graph, fired = optimize_sub_graphs(graph, lambda sub: optimize(
            sub, opt_level, fast_math, blocked_layouts=blocked_layouts, precision=precision)[0])
        verify(graph)
        stats.append(PassStats("sub_graphs", before, len(graph), dict(fired), time.perf_counter() - start, graph))
    return graph, stats


def _dump(directory: str, graph: Graph, index: int, name: str) -> None:
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in graph.name)
    with open(os.path.join(directory, f"{safe}.{index:02d}.{name}.txt"), "w") as f:
        f.write(str(graph) + "\n")


__all__ = ["PassStats", "optimize", "pipeline"]
