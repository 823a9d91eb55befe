"""One workload layer, in SCALE-Sim's terms, and its GEMM view.

A convolution runs on a systolic array as a matrix multiply (the im2col view):

    ifmap operand  (M x K):  one row per output pixel, one column per filter tap
    filter operand (K x N):  K = filter height * filter width * channels, N = filters
    ofmap          (M x N)

A matmul / linear layer is already a GEMM; SCALE-Sim encodes it as a
convolution with a 1 x K filter over an M x K "image" (see ``Layer.gemm``).

``groups`` counts independent, identical GEMMs run one after another: a
depthwise convolution over C channels is C GEMMs with one input channel each
(this is exactly how SCALE-Sim 3.0 expands a topology row whose name contains
"DP"), a grouped convolution is ``groups`` GEMMs, and a batched matmul whose
weights differ per batch entry is one GEMM per batch entry.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace
from functools import lru_cache

from .errors import AccelLayerError


@dataclass(frozen=True)
class Gemm:
    """GEMM dimensions of one group of a layer: (M x K) @ (K x N)."""

    m: int  # output pixels (streamed dimension of a convolution)
    n: int  # filters
    k: int  # filter taps = filter_h * filter_w * channels


@dataclass(frozen=True)
class Layer:
    """A convolution or GEMM layer with SCALE-Sim's topology fields.

    Sizes are per group: ``channels`` and ``num_filters`` are the input and
    output channels of one group. ``ifmap_h``/``ifmap_w`` are the *padded*
    input sizes, as in SCALE-Sim topologies.
    """

    name: str
    ifmap_h: int
    ifmap_w: int
    filter_h: int
    filter_w: int
    channels: int
    num_filters: int
    stride_h: int = 1
    stride_w: int = 1
    groups: int = 1
    batch: int = 1          # images per GEMM: multiplies M (SCALE-Sim topologies have batch 1)
    dilation_h: int = 1
    dilation_w: int = 1
    kind: str = "conv"      # "conv" | "depthwise" | "gemm": how the layer is written back to files

    def __post_init__(self) -> None:
        validate_layer(self)

    # -- constructors -------------------------------------------------------------------
    @staticmethod
    def gemm(name: str, m: int, n: int, k: int, groups: int = 1) -> "Layer":
        """A GEMM (M x K) @ (K x N), encoded the way SCALE-Sim 3.0 encodes MNK topologies."""
        return Layer(name, ifmap_h=m, ifmap_w=k, filter_h=1, filter_w=k, channels=1,
                     num_filters=n, groups=groups, kind="gemm")

    def with_name(self, name: str) -> "Layer":
        """The same layer under another name."""
        return replace(self, name=name)

    # -- derived sizes ------------------------------------------------------------------
    @property
    def filter_extent_h(self) -> int:
        """Rows of the input one window spans (dilation spreads the taps)."""
        return (self.filter_h - 1) * self.dilation_h + 1

    @property
    def filter_extent_w(self) -> int:
        """Columns of the input one window spans."""
        return (self.filter_w - 1) * self.dilation_w + 1

    @property
    def ofmap_h(self) -> int:
        """Output rows, with SCALE-Sim's formula ceil((H - R + S) / S).

        This is one more than the usual floor((H - R) / S) + 1 when (H - R) is not
        a multiple of the stride; ``layers_from_graph`` therefore crops the padded
        input to the rows a window actually reads, so both formulas agree.
        """
        return math.ceil((self.ifmap_h - self.filter_extent_h + self.stride_h) / self.stride_h)

    @property
    def ofmap_w(self) -> int:
        """Output columns, with SCALE-Sim's ceil formula (see ``ofmap_h``)."""
        return math.ceil((self.ifmap_w - self.filter_extent_w + self.stride_w) / self.stride_w)

    @property
    def gemm_dims(self) -> Gemm:
        """The GEMM one group of this layer runs."""
        return Gemm(m=self.batch * self.ofmap_h * self.ofmap_w, n=self.num_filters,
                    k=self.filter_h * self.filter_w * self.channels)

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the whole layer (all groups)."""
        g = self.gemm_dims
        return g.m * g.n * g.k * self.groups

    @property
    def ifmap_footprint(self) -> int:
        """Distinct input words one group reads (pixels under some window, all channels)."""
        rows = touched_positions(self.ifmap_h, self.ofmap_h, self.stride_h, self.filter_h,
                                 self.dilation_h)
        cols = touched_positions(self.ifmap_w, self.ofmap_w, self.stride_w, self.filter_w,
                                 self.dilation_w)
        return self.batch * rows * cols * self.channels

    @property
    def filter_footprint(self) -> int:
        """Words of weights of one group."""
        g = self.gemm_dims
        return g.k * g.n

    @property
    def ofmap_footprint(self) -> int:
        """Words of output of one group."""
        g = self.gemm_dims
        return g.m * g.n


@lru_cache(maxsize=4096)
def touched_positions(size: int, out: int, stride: int, taps: int, dilation: int,
                      offset: int = 0) -> int:
    """How many of ``size`` input positions some window reads (clipped like SCALE-Sim).

    Windows start at ``offset + o * stride`` for o < out and read ``taps``
    positions ``dilation`` apart.
    """
    extent = (taps - 1) * dilation + 1
    if dilation == 1 and stride <= extent:
        # Windows overlap or abut: one contiguous run of positions.
        return max(0, min(size, offset + (out - 1) * stride + extent) - offset)
    if dilation == 1:
        # Disjoint windows with gaps between them; the last may hang over the edge.
        return sum(max(0, min(taps, size - offset - o * stride)) for o in range(out))
    positions = {offset + o * stride + t * dilation for o in range(out) for t in range(taps)}
    return sum(1 for p in positions if p < size)


_FIELDS_POSITIVE = ("ifmap_h", "ifmap_w", "filter_h", "filter_w", "channels", "num_filters",
                    "stride_h", "stride_w", "groups", "batch", "dilation_h", "dilation_w")


def validate_layer(layer: Layer) -> None:
    """Raise AccelLayerError, naming the layer, if it cannot run on any array."""
    for field in _FIELDS_POSITIVE:
        value = getattr(layer, field)
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
            raise AccelLayerError(
                f"layer '{layer.name}': {field} must be a positive integer, got {value!r}")
    if layer.filter_extent_h > layer.ifmap_h:
        raise AccelLayerError(
            f"layer '{layer.name}': filter height {layer.filter_extent_h} is larger than the "
            f"(padded) ifmap height {layer.ifmap_h}")
    if layer.filter_extent_w > layer.ifmap_w:
        raise AccelLayerError(
            f"layer '{layer.name}': filter width {layer.filter_extent_w} is larger than the "
            f"(padded) ifmap width {layer.ifmap_w}")
    if layer.kind not in ("conv", "depthwise", "gemm"):
        raise AccelLayerError(f"layer '{layer.name}': unknown kind {layer.kind!r}")
