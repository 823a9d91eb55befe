"""The compile pipeline: one traced graph through named stages to a CompiledGraph.

`compile_graph` reads as the list of stages (STAGES):

1. optimize       graph passes of the opt level (tensorkiln.passes)
2. group kernels  the fusion decisions: which nodes form each kernel, which values are
                  materialized and why (kernels/grouping.py)
3. lower          each group to a loop-IR kernel, one Program (kernels/lower.py); the
                  default schedule (parallel and vectorized loops, row blocking) is chosen
                  while the loop nests are built (kernels/schedule_defaults.py and the
                  templates), so scheduling is not a stage of its own
4. plan memory    arena offsets of the intermediates, outputs written in place of inputs
                  (kernels/memory_plan.py, loops/in_place.py)
5. generate C     the translation unit (codegen/c.py, through build.py)
6. build          compile (or find in the C compiler's cache) and load (build.py, runtime/)

Before stage 2 the compiled-graph cache (runtime/graph_cache.py) is asked for
a library built before from the same optimized graph, options and target: a
hit skips stages 2-6 (they are run again only when someone asks for their
results: explain, profile, a dump). With backend="interpreter", without a C
compiler, or for a graph the C backend cannot express, the pipeline stops
after stage 1 and the CompiledGraph runs the reference interpreter.

Every stage's result can be dumped: with CompileOptions.dump_dir (or
TENSORKILN_DUMP_IR=dir) one file per pass and per stage,
`<graph>.<NN>.<name>.txt`, numbered in pipeline order. `explain` shows the
same, stage by stage, for tk.jit's `f.explain(...)`.

The options come in one CompileOptions (options.py); the stages take it, or
the value they need from it, as an argument.
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass

import numpy as np

from ..errors import TensorKilnError, UnsupportedOpError
from ..ir.fingerprint import fingerprint
from ..ir.graph import Graph
from ..kernels import lower as lowering_module
from ..kernels.grouping import KernelGroup, format_grouping, partition
from ..kernels.precision import kernel_precision
from ..kernels.lower import LoweredGraph, buffer_constants
from ..kernels.memory_plan import MemoryPlan, apply_plan, state_update_pairs
from ..kernels import memory_plan as memory_module
from ..kernels.memory_plan_symbolic import plan_symbolic_memory
from ..loops.program import Program
from ..runtime import c_compiler, graph_cache
from . import build as build_module
from .executable import CompiledGraph, KernelInfo
from .options import CompileOptions
from .progress import Progress
from ..passes import optimize as run_passes
from ..loops.in_place import skip_unchanged_stores
from ..kernels.schedule_defaults import thread_count
from ..kernels.target import cpu_description, cpu_target
from ..kernels.templates.conv import forced_algorithm
from ..kernels.templates.stream_prefetch import weight_stream_prefetch
from ..kernels.tuned import COMMENT_PREFIX, records_note, tuning_digest
from ..runtime.module import ArenaAllocationError, CompiledModule, LibraryLoadError
from ..runtime.signature import Signature
from ..shapes import hint_of
from .sized_call import SizedCall, shape_env_of

STAGES = ("optimize", "group kernels", "lower", "plan memory", "generate C", "build")


@dataclass
class Lowering:
    """What stages 2-4 made of an optimized graph (explain, profile and dumps read it)."""

    grouping: list[KernelGroup]
    lowered: LoweredGraph  # its program is the memory-planned one
    memory: MemoryPlan
    in_place: dict[int, int]  # output position -> input position it overwrites


def compile_graph(traced: Graph, options: CompileOptions, updates: list[tuple[int, int]] = ()) -> CompiledGraph:
    """Compile one traced graph; `updates` are (output, input) positions an output may overwrite.

    A compile that outlasts a second reports its stages on stderr (progress.py).
    """
    with Progress(f"compiling {traced.name}") as progress:
        return _compile_graph(traced, options, list(updates), progress)


def _compile_graph(traced: Graph, options: CompileOptions, updates: list[tuple[int, int]],
                   progress: Progress) -> CompiledGraph:
    options = options.resolved()  # debug and dump_dir from the environment, read once per compile
    dump = StageDump(options.dump_dir, traced.name)
    progress.stage(f"optimizing {len(traced)} nodes")
    graph, passes = optimize(traced, options)                                       # 1. optimize
    dump.first = len(passes) + 1
    compiled = CompiledGraph(traced, graph, passes, relower=lambda: lower_stages(graph, options, updates))
    if not options.compiles_c:  # asked for (fast checks of many small graphs): no warning
        return compiled.interpreted("backend='interpreter' requested")
    if c_compiler.find_c_compiler() is None:
        reason = "no C compiler found (set CC or install gcc)"
        return compiled.interpreted(reason, f"tensorkiln: {reason}; tk.jit runs the reference interpreter instead")
    start = time.perf_counter()
    symbolic = shape_env_of(traced) is not None  # sizes read per call: no compiled-graph cache entry yet
    try:
        key = cache_key(graph, options, updates) if not symbolic else None
        if not symbolic and load_cached(compiled, key, options, start):
            if dump:
                dump.write(graph, compiled.lowering, compiled.module)
            return compiled
        progress.stage("grouping kernels")
        grouping = group_kernels(graph, options)                                    # 2. group kernels
        progress.stage(f"lowering {len(grouping)} kernels")
        lowered = lower(graph, grouping, options)                                   # 3. lower
        progress.stage("planning memory")
        program, memory, in_place = plan_memory(lowered, options, updates)          # 4. plan memory
        lower_seconds = time.perf_counter() - start
        progress.stage(f"generating C for {len(program.kernels)} kernels")
        source = generate(program, options)                                         # 5. generate C
        progress.stage(f"compiling C ({len(program.kernels)} kernels, {len(source.text) // 1024} KiB)")
        module = build(source, program, lowered, options, f"graph {graph.name!r}")  # 6. build
    except UnsupportedOpError as err:
        return compiled.interpreted(str(err), f"tensorkiln: {err}; graph {graph.name} runs in the reference "
                                              f"interpreter")
    lowered.program = program
    lowering = Lowering(grouping, lowered, memory, in_place)
    kernels = kernel_infos(lowered)
    if symbolic:
        compiled.bind(module, kernels, hint_of(program.arena_bytes), memory.naive_bytes, memory.lower_bound_bytes,
                      lower_seconds, in_place, lowering, sized=SizedCall.of(graph, program))
        if dump:
            dump.write(graph, lowering, module)
        return compiled
    compiled.bind(module, kernels, program.arena_bytes, memory.naive_bytes, memory.lower_bound_bytes,
                  lower_seconds, in_place, lowering)
    graph_cache.store_entry(key, graph_cache.CachedBuild(
        module.library.key, module.signature.encode(), [k.__dict__ for k in kernels], program.arena_bytes,
        memory.naive_bytes, memory.lower_bound_bytes, in_place))
    if dump:
        dump.write(graph, lowering, module)
    return compiled


# ---- the stages ------------------------------------------------------------------------------------
def optimize(traced: Graph, options: CompileOptions):
    """Stage 1: the graph passes of options.opt_level; (optimized graph, per-pass statistics)."""
    return run_passes(traced, options.opt_level, options.fast_math, dump_dir=options.dump_dir,
                      blocked_layouts=options.blocked_layouts, precision=options.precision)


def group_kernels(graph: Graph, options: CompileOptions) -> list[KernelGroup]:
    """Stage 2: the kernels, each a group of nodes around a materialized root (fusion when options.fuse)."""
    return partition(graph, fuse=options.fuse)


def lower(graph: Graph, grouping: list[KernelGroup], options: CompileOptions | None = None) -> LoweredGraph:
    """Stage 3: one loop-IR kernel per group, with the default schedule, in one Program; the
    sub-graphs of control-flow ops become its sub-programs (lower_subgraph)."""
    options = options or CompileOptions()
    return lowering_module.lower_graph(graph, grouping, lambda sub: lower_subgraph(sub, options))


def lower_subgraph(graph: Graph, options: CompileOptions):
    """Stages 2-4 for a branch or loop body (already optimized with its graph in stage 1): its
    planned sub-program, whose kernels are named after it, and its constant arrays."""
    grouping = group_kernels(graph, options)
    lowered = lowering_module.lower_graph(graph, grouping, lambda sub: lower_subgraph(sub, options),
                                          prefix=graph.name + "_")
    program, _, _ = plan_memory(lowered, options, [])
    return program, lowered.constants


def plan_memory(lowered: LoweredGraph, options: CompileOptions, updates: list[tuple[int, int]]):
    """Stage 4: (the program with arena offsets and in-place updates, the MemoryPlan, in-place pairs).

    The plan is always made (its figures are reported); its offsets are applied when
    options.share_arena, else every temp keeps its own memory. Outputs that are new values of
    state or donated inputs overwrite them where memory_plan.state_update_pairs allows.
    """
    program = lowered.program
    if program.sizes:  # symbolic sizes: slots chosen at the hints, offsets evaluated per call
        program, memory, in_place = plan_symbolic(program, options.share_arena)
        if updates:
            program, in_place = _plan_updates(program, updates)
        return program, memory, in_place
    memory = memory_module.plan_memory(program)
    if options.share_arena:
        program = apply_plan(program, memory)
    in_place: dict[int, int] = {}
    if updates:
        program, in_place = _plan_updates(program, updates)
    return program, memory, in_place


def generate(program: Program, options: CompileOptions):
    """Stage 5: the C source (CSource) of the program; bounds-checked when options.debug."""
    return build_module.generate(program, debug=options.debug)


def build(source, program: Program, lowered: LoweredGraph, options: CompileOptions, name: str | None = None):
    """Stage 6: compile and load the source, binding the program's constant arrays; a CompiledModule
    (`name` says which graph it is in errors)."""
    constants = {b.name: a for b, a in zip(program.constants, lowered.constants)}
    return build_module.compile_and_load(source, constants, debug=options.debug, name=name)


# ---- helpers of the stages -------------------------------------------------------------------------
def plan_symbolic(program: Program, share_arena: bool):
    """Stage 4 for a program with size symbols (kernels/memory_plan_symbolic.py): temps share slots
    chosen at the hints, whose symbolic offsets the entry evaluates per call; in-place pairs come after."""
    offsets, _, figures = plan_symbolic_memory(program)
    if share_arena:
        program = dataclasses.replace(program, arena_offsets=tuple(sorted(offsets.items())))
    return program, figures, {}


def lower_stages(graph: Graph, options: CompileOptions, updates: list[tuple[int, int]]) -> Lowering:
    """Stages 2-4 again, for a graph whose library came from the cache (explain, profile, dumps)."""
    grouping = group_kernels(graph, options)
    lowered = lower(graph, grouping, options)
    lowered.program, memory, in_place = plan_memory(lowered, options, updates)
    return Lowering(grouping, lowered, memory, in_place)


def _plan_updates(program: Program, updates: list[tuple[int, int]]) -> tuple[Program, dict[int, int]]:
    """Let outputs that are new values of state inputs overwrite them (memory_plan.state_update_pairs)."""
    candidates = [(program.outputs[o].name, program.inputs[i].name) for o, i in updates
                  if o < len(program.outputs) and i < len(program.inputs)]
    pairs = state_update_pairs(program, candidates)
    position = {b.name: k for k, b in enumerate(program.inputs)}
    position.update({b.name: k for k, b in enumerate(program.outputs)})
    in_place = {position[o]: position[i] for o, i in pairs}
    if not pairs:
        return program, in_place
    program = skip_unchanged_stores(program, pairs)  # where(mask, new, old) stores only the new
    return dataclasses.replace(program, aliases=program.aliases + tuple(pairs)), in_place


def kernel_infos(lowered: LoweredGraph) -> list[KernelInfo]:
    """Each kernel's name, kind, graph nodes and loop IR, for the report."""
    infos = []
    for k in lowered.program.kernels:
        group = lowered.kernel_groups.get(k.name)
        precision = kernel_precision(k, group.nodes if group else [], group.root if group else None)
        lines = k.comment.splitlines()
        nodes = [line for line in lines if not line.startswith(COMMENT_PREFIX)]
        tuning = [line[len(COMMENT_PREFIX):] for line in lines if line.startswith(COMMENT_PREFIX)]
        tuning += lowered.quiet_tuning.get(k.name, [])
        infos.append(KernelInfo(k.name, group.kind if group else "copy", nodes, str(k), precision, tuning))
    return infos


