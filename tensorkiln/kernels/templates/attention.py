"""Fused attention: softmax(q k^T * scale + mask) v with an online softmax over blocks of keys.

The seq x seq score matrix never exists: each thread takes a block of MQ
query rows and streams over blocks of NK keys, keeping per query a running
maximum m, a running sum l of exp(s - m) and an MQ x dv output accumulator O
(Milakov and Gimelshein's online softmax, as in FlashAttention)::

    for (batch, query block) in parallel:
      pack q_t[t][i] = q[i0 + i][t]                 # transposed once: queries contiguous
      m = -inf, l = 0, O = 0
      for key block (past the diagonal skipped when causal):
        pack keys[j][t], values[j][c]               # shared by the MQ queries; skipped when k and v
                                                    # are plain row-major buffers (read in place)
        S^T[j][i] = q_i . k_j                       # micro-kernel: MRK keys x NQ queries in registers
        probs[j][i] = score(S^T[j][i])              # the graph's own scale / mask / causal select
        m' = max(m, max_j probs[j][i]);  corr = exp(m - m');  l = l * corr
        probs[j][i] = exp(probs[j][i] - m');  l += probs[j][i]
        O[i][:] = O[i][:] * corr[i] + sum_j probs[j][i] * values[j][:]   # micro-kernel: MR rows x dv
      out[i0 + i][c] = O[i][c] / l[i]

Both products are GEMM micro-kernels as in gemm.py: an accumulator tile in
a local buffer that GCC keeps in vector registers, an unrolled loop of
broadcast operands and a vectorized loop of contiguous ones, with explicit
`fma`. The scores are computed transposed (keys x queries) so that every
softmax step is a vertical vector operation over queries: the row maximum is
an elementwise max over key rows, and no horizontal reduction is ever needed;
the keys need no transposing either (the key element is the broadcast).

The score of (query i, key j) is the graph's expression of the softmax input
with the first matmul's element substituted, so any scale or mask the graph
applies is honoured. A causal mask (a constant lower-triangular condition, as
`is_causal=True` builds) is recognised: its condition becomes an index
comparison, key blocks entirely past the diagonal are skipped (their
probabilities are exactly 0) and blocks entirely before it skip the select.

The pattern and the causal mask are found by attention_match.py, the block
and tile sizes chosen by attention_blocking.py.
"""
from __future__ import annotations

import numpy as np

from ...ir.graph import Node
from ...loops import expr as E
from ...loops.buffer import Buffer
from ..inline import ValueBuilder, broadcast_index, delinearize
from ...loops.ir import Alloc, For, If, Let, Stmt, Store, block
from ...loops.schedule import substitute
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS
from ..run_time_choice import all_of, at_least, may_be_parallel, threads_if
from ...shapes import is_symbolic, prod
from ...loops.simplify import index_step
from .attention_blocking import AttentionBlocking, attention_blocking
from .attention_match import attention_parts, causal_mask, safe_softmax_guard

SHORT_QUERIES = 16  # a run-time query count up to this runs a kernel blocked for this many queries


def attention_body(root: Node, out: Buffer, buffers: dict[int, Buffer]) -> Stmt | None:
    """Loop IR of the fused attention kernel rooted at the P @ V matmul (see the module docstring)."""
    first, x, _ = attention_parts(root)
    *batch_shape, m, n = x.shape
    dv = root.inputs[1].shape[-1]
    batch = prod(batch_shape) if batch_shape else 1
    if batch * m * dv == 0:
        return None
    blocking = attention_blocking(m, dv, root.dtype.name)
    whole = _AttentionKernel(root, first, x, out, buffers, blocking).body()
    if not is_symbolic(m):
        return whole
    # A run-time query count of at most SHORT_QUERIES (a short input) takes the kernel blocked as for
    # that many queries, chosen per call: whole blocks would compute QUERY_BLOCK rows, most of them
    # past the last query. Either kernel is correct at every count.
    longer = at_least(m, SHORT_QUERIES + 1)
    if longer is True:
        return whole
    short = _AttentionKernel(root, first, x, out, buffers, attention_blocking(SHORT_QUERIES, dv, root.dtype.name))
    return short.body() if longer is False else If(longer, whole, short.body())


