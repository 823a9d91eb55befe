"""Training through `torch.compile(model, backend="tensorkiln")`: AOTAutograd's two graphs, both compiled.

When Dynamo hands the backend a graph whose inputs require gradients (grad mode
on), AOTAutograd splits it into a forward graph (which also returns what the
backward needs) and a backward graph, both in ATen after PyTorch's core
decompositions (the backward ops of linear layers, activations, softmax, layer
norm and losses decompose into ordinary ops). Each is compiled by tensorkiln
like an inference graph, except that parameters stay inputs (an optimizer step
changes them every iteration; baking them in would recompile each step).

A graph with an op tensorkiln cannot lower (`convolution_backward`, the pooling
backward ops: refusals.py) raises `UnsupportedOpError` naming it, or, with
`options={"fallback": True}`, runs that graph with eager PyTorch after a warning.
"""
from __future__ import annotations

import warnings

import torch

from .backend import STATS, BackendOptions, TensorKilnGraph, TorchFallbackWarning, decompositions
from .convert import check_supported, unsupported_nodes


def _graph_compiler(options: BackendOptions, which: str):
    from functorch.compile import make_boxed_func  # heavy torch modules, loaded on first use

    def compile_graph(gm: torch.fx.GraphModule, example_inputs: list):
        if unsupported_nodes(gm.graph):
            if not options.fallback:
                check_supported(gm.graph, f"{which} graph")
            warnings.warn(f"tensorkiln: the {which} graph has ops tensorkiln cannot lower; it runs with eager "
                          f"PyTorch (fallback=True)", TorchFallbackWarning, stacklevel=2)
            return make_boxed_func(gm)
        return make_boxed_func(TensorKilnGraph(gm, example_inputs, options, bake_parameters=False))
    return compile_graph


def training_backend(gm: torch.fx.GraphModule, example_inputs: list, options: BackendOptions):
    """The forward and backward graphs of `gm`, each compiled by tensorkiln through AOTAutograd."""
    from torch._dynamo.backends.common import aot_autograd
    backend = aot_autograd(fw_compiler=_graph_compiler(options, "forward"),
                           bw_compiler=_graph_compiler(options, "backward"),
                           decompositions=decompositions())
    return backend(gm, example_inputs)


def tensorkiln_backend(gm: torch.fx.GraphModule, example_inputs: list, options: dict | None = None, **kwargs):
    """The torch.compile backend registered as "tensorkiln": a graph that needs gradients (grad mode on and an
    input requiring grad) trains through AOTAutograd; any other is an inference graph (backend.py).
    `options`: fallback (bool), opt_level (0-3), debug (bool)."""
    opts = BackendOptions.parse({**(options or {}), **{k: v for k, v in kwargs.items() if k != "mode"}})
    if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs):
        STATS["training_graphs"] += 1
        return training_backend(gm, example_inputs, opts)
    STATS["graphs"] += 1
    return TensorKilnGraph(gm, example_inputs, opts)
