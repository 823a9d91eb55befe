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
