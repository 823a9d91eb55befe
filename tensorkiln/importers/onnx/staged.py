"""Running an ONNX graph whose shapes depend on data: compiled stages between the nodes that need values.

A model with NonZero, Unique, Compress, NonMaxSuppression, or a Reshape / TopK /
ConstantOfShape whose shape or k is computed from the data, cannot be one
compiled program: some shape is only known once earlier values are. As
torch.compile breaks a graph at such an op, the module then runs its nodes in
stages (found on the first call, kept for later ones):

    segment 0 (compiled) -> node b0 on actual values -> segment 1 (compiled) -> node b1 -> ...

A segment is a tk.jit function of the values it reads that earlier stages
computed (graph inputs included) and returns those later stages or the graph's
outputs read; constants and initializers stay constants inside it. A boundary
node runs with eager tensors, so its converter computes at once (numpy). Value
inputs of the model (read as shapes) stay value-specialized in every segment.
Each segment compiles per input signature like any jitted function (with
automatic dynamic shapes where they exist), and the warning on recompiles and
the bound on programs held apply per segment.
"""
from __future__ import annotations

from typing import Callable

from ...driver.executable import CompileReport
from ...frontend.jit import JitFunction, jit
from ...frontend.tensor import as_tensor
from .control import SubGraphBody
from .frozen import FrozenValue
from .registry import DataDependentOutput


class StagedGraph:
    """The stages of one OnnxModule's graph (see the module docstring)."""

    def __init__(self, module, make_jit: Callable[[Callable], JitFunction] | None = None):
        self._module = module
        self._nodes = module._nodes
        self._make_jit = make_jit or jit
        self.breaks: set[int] = set()  # positions of the nodes run on actual values between segments
        self._segments: dict[tuple[int, int], JitFunction] = {}
        self._found: int | None = None  # the node a segment's trace stopped at
        # per position: every name the node reads (its branches' and bodies' reads too)
        self._reads = [set(_names_read(node)) for node in self._nodes]

    # ---- running ----------------------------------------------------------------------------------------
    def __call__(self, arguments: list, reports: list | None = None) -> list:
        """The graph's outputs for `arguments`; `reports`, when given, gets each segment's CompileReport."""
        module = self._module
        env: dict = dict(module._constants)
        env[""] = None
        frozen = {}
        for name, value in zip(module.input_names, arguments):
            if isinstance(value, FrozenValue):  # a value input: stays specialized in every segment
                frozen[name] = value
                env[name] = as_tensor(value.array, value.dtype)
            else:
                env[name] = value
        start = 0
        while start < len(self._nodes):
            if start in self.breaks:
                module._run_nodes([self._nodes[start]], env)  # eager inputs: computes at once
                start += 1
                continue
            end = min([b for b in self.breaks if b > start] + [len(self._nodes)])
            try:
                self._run_segment(start, end, env, frozen, reports)
                start = end
            except DataDependentOutput:
                if self._found is None or self._found in self.breaks:
                    raise
                self.breaks.add(self._found)  # the segment stops there; the node runs on values
        outputs = [env[name] for name in module.output_names]
        module._check_outputs(outputs)
        return outputs

    def _run_segment(self, start: int, end: int, env: dict, frozen: dict, reports: list | None) -> None:
        produced = {o for node in self._nodes[start:end] for o in node.outputs if o}
        read = set().union(*self._reads[start:end]) if end > start else set()
        live_in = sorted(name for name in read - produced if name in env and name
                         and name not in self._module._constants)
        later = set().union(*self._reads[end:]) | set(self._module.output_names)
        live_out = sorted(name for name in produced if name in later)
        key = (start, end)
        if key not in self._segments:
            self._segments[key] = self._make_jit(self._segment_function(start, end, live_in, live_out))
        arguments = [frozen.get(name, env[name]) for name in live_in]
        self._found = None
        results = self._segments[key](*arguments)
        if reports is not None:
            reports.append(self._segments[key].report(*arguments))
        for name, value in zip(live_out, results):
            env[name] = value

    def _segment_function(self, start: int, end: int, live_in: list[str], live_out: list[str]) -> Callable:
        module, nodes = self._module, self._nodes

        def segment(*values):
            env = dict(module._constants)
            env[""] = None
            for name, value in zip(live_in, values):
                env[name] = as_tensor(value.array, value.dtype) if isinstance(value, FrozenValue) else value
            for position in range(start, end):
                try:
                    module._run_nodes([nodes[position]], env)
                except DataDependentOutput:
                    self._found = position
                    raise
            return [env[name] for name in live_out]

        segment.__name__ = f"stage_{start}_{end}"
        return segment

    def report(self, arguments: list) -> CompileReport:
        """One CompileReport for all segments of these arguments' run: backend "c" when every segment runs
        generated C; the kernels of all of them, in order."""
        reports: list[CompileReport] = []
        self(arguments, reports)
        fallback = next((r for r in reports if r.backend != "c"), None)
        return CompileReport(
            backend="c" if fallback is None else fallback.backend,
            kernels=[k for r in reports for k in r.kernels],
            compile_seconds=sum(r.compile_seconds for r in reports), lower_seconds=sum(r.lower_seconds for r in reports),
            trace_seconds=sum(r.trace_seconds for r in reports), cache_hit=all(r.cache_hit for r in reports),
            arena_bytes=max((r.arena_bytes for r in reports), default=0),
            fallback_reason=None if fallback is None else fallback.fallback_reason)

    # ---- what it holds ----------------------------------------------------------------------------------
    def cache_size(self) -> int:
        """Compiled programs held by all segments."""
        return sum(f.cache_size() for f in self._segments.values())

    def describe(self) -> str:
        """The stages, in order: node ranges compiled, and the nodes run on values between them."""
        lines, start, n = [], 0, len(self._nodes)
        while start < n:
            if start in self.breaks:
                node = self._nodes[start]
                lines.append(f"  node {start} '{node.name}' ({node.op_type}): on actual values")
                start += 1
                continue
            end = min([b for b in self.breaks if b > start] + [n])
            lines.append(f"  nodes {start}-{end - 1}: compiled segment")
            start = end
        return "\n".join(lines)


def _names_read(node) -> list[str]:
    """The names `node` reads, including those its sub-graphs (If/Loop/Scan bodies) read from outside."""
    names = [i for i in node.inputs if i]
    for value in node.attrs.values():
        if isinstance(value, SubGraphBody):  # a branch or loop body (control flow)
            for sub in value.nodes:
                names += _names_read(sub)
    return names

