"""Run on 2 ranks: SyncBatchNorm under DistributedDataParallel trains as BatchNorm on the global batch
does in one process (eager steps, then compiled steps), and no_sync() accumulates gradients locally until
the first backward after it."""
import warnings

import numpy as np

import tensorkiln as tk
import tensorkiln.distributed as dist
import tensorkiln.nn.functional as F
from tensorkiln import nn

warnings.simplefilter("error")
dist.init()
RANK, SIZE = dist.rank(), dist.world_size()
BATCH, STEPS = 8, 4


def make_model(seed):
    tk.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(),
                         nn.Linear(3 * 6 * 6, 5))


rng = np.random.default_rng(1)
images = (rng.standard_normal((STEPS * 2, BATCH, 1, 6, 6)) * 2 + 1).astype(np.float32)
labels = rng.integers(0, 5, (STEPS * 2, BATCH))

model = nn.SyncBatchNorm.convert_sync_batchnorm(make_model(seed=0))
assert isinstance(model[1], nn.SyncBatchNorm), model
ddp = nn.parallel.DistributedDataParallel(model)
opt = tk.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
shard = dist.DistributedSampler(BATCH, shuffle=False).indices()


def step(x, y):
    opt.zero_grad()
    loss = F.cross_entropy(ddp(x), y)
    loss.backward()
    opt.step()
    return loss


compiled_step = tk.jit(step)
for i in range(STEPS * 2):
    (step if i < STEPS else compiled_step)(tk.tensor(images[i][shard]), tk.tensor(labels[i][shard]))

reference = make_model(seed=0)
ref_opt = tk.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
for i in range(STEPS * 2):
    ref_opt.zero_grad()
    # the global batch's mean loss = the mean over ranks of each shard's mean loss (equal shards)
    F.cross_entropy(reference(tk.tensor(images[i])), tk.tensor(labels[i])).backward()
    ref_opt.step()
for (name, p), q in zip(model.named_parameters(), reference.parameters()):
    np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=2e-4, atol=2e-5, err_msg=f"rank {RANK}: {name}")
for name in ("running_mean", "running_var"):
    np.testing.assert_allclose(getattr(model[1], name).numpy(), getattr(reference[1], name).numpy(), rtol=1e-5,
                               atol=1e-6, err_msg=f"rank {RANK}: {name}")
model.eval()
np.testing.assert_allclose(model(tk.tensor(images[0])).numpy(), reference.eval()(tk.tensor(images[0])).numpy(),
                           rtol=2e-4, atol=2e-5)

# no_sync: two micro-batches accumulated locally, the second averaged with the first's gradients included
tk.manual_seed(3)
net = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
x = tk.tensor(rng.standard_normal((2, 2, 4)).astype(np.float32) + RANK)  # different data per rank
with net.no_sync():
    net(x[0]).sum().backward()
local = net.module.weight.grad.numpy().copy()
everyone = dist.all_gather(tk.tensor(local[None]), 0).numpy()
assert not np.allclose(everyone[0], everyone[1]), "inside no_sync gradients must stay local"
net(x[1]).sum().backward()
expected = dist.all_reduce(tk.tensor(local + x[1].numpy().sum(0)[None, :].repeat(2, 0)), "mean").numpy()
np.testing.assert_allclose(net.module.weight.grad.numpy(), expected, rtol=1e-5)
print(f"OK sync_batch_norm rank {RANK}")
