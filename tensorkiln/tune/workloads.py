"""A tuning workload as a program to run: inputs, the compiled function under a configuration, the reference.

A workload key (kernels/tuned.py) names a template and the facts that decide
its code; here each tunable template's key becomes a small graph that
exercises exactly that kernel: a `gemm` key is A (m x k) @ B (k x n), with B
a constant (laid out in panels by the graph passes) when the key says
`panels=1`; a `gemm_bf16` key is the same compiled with precision="bf16";
a `conv` key is one conv2d layer on an NCHW input, its weight a constant
when the key says `const=1` (as in an inference model: the layout pass may
block it, the Winograd pass transform it).
The reference is numpy in float64 on the same operands (rounded to bf16
first for the bf16 GEMM, whose products are then exact in float32; the
op table's conv2d reference for a layer).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..frontend import functions  # noqa: F401  (adds Tensor.__matmul__)
from ..frontend.creation import tensor
from ..frontend.jit import jit
from ..frontend.tensor import apply, as_tensor
from ..ir.ops import get_op
from ..kernels.templates.conv_choice import shape_of_workload
from ..kernels.tuned import parse_workload, using_configs


@dataclass
class Benchmark:
    """What a measurement runs: `build(config)` compiles (None: the analytic configuration) a function
    taking `inputs` and returning a Tensor; `reference` is its exact answer and `tolerance` the largest
    error allowed (absolute, on operands in [-1, 1])."""

    inputs: list[np.ndarray]
    build: Callable[[dict | None], Callable]
    reference: np.ndarray
    tolerance: float


def _bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), as float32."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def gemm_benchmark(workload: str, seed: int = 0) -> Benchmark:
    """The benchmark of a `gemm` / `gemm_bf16` workload key."""
    template, facts = parse_workload(workload)
    m, n, k, panels = int(facts["m"]), int(facts["n"]), int(facts["k"]), facts["panels"] == "1"
    dtype = np.dtype(facts["dtype"])
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (m, k)).astype(dtype)
    b = rng.uniform(-1, 1, (k, n)).astype(dtype)
    precision = "bf16" if template == "gemm_bf16" else "fp32"
    if precision == "bf16":
        a, b = _bf16_round(a), _bf16_round(b)
    reference = a.astype(np.float64) @ b.astype(np.float64)
    eps = float(np.finfo(dtype).eps)

    def build(config: dict | None) -> Callable:
        with using_configs({workload: config} if config else {}):
            if panels:
                weights = tensor(b)
                fn = jit(lambda x: x @ weights, precision=precision)
                fn(a)  # compiled here, under this configuration
            else:
                fn = jit(lambda x, y: x @ y, precision=precision)
                fn(a, b)
            return fn

    inputs = [a] if panels else [a, b]
    return Benchmark(inputs, build, reference, tolerance=4 * eps * k)


CONV_TOLERANCE_EPS = 32  # Winograd's transforms round more than a direct sum: eps * K per this many


def conv_benchmark(workload: str, seed: int = 0) -> Benchmark:
    """The benchmark of a `conv` workload key."""
    shape = shape_of_workload(workload)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (shape.n, shape.c, shape.h, shape.w)).astype(np.float32)
    w = rng.uniform(-1, 1, (shape.k, shape.c, shape.kh, shape.kw)).astype(np.float32)
    attrs = dict(stride=shape.stride, padding=shape.padding, dilation=shape.dilation, groups=1)
    reference = get_op("conv2d").reference([x.astype(np.float64), w.astype(np.float64)], attrs, None)

    def build(config: dict | None) -> Callable:
        def layer(inp, weight):
            return apply("conv2d", [as_tensor(inp), as_tensor(weight)], **attrs)
        with using_configs({workload: config} if config else {}):
            if shape.constant_weight:
                weights = tensor(w)
                fn = jit(lambda inp: layer(inp, weights))
                fn(x)  # compiled here, under this configuration
            else:
                fn = jit(layer)
                fn(x, w)
            return fn

    k = shape.c * shape.kh * shape.kw
    inputs = [x] if shape.constant_weight else [x, w]
    return Benchmark(inputs, build, reference, tolerance=CONV_TOLERANCE_EPS * float(np.finfo(np.float32).eps) * k)


BENCHMARKS: dict[str, Callable[[str], Benchmark]] = {"gemm": gemm_benchmark, "gemm_bf16": gemm_benchmark,
                                                     "conv": conv_benchmark}


def benchmark_of(workload: str) -> Benchmark:
    """The benchmark of a workload key; ValueError for a template without one."""
    template = parse_workload(workload)[0]
    if template not in BENCHMARKS:
        raise ValueError(f"no benchmark for template {template!r} (tunable: {', '.join(BENCHMARKS)})")
    return BENCHMARKS[template](workload)


__all__ = ["BENCHMARKS", "Benchmark", "benchmark_of", "conv_benchmark", "gemm_benchmark"]
