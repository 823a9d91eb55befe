"""Wall-clock measurement used by the demo and the benchmarks: medians after warm-up, alone or in turns."""
from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

# A timer: (functions by name, calls per function at least, rounds) -> median seconds per call by name.
Timer = Callable[[dict, int, int], dict]

# After its last call a library's worker threads go on spinning for a while before they sleep, one core
# busy: measured on the Zen 3 host after a 128 x 768 x 3072 product, numpy's OpenBLAS about 0.11 s, ONNX
# Runtime's pool about 0.05 s, OpenMP's (tensorkiln's, PyTorch's) about 0.01 s, OpenVINO's none. A block of
# calls timed in that window runs on one core fewer (tensorkiln's GEMM there took 2-4x its time), so
# between blocks the timers wait until this process is idle, polling its CPU time.
IDLE_POLL_SECONDS = 0.01
IDLE_CPU_SHARE = 0.05  # CPU seconds of the process per second of a poll below which its threads count as idle
IDLE_WAIT_LIMIT_SECONDS = 1.0  # a pool that never sleeps must not stall a benchmark


def busy_share(cpu_clock: Callable[[], float] = time.process_time,
               wall_clock: Callable[[], float] = time.perf_counter,
               sleep: Callable[[float], None] = time.sleep) -> float:
    """CPU seconds of this process (all its threads) per wall second over one poll of IDLE_POLL_SECONDS."""
    cpu, wall = cpu_clock(), wall_clock()
    sleep(IDLE_POLL_SECONDS)
    return (cpu_clock() - cpu) / max(wall_clock() - wall, 1e-9)


def wait_until_idle(min_seconds: float = 0.0, limit_seconds: float = IDLE_WAIT_LIMIT_SECONDS, *,
                    cpu_clock: Callable[[], float] = time.process_time,
                    wall_clock: Callable[[], float] = time.perf_counter,
                    sleep: Callable[[float], None] = time.sleep) -> float:
    """Sleep `min_seconds`, then until a poll (`busy_share`) finds this process's threads (a peer's
    spinning workers among them) using under IDLE_CPU_SHARE of a core, for at most `limit_seconds` in
    all; returns the seconds waited. The clocks and the sleep are parameters for tests."""
    start = wall_clock()
    if min_seconds > 0:
        sleep(min_seconds)
    while busy_share(cpu_clock, wall_clock, sleep) >= IDLE_CPU_SHARE and wall_clock() - start < limit_seconds:
        pass
    return wall_clock() - start


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


def interleaved_medians(runs: dict[str, Callable[[], object]], repeat: int = 10, rounds: int = 5,
                        min_block_seconds: float = 0.1, pause_seconds: float = 0.05,
                        max_block_calls: int = 2000) -> dict[str, float]:
    """Median wall time of each of `runs`, the functions timed in turns.

    A shared machine's speed drifts from second to second; timed one after
    another, two functions can land in different phases and their ratio means
    little. Here `rounds` rounds each time a block of calls of every function
    in turn, so every function sees the same phases. Before each block: a
    pause of at least `pause_seconds` until the previous function's spinning
    worker threads have gone idle (`wait_until_idle`), and one untimed call.
    A block has ceil(repeat / rounds) calls, or more while they take under
    `min_block_seconds` together (at most `max_block_calls`).
    """
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            wait_until_idle(pause_seconds)
            start = time.perf_counter()
            fn()
            first = max(time.perf_counter() - start, 1e-7)
            calls = min(max(-(-repeat // rounds), math.ceil(min_block_seconds / first)), max_block_calls)
            for _ in range(calls):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}


def alternating_blocks(runs: dict[str, Callable[[], object]], pairs: int = 8, min_block_seconds: float = 0.5,
                       pause_seconds: float = 0.2) -> dict[str, list[float]]:
    """Seconds per call of each of `runs` in `pairs` rounds of one block each, taken in turns.

    Block k of every function ran next to block k of the others, so the ratio of
    two functions' block k is measured in one phase of the machine; the order
    of the functions is reversed every round, so neither always goes first.
    A block takes at least `min_block_seconds`, after a pause of at least `pause_seconds` until
    the previous block's worker threads are idle (`wait_until_idle`) and one untimed call.
    """
    times: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs)
    for round_index in range(pairs):
        for name in (order if round_index % 2 == 0 else order[::-1]):
            fn = runs[name]
            wait_until_idle(pause_seconds)
            start = time.perf_counter()
            fn()
            first = max(time.perf_counter() - start, 1e-7)
            calls = max(1, math.ceil(min_block_seconds / first))
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - start) / calls)
    return times
