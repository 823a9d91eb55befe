"""PyTorch models into tensorkiln (needs torch; see docs/pytorch.md).

- `torch.compile(model, backend="tensorkiln")`: the Dynamo backend (`tensorkiln_backend`, registered
  as an entry point in the "torch_dynamo_backends" group): inference graphs (backend.py) and
  training through AOTAutograd's forward and backward graphs (training.py).
- `tk.from_torch(module, example_inputs)`: ahead of time through torch.export (`from_torch`).
- `LOWERINGS` / `register_lowering`: the table mapping each ATen op to tensorkiln's front-end ops.
"""
from .backend import STATS, BackendOptions, TensorKilnGraph, TorchFallbackWarning, decompositions
from .convert import check_supported, convert_graph, unsupported_nodes
from .export import TorchProgram, from_torch
from .lowering import LOWERINGS, lowered_ops, register_lowering
from .training import tensorkiln_backend

__all__ = ["tensorkiln_backend", "from_torch", "TorchProgram", "TensorKilnGraph", "BackendOptions",
           "TorchFallbackWarning", "STATS", "LOWERINGS", "register_lowering", "lowered_ops", "convert_graph",
           "check_supported", "unsupported_nodes", "decompositions"]
