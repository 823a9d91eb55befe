"""tk.jit (also named tk.compile): trace a Python function into the graph IR once per input signature,
compile the graph through the pipeline (tensorkiln/driver/stages.py), then run it.

The signature is the shapes and dtypes of the tensor arguments plus the values
of the other arguments (which are baked into the trace, like constants). A call
with a new signature traces again instead of failing. The keyword arguments of
tk.jit become one CompileOptions (driver/options.py), checked there.
"""
from __future__ import annotations

import functools
import itertools
import logging
import time
import types
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..driver.executable import CompiledGraph, CompileReport
from ..driver.options import CompileOptions
from ..driver.stages import compile_graph, explain
from ..ir.graph import Graph, Node, input_node, verify
from ..driver.profile import KernelProfile
from ..driver.export import ExportError, ExportedLibrary, export_graph
from ..runtime.export_format import model_name_from
from .writes import count_write, write_count, write_counts
from .tensor import Tensor
from .autodiff.mode import is_grad_enabled, no_grad
from .trace import Trace, current_trace, tracing
from .dynamic import SizeHistory, applies, check_dynamic_arguments, pattern_of, symbol_plan, symbolic_types
from .recompiles import RecompileWarning, closest, describe_change, ordinal
from .call_arguments import (Leaf, as_input_tensor, flatten, is_module, parameter_names, positional_names, static_key,
                             static_key_of_arguments, unflatten, unique_names)

_log = logging.getLogger("tensorkiln")
_ticks = itertools.count(1)  # a clock for "least recently used": one tick per call of a program


@dataclass
class TracedFunction:
    """One trace: the graph and how to map arguments and results to and from it."""

    graph: Graph
    output_structure: Any
    trace_seconds: float
    compiled: CompiledGraph | None = None
    # Eager state (autodiff/training, see trace.py): the graph's inputs after the arguments are read
    # by `state_sources`; its outputs after the first `n_outputs` are written back per `mutations`.
    n_outputs: int = 0
    state_sources: list = field(default_factory=list)
    mutations: list = field(default_factory=list)
    guards: list = field(default_factory=list)
    baked: list = field(default_factory=list)  # (parameter or buffer, its array baked in, its write count)
    # (output, input) positions where an output is the new value of the tensor that input reads:
    # the compiled code may write it into that input's array (see CompiledGraph)
    updates: list = field(default_factory=list)
    key: tuple = ()  # the signature it was traced for (JitFunction._bind)
    leaf_names: list = field(default_factory=list)  # names of the tensor arguments, for messages
    last_used: int = 0  # a tick of _ticks: the call that used it last
    native: Any = None  # the C caller of warm calls (runtime/fastcall.py), when the trace allows one
    shape_env: Any = None  # the ShapeEnv of a trace with size symbols (frontend/dynamic.py), else None

    def __post_init__(self) -> None:
        # Fixed for the trace, read by every fast call (JitFunction.__call__): worked out once.
        self.checked = bool(self.guards or self.baked)  # guards_hold/constants_current must run
        self.output_dtypes = [node.dtype for node in self.graph.outputs[:self.n_outputs]]
        # one tensor returned as it is, no state written back: the result is just one Tensor
        self.single_output = isinstance(self.output_structure, Leaf) and self.n_outputs == 1 \
            and not self.mutations
        # a plain list or tuple of the outputs in order, no state written back: built in one step
        structure = self.output_structure
        self.flat_sequence = type(structure) if (
            type(structure) in (list, tuple) and not self.mutations and len(structure) == self.n_outputs
            and all(isinstance(leaf, Leaf) and leaf.index == i for i, leaf in enumerate(structure))) else None

    def current(self) -> bool:
        """guards_hold() and constants_current(): the trace may run for a call of its signature."""
        return not self.checked or (self.guards_hold() and self.constants_current())

    def guards_hold(self) -> bool:
        """The trace assumed each guarded tensor had (or had no) .grad; still true?"""
        return all((t._grad is not None) == had for t, had in self.guards)

    def constants_current(self) -> bool:
        """Parameters and buffers baked in as constants still hold those values?"""
        return all(t._value is array and write_count(array) == writes for t, array, writes in self.baked)


