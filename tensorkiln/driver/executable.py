"""CompiledGraph: what the pipeline (stages.py) returns for one traced graph, the callable.

Called with the graph's input arrays it returns the outputs after exactly one
foreign call into the built module. It binds that module (fresh from the
build stage or loaded through the compiled-graph cache), recycles output
arrays, range-checks indices the caller passes in, lets outputs overwrite
donated or state inputs in place, and runs the reference interpreter instead
when the graph was not compiled (backend="interpreter", no C compiler, or an
op the C backend cannot express). The stages themselves are in stages.py.
"""
from __future__ import annotations

import sys
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import TensorKilnError
from ..ir.graph import Graph, interpret
from .profile import KernelProfile, KernelTime
from ..runtime.signature import numpy_dtypes
from .build import build
from .sized_call import evaluate


# References to a recycled output array that nobody outside holds: the recycling list, the
# module's argument slot, a local name and getrefcount's own argument.
_UNREACHABLE_REFS = 4


class FallbackWarning(UserWarning):
    """tk.jit runs a graph with the reference interpreter instead of compiled code."""


@dataclass
class KernelInfo:
    """One generated kernel: its name, kind and the graph nodes it implements."""

    name: str
    kind: str
    nodes: list[str]
    loop_ir: str
    precision: str = "fp32"  # kernels/precision.py: "fp32", "bf16 (vdpbf16ps)", ...
    tuning: list[str] = field(default_factory=list)  # kernels/tuned.py: "<workload> tuned: mr=8 ..."


@dataclass
class CompileReport:
    """What compiling one signature produced, and what it cost."""

    backend: str  # "c" or "interpreter"
    kernels: list[KernelInfo] = field(default_factory=list)
    passes: list[dict] = field(default_factory=list)
    source_path: str | None = None
    library_path: str | None = None
    compile_seconds: float = 0.0  # the C compiler's time (0 on a cache hit)
    lower_seconds: float = 0.0
    trace_seconds: float = 0.0
    cache_hit: bool = False
    arena_bytes: int = 0  # intermediates' memory as planned
    naive_bytes: int = 0  # every intermediate in its own memory
    lower_bound_bytes: int = 0  # the most bytes of intermediates live at one moment
    fallback_reason: str | None = None

    def __str__(self) -> str:
        lines = [f"backend: {self.backend}" + (f" ({self.fallback_reason})" if self.fallback_reason else "")]
        if self.backend == "c":
            lines.append(f"kernels: {len(self.kernels)}  arena: {self.arena_bytes} bytes (naive {self.naive_bytes}, "
                         f"lower bound {self.lower_bound_bytes})  "
                         f"trace {self.trace_seconds * 1e3:.1f} ms, lower {self.lower_seconds * 1e3:.1f} ms, "
                         f"cc {self.compile_seconds:.2f} s{' (cached)' if self.cache_hit else ''}")
            lines.append(f"source: {self.source_path}")
        return "\n".join(lines)


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, FallbackWarning, stacklevel=4)


def index_checks(graph: Graph) -> list[tuple[int, int, str]]:
    """(input position, axis size, op) for every take/gather whose indices come straight from an input.

    Generated code clamps indices so it never reads out of bounds; to raise
    IndexError like the reference instead of answering wrongly, indices that
    the caller passes in are range-checked before the native call. (Indices
    computed inside the graph, like argmax's, are in range by construction.)
    """
    checks = []
    for node in graph.nodes:
        if node.op not in ("take", "gather"):
            continue
        source = node.inputs[1]
        while source.op in ("reshape", "expand", "permute", "slice", "cast") and not (
                source.op == "cast" and not source.inputs[0].dtype.is_integer):
            source = source.inputs[0]
        if source.op == "input":
            checks.append((source.attrs["index"], node.inputs[0].shape[node.attrs["axis"]], node.op))
    return checks


SIZED_CALLERS = 64  # input shapes of a symbolic program that get a C caller of their own


class _NoTensor:
    """No argument is of this type: the sized C callers are given storage arrays, never tensors."""


