"""Timed calls of a GEMM workload reading a model's weight (a linear layer's `bt=1`, or a constant in panels,
`panels=1`) cycle through copies of it, as a model's weights arrive from memory; a plain argument (an
SGEMM's B) is timed as it is."""
from __future__ import annotations

import numpy as np

from tensorkiln.kernels.target import cpu_target
from tensorkiln.tune import worker
from tensorkiln.tune.workloads import MAX_STREAMED_COPIES, STREAMED_CACHE_MULTIPLE, gemm_benchmark, streamed_copies


def test_streamed_copies_together_outgrow_the_last_level_cache():
    big = np.ones((1024, 1024), np.float32)
    copies = streamed_copies(big)
    assert copies[0] is big and all(c is not big and np.array_equal(c, big) for c in copies[1:])
    assert sum(c.nbytes for c in copies) >= STREAMED_CACHE_MULTIPLE * cpu_target().l3 or \
        len(copies) == MAX_STREAMED_COPIES
    assert len(streamed_copies(np.ones(4, np.float32))) == MAX_STREAMED_COPIES
    huge = np.ones(STREAMED_CACHE_MULTIPLE * cpu_target().l3 // 4 + 1, np.float32)
    assert len(streamed_copies(huge)) == 1


def test_a_gemm_reading_a_linear_layers_weight_is_timed_on_copies_of_it():
    bench = gemm_benchmark("gemm:dtype=float32:m=8:n=64:k=32:panels=0:bt=1")
    a, b = bench.inputs
    timed = bench.timed_inputs()
    assert len(timed) > 1 and all(args[0] is a and np.array_equal(args[1], b) for args in timed)
    assert len({id(args[1]) for args in timed}) == len(timed)
    as_it_is = gemm_benchmark("gemm:dtype=float32:m=8:n=64:k=32:panels=0")  # an SGEMM's argument: one array
    assert as_it_is.timed_inputs() == [as_it_is.inputs]


def test_a_gemm_of_a_constant_weight_is_timed_on_copies_of_its_panels():
    """The panels are an argument of the timed program, the kernel a model's constant weight compiles to:
    the same workload key, a configuration honoured, the answer checked against the reference."""
    workload = "gemm:dtype=float32:m=24:n=64:k=48:panels=1"
    bench = gemm_benchmark(workload)
    a, panels = bench.inputs
    assert panels.ndim == 3 and panels.shape[1] == 48  # (ceil(N / NR), K, NR)
    timed = bench.timed_inputs()
    assert len(timed) > 1 and len({id(args[1]) for args in timed}) == len(timed)
    assert all(args[0] is a and np.array_equal(args[1], panels) for args in timed)
    default = bench.build(None)
    analytic = [t for kernel in default.report(a, panels).kernels for t in kernel.tuning][0].split(": ", 1)[1]
    rule = dict(part.split("=") for part in analytic.split())
    # other cache blocks than the rule's, legal on any target: one register tile's rows and columns
    mc, nc = rule["mr"], rule["nr"]
    assert (mc, nc) != (rule["mc"], rule["nc"])
    config = {**rule, "mc": mc, "nc": nc}
    for config in (None, {key: value if key == "split" else int(value) for key, value in config.items()}):
        fn = bench.build(config)
        assert worker.check(fn, bench) is None
        tuning = [t for kernel in fn.report(a, panels).kernels for t in kernel.tuning]
        assert tuning and tuning[0].startswith(workload + (" tuned:" if config else " default:")), tuning
        if config:
            assert f"mc={mc}" in tuning[0] and f"nc={nc}" in tuning[0], tuning


def test_timed_blocks_go_on_cycling_through_the_copies():
    seen: list[int] = []
    inputs = [[np.zeros(1), np.zeros(1)] for _ in range(5)]
    for _ in range(3):  # three blocks of 3 calls: 9 calls visit every list, in turn, across the blocks
        worker._block(lambda x, y: seen.append(next(i for i, args in enumerate(inputs) if args[1] is y)), inputs, 3)
    assert len(seen) == 9 and all((later - earlier) % 5 == 1 for earlier, later in zip(seen, seen[1:]))
