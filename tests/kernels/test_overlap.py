"""The order of kernels around runtime calls: each start as early as its inputs allow, waits late."""
import random

import pytest

from tensorkiln.kernels.overlap import overlapped_order
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import const
from tensorkiln.loops.ir import Kernel, NativeCall, Pointer, RuntimeCall


def buffer(name):
    return Buffer(name, "float32", (4,))


def compute(name, reads, writes):
    """A kernel that reads `reads` and writes `writes` (a stand-in for a loop nest)."""
    params = [buffer(b) for b in reads + writes]
    return Kernel(name, params, NativeCall("f", tuple(Pointer(b, const(0)) for b in params), tuple(writes)))


def collective(bucket, phase, reads, writes):
    what = f"all_reduce seq={bucket} dtype=float32 in=4 out=4 group=world reduction=mean phase={phase}"
    return Kernel(f"b{bucket}_{phase}", [buffer(b) for b in reads + writes],
                  RuntimeCall(what, tuple(buffer(b) for b in writes), tuple(buffer(b) for b in reads)))


def backward_with_buckets(layers):
    """A backward pass over `layers` layers, the last layer's gradient first; one bucket per layer's
    gradient, all started and waited for after the backward (as DDP records them), then the updates."""
    kernels, upstream = [], "loss"
    for layer in reversed(range(layers)):
        kernels.append(compute(f"grad_in{layer}", [upstream], [f"d{layer}"]))
        kernels.append(compute(f"grad_w{layer}", [upstream], [f"g{layer}"]))
        upstream = f"d{layer}"
    for layer in reversed(range(layers)):
        kernels.append(collective(layer, "start", [f"g{layer}"], []))
    for layer in reversed(range(layers)):
        kernels.append(collective(layer, "wait", [], [f"m{layer}"]))
        kernels.append(compute(f"update{layer}", [f"m{layer}"], [f"w{layer}"]))
    return kernels


def positions(order):
    return {k.name: i for i, k in enumerate(order)}


def check_topological(kernels, order):
    assert sorted(k.name for k in order) == sorted(k.name for k in kernels)
    at = positions(order)
    writer = {b: k.name for k in kernels for b in k.written_buffers()}
    for k in kernels:
        for p in k.params:
            if p.name in writer and p.name not in k.written_buffers():
                assert at[writer[p.name]] < at[k.name], (k.name, p.name)
        if k.name.endswith("_wait"):
            assert at[k.name.replace("_wait", "_start")] < at[k.name]


@pytest.mark.parametrize("layers", [1, 2, 3, 5])
def test_each_bucket_starts_as_soon_as_its_gradient_exists(layers):
    kernels = backward_with_buckets(layers)
    order = overlapped_order(kernels)
    check_topological(kernels, order)
    at = positions(order)
    for layer in range(layers):
        # nothing runs between a gradient and its bucket's start but other starts
        between = [k.name for k in order[at[f"grad_w{layer}"] + 1:at[f"b{layer}_start"]]]
        assert all(name.endswith("_start") for name in between), between
        if layer > 0:  # the backward of earlier layers still runs after this start: it overlaps
            assert at[f"b{layer}_start"] < at["grad_w0"]
    # every wait comes after the whole backward pass, and each only right before its update
    assert min(at[f"b{layer}_wait"] for layer in range(layers)) > at["grad_w0"]
    for layer in range(layers):
        assert at[f"update{layer}"] > at[f"b{layer}_wait"]


def test_random_graphs_keep_a_topological_order():
    rng = random.Random(0)
    for _ in range(50):
        kernels, made = [], ["x"]
        for i in range(rng.randint(1, 12)):
            if rng.random() < 0.3:
                kernels.append(collective(i, "start", [rng.choice(made)], []))
                kernels.append(compute(f"mid{i}", [rng.choice(made)], [f"t{i}"]))
                kernels.append(collective(i, "wait", [], [f"r{i}"]))
                made += [f"t{i}", f"r{i}"]
            else:
                kernels.append(compute(f"k{i}", [rng.choice(made), rng.choice(made)], [f"t{i}"]))
                made.append(f"t{i}")
        check_topological(kernels, overlapped_order(kernels))


def test_without_runtime_calls_the_order_is_unchanged():
    kernels = [compute("a", ["x"], ["y"]), compute("b", ["y"], ["z"]), compute("c", ["x"], ["w"])]
    assert overlapped_order(kernels) == kernels


def test_a_collective_that_overlaps_nothing_is_marked_to_run_blocking_at_its_wait():
    kernels = [compute("grad", ["x"], ["g0"]), collective(0, "start", ["g0"], []),
               collective(0, "wait", [], ["m0"]), compute("update", ["m0"], ["w0"])]
    order = overlapped_order(kernels)
    assert [k.name for k in order] == ["grad", "b0_start", "b0_wait", "update"]
    assert all(" overlap=none phase=" in k.body.what for k in order[1:3])
    # with a kernel between its halves it stays nonblocking, and the other one is marked
    kernels = [compute("g", ["x"], ["g0"]), collective(0, "start", ["g0"], []), compute("other", ["x"], ["y"]),
               compute("h", ["y"], ["g1"]), collective(1, "start", ["g1"], []),
               collective(0, "wait", [], ["m0"]), collective(1, "wait", [], ["m1"]), compute("u", ["m0", "m1"], ["w"])]
    order = overlapped_order(kernels)
    marked = {k.name for k in order if "overlap=none" in getattr(k.body, "what", "")}
    assert marked == {"b1_start", "b1_wait"}, [k.name for k in order]


def test_messages_keep_both_halves():
    def message(name, phase, reads, writes):
        what = f"send seq=1 dtype=float32 in=4 out= group=world peer=1 tag=0 phase={phase}"
        return Kernel(name, [buffer(b) for b in reads + writes],
                      RuntimeCall(what, tuple(buffer(b) for b in writes), tuple(buffer(b) for b in reads)))
    order = overlapped_order([message("s_start", "start", ["x"], []), message("s_wait", "wait", [], ["t"])])
    assert all("overlap=none" not in k.body.what for k in order)
