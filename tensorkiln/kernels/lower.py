"""Lowering: a graph and its kernel grouping become a Program of loop-IR kernels over flat buffers.

The grouping (grouping.py's `partition`, a stage of its own in
driver/stages.py) decides which nodes form each kernel; here each kernel's
root is computed by a loop nest whose body is the inlined expression of the
whole fused group (inline.py). Reductions get an accumulator loop, matmul and
conv2d use the templates in templates/. Every graph input, output, constant
and materialized intermediate gets one Buffer.

The loop structure (which loops run in parallel, which are vectorized, how
long rows are split for threads) is chosen while the loop nests are built, by
schedule_defaults.py and the templates: there is no separate scheduling step,
except that a kernel no template tunes gets its tuned schedule sketch
(sketch.py) applied to that nest where a tuning record asks for one.
"""
from __future__ import annotations

import keyword
from dataclasses import dataclass, field

import numpy as np

from ..errors import UnsupportedOpError
from ..ir.graph import Graph, Node, format_node, node_names, node_notes
from ..ir.ops.registry import OpDef, OpKind, get_op
from ..ir.ops.collective import TOKEN
from .grouping import KernelGroup, companion_roundings
from .companion import rounding_of, with_companion_stores
from .concurrent import concurrent_control
from .control import LowerSubgraph, lower_control
from ..ir.ops.control import CONTROL_OPS, result_types, sub_graphs
from ..loops import expr as E
from ..loops.buffer import Buffer
from .overlap import overlapped_order
from .inline import ValueBuilder, broadcast_index, linear_index, reshape_index
from ..loops.ir import Assign, Kernel, Let, RuntimeCall, Store, block, simplify_kernel
from ..loops.nest import substitute_expr
from ..loops.program import Program
from .reduction import LANES_MIN, lane_sum, loop_index, reduce_loops, scalar_nest, use_lanes
from .schedule_defaults import output_nest
from .transposed import tile_transposed_reads
from .parallel_blocks import parallelize_blocks
from .templates.attention_bf16 import fused_attention_body
from .templates.conv_choice import tuned_conv2d_body, tuned_conv2d_nchwc_body, tuned_winograd_given_body
from .templates.conv_nchwc_bf16 import conv2d_nchwc_bf16_body
from .templates.conv_shallow_bf16 import shallow_bf16_body
from .templates.gemm_u8s8 import u8s8_gemm_body
from .templates.conv_u8s8 import conv_u8s8_body, depthwise_u8s8_body
from .templates.matmul import matmul_body
from .templates.weight_only import weight_only_body
from .templates.winograd_u8s8 import winograd_u8s8_body
from .templates.matmul_integer import matmul_integer_body
from .templates.pool import pool_body
from .templates.rows import reduction_pass, row_body
from .sketch import SKETCHED_KINDS, sketched
from .tuned import COMMENT_PREFIX, tuning_log
from ..loops.types import compute_dtype
from ..shapes import prod

C_RESERVED = set(keyword.kwlist) | {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
    "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return",
    "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
    "volatile", "while", "main", "args", "arena"}


@dataclass
class LoweredGraph:
    """A Program plus how it binds to the graph: constant arrays, and output aliases."""

    program: Program
    constants: list[np.ndarray]  # in program.constants order
    groups: list[KernelGroup]
    kernel_groups: dict[str, KernelGroup]
    # kernel name -> workloads it asked about that its comment does not name (an untuned sketch keeps
    # the C as it was; the report still lists the workload for the tuner)
    quiet_tuning: dict[str, list[str]] = field(default_factory=dict)


def _identifier(name: str, taken: set[str], fallback: str) -> str:
    base = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name) or fallback
    if base[0].isdigit() or base in C_RESERVED or base.startswith("tk_"):
        base = f"{fallback}_{base}"
    candidate, k = base, 1
    while candidate in taken:
        candidate, k = f"{base}_{k}", k + 1
    taken.add(candidate)
    return candidate


def _buffer(name: str, node: Node) -> Buffer:
    return Buffer(name, node.dtype.name, node.shape)


