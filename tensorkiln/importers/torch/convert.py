"""Convert an ATen-level torch.fx graph into a tensorkiln function.

`convert_graph` checks every node against the lowering table first and raises
one `UnsupportedOpError` naming every unsupported op (and the graph nodes that
use it) at once; then it returns a Python function over tk Tensors that
replays the graph with tensorkiln's front-end ops, ready for `tk.jit`. Every
lowered value is checked against the shape and dtype PyTorch recorded for the
node (`node.meta["val"]`): a dtype that differs is cast, a shape that differs
is a bug and raises instead of answering wrongly.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ...errors import TensorKilnError, UnsupportedOpError
from ...frontend.tensor import Tensor
from ...shapes import hint_of
from . import (lowering_backward, lowering_batch_norm, lowering_creation, lowering_elementwise,  # noqa: F401
               lowering_indexing, lowering_layers, lowering_math, lowering_misc, lowering_movement, lowering_nn,
               lowering_order, lowering_random, lowering_reductions, lowering_scan, lowering_sizes,
               lowering_special)  # (registration)
from .lowering import LOWERINGS
from .random_key import drawing_under, is_random
from .refusals import refusal_reason
from .tensors import _TORCH_TO_TK, tk_dtype, to_numpy, to_tk, to_torch, torch_dtype  # noqa: F401  (re-exported)

def _target_name(target) -> str:
    return str(target) if not callable(target) or isinstance(target, torch._ops.OpOverload) \
        else getattr(target, "__name__", str(target))


def _written_arguments(target) -> list[int]:
    """Positions of the arguments an ATen op overwrites (`Tensor(a!)` in its schema)."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return []
    return [i for i, arg in enumerate(schema.arguments) if arg.alias_info is not None and arg.alias_info.is_write]


def functional_target(target):
    """The out-of-place overload of an in-place ATen op (aten.relu_ -> aten.relu), else `target` itself."""
    if not isinstance(target, torch._ops.OpOverload) or not _written_arguments(target):
        return target
    name = target.overloadpacket.__name__
    packet = getattr(torch.ops.aten, name[:-1], None) if name.endswith("_") else None
    return getattr(packet, target._overloadname, target) if packet is not None else target


def _is_private_update(node: torch.fx.Node) -> bool:
    """True when every tensor the in-place `node` overwrites is an intermediate that nothing else sees.

    Then replaying it out of place gives the same values: the overwritten tensor is
    a fresh result (not a graph input, parameter or view of another tensor) whose
    only reader of values is this node (`full_like` of it reads only its shape). torch.export's graph before decomposition keeps
    in-place ops such as `relu_` and `add_`; anything less simple is functionalized.
    """
    for position in _written_arguments(node.target):
        arg = node.args[position] if position < len(node.args) else None
        if not isinstance(arg, torch.fx.Node) or arg.op != "call_function" or len(_value_readers(arg)) != 1:
            return False
        schema = getattr(arg.target, "_schema", None)
        if schema is None:
            return False
        aliases = any(r.alias_info is not None for r in schema.returns)
        if aliases and not (_written_arguments(arg.target) and _is_private_update(arg)):
            return False
    return True


# ops that read only a tensor's shape and dtype: a write into the tensor changes nothing they compute
_SHAPE_ONLY_READERS = frozenset({torch.ops.aten.full_like.default, torch.ops.aten.empty_like.default,
                                 torch.ops.aten.zeros_like.default, torch.ops.aten.ones_like.default})