def target_description() -> str:
    """What the kernel templates read of the machine: CPU target, thread count, a forced conv algorithm,
    the tuned configurations in use (kernels/tuned.py) and the weight streams' prefetch."""
    return (f"{cpu_target()!r};threads={thread_count()};conv={forced_algorithm()};tuning={tuning_digest()};"
            f"stream_prefetch={weight_stream_prefetch('float32')!r}")


def cache_key(graph: Graph, options: CompileOptions, updates: list[tuple[int, int]]) -> str:
    """The compiled-graph cache key of the optimized graph with these (resolved) options on this machine."""
    return graph_cache.entry_key(fingerprint(graph), options=f"{options.cache_text()};updates={sorted(updates)}",
                                 target=target_description(), debug=options.debug)


def load_cached(compiled: CompiledGraph, key: str, options: CompileOptions, start: float) -> bool:
    """Bind the library a cache entry names (no stages 2-6); False when there is none or it does not fit."""
    cached = graph_cache.load_entry(key)
    if cached is None:
        return False
    library = c_compiler.cached_library(cached.library_key, debug=options.debug)
    if library is None:
        return False
    signature = Signature.decode(cached.signature)
    arrays = [np.asarray(n.attrs["value"].array, order="C") for n in buffer_constants(compiled.graph)]
    if len(arrays) != len(signature.constants):
        return False
    try:
        module = CompiledModule(library.path, signature, dict(zip((c.name for c in signature.constants), arrays)),
                                source_path=library.source_path, compile_seconds=library.seconds,
                                cache_hit=True, name=f"graph {compiled.graph.name!r}")
    except ArenaAllocationError:
        raise  # a fresh build would need the same arena
    except LibraryLoadError:  # damaged although its checksum matched: rebuilt, not found again
        c_compiler.discard_library(library.key)
        return False
    except TensorKilnError:  # the entry does not fit this graph after all: build it afresh
        return False
    module.library = library
    compiled.bind(module, [KernelInfo(**k) for k in cached.kernels], cached.arena_bytes, cached.naive_bytes,
                  cached.lower_bound_bytes, time.perf_counter() - start, cached.in_place)
    return True


