"""Run on 2+ ranks: compiled all-reduces of short vectors through shared memory, run in C from the
runtime hook (runtime/native_all_reduce.py), against numpy and across ranks.

Without the agreement check per call, a call site's first call goes through Python and registers it;
later calls run in C. Each function runs several times on new values, the native path on and off in
turns (the two share the segment and its call counter), for sum, mean, max and min of float32,
float64, int32 and int64 (the greedy decode's index is an int64 min; a mean only of floats), and then the shared-memory
switch off (MPI's path). A rank that never comes makes the other's native wait fail naming it.
Prints 'OK native_all_reduce rank r'.
"""
import warnings

import numpy as np

import tensorkiln as tk
import tensorkiln.distributed as dist
from tensorkiln.errors import DistributedError
from tensorkiln.runtime import native_all_reduce
from tensorkiln.runtime.collective_channel import Channel
from tensorkiln.runtime.shared_all_reduce import SharedAllReduce

warnings.simplefilter("error")  # a compiled graph must not fall back to the interpreter
dist.init(check_agreement=False)
RANK, SIZE = dist.rank(), dist.world_size()
assert native_all_reduce.library() is not None, "a C compiler builds the native hook here"

REDUCE = {"sum": lambda s: s.sum(0), "mean": lambda s: s.mean(0), "max": lambda s: s.max(0),
          "min": lambda s: s.min(0)}


def value(rank, shape, dtype, salt):
    rng = np.random.default_rng(1000 * rank + salt)
    if dtype.startswith("int"):
        return rng.integers(-50, 50, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def reductions(dtype):
    """The reductions of `dtype` (a mean only of floats)."""
    return [r for r in REDUCE if r != "mean" or dtype.startswith("float")]


def step(x):
    """An all-reduce per reduction, each of its own work (each a call site of its own)."""
    return [dist.all_reduce(x * 1, r) for r in reductions(x.dtype.name)]


for dtype in ("float32", "float64", "int32", "int64"):
    compiled = tk.jit(step)  # one program per dtype and shape
    for shape in ((1,), (3, 17), (768,)):
        for call in range(6):
            native_all_reduce.set_enabled(call % 3 != 2)  # every third call through Python's hook
            inputs = [value(r, shape, dtype, call) for r in range(SIZE)]
            got = compiled(tk.tensor(inputs[RANK]))
            stack = np.stack(inputs)
            for name, g in zip(reductions(dtype), got):
                g, reduce = g.numpy(), REDUCE[name]
                want = reduce(stack).astype(dtype) if name != "sum" or dtype.startswith("int") else None
                if want is None:  # a float sum in rank order, in the dtype: the bits every rank must hold
                    want = inputs[0].copy()
                    for x in inputs[1:]:
                        want += x
                np.testing.assert_allclose(g, want, rtol=1e-6, err_msg=f"rank {RANK}: {name} {dtype} {shape} call {call}")
                everyone = dist.all_gather(tk.tensor(g[None].copy()), dim=0).numpy()
                assert (everyone == everyone[0]).all(), (name, dtype, shape, call)
native_all_reduce.set_enabled(True)
assert native_all_reduce._registered, "call sites were registered with the native hook"

# the shared-memory switch off: the registered sites go to Python, which takes MPI's all-reduce
Channel.share_memory_without_progress = False
inputs = [value(r, (768,), "float32", 99) for r in range(SIZE)]
got = compiled(tk.tensor(inputs[RANK]))
np.testing.assert_allclose(got[2].numpy(), np.stack(inputs).max(0), err_msg=f"rank {RANK}: through MPI")
Channel.share_memory_without_progress = True

# a rank that never reaches the call: the other's native wait names it instead of hanging
SharedAllReduce.wait_timeout_seconds = 0.5
lonely = tk.jit(lambda x: dist.all_reduce(x + 1, "sum"))
x = tk.tensor(np.ones(5, np.float32))
for _ in range(2):  # the first call registers the site, the second runs in C
    lonely(x)
dist.barrier()
if RANK == 0:
    try:
        lonely(x)
        raise AssertionError("an all-reduce that rank 1 never reached returned")
    except DistributedError as err:
        assert "rank 1 of the group did not reach call 3" in str(err) and "rank 0" in str(err), str(err)
dist.barrier()
print(f"OK native_all_reduce rank {RANK}", flush=True)
