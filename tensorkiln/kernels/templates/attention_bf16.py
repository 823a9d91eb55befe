"""Fused attention on bf16 operands: both products on `vdpbf16ps` pairs, the softmax in float32.

With precision="bf16" the precision pass rounds q, k and v to bf16 (passes/precision.py), so
their products lose nothing by running on bf16 pairs as the bf16 GEMM does
(gemm_bf16.py). This kernel keeps attention.py's structure (tasks of MQ queries, an online
softmax over blocks of NK keys, the graph's own scale, mask and causal select on each score)
and changes where the products read their operands:

    qpack[qc][p][j][t] = bf16(q[query qc*NQ + j][depth 2p + t])   per task (B panels of the scores)
    kpack[j][d]        = bf16(k[key j][depth d])                    per key block (A rows of the scores)
    vpack[p][c][t]     = bf16(v[key 2p + t][value c])               per key block (B panels of P V)
    ppack[p][i][t]     = bf16(P[query i][key 2p + t])               per key block (A rows of P V)

Keys and values are packed with contiguous reads (a row-major copy, and two rows interleaved), and
the register tiles read A's pairs at the strides these layouts give (`tk_bf16_tile_8x<NR>_strided`).

S^T (8 keys x NQ queries) and O (8 queries x NV values) are register tiles of
codegen/c_native.py's `tk_bf16_tile_8x<NR>_strided` (float32 sums), or, without AVX512-BF16
(`CpuTarget.bf16_dot`), loop IR that widens each bf16 value and multiplies with `fma`, the
same sums in the same order. The softmax statistics (running maximum, running sum, the
rescale of O) stay float32; the probabilities are rounded to bf16 only as the operand of P V,
as OpenVINO's bf16 attention does, so the kernel differs from the graph (whose probabilities
stay float32) by that rounding: a relative error of at most 2^-9 per probability.

O is kept as NV-wide column chunks, o_acc[ch][i][c], so an 8 x NV tile of it is contiguous
and the helper accumulates into it in place. Depth steps past d, value columns past dv, the
probability of a key past the block's width and the value of a key past the length are zeros
in the packs.
"""
from __future__ import annotations

from ...codegen.c_native import BF16_TILE_NR
from ...ir.graph import Node
from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import For, NativeCall, Pointer, Stmt, Store, block
from ...shapes import is_symbolic, prod
from ..target import cpu_target
from .attention import _AttentionKernel, _loop, attention_body
from .attention_blocking import QUERY_BLOCK, AttentionBlocking, _round_up
from .attention_match import attention_parts
from .attention_one_query import attention_one_query_blocking, one_query_attention_body
from .gemm_bf16 import holds_bf16_values

TILE_ROWS = 8  # rows of the pair tile: keys of a score tile, queries of a P V tile
LANES = 16  # float32 lanes of a 512-bit vector: the tile widths are multiples of it
BF16_KEY_BLOCK = 64  # keys per online-softmax step


def bf16_attention_operands(root: Node, first: Node) -> bool:
    """q, k^T and v of the attention rooted at `root` all hold bf16 values (precision="bf16")."""
    return root.dtype.name == "float32" and all(holds_bf16_values(x) for x in (*first.inputs, root.inputs[1]))


def bf16_attention_blocking(m: int, dv: int) -> AttentionBlocking:
    """Tile sizes for m queries and dv values per row: tiles 8 x 32 where they fit, else 8 x 16."""
    if is_symbolic(m) or m >= QUERY_BLOCK:
        mq = 64
    else:  # few queries (decoding): one short block
        mq = _round_up(m, LANES)
    nq = 32 if mq % 32 == 0 else 16
    dvp = _round_up(dv, LANES)
    nv = 32 if dvp % 32 == 0 else 16
    return AttentionBlocking(LANES, mq, BF16_KEY_BLOCK, TILE_ROWS, nq, TILE_ROWS, nv, dvp)


def pair_tile(pairs: E.Expr, a: tuple[Buffer, E.Expr, int, int], b: tuple[Buffer, E.Expr, int],
              acc: tuple[Buffer, E.Expr], nr: int, prefix: str) -> Stmt:
    """acc[8 x nr] += A (8 rows) x B (nr columns) over `pairs` pairs of bf16 depth steps.

    a = (buffer, offset, pair stride, row stride): row i's pair q at offset + q*pair + i*row;
    b = (buffer, offset, pair stride): pair q of the nr columns at offset + q*pair; acc = (buffer,
    offset) of the row-major tile. The `vdpbf16ps` helper (codegen/c_native.py), or the widening
    loop IR, which adds in the same order.
    """
    (a_buf, a_at, a_pair, a_row), (b_buf, b_at, b_pair), (acc_buf, acc_at) = a, b, acc
    if cpu_target().bf16_dot and nr in BF16_TILE_NR:
        return NativeCall(f"tk_bf16_tile_8x{nr}_strided", (
            pairs, Pointer(a_buf, a_at), E.const(a_pair), E.const(a_row), Pointer(b_buf, b_at), E.const(b_pair),
            Pointer(acc_buf, acc_at)))
    q, i, j = E.Var(f"{prefix}_q"), E.Var(f"{prefix}_i"), E.Var(f"{prefix}_j")
    steps = []
    for t in (0, 1):  # the order vdpbf16ps adds them in: depth 2q, then 2q + 1
        a_elem = E.Load(a_buf, a_at + q * a_pair + i * a_row + t)
        b_elem = E.Load(b_buf, b_at + q * b_pair + j * 2 + t)
        at = acc_at + i * nr + j
        steps.append(Store(acc_buf, at, E.call("fma", a_elem, b_elem, E.Load(acc_buf, at))))
    return For(q, pairs, For(i, E.const(TILE_ROWS), For(j, E.const(nr), block(*steps), "vectorized"), "unrolled"))


