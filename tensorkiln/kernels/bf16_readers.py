"""Which contractions read a bf16 rounding of their input as they copy it, and which read it from bfloat16
storage: the facts the fusion policy (fusion_policy.py) asks before it stores or inlines a rounding.
"""
from __future__ import annotations

from ..ir.graph import Node
from .target import cpu_target
from .templates.gemm_bf16 import PACKING_CONTRACTIONS, is_bf16_rounding


# Contractions that read a bf16 rounding of their input from bfloat16 storage (or round a stored
# float32 value while copying it): the producer's epilogue then stores the rounded value as bfloat16.
BF16_STORAGE_READERS = frozenset({"conv2d_nchwc_bf16"})


# A blocked depthwise layer reads its input from bfloat16 storage too: the expanding 1x1 layer before
# it stores half the bytes, and the depthwise kernel widens each element once, copying the rows of its
# band (conv_nchwc.py). Widened at each of its 9 taps instead it measured slower than float32 storage;
# widened in the copy, 1.0-1.06x faster on MobileNetV2's blocks (`python benchmarks/bf16_convs.py`).
# That store converts each vector with vcvtneps2bf16 (bf16_store.py); without AVX512-BF16 it is
# integer arithmetic per lane, and the expanding layer storing bf16 measured about 2x its float32 time
# (docs/precision.md), so there the depthwise input stays float32 (rounded values, rounded in the
# expanding layer's epilogue), which the depthwise kernel reads in place as a float32 layer does.
# None: from the target (`CpuTarget.bf16_dot`); True or False forces it.
BF16_DEPTHWISE_INPUT: bool | None = None


def bf16_depthwise_input() -> bool:
    """Whether a blocked depthwise convolution reads its input from bfloat16 storage on this target."""
    return cpu_target().bf16_dot if BF16_DEPTHWISE_INPUT is None else BF16_DEPTHWISE_INPUT


def reads_bf16_storage(node: Node) -> bool:
    """`node` reads a bf16 rounding of its input from a bfloat16 buffer: the bf16 direct convolution
    (as pairs), or, where `bf16_depthwise_input`, a blocked depthwise one."""
    depthwise = node.op == "conv2d_nchwc" and node.attrs.get("groups", 1) > 1
    return node.op in BF16_STORAGE_READERS or (depthwise and bf16_depthwise_input())


# Contractions that read each operand element about once, into a packed panel or a padded copy:
# a rounding of a stored value read only by them is computed there, not stored first.
CONV_ROUNDING_READERS = BF16_STORAGE_READERS | {"conv2d", "conv2d_winograd", "conv2d_shallow_bf16"}
ROUNDING_READERS = PACKING_CONTRACTIONS | CONV_ROUNDING_READERS | {"conv2d_nchwc"}


def read_in_bf16(node: Node, users_of: dict[int, list[Node]], readers_ok=None) -> bool:
    """`node` = cast(x, bfloat16) whose only reader widens it back for readers that `readers_ok`
    accepts (default: `reads_bf16_storage`)."""
    readers_ok = readers_ok or reads_bf16_storage
    if node.op != "cast" or node.dtype.name != "bfloat16":
        return False
    users = users_of.get(node.id, [])
    if len(users) != 1 or not is_bf16_rounding(users[0]):
        return False
    readers = users_of.get(users[0].id, [])
    return bool(readers) and all(readers_ok(u) for u in readers)