def _fast_leaves(values, key: list, arrays: list) -> bool:
    """Append the key and the arrays of `values` (arrays, eager tensors, plain lists and tuples of them,
    in call_arguments.flatten's order); False at anything else."""
    for a in values:
        kind = type(a)
        if kind is np.ndarray:
            key += (a.shape, a.dtype)
            arrays.append(a)
        elif kind is Tensor and a._node is None and not a._requires_grad:
            value = a._value
            key += (value.shape, a._dtype)  # a tk DType: never equal to a numpy array's dtype
            arrays.append(value)
        elif kind is list or kind is tuple:
            key += (kind, len(a))  # the nesting is part of the signature
            if not _fast_leaves(a, key, arrays):
                return False
        else:
            return False
    return True


class JitFunction:
    """A function compiled per input signature; call it like the original."""

    def __init__(self, fn: Callable, options: CompileOptions):
        self._module = fn if is_module(fn) else None
        if self._module is None:
            functools.update_wrapper(self, fn)
        self.fn = fn
        self.options = options
        self._cache: dict[tuple, TracedFunction] = {}  # the last trace used per signature
        self._fast: dict[tuple, TracedFunction] = {}  # plain-array calls: (shape, dtype) key -> trace
        self._variants: dict[tuple, list[TracedFunction]] = {}
        self._positional_names = positional_names(fn.forward if self._module is not None else fn)
        self._parameter_names = parameter_names(fn.forward if self._module is not None else fn)
        self._compiles = 0  # programs compiled so far, evicted ones included
        # (C caller, trace, grad mode, training flag) of the last warm call that could use one
        self._native: tuple | None = None
        self._symbolic: dict[tuple, list[TracedFunction]] = {}  # signature pattern -> traces with size symbols
        self._sizes_seen: dict[tuple, SizeHistory] = {}  # signature pattern -> sizes seen (automatic dynamic)

    # ---- tracing --------------------------------------------------------------
    def _bind(self, args, kwargs):
        leaves: list = []
        names: list[str] = []
        structure = []
        donated: list[int] = []  # positions of the leaves of donated arguments
        for i, arg in enumerate(args):
            name = self._positional_names[i] if i < len(self._positional_names) else f"arg{i}"
            first = len(leaves)
            structure.append(flatten(arg, leaves, names, name))
            if i in self.options.donate_argnums:
                donated += range(first, len(leaves))
        kw_structure = {k: flatten(v, leaves, names, k) for k, v in kwargs.items()}
        tensors = [as_input_tensor(v) for v in leaves]
        for t in tensors:
            if t.is_traced:
                raise TypeError("a tk.jit function received a traced tensor from another trace")
        static = (static_key_of_arguments(structure, self._positional_names), static_key(kw_structure, "keyword"))
        key = (tuple((tuple(t.shape), t.dtype.name) for t in tensors), static, is_grad_enabled(),
               self._module.training if self._module is not None else None)
        return tensors, names, (tuple(structure), kw_structure), key, donated

    def _trace(self, tensors: list[Tensor], names: list[str], structure, donated: list[int],
               plan: dict | None = None) -> TracedFunction:
        start = time.perf_counter()
        trace = Trace(getattr(self.fn, "__name__", type(self.fn).__name__))
        unique = unique_names(names)
        types, shape_env = symbolic_types([t.type for t in tensors], unique, plan or {})
        inputs = [input_node(n, i, ttype) for i, (n, ttype) in enumerate(zip(unique, types))]
        symbolic = [Tensor._from_node(node, trace) for node in inputs]
        for sym, t in zip(symbolic, tensors):  # arguments are values: they may require grad, never get written back
            sym._requires_grad = t._requires_grad
        args, kwargs = unflatten(structure, symbolic)
        with tracing(trace):
            try:
                result = self.fn(*args, **kwargs)
                out_leaves: list = []
                out_structure = flatten(result, out_leaves, [], "out")
                outputs = []
                for leaf in out_leaves:
                    t = as_input_tensor(leaf)
                    outputs.append(t._node if t.is_traced else trace.constant_for(t))
            except BaseException:
                trace.restore()  # eager tensors written in the trace get their values back
                raise
            state = trace.finish(outputs, len(inputs))
        graph = Graph(inputs + state.state_inputs, state.outputs, trace.name)
        verify(graph)
        updates = _state_updates(state, len(inputs), len(outputs)) + _donated_updates(graph, donated, len(outputs))
        return TracedFunction(graph, out_structure, time.perf_counter() - start, n_outputs=len(outputs),
                              state_sources=state.state_sources, mutations=state.mutations,
                              guards=state.guards, baked=state.baked, updates=updates, shape_env=shape_env)

    def _lookup(self, args, kwargs, static: bool = False) -> tuple[TracedFunction, list[Tensor]]:
        """The program for these arguments, traced and compiled if none applies; static=True: one
        without size symbols (what an exported library needs)."""
        tensors, names, structure, key, donated = self._bind(args, kwargs)
        # Several traces may share a signature, told apart by their guards (see TracedFunction).
        entries = self._variants.setdefault(key, [])
        entries[:] = [e for e in entries if e.constants_current()]  # stale: a baked-in parameter changed
        entry = next((e for e in entries if e.guards_hold() and not (static and e.shape_env)), None)
        shapes = [tuple(t.shape) for t in tensors]
        pattern = (pattern_of(shapes, [t.dtype.name for t in tensors]),) + key[1:]
        if entry is None and not static:
            entry = self._symbolic_trace_for(pattern, shapes)
            if entry is not None:
                entries.append(entry)
        if entry is None:
            held = self._programs()
            history = self._sizes_seen.setdefault(pattern, SizeHistory())
            leaf_names = unique_names(names)
            check_dynamic_arguments(self.options.dynamic, leaf_names, self._parameter_names,
                                    getattr(self.fn, "__name__", type(self.fn).__name__))
            plan = {} if static else symbol_plan(self.options.dynamic, leaf_names, shapes, history)
            history.add(shapes)
            try:
                entry = self._trace_and_compile(tensors, names, structure, donated, plan)
            except Exception as err:  # noqa: BLE001  (any failure of the symbolic path, reported below)
                if not plan:
                    raise
                # Symbolic sizes are an optimization: sizes this function cannot yet take symbolically
                # trace static, as without them (a static trace raises the function's own errors again).
                history.static_only = True
                _log.info("tk.jit: %s traced static: its symbolic trace failed (%s: %s)",
                          getattr(self.fn, "__name__", type(self.fn).__name__), type(err).__name__, err)
                entry = self._trace_and_compile(tensors, names, structure, donated, {})
            entry.key, entry.leaf_names = key, [n for n in names]
            if not (entry.state_sources or entry.mutations):
                entry.native = entry.compiled.native_caller(Tensor)  # None for a program with size symbols
                if entry.native is not None and entry.checked:
                    entry.native.set_checks(tuple((t, array, id(array), writes) for t, array, writes in entry.baked),
                                            tuple((t, bool(had)) for t, had in entry.guards), write_counts())
            entries.append(entry)
            if entry.shape_env is not None:
                self._symbolic.setdefault(pattern, []).append(entry)
            if self._compiles > self.options.recompile_limit and held:
                self._warn_recompile(entry, held)
            self._evict_beyond_limit(keep=entry)
        entry.last_used = next(_ticks)
        self._cache[key] = entry
        return entry, tensors

    def _trace_and_compile(self, tensors: list[Tensor], names: list[str], structure, donated: list[int],
                           plan: dict) -> TracedFunction:
        """Trace with the input axes of `plan` as size symbols, and compile the graph."""
        entry = self._trace(tensors, names, structure, donated, plan)
        entry.compiled = compile_graph(entry.graph, self.options, entry.updates)
        entry.compiled.report.trace_seconds = entry.trace_seconds
        self._compiles += 1
        return entry

    def _symbolic_trace_for(self, pattern: tuple, shapes: list[tuple[int, ...]]) -> TracedFunction | None:
        """The newest trace with size symbols of this pattern whose guards hold for these shapes."""
        traces = self._symbolic.get(pattern, [])
        traces[:] = [e for e in traces if e.constants_current()]
        for entry in reversed(traces):
            if entry.guards_hold() and applies(entry.shape_env, [n.type for n in entry.graph.inputs[:len(shapes)]],
                                               shapes):
                return entry
        return None

    @property
    def compile_count(self) -> int:
        """Programs compiled so far, released ones included (one with size symbols serves many shapes)."""
        return self._compiles

    def _programs(self) -> list[TracedFunction]:
        """Every compiled program held, across signatures (one with size symbols serves several)."""
        return list({id(e): e for entries in self._variants.values() for e in entries}.values())

    def _warn_recompile(self, entry: TracedFunction, held: list[TracedFunction]) -> None:
        """Each compile past recompile_limit warns, naming what differs from the closest program held."""
        name = getattr(self.fn, "__name__", type(self.fn).__name__)
        recent_first = [e.key for e in sorted(held, key=lambda e: -e.last_used)]
        change = describe_change(closest(entry.key, recent_first), entry.key, entry.leaf_names)
        warnings.warn(f"tk.jit: {name} compiled its {ordinal(self._compiles)} program (recompile_limit="
                      f"{self.options.recompile_limit}) because {change}; every new signature traces and "
                      "compiles again", RecompileWarning, stacklevel=5)

    def _evict_beyond_limit(self, keep: TracedFunction) -> None:
        """Past cache_limit, release the least recently used programs (their libraries are unloaded)."""
        limit = self.options.cache_limit
        programs = self._programs()
        if limit is None or len(programs) <= limit:
            return
        victims = sorted((e for e in programs if e is not keep), key=lambda e: e.last_used)
        for victim in victims[:len(programs) - limit]:
            if self._native is not None and self._native[1] is victim:
                self._native = None
            for lists in (self._variants, self._symbolic):  # a symbolic program is listed per signature
                for entries in lists.values():
                    entries[:] = [e for e in entries if e is not victim]
            for table in (self._cache, self._fast):
                for k in [k for k, e in table.items() if e is victim]:
                    del table[k]
            if victim.compiled is not None:
                victim.compiled.release()

    # ---- public API -------------------------------------------------------------
    def _fast_arguments(self, args: tuple) -> tuple[tuple, list[np.ndarray]] | None:
        """(a cheap cache key, the arrays) for calls whose arguments are all plain arrays or eager
        tensors not requiring grad, or plain lists and tuples of them (a decode step's caches);
        None for any other call."""
        key: list = []
        arrays: list[np.ndarray] = []
        if not _fast_leaves(args, key, arrays):
            return None
        key.append(is_grad_enabled())
        if self._module is not None:
            key.append(self._module.training)
        return tuple(key), arrays

    def __call__(self, *args, **kwargs):
        native = self._native
        if native is not None and not kwargs and current_trace() is None and is_grad_enabled() is native[2] \
                and (self._module is None or self._module.training is native[3]):
            outputs = native[0](*args)  # None: not the arguments that program was bound for
            if outputs is not None:
                entry = native[1]
                entry.last_used = next(_ticks)
                if entry.single_output:
                    return Tensor._from_value(outputs[0], entry.output_dtypes[0])
                if entry.flat_sequence is not None:
                    return entry.flat_sequence([Tensor._from_value(r, d) for r, d in zip(outputs, entry.output_dtypes)])
                return _results(entry, list(outputs))
        if kwargs or current_trace() is not None:
            return self._call(args, kwargs)
        fast = self._fast_arguments(args)
        if fast is None:
            return self._call(args, kwargs)
        key, arrays = fast
        entry = self._fast.get(key)
        if entry is None or not entry.current():
            return self._call(args, kwargs, key)
        entry.last_used = next(_ticks)
        if entry.native is not None:
            self._native = (entry.native, entry, is_grad_enabled(),
                            None if self._module is None else self._module.training)
        # the common case: same signature as before, no flattening, no key of the whole structure
        if entry.state_sources:
            arrays += [read() for read in entry.state_sources]
        results = entry.compiled(arrays)
        if entry.single_output:
            return Tensor._from_value(results[0], entry.output_dtypes[0])
        return _results(entry, results)

    def _call(self, args: tuple, kwargs: dict, fast_key: tuple | None = None):
        """A call through the full lookup (tracing and compiling a new signature), remembered
        under `fast_key` for the fast path of later calls."""
        if current_trace() is not None:  # called from another traced function: inline it
            return self.fn(*args, **kwargs)
        entry, tensors = self._lookup(args, kwargs)
        if fast_key is not None:
            self._fast[fast_key] = entry
        results = entry.compiled([t._value for t in tensors] + [read() for read in entry.state_sources])
        return _results(entry, results)

    def graph(self, *args, **kwargs) -> Graph:
        """The traced graph for these arguments' signature."""
        return self._lookup(args, kwargs)[0].graph

    def optimized_graph(self, *args, **kwargs) -> Graph:
        """The graph after the optimization pipeline of this signature (what is lowered and compiled)."""
        return self._lookup(args, kwargs)[0].compiled.graph

    def report(self, *args, **kwargs) -> CompileReport:
        """The CompileReport of this signature: kernels, source path, timings."""
        return self._lookup(args, kwargs)[0].compiled.report

    def profile(self, *args, repeat: int = 20, **kwargs) -> KernelProfile:
        """Mean time per call of each kernel of this signature (see tensorkiln/profile.py).

        Runs a timing build of the same program on copies of the arguments (and
        of any parameters or optimizer state the function reads): nothing the
        function would update in place is changed.
        """
        entry, tensors = self._lookup(args, kwargs)
        arrays = [t._value for t in tensors] + [read() for read in entry.state_sources]
        return entry.compiled.profile(arrays, repeat)

    def explain(self, *args, **kwargs) -> str:
        """Text describing how this signature is compiled: the traced graph, then every stage of the
        pipeline by name (driver/stages.py): the graph after each pass, the kernel grouping, the
        kernels as loop IR, the memory plan, the C source's path and the library."""
        entry, _ = self._lookup(args, kwargs)
        shapes = [f"== size symbols and guards\n{entry.shape_env.describe()}"] if entry.shape_env is not None else []
        return "\n".join([f"== traced graph ({len(entry.graph)} nodes, traced in {entry.trace_seconds * 1e3:.1f} ms)",
                          str(entry.graph), *shapes, explain(entry.compiled)])

    def export(self, directory, *args, name: str | None = None, input_names=None, output_names=None,
               weights: str = "auto", openmp: bool = True) -> ExportedLibrary:
        """Export this signature (the example `args`) as a standalone C library in `directory`
        (driver/export.py: libNAME.so/.a, NAME.h, example.c, NAME.json); tk.load_compiled reads it back.

        name: the C prefix (default: the function's name); weights: "auto", "embed" or "file";
        openmp=False builds without the OpenMP runtime. Traced without gradients: parameters become
        the library's weights.
        """
        with no_grad():  # an inference library: parameters are baked in as constants, not graph inputs
            entry, _ = self._lookup(args, {}, static=True)  # its C API has static shapes
        if entry.state_sources:
            raise ExportError(f"{self.__name__ if self._module is None else type(self.fn).__name__} updates "
                              "parameters or state in place: only a function of its arguments can be exported")
        if input_names is None:
            input_names = [node.attrs["name"] for node in entry.graph.inputs]
        if output_names is None:
            count = len(entry.graph.outputs)
            output_names = ["output"] if count == 1 else [f"output{i}" for i in range(count)]
        default = getattr(self.fn, "__name__", type(self.fn).__name__)
        return export_graph(entry.compiled, directory, name=name or model_name_from(default), input_names=input_names,
                            output_names=output_names, weights=weights, openmp=openmp)

    def clear_cache(self) -> None:
        """Forget every compiled signature: the next call traces and compiles again (after tk.tune
        wrote records, so that this function uses them too)."""
        self._cache.clear()
        self._fast.clear()
        self._variants.clear()
        self._native = None

    def cache_size(self) -> int:
        """Number of compiled programs this function holds (at most its cache_limit)."""
        return len(self._programs())


