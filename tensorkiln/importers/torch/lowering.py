"""The lowering table: one entry per ATen op, mapping it onto tensorkiln's front-end ops.

    @register_lowering(aten.relu.default)
    def relu(x): return x.relu()

Arguments arrive as in the op's ATen schema, with tk Tensors in place of torch
tensors (keyword arguments keep their schema names). A lowering may carry a
`check(node) -> reason | None` that refuses a variant it cannot run (a training
batch norm, a 3-d convolution); `convert.check_supported` collects every refusal
and every missing op before anything is lowered, and names them all at once.
The converter casts each result to the dtype PyTorch recorded for the node, so
lowerings may compute in a wider type.

This file holds the table and the helpers its entries share; the entries are
in one file per family of ops (`lowering_<family>.py`), which convert.py
imports to register them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ... import dtypes as dt
from ...frontend.creation import full as tk_full
from ...frontend.tensor import Tensor, as_tensor
from .tensors import tk_dtype

aten = torch.ops.aten


@dataclass
class Lowering:
    fn: Callable
    check: Callable | None = None  # node -> None when supported, else the reason


LOWERINGS: dict = {}


def register_lowering(*targets, check: Callable | None = None):
    """Register `fn` as the lowering of each ATen overload in `targets` (an OpOverloadPacket means all)."""
    def decorate(fn):
        for target in targets:
            overloads = [getattr(target, o) for o in target.overloads()] \
                if isinstance(target, torch._ops.OpOverloadPacket) else [target]
            for overload in overloads:
                LOWERINGS[overload] = Lowering(fn, check)
        return fn
    return decorate


def lowered_ops() -> list[str]:
    """Names of every ATen overload the table covers."""
    return sorted(str(t) for t in LOWERINGS if isinstance(t, torch._ops.OpOverload))


# ---- helpers ---------------------------------------------------------------------------------

def _dtype(dtype, default=None):
    return tk_dtype(dtype) if dtype is not None else default


def _meta(node, i: int):
    arg = node.args[i] if i < len(node.args) else None
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None


def _binary(op, a, b):
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = as_tensor(a)
    return op(a, b)


def _float_of(x: Tensor) -> Tensor:
    return x if x.dtype.is_floating else x.to(dt.float32)


def _fill(shape, value, dtype):
    shape = tuple(int(s) for s in shape)
    if dtype is None:
        dtype = dt.bool_ if isinstance(value, bool) else dt.int64 if isinstance(value, int) else dt.float32
    return tk_full(shape, value, dtype)
