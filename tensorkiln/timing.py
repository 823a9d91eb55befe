"""Wall-clock measurement used by the demo and the benchmarks: medians after warm-up."""
from __future__ import annotations

import time
from typing import Callable

import numpy as np


def median_seconds(fn: Callable[[], object], repeat: int = 11, warmup: int = 2) -> float:
    """Median wall time of `fn` over `repeat` runs after `warmup` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))