class _AttentionKernel:
    """Builds the loop IR of one fused attention kernel, one phase per method."""

    def __init__(self, root: Node, first: Node, x: Node, out: Buffer, buffers: dict[int, Buffer],
                 blocking: AttentionBlocking):
        self.root, self.first, self.x, self.out = root, first, x, out
        self.q_node, self.kt_node = first.inputs
        self.v_node = root.inputs[1]
        self.batch_shape = tuple(x.shape[:-2])
        self.m, self.n = x.shape[-2:]
        self.d, self.dv = self.q_node.shape[-1], self.v_node.shape[-1]
        self.batch = prod(self.batch_shape) if self.batch_shape else 1
        self.bl = blocking
        self.dtype = root.dtype.name
        self.buffers = buffers
        self.values = ValueBuilder(buffers)
        self.causal = causal_mask(x, first)
        self.safe = safe_softmax_guard(root.inputs[0]) is not None  # an all-masked row gives 0, not NaN
        # keys and values already laid out as the micro-kernels read them need no copy
        self.keys_direct = _plain_load(self.kt_node, self.values, self.dtype, unit_stride=False)
        self.values_direct = blocking.dv_padded == self.dv and _plain_load(self.v_node, self.values, self.dtype,
                                                                          unit_stride=True)
        self.q_blocks = -(-self.m // blocking.query_block)
        self.k_blocks = -(-self.n // blocking.key_block)

        mq, nk, dvp = blocking.query_block, blocking.key_block, blocking.dv_padded
        local = lambda name, size: Buffer(name, self.dtype, (size,), scope="local")  # noqa: E731
        self.q_t = local("q_t", self.d * mq)  # q_t[t][i]: the block's queries, transposed
        self.keys = local("keys", nk * self.d)  # keys[j][t]
        self.vals = local("vals", nk * dvp)  # vals[j][c], zero past dv
        self.probs = local("probs", nk * mq)  # probs[j][i]: scores, then exp(score - max)
        self.o_acc = local("o_acc", mq * dvp)  # O[i][c]: unnormalized output rows
        self.row_max, self.row_sum = local("row_max", mq), local("row_sum", mq)
        self.new_max, self.shift, self.corr = local("new_max", mq), local("shift", mq), local("corr", mq)

        self.task = E.Var("task")
        self.kblock = E.Var("kblock")
        self.whole_key_block = False  # set while building a block whose keys are all < n (no clamp)
        self.origin, self.b, self.i0 = self._task_origin()
        self.batch_index = delinearize(self.b, self.batch_shape) if self.batch_shape else []
        self.rows = self._extent(mq, self.m, self.i0)  # valid queries in this block
        self.k0 = self.kblock * nk

    # ---- indexing helpers

    def _task_origin(self) -> tuple[list[Stmt], E.Expr, E.Expr]:
        """(lets to compute first, batch index, first query row) of parallel iteration `task`."""
        if not is_symbolic(self.q_blocks) and self.q_blocks == 1:  # (a run-time count asks nothing of the length)
            return [], self.task, E.const(0)
        pos = self.task % self.q_blocks
        lets: list[Stmt] = []
        batch_index: E.Expr = self.task // self.q_blocks
        if is_symbolic(self.q_blocks):
            # a run-time block count: the task's batch index and block are named once per task, so the
            # inner loops' indices hold no division by a run-time size (GCC does not hoist them, and
            # a division's zero test inside a tile loop kept it scalar: causal attention at a
            # run-time length ran its products one float at a time)
            causal_order = self.causal is not None and self.causal.skippable  # qblock is then named below
            position, batch_index = E.Var("qposition" if causal_order else "qblock"), E.Var("batch_index")
            # the C writer's bounds know the block count (a ceiling division) is positive, so the index
            # is never negative and `batch_index % heads` in the tile loops is C's %, not a helper with
            # sign tests (GCC unswitched each loop of the nest on those, again inside each copy: 17 s)
            lets = [Let(batch_index, self.task // self.q_blocks), Let(position, pos)]
            pos = position
        if self.causal is not None and self.causal.skippable:
            # Causal blocks cost in proportion to their row: the order 0, last, 1, last-1, ... gives
            # each thread's contiguous share of the iterations an even amount of work.
            qblock = E.Var("qblock")
            zigzag = E.Select(E.eq(pos % 2, 0), pos // 2, (self.q_blocks - 1) - pos // 2)
            return [*lets, Let(qblock, zigzag)], batch_index, qblock * self.bl.query_block
        if is_symbolic(self.q_blocks):
            return lets, batch_index, pos * self.bl.query_block
        return [], batch_index, pos * self.bl.query_block

    @staticmethod
    def _extent(block_size: int, total: int, start: E.Expr) -> E.Expr:
        """Elements of the block starting at `start` (a min() only when blocks do not divide total,
        or may not: a symbolic total)."""
        if not is_symbolic(total) and total % block_size == 0:
            return E.const(block_size)
        return E.minimum(E.const(block_size), total - start)

    def _operand(self, node: Node, rows: E.Expr, cols: E.Expr) -> E.Expr:
        """Element (rows, cols) of q, k^T or v for this iteration's batch index."""
        batch = broadcast_index(self.batch_index, self.batch_shape, node.shape[:-2])
        return self.values.value(node, batch + [rows, cols])

    def _query(self, i: E.Expr) -> E.Expr:
        """Query row of local row i (the last row stands in for rows past m)."""
        return E.minimum(self.i0 + i, self.m - 1)

    def _key(self, j: E.Expr) -> E.Expr:
        """Key row of local key j (the last key stands in for keys past n)."""
        if self.whole_key_block:  # with a run-time n the simplifier cannot drop the clamp itself
            return self.k0 + j
        return E.minimum(self.k0 + j, self.n - 1)

    # ---- phases

    def body(self) -> Stmt:
        """The parallel loop over (batch, query block) tasks, with every phase inside."""
        bl = self.bl
        mq, dvp = bl.query_block, bl.dv_padded
        i, z = E.Var("qi"), E.Var("oi")
        init = block(
            For(i, E.const(mq), block(Store(self.row_max, i, self._const(-np.inf)),
                                      Store(self.row_sum, i, self._const(0.0))), "vectorized"),
            For(z, E.const(mq * dvp), Store(self.o_acc, z, self._const(0.0)), "vectorized"))
        per_task = block(self._pack_queries(), init, self._key_loop(), self._write_out())
        for buf in self._local_buffers():
            per_task = Alloc(buf, per_task)
        per_task = block(*self.origin, per_task)
        tasks = self.batch * self.q_blocks
        # a run-time length decides serial or parallel per call (one program for all lengths)
        choice = all_of(at_least(self.batch * self.m * self.n * self.d, PARALLEL_MIN_ELEMENTS), at_least(tasks, 2))
        return For(self.task, E.const(tasks), per_task, "parallel" if may_be_parallel(choice) else "serial",
                   threads_if(choice))

    def _local_buffers(self) -> list[Buffer]:
        """The per-task buffers, innermost allocation first."""
        return [buf for buf in (self.corr, self.shift, self.new_max, self.row_sum, self.row_max, self.probs,
                                self.vals, self.keys, self.o_acc, self.q_t)
                if not (buf is self.keys and self.keys_direct) and not (buf is self.vals and self.values_direct)]

    def _const(self, value: float) -> E.Expr:
        return E.Const(float(value), self.dtype)

    def _key_loop(self) -> Stmt:
        """The key blocks: one loop, whose iterations take whole blocks of a constant width and whose
        last takes the last block (a part of one, or cut at the diagonal).

        A constant width lets GCC compile the inner loops tightly (a run-time
        width everywhere costs ~25%). The last block is an iteration of the
        same loop, not code after it: GCC allocates registers per loop, and
        after the loop the P V tile kept an accumulator on the stack (a store
        and a reload in every step: the 54 last keys of 384 in blocks of 66
        took 9% of the kernel's time). Causal: blocks past the last key the
        block's last query sees are skipped, and the last block is cut there
        (the keys left out are -inf for every row, so exactly nothing changes).
        """
        nk = self.bl.key_block
        if self.causal is None or not self.causal.skippable:
            whole, rest = self.n // nk, self.n % nk
            if not is_symbolic(self.n) and not rest:
                return _loop(self.kblock, whole, self._key_block(E.const(nk)))
            last = substitute(self._key_block(E.const(rest)), {self.kblock.name: E.const(whole)})
            if not is_symbolic(self.n) and not whole:
                return last
            self.whole_key_block = True  # kblock < n // nk: every key of the block is below n
            whole_block = self._key_block(E.const(nk))
            self.whole_key_block = False
            return For(self.kblock, E.const((self.n + (nk - 1)) // nk),
                       If(E.lt(self.kblock, E.const(whole)), whole_block, last))
        keys_seen = self.i0 + self.rows + self.causal.offset  # keys the last row of the block sees
        count = E.maximum(E.minimum(E.const(self.k_blocks), (keys_seen + (nk - 1)) // nk), 0)
        last_width = E.minimum(E.minimum(E.const(nk), self.n - self.k0), keys_seen - self.k0)
        return For(self.kblock, count, If(E.lt(self.kblock, count - 1), self._key_block(E.const(nk)),
                                          self._key_block(last_width)))

    def _key_block(self, width: E.Expr) -> Stmt:
        """One step of the online softmax over keys k0 .. k0 + width."""
        i = E.Var("qi")
        return block(
            self._pack_keys_values(),
            For(i, E.const(self.bl.query_block), Store(self.new_max, i, E.Load(self.row_max, i)), "vectorized"),
            self._scores(width), self._softmax_step(width), self._weighted_values(width))

    def _pack_queries(self) -> Stmt:
        """q_t[t][i] = q[i0 + i][t]: the block's queries transposed, so a score tile loads whole vectors."""
        t, i = E.Var("qt"), E.Var("qi")
        mq = self.bl.query_block
        return For(t, E.const(self.d), For(i, E.const(mq), Store(
            self.q_t, t * mq + i, self._operand(self.q_node, self._query(i), t)), "vectorized"))

    def _key_element(self, j: E.Expr, t: E.Expr) -> E.Expr:
        """Element t of local key j: from the packed block, or straight from k."""
        if self.keys_direct:
            return self._operand(self.kt_node, t, self._key(j))
        return E.Load(self.keys, j * self.d + t)

    def _value_element(self, j: E.Expr, c: E.Expr, clamp: bool = False) -> E.Expr:
        """Element c of local value row j: from the packed block, or straight from v (j < width, or
        any j of the block with `clamp`: rows past the last key read the last key's)."""
        if self.values_direct:
            return self._operand(self.v_node, self._key(j) if clamp else self.k0 + j, c)
        return E.Load(self.vals, j * self.bl.dv_padded + c)

    def _pack_keys_values(self) -> Stmt:
        """Copy the key block (keys[j][t]) and value block (vals[j][c], zero past dv) unless read in place."""
        j, t, c = E.Var("kj"), E.Var("kt"), E.Var("vc")
        nk, dvp = self.bl.key_block, self.bl.dv_padded
        copies = []
        if not self.keys_direct:
            copies.append(For(t, E.const(self.d), Store(
                self.keys, j * self.d + t, self._operand(self.kt_node, t, self._key(j))), "vectorized"))
        if not self.values_direct:
            value = self._operand(self.v_node, self._key(j), E.minimum(c, self.dv - 1))
            if dvp != self.dv:
                value = E.Select(E.lt(c, self.dv), value, self._const(0.0))
            copies.append(For(c, E.const(dvp), Store(self.vals, j * dvp + c, value), "vectorized"))
        return For(j, E.const(nk), block(*copies)) if copies else block()

    def _scores(self, width: E.Expr) -> Stmt:
        """probs[j][i] = score(q_i . k_j) for the block, MRK keys x NQ queries per register tile.

        Each tile also folds its maximum per query into new_max: its keys past
        the block's width repeat the last key or are masked for every query of
        the block (causal), so they never change a maximum.
        """
        bl = self.bl
        mrk, nq, mq = bl.score_keys, bl.score_queries, bl.query_block
        kg, qc, kr, i = (E.Var(name) for name in ("kg", "qc", "kr", "si"))
        acc = Buffer("s_acc", self.dtype, (mrk * nq,), scope="local")
        micro_kernel = self._score_products(acc, kg, qc)
        at = lambda row: (kg * mrk + row) * mq + qc * nq + i  # noqa: E731

        def store_scores(mask: E.Expr | None) -> Stmt:
            known = {self.first.id: E.Load(acc, kr * nq + i)}
            if mask is not None:
                known[self.causal.mask.id] = mask
            query, key_row = self._query(qc * nq + i), self._key(kg * mrk + kr)
            score = ValueBuilder(self.buffers, known=known).value(self.x, self.batch_index + [query, key_row])
            return For(kr, E.const(mrk), For(i, E.const(nq), Store(self.probs, at(kr), score), "vectorized"),
                       "unrolled")

        if self.causal is None:
            write = store_scores(None)
        else:
            query, key_row = self._query(qc * nq + i), self._key(kg * mrk + kr)
            # a tile whose last key is visible from its first query needs no mask
            below_diagonal = E.le(self.k0 + (kg + 1) * mrk - 1, self.i0 + qc * nq + self.causal.offset)
            write = If(below_diagonal, store_scores(E.Const(True, "bool")),
                       store_scores(E.le(key_row, query + self.causal.offset)))
        tile_max: E.Expr = E.Load(self.new_max, qc * nq + i)
        for row in range(mrk):
            tile_max = E.maximum(tile_max, E.Load(self.probs, at(row)))
        fold_max = For(i, E.const(nq), Store(self.new_max, qc * nq + i, tile_max), "vectorized")
        groups = (width + (mrk - 1)) // mrk
        return For(kg, groups, _loop(qc, mq // nq, Alloc(acc, block(micro_kernel, write, fold_max))))

    def _score_products(self, acc: Buffer, kg: E.Expr, qc: E.Expr) -> Stmt:
        """acc[kr][i] = q_i . k_j for key group kg (MRK keys j) and query chunk qc (NQ queries i)."""
        mrk, nq, mq = self.bl.score_keys, self.bl.score_queries, self.bl.query_block
        t, kr, i = E.Var("t"), E.Var("kr"), E.Var("si")
        key = kg * mrk + kr
        # the first step initializes the tile: a zeroing loop would become a memset, which GCC
        # cannot keep in registers
        first_step = For(kr, E.const(mrk), For(i, E.const(nq), Store(
            acc, kr * nq + i, self._key_element(key, E.const(0)) * E.Load(self.q_t, qc * nq + i)), "vectorized"),
            "unrolled")
        t1 = t + 1
        update = E.call("fma", self._key_element(key, t1), E.Load(self.q_t, t1 * mq + qc * nq + i),
                        E.Load(acc, kr * nq + i))
        return block(first_step, For(t, E.const(self.d - 1), For(kr, E.const(mrk), For(
            i, E.const(nq), Store(acc, kr * nq + i, update), "vectorized"), "unrolled")))

    def _softmax_step(self, width: E.Expr) -> Stmt:
        """Online softmax over the block: rescale factors, then probabilities and their sums."""
        mq = self.bl.query_block
        i, j = E.Var("mi"), E.Var("mj")
        at = j * mq + i
        new_max, old_max = E.Load(self.new_max, i), E.Load(self.row_max, i)
        # an all -inf row so far keeps max -inf; exp(s - 0) then gives 0 for its -inf scores
        shift = E.Var("row_shift", self.dtype)
        p = E.Var("p", self.dtype)
        return block(
            For(i, E.const(mq), block(
                Let(shift, E.Select(E.eq(new_max, self._const(-np.inf)), self._const(0.0), new_max)),
                Store(self.corr, i, E.call("exp", old_max - shift)),
                Store(self.row_sum, i, E.Load(self.row_sum, i) * E.Load(self.corr, i)),
                Store(self.row_max, i, new_max),
                Store(self.shift, i, shift)), "vectorized"),
            For(j, width, For(i, E.const(mq), block(
                Let(p, E.call("exp", E.Load(self.probs, at) - E.Load(self.shift, i))),
                Store(self.probs, at, p),
                Store(self.row_sum, i, E.Load(self.row_sum, i) + p)), "vectorized")))

    def _weighted_values(self, width: E.Expr) -> Stmt:
        """O[i][:] = O[i][:] * corr[i] + sum_j probs[j][i] * vals[j][:], MR rows x pv_cols per register tile.

        A run-time width (the last block of a run-time length, a causal block cut at the diagonal)
        is taken in whole groups of the score tile's MRK keys, a loop of constant extent inside: GCC
        kept the tile of a run-time key loop in registers only with every value reloaded inside each
        FMA (18 loads per 12 FMAs), at half the speed of the whole blocks' tile. In the last group the
        keys past the width read the last key's value row (packed or read in place with a clamp) and
        their products are not added: a select keeps the sum, as 0 * v would not for an infinite v.
        """
        bl = self.bl
        mr, cols, mq, dvp, mrk = bl.pv_rows, bl.pv_cols, bl.query_block, bl.dv_padded, bl.score_keys
        g, ch, r, c, j = (E.Var(name) for name in ("rg", "vch", "vr", "vcol", "vj"))
        acc = Buffer("o_tile", self.dtype, (mr * cols,), scope="local")
        row, col = g * mr + r, ch * cols + c
        tile_at = r * cols + c
        grouped = not isinstance(width, E.Const)
        update = E.call("fma", E.Load(self.probs, j * mq + row), self._value_element(j, col, clamp=grouped),
                        E.Load(acc, tile_at))
        products = For(r, E.const(mr), For(c, E.const(cols), Store(acc, tile_at, update), "vectorized"), "unrolled")
        if grouped:
            vg, vk = E.Var("vg"), E.Var("vk")
            whole = width // mrk
            key_loop = block(
                For(vg, whole, For(vk, E.const(mrk), block(Let(j, vg * mrk + vk), products))),
                For(vk, width - whole * mrk, block(Let(j, whole * mrk + vk), products)))
        else:
            key_loop = For(j, width, products)
        tile = block(
            For(r, E.const(mr), For(c, E.const(cols), Store(
                acc, tile_at, E.Load(self.o_acc, row * dvp + col) * E.Load(self.corr, row)), "vectorized"),
                "unrolled"),
            key_loop,
            For(r, E.const(mr), For(c, E.const(cols), Store(self.o_acc, row * dvp + col, E.Load(acc, tile_at)),
                                    "vectorized"), "unrolled"))
        groups = (self.rows + (mr - 1)) // mr
        return For(g, groups, _loop(ch, dvp // cols, Alloc(acc, tile)))

    def _write_out(self) -> Stmt:
        """out[i0 + r][c] = O[r][c] / l[r] for the block's valid rows."""
        r, c = E.Var("orow"), E.Var("ocol")
        dvp = self.bl.dv_padded
        flat = (self.b * self.m + self.i0 + r) * self.dv + c
        value = E.Load(self.o_acc, r * dvp + c) / E.Load(self.row_sum, r)
        if self.safe:  # the sum is 0 exactly when every score of the row is -inf
            value = E.Select(E.eq(E.Load(self.row_sum, r), self._const(0.0)), self._const(0.0), value)
        return For(r, self.rows, For(c, E.const(self.dv), Store(self.out, flat, E.cast(value, self.out.value_dtype)),
                                     "vectorized"))


def _loop(var: E.Var, extent: int, body: Stmt) -> Stmt:
    """A serial loop, or just its body with var = 0 when it has one iteration."""
    return For(var, E.const(extent), body) if extent > 1 else substitute(body, {var.name: E.const(0)})


def _plain_load(node: Node, values: ValueBuilder, dtype: str, unit_stride: bool) -> bool:
    """True when node's element is a load of `dtype` at an affine index (no div/mod/min/select),
    with stride 1 along the last axis if `unit_stride`: the kernel then reads it in place."""
    index = [E.Var(f"probe{k}") for k in range(node.ndim)]
    element = values.value(node, index)
    if not isinstance(element, E.Load) or element.buffer.dtype != dtype:
        return False
    if any(n.op not in ("add", "mul", "var", "const") for n in E.walk(element.index)):
        return False
    if not unit_stride:
        return True
    return index_step(element.index, index[-1].name, {v.name: 0 for v in index}) == 1
