"""A tuning workload as a program to run: inputs, the compiled function under a configuration, the reference.

A workload key (kernels/tuned.py) names a template and the facts that decide
its code; here each tunable template's key becomes a small graph that
exercises exactly that kernel: a `gemm` key is A (m x k) @ B (k x n), with B
given in the micro-kernel's panels when the key says `panels=1` (a
constant weight, which the graph passes lay out so at compile time; timed
as an argument holding those panels, the same kernel, so that calls can
cycle through copies of it), and B an input stored as [n, k] and read
through its transpose when it says `bt=1` (a linear layer's weight, packed
by a gather); a
`gemm_bf16` key is the same compiled with precision="bf16"; a `conv` key
is one conv2d layer on an NCHW input, its weight a constant when the key
says `const=1` (as in an inference model: the layout pass may block it, the
Winograd pass transform it); a `sketch` key is the one loop-IR
kernel it names (lowered in this process, or handed to the worker with the
request) built alone as a program.
The reference is numpy in float64 on the same operands (rounded to bf16
first for the bf16 GEMM, whose products are then exact in float32; the
op table's conv2d reference for a layer); a sketch's is its default
kernel's answer, which the lowering's own tests check against the op table.
Each reference is computed once per workload and operands and kept on disk
(`reference_cache`), so a fresh worker does not compute a float64 product of
2048^3 again.
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
from ..ir.ops.gemm_panels import pack_panels
from ..kernels.templates.conv_choice import shape_of_workload
from ..kernels.templates.gemm import analytic_gemm_blocking
from ..driver.build import build as build_program
from ..kernels.sketch import measurable_alone, sketch, sketch_config, sketch_kernel
from ..kernels.target import cpu_target
from ..kernels.tuned import parse_workload, using_configs
from ..loops.program import Program
from ..runtime.signature import numpy_dtypes
from .reference_cache import cached_reference


@dataclass
class Benchmark:
    """What a measurement runs: `build(config)` compiles (None: the analytic configuration) a function
    taking `inputs` and returning a Tensor; `reference` is its exact answer and `tolerance` the largest
    error allowed (absolute, on operands in [-1, 1])."""

    inputs: list[np.ndarray]
    build: Callable[[dict | None], Callable]
    reference: np.ndarray
    tolerance: float
    # the argument lists timed calls cycle through (None: `inputs` every time): copies of a weight operand,
    # so each call finds it outside the caches as a model's layer does
    timing_inputs: list[list[np.ndarray]] | None = None

    def timed_inputs(self) -> list[list[np.ndarray]]:
        """The argument lists of timed calls, in the order they are cycled through."""
        return self.timing_inputs or [self.inputs]


STREAMED_CACHE_MULTIPLE = 2  # the copies of a streamed operand together: this many times the last-level cache
MAX_STREAMED_COPIES = 64


def streamed_copies(array: np.ndarray) -> list[np.ndarray]:
    """`array` and copies of it for timed calls to cycle through: together STREAMED_CACHE_MULTIPLE times the
    last-level cache (at most MAX_STREAMED_COPIES), so no call finds it cached. In a model a layer's weights
    come from memory (the other layers' weights evicted them: BERT-base's are 340 MB); timed alone on one
    array they stay in L3, which favours blockings that do worse in the model (a prefetch distance measured
    1.18x slower than the default on a cached 128 x 768 x 3072 GEMM, 1.04x on streamed copies)."""
    count = min(MAX_STREAMED_COPIES, max(1, -(-STREAMED_CACHE_MULTIPLE * cpu_target().l3 // max(array.nbytes, 1))))
    return [array] + [array.copy() for _ in range(count - 1)]


def _bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), as float32."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def gemm_benchmark(workload: str, seed: int = 0) -> Benchmark:
    """The benchmark of a `gemm` / `gemm_bf16` workload key."""
    template, facts = parse_workload(workload)
    m, n, k, panels = int(facts["m"]), int(facts["n"]), int(facts["k"]), facts["panels"] == "1"
    transposed = facts.get("bt") == "1"  # B stored as [N, K] and read through its transpose (nn.Linear)
    dtype = np.dtype(facts["dtype"])
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (m, k)).astype(dtype)
    b = rng.uniform(-1, 1, (k, n)).astype(dtype)
    precision = "bf16" if template == "gemm_bf16" else "fp32"
    if precision == "bf16":
        a, b = _bf16_round(a), _bf16_round(b)
    reference = cached_reference(workload, seed, [a, b], lambda: a.astype(np.float64) @ b.astype(np.float64))
    eps = float(np.finfo(dtype).eps)
    b_stored = np.ascontiguousarray(b.T) if transposed else b  # the input as the program receives it

    # float panels as an argument; a bf16 GEMM's panels hold bf16 pairs (matmul_bf16_packed), laid out by the
    # graph passes
    b_panels = pack_panels(b, analytic_gemm_blocking(m, n, k, dtype.name).nr) \
        if panels and precision == "fp32" else None

    def build(config: dict | None) -> Callable:
        with using_configs({workload: config} if config else {}):
            if b_panels is not None:  # the kernel of a constant weight, its panels an argument (a tuned nr is refused)
                fn = jit(lambda x, p: apply("matmul_packed", [as_tensor(x), as_tensor(p)], n=n))
                fn(a, b_panels)  # compiled here, under this configuration
            elif panels:  # bf16 pairs: compiled into the function
                weights = tensor(b)
                fn = jit(lambda x: x @ weights, precision=precision)
                fn(a)
            elif transposed:
                fn = jit(lambda x, y: x @ y.T, precision=precision)
                fn(a, b_stored)
            else:
                fn = jit(lambda x, y: x @ y, precision=precision)
                fn(a, b)
            return fn

    tolerance = 4 * eps * k
    if b_panels is not None:  # a model's constant weight: timed calls cycle through copies, from memory as in a model
        return Benchmark([a, b_panels], build, reference, tolerance,
                         timing_inputs=[[a, copy] for copy in streamed_copies(b_panels)])
    if not transposed:  # bf16 pairs compiled into the function, or an argument as it is (an activation, an SGEMM's)
        return Benchmark([a] if panels else [a, b_stored], build, reference, tolerance)
    # B a linear layer's weight read per call: timed calls cycle through copies of it, from memory as in a model
    return Benchmark([a, b_stored], build, reference, tolerance,
                     timing_inputs=[[a, copy] for copy in streamed_copies(b_stored)])


CONV_TOLERANCE_EPS = 32  # Winograd's transforms round more than a direct sum: eps * K per this many


def conv_benchmark(workload: str, seed: int = 0) -> Benchmark:
    """The benchmark of a `conv` workload key."""
    shape = shape_of_workload(workload)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (shape.n, shape.c, shape.h, shape.w)).astype(np.float32)
    w = rng.uniform(-1, 1, (shape.k, shape.c, shape.kh, shape.kw)).astype(np.float32)
    attrs = dict(stride=shape.stride, padding=shape.padding, dilation=shape.dilation, groups=1)
    reference = cached_reference(workload, seed, [x, w], lambda: get_op("conv2d").reference(
        [x.astype(np.float64), w.astype(np.float64)], attrs, None))

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


class _ProgramCall:
    """A built one-kernel program called like a compiled function: its output, with `.numpy()`."""

    def __init__(self, module):
        self.module = module

    def __call__(self, *inputs: np.ndarray) -> "_ProgramCall._Result":
        return self._Result(self.module.run(*inputs)[0])

    class _Result:
        def __init__(self, array: np.ndarray):
            self.array = array

        def numpy(self) -> np.ndarray:
            return self.array


def _operand(dtype: np.dtype, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """A kernel operand: floats in [0.5, 1.5] (every log, root and quotient defined), integers and
    booleans zero (an index read from it is in bounds)."""
    if np.issubdtype(dtype, np.floating):
        return rng.uniform(0.5, 1.5, shape).astype(dtype)
    return np.zeros(shape, dtype)


SKETCH_TOLERANCE = 1e-4  # relative to the output's largest magnitude: rfactor and tiles reassociate sums


def sketch_benchmark(workload: str, seed: int = 0) -> Benchmark:
    """The benchmark of a `sketch` workload key: its kernel alone, built as a program."""
    kernel = sketch_kernel(workload)
    if kernel is None:
        raise ValueError(f"sketch workload {workload!r}: its kernel is not known in this process")
    out, params = kernel.params[0], kernel.params[1:]
    if not measurable_alone(kernel):
        raise ValueError(f"sketch workload {workload!r}: a kernel updating its output in place, or of run-time "
                         "sizes, is not measured alone")
    rng = np.random.default_rng(seed)
    inputs = [_operand(numpy_dtypes(p.dtype)[0], tuple(p.shape), rng) for p in params]

    def build(config: dict | None) -> Callable:
        chosen = kernel if not config else sketch(kernel, sketch_config(config))[0]
        return _ProgramCall(build_program(Program("sketch_" + kernel.name, (chosen,), tuple(params), (out,))))

    reference = np.asarray(build(None)(*inputs).numpy(), dtype=np.float64)
    scale = float(np.max(np.abs(reference))) if reference.size else 0.0
    return Benchmark(inputs, build, reference, tolerance=SKETCH_TOLERANCE * max(scale, 1.0))


BENCHMARKS: dict[str, Callable[[str], Benchmark]] = {"gemm": gemm_benchmark, "gemm_bf16": gemm_benchmark,
                                                     "conv": conv_benchmark, "sketch": sketch_benchmark}


def benchmark_of(workload: str) -> Benchmark:
    """The benchmark of a workload key; ValueError for a template without one."""
    template = parse_workload(workload)[0]
    if template not in BENCHMARKS:
        raise ValueError(f"no benchmark for template {template!r} (tunable: {', '.join(BENCHMARKS)})")
    return BENCHMARKS[template](workload)


__all__ = ["BENCHMARKS", "Benchmark", "benchmark_of", "conv_benchmark", "gemm_benchmark", "streamed_copies"]
