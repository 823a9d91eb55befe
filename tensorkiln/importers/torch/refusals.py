"""The core ATen operators tensorkiln refuses on purpose, each with its reason.

PyTorch's core ATen opset (the operators tagged `torch.Tag.core`, the IR that
torch.export and torch.compile decompose to) is covered three ways: a lowering
(`LOWERINGS`), a decomposition in PyTorch's core table that both import paths
apply, or an entry here. `tests/importers/test_torch_core_aten.py` checks that
every core operator is one of the three, and docs/pytorch.md lists this table.
A graph using a refused operator gets `UnsupportedOpError` naming it, never an
approximation.
"""
from __future__ import annotations

DATA_DEPENDENT = "the output's shape depends on the input's values (needs dynamic shapes)"
COMPLEX = "complex results: tensorkiln has no complex dtype"
LAYOUT = "a memory-layout query: tensorkiln values have no strides or storage offsets"

#: core ATen overload (as `str(torch.ops.aten.<op>.<overload>)`) -> why tensorkiln refuses it
REFUSED: dict[str, str] = {
    "aten.nonzero.default": DATA_DEPENDENT,
    "aten._local_scalar_dense.default": "reads a tensor's value into Python (`.item()`): " + DATA_DEPENDENT,
    "aten._fft_r2c.default": COMPLEX,
    "aten._fft_c2r.default": COMPLEX,
    "aten.sym_storage_offset.default": LAYOUT,
    "aten.resize_.default": "resizes a tensor's storage in place; functionalized graphs carry no resize_",
    "aten.atan2.out": "an out= overload writes its argument in place; graphs carry the functional atan2",
}


def refusal_reason(overload_name: str) -> str | None:
    """Why tensorkiln refuses the core ATen overload `overload_name` (None: it does not)."""
    return REFUSED.get(overload_name)
