"""Layout transformation: chains of convolutions run in channel-blocked layout (NCHW[x]c).

A chosen conv2d becomes `conv2d_nchwc` (kernels/templates/conv_nchwc.py): its
weight blocked as w[K/kb, C/cb, KH, KW, cb, kb] (a reshape and a permute of a
constant: folded at compile time), its output y[N, K/kb, OH, OW, kb], kb one
vector of output channels.

Layouts propagate forward in one walk: a chosen convolution produces a
blocked value; an elementwise op with a blocked operand (bias, ReLU, batch
norm's scale and shift, a residual add) is computed blocked too, its other
operands blocked for it (a per-channel constant folds; a tensor from outside
the chain is read through `to_blocked`); a convolution reading a blocked
value takes it as it is. At a chain's edges the convolutions convert
themselves: the first reads NCHW (its padded copy makes the blocks), the
last writes NCHW (out_layout "nchw"). So no conversion runs inside a chain,
and none runs as index arithmetic in another kernel (a depthwise or pooling
window would read each element many times through a transposing gather).

The conversions as graph ops are movement ops, used for operands:

    to_blocked(x)   = permute(reshape(x, [N, C/c, c, H, W]), [0, 1, 3, 4, 2])
    from_blocked(y) = reshape(permute(y, [0, 1, 4, 2, 3]), [N, C, H, W])

A from_blocked followed by a to_blocked of the same block is never built,
and where a graph has one, `passes/rules.py` cancels it (the two permutes
compose to the identity, then the two reshapes to nothing).

The rule (`blocked_conv_choice`, and the conversion share of a chain) is
written down in docs/optimizer.md.
"""
from __future__ import annotations

from collections import Counter

from .. import dtypes as dt
from ..ir.graph import Graph, Node, make_node
from ..loops.buffer import Buffer
from ..kernels.templates import conv as conv_templates
from ..kernels.templates.conv_choice import NCHWC, conv_config
from ..kernels.templates.conv_nchwc import channel_block
from ..ir.ops import Attrs
from ..ir.ops.registry import OpKind
from ..shapes.symint import hint_of

# A chain of blocked convolutions converts its input and output itself (in the padded copy
# of its first convolutions, the store of its last); it runs blocked only where those
# conversions are at most this share of its multiply-adds (benchmarks/layout.py: a
# convolution "alone" against "NCHW"; MobileNetV2's shallow 1x1 pairs against ResNet-18).
MAX_CONVERSION_SHARE = 0.012
# Input channels below this read NCHW directly as blocks of one channel (the 3-channel stem):
# padding them to a vector of channels would multiply the work.
MIN_BLOCKED_INPUT_CHANNELS = 8


def block_size(channels: int) -> int | None:
    """The channel block for `channels` on this CPU: one vector of float32 (or half of one), or None."""
    return channel_block(channels)


def input_block(channels: int) -> int:
    """The block of a convolution input that arrives in NCHW: a vector of channels, or 1."""
    if channels < MIN_BLOCKED_INPUT_CHANNELS:
        return 1
    return block_size(channels) or 1


def edge_conversions(conv: Node, nchw_in: bool, nchw_out: bool) -> int:
    """Elements a blocked conv2d converts itself at a chain's edge.

    Writing NCHW, every output element is stored from across the channel
    lanes; reading NCHW, its copy transposes the input elements it reads into
    blocks (none for an input read as blocks of one channel; a 1x1 layer's
    copy keeps only the pixels it reads).
    """
    n, c, h, w = conv.inputs[0].shape
    _, _, kh, kw = conv.inputs[1].shape
    read = n * c * (conv.shape[2] * conv.shape[3] if kh == kw == 1 else h * w)
    blocks_input = input_block(c) > 1 or is_depthwise(conv)
    return (conv.type.size if nchw_out else 0) + (read if nchw_in and blocks_input else 0)


def multiply_adds(conv: Node) -> int:
    """Multiply-adds of a conv2d: output elements x C/groups x KH x KW."""
    _, c_group, kh, kw = conv.inputs[1].shape
    return conv.type.size * c_group * kh * kw


def conversion_share(conv: Node) -> float:
    """Elements a conv2d alone between NCHW layers converts, per multiply-add it does."""
    return edge_conversions(conv, True, True) / multiply_adds(conv)


def is_depthwise(conv: Node) -> bool:
    """One input and one output channel per group."""
    groups = conv.attrs["groups"]
    return groups > 1 and conv.inputs[1].shape[1] == 1 and conv.shape[1] == groups


