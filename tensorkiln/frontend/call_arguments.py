"""How a jitted call's arguments become its inputs: nested structures flattened to tensor leaves, the
static key of the non-tensor values (baked into the trace), and the names the inputs take."""
from __future__ import annotations

import inspect
import types
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .tensor import Tensor, as_tensor


@dataclass
class Leaf:
    """Placeholder for a tensor inside a flattened argument or result structure."""

    index: int


def flatten(value, leaves: list, names: list, name: str):
    """Replace tensors/arrays in nested lists, tuples and dicts by Leaf markers."""
    if isinstance(value, (Tensor, np.ndarray)):
        leaves.append(value)
        names.append(name)
        return Leaf(len(leaves) - 1)
    if isinstance(value, (list, tuple)):
        items = [flatten(v, leaves, names, f"{name}_{i}") for i, v in enumerate(value)]
        return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    if isinstance(value, dict):
        return {k: flatten(v, leaves, names, f"{name}_{k}") for k, v in value.items()}
    return value


def unflatten(structure, leaves: list):
    if isinstance(structure, Leaf):
        return leaves[structure.index]
    if isinstance(structure, (list, tuple)):
        items = [unflatten(v, leaves) for v in structure]
        return type(structure)(items) if not hasattr(structure, "_fields") else type(structure)(*items)
    if isinstance(structure, dict):
        return {k: unflatten(v, leaves) for k, v in structure.items()}
    return structure


# Code is compared by identity, which is its value: the key holds the object, so its id cannot be reused.
_CODE_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType, type)
_SINGLETONS = (None, Ellipsis, NotImplemented)


def static_key(structure, name: str = "argument"):
    """A hashable key for the non-tensor parts of the arguments, comparing them by value.

    A value that can only be compared by identity (an object with the default
    hash, or an unhashable one) is refused: a freed object's id is reused, and a
    mutated object keeps its id, so an identity key would run a stale trace.
    """
    if isinstance(structure, Leaf):
        return ("leaf",)
    if isinstance(structure, (list, tuple)):
        return (type(structure).__name__,) + tuple(static_key(v, f"{name}[{i}]") for i, v in enumerate(structure))
    if isinstance(structure, dict):
        # insertion order, not sorted: tensors are bound to graph inputs in this order (kwargs too)
        return ("dict",) + tuple((k, static_key(v, f"{name}[{k!r}]")) for k, v in structure.items())
    if any(structure is s for s in _SINGLETONS) or isinstance(structure, _CODE_TYPES):
        return ("code", structure)
    kind = type(structure)
    if kind.__hash__ is not None and kind.__hash__ is not object.__hash__:
        try:
            hash(structure)
            return ("value", kind, structure)
        except TypeError:  # a tuple-like holding something unhashable
            pass
    raise TypeError(f"tk.jit: {name} is a {kind.__name__}, neither a tensor nor a value tk.jit can compare: "
                    f"non-tensor arguments are baked into the trace and must be hashable by value. Pass it as "
                    f"a tensor, or make it a value (numbers, strings, tuples, a frozen dataclass, or a class "
                    f"with __eq__ and __hash__)")


def static_key_of_arguments(structure: list, names: list[str]) -> tuple:
    """static_key of the positional arguments, each named as the function names it."""
    return tuple(static_key(v, f"argument {names[i]!r}" if i < len(names) else f"argument {i}")
                 for i, v in enumerate(structure))


def as_input_tensor(value) -> Tensor:
    return value if isinstance(value, Tensor) else as_tensor(value)


def is_module(fn) -> bool:
    """A tk.nn.Module (duck-typed: jit sits below nn): compiled through its forward."""
    return hasattr(fn, "forward") and hasattr(fn, "training") and hasattr(fn, "parameters")


def positional_names(fn: Callable) -> list[str]:
    """Names of the parameters that positional arguments bind to (up to any *args)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    names = []
    for p in params:
        if p.kind not in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            break
        names.append(p.name)
    return names


def parameter_names(fn: Callable) -> list[str] | None:
    """Every parameter name of fn; None where it takes *args or **kwargs (or has no readable signature)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD) for p in params):
        return None
    return [p.name for p in params]


def unique_names(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    result = []
    for n in names:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in n) or "arg"
        if base in seen:
            seen[base] += 1
            base = f"{base}_{seen[base]}"
        else:
            seen[base] = 0
        result.append(base)
    return result


__all__ = ["Leaf", "as_input_tensor", "flatten", "is_module", "parameter_names", "positional_names", "static_key",
           "static_key_of_arguments", "unflatten", "unique_names"]
