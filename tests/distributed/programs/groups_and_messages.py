"""Run on 4 ranks: subgroups (a 2 x 2 grid of tensor- and data-parallel groups) and point-to-point messages."""
import warnings

import numpy as np

import tensorkiln as tk
import tensorkiln.distributed as dist

warnings.simplefilter("error")
dist.init()
RANK, SIZE = dist.rank(), dist.world_size()
assert SIZE == 4, "run on 4 ranks"


def check(what, got, want):
    got = got.numpy() if isinstance(got, tk.Tensor) else np.asarray(got)
    if got.shape != np.shape(want) or not np.allclose(got, want):
        raise AssertionError(f"rank {RANK}: {what}: got {got}, want {want}")


# Ranks 0,1 | 2,3 are the rows (tensor parallel); 0,2 | 1,3 the columns (data parallel).
rows = [dist.new_group([0, 1]), dist.new_group([2, 3])]
columns = [dist.new_group([0, 2]), dist.new_group([1, 3])]
row, column = rows[RANK // 2], columns[RANK % 2]
assert (row.size, row.rank, column.rank) == (2, RANK % 2, RANK // 2)
x = np.arange(5, dtype=np.float32) + 10 * RANK
check("row all_reduce", dist.all_reduce(tk.tensor(x), group=row), 2 * np.arange(5) + 10 * (4 * (RANK // 2) + 1))
check("column all_gather", dist.all_gather(tk.tensor(x), group=column),
      np.concatenate([np.arange(5) + 10 * r for r in (RANK % 2, RANK % 2 + 2)]))
check("column broadcast", dist.broadcast(tk.tensor(x), src=RANK % 2 + 2, group=column),
      np.arange(5) + 10 * (RANK % 2 + 2))
compiled = tk.jit(lambda t: dist.all_reduce(t * 2, "max", group=row))
check("compiled row max", compiled(x), 2 * (np.arange(5) + 10 * (RANK // 2 * 2 + 1)))
try:
    dist.all_reduce(tk.tensor(x), group=rows[1 - RANK // 2])
    raise AssertionError("a collective over a group without this rank must fail")
except dist.DistributedError as err:
    assert f"rank {RANK} of 4" in str(err) and "not a member" in str(err), err

# point to point: a ring, each rank sending to the next and receiving from the previous
right, left = (RANK + 1) % SIZE, (RANK - 1) % SIZE
received = tk.zeros(3, 2)
dist.sendrecv(tk.full((3, 2), float(RANK)), right, received, left, tag=5)
check("sendrecv ring", received, np.full((3, 2), float(left)))
if RANK % 2 == 0:
    dist.send(tk.arange(7).to(tk.int64) * RANK, RANK + 1)
    work = dist.isend(np.full(4, RANK, np.float64), RANK + 1, tag=3)
    work.wait()
else:
    inbox = np.zeros(7, np.int64)
    dist.recv(inbox, RANK - 1)
    check("send/recv", inbox, np.arange(7) * (RANK - 1))
    buffer = tk.zeros(4, dtype=tk.float64)
    got = dist.irecv(buffer, RANK - 1, tag=3).wait()
    check("isend/irecv into a tensor", got, np.full(4, RANK - 1.0))
# a message of the wrong size is an error naming the rank, not a silent partial read
if RANK == 0:
    dist.send(np.zeros(3, np.float32), 1, tag=9)
elif RANK == 1:
    try:
        dist.recv(np.zeros(5, np.float32), 0, tag=9)
        raise AssertionError("a short message must be an error")
    except dist.DistributedError as err:
        assert "rank 1 of 4" in str(err), err
dist.barrier()
print(f"OK groups_and_messages rank {RANK}")