def _reduce_init(op: str, dtype: str) -> E.Expr:
    if op == "reduce_sum":
        value = 0
    elif op == "reduce_prod":
        value = 1
    elif dtype == "bool":
        return E.Const(op == "reduce_min", "bool")
    elif dtype.startswith("float"):
        value = -np.inf if op == "reduce_max" else np.inf
    else:
        info = np.iinfo(np.dtype(dtype))
        value = info.min if op == "reduce_max" else info.max
    return E.Const(float(value) if dtype.startswith("float") else int(value), dtype)


def _combine(op: str, acc: E.Expr, value: E.Expr) -> E.Expr:
    if op == "reduce_sum":
        return acc + value
    if op == "reduce_prod":
        return acc * value
    if acc.dtype == "bool":
        return E.logical_or(acc, value) if op == "reduce_max" else E.logical_and(acc, value)
    # NaN propagates, as in numpy: once acc is NaN it stays, and a NaN value replaces acc.
    better = E.gt(value, acc) if op == "reduce_max" else E.lt(value, acc)
    if value.dtype.startswith("float"):
        better = E.logical_or(better, E.ne(value, value))
    return E.Select(better, value, acc)


def accumulate(op: str, acc: E.Var, value: E.Expr) -> tuple[list, list, E.Expr]:
    """(declarations, per-element updates, result) of reducing `value` into the scalar `acc`.

    Float max/min reduce with plain max/min, which vectorizes (an OpenMP max
    reduction), and count NaNs on the side: like numpy, the result is NaN when
    any element is.
    """
    init = _reduce_init(op, acc.dtype)
    if op in ("reduce_max", "reduce_min") and acc.dtype.startswith("float"):
        nans = E.Var(f"{acc.name}_nans", acc.dtype)
        zero, one = E.Const(0.0, acc.dtype), E.Const(1.0, acc.dtype)
        pick = E.maximum if op == "reduce_max" else E.minimum
        updates = [Assign(acc, pick(acc, value)), Assign(nans, nans + E.Select(E.ne(value, value), one, zero))]
        result = E.Select(E.gt(nans, zero), E.Const(float("nan"), acc.dtype), acc)
        return [Let(acc, init), Let(nans, zero)], updates, result
    return [Let(acc, init)], [Assign(acc, _combine(op, acc, value))], acc


def _lane_extreme(op: str, dtype: str, loops: list, ndim: int) -> bool:
    """A float reduce_max/min whose one loop walks a contiguous run of a known length (the input's last
    axes): reduced in lanes (templates/rows.py's reduction_pass) rather than as one OpenMP SIMD chain."""
    return op in ("reduce_max", "reduce_min") and dtype.startswith("float") and len(loops) == 1 \
        and loops[0].axes[-1] == ndim - 1 and isinstance(loops[0].extent, int)


