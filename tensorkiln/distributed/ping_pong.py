"""Ping-pong between two ranks: the one-way time of messages of each size, for the alpha-beta fit."""
from __future__ import annotations

import time

import numpy as np

from ..runtime import communicator
from .cost_model import Network, fit_alpha_beta

DEFAULT_SIZES = tuple(8 * 4 ** k for k in range(11))  # 8 B .. 8 MiB
QUICK_SIZES = (8, 4096, 65536, 1 << 20)  # enough to fit alpha and beta in a few milliseconds


def ping_pong(sizes=DEFAULT_SIZES, repeats: int = 50, warmup: int = 5,
              group: tuple[int, ...] = communicator.WORLD) -> dict[int, float]:
    """{bytes: median one-way seconds} measured by the group's first two ranks (the others wait); every
    rank of the group calls it."""
    first, second = communicator.group_ranks(group)[:2]
    me = communicator.rank()
    times: dict[int, float] = {}
    for size in sizes:
        message = np.zeros(size, np.uint8)
        samples = []
        for i in range(warmup + repeats):
            communicator.barrier(group)
            start = time.perf_counter()
            if me == first:
                communicator.send(message, second, group=group)
                communicator.recv(message, second, group=group)
            elif me == second:
                communicator.recv(message, first, group=group)
                communicator.send(message, first, group=group)
            if i >= warmup:
                samples.append((time.perf_counter() - start) / 2)
        times[size] = float(np.median(samples))
    return times


def measure_network(sizes=DEFAULT_SIZES, repeats: int = 50,
                    group: tuple[int, ...] = communicator.WORLD) -> tuple[Network, dict[int, float]]:
    """The alpha-beta model of the link between the group's first two ranks (the same on every rank of
    the group), and its points."""
    times = ping_pong(sizes, repeats, group=group)
    first = communicator.group_ranks(group)[0]
    times = dict(zip(sizes, communicator.broadcast(np.array([times[s] for s in sizes]), first, group)))
    return fit_alpha_beta(list(times), list(times.values()), "ping-pong between two ranks"), times
