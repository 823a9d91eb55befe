"""A convolution layer's tunable choices: its algorithm, the NCHWc register tile and the order of its tasks.

One question per layer shape, asked through `tuned.configured` like the GEMM's
blocking (`conv_config`):

- `algorithm`: "nchwc" (the channel-blocked direct kernel, conv_nchwc.py, chosen
  by the layout pass) or an NCHW algorithm of conv.py: "winograd4" /
  "winograd2", "gemm_rows" (padded-row implicit GEMM), "gemm" (im2col as an
  implicit GEMM; an unpadded 1x1 stride-1 layer is a plain GEMM in it),
  "shallow" or "direct";
- `pixels` x `blocks`: the NCHWc tile, output pixels of a row (the output-width
  register tile) times vectors of output channels (the output-channel block);
- `order`: how the NCHWc tasks (image, channel group, output row) are numbered
  for the threads: "rows" (rows innermost: neighbouring tasks share a group's
  weights) or "groups" (groups innermost: they share the input rows);
- `shallow_channels` x `shallow_vectors`: the "shallow" kernel's register tile
  (conv_shallow.py: output channels times vectors of output pixels), 0 for
  the rule's size (`shallow_tile`); quiet knobs, so an untuned layer's code
  and comment are the ones from before they existed.

The analytic configuration is today's rule: "nchwc" where the layout pass would
block the layer (a constant weight, a vector of output channels, not a
Winograd layer), else conv.py's `conv_algorithm`; `nchwc_tile`'s tile; "rows".
A record is used only where `conv_config_legal` accepts it for the layer; a
tuned algorithm does not apply under `forced_conv_algorithm` (tests and
benchmarks that impose one), and the layout pass's chain rules still decide
whether a layer tuned "nchwc" ends up blocked.

Only ungrouped float32 layers ask (depthwise and grouped layers keep their rule).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ... import dtypes as dt
from ...ir.graph import Node, input_node, make_node
from ...ir.ops import TensorType
from ...loops.buffer import Buffer
from ...loops.ir import Stmt
from ..inline import ValueBuilder
from ..target import cpu_target
from ..tuned import configured, parse_workload, workload_key
from . import conv as conv_rules  # its rule read at call time: tests and benchmarks may replace it
from .conv import applicable_conv_algorithms, conv2d_body, forced_algorithm, winograd_algorithm
from .conv_nchwc import NchwcTile, channel_block, conv2d_nchwc_body, nchwc_tile
from .conv_plane import tile_row_pixels
from .conv_shallow import ShallowTile, shallow_tile, shallow_tile_fits, with_sizes
from .winograd import winograd_given_body

NCHWC = "nchwc"
TASK_ORDERS = ("rows", "groups")


@dataclass(frozen=True)
class ConvConfig:
    """The tunable choices of one convolution layer (see the module docstring)."""

    algorithm: str
    pixels: int
    blocks: int
    order: str = "rows"
    shallow_channels: int = field(default=0, metadata={"quiet": True})  # "shallow" only; 0: the rule's
    shallow_vectors: int = field(default=0, metadata={"quiet": True})


@dataclass(frozen=True)
class ConvShape:
    """What decides a layer's code: NCHW geometry, attributes, and whether its weight is a constant."""

    n: int
    c: int
    h: int
    w: int
    k: int
    kh: int
    kw: int
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]
    dilation: tuple[int, int]
    constant_weight: bool

    @property
    def out_hw(self) -> tuple[int, int]:
        (sh, sw), (dh, dw), (pt, pb, pl, pr) = self.stride, self.dilation, self.padding
        return ((self.h + pt + pb - dh * (self.kh - 1) - 1) // sh + 1,
                (self.w + pl + pr - dw * (self.kw - 1) - 1) // sw + 1)

    def probe(self) -> Node:
        """A conv2d node of this shape (inputs are placeholders: the rules read only shapes)."""
        x = input_node("x", 0, TensorType((self.n, self.c, self.h, self.w), dt.float32))
        w = input_node("w", 1, TensorType((self.k, self.c, self.kh, self.kw), dt.float32))
        return make_node("conv2d", [x, w], dict(stride=self.stride, padding=self.padding,
                                                dilation=self.dilation, groups=1))


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split("x"))


def conv_workload(shape: ConvShape) -> str:
    """The tuning workload key of a layer (tuned.py)."""
    x = lambda values: "x".join(str(v) for v in values)  # noqa: E731
    return workload_key("conv", dtype="float32", n=shape.n, c=shape.c, h=shape.h, w=shape.w, k=shape.k,
                        kh=shape.kh, kw=shape.kw, stride=x(shape.stride), pad=x(shape.padding),
                        dil=x(shape.dilation), const=int(shape.constant_weight))