def _results(entry: TracedFunction, results: list[np.ndarray]):
    """A compiled call's result in the function's output structure, its state written back."""
    n = entry.n_outputs
    outputs = [Tensor._from_value(r, dtype) for r, dtype in zip(results[:n], entry.output_dtypes)]
    _write_back(entry.mutations, results[n:], entry.graph.outputs[n:])
    return unflatten(entry.output_structure, outputs)


def _write_back(mutations: list, arrays: list, nodes: list) -> None:
    """Replay a compiled call's in-place updates on the eager tensors (parameters, optimizer state, .grad)."""
    values = iter(zip(arrays, nodes))
    for tensor, kind, to_none in mutations:
        if kind == "grad" and to_none:
            tensor._grad = None
            continue
        array, node = next(values)
        if kind == "effect":  # the token that kept the messages in the graph
            continue
        if kind == "data":
            if tensor._value is array:
                count_write(array)  # updated in place by the compiled code
            else:
                tensor._value = array
        elif tensor._grad is None or tensor._grad.is_traced:
            tensor._grad = Tensor._from_value(array, node.dtype)
        else:
            tensor._grad._value = array


def _state_updates(state, n_args: int, n_outputs: int) -> list[tuple[int, int]]:
    """(output position, input position) of each data write to a tensor that a state input reads."""
    position = {id(t): n_args + i for i, t in enumerate(state.state_tensors) if t is not None}
    updates, output = [], n_outputs
    for tensor, kind, to_none in state.mutations:
        if kind == "grad" and to_none:
            continue  # no output
        if kind == "data" and id(tensor) in position:
            updates.append((output, position[id(tensor)]))
        output += 1
    return updates