def bf16_bits(value: E.Expr) -> E.Expr:
    """`value` for a store into a bfloat16 buffer, which rounds: a rounding to bf16 on top is dropped."""
    if isinstance(value, E.Call) and value.fn == "round_bf16":
        return value.args[0]
    if isinstance(value, E.Select):
        return E.Select(value.cond, bf16_bits(value.a), bf16_bits(value.b))
    return value


class BF16AttentionKernel(_AttentionKernel):
    """attention.py's kernel with its products on bf16 pairs (the module docstring)."""

    def __init__(self, root: Node, first: Node, x: Node, out: Buffer, buffers: dict[int, Buffer],
                 blocking: AttentionBlocking):
        super().__init__(root, first, x, out, buffers, blocking)
        self.keys_direct = self.values_direct = False  # always packed into pairs
        mq, nk, dvp = blocking.query_block, blocking.key_block, blocking.dv_padded
        self.depth_pairs = -(-self.d // 2)
        pairs = lambda name, size: Buffer(name, "bfloat16", (size,), scope="local")  # noqa: E731
        self.qpack = pairs("qpack", mq * 2 * self.depth_pairs)
        self.kpack = pairs("kpack", nk * 2 * self.depth_pairs)
        self.vpack = pairs("vpack", nk * dvp)
        self.ppack = pairs("ppack", mq * nk)

    def _local_buffers(self) -> list[Buffer]:
        return [self.corr, self.shift, self.new_max, self.row_sum, self.row_max, self.probs, self.ppack,
                self.vpack, self.kpack, self.o_acc, self.qpack]

    def _depth_value(self, value, depth: E.Expr) -> E.Expr:
        """value(depth), zero for the step past an odd d."""
        if self.d % 2 == 0:
            return bf16_bits(value(depth))
        return E.Select(E.lt(depth, self.d), bf16_bits(value(E.minimum(depth, self.d - 1))), self._const(0.0))

    # ---- packing

    def _pack_queries(self) -> Stmt:
        """qpack[qc][p][j][t]: the block's queries as B panels of NQ queries, pairs of depth steps side by side."""
        nq, mq, dp = self.bl.score_queries, self.bl.query_block, self.depth_pairs
        qc, p, j, t = (E.Var(name) for name in ("qc", "qp", "qj", "qt"))
        slot = qc * (dp * 2 * nq) + p * (2 * nq) + j * 2 + t
        value = self._depth_value(lambda depth: self._operand(self.q_node, self._query(qc * nq + j), depth),
                                  p * 2 + t)
        return For(qc, E.const(mq // nq), For(p, E.const(dp), For(j, E.const(nq), For(
            t, E.const(2), Store(self.qpack, slot, value), "unrolled"), "vectorized")))

    def _pack_keys_values(self) -> Stmt:
        """kpack[j][depth] (A rows: keys, read in pairs of depth steps) and vpack[p][c][t] (B: value c
        of keys 2p and 2p + 1 side by side) of the key block."""
        nk, dp, dvp = self.bl.key_block, self.depth_pairs, self.bl.dv_padded
        j, depth = E.Var("kj"), E.Var("kd")
        key_value = self._depth_value(lambda dep: self._operand(self.kt_node, dep, self._key(j)), depth)
        pack_keys = For(j, E.const(nk), For(depth, E.const(2 * dp), Store(
            self.kpack, j * (2 * dp) + depth, key_value), "vectorized"))
        vp, c, vt = E.Var("vp"), E.Var("vc"), E.Var("vt")
        value = bf16_bits(self._operand(self.v_node, self._key(vp * 2 + vt), E.minimum(c, self.dv - 1)))
        if dvp != self.dv:
            value = E.Select(E.lt(c, self.dv), value, self._const(0.0))
        if not self.whole_key_block:
            # keys past n pair with real ones at probability 0: a zero value row, as 0 * inf would be NaN
            value = E.Select(E.lt(self.k0 + vp * 2 + vt, self.n), value, self._const(0.0))
        pack_values = For(vp, E.const(nk // 2), For(c, E.const(dvp), For(
            vt, E.const(2), Store(self.vpack, vp * (2 * dvp) + c * 2 + vt, value), "unrolled"), "vectorized"))
        return block(pack_keys, pack_values)

    # ---- products

    def _score_products(self, acc: Buffer, kg: E.Expr, qc: E.Expr) -> Stmt:
        nq, dp = self.bl.score_queries, self.depth_pairs
        z = E.Var("sz")
        zero = For(z, E.const(TILE_ROWS * nq), Store(acc, z, self._const(0.0)), "vectorized")
        keys = (self.kpack, kg * (TILE_ROWS * 2 * dp), 2, 2 * dp)
        queries = (self.qpack, qc * (dp * 2 * nq), 2 * nq)
        return block(zero, pair_tile(E.const(dp), keys, queries, (acc, E.const(0)), nq, "sc"))

    def _softmax_step(self, width: E.Expr) -> Stmt:
        """attention.py's step, then the probabilities rounded into ppack[p][i][t] (zero past the width)."""
        mq, nk = self.bl.query_block, self.bl.key_block
        p, i, t = E.Var("pp"), E.Var("pi"), E.Var("pt")
        key = p * 2 + t
        prob = E.Load(self.probs, E.minimum(key, nk - 1) * mq + i)
        prob = E.Select(E.lt(key, width), prob, self._const(0.0))
        pack = For(p, (width + 1) // 2, For(i, E.const(mq), For(
            t, E.const(2), Store(self.ppack, p * (2 * mq) + i * 2 + t, prob), "unrolled"), "vectorized"))
        return block(super()._softmax_step(width), pack)

    def _weighted_values(self, width: E.Expr) -> Stmt:
        """O = O * corr + P V over the block: 8 queries x NV values per tile, accumulated in o_acc."""
        mq, nv, dvp = self.bl.query_block, self.bl.pv_cols, self.bl.dv_padded
        ch, i, c, g = E.Var("vch"), E.Var("ri"), E.Var("rc"), E.Var("rg")
        at = ch * (mq * nv) + i * nv + c
        rescale = For(ch, E.const(dvp // nv), For(i, E.const(mq), For(c, E.const(nv), Store(
            self.o_acc, at, E.Load(self.o_acc, at) * E.Load(self.corr, i)), "vectorized")))
        probs = (self.ppack, g * (TILE_ROWS * 2), 2 * mq, 2)
        values = (self.vpack, ch * (2 * nv), 2 * dvp)
        tile = pair_tile((width + 1) // 2, probs, values, (self.o_acc, ch * (mq * nv) + g * (TILE_ROWS * nv)), nv, "o")
        groups = (self.rows + (TILE_ROWS - 1)) // TILE_ROWS
        return block(rescale, For(g, groups, _loop(ch, dvp // nv, tile)))

    def _write_out(self) -> Stmt:
        """out[i0 + r][c] = O[r][c] / l[r] for the block's valid rows."""
        mq, nv = self.bl.query_block, self.bl.pv_cols
        r, c = E.Var("orow"), E.Var("ocol")
        flat = (self.b * self.m + self.i0 + r) * self.dv + c
        value = E.Load(self.o_acc, (c // nv) * (mq * nv) + r * nv + c % nv) / E.Load(self.row_sum, r)
        return For(r, self.rows, For(c, E.const(self.dv), Store(self.out, flat, E.cast(value, self.out.value_dtype)),
                                     "vectorized"))


def fused_attention_body(root: Node, out: Buffer, buffers: dict[int, Buffer]) -> Stmt | None:
    """Loop IR of the fused attention kernel rooted at the P @ V matmul: attention_one_query.py's kernel for a
    single query row, on bf16 pairs where q, k and v hold bf16 values, else attention.py's kernel."""
    first, x, _ = attention_parts(root)
    # one query row (a decode step) on any operands: bf16 values multiply exactly in float32, and a
    # bf16 tile would compute a whole tile of copies of the one query
    one_query = attention_one_query_blocking(x.shape[-2], first.inputs[0].shape[-1], root.inputs[1].shape[-1],
                                             root.dtype.name)
    if one_query is not None and prod(x.shape[:-2]) * root.inputs[1].shape[-1] != 0:
        return one_query_attention_body(root, first, x, out, buffers, one_query)
    if not bf16_attention_operands(root, first):
        return attention_body(root, out, buffers)
    m, dv = x.shape[-2], root.inputs[1].shape[-1]
    if prod(x.shape[:-2]) * m * dv == 0:
        return None
    return BF16AttentionKernel(root, first, x, out, buffers, bf16_attention_blocking(m, dv)).body()


__all__ = ["BF16AttentionKernel", "bf16_attention_blocking", "fused_attention_body", "bf16_attention_operands",
           "pair_tile"]
