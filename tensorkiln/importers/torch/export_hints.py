"""torch.export for models as users bring them: an unexportable cache output gets use_cache=False.

Hugging Face decoders return their key/value cache (`DynamicCache`) when
`use_cache` is on, and torch.export cannot return an object that is not
registered with PyTorch's pytree. An inference graph does not need the cache
(the logits do not depend on returning it), so when export fails on an output of
an unknown type and the model takes `use_cache`, the model is exported again with
`use_cache=False`, and a warning says so. Any other failure keeps torch's error,
with a note naming the output type and the fix.
"""
from __future__ import annotations

import inspect
import warnings

import torch


def _takes_use_cache(module: torch.nn.Module) -> bool:
    try:
        parameters = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False
    return "use_cache" in parameters or (any(p.kind == p.VAR_KEYWORD for p in parameters.values())
                                         and hasattr(getattr(module, "config", None), "use_cache"))


def _unknown_output_type(err: Exception) -> bool:
    text = str(err)
    return "which is not a known type" in text and "pytree" in text


def export_for_inference(module: torch.nn.Module, args: tuple, kwargs: dict | None, strict: bool,
                         dynamic_shapes=None):
    """torch.export.export(module, args, kwargs), retried with use_cache=False for an unexportable cache."""
    try:
        return torch.export.export(module, args, kwargs=kwargs, strict=strict, dynamic_shapes=dynamic_shapes)
    except Exception as err:
        if not _unknown_output_type(err):
            raise
        kwargs = dict(kwargs or {})
        if "use_cache" in kwargs or not _takes_use_cache(module):
            err.add_note("tk.from_torch: the model returns an object torch.export cannot flatten; register its "
                         "type with torch.utils._pytree, or return only tensors (for a cache: use_cache=False)")
            raise
        warnings.warn(f"tk.from_torch: torch.export cannot return the model's cache ({str(err).split(',')[0]}); "
                      f"exported with use_cache=False, so the program returns no cache (pass use_cache=False in "
                      f"example_kwargs to silence this)", UserWarning, stacklevel=3)
        return torch.export.export(_WithoutCache(module), args, kwargs=kwargs, strict=strict,
                                   dynamic_shapes=dynamic_shapes)


class _WithoutCache(torch.nn.Module):
    """`module` called with use_cache=False (a constant of the graph, not an input of the program)."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, use_cache=False, **kwargs)
