"""Splitting a sequential model into pipeline stages: contiguous runs of its layers, one per stage."""
from __future__ import annotations

from ...nn.modules.container import Sequential


def split_sequential(model: Sequential, num_stages: int, split_points=None) -> list[Sequential]:
    """The stages of `model`: `num_stages` Sequentials of consecutive layers sharing its parameters.

    split_points: the index of the first layer of every stage after the first
    (num_stages - 1 increasing indices); by default the layers are dealt out as
    evenly as their count allows, the earlier stages taking the remainder.
    """
    layers = list(model)
    if num_stages < 1 or num_stages > len(layers):
        raise ValueError(f"split_sequential: {num_stages} stages for a Sequential of {len(layers)} layers; "
                         f"each stage needs at least one layer")
    if split_points is None:
        base, extra = divmod(len(layers), num_stages)
        sizes = [base + (1 if s < extra else 0) for s in range(num_stages)]
        split_points = [sum(sizes[:s]) for s in range(1, num_stages)]
    bounds = [0, *[int(p) for p in split_points], len(layers)]
    if len(bounds) != num_stages + 1 or any(a >= b for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"split_sequential: split points {list(split_points)} must be {num_stages - 1} "
                         f"increasing layer indices between 1 and {len(layers) - 1}")
    return [Sequential(*layers[a:b]) for a, b in zip(bounds, bounds[1:])]
