"""Run on 2 ranks: send and recv inside tk.jit. A ring exchange (each rank sends to the next and
receives from the previous, in an order that would deadlock if the compiler reordered the blocking
pair on one rank), computed on, gives what the eager functions give, on every call; a message
nothing reads is still sent."""
import warnings

import numpy as np

import tensorkiln as tk
import tensorkiln.distributed as dist

warnings.simplefilter("error")
dist.init()
RANK, SIZE = dist.rank(), dist.world_size()
NEXT, PREVIOUS = (RANK + 1) % SIZE, (RANK - 1) % SIZE


def exchange(x):
    """Rank 0 sends first then receives; rank 1 receives first then sends (the classic safe order)."""
    inbox = tk.zeros(x.shape[0], 3)
    if RANK == 0:
        dist.send(x * 2.0, NEXT, tag=7)
        dist.recv(inbox, PREVIOUS, tag=8)
    else:
        dist.recv(inbox, PREVIOUS, tag=7)
        dist.send(x * 2.0, NEXT, tag=8)
    return inbox.sum(1) + x.mean()


compiled = tk.jit(exchange)
for step in range(3):
    x = tk.tensor(np.full((4, 3), 10.0 * RANK + step, np.float32))
    got = compiled(x).numpy()
    other = 10.0 * PREVIOUS + step
    np.testing.assert_allclose(got, np.full(4, 3 * 2 * other + (10.0 * RANK + step)), rtol=1e-6,
                               err_msg=f"rank {RANK} step {step}")
    assert compiled.report(x).backend == "c"
names = [k.name for k in compiled.report(x).kernels]
assert any("send" in n for n in names) and any("recv" in n for n in names), names


def swap_int64_and_float64(a, b):  # 8-byte elements of two dtypes, both directions
    inbox_a, inbox_b = tk.zeros(a.shape, dtype=a.dtype), tk.zeros(b.shape, dtype=b.dtype)
    for value, inbox in ((a, inbox_a), (b, inbox_b)):
        if RANK == 0:
            dist.send(value, 1)
            dist.recv(inbox, 1)
        else:
            dist.recv(inbox, 0)
            dist.send(value, 0)
    return inbox_a + 1, inbox_b * 0.5


swap = tk.jit(swap_int64_and_float64)
ints = np.arange(6, dtype=np.int64).reshape(2, 3) + 2 ** 40 * (RANK + 1)
floats = np.linspace(0, 1, 5) + 1e-12 * (RANK + 1)
got_ints, got_floats = swap(tk.tensor(ints), tk.tensor(floats))
other = 1 - RANK
np.testing.assert_array_equal(got_ints.numpy(), np.arange(6, dtype=np.int64).reshape(2, 3) + 2 ** 40 * (other + 1) + 1)
np.testing.assert_array_equal(got_floats.numpy(), (np.linspace(0, 1, 5) + 1e-12 * (other + 1)) * 0.5)


def only_send(x):  # the result does not read the message: the graph keeps it anyway
    if RANK == 0:
        dist.send(x + 1.0, 1, tag=9)
    return x * 3.0


sender = tk.jit(only_send)
for step in range(2):
    value = np.full(5, float(step), np.float32)
    np.testing.assert_allclose(sender(tk.tensor(value)).numpy(), value * 3.0)
    if RANK == 1:
        inbox = np.zeros(5, np.float32)
        dist.recv(inbox, 0, tag=9)  # eager receive of the compiled send
        np.testing.assert_allclose(inbox, value + 1.0)
print(f"OK compiled_messages rank {RANK}")