def _reduction_body(root: Node, out: Buffer, values: ValueBuilder) -> E.Expr:
    src = root.inputs[0]
    op = root.op
    axes = tuple(sorted(root.attrs["axes"])) if "axes" in root.attrs else (root.attrs["axis"],)
    keep = root.attrs["keepdims"]
    kept_axes = [a for a in range(src.ndim) if a not in axes]
    dtype = compute_dtype(src.dtype.name)
    arg = op in ("argmax", "argmin")
    # argmax/argmin report the position along their one axis: that loop stays as it is
    loops = reduce_loops(src.shape, axes, lambda index: values.value(src, index), merge=not arg)

    def body(index, flat):
        out_index = [index[a] for a in kept_axes] if keep else index
        src_index: list[E.Expr] = [E.const(0)] * src.ndim
        for a, i in zip(kept_axes, out_index):
            src_index[a] = i
        for a, i in loop_index(src.shape, loops).items():
            src_index[a] = i
        value = values.value(src, src_index)
        acc = E.Var("acc", dtype)
        if arg:
            best = E.Var("best", "int64")
            better = E.gt(value, acc) if op == "argmax" else E.lt(value, acc)
            if dtype.startswith("float"):  # the first NaN wins, as in numpy
                better = E.logical_or(better, E.logical_and(E.ne(value, value), E.eq(acc, acc)))
            step = block(Assign(best, E.Select(better, loops[0].var, best)),
                         Assign(acc, E.Select(better, value, acc)))
            init = block(Let(acc, values.value(src, [E.const(0) if a in axes else src_index[a]
                                                     for a in range(src.ndim)])),
                         Let(best, E.const(0)))
            result = best
        else:
            declarations, updates, result = accumulate(op, acc, value)
            step, init = block(*updates), block(*declarations)
        store = Store(out, flat, E.cast(result, out.value_dtype))
        if not arg and use_lanes(op, dtype, loops, src.ndim):
            return lane_sum(loops, value, acc, store)
        if _lane_extreme(op, dtype, loops, src.ndim):
            # a float max/min over one contiguous run: LANE_VECTORS vectors of partial extremes, each
            # compared plainly (NaNs are counted on the side), so the pass is not one vector's chain of
            # NaN-propagating compares and blends; the result is the same, in any order
            run = loops[0]
            stmts, lane_result = reduction_pass(root, acc, lambda e: substitute_expr(value, {run.var.name: e}),
                                                accumulate, run.extent, run.var.name, None, E.const(0))
            return block(*stmts, Store(out, flat, E.cast(lane_result, out.value_dtype)))
        blocked = acc if op == "reduce_sum" else None  # a float sum adds in blocks (reduction.py)
        return block(init, scalar_nest(loops, step, src.ndim, vectorize=not arg, acc=blocked), store)

    reduced = prod([src.shape[a] for a in axes])
    # One SIMD loop per nest: the reduction's innermost loop when it walks a long enough contiguous run,
    # else the output's columns (a column sum, or a few taps per output: lanes compute outputs)
    inner_vectorized = not arg and src.ndim - 1 in axes and loops[-1].extent >= LANES_MIN
    return output_nest(root.shape, body, "", work_per_element=max(reduced, 1), vectorize=not inner_vectorized)


# The kernel template of each contraction op: template(node, out, values, epilogue) -> loop IR.
TEMPLATES = {"matmul": matmul_body, "matmul_packed": matmul_body, "matmul_bf16_packed": matmul_body,
             "conv2d": tuned_conv2d_body, "conv2d_nchwc": tuned_conv2d_nchwc_body,
             "conv2d_nchwc_bf16": conv2d_nchwc_bf16_body,
             "conv2d_shallow_bf16": shallow_bf16_body, "conv2d_winograd": tuned_winograd_given_body,
             "matmul_integer": matmul_integer_body, "matmul_u8s8": u8s8_gemm_body,
             "conv2d_u8s8": conv_u8s8_body, "depthwise_u8s8": depthwise_u8s8_body,
             "conv2d_u8s8_winograd": winograd_u8s8_body,
             "matmul_int8w": weight_only_body, "matmul_int4w": weight_only_body}
# The reductions `_reduction_body` accumulates (with `_reduce_init` and `_combine`).
REDUCTIONS = frozenset({"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin"})


def lowering_of(op: OpDef) -> str | None:
    """How kernels lower a primitive of the op table; None when nothing here can (a missing fact)."""
    if op.kind == OpKind.SOURCE:
        return "a buffer"
    if op.runtime_call is not None:
        return "runtime call (runtime/hooks.py)"
    if op.kind == OpKind.CONTROL:
        return "C if/for/while calling sub-programs (kernels/control.py)"
    if op.lower is not None:
        return "element expression (its row)"
    if op.kind == OpKind.MOVEMENT and hasattr(ValueBuilder, f"_{op.name}"):
        return "index arithmetic (kernels/inline.py)"
    if op.kind == OpKind.CONTRACTION and op.name in TEMPLATES:
        return f"template {TEMPLATES[op.name].__module__.rsplit('.', 1)[-1]}"
    if op.kind == OpKind.REDUCTION and op.name in REDUCTIONS:
        return "reduction loop"
    return None


