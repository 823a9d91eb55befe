"""The data-parallel workers of distributed.py, each run under mpiexec on every rank (`--worker NAME`):
compiled SGD steps with and without DDP, the bucket choices, the all-reduce paths, and PyTorch DDP over
gloo on the same ranks. Rank 0's figures go back to the driver as JSON (mpi_launches.py).
"""
from __future__ import annotations

import time

import numpy as np

from mpi_launches import mpi_rank_and_size
from tensorkiln.distributed.cost_model import Network

CNN_BATCH, BERT_BATCH, STEPS, WARMUP = 64, 16, 20, 3
QUIET_LINK = Network(3.5e-6, 1 / 11.8e9, "this machine's ranks, quiet")  # docs/distributed.md, Measured here


def digits_cnn(nn):
    """The digits CNN of examples/train_digits.py, for 8x8 images."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 2 * 2, 10))


def small_bert(tk, nn):
    """A two-class classifier on a small BERT (2 layers, width 128): the head reads the first token."""
    from tensorkiln.models import BertConfig, BertModel
    config = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=512, max_position_embeddings=64)

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = BertModel(config)
            self.head = nn.Linear(128, 2)

        def forward(self, ids):
            return self.head(self.bert(ids)[:, 0])
    return Classifier()


def model_of(model_name: str):
    """The model `model_name` ("cnn", "cnn_sync" or "bert"), its weights drawn after tk.manual_seed(0)
    ("cnn_sync" is the digits CNN: its batch norms are synchronized where DDP wraps it)."""
    import tensorkiln as tk
    from tensorkiln import nn
    tk.manual_seed(0)
    return digits_cnn(nn) if model_name.startswith("cnn") else small_bert(tk, nn)


def global_batch_of(model_name: str) -> int:
    """The global batch of `model_name`'s steps."""
    return CNN_BATCH if model_name.startswith("cnn") else BERT_BATCH


