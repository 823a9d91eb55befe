"""DistributedSampler: each rank's share of a dataset's indices (torch.utils.data.DistributedSampler).

With shuffle, every rank draws the same permutation (seed + epoch), pads it to
a multiple of the number of ranks by repeating its start (or drops the tail
with drop_last), and takes every num_replicas-th index from its rank on, so
the shares are disjoint and equal in size. Call set_epoch(e) before each epoch
for a new order.
"""
from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from .process import rank as world_rank
from .process import world_size


class DistributedSampler:
    """Indices of one rank's share of `dataset` (anything with len(), or an int length)."""

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False):
        self.length = dataset if isinstance(dataset, int) else len(dataset)
        self.num_replicas = world_size() if num_replicas is None else int(num_replicas)
        self.rank = world_rank() if rank is None else int(rank)
        if self.num_replicas < 1 or not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"DistributedSampler: rank {self.rank} is not in [0, {self.num_replicas})")
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0
        if drop_last:
            self.num_samples = self.length // self.num_replicas
        else:
            self.num_samples = math.ceil(self.length / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        """Shuffle differently in the next pass (the same order on every rank)."""
        self.epoch = int(epoch)

    def indices(self) -> np.ndarray:
        """This rank's indices for the current epoch, as an int64 array."""
        if self.shuffle:
            order = np.random.default_rng(self.seed + self.epoch).permutation(self.length)
        else:
            order = np.arange(self.length)
        if self.total_size > len(order):  # pad by repeating the start, as often as needed
            repeats = math.ceil(self.total_size / max(len(order), 1))
            order = np.tile(order, repeats)
        order = order[:self.total_size]
        return order[self.rank:self.total_size:self.num_replicas].astype(np.int64)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())

    def __len__(self) -> int:
        return self.num_samples
