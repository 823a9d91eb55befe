"""Data and tensor parallelism on 1 and 2 MPI ranks (one OpenMP thread each), PyTorch DDP (gloo) on the
same 2 processes, a ping-pong fit of the alpha-beta model, and the model's predictions checked against
the 2-rank step times and extended to 8-1,024 ranks on a stated network.

    python benchmarks/distributed.py [--json out.json] [--rounds 2] [--plot docs/distributed_scaling.png]
    python benchmarks/distributed.py --ping-pong-only [--rounds 3]   # alpha and beta per wait policy

Each measurement is its own `mpiexec` launch of this script in a worker mode (`--worker ...`), and the
1- and 2-rank launches alternate, `--rounds` times; a figure is the median over rounds of each launch's
median step time, launched as `tensorkiln launch` does (`--wait auto`: on 2 cores, 2 ranks of one thread
spin while they wait). The ping-pong runs under each wait policy (yield: the launcher's former default).
The 2-rank DDP launch times, in turns with its DDP step, the same step without DDP and rank 0 alone on
the whole global batch (one process's step), so the throughput ratio is also taken step by step within
one launch, which a drift of the load between launches moves less. The alpha-beta model of a DDP step
replays the step's own kernel timelines (`step.profile` on each rank: each kernel's time, where each
bucket's all-reduce starts and is waited for) through cost_model.predict_overlapped_ranks and adds what
the all-reduces cost there to the step without DDP timed in the same launch, together with the compute
DDP adds (the DDP step's kernels less the plain step's, both profiled there). BERT's step also runs four
ways in turns in one launch (without DDP, one bucket, one bucket started nonblocking, the quiet link's
buckets). Beside the tensor-parallel decode: STREAM's kernels in C (stream_kernels.py: copy, add, triad,
and a read-only pass with and without software prefetch) on 1 and 2 processes at once, the roofline and
the equal-efficiency ceiling they give, one token's step split into its matrix-vector kernels (and the
bandwidth they reach), collectives, other kernels and the Python around the call, the share of the
weights on 2 MiB pages, and the collectives of one token's step.
All in float32.
The ranks skip the agreement check of each collective
(dist.init(check_agreement=False)), as the peers do not make one.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

from common import machine_summary, print_table  # noqa: E402
from tensorkiln.distributed.cost_model import (Network, TimelineEvent, amdahl_serial_fraction,  # noqa: E402
                                               all_reduce_seconds, predict_data_parallel_step,
                                               predict_overlapped_ranks)
from mpi_launches import launch as launch_worker  # noqa: E402
from mpi_launches import median_of, mpi_rank_and_size, worker_ping_pong, write_result  # noqa: E402
from stream_kernels import BYTES_PER_ELEMENT as STREAM_BYTES  # noqa: E402
from stream_kernels import KERNELS as STREAM_KERNELS  # noqa: E402
from stream_kernels import StreamKernels  # noqa: E402

CNN_BATCH, BERT_BATCH, STEPS, WARMUP = 64, 16, 20, 3
STATED_NETWORK = Network.from_link(100, 2.0)  # 100 Gb/s, 2 us: an InfiniBand-class cluster link
QUIET_LINK = Network(3.5e-6, 1 / 11.8e9, "this machine's ranks, quiet")  # docs/distributed.md, Measured here


# ---- the workers (run under mpiexec) ---------------------------------------------------------------

def digits_cnn(nn):
    """The digits CNN of examples/train_digits.py, for 8x8 images."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 2 * 2, 10))


def small_bert(tk, nn):
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