class CompiledGraph:
    """A graph bound to its built module (or to the interpreter, as a fallback).

    `traced_graph` is the graph as traced, `graph` the optimized one (what was
    compiled); `report` says what the stages produced. `lowering` holds the
    results of the stages between optimizing and generating C (kernel grouping,
    loop IR, memory plan): kept from a fresh build, made again by `relower` on
    demand after a cache hit.
    """

    def __init__(self, traced: Graph, graph: Graph, passes: list, relower: Callable[[], Any] | None = None):
        self.traced_graph = traced
        self.graph = graph
        self.module = None
        self._lowering = None
        self._relower = relower
        self._profiled = None  # the per-kernel timing build, made on the first profile()
        self._in_place: dict[int, int] = {}  # output position -> input position it overwrites
        self._recycled: list[np.ndarray | None] = []  # last call's output arrays (see _output_array)
        self._call_lock = threading.Lock()
        self.report = CompileReport(backend="interpreter", passes=passes)
        self._plain = False  # bound to a module with nothing but inputs to check (see bind)
        self._sized = None  # a program with size symbols: how a call evaluates them (sized_call.py)
        self._callers: list = []  # C callers of the module (native_caller), invalidated on release
        self._native = None  # the last of them: calls go through it when their arrays pass as they are
        self._sized_callers: dict = {}  # a symbolic program's input shapes -> (C caller, its sizes array)

    def interpreted(self, reason: str, warning: str | None = None) -> CompiledGraph:
        """Run with the reference interpreter from now on, because of `reason` (warned once, if given)."""
        if warning is not None:
            _warn_once(warning)
        self.report.fallback_reason = reason
        return self

    def bind(self, module, kernels: list[KernelInfo], arena_bytes: int, naive_bytes: int,
             lower_bound_bytes: int, lower_seconds: float, in_place: dict[int, int], lowering=None,
             sized=None) -> None:
        """Bind the loaded module and fill the report (the same for a fresh build and a cached one);
        `sized`: the SizedCall of a program with size symbols."""
        self.module = module
        self._sized = sized
        self._lowering = lowering
        self._in_place = dict(in_place)
        self._output_specs = [(spec.shape, numpy_dtypes(spec.dtype)[0]) for spec in module.signature.outputs]
        self._input_dtypes = [n.dtype.storage for n in self.graph.inputs]
        self._index_checks = index_checks(self.graph)
        # What a caller's input must be to be passed as it is: compared by identity per call
        # (numpy's dtypes of the built-in types are singletons); anything else is converted.
        self._input_types = [(np.dtype(dtype), tuple(n.shape)) for dtype, n in zip(self._input_dtypes, self.graph.inputs)]
        self._recycled = [None] * len(self._output_specs)
        self._plain = not self._index_checks and not self._in_place and sized is None
        self._sized_callers = {}
        self._call_lock = module.lock  # one lock for recycling outputs and the module's pointer slots
        self.report = CompileReport(
            backend="c", kernels=kernels, passes=self.report.passes, source_path=module.source_path,
            library_path=module.library_path, compile_seconds=0.0 if module.cache_hit else module.compile_seconds,
            lower_seconds=lower_seconds, cache_hit=module.cache_hit, arena_bytes=arena_bytes,
            naive_bytes=naive_bytes, lower_bound_bytes=lower_bound_bytes)

    @property
    def lowering(self):
        """The kernel grouping, loop IR and memory plan of a compiled graph (driver/stages.Lowering)."""
        if self._lowering is None and self.module is not None and self._relower is not None:
            self._lowering = self._relower()
        return self._lowering

    @property
    def lowered(self):
        """The LoweredGraph (loop IR) of a compiled graph; lowered again when the build came from the cache."""
        lowering = self.lowering
        return None if lowering is None else lowering.lowered

    @property
    def compiled(self) -> bool:
        return self.module is not None

    def native_caller(self, tensor_type: type):
        """A C caller for warm calls of this graph (runtime/fastcall.py), when its calls need nothing
        but the inputs' check (no index to check, no output written into an input); else None."""
        if self.module is None or not self._plain:
            return None
        caller = self.module.native_caller([dtype for dtype, _ in self._input_types], tensor_type)
        if caller is not None:
            self._callers.append(caller)
            self._native = caller  # this graph's own calls use it too: one set of recycled outputs
        return caller

    def release(self) -> None:
        """Unload this graph's libraries (its module and any profiling build) and free their memory;
        a later call raises TensorKilnError. For caches that bound the programs a process holds."""
        for caller in self._callers:
            caller.invalidate()
        self._native = None
        self._sized_callers = {}
        for module in (self.module, self._profiled):
            if module is not None:
                module.release()
        self._recycled = [None] * len(self._recycled)
        self._lowering = None

    def profile(self, arrays: list[np.ndarray], repeat: int = 20) -> KernelProfile:
        """Mean time per call of each kernel over `repeat` calls (after one warm-up) on these inputs."""
        if self.module is None:
            raise TensorKilnError(f"graph {self.graph.name} runs in the reference interpreter "
                                  f"({self.report.fallback_reason}): there are no kernels to profile")
        if self._profiled is None:
            program = self.lowered.program
            constants = {b.name: a for b, a in zip(program.constants, self.lowered.constants)}
            self._profiled = build(program, constants, profile=True)
        module, kernels = self._profiled, self.report.kernels
        inputs = [np.array(a, dtype=d, order="C") for a, d in zip(arrays, self._input_dtypes)]
        if self._sized is not None:  # sizes from the inputs' shapes, as a call reads them
            sizes, shapes, arena_bytes, _ = self._sized.prepare(inputs)
            outputs = [np.empty(shape, dtype) for shape, (_, dtype) in zip(shapes, self._output_specs)]
            run = lambda: module.call_sized(inputs + outputs, sizes, arena_bytes)  # noqa: E731
        else:
            outputs = [np.empty(shape, dtype) for shape, dtype in self._output_specs]
            run = lambda: module(*inputs, *outputs)  # noqa: E731
        for output, position in self._in_place.items():
            np.copyto(outputs[output], inputs[position])  # as the call would find it (loops/in_place.py)
        run()
        module.kernel_seconds(len(kernels))  # drop the warm-up call
        for _ in range(repeat):
            run()
        seconds = module.kernel_seconds(len(kernels))
        ops = [[line.split("=", 1)[-1].strip().split("(")[0] for line in k.nodes] for k in kernels]
        return KernelProfile([KernelTime(k.name, k.kind, o, s / max(repeat, 1), k.precision,
                                         any(" tuned: " in use for use in k.tuning))
                              for k, o, s in zip(kernels, ops, seconds)], repeat)

    def __call__(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """Run on storage arrays of the graph's input types; returns storage arrays."""
        native = self._native
        if native is not None:
            outputs = native(*arrays)  # None: an array to convert, or another thread is calling
            if outputs is not None:
                return list(outputs)
        if self._plain and len(arrays) == len(self._input_types):
            # The common call, kept flat (each Python call level costs about 0.1 us): inputs
            # exactly as checked before, no index to check, no output written in place.
            for array, (dtype, shape) in zip(arrays, self._input_types):
                if array.dtype is not dtype or array.shape != shape or not array.flags.c_contiguous:
                    break
            else:
                with self._call_lock:
                    return self._run(arrays, arrays)
        if self.module is None:
            return interpret(self.graph, *arrays)
        if self._sized is not None:
            return self._run_sized(arrays)
        inputs = self._storage_inputs(arrays)
        if inputs is not arrays:
            self.module.check_inputs(inputs)  # converted: a wrong shape or count raises here
            if native is not None:
                outputs = native(*inputs)
                if outputs is not None:
                    return list(outputs)
        if self._index_checks:
            self._check_indices(inputs)
        lock = self._call_lock
        lock.acquire()  # outputs are recycled: two threads must not pick the same array
        try:
            return self._run(arrays, inputs)
        finally:
            lock.release()

    def _run_sized(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """A call of a program with size symbols: their values from the inputs' shapes, fresh outputs.

        Input shapes seen before go through a C caller made for them (their sizes and output shapes
        fixed) when the call needs nothing but the inputs' check, as a static program's warm call."""
        found = self._sized_callers.get(tuple(getattr(a, "shape", None) for a in arrays))
        if found is not None:
            outputs = found[0](*arrays)  # None: an array to convert, or another thread is calling
            if outputs is not None:
                return list(outputs)
        outputs = self._run_sized_in_python(arrays)
        if not self._index_checks and not self._in_place and len(self._sized_callers) < SIZED_CALLERS:
            self._add_sized_caller([a.shape for a in outputs], arrays)
        return outputs

    def _add_sized_caller(self, output_shapes: list[tuple[int, ...]], arrays: list) -> None:
        """A C caller for calls at these arrays' shapes (after a call at them succeeded)."""
        shapes = tuple(getattr(a, "shape", None) for a in arrays)
        if None in shapes or shapes in self._sized_callers:
            return
        sizes, _, _, _ = self._sized.prepare(list(arrays))
        caller = self.module.sized_caller([np.dtype(d) for d in self._input_dtypes], shapes,
                                          tuple(output_shapes), sizes, _NoTensor)
        if caller is not None:
            self._callers.append(caller)  # invalidated on release, with the others
            self._sized_callers[shapes] = (caller, sizes)

    def _run_sized_in_python(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """The call through Python: inputs converted and checked, sizes evaluated, outputs recycled."""
        if len(arrays) != len(self._input_dtypes):
            raise TypeError(f"graph {self.graph.name} takes {len(self._input_dtypes)} arrays, got {len(arrays)}")
        inputs = [a if type(a) is np.ndarray and a.dtype == d and a.flags.c_contiguous
                  else np.asarray(a, dtype=d, order="C") for a, d in zip(arrays, self._input_dtypes)]
        sizes, shapes, arena_bytes, values = self._sized.prepare(inputs)
        if self._index_checks:
            self._check_indices(inputs, values)
        with self._call_lock:
            # last call's output arrays when nobody else holds them and the shapes repeat (see _run)
            recycled = self._recycled
            outputs = []
            for k, (shape, (_, dtype)) in enumerate(zip(shapes, self._output_specs)):
                last = recycled[k]
                outputs.append(None if k in self._in_place else last if last is not None and last.shape == shape
                               and sys.getrefcount(last) <= _UNREACHABLE_REFS else np.empty(shape, dtype))
            if self._in_place:
                self._place_in_inputs(arrays, inputs, outputs)
            self.module.call_sized(inputs + outputs, sizes, arena_bytes)
            self._recycled = [None if k in self._in_place else out for k, out in enumerate(outputs)]
        return outputs

    def _storage_inputs(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """`arrays` itself when every one is a C-contiguous ndarray of its input's dtype and shape,
        else each converted to its storage dtype, C-contiguous (the module checks shapes)."""
        if len(arrays) != len(self._input_types):
            return list(arrays)  # the module names the missing or extra arguments
        for array, (dtype, shape) in zip(arrays, self._input_types):
            if type(array) is not np.ndarray or array.dtype is not dtype or array.shape != shape \
                    or not array.flags.c_contiguous:
                return [np.asarray(a, dtype=d, order="C") for a, d in zip(arrays, self._input_dtypes)]
        return arrays

    def _check_indices(self, inputs: list[np.ndarray], values: dict[str, int] | None = None) -> None:
        """IndexError, as the reference raises, for an index input out of its axis' range
        (a symbolic axis size evaluated with this call's symbol `values`)."""
        for position, size, op in self._index_checks:
            if values is not None:
                size = evaluate(size, values)
            index = inputs[position]
            if index.size and (index.min() < -size or index.max() >= size):
                bad = index[(index < -size) | (index >= size)].reshape(-1)[0]
                raise IndexError(f"{op}: index {bad} is out of range for an axis of size {size}")

    def _run(self, arrays: list[np.ndarray], inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Pick the outputs' arrays and make the foreign call (the caller holds the call lock)."""
        # Output k's array: last call's, when the caller has let go of it, else a new one.
        # A new large array costs its first writer a page fault per 4 KiB page as the OS maps
        # and zeroes it (GPT-2's 25 MiB of logits: about 30 ms here, as long as a third of the
        # prefill), and glibc returns freed large blocks to the OS, so every call paid it again.
        # Referenced only by `_recycled`, the module's argument slot, the local name and
        # getrefcount's argument, the last array is unreachable from outside (a view, a Tensor
        # or a caller's name would add a reference), so writing the new result into it is
        # unobservable.
        recycled = self._recycled
        outputs = []
        for k, (shape, dtype) in enumerate(self._output_specs):
            last = recycled[k]
            outputs.append(None if k in self._in_place  # its input's array, or a copy (_place_in_inputs)
                           else last if last is not None and sys.getrefcount(last) <= _UNREACHABLE_REFS
                           else np.empty(shape, dtype))
        if self._in_place:
            self._place_in_inputs(arrays, inputs, outputs)
        # Inputs were checked (or are exactly the dtypes and shapes checked before), outputs are
        # fresh, recycled or in-place pairs the code allows: nothing to check in the module.
        self.module.call_checked(inputs + outputs)
        if self._in_place:
            self._recycled = [None if k in self._in_place else out for k, out in enumerate(outputs)]
        else:
            self._recycled = outputs[:]  # a copy: the caller may keep the list it is given
        return outputs

    def _place_in_inputs(self, arrays: list[np.ndarray], inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        """Let each in-place output overwrite its input's array, or start from a copy of it.

        The new value overwrites the old one's array (a parameter, an optimizer moment)
        unless that array is read-only, was converted, or is passed twice.
        """
        distinct = len({id(a) for a in inputs}) == len(inputs)
        for output, position in self._in_place.items():
            target = inputs[position]
            if target is arrays[position] and target.flags.writeable and \
                    (distinct or sum(a is target for a in inputs) == 1):
                outputs[output] = target
            else:  # the kernel may store only the elements it changes (loops/in_place.py)
                outputs[output] = target.copy()  # C order: the input's storage dtype and shape
