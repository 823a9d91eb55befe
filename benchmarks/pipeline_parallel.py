"""Pipeline parallelism on 2 MPI ranks (one OpenMP thread each) against 1 rank, and the bubble.

    python benchmarks/pipeline_parallel.py [--json out.json] [--rounds 2]

The model: an MLP of 8 Linear(1024, 1024) + GELU blocks and a 10-way head, global batch 64, SGD steps
in float32; on 2 ranks the first 4 blocks are stage 0 and the rest stage 1 (compiled stages). Each
figure is the median over rounds of one launch's median step (ranks meet at a barrier before and
after each step), the launches alternating: 1 rank (one tk.jit training step of the whole model),
then GPipe and 1F1B with m = 1, 2, 4, 8 microbatches; PyTorch's torch.distributed.pipelining
(ScheduleGPipe and Schedule1F1B over gloo, 1 thread per rank) runs the same model in the same rounds
(its 1F1B refuses fewer microbatches than stages: no figure for m = 1).

Printed per m: the step, its speedup over 1 rank, the analytic bubble (p - 1) / (m + p - 1), the
measured idle share of a step (1 - m t_mb / step, t_mb: the slowest stage's forward and backward of
one microbatch timed alone in the same launch), the alpha-beta prediction
(m + p - 1) t_mb + 2 (p - 1) (alpha + activation bytes * beta) with alpha and beta from a ping-pong in
the same run, and the GFLOP/s of the step against the machine's peak FMA rate on its 2 cores.
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
from tensorkiln.distributed.cost_model import Network, pipeline_bubble_fraction, predict_pipeline_step  # noqa: E402
from mpi_launches import launch as launch_worker, median_of, worker_ping_pong, write_result  # noqa: E402

WIDTH, BLOCKS, CLASSES, BATCH, STEPS, WARMUP = 1024, 8, 10, 64, 10, 2
MICROBATCHES = (1, 2, 4, 8)
SPLIT = 2 * BLOCKS // 2  # the first layer of stage 1: half the blocks on each stage


def step_flops() -> float:
    """Multiply-adds of forward (1x) and backward (2x) of every Linear, counted as 2 flops each."""
    per_row = BLOCKS * WIDTH * WIDTH + WIDTH * CLASSES
    return 3 * 2 * BATCH * per_row


def layers(nn):
    body = []
    for _ in range(BLOCKS):
        body += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
    return body + [nn.Linear(WIDTH, CLASSES)]


def batches():
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((BATCH, WIDTH)).astype(np.float32), rng.integers(0, CLASSES, BATCH))
            for _ in range(STEPS + WARMUP)]


# ---- the workers (run under mpiexec) ---------------------------------------------------------------

def worker_one_rank() -> dict:
    """The whole model, one compiled training step per batch."""
    import tensorkiln as tk
    import tensorkiln.nn.functional as F
    from tensorkiln import nn
    tk.manual_seed(0)
    model = nn.Sequential(*layers(nn))
    opt = tk.optim.SGD(model.parameters(), lr=0.01)

    @tk.jit
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    times = []
    for x, y in batches():
        start = time.perf_counter()
        step(x, y)
        times.append(time.perf_counter() - start)
    return {"step_seconds": float(np.median(times[WARMUP:]))}


def worker_tensorkiln(schedule_name: str, microbatches: int) -> dict:
    import tensorkiln as tk
    import tensorkiln.distributed as dist
    import tensorkiln.nn.functional as F
    from tensorkiln import nn
    from tensorkiln.distributed import pipeline
    dist.init(check_agreement=False)
    rank = dist.rank()
    tk.manual_seed(0)
    stages = pipeline.split_sequential(nn.Sequential(*layers(nn)), 2, split_points=[SPLIT])
    stage = pipeline.PipelineStage(stages[rank], rank, 2)
    schedule_type = pipeline.ScheduleGPipe if schedule_name == "gpipe" else pipeline.Schedule1F1B
    schedule = schedule_type(stage, microbatches, loss_fn=F.cross_entropy)
    opt = tk.optim.SGD(stages[rank].parameters(), lr=0.01)
    times = []
    for x, y in batches():
        dist.barrier()
        start = time.perf_counter()
        opt.zero_grad()
        schedule.step(*([tk.tensor(x)] if stage.is_first else []), target=tk.tensor(y) if stage.is_last else None)
        opt.step()
        dist.barrier()  # the step ends when the slowest rank's ends
        times.append(time.perf_counter() - start)
    return {"step_seconds": float(np.median(times[WARMUP:])),
            "microbatch_seconds": slowest_stage_microbatch(tk, dist, stage, microbatches),
            "activation_bytes": BATCH // microbatches * WIDTH * 4, "peak_stored": stage.peak_stored}


def slowest_stage_microbatch(tk, dist, stage, microbatches: int) -> float:
    """The forward and backward of one microbatch by the stage's compiled functions, no messages; the
    slower stage's median (both ranks time at once, as in the pipeline)."""
    rows = BATCH // microbatches
    x = tk.randn(rows, WIDTH)
    target = tk.tensor(np.zeros(rows, np.int64)) if stage.is_last else None
    grad = tk.tensor(np.float32(1.0)) if stage.is_last else tk.randn(rows, WIDTH)
    times = []
    for _ in range(WARMUP + STEPS):
        dist.barrier()
        start = time.perf_counter()
        stage._forward_compiled(x, target)
        stage._backward_compiled(x, grad, target)
        times.append(time.perf_counter() - start)
    mine = float(np.median(times[WARMUP:]))
    return float(dist.all_reduce(tk.tensor(np.float64(mine)), "max").numpy())


