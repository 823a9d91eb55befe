"""An imported model's function with its weights named, for tk.quantize's layer names.

tk.quantize names a layer by the module owning its weight when the function it is given has
`named_modules()`, as a tk.nn module has. An importer's converted function has no modules; it
wraps the function in `NamedWeights` with the names its source gives each weight constant (a
PyTorch parameter's module path, an ONNX initializer's node).
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Callable, Iterable, Iterator

from ..frontend.tensor import Tensor


class NamedWeights:
    """`fn`, called as it is, with `named_modules()` yielding (name, an object whose `weight` is that
    weight constant) for each of `weights` (name, constant tensor)."""

    def __init__(self, fn: Callable, weights: Iterable[tuple[str, Tensor]]):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "model")
        self.__signature__ = getattr(fn, "__signature__", None)
        self._modules = [(name, SimpleNamespace(weight=weight)) for name, weight in weights]

    def __call__(self, *tensors):
        return self.fn(*tensors)

    def named_modules(self) -> Iterator[tuple[str, SimpleNamespace]]:
        return iter(self._modules)


__all__ = ["NamedWeights"]