# ---- dumps and explain -----------------------------------------------------------------------------
class StageDump:
    """Writes the results of stages 2-6 to `directory` (the passes dump stage 1's), numbered after the passes."""

    def __init__(self, directory: str | None, graph_name: str):
        self.directory = directory
        self.name = "".join(c if c.isalnum() or c in "_-" else "_" for c in graph_name)
        self.first = 1

    def __bool__(self) -> bool:
        return bool(self.directory)

    def write(self, graph: Graph, lowering: Lowering, module) -> None:
        texts = [format_grouping(graph, lowering.grouping), loop_ir_text(lowering), memory_text(lowering),
                 f"generated C: {module.source_path}",
                 f"library: {module.library_path}{' (cache hit)' if module.cache_hit else ''}"]
        os.makedirs(self.directory, exist_ok=True)
        for index, (stage, text) in enumerate(zip(STAGES[1:], texts), start=self.first):
            slug = stage.replace(" ", "_").lower()
            with open(os.path.join(self.directory, f"{self.name}.{index:02d}.{slug}.txt"), "w") as f:
                f.write(text + "\n")


def loop_ir_text(lowering: Lowering) -> str:
    """Stage 3's result: every kernel's loop IR."""
    return "\n\n".join(str(k) for k in lowering.lowered.program.kernels)


