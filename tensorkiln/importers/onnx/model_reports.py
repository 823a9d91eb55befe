"""What a loaded ONNX model shows of its compiled programs: graphs, kernels, profile, report, caches, export.

Each method takes the model's inputs (as a call does) to pick a signature, and
asks tk.jit about its program; a model whose shapes depend on data asks each
compiled stage (staged.py).
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ...runtime.export_format import model_name_from
from .registry import DataDependentOutput
from .staged import StagedGraph


class ModelReports:
    """OnnxModule's reports, over `_jit`, `_staged`, `_arguments` and the input and output descriptions
    (model.py)."""

    @property
    def compile_count(self) -> int:
        """Programs compiled so far (one serves every size of its dim_params that its guards admit)."""
        return self._jit.compile_count

    def graph(self, *args, **kwargs):
        """The traced tensorkiln graph for these inputs' signature."""
        return self._jit.graph(*self._arguments(args, kwargs))

    def optimized_graph(self, *args, **kwargs):
        """The graph after the optimization passes (batch norm folded, ...) for these inputs' signature."""
        return self._jit.optimized_graph(*self._arguments(args, kwargs))

    def profile(self, *args, repeat: int = 20, **kwargs):
        """Mean time per call of each kernel for these inputs' signature (tk.jit's profile)."""
        return self._jit.profile(*self._arguments(args, kwargs), repeat=repeat)

    def report(self, *args, **kwargs):
        """The CompileReport for these inputs' signature (compiles it if needed); a model run in stages:
        one report of all its segments (staged.py)."""
        arguments = self._arguments(args, kwargs)
        if self._staged is None:
            try:
                return self._jit.report(*arguments)
            except DataDependentOutput:
                self._staged = StagedGraph(self, self._make_jit)
        return self._staged.report(arguments)

    def cache_size(self) -> int:
        """Number of compiled programs this model holds (one per input signature called, at most 64;
        a model run in stages: those of every stage)."""
        return self._jit.cache_size() + (self._staged.cache_size() if self._staged is not None else 0)

    @property
    def stages(self) -> str | None:
        """How a model whose shapes depend on data runs: its compiled segments and the nodes run on
        actual values between them (staged.py); None for a model that is one compiled program."""
        return None if self._staged is None else self._staged.describe()

    def explain(self, *args, **kwargs) -> str:
        """Graph after each pass, kernels and generated source for these inputs' signature."""
        return self._jit.explain(*self._arguments(args, kwargs))

    def clear_cache(self) -> None:
        """Forget the compiled signatures (the next call compiles again: after tk.tune, with its records)."""
        self._jit.clear_cache()

    def export(self, directory, *args, name: str | None = None, input_shapes: dict | None = None,
               weights: str = "auto", openmp: bool = True, **kwargs):
        """Export the model as a standalone C library in `directory` (tk.load_compiled reads it back).

        The shapes come from example inputs (`args`/`kwargs`, as for a call) or, for inputs not given,
        from the declared shapes, with `input_shapes` {name: shape} for dynamic dimensions. Inputs the
        model reads as values (a Reshape's shape) must be given. name: the C prefix (default: the file's).
        """
        values = dict(zip(self.input_names, args))
        values.update(kwargs)
        for input_name in self.input_names:
            if input_name not in values:
                values[input_name] = self._placeholder(input_name, (input_shapes or {}).get(input_name))
        arguments = self._arguments((), values)
        names = [n for n in self.input_names if n not in self.value_inputs]
        default = model_name_from(self.model_name.rsplit(".", 1)[0] or "onnx_model")
        return self._jit.export(directory, *arguments, name=name or default, input_names=names,
                                output_names=self.output_names, weights=weights, openmp=openmp)

    def _placeholder(self, name: str, shape) -> np.ndarray:
        """Zeros of input `name`'s declared shape (dynamic dimensions from `shape`), to trace an export."""
        dtype, dims = self.input_types[name]
        if name in self.value_inputs:
            raise TypeError(f"the model reads input {name!r} as a value (a shape or an axis): pass it to export")
        if shape is None:
            if dims is None or any(d is None for d in dims):
                declared = "unknown" if dims is None else [d if d is not None else "?" for d in dims]
                raise ShapeError(f"input {name!r} has dynamic dimensions (declared {declared}): give its shape "
                                 f"(input_shapes={{{name!r}: (...)}} or --input {name}=SHAPE)")
            shape = dims
        shape = tuple(int(d) for d in shape)
        if dims is not None and (len(shape) != len(dims) or any(d is not None and d != s for d, s in zip(dims, shape))):
            declared = [d if d is not None else "?" for d in dims]
            raise ShapeError(f"input {name!r} is declared with shape {declared}, not {list(shape)}")
        return np.zeros(shape, dtype.storage)