def _value_readers(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The users of `node` that read its values (`full_like(x, 0)` reads only x's shape and dtype)."""
    return [user for user in node.users if user.target not in _SHAPE_ONLY_READERS]


def _lowering_of(node: torch.fx.Node):
    """The lowering for `node` (an in-place op replays as its out-of-place form when that is exact)."""
    target = functional_target(node.target)
    if target is not node.target and not _is_private_update(node):
        return None
    return LOWERINGS.get(target)


def unsupported_nodes(graph: torch.fx.Graph) -> dict[str, list[str]]:
    """{op name: [node names]} for every call the lowering table cannot convert (or a variant it refuses)."""
    missing: dict[str, list[str]] = {}
    for node in graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        lowering = _lowering_of(node)
        if lowering is None:
            reason = _target_name(node.target)
            if refusal_reason(reason):
                reason += f" ({refusal_reason(reason)})"
            elif functional_target(node.target) is not node.target:
                reason += " (updates a graph input or a tensor other nodes read)"
        else:
            why = lowering.check(node) if lowering.check is not None else None
            if why is None:
                continue
            reason = f"{_target_name(node.target)} ({why})"
        missing.setdefault(reason, []).append(node.name)
    for node in graph.nodes:  # dtypes tensorkiln does not have (complex, uint16, float8)
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and val.dtype not in _TORCH_TO_TK and (node.users or node.op == "placeholder"):
            missing.setdefault(f"dtype {val.dtype}", []).append(node.name)
    return missing


def check_supported(graph: torch.fx.Graph, what: str = "graph") -> None:
    """Raise one UnsupportedOpError listing every unsupported op of `graph` with its nodes."""
    missing = unsupported_nodes(graph)
    if missing:
        lines = [f"  {op}: {', '.join(nodes)}" for op, nodes in sorted(missing.items())]
        raise UnsupportedOpError(f"tensorkiln cannot convert {len(missing)} PyTorch op(s) of this {what} "
                                 f"(op: graph nodes):\n" + "\n".join(lines))


@dataclass
class ConvertedGraph:
    """A graph as a function over tk Tensors: `fn(*inputs)` returns a flat list of outputs."""

    fn: Callable
    input_names: list[str]
    output_structure: Any  # the graph's output with tensors replaced by their index in the flat list
    random: bool = False  # it draws random numbers: `fn` takes one more input, a 0-d int64 key per call
    constants: dict[str, Any] = field(default_factory=dict)  # graph input read as a constant -> its snapshot


def convert_graph(gm: torch.fx.GraphModule, constants: dict[str, Any] | None = None,
                  what: str = "graph") -> ConvertedGraph:
    """Lower an ATen-level GraphModule. Placeholders named in `constants` (and get_attr tensors) become
    constants (snapshots of their values); the other placeholders are the inputs, in graph order."""
    graph = gm.graph
    check_supported(graph, what)
    constants = constants or {}
    # non-tensor constants (a bool or int input torch.export specialized) pass through as they are
    fixed: dict[str, Any] = {name: to_tk(t, copy=True) if isinstance(t, torch.Tensor) else t
                             for name, t in constants.items()}
    for node in graph.nodes:
        if node.op == "get_attr":
            value = _get_attr(gm, node.target)
            if isinstance(value, torch.Tensor):
                fixed[node.name] = to_tk(value, copy=True)
            else:
                raise UnsupportedOpError(f"get_attr {node.target} of type {type(value).__name__} "
                                         f"(node {node.name}) is not a tensor")
    inputs = [n for n in graph.nodes if n.op == "placeholder" and n.name not in fixed]
    output_node = next(n for n in graph.nodes if n.op == "output")
    flat_outputs: list[torch.fx.Node] = []
    structure = _index_outputs(output_node.args[0], flat_outputs)
    random = any(node.op == "call_function" and is_random(node.target) for node in graph.nodes)

    def run(*args):
        if random:  # the last input is the key the random ops draw under (random_key.py)
            with drawing_under(args[-1]):
                return replay(*args[:-1])
        return replay(*args)

    def replay(*args):
        env: dict[torch.fx.Node, Any] = {}
        for node, value in zip(inputs, args):
            env[node] = value
        for node in graph.nodes:
            if node.op == "placeholder":
                if node.name in fixed:
                    env[node] = fixed[node.name]
            elif node.op == "get_attr":
                env[node] = fixed[node.name]
            elif node.op == "call_function":
                node_args = torch.fx.node.map_arg(node.args, env.__getitem__)
                node_kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
                if node.target is operator.getitem:
                    value = node_args[0][node_args[1]]
                else:
                    value = _lowering_of(node).fn(*node_args, **node_kwargs)
                env[node] = _match_meta(value, node.meta.get("val"), node)
        return [env[n] for n in flat_outputs]

    return ConvertedGraph(run, [n.name for n in inputs], structure, random, fixed)


def _get_attr(gm: torch.nn.Module, target: str):
    value = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _index_outputs(value, flat: list) -> Any:
    if isinstance(value, torch.fx.Node):
        flat.append(value)
        return len(flat) - 1
    if isinstance(value, (list, tuple)):
        return type(value)(_index_outputs(v, flat) for v in value)
    return ("static", value)


def rebuild_outputs(structure, flat: list):
    """The graph's output structure with the flat results put back in."""
    if isinstance(structure, int):
        return flat[structure]
    if isinstance(structure, tuple) and len(structure) == 2 and structure[0] == "static":
        return structure[1]
    return type(structure)(rebuild_outputs(v, flat) for v in structure)


def _match_meta(value, meta, node):
    """Cast a lowered value to the dtype PyTorch recorded; refuse a shape that differs."""
    if isinstance(value, (list, tuple)) and isinstance(meta, (list, tuple)):
        return type(value)(_match_meta(v, m, node) for v, m in zip(value, meta))
    if isinstance(value, Tensor) and isinstance(meta, torch.Tensor):
        if not _same_shape(value.shape, meta.shape):
            raise TensorKilnError(f"internal error converting {node.name} ({_target_name(node.target)}): "
                                  f"tensorkiln shape {list(value.shape)}, PyTorch shape {list(meta.shape)}")
        want = tk_dtype(meta.dtype)
        if value.dtype != want:
            value = value.to(want)
    return value


def _same_shape(shape, meta_shape) -> bool:
    """tensorkiln's shape against PyTorch's. A size PyTorch keeps symbolic (dynamic_shapes) is not compared:
    its example value differs from the call's, and comparing a size symbol would record a guard."""
    return len(shape) == len(meta_shape) and all(
        isinstance(meta_size, torch.SymInt) or hint_of(size) == int(meta_size)
        for size, meta_size in zip(shape, meta_shape))