def memory_text(lowering: Lowering) -> str:
    """Stage 4's result: the figures, each temp's size, place and lifetime, and the in-place pairs."""
    memory, program = lowering.memory, lowering.lowered.program
    lines = [f"arena {program.arena_bytes} bytes, naive {memory.naive_bytes} bytes, "
             f"lower bound {memory.lower_bound_bytes} bytes"]
    if program.arena_offsets is None:
        lines.append("  (offsets not applied: every temp has memory of its own)")
    offsets = dict(program.arena_offsets or memory.offsets)
    lines += [f"  {life.name}: {life.size} bytes at offset {offsets.get(life.name, 0)}, live in kernels "
              f"{life.first}..{life.last}" for life in memory.lifetimes]
    lines += [f"  {a} written in place of {b}" for a, b in program.aliases]
    lines += [f"  output {o} written in place of input {i}" for o, i in sorted(lowering.in_place.items())]
    return "\n".join(lines)


def explain(compiled: CompiledGraph) -> str:
    """Every stage by name and what it produced for this graph (after the traced graph, which jit shows)."""
    report = compiled.report
    parts = [f"== optimize: {len(report.passes)} passes, {len(compiled.traced_graph)} -> "
             f"{len(compiled.graph)} nodes"]
    for stats in report.passes:
        parts.append(f"== after {stats}")
        if stats.graph is not None:  # the IR after each pass that changed something
            parts.append(str(stats.graph))
    if report.backend != "c":
        parts.append(f"== backend: reference interpreter ({report.fallback_reason}); "
                     f"not run: {', '.join(STAGES[1:])}")
        return "\n".join(parts)
    lowering = compiled.lowering
    count = len(lowering.grouping)
    parts.append(f"== group kernels: after kernel grouping, {count} kernel{'s' if count != 1 else ''}")
    parts.append(format_grouping(compiled.graph, lowering.grouping))
    parts.append(f"== lower: {len(report.kernels)} kernels as loop IR (default schedule applied while lowering) "
                 f"for {cpu_description()}")
    parts += [k.loop_ir for k in report.kernels]
    parts.append("== precision of each kernel (kernels/precision.py)")
    parts += [f"{k.name}: {k.precision}" for k in report.kernels]
    parts.append("== tuned configurations (kernels/tuned.py)")
    parts += [f"{k.name}: {use}" for k in report.kernels for use in k.tuning] or ["no kernel asks for one"]
    parts.append(records_note())
    parts.append(f"== plan memory: arena {report.arena_bytes} bytes, naive {report.naive_bytes} bytes, "
                 f"lower bound {report.lower_bound_bytes} bytes")
    parts.append(f"== generate C: {report.source_path}")
    parts.append(f"== build: {report.library_path} "
                 f"({'cache hit' if report.cache_hit else f'compiled in {report.compile_seconds:.2f} s'})")
    return "\n".join(parts)


__all__ = ["Lowering", "STAGES", "compile_graph", "explain", "target_description"]
