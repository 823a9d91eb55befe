"""Run on 2 ranks: DistributedDataParallel training equals one process training on the global batch.

A small CNN, different initial weights per rank (DDP must broadcast rank 0's), the batch
sharded by DistributedSampler; 6 SGD-momentum steps eagerly, then 6 more as a compiled
training step (its graph holds the buckets' all-reduces), against the same steps on one process.
"""
import warnings

import numpy as np

import tensorkiln as tk
import tensorkiln.distributed as dist
import tensorkiln.nn.functional as F
from tensorkiln import nn

warnings.simplefilter("error")
dist.init()
RANK, SIZE = dist.rank(), dist.world_size()
BATCH, STEPS = 12, 6


def make_model(seed):
    tk.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 4 * 4, 10))


rng = np.random.default_rng(0)
images = rng.standard_normal((STEPS * 2, BATCH, 1, 8, 8)).astype(np.float32)
labels = rng.integers(0, 10, (STEPS * 2, BATCH))

model = make_model(seed=RANK)
ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)  # ~1 KB: several buckets
assert len(ddp.buckets) > 1 and ddp.module is model
opt = tk.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
shard = dist.DistributedSampler(BATCH, shuffle=False).indices()


def step(x, y):
    opt.zero_grad()
    loss = F.cross_entropy(ddp(x), y)
    loss.backward()
    opt.step()
    return loss


compiled_step = tk.jit(step)
losses = []
for i in range(STEPS * 2):
    run = step if i < STEPS else compiled_step
    losses.append(float(dist.all_reduce(run(tk.tensor(images[i][shard]), tk.tensor(labels[i][shard])),
                                        "mean").numpy()))
report = compiled_step.report(tk.tensor(images[0][shard]), tk.tensor(labels[0][shard]))
assert report.backend == "c", report.backend
names = [k.name for k in report.kernels]
starts = [i for i, name in enumerate(names) if name.endswith("all_reduce_start")]
waits = [i for i, name in enumerate(names) if name.endswith("all_reduce_wait")]
assert len(starts) == len(waits) == len(ddp.buckets), names
# the first bucket (the last layer's gradients) starts before the backward pass is over
assert any(not name.endswith(("_start", "_wait")) for name in names[starts[0]:waits[-1]]), names

reference = make_model(seed=0)
ref_opt = tk.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
ref_losses = []
for i in range(STEPS * 2):
    ref_opt.zero_grad()
    loss = F.cross_entropy(reference(tk.tensor(images[i])), tk.tensor(labels[i]))
    loss.backward()
    ref_opt.step()
    ref_losses.append(float(loss.numpy()))

np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, err_msg=f"rank {RANK}: loss curves")
for (name, p), q in zip(model.named_parameters(), reference.parameters()):
    np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"rank {RANK}: {name}")
print(f"OK data_parallel rank {RANK} final loss {losses[-1]:.6f}")