def lower_group(group: KernelGroup, buffers: dict[int, Buffer], params: list[Buffer], name: str,
                comment: str) -> Kernel | None:
    """Loop IR for one kernel group; None when its output is empty."""
    root = group.root
    out = buffers[root.id]
    values = ValueBuilder(buffers, inline_root=root)
    contraction = next((n for n in group.nodes if n.op in TEMPLATES), None)
    if group.kind == "attention":
        body = fused_attention_body(root, out, buffers)
    elif contraction is not None:
        def epilogue(index, acc, contraction=contraction):
            # The epilogue reads the contraction's element from its accumulator. Reshapes may sit
            # between the two (grouping.py): the root's element is the one at the same flat index.
            inner = ValueBuilder(buffers, inline_root=root, known={contraction.id: acc})
            if root.shape != contraction.shape:
                index = reshape_index(index, contraction.shape, root.shape)
            return E.cast(inner.value(root, index), out.value_dtype)

        body = TEMPLATES[contraction.op](contraction, out, values, epilogue if contraction is not root else None)
    elif group.kind == "row":
        body = row_body(root, group.nodes, out, buffers, accumulate)
    elif group.kind == "reduction":
        if any(root.inputs[0].shape[a] == 0 for a in root.attrs.get("axes", ())):
            body = output_nest(root.shape, lambda index, flat: Store(out, flat, _reduce_init(
                root.op, out.value_dtype)), "")
        else:
            body = pool_body(root, out, values)
            if body is None:
                body = _reduction_body(root, out, values)
                if body is not None:
                    return parallelize_blocks(simplify_kernel(Kernel(name, tuple(params), body, comment)))
    else:
        body = _piecewise_concat(root, out, values, buffers, tuple(params))
        if body is None:
            body = output_nest(root.shape, lambda index, flat: Store(
                out, flat, E.cast(values.value(root, index), out.value_dtype)), "")
            if body is not None:
                return tile_transposed_reads(simplify_kernel(Kernel(name, tuple(params), body, comment)))
    if body is None:
        return None
    return simplify_kernel(Kernel(name, tuple(params), body, comment))


def runtime_call_kernels(group: KernelGroup, buffers: dict[int, Buffer], names: tuple[str, str],
                         comment: str) -> tuple[Kernel, Kernel]:
    """The two kernels of a node the runtime computes (a collective): one call that starts it from the
    operand's buffer, one that waits for it and stores the result; kernels/overlap.py moves them apart."""
    root = group.root
    operand = root.inputs[0]
    is_token = operand.type == TOKEN  # recv's only operand: an order, not data the runtime reads
    if operand.id not in buffers and not is_token:  # grouping stores operands; a literal constant is not
        raise UnsupportedOpError(f"{root.op}: the C backend passes only stored operands to the runtime")
    what = get_op(root.op).runtime_call(root.attrs, operand.type, root.type)
    source = () if is_token else (buffers[operand.id],)
    out = buffers[root.id]
    # Tokens (a message's place in the order of messages) are not passed to the runtime: as the start
    # kernel's parameters they only order it after their writers (kernels/overlap.py).
    after = tuple(buffers[i.id] for i in root.inputs[int(not is_token):] if i.id in buffers
                  and i.type == TOKEN)
    return (Kernel(names[0], source + after, RuntimeCall(f"{what} phase=start", (), source), comment),
            Kernel(names[1], (out,), RuntimeCall(f"{what} phase=wait", (out,), ()), comment))


MANY_PIECES = 4  # from this many pieces on, a concat is one loop nest per piece


def _inlined_concat(node: Node, buffers: dict[int, Buffer]) -> bool:
    """`node` is a concat computed inside this kernel, perhaps under reshapes."""
    while node.op == "reshape" and node.id not in buffers:
        node = node.inputs[0]
    return node.op == "concat" and node.id not in buffers