def shape_of_workload(workload: str) -> ConvShape:
    """The layer a `conv` workload key names."""
    facts = parse_workload(workload)[1]
    return ConvShape(*(int(facts[f]) for f in ("n", "c", "h", "w", "k", "kh", "kw")),
                     _ints(facts["stride"]), _ints(facts["pad"]), _ints(facts["dil"]),  # type: ignore[arg-type]
                     facts["const"] == "1")


def shape_of(root: Node) -> ConvShape | None:
    """The layer of a conv2d or conv2d_nchwc node, or None where it is not tuned (grouped, not float32)."""
    if root.dtype != dt.float32 or root.attrs.get("groups", 1) != 1 or any(d == 0 for d in root.shape):
        return None
    x, w = root.inputs
    if root.op == "conv2d":
        k, c, kh, kw = w.shape
        constant = w.op == "constant"
    elif root.op == "conv2d_nchwc":
        kblocks, cblocks, kh, kw, cb, kb = w.shape
        k, c, constant = kblocks * kb, cblocks * cb, True
    elif root.op == "conv2d_winograd":  # 3x3 stride 1, its weight transformed at compile time
        return ConvShape(x.shape[0], x.shape[1], x.shape[2], x.shape[3], root.attrs["out_channels"], 3, 3, (1, 1),
                         tuple(root.attrs["padding"]), (1, 1), True)
    else:
        return None
    return ConvShape(x.shape[0], c, x.shape[2], x.shape[3], k, kh, kw, tuple(root.attrs["stride"]),
                     tuple(root.attrs["padding"]), tuple(root.attrs["dilation"]), constant)


def tile_pixels(shape: ConvShape) -> int:
    """The most pixels an NCHWc tile of the layer spans: an output row, or a 1x1 layer's plane (conv_plane.py)."""
    return tile_row_pixels(shape.kh, shape.kw, shape.stride, False, *shape.out_hw)


