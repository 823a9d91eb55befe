"""What the MPI benchmarks share: launching a worker of a script on n ranks, its result, the ping-pong.

A benchmark script measures each configuration in its own `mpiexec` launch of itself in a worker mode
(`--worker NAME --result PATH`), launched as `tensorkiln launch` makes it (one OpenMP thread per rank,
`--wait auto` unless told); rank 0 writes the worker's figures as JSON to PATH, the driver reads them.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time

import numpy as np

from tensorkiln.distributed.launch import plan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mpi_rank_and_size() -> tuple[int, int]:
    """This process's rank and the number of ranks, as MPICH's or Open MPI's launcher states them."""
    env = os.environ
    rank = env.get("PMI_RANK", env.get("OMPI_COMM_WORLD_RANK", 0))
    return int(rank), int(env.get("PMI_SIZE", env.get("OMPI_COMM_WORLD_SIZE", 1)))


def write_result(result: dict, path: str) -> None:
    """(In a worker) rank 0 writes the figures the driver reads back."""
    if mpi_rank_and_size()[0] == 0:
        with open(path, "w") as f:
            json.dump(result, f)


def launch(script: str, worker: str, ranks: int, wait: str = "auto", timeout: float = 1800,
           extra: tuple[str, ...] | list[str] = ()) -> dict:
    """`script --worker WORKER [EXTRA...]` on `ranks` ranks as `tensorkiln launch --wait WAIT` makes it
    (1 thread per rank); rank 0's result. Raises with the ranks' output when the launch fails."""
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "result.json")
        launch_plan = plan(ranks, [os.path.abspath(script), "--worker", worker, "--result", path, *extra],
                           threads=1,
                           wait=wait)
        env = dict(launch_plan.environment, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        done = subprocess.run(launch_plan.command, capture_output=True, text=True, env=env, timeout=timeout)
        if done.returncode == 0 and os.path.exists(path):
            with open(path) as f:
                return json.load(f)
    raise RuntimeError(f"{worker} on {ranks} rank(s) failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def median_of(results: list[dict], key: str) -> float:
    """The median of one figure over the launches of a configuration."""
    return float(np.median([r[key] for r in results]))


def worker_ping_pong(small_all_reduce: bool = True) -> dict:
    """(In a worker) alpha and beta fitted to a ping-pong between ranks 0 and 1; with `small_all_reduce`
    also the time of an 8-byte all-reduce through the eager path (the median of blocks of 200)."""
    import tensorkiln.distributed as dist
    from tensorkiln.distributed.ping_pong import measure_network
    from tensorkiln.runtime import communicator
    dist.init(check_agreement=False)  # as the peers: no extra message per collective
    net, points = measure_network(repeats=30)
    result = {"alpha": net.alpha, "beta": net.beta, "points": {str(k): v for k, v in points.items()}}
    if small_all_reduce:
        small, samples = np.ones(2, np.float32), []
        for _ in range(7):
            communicator.barrier()
            start = time.perf_counter()
            for _ in range(200):
                communicator.all_reduce(small)
            samples.append((time.perf_counter() - start) / 200)
        result["all_reduce_8_bytes"] = float(np.median(samples[2:]))
    return result
