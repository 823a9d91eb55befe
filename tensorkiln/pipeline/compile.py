"""Compiling a pipeline: lower it to a loop-IR Program, build it with the C backend, call it on arrays.

A compiled pipeline is specialized to the shapes of its inputs (every extent
is a constant in the generated C, so inner loops have known trip counts);
calling it with arrays of other shapes lowers and builds again, once per set
of shapes. Builds go through the same compile cache as every tensorkiln
graph (driver/build.py).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from tensorkiln.driver.build import build
from tensorkiln.errors import ShapeError
from tensorkiln.loops.ir import Kernel, LoopIRError
from tensorkiln.loops.program import Program
from tensorkiln.pipeline.lower import Lowering
from tensorkiln.pipeline.names import PipelineError
from tensorkiln.pipeline.schedule import default_steps


def lower_pipeline(func, sizes: Sequence[int], arrays: Optional[dict] = None,
                   fold_storage: bool = True) -> tuple[Program, dict]:
    """The Program computing `func` over `sizes`, and its input Buffers by name, in argument order.

    `fold_storage=False` keeps every buffer stored at an outer loop whole (for comparison; fold.py)."""
    program, lowering = _lower(func, sizes, arrays, fold_storage)
    return program, dict(lowering.inputs)


def _lower(func, sizes: Sequence[int], arrays: Optional[dict], fold_storage: bool) -> tuple[Program, Lowering]:
    lowering = Lowering(func, sizes, dict(arrays or {}), fold_storage=fold_storage)
    kernel, outs, inputs = lowering.kernel(f"pipeline_{func.name}")
    try:
        program = Program(f"pipeline_{func.name}", (kernel,), tuple(inputs), outs)
    except LoopIRError as err:
        raise PipelineError(f"the schedule of {func.name}'s pipeline reads a Func outside the loop it is computed "
                            f"in (every reader must be inside its compute_at loop): {err}") from None
    return program, lowering


class CompiledPipeline:
    """`fn(*arrays)` or `fn(name=array, ...)`: the pipeline run on new inputs; returns the output array.

    `fn.inputs` names the input Buffers in positional order; an input not
    given keeps the array its Buffer wraps.
    """

    def __init__(self, func, sizes: Sequence[int], debug: bool = False, fold_storage: bool = True):
        self.func, self.sizes, self.debug = func, [int(s) for s in sizes], debug
        self.fold_storage = fold_storage
        self._built: dict[tuple, tuple] = {}
        program, buffers = lower_pipeline(func, self.sizes, fold_storage=fold_storage)  # checks the pipeline now, not at the first call
        self.inputs: list[str] = list(buffers)
        self._buffers = buffers
        self._lowered = {tuple(b.array.shape for b in buffers.values()): program}

    def arrays(self, *arrays: np.ndarray, **named: np.ndarray) -> dict[str, np.ndarray]:
        """The arrays a call would run on, by input name."""
        if len(arrays) > len(self.inputs):
            raise ShapeError(f"pipeline {self.func.name} takes {len(self.inputs)} input(s) ({', '.join(self.inputs)}), "
                             f"got {len(arrays)}")
        bound = {name: self._buffers[name].array for name in self.inputs}
        bound.update(zip(self.inputs, arrays))
        for name, array in named.items():
            if name not in bound:
                raise ShapeError(f"pipeline {self.func.name} has no input {name!r} (inputs: {', '.join(self.inputs)})")
            bound[name] = array
        for name, array in bound.items():
            expected = self._buffers[name].array
            array = np.asarray(array)
            if array.dtype != expected.dtype or array.ndim != expected.ndim:
                raise ShapeError(f"input {name} of pipeline {self.func.name} is {expected.ndim}-d {expected.dtype}, "
                                 f"got a {array.ndim}-d {array.dtype} array")
            bound[name] = np.ascontiguousarray(array)
        return bound

    def program(self, *arrays: np.ndarray, **named: np.ndarray) -> Program:
        """The loop-IR Program for these inputs' shapes."""
        return self._module(self.arrays(*arrays, **named))[1]

    def _module(self, bound: dict[str, np.ndarray]):
        key = tuple(bound[n].shape for n in self.inputs)
        found = self._built.get(key)
        if found is None:
            program = self._lowered.pop(key, None) or lower_pipeline(self.func, self.sizes, bound, self.fold_storage)[0]
            found = (build(program, debug=self.debug), program)
            self._built[key] = found
        return found

    def __call__(self, *arrays: np.ndarray, out=None, **named: np.ndarray):
        """Run on these inputs; `out`, if given, is filled (shape reversed(sizes), the output's dtype) and returned.
        A Tuple Func gives (and `out` is) a tuple of arrays, one per value."""
        bound = self.arrays(*arrays, **named)
        module, _ = self._module(bound)
        single = len(self.func.types) == 1
        if out is None:
            results = module.run(*(bound[n] for n in self.inputs))
            return results[0] if single else results
        module(*(bound[n] for n in self.inputs), *((out,) if single else tuple(out)))
        return out


def compile_func(func, sizes: Sequence[int], debug: bool = False, fold_storage: bool = True) -> CompiledPipeline:
    """`func.compile(sizes)`."""
    return CompiledPipeline(func, sizes, debug=debug, fold_storage=fold_storage)


def explain(func, sizes: Sequence[int], fold_storage: bool = True) -> str:
    """The algorithm, each stage's schedule, the loop nest they lower to, and the buffers it allocates."""
    program, lowering = _lower(func, sizes, None, fold_storage)
    lines = ["algorithm:"]
    for f in lowering.funcs.values():
        lines += ["  " + line for line in str(f).splitlines()]
    lines.append("schedule:")
    for f in lowering.funcs.values():
        level = lowering.level[f.name]
        for sched in f.schedules:
            described = sched.describe()
            if sched.stage == 0 and level in ("output", "root") and sched.compute == "inline":
                described[0] = described[0].replace("inline", str(level))
            if f is func and not sched.steps and not f.updates:
                described += [f"  .{s}  (default)" for s in default_steps(sched.initial_loops, f.types[0])]
            lines += ["  " + line for line in described]
    lines.append("loop nest:")
    kernel: Kernel = program.kernels[0]
    lines += ["  " + line for line in str(kernel).splitlines()]
    lines.append(f"storage ({sum(n.bytes for n in lowering.storage)} bytes in buffers, each held once per "
                 "iteration of the loop it lives in):")
    lines += [f"  {note}" for note in lowering.storage] or ["  no buffer besides the output"]
    return "\n".join(lines)
