"""How a parameter is split over the ranks of a tensor-parallel group, and back.

A `Shard` names the split axis, how many interleaved blocks the full axis
holds (3 for a fused query|key|value weight: each rank takes its heads from
each block) and the full length (an axis not divisible by the group size,
such as GPT-2's 50,257-token vocabulary, is padded with zeros to a multiple
of it). Splitting a full array and joining the shards are exact inverses, so
a checkpoint of full weights (`full_state_dict`) loads at any degree of
parallelism (`load_full_state_dict`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...distributed import ProcessGroup
from ...errors import ShapeError
from ...runtime import communicator
from ...distributed.process import _group


@dataclass(frozen=True)
class Shard:
    """A parameter split along `axis` into `parts`, from a full axis of `full_size` in `interleave` blocks."""

    axis: int
    parts: int
    full_size: int
    interleave: int = 1

    @property
    def padded_size(self) -> int:
        step = self.parts * self.interleave
        return math.ceil(self.full_size / step) * step

    @property
    def size(self) -> int:
        """The shard's length along the axis."""
        return self.padded_size // self.parts

    def split(self, full: np.ndarray, index: int) -> np.ndarray:
        """Rank `index`'s shard of the full array."""
        if full.shape[self.axis] != self.full_size:
            raise ShapeError(f"a full parameter has {full.shape[self.axis]} along axis {self.axis}, expected "
                             f"{self.full_size}")
        pad = [(0, 0)] * full.ndim
        pad[self.axis] = (0, self.padded_size - self.full_size)
        padded = np.pad(full, pad) if self.padded_size != self.full_size else full
        block = self.padded_size // (self.interleave * self.parts)
        shape = full.shape[:self.axis] + (self.interleave, self.parts, block) + full.shape[self.axis + 1:]
        piece = padded.reshape(shape).take(index, axis=self.axis + 1)
        return np.ascontiguousarray(piece.reshape(full.shape[:self.axis] + (self.size,) + full.shape[self.axis + 1:]))

    def join(self, shards: list[np.ndarray]) -> np.ndarray:
        """The full array from every rank's shard (in rank order)."""
        first = shards[0]
        block = self.size // self.interleave
        split_shape = first.shape[:self.axis] + (self.interleave, block) + first.shape[self.axis + 1:]
        stacked = np.stack([s.reshape(split_shape) for s in shards], axis=self.axis + 1)
        full = stacked.reshape(first.shape[:self.axis] + (self.padded_size,) + first.shape[self.axis + 1:])
        return np.ascontiguousarray(full.take(np.arange(self.full_size), axis=self.axis))


def full_state_dict(model, group: ProcessGroup | None = None) -> dict[str, np.ndarray]:
    """The unsharded state of a (tensor-parallel) model as numpy arrays, the same on every rank of the group."""
    ranks = _group(group)
    state = {}
    for prefix, module in model.named_modules():
        shards = getattr(module, "shards", {})
        for name, tensor in list(module._parameters.items()) + list(module._buffers.items()):
            if tensor is None:
                continue
            key = f"{prefix}.{name}" if prefix else name
            value = tensor.numpy()
            if name in shards:
                spec = shards[name]
                gathered = communicator.all_gather(np.ascontiguousarray(value)[None], 0, ranks)
                value = spec.join(list(gathered))
            state[key] = np.array(value)
    return state


def load_full_state_dict(model, state: dict, group: ProcessGroup | None = None) -> None:
    """Load unsharded weights (from full_state_dict at any degree, or an unsharded model) into a model."""
    index = communicator.group_rank(_group(group))
    local = {}
    for prefix, module in model.named_modules():
        shards = getattr(module, "shards", {})
        for name in list(module._parameters) + list(module._buffers):
            key = f"{prefix}.{name}" if prefix else name
            if key in state:
                value = np.asarray(state[key].numpy() if hasattr(state[key], "numpy") else state[key])
                local[key] = shards[name].split(value, index) if name in shards else value
    model.load_state_dict(local, strict=False)
    missing = [k for k in model.state_dict() if k not in local]
    if missing:
        raise KeyError(f"load_full_state_dict: missing keys {missing}")