def blocked_conv_choice(node: Node) -> int | None:
    """The output block kb if this conv2d runs blocked, else None (the rule of docs/optimizer.md).

    float32, groups 1 or depthwise (other grouped convolutions keep their
    NCHW templates), a constant weight (inference: its blocking folds at compile
    time), output channels a multiple of a vector (or half of one), and not a
    layer the NCHW path runs as Winograd (`conv_algorithm`), which beats a
    direct convolution on 3x3 stride-1 layers (a bf16 one too:
    `BF16_DIRECT_OVER_WINOGRAD`). A tuning record of the layer
    (kernels/templates/conv_choice.py) can choose either way.
    """
    if node.op != "conv2d" or node.dtype != dt.float32 or (node.attrs["groups"] != 1 and not is_depthwise(node)):
        return None
    if node.inputs[1].op != "constant" or node.ndim != 4 or node.type.size == 0 or node.inputs[0].type.size == 0:
        return None
    kb = block_size(node.shape[1])
    if kb is None or is_depthwise(node):
        return kb
    config = conv_config(node)
    if config is not None:
        return kb if config.algorithm == NCHWC else None
    probe = Buffer("probe", node.dtype.name, node.shape)
    if conv_templates.conv_algorithm(node, probe).startswith("winograd") and \
            not (BF16_DIRECT_OVER_WINOGRAD and conv_templates.bf16_operands(node)):
        return None
    return kb


# With bf16 operands the blocked kernel runs on vdpbf16ps (two multiply-adds per lane per
# instruction), which does not beat float32 Winograd's 2.25-4x fewer multiplications on ResNet-18's
# 56x56 and 28x28 layers (`python benchmarks/bf16_convs.py`: Winograd 1.0-1.2x faster, whole model
# 1.14x, one thread, loaded machine): the rule stays as for float32.
BF16_DIRECT_OVER_WINOGRAD = False


# ---- conversions (movement ops) -------------------------------------------------------------

def _node(op: str, x: Node, like: Node, **attrs) -> Node:
    return make_node(op, [x], Attrs(attrs), like.scope, like.location)