def _concat_leaves(node: Node, to_root, buffers: dict[int, Buffer], root: Node) -> list:
    """(piece, map from the piece's index to the root's index) for every piece of the concats
    (and reshapes of them) that `node` is made of inside this kernel."""
    if node.op == "reshape" and (node is root or node.id not in buffers) and _inlined_concat(node.inputs[0], buffers):
        source = node.inputs[0]
        return _concat_leaves(source, lambda index, node=node, source=source, f=to_root: f(
            reshape_index(index, source.shape, node.shape)), buffers, root)
    if node.op == "concat" and (node is root or node.id not in buffers):
        axis, start, leaves = node.attrs["axis"], 0, []
        for piece in node.inputs:
            if piece.shape[axis] == 0:
                continue
            def shifted(index, start=start, axis=axis, f=to_root):
                return f([i + start if a == axis else i for a, i in enumerate(index)])
            leaves += _concat_leaves(piece, shifted, buffers, root)
            start += piece.shape[axis]
        return leaves
    if node.op == "reshape" and node is not root and node.id not in buffers and node.inputs[0].id not in buffers \
            and node.inputs[0].ndim >= 2:
        # a piece flattened from a computed tensor (a weight gradient's permute, flattened into a DDP
        # bucket): walk the tensor's own rows and columns, so a transposed read can be tiled
        source = node.inputs[0]
        return [(source, lambda index, node=node, source=source, f=to_root: f(
            reshape_index(index, source.shape, node.shape)))]
    return [(node, to_root)]


def _piecewise_concat(root: Node, out: Buffer, values: ValueBuilder, buffers: dict[int, Buffer],
                      params: tuple[Buffer, ...]):
    """A kernel that stores concats of many pieces (under reshapes too) as one loop nest per
    piece, each writing its part of the output; None for other kernels.

    Element by element, a concat is a chain of selects on the position along its axis: fine for
    two or three pieces, but an unrolled RNN stacks one piece per time step, and branch-free
    selects then load every piece for every element (a 64-piece stack ran ~20x slower)."""
    leaves = _concat_leaves(root, lambda index: index, buffers, root)
    if len(leaves) < MANY_PIECES:
        return None
    strides = [prod(root.shape[a + 1:]) for a in range(root.ndim)]
    nests = []
    for k, (piece, to_root) in enumerate(leaves):
        def body(index, flat, piece=piece, to_root=to_root):
            dest = sum(i * stride for i, stride in zip(to_root(index), strides))
            return Store(out, dest, E.cast(values.value(piece, index), out.value_dtype))
        nests.append(_tiled_nest(output_nest(tuple(piece.shape), body, f"p{k}_"), params))
    return block(*[n for n in nests if n is not None])


def _tiled_nest(nest, params: tuple[Buffer, ...]):
    """One piece's nest with its transposed reads tiled (transposed.py), where it has any."""
    return None if nest is None else tile_transposed_reads(Kernel("piece", params, nest, "")).body


def _copy_kernel(name: str, src: Buffer, dst: Buffer) -> Kernel | None:
    body = output_nest(dst.shape, lambda index, flat: Store(dst, flat, E.Load(src, flat)), "")
    return None if body is None else Kernel(name, (dst, src), body, f"copy {src.name} to output {dst.name}")


def buffer_constants(graph: Graph) -> list[Node]:
    """The constants that become arrays passed to the program, in its order (the rest are inlined literals):
    the graph's own, then those of its control-flow sub-graphs (kernels/control.py lifts them)."""
    outputs = {node.id for node in graph.outputs}
    control_operands = {i.id for node in graph.nodes if node.op in CONTROL_OPS for i in node.inputs}
    own = [node for node in graph.nodes
           if node.op == "constant" and (node.type.size > 1 or node.id in outputs or node.id in control_operands)]
    return own + [c for node in graph.nodes if node.op in CONTROL_OPS
                  for _, sub in sub_graphs(node.attrs) for c in buffer_constants(sub.graph)]


