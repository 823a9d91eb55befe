"""Weight-only quantized matmuls: `matmul_int8w` and `matmul_int4w`, float32 activations times a
constant weight stored as 8- or 4-bit integers with one float32 scale per group of K.

With precision="int8w" or "int4w" (passes/weight_only.py) a matmul by a constant (K, N) weight
has its weight quantized once, at compile time, symmetrically, in groups of `group` consecutive
depths of one column (one group per column: per-output-channel scales):

    int8:  scale = max|w| / 127                 q = clip(round(w / scale), -127, 127)
    int4:  scale = w* / -8, w* the w of max|w|  q = clip(round(w / scale), -8, 7)   (llama.cpp's Q4_0)
    W[k, n] ~ q[k, n] * scale[k // group, n]

except where a group already is integers times one scale, in range: a weight a model stores quantized
(ONNX Runtime's MatMulNBits blocks, dequantized by the importer) keeps its own integers and scales, so
W[k, n] = q[k, n] * scale[k // group, n] exactly (`exact_scales`).

and stored in panels of PANEL_COLUMNS columns, the layout the kernels stream
(kernels/templates/weight_only.py):

    int8:  q8[p, k, j]     = q[k, p*32 + j]                                 (P, K, 32) int8
    int4:  q4[p, s, 4j+d]  = (q[k, p*32 + j] + 8) | (q[k, p*32 + 16 + j] + 8) << 4
           for depth k = g * group + 4 t + d, step s = g * T + t, T = ceil(group / 4)
                                                                          (P, G * T, 64) uint8
    both:  scales[p, g, j] = scale[g, p*32 + j]                             (P, G, 32) float32

with zeros (nibble 8 for int4) past N and, for int4, past the end of a group (each group padded to
a whole number of 4-depth steps). Decoding reads each weight once per token, so the 1 or 1/2 byte
per weight (plus a scale per group) is what sets its speed. Backend only: the pass builds them,
never users or importers.

int4 multiplies in integers, as llama.cpp's Q4_0 x Q8_0 dot product does: each row of the float32
activations is quantized per group of the same `group` depths, symmetric int8 (`quantize_rows`),
so a 32-bit lane of an int4 step holds the 4 depths of one column that `vpdpbusd` sums against 4
int8 activations. Both the kernels and the reference below compute

    A @ W ~ sum over groups g of  a_scale[g] * w_scale[g, n] * sum over k in g of a_q[k] * q[k, n]
"""
from __future__ import annotations

import numpy as np

from ...errors import DTypeError, ShapeError
from .gradient import NOT_DIFFERENTIABLE
from .registry import MappingType, OpKind, TensorType, register

PANEL_COLUMNS = 32  # columns of a panel: two 512-bit vectors of float32 sums
INT4_OFFSET = 8  # a stored nibble is q + 8, in 0..15
INT4_STEP = 4  # depths of an int4 step: the 4 bytes vpdpbusd sums in one 32-bit lane
WEIGHT_BITS = {"matmul_int8w": 8, "matmul_int4w": 4}


