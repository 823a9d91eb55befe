"""Run on 2+ ranks: compiled collectives through both runtime paths, against numpy and across ranks.

A collective with no kernel between its start and its wait runs as one blocking call at the wait
(`overlap=none`); one with compute between runs nonblocking; float32 and int32 take the
preallocated channel (runtime/collective_channel.py), bfloat16 and a gather along an inner axis
the general path. Each compiled function runs twice on new values, so a channel's buffer is
reused, three ways: through memory the ranks share (the default here: one node, no progress thread),
through MPI's all-reduce at the wait, and with MPI's nonblocking start. A blocking all-reduce reads its
operand in place: from memory apart from the output's, the same memory, or memory that partly
overlaps it. Prints 'OK channels rank r'.
"""
import re
import warnings

import numpy as np

import tensorkiln as tk
import tensorkiln.distributed as dist
from tensorkiln.runtime.collective_channel import Channel

warnings.simplefilter("error")  # a compiled graph must not fall back to the interpreter
dist.init()
RANK, SIZE = dist.rank(), dist.world_size()
SHAPES = [(1,), (3, 1, 17)]  # a size-1 tensor; odd sizes with a size-1 axis and a tail past a vector


def value(rank, shape, dtype, salt):
    rng = np.random.default_rng(1000 * rank + salt)
    if dtype == "int32":
        return rng.integers(-50, 50, shape).astype(np.int32)
    return rng.standard_normal(shape).astype(np.float32)  # bfloat16 inputs are rounded by tk.tensor


def collectives(x):
    """Every collective a channel may serve, and the general path's cases, of one operand."""
    results = [dist.all_reduce(x, "sum"), dist.all_reduce(x, "max"), dist.all_gather(x, dim=0),
               dist.all_gather(x, dim=x.ndim - 1), dist.broadcast(x, src=SIZE - 1)]
    if x.dtype != tk.int32:
        results.append(dist.all_reduce(x, "mean"))
    return results


def expected(inputs, dtype):
    stack = np.stack(inputs)
    want = [stack.sum(0), stack.max(0), np.concatenate(inputs, 0), np.concatenate(inputs, -1), inputs[-1]]
    if dtype != "int32":
        want.append(stack.mean(0))
    return want


def runtime_calls(source_path):
    """The descriptions the generated code hands the runtime hook."""
    with open(source_path) as f:
        return re.findall(r'tk_runtime_hook\("([^"]*)"', f.read())


adjacent = tk.jit(lambda x: collectives(x * 1))


def overlapped(x, y):
    """The same collectives with a computation that needs none of them: it runs between their halves."""
    busy = (y @ y.T).tanh().sum()
    return collectives(x * 1) + [busy]


overlapped = tk.jit(overlapped)
y = np.random.default_rng(7).standard_normal((48, 48)).astype(np.float32)

for dtype in ("float32", "int32", "bfloat16"):
    tolerance = {"float32": 1e-6, "int32": 0, "bfloat16": 1e-2}[dtype]
    for shape in SHAPES:
        for salt in (1, 2):  # twice: the second call reuses each channel's buffer
            inputs = [tk.tensor(value(r, shape, dtype, salt)).to(getattr(tk, dtype)) for r in range(SIZE)]
            arrays = [t.to(tk.float32).numpy().astype(np.float64) for t in inputs]
            want = expected(arrays, dtype)
            calls = [(name, function, args, share, defer)
                     for name, function, args in (("adjacent", adjacent, (inputs[RANK],)),
                                                  ("overlapped", overlapped, (inputs[RANK], tk.tensor(y))))
                     for share, defer in ((True, True), (False, True), (False, False))]
            for name, function, args, share, defer in calls:
                Channel.share_memory_without_progress, Channel.defer_without_progress = share, defer
                got = function(*args)
                got = got[:len(want)] if name == "overlapped" else got
                for i, (g, w) in enumerate(zip(got, want)):
                    g = g.to(tk.float32).numpy().astype(np.float64)
                    assert g.shape == w.shape, (name, dtype, shape, i, g.shape, w.shape)
                    np.testing.assert_allclose(g, w, rtol=tolerance, atol=tolerance,
                                               err_msg=f"rank {RANK}: {name} {dtype} {shape} result {i}")
                    # every rank holds the same bits
                    everyone = dist.all_gather(tk.tensor(g[None]), dim=0).numpy()
                    assert (everyone == everyone[0]).all(), (name, dtype, shape, i)
            hooks = runtime_calls(adjacent.report(inputs[RANK]).source_path)
            assert len(hooks) == 2 * len(want) and all("overlap=none" in h for h in hooks), hooks  # one blocking call
            hooks = runtime_calls(overlapped.report(inputs[RANK], tk.tensor(y)).source_path)
            assert len(hooks) == 2 * len(want) and not any("overlap=none" in h for h in hooks), hooks  # nonblocking