def lower_graph(graph: Graph, groups: list[KernelGroup], lower_subgraph: LowerSubgraph | None = None,
                prefix: str = "") -> LoweredGraph:
    """Lower a whole graph to one Program, one kernel per group of `groups` (grouping.partition(graph)).

    A control-flow op's sub-graphs are lowered by `lower_subgraph` (the driver's stages 2-4) into
    sub-programs; `prefix` starts every kernel name (a sub-program's kernels share the C file).
    """
    taken: set[str] = set()
    buffers: dict[int, Buffer] = {}
    inputs = []
    for node in graph.inputs:
        buffers[node.id] = _buffer(_identifier("in_" + node.attrs["name"], taken, "in"), node)
        inputs.append(buffers[node.id])
    constants, constant_arrays = [], []
    sub_constants = {c.id for node in graph.nodes if node.op in CONTROL_OPS
                     for _, sub in sub_graphs(node.attrs) for c in buffer_constants(sub.graph)}
    for node in buffer_constants(graph):
        if node.id in sub_constants:
            continue  # lifted from a sub-program while its control-flow op is lowered
        buffers[node.id] = _buffer(_identifier(f"c{len(constants)}", taken, "c"), node)
        constants.append(buffers[node.id])
        constant_arrays.append(np.asarray(node.attrs["value"].array, order="C"))

    names = node_names(graph)
    outputs: list[Buffer] = []
    output_of: dict[int, Buffer] = {}
    copies: list[tuple[Buffer, Buffer]] = []
    for k, node in enumerate(graph.outputs):
        out = _buffer(_identifier(f"out{k}", taken, "out"), node)
        outputs.append(out)
        if node.kind == OpKind.SOURCE or node.id in output_of:
            copies.append((buffers.get(node.id) or output_of[node.id], out))
        else:
            output_of[node.id] = out
            buffers[node.id] = out
    temps = []
    results: dict[int, list[Node]] = {}  # control-flow node id -> its result nodes by index
    for node in graph.nodes:
        if node.op == "result":
            results.setdefault(node.inputs[0].id, []).append(node)
    for node in graph.nodes:
        if node.op == "result" and node.id not in buffers:
            buffers[node.id] = _buffer(_identifier(f"t{len(temps)}", taken, "t"), node)
            temps.append(buffers[node.id])
    for group in groups:
        if group.root.kind == OpKind.CONTROL:
            continue  # writes its results' buffers
        if group.root.id not in buffers:
            buffers[group.root.id] = _buffer(_identifier(f"t{len(temps)}", taken, "t"), group.root)
            temps.append(buffers[group.root.id])

    kernels, kernel_groups, subprograms = [], {}, []
    quiet_tuning: dict[str, list[str]] = {}
    companions = companion_roundings(groups)
    joined: set[int] = set()  # roots of rounding kernels whose stores the kernel of their input makes
    for index, group in enumerate(groups):
        if group.root.id in joined:
            continue
        params = [buffers.get(group.root.id)] + [buffers[n.id] for n in group.inputs if n.id in buffers]
        params = list(dict.fromkeys(params))
        name = _identifier(prefix + group.name, taken, "k")
        comment = "\n".join(format_node(n, names) + (f"   ({node_notes(n)})" if node_notes(n) else "")
                            for n in group.nodes if n.kind != OpKind.SOURCE)
        if get_op(group.root.op).runtime_call is not None:
            pair = (_identifier(name + "_start", taken, "k"), _identifier(name + "_wait", taken, "k"))
            for kernel in runtime_call_kernels(group, buffers, pair, comment):
                kernels.append(kernel)
                kernel_groups[kernel.name] = group
            continue
        if group.root.kind == OpKind.CONTROL:
            if lower_subgraph is None:
                raise UnsupportedOpError(f"{group.root.op}: lowering control flow needs the compile pipeline's "
                                         "lower_subgraph")
            duplicates: list[tuple[Buffer, Buffer]] = []
            outs = _result_buffers(group.root, results.get(group.root.id, []), buffers, duplicates, taken, temps)
            lowered = lower_control(group.root, [buffers[i.id] for i in group.root.inputs], outs, name, comment,
                                    lambda n: _identifier(n, taken, "t"), lower_subgraph)
            temps += lowered.temps
            constants += lowered.constants
            constant_arrays += lowered.constant_arrays
            subprograms += lowered.subprograms
            kernels.append(lowered.kernel)
            kernel_groups[name] = group
            for src, dst in duplicates:
                kernels += [k for k in [_copy_kernel(_identifier(f"{prefix}copy_{dst.name}", taken, "k"), src, dst)] if k]
            continue
        with tuning_log() as uses:  # the configurations the templates asked for: named in the comment
            kernel = lower_group(group, buffers, params, name, comment)
            if kernel is not None and not uses and group.kind in SKETCHED_KINDS:
                kernel = sketched(kernel, group.kind)  # no template: its loop nest is the tunable sketch
        quiet = [use for use in uses if use.workload.startswith("sketch:") and use.source == "default"]
        uses = [use for use in uses if use not in quiet]
        if kernel is not None and quiet:
            quiet_tuning[kernel.name] = [use.comment_line()[len(COMMENT_PREFIX):] for use in quiet]
        if kernel is not None and uses:
            kernel = Kernel(kernel.name, kernel.params, kernel.body,
                            "\n".join([kernel.comment] + [use.comment_line() for use in uses]))
        if kernel is not None:
            kernel = _join_companions(kernel, group, companions.get(group.root.id, []), buffers, names, joined)
            kernels.append(kernel)
            kernel_groups[name] = group
    for src, dst in copies:
        kernel = _copy_kernel(_identifier(f"{prefix}copy_{dst.name}", taken, "k"), src, dst)
        if kernel is not None:
            kernels.append(kernel)
    kernels = overlapped_order(kernels)
    kernels, merged = concurrent_control(kernels)  # independent scans of one length: side by side
    for name, parts in merged.items():
        kernel_groups[name] = kernel_groups[parts[0]]
    program_name = _identifier(graph.name, set(), "graph")
    program = Program(program_name, tuple(kernels), tuple(inputs), tuple(outputs), tuple(constants), tuple(temps),
                      subprograms=tuple(subprograms))
    return LoweredGraph(program, constant_arrays, groups, kernel_groups, quiet_tuning)