def _groups(w: np.ndarray, group: int) -> np.ndarray:
    """w (K, N) as float32 blocks (ceil(K / group), group, N), the last one padded with zeros."""
    k, n = w.shape
    groups = -(-k // group)
    padded = np.zeros((groups * group, n), dtype=np.float32)
    padded[:k] = w
    return padded.reshape(groups, group, n)


def _ungrouped(blocks: np.ndarray, k: int) -> np.ndarray:
    """Integer blocks (G, group, N) back as int8 rows (K, N)."""
    return blocks.astype(np.int8).reshape(-1, blocks.shape[2])[:k]


def quantize_groups(w: np.ndarray, bits: int, group: int, exact: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(q (K, N) int8, scales (ceil(K / group), N) float32) of a float (K, N) weight, as the module
    docstring says; a group of zeros gets scale 0. `exact`: groups that are grids keep them."""
    blocks = _groups(w, group)
    if bits == 8:
        scales = np.abs(blocks).max(axis=1) / np.float32(127)
        low, high = -127, 127
    elif bits == 4:
        at_max = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=1)[:, None, :], axis=1)[:, 0, :]
        scales = at_max / np.float32(-8)
        low, high = -8, 7
    else:
        raise ValueError(f"weight-only quantization has 8 or 4 bits, got {bits}")
    scales = scales.astype(np.float32)
    if exact:
        grid, found = exact_scales(blocks, low, high)
        scales = np.where(found, grid, scales)
    safe = np.where(scales == 0, np.float32(1), scales)
    return _ungrouped(np.clip(np.rint(blocks / safe[:, None, :]), low, high), w.shape[0]), scales


def int4_offset_groups(w: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(q (K, N) int8 in [-8, 7], scales (G, N), offsets (G, N) integer) with w = (q + offset) * scale exactly
    in every group, where each group of w is a grid of at most 16 consecutive integers times one scale that
    int4's [-8, 7] does not hold as it is (an asymmetric 4-bit block, such as ONNX Runtime's MatMulNBits
    with zero points: q - zero point in [-15, 15]); None when no group needs an offset. The offset is
    0 in a group [-8, 7] holds, and in groups of no grid (quantized as quantize_groups does)."""
    blocks = _groups(w, group)
    scales, found = exact_scales(blocks, -255, 255)
    safe = np.where(found, scales, np.float32(1))[:, None, :]
    integers = np.where(found[:, None, :], np.rint(blocks / safe), 0)
    low, high = integers.min(axis=1), integers.max(axis=1)
    shifted = found & (high - low <= 15) & ((low < -8) | (high > 7))
    if not shifted.any():
        return None
    offsets = np.where(shifted, low + 8, 0).astype(np.int32)
    # the other groups as quantize_groups makes them: those [-8, 7] holds are grids found above
    q, standard = quantize_groups(w, 4, group, exact=False)
    held = found & ~shifted & (low >= -8) & (high <= 7)
    integers = np.where((shifted | held)[:, None, :], integers - offsets[:, None, :], 0)
    q = np.where(np.repeat(shifted | held, group, axis=0)[:w.shape[0]], _ungrouped(integers, w.shape[0]), q)
    return q, np.where(shifted | held, scales, standard).astype(np.float32), offsets


def grid_group(w: np.ndarray, low: int, high: int, sizes=(256, 128, 64, 32, 16)) -> int | None:
    """The largest of `sizes` whose every group of w (K, N), zeros apart, is integers in [low, high] times
    one scale (a weight a model stores quantized in blocks of that many depths), or None."""
    def on_grid(columns: np.ndarray, size: int) -> bool:
        blocks = _groups(columns, size)
        _, found = exact_scales(blocks, low, high)
        return bool((found | ~np.abs(blocks).any(axis=1)).all())

    k, n = w.shape
    for size in sizes:  # four columns first: a float weight is told from them
        if size < k and on_grid(w[:, :4], size) and on_grid(w, size):
            return size
    return None


def exact_scales(blocks: np.ndarray, low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
    """(scales (G, N), found (G, N)) of float32 blocks (G, group, N): where found, every value of the block
    is exactly float32(q * scale) for an integer q in [low, high]. The scale is tried as m / j for the
    block's smallest nonzero magnitude m (the scale itself when that value's |q| is 1) and j = 1, 2, ...
    up to max(|low|, high); past j = 4 only if some block was found by then, so a float weight costs four
    passes. A block of zeros is not found (its scale is 0 anyway)."""
    by_block = np.ascontiguousarray(blocks.transpose(0, 2, 1))  # (G, N, group)
    magnitude = np.abs(by_block)
    smallest = np.where(magnitude > 0, magnitude, np.inf).min(axis=2)
    scales = np.zeros(smallest.shape, np.float32)
    found = np.zeros(smallest.shape, bool)
    open_blocks = np.isfinite(smallest)
    if not _some_block_on_a_grid(by_block[..., :4], smallest, open_blocks):
        return scales, found  # a float weight: four values a block tell, at a fraction of the cost
    for j in range(1, max(-low, high) + 1):
        if j > 4 and not found.any():
            break
        where = np.nonzero(open_blocks & ~found)
        if not where[0].size:
            break
        values = by_block[where]  # (M, group)
        center = (smallest[where] / np.float32(j)).astype(np.float32)
        # m = float32(j * scale) rounded, so m / j may be the scale's neighbour: try those too
        for candidate in (center, np.nextafter(center, np.float32(0)), np.nextafter(center, np.float32(np.inf))):
            q = np.rint(values / candidate[:, None])
            ok = ((q >= low) & (q <= high) & (q.astype(np.float32) * candidate[:, None] == values)).all(axis=1)
            ok &= ~found[where]
            scales[where[0][ok], where[1][ok]] = candidate[ok]
            found[where[0][ok], where[1][ok]] = True
            if j == 1:
                break  # m is the scale itself when its |q| is 1
    return scales, found


def _some_block_on_a_grid(heads: np.ndarray, smallest: np.ndarray, open_blocks: np.ndarray) -> bool:
    """Whether the first values of some block are integers times m / j (j = 1..4), as exact_scales tries."""
    with np.errstate(divide="ignore", invalid="ignore"):
        for j in range(1, 5):
            candidate = np.where(open_blocks, smallest / np.float32(j), np.float32(1)).astype(np.float32)[..., None]
            on_grid = (np.rint(heads / candidate).astype(np.float32) * candidate == heads).all(axis=-1)
            if (on_grid & open_blocks).any():
                return True
    return False


def _panels(x: np.ndarray, fill) -> np.ndarray:
    """x (R, N) as (ceil(N / 32), R, 32) panels, `fill` past N."""
    r, n = x.shape
    count = -(-n // PANEL_COLUMNS)
    padded = np.full((r, count * PANEL_COLUMNS), fill, dtype=x.dtype)
    padded[:, :n] = x
    return np.ascontiguousarray(padded.reshape(r, count, PANEL_COLUMNS).transpose(1, 0, 2))


def _unpanel(panels: np.ndarray, n: int) -> np.ndarray:
    count, r, width = panels.shape
    return panels.transpose(1, 0, 2).reshape(r, count * width)[:, :n]


def int4_steps(k: int, group: int) -> int:
    """The 4-depth steps of an int4 weight of depth k: each group padded to whole steps."""
    return -(-k // group) * -(-group // INT4_STEP)


def _group_padded_depths(k: int, group: int) -> np.ndarray:
    """For each padded depth of the int4 layout (groups of whole steps), its depth in 0..k, k past a group."""
    per_group = -(-group // INT4_STEP) * INT4_STEP
    padded = np.arange(-(-k // group) * per_group)
    depth = padded // per_group * group + padded % per_group
    return np.where((padded % per_group < group) & (depth < k), depth, k)


def pack_weight_only(q: np.ndarray, scales: np.ndarray, bits: int, group: int) -> tuple[np.ndarray, np.ndarray]:
    """(integer panels, scale panels) of q (K, N) and scales (G, N) with groups of `group` depths,
    the layouts above."""
    scale_panels = _panels(scales.astype(np.float32), np.float32(0))
    if bits == 8:
        return _panels(q.astype(np.int8), np.int8(0)), scale_panels
    k = q.shape[0]
    stored = np.full((k + 1, q.shape[1]), INT4_OFFSET, dtype=np.uint8)  # row k: a padded depth
    stored[:k] = (q.astype(np.int16) + INT4_OFFSET).astype(np.uint8)
    nibbles = _panels(stored[_group_padded_depths(k, group)], np.uint8(INT4_OFFSET))  # (P, steps * 4, 32)
    half = PANEL_COLUMNS // 2
    packed = nibbles[:, :, :half] | (nibbles[:, :, half:] << 4)  # (P, steps * 4, 16): depth, column
    count, depths, _ = packed.shape
    steps = packed.reshape(count, depths // INT4_STEP, INT4_STEP, half).transpose(0, 1, 3, 2)
    return np.ascontiguousarray(steps.reshape(count, depths // INT4_STEP, half * INT4_STEP)), scale_panels


def unpack_weight_only(panels: np.ndarray, scale_panels: np.ndarray, bits: int, k: int, n: int,
                       group: int) -> tuple[np.ndarray, np.ndarray]:
    """(q (K, N) int8, scales (G, N)) from the panels `pack_weight_only` made."""
    if bits == 4:
        count, steps, width = panels.shape
        half = width // INT4_STEP
        by_depth = panels.reshape(count, steps, half, INT4_STEP).transpose(0, 1, 3, 2).reshape(count, -1, half)
        low, high = by_depth & 0x0F, by_depth >> 4
        padded = (np.concatenate([low, high], axis=2).astype(np.int16) - INT4_OFFSET).astype(np.int8)
        depths = _group_padded_depths(k, group)
        panels = padded[:, depths < k][:, np.argsort(depths[depths < k], kind="stable")]
    return _unpanel(panels, n)[:k], _unpanel(scale_panels, n)


def quantize_rows(a: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    """(a_q (..., K) int8, scales (..., G) float32): each row of float32 a quantized per group of `group`
    depths, symmetric: scale = max|a| / 127, a_q = clip(rint(a * (127 / max|a|)), -127, 127), in
    float32 arithmetic, as the int4 kernels compute it (a group of zeros: scale 0, a_q 0)."""
    a = np.asarray(a, dtype=np.float32)
    k = a.shape[-1]
    groups = -(-k // group)
    padded = np.zeros(a.shape[:-1] + (groups * group,), dtype=np.float32)
    padded[..., :k] = a
    blocks = padded.reshape(a.shape[:-1] + (groups, group))
    amax = np.abs(blocks).max(axis=-1)
    with np.errstate(divide="ignore"):
        inverse = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    a_q = np.clip(np.rint(blocks * inverse[..., None]), -127, 127).astype(np.int8)
    return a_q.reshape(padded.shape)[..., :k], (amax / np.float32(127)).astype(np.float32)


def dequantize(q: np.ndarray, scales: np.ndarray, group: int) -> np.ndarray:
    """The float32 weight W[k, n] = q[k, n] * scales[k // group, n] that the kernels multiply by."""
    return (q.astype(np.float32) * np.repeat(scales, group, axis=0)[:q.shape[0]]).astype(np.float32)


def _infer(name: str):
    bits = WEIGHT_BITS[name]
    dtype = "int8" if bits == 8 else "uint8"
    layout = "K, 32" if bits == 8 else "ceil(K / group) * ceil(group / 4), 64"

    def infer(types, attrs):
        a, panels, scales = types
        n, k, group = attrs["n"], attrs["k"], attrs["group"]
        if a.dtype.name != "float32" or panels.dtype.name != dtype or scales.dtype.name != "float32":
            raise DTypeError(f"{name} expects a float32 A, {dtype} weight panels and float32 scales, got "
                             f"{a.dtype.name}, {panels.dtype.name} and {scales.dtype.name}")
        count = -(-n // PANEL_COLUMNS)
        depth_shape = (k, PANEL_COLUMNS) if bits == 8 else (int4_steps(k, group) if group >= 1 else -1, 64)
        if group < 1 or a.ndim < 2 or a.shape[-1] != k or panels.shape != (count,) + depth_shape or \
                scales.shape != (count, -(-k // group), PANEL_COLUMNS):
            raise ShapeError(f"{name} expects A (..., M, K), weight panels (ceil(N / 32), {layout}) and "
                             f"scales (ceil(N / 32), ceil(K / group), 32) for K = {k}, N = {n}, group = {group}; "
                             f"got {a.shape}, {panels.shape} and {scales.shape}")
        return TensorType(a.shape[:-1] + (n,), a.dtype)
    return infer


def _reference(name: str):
    bits = WEIGHT_BITS[name]

    def reference(inputs, attrs, out):
        a, panels, scale_panels = inputs
        q, scales = unpack_weight_only(panels, scale_panels, bits, attrs["k"], attrs["n"], attrs["group"])
        weight = dequantize(q, scales, attrs["group"])
        if bits == 8:
            return np.matmul(a, weight)
        a_q, a_scales = quantize_rows(a, attrs["group"])  # int4: int8 activations (module docstring)
        rows = a_q.astype(np.float64) * np.repeat(a_scales, attrs["group"], axis=-1)[..., :attrs["k"]]
        return np.matmul(rows, weight.astype(np.float64)).astype(np.float32)
    return reference


for _name, _bits in WEIGHT_BITS.items():
    register(_name, OpKind.CONTRACTION, MappingType.MANY_TO_MANY, _infer(_name), _reference(_name), 3,
             backend_only=True,
             doc=f"float32 A (..., M, K) @ a weight of int{_bits} values in panels (ceil(N/32), "
                 f"{'K, 32' if _bits == 8 else 'ceil(K/group) * ceil(group/4), 64'}) times float32 scales per "
                 f"group of K (ceil(N/32), ceil(K/group), 32)"
                 f"{'' if _bits == 8 else ', A quantized to int8 per row and group'}; attrs n, k, group",
             gradient=NOT_DIFFERENTIABLE)