Channel.share_memory_without_progress = Channel.defer_without_progress = True


def blocking_all_reduce_in_place(reduction: str, count: int, shift: int) -> None:
    """A blocking channel all-reduce of `count` float32 from offset 0 of a buffer into offset `shift`:
    0 is the same memory, under `count` partly overlapping memory, else memory apart; against numpy,
    and every rank holds the same bits."""
    fields = {"group": "world", "dtype": "float32", "in": str(count), "out": str(count),
              "reduction": reduction, "overlap": "none"}
    channel = Channel("all_reduce", fields)
    for salt in (1, 2):
        mine = [value(r, (count,), "float32", salt + 10 * shift) for r in range(SIZE)]
        memory = np.zeros(count + shift, np.float32)
        memory[:count] = mine[RANK]
        channel.start(memory.ctypes.data)
        assert channel.shares_memory, "ranks on one node without a progress thread share the all-reduce's memory"
        channel.wait(memory.ctypes.data + 4 * shift)
        stack = np.stack(mine).astype(np.float64)
        total = {"sum": stack.sum(0), "mean": stack.mean(0), "max": stack.max(0), "min": stack.min(0),
                 "prod": stack.prod(0)}[reduction]
        np.testing.assert_allclose(memory[shift:], total, rtol=1e-5, atol=1e-6,
                                   err_msg=f"rank {RANK}: blocking all_reduce {reduction} shift {shift}")
        everyone = dist.all_gather(tk.tensor(memory[None, shift:].copy()), dim=0).numpy()
        assert (everyone == everyone[0]).all(), (reduction, count, shift)


for share in (True, False):
    Channel.share_memory_without_progress = share
    for reduction in ("sum", "mean", "max", "min", "prod"):
        # 9001 float32 (36 KB) go through shared memory in two phases (a part per rank), 17 in one
        for count, shift in ((17, 0), (17, 5), (17, 17), (1, 0), (1, 3), (9001, 0), (9001, 4000), (9001, 9001)):
            blocking_all_reduce_in_place(reduction, count, shift)


def shared_calls_back_to_back(count: int, calls: int = 200) -> None:
    """Many calls of one shared all-reduce with nothing between them: each rank's slot is rewritten as
    soon as the sequence flags allow, and every call still gives numpy's sum on every rank, the same bits."""
    fields = {"group": "world", "dtype": "float32", "in": str(count), "out": str(count), "reduction": "sum",
              "overlap": "none"}
    channel = Channel("all_reduce", fields)
    out = np.empty(count, np.float32)
    for call in range(calls):
        mine = [value(r, (count,), "float32", 100 + call) for r in range(SIZE)]
        channel.start(mine[RANK].ctypes.data)
        channel.wait(out.ctypes.data)
        want = np.zeros(count, np.float32)
        for m in mine:  # rank order, float32: the bits every rank must hold
            want += m
        assert (out == want).all(), f"rank {RANK}: call {call} of a {count}-element shared all_reduce"


Channel.share_memory_without_progress = True
for count in (3, 9001):
    shared_calls_back_to_back(count)


def a_missing_rank_is_named() -> None:
    """A rank that never reaches a shared all-reduce makes the others raise, naming it, not hang."""
    fields = {"group": "world", "dtype": "float32", "in": "5", "out": "5", "reduction": "sum", "overlap": "none"}
    channel = Channel("all_reduce", fields)
    x = np.ones(5, np.float32)
    channel.start(x.ctypes.data)  # every rank connects (collective setup)
    channel.wait(x.ctypes.data)
    channel._shared.wait_timeout_seconds = 0.5
    for flags in (channel._shared.arrived, channel._shared.reduced, channel._shared.done):
        flags.timeout = 0.5
    if RANK == 0:  # the shared segment's own call (a channel's start would first check agreement over MPI)
        try:
            channel._shared.run(x)
        except tk.errors.DistributedError as err:
            assert f"rank 0 of {SIZE}" in str(err) and "rank 1 of the group did not reach call 2" in str(err), err
        else:
            raise AssertionError("rank 0 went on without rank 1")
    dist.barrier()


a_missing_rank_is_named()
print(f"OK channels rank {RANK}")