def worker_torch(schedule_name: str, microbatches: int) -> dict:
    """The same model and schedules in torch.distributed.pipelining over gloo."""
    import torch
    import torch.distributed as torch_dist
    from torch import nn
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    torch.set_num_threads(1)
    rank, size = int(os.environ.get("PMI_RANK", 0)), int(os.environ.get("PMI_SIZE", 1))
    torch_dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29541", rank=rank, world_size=size)
    torch.manual_seed(0)
    whole = layers(nn)
    module = nn.Sequential(*(whole[:SPLIT] if rank == 0 else whole[SPLIT:]))
    stage = PipelineStage(module, rank, 2, torch.device("cpu"))
    schedule_type = ScheduleGPipe if schedule_name == "gpipe" else Schedule1F1B
    schedule = schedule_type(stage, microbatches, loss_fn=nn.functional.cross_entropy)
    opt = torch.optim.SGD(module.parameters(), lr=0.01)
    times = []
    for x, y in batches():
        x, y = torch.from_numpy(x), torch.from_numpy(y)
        torch_dist.barrier()
        start = time.perf_counter()
        opt.zero_grad()
        if rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=y)
        opt.step()
        torch_dist.barrier()
        times.append(time.perf_counter() - start)
    torch_dist.destroy_process_group()
    return {"step_seconds": float(np.median(times[WARMUP:]))}


def run_worker(spec: str, path: str) -> None:
    name, *rest = spec.split(":")
    if name == "one_rank":
        result = worker_one_rank()
    elif name == "ping_pong":
        result = worker_ping_pong(small_all_reduce=False)
    elif name == "tensorkiln":
        result = worker_tensorkiln(rest[0], int(rest[1]))
    else:
        result = worker_torch(rest[0], int(rest[1]))
    write_result(result, path)


# ---- the driver -----------------------------------------------------------------------------------

def launch(spec: str, ranks: int) -> dict:
    """One launch of worker `spec` as `tensorkiln launch` makes it (1 thread per rank, --wait auto)."""
    return launch_worker(__file__, spec, ranks)


