"""The convolution's search space: algorithm, NCHWc tile (pixels x channel blocks) and task order, per layer.

Knobs (conv_choice.py's `ConvConfig`):

- `algorithm`: "nchwc" where the layer can be blocked (a constant weight, a
  vector of output channels), and every NCHW algorithm of conv.py that
  computes the layer but "direct" (the fallback: correct, never fast);
- `pixels`: output pixels of a row (of a 1x1 layer's plane, conv_plane.py) in the NCHWc register tile, 1 ... 28;
- `blocks`: vectors of output channels in it, the divisors of the layer's blocks;
- `order`: "rows" or "groups" (which neighbouring tasks share: weights or input rows);
- `shallow_channels` x `shallow_vectors`: the "shallow" kernel's register tile
  (output channels x vectors of output pixels), 0 for the rule's size; searched
  only where "shallow" computes the layer (the RGB stem at batch 1 is a
  quarter of ResNet-18's time, and this tile is all it has to tune).

The tile and the order mean something only to "nchwc", the shallow sizes
only to "shallow": for the other algorithms `repair` sets them to the
analytic values (0 for the shallow sizes), so the search never measures one
kernel twice under two names. The analytic configuration
is always a member, and `conv_config_legal` is the rule here (as `conv_legality`) and for a
record read back.
"""
from __future__ import annotations

import math

from ..knob_space import Config, KnobSpace
from ..target import cpu_target
from ..tuned import config_of
from .conv_choice import (NCHWC, TASK_ORDERS, ConvConfig, analytic_conv_config, conv_legality, nchw_algorithms,
                          shallow_sizes_rule, shape_of_workload, tile_legal, tile_pixels)
from .conv_nchwc import channel_block

PIXEL_VALUES = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28)
SHALLOW_CHANNELS = (0, 1, 2, 3, 4, 6, 8, 12, 16)  # the "shallow" tile's output channels (0: the rule's)
SHALLOW_VECTORS = (0, 1, 2, 3, 4, 5, 6, 7, 8)  # ... and its vectors of output pixels
ALGORITHMS = (NCHWC, "winograd4", "winograd2", "gemm_rows", "gemm", "shallow", "direct")  # feature order


def conv_space(workload: str) -> KnobSpace:
    """The space of a `conv` workload key (conv_choice.conv_workload)."""
    shape = shape_of_workload(workload)
    analytic = config_of(analytic_conv_config(shape))
    kb = channel_block(shape.k)
    blockable = shape.constant_weight and kb is not None
    algorithms = tuple(a for a in nchw_algorithms(shape) if a != "direct") + ((NCHWC,) if blockable else ())
    ow = shape.out_hw[1]
    pixels = tuple(p for p in PIXEL_VALUES if p <= tile_pixels(shape)) if blockable else (1,)
    kblocks = shape.k // kb if kb else 1
    blocks = tuple(b for b in range(1, kblocks + 1) if kblocks % b == 0 and b <= 8) if blockable else (1,)

    shallow_sizes_legal = shallow_sizes_rule(shape)
    layer_legal = conv_legality(shape, shallow_sizes_legal)

    def legal(config: Config) -> bool:
        return layer_legal(ConvConfig(**config))

    shallow = "shallow" in algorithms
    lanes = max(1, cpu_target().vector_bytes // 4)
    shallow_channels = tuple(g for g in SHALLOW_CHANNELS if g <= shape.k) if shallow else (0,)
    shallow_vectors = tuple(t for t in SHALLOW_VECTORS if t <= -(-ow // lanes)) if shallow else (0,)

    def repair(config: Config) -> Config | None:
        """NCHW algorithms keep the analytic tile and order; an NCHWc tile too wide for the registers narrows;
        only "shallow" has shallow sizes, and a shallow tile too large for the registers gets fewer vectors."""
        if config["algorithm"] != "shallow":
            config = {**config, "shallow_channels": 0, "shallow_vectors": 0}
        else:
            while config["shallow_vectors"] > 1 and not shallow_sizes_legal(ConvConfig(**config)):
                config = {**config, "shallow_vectors": config["shallow_vectors"] - 1}
        if config["algorithm"] != NCHWC:
            return {**config, "pixels": analytic["pixels"], "blocks": analytic["blocks"], "order": analytic["order"]}
        while config["pixels"] > 1 and not tile_legal(shape, config["pixels"], config["blocks"]):
            config["pixels"] = max(p for p in pixels if p < config["pixels"]) if min(pixels) < config["pixels"] else 1
        return config

    knobs = {"algorithm": algorithms, "pixels": pixels, "blocks": blocks,
             "order": TASK_ORDERS if blockable else ("rows",),
             "shallow_channels": shallow_channels, "shallow_vectors": shallow_vectors}
    return KnobSpace(workload, knobs, analytic, legal, repair, lambda config: conv_features(config, shape))


def conv_features(config: Config, shape) -> list[float]:
    """Numbers describing what a configuration does to the layer (the cost model's input)."""
    oh, ow = shape.out_hw
    algorithm = [float(config["algorithm"] == a) for a in ALGORITHMS]
    t, g = config["pixels"], config["blocks"]
    tail = tile_pixels(shape) % t / t
    macs = shape.n * shape.k * oh * ow * shape.c * shape.kh * shape.kw
    weight_bytes = g * cpu_target().vector_bytes * shape.c * shape.kh * shape.kw
    return [*algorithm, t, g, t * g, tail, float(config["order"] == "groups"), math.log2(max(macs, 1)),
            weight_bytes / cpu_target().l2, shape.c, shape.k, oh * ow, shape.kh * shape.kw, shape.stride[0],
            config["shallow_channels"], config["shallow_vectors"], config["shallow_channels"] * config["shallow_vectors"]]


__all__ = ["conv_features", "conv_space"]
