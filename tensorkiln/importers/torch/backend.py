"""The torch.compile backend: `torch.compile(model, backend="tensorkiln")`.

Dynamo hands the backend a torch-level FX graph and example inputs (module
parameters and buffers among them, marked as static inputs). The backend
returns a `TensorKilnGraph`, which compiles on its first call per input
signature (shapes, dtypes, and the values of any integer inputs of a graph
that Dynamo made dynamic after a recompile):

1. the graph, with parameters and buffers closed over as constants, is traced
   by `make_fx` under functionalization with PyTorch's core ATen decomposition
   table (`torch._decomp.core_aten_decompositions()`), in inference mode;
2. `convert.convert_graph` lowers every ATen node through the table in
   `lowering.py` (raising one UnsupportedOpError naming every unsupported op);
3. the result is traced and compiled by `tk.jit`; a call converts torch inputs
   to numpy without copying and wraps the outputs with `torch.from_numpy`.

Options (`torch.compile(..., options={...})`): `fallback` (default False:
unsupported ops raise `tk.UnsupportedOpError`; True: warn once, naming them,
and run them with eager PyTorch while the rest of the graph runs compiled, in
parts: `partition.py`), `opt_level` (tk.jit's, default 2), `debug`.

This module compiles inference graphs. A graph Dynamo hands over with grad
enabled and inputs that require grad goes to `training.py` (the registered
backend dispatches there: AOTAutograd's forward and backward graphs); a graph
compiled here that is called with grad needed runs with eager PyTorch (warning once).
Parameters and buffers are baked in when a signature is compiled; a call that
sees a different tensor object or a changed version counter (an in-place
update such as an optimizer step) recompiles.
"""
from __future__ import annotations

import collections
import warnings
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from ...errors import UnsupportedOpError
from ...frontend.jit import jit
from .convert import convert_graph, rebuild_outputs, unsupported_nodes
from .input_mutations import split_input_writes, write_back
from .lowering_batch_norm import functional_running_updates
from .partition import Partitioned, partition
from .random_key import new_key
from .tensors import to_numpy, to_torch

#: Diagnostics: graphs handed to the backend, signatures compiled, calls run by tensorkiln or eagerly.
STATS: collections.Counter = collections.Counter()

_decompositions: dict = {}


class TorchFallbackWarning(UserWarning):
    """The tensorkiln torch.compile backend runs a graph with eager PyTorch instead."""


def decompositions() -> dict:
    """The decomposition table: PyTorch's core ATen table (the same that torch.export's
    run_decompositions() uses), so both import paths see the same op set."""
    if not _decompositions:
        from torch._decomp import core_aten_decompositions  # a heavy torch module, loaded on first use
        _decompositions.update(core_aten_decompositions())
    return _decompositions


@dataclass
class BackendOptions:
    fallback: bool = False  # unsupported ops: False raises UnsupportedOpError, True runs them with eager PyTorch
    opt_level: int = 2
    debug: bool | None = None
    precision: str = "fp32"  # tk.jit's option: "bf16" computes matmuls, convolutions and attention in bf16;
    # "int8w" / "int4w" quantizes linear layers' weights

    @classmethod
    def parse(cls, options: dict | None) -> "BackendOptions":
        options = dict(options or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"tensorkiln backend: unknown option(s) {unknown}; known: {sorted(known)}")
        return cls(**options)


def tensorkiln_backend(gm: torch.fx.GraphModule, example_inputs: list, options: dict | None = None,
                       **kwargs) -> "TensorKilnGraph":
    """A torch.compile backend (registered as "tensorkiln"): returns a callable that runs `gm` compiled by
    tensorkiln. `options`: fallback (bool), opt_level (0-3), debug (bool), precision ("fp32", "bf16"); see the
    module docstring."""
    opts = BackendOptions.parse({**(options or {}), **{k: v for k, v in kwargs.items() if k != "mode"}})
    STATS["graphs"] += 1
    return TensorKilnGraph(gm, example_inputs, opts)


@dataclass
class _Entry:
    run: Any  # tk.jit function over the user inputs' arrays
    output_structure: Any
    baked: list  # (position, tensor, version) of the parameters and buffers baked in
    written: list[int]  # positions of the inputs the graph updates in place (written back after each call)
    partitioned: Any = None  # with unsupported ops and fallback=True: the graph of compiled parts and eager ops
    random: bool = False  # the graph draws random numbers: each call passes a new key (random_key.py)