def _join_companions(kernel: Kernel, group: KernelGroup, companions: list[KernelGroup], buffers: dict[int, Buffer],
                     names: dict[int, str], joined: set[int]) -> Kernel:
    """`kernel` (of `group`) also storing the bf16 roundings of its output that `companions` would
    store alone (companion.py); each one joined is added to `joined`, whose kernels are not emitted."""
    out = buffers[group.root.id]
    for companion in companions:
        stored = [format_node(n, names) for n in companion.nodes]
        stored[-1] += "   (a second output of this kernel)"
        lines = kernel.comment.splitlines()
        tuning = [line for line in lines if line.startswith(COMMENT_PREFIX)]  # kept after the graph nodes
        comment = "\n".join([line for line in lines if line not in tuning] + stored + tuning)
        element = rounding_of(companion.root, group.root, buffers)
        two = with_companion_stores(kernel, out, buffers[companion.root.id], element, comment)
        if two is not None:
            kernel = two
            joined.add(companion.root.id)
    return kernel


def _result_buffers(node: Node, readers: list[Node], buffers: dict[int, Buffer], copies: list,
                    taken: set[str], temps: list[Buffer]) -> list[Buffer]:
    """The buffer each result of control-flow `node` is written to: its result node's, or a scratch
    temp for a result nobody reads; a second result node of one index gets a copy (`copies`)."""
    outs: list[Buffer | None] = [None] * len(result_types(node.op, node.attrs))
    for reader in readers:
        k = reader.attrs["index"]
        if outs[k] is None:
            outs[k] = buffers[reader.id]
        else:
            copies.append((outs[k], buffers[reader.id]))
    for k, t in enumerate(result_types(node.op, node.attrs)):
        if outs[k] is None:
            outs[k] = Buffer(_identifier(f"unused{k}", taken, "t"), t.dtype.name, t.shape)
            temps.append(outs[k])
    return outs


__all__ = ["LoweredGraph", "buffer_constants", "lower_graph", "lower_group", "broadcast_index", "linear_index",
           "UnsupportedOpError"]