def _vectors_per_block(kb: int) -> int:
    return max(1, -(-kb * 4 // cpu_target().vector_bytes))


def nchw_algorithms(shape: ConvShape) -> list[str]:
    """The NCHW algorithms that compute this layer (conv.py)."""
    probe = shape.probe()
    return [a for a in applicable_conv_algorithms(probe, Buffer("probe", "float32", probe.shape)) if a != "depthwise"]


def analytic_conv_config(shape: ConvShape) -> ConvConfig:
    """Today's rule for the layer (see the module docstring)."""
    probe = shape.probe()
    rule = conv_rules.conv_algorithm(probe, Buffer("probe", "float32", probe.shape))
    kb = channel_block(shape.k)
    algorithm = NCHWC if shape.constant_weight and kb is not None and not rule.startswith("winograd") else rule
    tile = nchwc_tile(shape.k // kb, kb, tile_pixels(shape), "float32", tasks_per_block=shape.n * shape.out_hw[0]) \
        if kb is not None else NchwcTile(1, 1)
    return ConvConfig(algorithm, tile.pixels, tile.blocks)


def tile_legal(shape: ConvShape, pixels: int, blocks: int) -> bool:
    """The tile fits the registers (accumulators, a step's weight vectors, one broadcast) and the layer."""
    kb = channel_block(shape.k)
    if kb is None:
        return (pixels, blocks) == (1, 1)
    v, registers = _vectors_per_block(kb), cpu_target().vector_registers
    return (1 <= pixels <= tile_pixels(shape) and 1 <= blocks and (shape.k // kb) % blocks == 0
            and blocks * v + 2 <= registers and pixels * blocks * v + blocks * v + 1 <= registers)


def conv_legality(shape: ConvShape, shallow_sizes: Callable[[ConvConfig], bool] | None = None
                  ) -> Callable[[ConvConfig], bool]:
    """`conv_config_legal` for one layer, with what depends on the layer alone (its algorithms, the
    "shallow" rule's tile) worked out once: a search asks thousands of times per proposal batch.
    shallow_sizes: the layer's `shallow_sizes_rule`, where the caller has one already."""
    blockable = shape.constant_weight and channel_block(shape.k) is not None
    algorithms = nchw_algorithms(shape) + ([NCHWC] if blockable else [])
    shallow_sizes = shallow_sizes or shallow_sizes_rule(shape)

    def legal(config: ConvConfig) -> bool:
        return (config.algorithm in algorithms and config.order in TASK_ORDERS
                and tile_legal(shape, config.pixels, config.blocks) and shallow_sizes(config))
    return legal


def conv_config_legal(config: ConvConfig, shape: ConvShape) -> bool:
    """Whether the layer can run with `config` (the tuner's space and a record read back alike)."""
    return conv_legality(shape)(config)


def shallow_sizes_rule(shape: ConvShape) -> Callable[[ConvConfig], bool]:
    """Whether a configuration's "shallow" tile sizes are legal for the layer: zero for every other
    algorithm (one kernel, one name), and for "shallow" the rule's tile with them in place fits the
    registers and the layer. The rule's tile is chosen on the first "shallow" configuration asked about."""
    oh, ow = shape.out_hw
    lanes, registers = max(1, cpu_target().vector_bytes // 4), cpu_target().vector_registers
    rule: list[ShallowTile] = []

    def legal(config: ConvConfig) -> bool:
        sizes = (config.shallow_channels, config.shallow_vectors)
        if config.algorithm != "shallow":
            return sizes == (0, 0)
        if not rule:
            rule.append(shallow_tile(shape.k, ow, lanes, registers, tasks_per_tile_row=shape.n * oh))
        return min(sizes) >= 0 and shallow_tile_fits(with_sizes(rule[0], *sizes), shape.k, ow, lanes, registers)
    return legal


def conv_config(root: Node) -> ConvConfig | None:
    """The layer's configuration: a tuned record's where one is legal, else the rule; None: not tuned."""
    shape = shape_of(root)
    if shape is None:
        return None
    return configured(conv_workload(shape), analytic_conv_config(shape), lambda c: conv_config_legal(c, shape))


def tuned_nchw_algorithm(root: Node) -> str | None:
    """The NCHW algorithm a record chose for this conv2d node, or None (the rule decides): none under
    `forced_conv_algorithm`, and none where the record chose "nchwc" (the layout pass left it NCHW)."""
    config = conv_config(root)
    if config is None or forced_algorithm() is not None or config.algorithm == NCHWC:
        return None
    return config.algorithm


def tuned_winograd_algorithm(root: Node) -> str | None:
    """conv.winograd_algorithm, or the Winograd variant a record chose for this conv2d node (None where the
    record chose another algorithm); the compile-time weight transform asks this."""
    config = conv_config(root)
    if config is None or forced_algorithm() is not None:
        return winograd_algorithm(root)
    return config.algorithm if config.algorithm.startswith("winograd") else None


def tuned_winograd_given_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None) -> Stmt:
    """winograd.winograd_given_body (the layer's variant was chosen with its weights' transform); the
    question is asked again here so that the kernel's comment names the layer's workload."""
    conv_config(root)
    return winograd_given_body(root, out, values, epilogue)


def tuned_conv2d_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None) -> Stmt | None:
    """conv.conv2d_body with the algorithm a record chose for the layer (the rule's without one), and for
    "shallow" the record's tile sizes."""
    algorithm = tuned_nchw_algorithm(root)
    config = conv_config(root) if algorithm == "shallow" else None
    sizes = (config.shallow_channels, config.shallow_vectors) if config is not None else (0, 0)
    return conv2d_body(root, out, values, epilogue, algorithm=algorithm, shallow_sizes=sizes)


def tuned_conv2d_nchwc_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None) -> Stmt | None:
    """conv_nchwc.conv2d_nchwc_body with the layer's configured tile and task order."""
    config = conv_config(root)
    kb = root.inputs[1].shape[-1]
    if config is None or kb != channel_block(kb * root.inputs[1].shape[0]):
        # A configuration counts channel blocks of this CPU's width (channel_block); a node blocked
        # at another width (built by hand, or for another CPU) takes the rule's tile for its blocks.
        return conv2d_nchwc_body(root, out, values, epilogue)
    return conv2d_nchwc_body(root, out, values, epilogue, NchwcTile(config.pixels, config.blocks),
                             groups_inner=config.order == "groups",
                             rule_tile=config == analytic_conv_config(shape_of(root)))


__all__ = ["ConvConfig", "ConvShape", "NCHWC", "TASK_ORDERS", "analytic_conv_config", "conv_config",
           "conv_config_legal", "conv_legality", "conv_workload", "nchw_algorithms", "shape_of", "shape_of_workload",
           "shallow_sizes_rule", "tile_legal", "tile_pixels",
           "tuned_conv2d_body", "tuned_conv2d_nchwc_body", "tuned_nchw_algorithm", "tuned_winograd_algorithm",
           "tuned_winograd_given_body"]