class TensorKilnGraph:
    """One Dynamo graph, compiled by tensorkiln per input signature."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: list, options: BackendOptions,
                 bake_parameters: bool = True):
        self.gm = gm
        self.options = options
        # Parameters and buffers of inlined nn.Modules reach the graph as inputs Dynamo marks static;
        # a training graph keeps them inputs (each optimizer step changes them).
        self.constant_positions = {i for i, x in enumerate(example_inputs) if isinstance(x, torch.Tensor)
                                   and getattr(x, "_dynamo_static_input_type", None) is not None} \
            if bake_parameters else set()
        self._cache: dict[tuple, _Entry] = {}
        self._eager_reason: str | None = None
        self._warned_grad = False

    @property
    def draws_random_numbers(self) -> bool:
        """True when a program compiled for this graph draws random numbers (a new key each call)."""
        return any(entry.random for entry in self._cache.values())

    # ---- calling ------------------------------------------------------------------------------
    def __call__(self, *args):
        if self._eager_reason is not None:
            return self._eager(args)
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            if not self._warned_grad:
                self._warned_grad = True
                warnings.warn("tensorkiln's torch.compile backend is inference-only: this call needs "
                              "gradients, so the graph runs with eager PyTorch (wrap inference in "
                              "torch.no_grad() or torch.inference_mode())", TorchFallbackWarning, stacklevel=2)
            return self._eager(args)
        entry = self._entry(args)
        if entry is None:
            return self._eager(args)
        user_inputs = [a for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in self.constant_positions]
        if entry.partitioned is not None:
            STATS["partitioned_calls"] += 1
            result = entry.partitioned.module(*user_inputs)
        else:
            STATS["tensorkiln_calls"] += 1
            arrays = [to_numpy(a) for a in user_inputs] + ([np.array(new_key(), dtype=np.int64)] if entry.random else [])
            outputs = entry.run(*arrays)
            result = rebuild_outputs(entry.output_structure, [to_torch(t) for t in outputs])
        if entry.written:
            result, new_values = result
            write_back([args[i] for i in entry.written], new_values)
        return result

    def _eager(self, args):
        STATS["eager_calls"] += 1
        return self.gm(*args)

    def _key(self, args) -> tuple:
        key = []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                key.append((i, tuple(a.shape), a.dtype) if i not in self.constant_positions else (i, id(a)))
            else:
                key.append((i, a))
        return tuple(key)

    def _entry(self, args) -> _Entry | None:
        key = self._key(args)
        entry = self._cache.get(key)
        if entry is not None and all(args[i] is t and t._version == v for i, t, v in entry.baked):
            return entry
        try:
            entry = self._compile(args)
        except UnsupportedOpError as err:
            if not self.options.fallback:
                raise
            self._eager_reason = str(err)
            warnings.warn(f"{err}\ntensorkiln: this graph runs with eager PyTorch instead (fallback=True)",
                          TorchFallbackWarning, stacklevel=3)
            return None
        self._cache[key] = entry
        return entry

    # ---- compiling --------------------------------------------------------------------------
    def _compile(self, args) -> _Entry:
        """Trace the graph to ATen for these concrete inputs, convert it, and jit it."""
        from torch.fx.experimental.proxy_tensor import make_fx  # a heavy torch module, loaded on first use
        user_positions = [i for i, a in enumerate(args)
                          if isinstance(a, torch.Tensor) and i not in self.constant_positions]
        template = list(args)

        def with_constants(*user_tensors):
            full = list(template)
            for position, tensor in zip(user_positions, user_tensors):
                full[position] = tensor
            return self.gm(*full)

        # clones: tracing runs the graph on real tensors, and must not apply its in-place writes to the caller's
        user_inputs = [args[i].clone() for i in user_positions]
        # the trace runs the graph, random ops included: it must not move the caller's generator
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            traced = make_fx(torch.func.functionalize(with_constants, remove="mutations"),
                             decomposition_table=decompositions(), tracing_mode="real")(*user_inputs)
        traced.graph.eliminate_dead_code()  # e.g. the unused uint8 `empty` batch norm's decomposition makes
        functional_running_updates(traced)  # a training batch norm's hidden running-statistics update
        written = [user_positions[p] for p in split_input_writes(traced)]  # a KV cache's index_copy_
        baked = [(i, args[i], args[i]._version) for i in sorted(self.constant_positions)]
        if self.options.fallback and unsupported_nodes(traced.graph):
            return _Entry(None, None, baked, written, self._partitioned(traced))
        converted = convert_graph(traced, what="torch.compile graph")
        STATS["compiles"] += 1
        run = jit(converted.fn, opt_level=self.options.opt_level, debug=self.options.debug,
                  precision=self.options.precision)
        return _Entry(run, converted.output_structure, baked, written, random=converted.random)

    def _partitioned(self, traced: torch.fx.GraphModule) -> Partitioned:
        """The graph as compiled parts around the ops tensorkiln does not lower, which run eagerly (warned)."""
        options = self.options
        parts = partition(traced, lambda fn: jit(fn, opt_level=options.opt_level, debug=options.debug,
                                                 precision=options.precision))
        STATS["compiles"] += parts.compiled_parts
        lines = [f"  {op}" for op in parts.eager_ops] + [f"  part {why}" for why in parts.failed_parts]
        warnings.warn("tensorkiln cannot convert these PyTorch op(s) of this torch.compile graph; they run with "
                      f"eager PyTorch (fallback=True), the rest in {parts.compiled_parts} compiled part(s):\n"
                      + "\n".join(lines), TorchFallbackWarning, stacklevel=4)
        return parts
