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
one launch, which a drift of the load between launches moves less. The digits CNN runs twice: with
BatchNorm2d, as PyTorch DDP runs it ("cnn": each rank normalizes its half batch, so its loss curve is
not one process's), and with its batch norms synchronized under DDP ("cnn_sync": SyncBatchNorm, the
global batch's statistics, so the loss curve is one process's on the global batch). The alpha-beta model of a DDP step
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

The workers live in distributed_workers.py (data parallel) and distributed_decode.py (the decode and
STREAM), the report in distributed_report.py; this script launches the workers and writes the JSON.
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

from common import machine_summary, write_json  # noqa: E402
from distributed_decode import worker_gpt2_decode, worker_stream  # noqa: E402
from distributed_report import report, wait_policy_report  # noqa: E402
from distributed_workers import (worker_all_reduce_paths, worker_bucket_choice, worker_data_parallel,  # noqa: E402
                                 worker_torch_ddp)
from mpi_launches import launch as launch_worker  # noqa: E402
from mpi_launches import worker_ping_pong, write_result  # noqa: E402


WORKERS = {"cnn": lambda: worker_data_parallel("cnn"), "cnn_sync": lambda: worker_data_parallel("cnn_sync"),
           "bert": lambda: worker_data_parallel("bert"),
           "torch_ddp": worker_torch_ddp,
           "ping_pong": worker_ping_pong, "gpt2_decode": worker_gpt2_decode, "stream": worker_stream,
           "bert_buckets": worker_bucket_choice, "all_reduce_paths": worker_all_reduce_paths}


def run_worker(name: str, path: str) -> None:
    """(Under mpiexec, on every rank) run worker `name`; rank 0 writes its figures to `path`."""
    write_result(WORKERS[name](), path)


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
            ("cnn_sync", 1, "auto"), ("cnn_sync", 2, "auto"),
            ("torch_ddp", 2, "auto"), ("torch_ddp", 1, "auto"), ("bert", 1, "auto"), ("bert", 2, "auto"),
            ("bert_buckets", 2, "auto"), ("all_reduce_paths", 2, "auto"), ("stream", 1, "auto"), ("stream", 2, "auto"), ("gpt2_decode", 1, "auto"),
            ("gpt2_decode", 2, "auto")]
    for round_ in range(args.rounds):  # the 1- and 2-rank launches alternate, round after round
        for name, ranks, wait in plan:
            if name == "ping_pong" and round_:
                continue
            key = f"{name}@{ranks}" + ("/yield" if wait == "yield" else "")
            runs.setdefault(key, []).append(launch(name, ranks, wait))
    results = report(runs, args.plot)
    if args.json:
        write_json(args.json, results)
    return 0


def compare_wait_policies(rounds: int, json_path: str | None) -> int:
    """The ping-pong's alpha and beta, and an 8-byte all-reduce, under each wait policy, in turns."""
    runs: dict[str, list[dict]] = {}
    for _ in range(rounds):
        for wait in ("spin", "yield"):
            runs.setdefault(wait, []).append(launch("ping_pong", 2, wait))
    results = wait_policy_report(runs, rounds)
    if json_path:
        write_json(json_path, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
