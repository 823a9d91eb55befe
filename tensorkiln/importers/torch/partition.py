"""Graphs that are part compiled, part eager: the ATen nodes tensorkiln cannot lower stay PyTorch calls.

With the backend's `fallback=True`, a graph with unsupported ops is not handed
to eager PyTorch whole: as ONNX Runtime's and OpenVINO's torch.compile backends
do, the ATen graph is cut into the largest connected parts whose every node
tensorkiln lowers (torch.fx's `CapabilityBasedPartitioner`), each part is
converted and compiled by `tk.jit` on its own, and the outer graph calls those
parts and runs the remaining nodes as the ATen calls they are. A part that
still fails to compile (a value's dtype or a lowering's check found only now)
runs eagerly too. Tensors the graph closes over (parameters) stay constants of
the parts that read them.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from ...errors import TensorKilnError
from .convert import _TORCH_TO_TK, _get_attr, convert_graph, rebuild_outputs, unsupported_nodes
from .random_key import new_key
from .tensors import to_numpy, to_torch


class _Lowerable(OperatorSupportBase):
    """A call tensorkiln lowers, on values of dtypes it has."""

    def __init__(self, unsupported: set[str]):
        self.unsupported = unsupported

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        if node.op != "call_function" or node.name in self.unsupported:
            return False
        values = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
        return all(_has_tk_dtype(v) for v in values)


def _has_tk_dtype(value) -> bool:
    if isinstance(value, torch.Tensor):
        return value.dtype in _TORCH_TO_TK
    if isinstance(value, (list, tuple)):
        return all(_has_tk_dtype(v) for v in value)
    return True


class CompiledPart(torch.nn.Module):
    """One part of the graph, compiled by tensorkiln: called with torch tensors, returns torch tensors."""

    def __init__(self, part: torch.fx.GraphModule, constants: dict[str, torch.Tensor], compile_fn: Callable):
        super().__init__()
        converted = convert_graph(part, constants, what="graph part")
        self.placeholders = [n.name for n in _placeholders(part)]
        self.constant_names = set(constants)
        self.structure = converted.output_structure
        self.random = converted.random  # a new key per call (random_key.py)
        self.run = compile_fn(converted.fn)  # tk.jit with the backend's options

    def forward(self, *args):
        arrays = [to_numpy(a) for name, a in zip(self.placeholders, args) if name not in self.constant_names]
        arrays += [np.array(new_key(), dtype=np.int64)] if self.random else []
        return rebuild_outputs(self.structure, [to_torch(t) for t in self.run(*arrays)])


@dataclass
class Partitioned:
    """The outer graph (parts compiled, the rest eager) and what it says about itself."""

    module: torch.fx.GraphModule
    compiled_parts: int
    eager_ops: list[str]  # the ATen ops that run with PyTorch, as "op (why)" lines
    failed_parts: list[str]  # parts that did not compile, with the reason


def partition(traced: torch.fx.GraphModule, compile_fn: Callable) -> Partitioned:
    """Cut `traced` (an ATen graph from make_fx) into compiled parts and eager nodes; `compile_fn(fn)`
    compiles one part's function (tk.jit with the backend's options)."""
    missing = unsupported_nodes(traced.graph)
    unsupported = {name for names in missing.values() for name in names}
    partitioner = CapabilityBasedPartitioner(traced, _Lowerable(unsupported), allows_single_node_partition=True)
    fused = partitioner.fuse_partitions(partitioner.propose_partitions())
    compiled, failed = 0, []
    for node in list(fused.graph.nodes):
        if node.op != "call_module":
            continue
        part = getattr(fused, node.target)
        if not _computes(part):
            continue  # views and getitems alone: compiling them buys nothing
        constants = {p.name: _get_attr(fused, a.target) for p, a in zip(_placeholders(part), node.args)
                     if isinstance(a, torch.fx.Node) and a.op == "get_attr"}
        try:
            setattr(fused, node.target, CompiledPart(part, constants, compile_fn))
            compiled += 1
        except TensorKilnError as err:  # UnsupportedOpError included: the part stays a PyTorch module
            failed.append(f"{node.target}: {str(err).splitlines()[0]}")
    fused.recompile()
    return Partitioned(fused, compiled, sorted(missing), failed)


def _placeholders(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


_VIEWS = {torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten.expand.default,
          torch.ops.aten.permute.default, torch.ops.aten.t.default, torch.ops.aten.unsqueeze.default,
          torch.ops.aten.squeeze.dim, torch.ops.aten.slice.Tensor, torch.ops.aten.select.int, operator.getitem}


def _computes(part: torch.fx.GraphModule) -> bool:
    """True when the part does arithmetic (not only views of its inputs)."""
    return any(n.op == "call_function" and n.target not in _VIEWS for n in part.graph.nodes)