def sgd_step(trained, opt):
    """The compiled training step of `trained` (the model, or DDP around it): the loss, its backward
    pass and `opt`'s update."""
    import tensorkiln as tk
    import tensorkiln.nn.functional as F

    @tk.jit
    def step(x, y):
        loss = F.cross_entropy(trained(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step


def batches(model_name: str, global_batch: int):
    """The (inputs, labels) of every step, warm-up included: the same on every rank and every launch."""
    rng = np.random.default_rng(0)
    if model_name.startswith("cnn"):
        return [(rng.standard_normal((global_batch, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, global_batch))
                for _ in range(STEPS + WARMUP)]
    return [(rng.integers(0, 1000, (global_batch, 32)), rng.integers(0, 2, global_batch))
            for _ in range(STEPS + WARMUP)]


def worker_data_parallel(model_name: str, wrap: bool = True) -> dict:
    """Compiled SGD steps on this rank's share of a fixed global batch. On 2+ ranks three steps run in
    turns, step after step, in one launch, so the machine's load drifts alike under all three: the DDP
    step (its own model, for the loss curve), the same step without DDP (compute only) and rank 0 alone
    on the whole global batch (one process's step, the other ranks waiting at a barrier). For
    "cnn_sync" the DDP step's model has SyncBatchNorm in place of BatchNorm2d (the global batch's
    statistics, so its loss curve is one process's on the global batch); the other two keep BatchNorm2d."""
    import tensorkiln as tk
    import tensorkiln.distributed as dist
    from tensorkiln import nn
    dist.init(check_agreement=False)  # as the peers: no extra message per collective
    rank, size = dist.rank(), dist.world_size()
    global_batch = global_batch_of(model_name)

    def compiled_step(trained, parameters):
        return sgd_step(trained, tk.optim.SGD(parameters, lr=0.01, momentum=0.9))

    model = model_of(model_name)
    paired = wrap and size > 1
    if paired and model_name == "cnn_sync":
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    trained = nn.parallel.DistributedDataParallel(model) if paired else model
    step = compiled_step(trained, model.parameters())
    share = slice(rank * global_batch // size, (rank + 1) * global_batch // size)
    ways = {"ddp": (step, share)}
    if paired:
        plain_model = model_of(model_name)
        plain = compiled_step(plain_model, plain_model.parameters())
        ways.update({"without DDP": (plain, share), "one process": (plain, slice(0, global_batch))})
    times: dict[str, list[float]] = {name: [] for name in ways}
    losses = []
    data = batches(model_name, global_batch)
    for x, y in data:
        for name, (run, rows) in ways.items():
            dist.barrier()
            start = time.perf_counter()
            if name != "one process" or rank == 0:
                loss = run(x[rows], y[rows])
            if size > 1:
                dist.barrier()  # the step ends when the slowest rank's ends
            times[name].append(time.perf_counter() - start)
            if name == "ddp":
                losses.append(float(dist.all_reduce(tk.tensor(np.asarray(loss)), "mean").numpy()))
    grads = [p for p in model.parameters() if p.requires_grad]
    buckets = trained.buckets if paired else nn.parallel.buckets.plan_buckets(grads, 25 * 2 ** 20)
    bucket_bytes = [sum(p.numel() * 4 for p in b.params) for b in buckets]
    x, y = data[0]
    from tensorkiln.runtime import communicator
    result = {"step_seconds": float(np.median(times["ddp"][WARMUP:])), "losses": losses[WARMUP:],
              "bucket_bytes": bucket_bytes}
    for name, key in (("ddp", ""), ("without DDP", "compute_")):
        if name in ways:  # every rank: the profile runs the collectives
            mine = timeline(ways[name][0].profile(x[share], y[share], repeat=10), bucket_bytes)
            result[f"{key}timeline"] = mine
            result[f"{key}timelines"] = communicator.communicator(communicator.WORLD).allgather(mine)
    if paired:
        result["compute_step_seconds"] = float(np.median(times["without DDP"][WARMUP:]))
        result["one_process_step_seconds"] = float(np.median(times["one process"][WARMUP:]))
        # the ratio step by step (each 2-rank step against the one-process step beside it)
        result["paired_ratio"] = float(np.median(np.array(times["one process"][WARMUP:])
                                                 / np.array(times["ddp"][WARMUP:])))
    return result


def worker_bucket_choice(model_name: str = "bert") -> dict:
    """The same model's compiled step on 2 ranks five ways, in turns step after step: without DDP, DDP
    with one bucket (what DDP chooses where MPI has no background progress; its all-reduce through the
    ranks' shared memory), the same bucket through MPI's all-reduce at the wait
    (Channel.share_memory_without_progress = False) and started nonblocking (as before: also
    Channel.defer_without_progress = False), and DDP with the buckets it chose before, the link's size
    sqrt(N alpha / beta) for the link of this machine when quiet."""
    import tensorkiln as tk
    import tensorkiln.distributed as dist
    from tensorkiln import nn
    from tensorkiln.distributed.cost_model import bucket_bytes_for
    from tensorkiln.runtime.collective_channel import Channel
    dist.init(check_agreement=False)
    rank, size = dist.rank(), dist.world_size()
    model = model_of(model_name)
    global_batch = global_batch_of(model_name)
    total = sum(p.numel() * 4 for p in model.parameters() if p.requires_grad)
    link_cap_mb = bucket_bytes_for(total, QUIET_LINK, background_progress=True) / 2 ** 20
    ways = {"without DDP": model, "one bucket": nn.parallel.DistributedDataParallel(model, bucket_cap_mb=total),
            "the quiet link's buckets": nn.parallel.DistributedDataParallel(model, bucket_cap_mb=link_cap_mb)}
    opt = tk.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    steps = {name: sgd_step(trained, opt) for name, trained in ways.items()}
    through = {"one bucket": (True, True), "one bucket, MPI's all-reduce": (False, True),
               "one bucket, nonblocking start": (False, False)}  # (share memory, defer the start)
    for name in through:
        steps[name], ways[name] = steps["one bucket"], ways["one bucket"]
    share = slice(rank * global_batch // size, (rank + 1) * global_batch // size)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for x, y in batches(model_name, global_batch):
        for name, step in steps.items():
            Channel.share_memory_without_progress, Channel.defer_without_progress = through.get(name, (True, True))
            dist.barrier()
            start = time.perf_counter()
            step(x[share], y[share])
            dist.barrier()
            times[name].append(time.perf_counter() - start)
    return {name: {"step_seconds": float(np.median(t[WARMUP:])),
                   "buckets": len(ways[name].buckets) if name != "without DDP" else 0}
            for name, t in times.items()}


ALL_REDUCE_PATHS = {"shared memory": (True, True), "MPI at the wait": (False, True),
                    "MPI, nonblocking start": (False, False)}  # (share memory, defer the start)


def worker_all_reduce_paths(repeats: int = 60) -> dict:
    """A compiled all-reduce's start and wait (collective_channel.Channel, a mean of float32) of the CNN's
    and BERT's gradient bucket, three ways in turns, call after call: through the ranks' shared memory,
    through MPI's blocking all-reduce at the wait, and started nonblocking at the start (as before)."""
    import tensorkiln.distributed as dist
    from tensorkiln.runtime import communicator
    from tensorkiln.runtime.collective_channel import Channel
    dist.init(check_agreement=False)
    result = {}
    for name, count in (("cnn", 6138), ("bert", 533506)):  # the buckets' float32 elements
        fields = {"group": "world", "dtype": "float32", "in": str(count), "out": str(count), "reduction": "mean"}
        channel = Channel("all_reduce", fields)
        operand = np.random.default_rng(dist.rank()).standard_normal(count).astype(np.float32)
        output = np.empty_like(operand)
        times: dict[str, list[float]] = {way: [] for way in ALL_REDUCE_PATHS}
        for _ in range(repeats):
            for way, (share, defer) in ALL_REDUCE_PATHS.items():
                Channel.share_memory_without_progress, Channel.defer_without_progress = share, defer
                communicator.barrier()
                start = time.perf_counter()
                channel.start(operand.ctypes.data)
                channel.wait(output.ctypes.data)
                times[way].append(time.perf_counter() - start)
        result[name] = {"bytes": 4 * count, **{way: float(np.median(t[5:])) for way, t in times.items()}}
    Channel.share_memory_without_progress = Channel.defer_without_progress = True
    return result


def timeline(profile, bucket_bytes: list[int]) -> list[dict]:
    """The kernels of a profiled step in program order: compute kernels' times, and where each all-reduce
    starts and is waited for (the starts in bucket order: the kernels are numbered as traced). The
    gradient buckets' all-reduces are the last ones traced; any before them (SyncBatchNorm's statistics,
    a few hundred bytes) count as messages of no bytes: their latency alone."""
    starts = sorted((k.name for k in profile.kernels if k.name.endswith("all_reduce_start")),
                    key=lambda name: int(name[1:].split("_")[0]))
    bucket_starts = starts[len(starts) - len(bucket_bytes):] if bucket_bytes else []
    nbytes = {name.rsplit("_start", 1)[0]: n for name, n in zip(bucket_starts, bucket_bytes)}
    events = []
    for k in profile.kernels:
        if k.name.endswith(("all_reduce_start", "all_reduce_wait")):
            key, phase = k.name.rsplit("_", 1)
            events.append({"kind": phase, "key": key, "nbytes": nbytes.get(key, 0), "seconds": k.seconds})
        else:
            events.append({"kind": "compute", "seconds": k.seconds})
    return events


def worker_torch_ddp() -> dict:
    """The digits CNN in PyTorch, DistributedDataParallel over gloo, on the ranks mpiexec started."""
    import torch
    import torch.distributed as torch_dist
    from torch import nn
    torch.set_num_threads(1)
    rank, size = mpi_rank_and_size()
    torch_dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29533", rank=rank, world_size=size)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(digits_cnn(nn))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    share = slice(rank * CNN_BATCH // size, (rank + 1) * CNN_BATCH // size)
    times = []
    for x, y in batches("cnn", CNN_BATCH):
        x, y = torch.from_numpy(x[share]), torch.from_numpy(y[share])
        torch_dist.barrier()
        start = time.perf_counter()
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch_dist.barrier()
        times.append(time.perf_counter() - start)
    torch_dist.destroy_process_group()
    return {"step_seconds": float(np.median(times[WARMUP:]))}