def _donated_updates(graph: Graph, donated: list[int], n_outputs: int) -> list[tuple[int, int]]:
    """(output, input) candidates for writing an output into a donated argument's array.

    Each of the function's outputs may take the memory of a donated input of
    its shape and dtype that its value is computed from elementwise (a KV
    cache's `where(slot, new, cache)`); CompiledGraph keeps the pairs that are
    safe (memory_plan.state_update_pairs), preferring for each output the
    donated inputs in order.
    """
    pairs = []
    for o, out in enumerate(graph.outputs[:n_outputs]):
        fits = [i for i in donated if graph.inputs[i].shape == out.shape and graph.inputs[i].dtype == out.dtype]
        if fits:
            sources = _ancestors(out)
            pairs += [(o, i) for i in fits if graph.inputs[i].id in sources]
    return pairs


def _ancestors(node: Node) -> set[int]:
    """Ids of `node` and of every node its value is computed from."""
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n.id not in seen:
            seen.add(n.id)
            stack.extend(n.inputs)
    return seen



def jit(fn: Callable | None = None, *, opt_level: int = 2, debug: bool | None = None, fast_math: bool = False,
        backend: str = "c", donate_argnums: int | tuple[int, ...] = (), dump_dir: str | None = None,
        precision: str = "fp32", recompile_limit: int = 8, cache_limit: int | None = 64, dynamic=None):
    """Compile `fn` per input signature. Use as @tk.jit or @tk.jit(opt_level=..., debug=..., fast_math=...).

    opt_level 0..3 selects the graph-optimization pipeline (tensorkiln.passes);
    debug builds bounds-checked, sanitized code (also TENSORKILN_DEBUG=1);
    fast_math allows rewrites that are exact for real numbers but not for every float;
    backend="interpreter" runs the optimized graph with the reference interpreter instead of compiling C;
    donate_argnums: positional arguments (a tensor, or a list/tuple/dict of them) whose arrays the
    call may overwrite with outputs of their shape computed from them elementwise, as JAX's option:
    a KV cache updated at one position is then written in place (one row stored, not the whole
    cache). A donated argument's tensor may hold the output's value after the call; do not reuse it.
    dump_dir writes every compile stage's result there (also TENSORKILN_DUMP_IR=dir).
    precision="bf16": matmuls, convolutions and attention take bf16 operands and accumulate in fp32,
    everything else stays fp32 (docs/precision.md); "fp32" is the default. precision="int8w" / "int4w"
    (or "int4w-g128": groups of 128 depths) quantizes the constant weights of matmuls to int8 / int4 at
    compile time, activations stay fp32 (weight-only, for decoding).
    recompile_limit: each compile after this many warns (RecompileWarning), naming the argument and
    dimension that changed; cache_limit: compiled programs held at most (the least recently used is
    released past it; None: no limit). f.cache_size() counts the programs held.
    dynamic: which input sizes are traced as symbols, so one compiled program serves many sizes
    (docs/dynamic_shapes.md): None (default) makes a dimension symbolic once a call brings a second
    size of it; True makes every dimension of size >= 2 symbolic; {"x": {0: "batch"}} names the
    symbolic axes (a tk.Dim("batch", min=.., max=..) may stand for the name); False never.
    The options are checked here, once (driver/options.py's CompileOptions).
    """
    options = CompileOptions(opt_level=opt_level, debug=debug, fast_math=fast_math, backend=backend,
                             donate_argnums=donate_argnums, dump_dir=dump_dir, precision=precision,
                             recompile_limit=recompile_limit, cache_limit=cache_limit, dynamic=dynamic)
    if fn is None:
        return lambda f: JitFunction(f, options)
    return JitFunction(fn, options)


def compile(fn: Callable | None = None, **options):  # noqa: A001  (tk.compile, as torch.compile)
    """tk.jit under the name torch.compile users reach for first: the same options, the same result.

    tk.compile(fn), @tk.compile and @tk.compile(opt_level=..., debug=..., ...) all work; see tk.jit.
    """
    return jit(fn, **options)
