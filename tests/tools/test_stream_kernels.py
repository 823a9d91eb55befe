"""The STREAM kernels the distributed benchmark measures bandwidth with build and compute right on
this CPU (with and without AVX-512; each form of the read, prefetch hints included)."""
from __future__ import annotations

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _stream_kernels():
    spec = importlib.util.spec_from_file_location("stream_kernels", os.path.join(ROOT, "benchmarks", "stream_kernels.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_stream_kernel_matches_numpy_on_a_size_with_a_tail():
    module = _stream_kernels()
    module.StreamKernels(1037, check=False).check()


def test_the_fma_probe_counts_the_flops_of_its_chains():
    kernels = _stream_kernels().StreamKernels(1037, check=False)
    flops = kernels.fma_flops(1000)
    # 12 chains x lanes (4, 8 or 16 float32 by the vector width) x 2 flops per FMA, per iteration
    assert flops in {1000 * 12 * lanes * 2 for lanes in (4, 8, 16)}