def torch_pipelining_available() -> bool:
    try:
        import torch.distributed.pipelining  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", default=None)
    parser.add_argument("--result", default=None, help="(a worker) where rank 0 writes its figures")
    parser.add_argument("--json", default=None)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.worker:
        run_worker(args.worker, args.result)
        return 0
    from kernels import measure_limits
    peak = measure_limits(3)["peak_gflops"]
    load = os.getloadavg()[0]
    print(f"machine: {machine_summary()}; 1 OpenMP thread per rank; float32; peak FMA {peak:.0f} GFLOP/s on "
          f"{os.cpu_count()} cores; load average {load:.1f} at the start")
    with_torch = torch_pipelining_available()

    def torch_runs(schedule: str, m: int) -> bool:
        return with_torch and (schedule == "gpipe" or m >= 2)  # torch's 1F1B wants m >= the stage count
    runs: dict[str, list[dict]] = {"ping_pong": [launch("ping_pong", 2)]}
    for _ in range(args.rounds):  # every configuration once per round, in turn
        runs.setdefault("one_rank", []).append(launch("one_rank", 1))
        for m in MICROBATCHES:
            for schedule in ("gpipe", "1f1b"):
                runs.setdefault(f"tensorkiln:{schedule}:{m}", []).append(launch(f"tensorkiln:{schedule}:{m}", 2))
                if torch_runs(schedule, m):
                    runs.setdefault(f"torch:{schedule}:{m}", []).append(launch(f"torch:{schedule}:{m}", 2))
    net = Network(runs["ping_pong"][0]["alpha"], runs["ping_pong"][0]["beta"], "ping-pong here")
    one = median_of(runs["one_rank"], "step_seconds")
    flops = step_flops()
    results = {"load_average_at_start": load, "peak_gflops": peak, "alpha_us": net.alpha * 1e6,
               "bandwidth_GBps": net.bandwidth / 1e9, "one_rank_step_ms": one * 1e3, "pipelines": {}}
    rows = []
    for m in MICROBATCHES:
        for schedule in ("gpipe", "1f1b"):
            key = f"tensorkiln:{schedule}:{m}"
            step = median_of(runs[key], "step_seconds")
            t_mb = median_of(runs[key], "microbatch_seconds")
            predicted = predict_pipeline_step(t_mb, 2, m, runs[key][0]["activation_bytes"], net)
            torch_step = median_of(runs[f"torch:{schedule}:{m}"], "step_seconds") \
                if torch_runs(schedule, m) else float("nan")
            entry = {"step_ms": step * 1e3, "speedup_vs_one_rank": one / step,
                     "bubble_analytic": pipeline_bubble_fraction(2, m), "idle_measured": 1 - m * t_mb / step,
                     "microbatch_ms": t_mb * 1e3, "model_step_ms": predicted * 1e3, "model_error": predicted / step - 1,
                     "gflops": flops / step / 1e9, "peak_stored_microbatches": runs[key][0]["peak_stored"],
                     **({"torch_step_ms": torch_step * 1e3, "vs_torch": torch_step / step}
                        if torch_runs(schedule, m) else {})}
            results["pipelines"][f"{schedule} m={m}"] = entry
            rows.append([f"{schedule} m={m}", f"{step * 1e3:.1f}", f"{one / step:.2f}x",
                         f"{100 * entry['bubble_analytic']:.0f}%", f"{100 * entry['idle_measured']:.0f}%",
                         f"{predicted * 1e3:.1f} ({100 * entry['model_error']:+.0f}%)",
                         f"{entry['gflops']:.1f} ({100 * entry['gflops'] / peak:.1f}%)",
                         str(entry["peak_stored_microbatches"]),
                         *([f"{torch_step * 1e3:.1f}", f"{entry['vs_torch']:.2f}x"] if torch_runs(schedule, m)
                           else ["n/a", "n/a"])])
    print(f"\nping-pong: alpha {net.alpha * 1e6:.1f} us, bandwidth {net.bandwidth / 1e9:.2f} GB/s")
    print(f"1 rank, whole model, compiled SGD step on the batch of {BATCH}: {one * 1e3:.1f} ms "
          f"({flops / one / 1e9:.1f} GFLOP/s, {100 * flops / one / 1e9 / peak:.1f}% of the 2 cores' peak)")
    print(f"\n2 ranks, pipelined (compiled stages), median ms per step over {args.rounds} round(s)")
    print_table(["schedule", "step ms", "vs 1 rank", "bubble (p-1)/(m+p-1)", "idle measured",
                 "alpha-beta model ms", "GFLOP/s (% of peak)", "stored mb (stage 0)", "torch pipelining ms",
                 "tensorkiln vs torch"], rows)
    results["load_average_at_end"] = os.getloadavg()[0]
    print(f"load average at the end: {results['load_average_at_end']:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