def batches(model_name: str, global_batch: int):
    rng = np.random.default_rng(0)
    if model_name == "cnn":
        return [(rng.standard_normal((global_batch, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, global_batch))
                for _ in range(STEPS + WARMUP)]
    return [(rng.integers(0, 1000, (global_batch, 32)), rng.integers(0, 2, global_batch))
            for _ in range(STEPS + WARMUP)]


def worker_data_parallel(model_name: str, wrap: bool = True) -> dict:
    """Compiled SGD steps on this rank's share of a fixed global batch. On 2+ ranks three steps run in
    turns, step after step, in one launch, so the machine's load drifts alike under all three: the DDP
    step (its own model, for the loss curve), the same step without DDP (compute only) and rank 0 alone
    on the whole global batch (one process's step, the other ranks waiting at a barrier)."""
    import tensorkiln as tk
    import tensorkiln.distributed as dist
    import tensorkiln.nn.functional as F
    from tensorkiln import nn
    dist.init(check_agreement=False)  # as the peers: no extra message per collective
    rank, size = dist.rank(), dist.world_size()
    global_batch = CNN_BATCH if model_name == "cnn" else BERT_BATCH

    def build():
        tk.manual_seed(0)
        return digits_cnn(nn) if model_name == "cnn" else small_bert(tk, nn)

    def compiled_step(trained, parameters):
        opt = tk.optim.SGD(parameters, lr=0.01, momentum=0.9)

        @tk.jit
        def step(x, y):
            loss = F.cross_entropy(trained(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        return step

    model = build()
    paired = wrap and size > 1
    trained = nn.parallel.DistributedDataParallel(model) if paired else model
    step = compiled_step(trained, model.parameters())
    share = slice(rank * global_batch // size, (rank + 1) * global_batch // size)
    ways = {"ddp": (step, share)}
    if paired:
        plain_model = build()
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
    import tensorkiln.nn.functional as F
    from tensorkiln import nn
    from tensorkiln.distributed.cost_model import bucket_bytes_for
    from tensorkiln.runtime.collective_channel import Channel
    dist.init(check_agreement=False)
    rank, size = dist.rank(), dist.world_size()
    tk.manual_seed(0)
    model = digits_cnn(nn) if model_name == "cnn" else small_bert(tk, nn)
    global_batch = CNN_BATCH if model_name == "cnn" else BERT_BATCH
    total = sum(p.numel() * 4 for p in model.parameters() if p.requires_grad)
    link_cap_mb = bucket_bytes_for(total, QUIET_LINK, background_progress=True) / 2 ** 20
    ways = {"without DDP": model, "one bucket": nn.parallel.DistributedDataParallel(model, bucket_cap_mb=total),
            "the quiet link's buckets": nn.parallel.DistributedDataParallel(model, bucket_cap_mb=link_cap_mb)}
    opt = tk.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def compiled_step(trained):
        @tk.jit
        def step(x, y):
            loss = F.cross_entropy(trained(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        return step
    steps = {name: compiled_step(trained) for name, trained in ways.items()}
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
    starts and is waited for (the starts in bucket order: the kernels are numbered as traced)."""
    starts = sorted((k.name for k in profile.kernels if k.name.endswith("all_reduce_start")),
                    key=lambda name: int(name[1:].split("_")[0]))
    nbytes = {name.rsplit("_start", 1)[0]: n for name, n in zip(starts, bucket_bytes)}
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


def worker_gpt2_decode(tokens: int = 16) -> dict:
    """Per-token decode latency of GPT-2 small, split over every rank (tensor_parallel = world size)."""
    import tensorkiln as tk
    import tensorkiln.distributed as dist
    from tensorkiln.models import GPT2Config, GPT2LMHeadModel
    dist.init(check_agreement=False)  # as the peers: no extra message per collective
    size = dist.world_size()
    tk.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(), tensor_parallel=size)
    prompt = np.random.default_rng(0).integers(0, 50257, (1, 8))
    with tk.no_grad():
        prefill = tk.jit(model.prefill)
        # the greedy step: the argmax inside the compiled call (vocab-parallel on 2 ranks: two all-reduces
        # of one value instead of gathering 50257 logits); its token is the next call's argument as it is
        step = tk.jit(model.decode_greedy_step, donate_argnums=2)
        logits, caches = prefill(tk.tensor(prompt), 8 + tokens + WARMUP + 1)
        token = tk.tensor(logits[:, -1].argmax(-1).numpy().reshape(1, 1))
        times, calls, chosen = [], [], []
        for i in range(tokens + WARMUP):
            dist.barrier()
            start = time.perf_counter()
            position = tk.tensor(np.int64(8 + i))
            called = time.perf_counter()
            token, caches = step(token, position, caches)
            calls.append(time.perf_counter() - called)
            chosen.append(int(token.numpy()[0, 0]))
            times.append(time.perf_counter() - start)
        last = (token, tk.tensor(np.int64(8 + tokens + WARMUP - 1)), caches)
        kernels = step.report(*last).kernels
        profile = step.profile(*last, repeat=5)
        # the logits of the next position, to compare 1 and 2 ranks (the step that returns them)
        logits, _ = tk.jit(model.decode_step)(token, tk.tensor(np.int64(8 + tokens + WARMUP)), caches)
    # the collectives of one token's compiled step, by op (each is a start and a wait kernel)
    collectives: dict[str, int] = {}
    for k in kernels:
        if k.name.endswith("_start"):
            op = k.name.split("_", 1)[1].rsplit("_", 1)[0]
            collectives[op] = collectives.get(op, 0) + 1
    # what one token reads: every weight of this rank's shard once (the position table: one row)
    weight_bytes = sum(p.numel() * p.dtype.itemsize for p in model.parameters())
    all_ranks_bytes = float(dist.all_reduce(tk.tensor(np.float64(weight_bytes))).numpy())
    token_seconds, call_seconds = float(np.median(times[WARMUP:])), float(np.median(calls[WARMUP:]))
    return {"token_seconds": token_seconds, "tokens": chosen, "logits": logits.numpy().tolist(),
            "weight_bytes_per_rank": weight_bytes, "weight_bytes_all_ranks": all_ranks_bytes,
            "collectives_per_token": collectives, "layers": model.config.n_layer,
            "breakdown": decode_breakdown(profile, token_seconds, call_seconds, weight_bytes),
            "huge_page_share": huge_page_share([p._value for p in model.parameters()])}


def worker_stream(elements: int = 16 * 2 ** 20, repeats: int = 20) -> dict:
    """Memory bandwidth with every rank streaming at once: STREAM's copy, add and triad, and a read-only
    pass (the decode's traffic) plain and with software prefetch (stream_kernels.py), on float32 arrays
    of 64 MiB each (twice the L3), in turns pass after pass. The ranks start each pass together (a
    barrier); a kernel's bandwidth is all ranks' bytes over its median pass."""
    import tensorkiln.distributed as dist
    from tensorkiln.runtime import communicator
    dist.init(check_agreement=False)
    kernels = StreamKernels(elements)
    times: dict[str, list[float]] = {kind: [] for kind in STREAM_KERNELS}
    for _ in range(repeats):
        for kind in times:
            communicator.barrier()
            start = time.perf_counter()
            kernels.run(kind)
            communicator.barrier()  # the pass ends when the slowest rank's ends
            times[kind].append(time.perf_counter() - start)
    result = {f"{kind}_bandwidth": STREAM_BYTES[kind] * elements * dist.world_size() / float(np.median(t[3:]))
              for kind, t in times.items()}
    result["bandwidth"] = result["add_bandwidth"]  # the roofline's: add's traffic, 2 reads and 1 write
    result["huge_page_share"] = huge_page_share([kernels.a, kernels.b, kernels.c])
    return result


def huge_page_share(arrays: list[np.ndarray]) -> float:
    """The share of the arrays' bytes that Linux holds in 2 MiB pages (numpy asks for them,
    madvise(MADV_HUGEPAGE), on every large array): each memory mapping's AnonHugePages over its resident
    bytes, weighted by the arrays' bytes inside it (/proc/self/smaps)."""
    mappings, current = [], None
    try:
        with open("/proc/self/smaps") as f:
            for line in f:
                head = line.split()
                if "-" in head[0] and len(head) >= 5:  # a mapping's first line: start-end perms ...
                    start, end = (int(v, 16) for v in head[0].split("-"))
                    current = {"start": start, "end": end, "rss": 0, "huge": 0}
                    mappings.append(current)
                elif head[0] == "Rss:":
                    current["rss"] = int(head[1])
                elif head[0] == "AnonHugePages:":
                    current["huge"] = int(head[1])
    except (OSError, IndexError, ValueError, TypeError):
        return float("nan")
    total = huge = 0.0
    for array in arrays:
        lo, hi = array.ctypes.data, array.ctypes.data + array.nbytes
        for m in mappings:
            inside = min(hi, m["end"]) - max(lo, m["start"])
            if inside > 0:
                total += inside
                huge += inside * (m["huge"] / m["rss"] if m["rss"] else 0.0)
    return huge / total if total else float("nan")


def decode_breakdown(profile, token_seconds: float, call_seconds: float, weight_bytes: float) -> dict:
    """Where a decode step's time goes, from its kernel profile: the matrix-vector products (contraction
    kernels: the bandwidth they reach reading this rank's weights), the collectives (starts and waits:
    the all-reduces' latency and the wait for the other rank), the rest; and from the timed tokens, the
    Python around the compiled call (the token's tensors, the argmax of the logits, the loop)."""
    contraction = [k for k in profile.kernels if k.kind == "contraction"]
    collective = [k for k in profile.kernels if k.name.endswith(("_start", "_wait"))]
    largest = max(contraction, key=lambda k: k.seconds)
    gemv = sum(k.seconds for k in contraction)
    waits = sum(k.seconds for k in collective)
    return {"gemv_ms": gemv * 1e3, "gemv_GBps": weight_bytes / gemv / 1e9, "collectives_ms": waits * 1e3,
            "other_kernels_ms": (profile.total_seconds - gemv - waits) * 1e3,
            "call_ms": call_seconds * 1e3, "outside_call_ms": (token_seconds - call_seconds) * 1e3,
            "largest_kernel": largest.name, "largest_kernel_ms": largest.seconds * 1e3}


WORKERS = {"cnn": lambda: worker_data_parallel("cnn"), "bert": lambda: worker_data_parallel("bert"),
           "torch_ddp": worker_torch_ddp,
           "ping_pong": worker_ping_pong, "gpt2_decode": worker_gpt2_decode, "stream": worker_stream,
           "bert_buckets": worker_bucket_choice, "all_reduce_paths": worker_all_reduce_paths}


def run_worker(name: str, path: str) -> None:
    write_result(WORKERS[name](), path)


# ---- the driver -----------------------------------------------------------------------------------

def launch(name: str, ranks: int, wait: str = "auto") -> dict:
    """One launch of worker `name` as `tensorkiln launch --wait WAIT` makes it (1 thread per rank)."""
    return launch_worker(__file__, name, ranks, wait)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=sorted(WORKERS))
    parser.add_argument("--result", default=None, help="(a worker) where rank 0 writes its figures")
    parser.add_argument("--json", default=None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--plot", default=None, help="write the predicted scaling curves here (needs matplotlib)")
    parser.add_argument("--ping-pong-only", action="store_true",
                        help="only the ping-pong, under each wait policy (spin, yield), --rounds times in turn")
    args = parser.parse_args()
    if args.worker:
        run_worker(args.worker, args.result)
        return 0
    print(f"machine: {machine_summary()}; 1 OpenMP thread per rank; float32")
    if args.ping_pong_only:
        return compare_wait_policies(args.rounds, args.json)
    runs: dict[str, list[dict]] = {}
    plan = [("ping_pong", 2, "yield"), ("ping_pong", 2, "auto"), ("cnn", 1, "auto"), ("cnn", 2, "auto"),
            ("torch_ddp", 2, "auto"), ("torch_ddp", 1, "auto"), ("bert", 1, "auto"), ("bert", 2, "auto"),
            ("bert_buckets", 2, "auto"), ("all_reduce_paths", 2, "auto"), ("stream", 1, "auto"), ("stream", 2, "auto"), ("gpt2_decode", 1, "auto"),
            ("gpt2_decode", 2, "auto")]
    for round_ in range(args.rounds):  # the 1- and 2-rank launches alternate, round after round
        for name, ranks, wait in plan:
            if name == "ping_pong" and round_:
                continue
            key = f"{name}@{ranks}" + ("/yield" if wait == "yield" else "")
            runs.setdefault(key, []).append(launch(name, ranks, wait))
    net_fit, yield_fit = runs["ping_pong@2"][0], runs["ping_pong@2/yield"][0]
    net = Network(net_fit["alpha"], net_fit["beta"], "ping-pong here")
    results = {"network": {"alpha_us": net.alpha * 1e6, "bandwidth_GBps": net.bandwidth / 1e9,
                           "points": net_fit["points"], "all_reduce_8_bytes_us": net_fit["all_reduce_8_bytes"] * 1e6,
                           "yield_alpha_us": yield_fit["alpha"] * 1e6,
                           "yield_all_reduce_8_bytes_us": yield_fit["all_reduce_8_bytes"] * 1e6}}
    rows = []
    for model in ("cnn", "bert"):
        one, two = median_of(runs[f"{model}@1"], "step_seconds"), median_of(runs[f"{model}@2"], "step_seconds")
        compute = median_of(runs[f"{model}@2"], "compute_step_seconds")
        alone = median_of(runs[f"{model}@2"], "one_process_step_seconds")
        paired = median_of(runs[f"{model}@2"], "paired_ratio")
        buckets = runs[f"{model}@2"][0]["bucket_bytes"]
        without_overlap = predict_data_parallel_step(compute, buckets, 2, net).step_seconds
        predicted = model_overlapped_step(runs[f"{model}@2"], net)
        curve_one, curve_two = np.array(runs[f"{model}@1"][0]["losses"]), np.array(runs[f"{model}@2"][0]["losses"])
        drift = float(np.max(np.abs(curve_two - curve_one) / np.abs(curve_one)))
        results[model] = {"one_rank_step_ms": one * 1e3, "two_rank_step_ms": two * 1e3,
                          "throughput_ratio": one / two, "two_rank_compute_ms": compute * 1e3,
                          "in_turns_one_process_step_ms": alone * 1e3, "in_turns_throughput_ratio": paired,
                          "model_two_rank_step_ms": predicted * 1e3, "model_error": predicted / two - 1,
                          "model_without_overlap_ms": without_overlap * 1e3, "buckets": buckets,
                          "gradient_bytes": sum(buckets), "loss_curve_max_relative_difference": drift,
                          "amdahl_serial_fraction": amdahl_serial_fraction(one / two, 2)}
        rows.append([model, f"{one * 1e3:.2f}", f"{two * 1e3:.2f}", f"{one / two:.2f}x", f"{alone * 1e3:.2f}",
                     f"{paired:.2f}x", f"{compute * 1e3:.2f}",
                     str(len(buckets)), f"{predicted * 1e3:.2f}", f"{100 * (predicted / two - 1):+.0f}%",
                     f"{without_overlap * 1e3:.2f}", f"{drift:.1e}"])
    torch_two = median_of(runs["torch_ddp@2"], "step_seconds")
    results["torch_ddp_gloo"] = {"two_rank_step_ms": torch_two * 1e3,
                                 "one_rank_step_ms": median_of(runs["torch_ddp@1"], "step_seconds") * 1e3,
                                 "tensorkiln_speedup": torch_two / median_of(runs["cnn@2"], "step_seconds")}
    gpt_one, gpt_two = median_of(runs["gpt2_decode@1"], "token_seconds"), median_of(runs["gpt2_decode@2"],
                                                                                    "token_seconds")
    same_tokens = runs["gpt2_decode@1"][0]["tokens"] == runs["gpt2_decode@2"][0]["tokens"]
    logits_one, logits_two = (np.array(runs[f"gpt2_decode@{n}"][0]["logits"]) for n in (1, 2))
    logit_error = float(np.max(np.abs(logits_two - logits_one)) / np.max(np.abs(logits_one)))
    stream_one, stream_two = median_of(runs["stream@1"], "bandwidth"), median_of(runs["stream@2"], "bandwidth")
    roofline = decode_roofline(runs["gpt2_decode@1"][0]["weight_bytes_all_ranks"], gpt_one, gpt_two, stream_one,
                               stream_two)
    results["gpt2_tensor_parallel_decode"] = {"one_rank_token_ms": gpt_one * 1e3, "two_rank_token_ms": gpt_two * 1e3,
                                              "speedup": gpt_one / gpt_two, "same_tokens": same_tokens,
                                              "logits_relative_error": logit_error,
                                              "collectives_per_token": runs["gpt2_decode@2"][0]["collectives_per_token"],
                                              **roofline}
    stream = {f"{kind}_{n}": median_of(runs[f"stream@{n}"], f"{kind}_bandwidth") / 1e9
              for kind in STREAM_KERNELS for n in (1, 2)}
    breakdown = {n: {key: float(np.median([r["breakdown"][key] for r in runs[f"gpt2_decode@{n}"]]))
                     for key in runs[f"gpt2_decode@{n}"][0]["breakdown"] if key != "largest_kernel"}
                 for n in (1, 2)}
    huge_pages = {n: median_of(runs[f"gpt2_decode@{n}"], "huge_page_share") for n in (1, 2)}
    results["gpt2_tensor_parallel_decode"].update({"stream_GBps": stream, "breakdown": breakdown,
                                                   "weights_on_huge_pages": huge_pages})
    print(f"\nping-pong, --wait auto (spinning on an idle machine): alpha {net.alpha * 1e6:.1f} us, bandwidth "
          f"{net.bandwidth / 1e9:.2f} GB/s; 8-byte all_reduce {net_fit['all_reduce_8_bytes'] * 1e6:.1f} us")
    print(f"ping-pong, waiting ranks yield (--wait yield): alpha {yield_fit['alpha'] * 1e6:.1f} us; 8-byte "
          f"all_reduce {yield_fit['all_reduce_8_bytes'] * 1e6:.1f} us")
    print("\ndata parallel, compiled SGD step (global batch: CNN 64, BERT 16), median ms")
    print_table(["model", "1 rank", "2 ranks", "throughput", "in turns: 1 process", "in turns: throughput",
                 "2 ranks without DDP", "buckets", "alpha-beta model",
                 "model error", "model without overlap", "loss drift"], rows)
    choice = {name: {"step_ms": median_of([r[name] for r in runs["bert_buckets@2"]], "step_seconds") * 1e3,
                     "buckets": runs["bert_buckets@2"][0][name]["buckets"]} for name in runs["bert_buckets@2"][0]}
    results["bert_bucket_choice"] = choice
    print("\nsmall BERT on 2 ranks, the steps in turns in one launch, median ms: "
          + "; ".join(f"{name} ({way['buckets']} buckets) {way['step_ms']:.2f}" for name, way in choice.items()))
    paths = {model: {way: median_of([r[model] for r in runs["all_reduce_paths@2"]], way) * 1e6
                     for way in ALL_REDUCE_PATHS} for model in ("cnn", "bert")}
    results["all_reduce_paths_us"] = paths
    print("a compiled all-reduce (mean) of the gradient bucket on 2 ranks, start and wait, in turns, median us: "
          + "; ".join(f"{model} ({runs['all_reduce_paths@2'][0][model]['bytes']} B): "
                      + ", ".join(f"{way} {us:.1f}" for way, us in paths[model].items()) for model in paths))
    print(f"\nPyTorch DDP (gloo), digits CNN, 2 ranks: {torch_two * 1e3:.2f} ms per step; tensorkiln DDP is "
          f"{results['torch_ddp_gloo']['tensorkiln_speedup']:.2f}x faster")
    print(f"GPT-2 small decode, tensor parallel: 1 rank {gpt_one * 1e3:.1f} ms/token, 2 ranks {gpt_two * 1e3:.1f} "
          f"ms/token ({gpt_one / gpt_two:.2f}x); same tokens: {same_tokens}; logits rel. error {logit_error:.1e}")
    print("  memory bandwidth (STREAM kernels in C, float32, 64 MiB arrays, every process at once), GB/s:")
    print_table(["kernel", "1 process", "2 processes", "2 / 1"],
                [[kind, f"{stream[f'{kind}_1']:.1f}", f"{stream[f'{kind}_2']:.1f}",
                  f"{stream[f'{kind}_2'] / stream[f'{kind}_1']:.2f}x"] for kind in STREAM_KERNELS])
    best_read = max(("read", "read, prefetcht0", "read, prefetchnta"), key=lambda kind: stream[f"{kind}_2"])
    print(f"  the ceiling the memory system sets at equal efficiency: 2 processes read "
          f"{stream['read_2'] / stream['read_1']:.2f}x what one reads ({best_read}: {stream[f'{best_read}_2'] / stream[f'{best_read}_1']:.2f}x), add "
          f"{stream['add_2'] / stream['add_1']:.2f}x; the decode on 2 ranks: {gpt_one / gpt_two:.2f}x")
    for n in (1, 2):
        b = breakdown[n]
        print(f"  {n} rank(s), per token: kernel profile: matrix-vector products {b['gemv_ms']:.1f} ms "
              f"({b['gemv_GBps']:.1f} GB/s over this rank's weights), collectives {b['collectives_ms']:.2f} ms, "
              f"other kernels {b['other_kernels_ms']:.2f} ms; timed: the compiled call {b['call_ms']:.1f} ms, "
              f"Python around it {b['outside_call_ms']:.2f} ms; "
              f"largest kernel {runs[f'gpt2_decode@{n}'][0]['breakdown']['largest_kernel']} "
              f"{b['largest_kernel_ms']:.1f} ms; weights on 2 MiB pages: {100 * huge_pages[n]:.0f}%")
    print(f"  a token reads {roofline['weight_bytes'] / 1e6:.0f} MB of weights: 1 rank at "
          f"{roofline['one_rank_GBps']:.1f} GB/s ({100 * roofline['one_rank_of_stream']:.0f}% of 1 process's STREAM), "
          f"2 ranks at {roofline['two_rank_GBps']:.1f} GB/s ({100 * roofline['two_rank_of_stream']:.0f}% of 2 processes'); "
          f"roofline: {roofline['roofline_token_ms']:.1f} ms/token on 2 ranks, at most "
          f"{roofline['roofline_speedup']:.2f}x over 1 rank")
    per_token = runs["gpt2_decode@2"][0]["collectives_per_token"]
    print(f"  collectives per token on 2 ranks ({runs['gpt2_decode@2'][0]['layers']} layers): "
          + ", ".join(f"{count} {op}" for op, count in sorted(per_token.items())))
    print(f"\npredicted weak scaling on {STATED_NETWORK.name} (compute per step as measured on 1 rank)")
    predictions = {}
    prediction_rows = []
    for ranks in (8, 64, 256, 1024):
        row = [str(ranks)]
        for model in ("cnn", "bert"):
            compute = results[model]["one_rank_step_ms"] / 1e3
            step = predict_data_parallel_step(compute, runs[f"{model}@2"][0]["bucket_bytes"], ranks, STATED_NETWORK)
            predictions.setdefault(model, {})[ranks] = {"step_ms": step.step_seconds * 1e3,
                                                        "efficiency": step.efficiency}
            row += [f"{step.step_seconds * 1e3:.2f}", f"{100 * step.efficiency:.0f}%"]
        row.append(f"{all_reduce_seconds(4 * 124e6, ranks, STATED_NETWORK) * 1e3:.1f}")
        prediction_rows.append(row)
    print_table(["ranks", "CNN step ms", "CNN eff.", "BERT step ms", "BERT eff.", "GPT-2 grads all-reduce ms"],
                prediction_rows)
    results["predictions"] = {"network": STATED_NETWORK.name, **predictions}
    if args.plot:
        plot(predictions, args.plot)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


def decode_roofline(weight_bytes: float, one_seconds: float, two_seconds: float, stream_one: float,
                    stream_two: float) -> dict:
    """A decode step reads every weight once (matrix-vector products: 2 flops per 4-byte weight), so its
    time is at least the weights' bytes over the memory bandwidth: on 2 ranks, each reading its half at
    once, the bandwidth of 2 processes streaming together."""
    best_two = weight_bytes / stream_two
    return {"weight_bytes": weight_bytes, "stream_one_process_GBps": stream_one / 1e9,
            "stream_two_processes_GBps": stream_two / 1e9, "one_rank_GBps": weight_bytes / one_seconds / 1e9,
            "two_rank_GBps": weight_bytes / two_seconds / 1e9,
            "one_rank_of_stream": weight_bytes / one_seconds / stream_one,
            "two_rank_of_stream": weight_bytes / two_seconds / stream_two,
            "roofline_token_ms": best_two * 1e3, "roofline_speedup": one_seconds / best_two}


def model_overlapped_step(ddp_runs: list[dict], net: Network) -> float:
    """The alpha-beta model of a DDP step with overlap: the step on 2 ranks without DDP (timed in turns
    with the DDP step in the same launch), plus the compute DDP adds to it (each bucket's gradients
    copied into one flat vector and the mean read back by the update: the DDP step's kernels less the
    plain step's, both profiled in the same launch), plus the time the model says the all-reduces add to
    the ranks' kernel timelines (each rank's own profile; each start where it runs, after the kernels
    that make its bucket; a wait lasts for the slower rank, and the bytes move at the waits: ranks of
    one thread each, sharing memory, progress MPI only inside its calls)."""
    timelines = [[TimelineEvent("compute", e["seconds"]) if e["kind"] == "compute" else
                  TimelineEvent(e["kind"], key=e["key"], nbytes=e["nbytes"]) for e in events]
                 for events in ddp_runs[0]["timelines"]]
    starts = [e["seconds"] for e in ddp_runs[0]["timeline"] if e["kind"] == "start"]
    call_seconds = float(np.median(starts)) if starts else 0.0  # a start's own cost: the copy, the call
    slowest = max(sum(e.seconds for e in events if e.kind == "compute") for events in timelines)
    added = predict_overlapped_ranks(timelines, net, call_seconds=call_seconds) - slowest
    # the DDP step runs the plain step's kernels and more, so a negative difference of the two profiles
    # is their noise (a small model's kernels vary by more than the flattening adds), not a saving
    bucket_compute = max(0.0, float(np.median([compute_seconds(r["timeline"]) - compute_seconds(r["compute_timeline"])
                                               for r in ddp_runs])))
    return median_of(ddp_runs, "compute_step_seconds") + bucket_compute + added


def compute_seconds(events: list[dict]) -> float:
    """The kernels' time of a profiled step, its collectives' starts and waits left out."""
    return sum(e["seconds"] for e in events if e["kind"] == "compute")


def compare_wait_policies(rounds: int, json_path: str | None) -> int:
    """The ping-pong's alpha and beta, and an 8-byte all-reduce, under each wait policy, in turns."""
    runs: dict[str, list[dict]] = {}
    for _ in range(rounds):
        for wait in ("spin", "yield"):
            runs.setdefault(wait, []).append(launch("ping_pong", 2, wait))
    rows, results = [], {}
    for wait, found in runs.items():
        alpha, beta = median_of(found, "alpha"), median_of(found, "beta")
        small = median_of(found, "all_reduce_8_bytes")
        results[wait] = {"alpha_us": alpha * 1e6, "bandwidth_GBps": 1 / beta / 1e9,
                         "all_reduce_8_bytes_us": small * 1e6}
        rows.append([wait, f"{alpha * 1e6:.1f}", f"{1 / beta / 1e9:.2f}", f"{small * 1e6:.1f}"])
    print(f"\nping-pong between 2 ranks, median of {rounds} launch(es) per policy")
    print_table(["--wait", "alpha (us)", "bandwidth (GB/s)", "8-byte all_reduce (us)"], rows)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=2)
    return 0


def plot(predictions: dict, path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for model, by_ranks in predictions.items():
        ranks = sorted(by_ranks)
        ax.plot(ranks, [100 * by_ranks[r]["efficiency"] for r in ranks], marker="o", label=model)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ranks")
    ax.set_ylabel("weak-scaling efficiency (%)")
    ax.set_title(f"alpha-beta model, {STATED_NETWORK.name}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