def to_blocked(x: Node, block: int) -> Node:
    """x[N, C, H, W] as [N, C/block, H, W, block]."""
    n, c, h, w = x.shape
    return _node("permute", _node("reshape", x, x, shape=(n, c // block, block, h, w)), x, perm=(0, 1, 3, 4, 2))


def from_blocked(y: Node) -> Node:
    """y[N, C/b, H, W, b] as [N, C, H, W]."""
    n, cblocks, h, w, b = y.shape
    return _node("reshape", _node("permute", y, y, perm=(0, 1, 4, 2, 3)), y, shape=(n, cblocks * b, h, w))


def block_weight(w: Node, cb: int, kb: int) -> Node:
    """w[K, C, KH, KW] as [K/kb, C/cb, KH, KW, cb, kb] (folded when w is a constant)."""
    k, c, kh, kw = w.shape
    split = _node("reshape", w, w, shape=(k // kb, kb, c // cb, cb, kh, kw))
    return _node("permute", split, w, perm=(0, 2, 4, 5, 3, 1))


def block_operand(x: Node, channels: int, block: int) -> Node | None:
    """An elementwise operand broadcast against [N, channels, H, W], blocked to broadcast against
    [N, channels/block, H, W, block]; None where it does not broadcast that way."""
    if x.ndim == 0:
        return x
    if x.ndim > 4:
        return None
    shape = (1,) * (4 - x.ndim) + x.shape
    x4 = x if x.ndim == 4 else _node("reshape", x, x, shape=shape)
    n, c, h, w = shape
    if c == 1:
        return _node("reshape", x4, x, shape=(n, 1, h, w, 1))
    if c != channels:
        return None
    return to_blocked(x4, block)


# ---- the pass ---------------------------------------------------------------------------------

class _Rewriter:
    """One forward walk: the new node of each old one, and its block size when it is blocked.

    `nchw_out` holds the chosen convolutions that write NCHW (the ends of
    chains); the walk records in `sources` which convolutions each blocked
    value comes from, and in `converted` the blocked values some reader
    needed in NCHW, so the caller can move those convolutions to `nchw_out`.
    """

    def __init__(self, graph: Graph, chosen: dict[int, int], nchw_out: set[int]) -> None:
        self.users = graph.users()
        self.chosen = chosen
        self.nchw_out = nchw_out
        self.new: dict[int, Node] = {}
        self.block: dict[int, int] = {}  # old node id -> block of its (blocked) new node
        self.sources: dict[int, set[int]] = {}  # old node id of a blocked value -> its convolutions
        self.converted: set[int] = set()
        self.plain_cache: dict[int, Node] = {}
        self.blocked_cache: dict[tuple[int, int], Node] = {}
        self.fired: Counter = Counter()

    def plain(self, x: Node) -> Node:
        """The new node of x in NCHW (from_blocked once per value)."""
        if x.id not in self.block:
            return self.new[x.id]
        self.converted.add(x.id)
        if x.id not in self.plain_cache:
            self.plain_cache[x.id] = from_blocked(self.new[x.id])
            self.fired["from_blocked inserted"] += 1
        return self.plain_cache[x.id]

    def blocked(self, x: Node, block: int) -> Node:
        """The new node of a 4-D value x in blocked layout with `block` channels per block."""
        if self.block.get(x.id) == block:
            return self.new[x.id]
        key = (x.id, block)
        if key not in self.blocked_cache:
            self.blocked_cache[key] = to_blocked(self.plain(x), block)
            self.fired["to_blocked inserted"] += 1
        return self.blocked_cache[key]

    def conv(self, node: Node, kb: int) -> Node:
        """conv2d_nchwc reading its input as it comes (a blocked value, or NCHW: its copy converts)."""
        x, w = node.inputs
        depthwise = is_depthwise(node)
        cb = self.block.get(x.id)
        if depthwise and cb is not None and cb != kb:  # it reads its input blocked as its output
            cb = None
        if cb is None:
            cb = kb if depthwise else input_block(x.shape[1])
            self.fired["conversion into a conv's copy"] += 1
        else:
            self.fired["conversions cancelled"] += 2  # a from_blocked and a to_blocked never built
        out_layout = "nchw" if node.id in self.nchw_out else "nchwc"
        if out_layout == "nchw":
            self.fired["conversion into a conv's store"] += 1
        else:
            self.block[node.id], self.sources[node.id] = kb, {node.id}
        a = node.attrs
        x_new = self.new[x.id] if self.block.get(x.id) == cb else self.plain(x)
        attrs = dict(stride=a["stride"], padding=a["padding"], dilation=a["dilation"], out_layout=out_layout)
        if depthwise:
            self.fired["depthwise conv2d -> conv2d_nchwc"] += 1
            attrs["groups"] = a["groups"]
            weight = block_weight(self.new[w.id], 1, kb)
        else:
            self.fired["conv2d -> conv2d_nchwc"] += 1
            weight = block_weight(self.new[w.id], cb, kb)
        return make_node("conv2d_nchwc", [x_new, weight], Attrs(attrs), node.scope, node.location)

    def elementwise(self, node: Node) -> Node | None:
        """The blocked form of an elementwise op with a blocked operand of its own shape, or None.

        None too where a whole-tensor operand in NCHW comes from a kernel that would take this
        op as its epilogue (an NCHW convolution's residual add): there the op stays in NCHW,
        fused into that kernel.
        """
        block = next((self.block[i.id] for i in node.inputs
                      if i.id in self.block and i.shape == node.shape), None)
        if block is None or node.ndim != 4 or node.shape[1] % block:
            return None
        if any(x.id not in self.block and x.shape == node.shape and self.heads_epilogue(x)
               for x in node.inputs):
            return None
        operands = []
        for x in node.inputs:
            if x.shape == node.shape:  # a whole tensor: blocked (converted once if it is not)
                operands.append(self.blocked(x, block))
                continue
            blocked = block_operand(self.plain(x), node.shape[1], block)  # broadcast: per channel, scalar
            if blocked is None:
                return None
            operands.append(blocked)
        self.block[node.id] = block
        self.sources[node.id] = set().union(*(self.sources[i.id] for i in node.inputs if i.id in self.sources))
        return make_node(node.op, operands, node.attrs, node.scope, node.location)

    def heads_epilogue(self, x: Node) -> bool:
        """x is a contraction, or an elementwise chain on one, whose kernel ends at x (single readers)."""
        while len(self.users[x.id]) == 1:
            if x.kind == OpKind.CONTRACTION:
                return True
            if x.kind != OpKind.ELEMENTWISE:
                return False
            x = next((i for i in x.inputs if i.shape == x.shape and i.kind in
                      (OpKind.CONTRACTION, OpKind.ELEMENTWISE)), None)
            if x is None:
                return False
        return False

    def visit(self, node: Node) -> None:
        if node.op == "input":
            self.new[node.id] = node
            return
        if node.id in self.chosen:
            self.new[node.id] = self.conv(node, self.chosen[node.id])
            return
        if node.kind == OpKind.ELEMENTWISE and any(i.id in self.block for i in node.inputs):
            blocked = self.elementwise(node)
            if blocked is not None:
                self.new[node.id] = blocked
                return
        inputs = [self.plain(i) for i in node.inputs]
        same = all(a is b for a, b in zip(inputs, node.inputs))
        self.new[node.id] = node if same else make_node(node.op, inputs, node.attrs, node.scope, node.location)


def block_layouts(graph: Graph) -> tuple[Graph, Counter]:
    """Run the chosen convolutions, and the elementwise ops between them, in blocked layout.

    A convolution keeps its output blocked only where every reader takes it
    blocked (another chosen convolution, through elementwise ops); otherwise it
    writes NCHW itself, so no kernel ever reads blocked data through a
    conversion. Deciding that moves convolutions to NCHW output until no
    blocked value needs converting (a fixed point: each round only adds).
    """
    chosen = {n.id: kb for n in graph.nodes if (kb := blocked_conv_choice(n)) is not None}
    nodes = {n.id: n for n in graph.nodes}
    nchw_out: set[int] = set()
    while chosen:
        rewriter = _Rewriter(graph, chosen, nchw_out)
        for node in graph.nodes:
            rewriter.visit(node)
        outputs = [rewriter.plain(n) for n in graph.outputs]
        ends = set().union(*(rewriter.sources[i] for i in rewriter.converted)) - nchw_out
        if ends:
            nchw_out |= ends
            continue
        # A chain converts at its edges (in its first convolutions' copies, its last ones'
        # stores); where that costs more than the blocked kernels gain, it stays NCHW.
        costly = set().union(*(chain for chain in _chains(chosen, rewriter, nodes)
                               if _chain_share(chain, rewriter, nodes, nchw_out) > MAX_CONVERSION_SHARE))
        costly |= _shallow_alone(chosen, rewriter, nodes, nchw_out)
        if not costly:
            return Graph(graph.inputs, outputs, graph.name), +rewriter.fired
        chosen = {i: kb for i, kb in chosen.items() if i not in costly}
        nchw_out = set()
    return graph, Counter()


def _shallow_alone(chosen: dict[int, int], rewriter: _Rewriter, nodes: dict[int, Node],
                   nchw_out: set[int]) -> set[int]:
    """Chosen convolutions that read and write NCHW and that the NCHW path runs as "shallow".

    The shallow kernel (few input channels, conv_shallow.py) does the same
    FMAs from registers as the blocked one, and stores its NCHW rows
    directly; blocked, the same layer transposes every accumulator into its
    NCHW output (ResNet-18's stem, one thread: 1.47 ms blocked, 1.19 ms
    shallow; benchmarks/conv_algorithms.py --shallow). Only a stem whose
    output stays blocked (it starts a chain) runs blocked.
    """
    return {i for i in chosen if i in nchw_out and nodes[i].inputs[0].id not in rewriter.block
            and conv_templates.conv_algorithm(nodes[i], Buffer("probe", nodes[i].dtype.name, nodes[i].shape))
            == "shallow"}


def _chains(chosen: dict[int, int], rewriter: _Rewriter, nodes: dict[int, Node]) -> list[set[int]]:
    """The chosen convolutions grouped into chains: connected through the blocked values they read."""
    parent = {i: i for i in chosen}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in chosen:
        for source in rewriter.sources.get(nodes[i].inputs[0].id, ()):
            parent[root(source)] = root(i)
    chains: dict[int, set[int]] = {}
    for i in chosen:
        chains.setdefault(root(i), set()).add(i)
    return list(chains.values())


def _chain_share(chain: set[int], rewriter: _Rewriter, nodes: dict[int, Node], nchw_out: set[int]) -> float:
    """Elements a chain converts at its edges per multiply-add of its convolutions (a share, weighed at
    the sizes' trace-time hints: it only ranks layouts, so a symbolic size records no guard here)."""
    converted = sum(edge_conversions(nodes[i], nodes[i].inputs[0].id not in rewriter.block, i in nchw_out)
                    for i in chain)
    return hint_of(converted) / hint_of(sum(multiply_adds(nodes[i]) for i in chain))


__all__ = ["block_layouts", "blocked_conv_choice", "block_size", "from_blocked", "to_blocked"]
