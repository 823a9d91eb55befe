"""Ping-pong between ranks 0 and 1: the one-way time of messages of each size, for the alpha-beta fit."""
from __future__ import annotations

import time

import numpy as np

from ..runtime import communicator
from .cost_model import Network, fit_alpha_beta

DEFAULT_SIZES = tuple(8 * 4 ** k for k in range(11))  # 8 B .. 8 MiB


def ping_pong(sizes=DEFAULT_SIZES, repeats: int = 50, warmup: int = 5) -> dict[int, float]:
    """{bytes: median one-way seconds} measured by ranks 0 and 1 (other ranks wait); every rank calls it."""
    rank = communicator.rank()
    times: dict[int, float] = {}
    for size in sizes:
        message = np.zeros(size, np.uint8)
        samples = []
        for i in range(warmup + repeats):
            communicator.barrier()
            start = time.perf_counter()
            if rank == 0:
                communicator.send(message, 1)
                communicator.recv(message, 1)
            elif rank == 1:
                communicator.recv(message, 0)
                communicator.send(message, 0)
            if i >= warmup:
                samples.append((time.perf_counter() - start) / 2)
        times[size] = float(np.median(samples))
    return times


def measure_network(sizes=DEFAULT_SIZES, repeats: int = 50) -> tuple[Network, dict[int, float]]:
    """The alpha-beta model of the link between ranks 0 and 1 (the same on every rank), and its points."""
    times = ping_pong(sizes, repeats)
    times = dict(zip(sizes, communicator.broadcast(np.array([times[s] for s in sizes]), 0)))
    return fit_alpha_beta(list(times), list(times.values()), "ping-pong between ranks 0 and 1"), times
