"""Training-mode batch norm: normalize by the batch's statistics and return the updated running ones.

PyTorch spells it four ways. The functional overloads
(`_native_batch_norm_legit_functional`, `_batch_norm_with_update_functional`,
what AOTAutograd's graphs carry) return the new running mean and variance as
outputs, and the graph writes them into the buffers with `copy_`, which the
backend turns into a write-back after the call (input_mutations.py).
`native_batch_norm` and `_native_batch_norm_legit` update the running tensors
as a side effect their schemas do not show: `functional_running_updates`
rewrites such a node into the functional form, followed by those `copy_`s when
the running statistics are graph inputs, or read by every later node when they
are intermediates (instance norm's); the lowering refuses the rest.

The update is PyTorch's: running = (1 - momentum) * running + momentum * batch,
with the batch variance unbiased (times n / (n - 1), n the elements per channel).
"""
from __future__ import annotations

import math
import operator

import numpy as np
import torch

from ... import dtypes as dt
from ...frontend.tensor import as_tensor
from .lowering import register_lowering
from .lowering_nn import _affine, _batch_norm_statistics, _float

aten = torch.ops.aten


def _training_outputs(x, weight, bias, running_mean, running_var, momentum, eps):
    """(output, batch mean, batch 1/std, new running mean, new running variance)."""
    xf = _float(x)
    mu, rstd = _batch_norm_statistics(xf, eps)
    out = _affine((xf - mu) * rstd, weight, bias)
    mean, invstd = mu.reshape(-1), rstd.reshape(-1)
    if running_mean is None:
        return out, mean, invstd, None, None
    n = math.prod(x.shape) // x.shape[1]
    biased = invstd.reciprocal().square() - eps  # the batch variance, from 1/std as computed
    unbiased = biased * (n / (n - 1) if n > 1 else math.inf)
    new_mean = running_mean * (1 - momentum) + mean.to(running_mean.dtype) * momentum
    new_var = running_var * (1 - momentum) + unbiased.to(running_var.dtype) * momentum
    return out, mean, invstd, new_mean, new_var


@register_lowering(aten._native_batch_norm_legit_functional.default)
def native_batch_norm_legit_functional(x, weight, bias, running_mean, running_var, training, momentum, eps):
    if not training:
        shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        out = (_float(x) - running_mean.reshape(shape)) * (running_var.reshape(shape) + eps).rsqrt()
        empty = as_tensor(np.zeros(0, dtype=np.float32))
        return _affine(out, weight, bias), empty, empty, running_mean, running_var
    return _training_outputs(x, weight, bias, running_mean, running_var, momentum, eps)


@register_lowering(aten._batch_norm_with_update_functional.default)
def batch_norm_with_update_functional(x, weight, bias, running_mean, running_var, momentum, eps):
    out, mean, invstd, new_mean, new_var = _training_outputs(x, weight, bias, running_mean, running_var,
                                                             momentum, eps)
    reserve = as_tensor(np.zeros(0, dtype=np.uint8), dt.uint8)  # cuDNN's workspace: empty on the CPU
    return out, mean, invstd, reserve, new_mean, new_var


def _stateless(node) -> str | None:
    training = node.args[5] if len(node.args) > 5 else node.kwargs.get("training")
    if training and node.args[3] is not None:
        return ("training-mode batch norm updating running statistics that are not graph inputs "
                "(a module's buffers baked in as constants)")
    return None


@register_lowering(aten.native_batch_norm.default, check=_stateless)
def native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    out, mean, invstd, _, _ = native_batch_norm_legit_functional(x, weight, bias, running_mean, running_var,
                                                                training, momentum, eps)
    return out, mean, invstd


_SIDE_EFFECT_FORMS = (aten.native_batch_norm.default, aten._native_batch_norm_legit.default)


def _functional_meta(x: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor) -> tuple:
    """Shapes and dtypes of `_native_batch_norm_legit_functional`'s five results (on the meta device)."""
    stats = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    channels = (x.shape[1],)
    return (torch.empty(x.shape, dtype=x.dtype, device="meta"), torch.empty(channels, dtype=stats, device="meta"),
            torch.empty(channels, dtype=stats, device="meta"),
            torch.empty(running_mean.shape, dtype=running_mean.dtype, device="meta"),
            torch.empty(running_var.shape, dtype=running_var.dtype, device="meta"))


def functional_running_updates(gm: torch.fx.GraphModule) -> None:
    """Rewrite each training batch norm that updates its running statistics as a side effect into
    `_native_batch_norm_legit_functional`: running statistics that are graph inputs get `copy_`s of the new
    values at the graph's end; intermediate ones (instance norm's repeated statistics) are read as the new
    values by every node after the batch norm. Statistics baked in as constants stay (the lowering refuses)."""
    graph = gm.graph
    output = next(n for n in graph.nodes if n.op == "output")
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _SIDE_EFFECT_FORMS:
            continue
        args = list(node.args) + [None] * (8 - len(node.args))
        x, _, _, running_mean, running_var, training = args[:6]
        running = (running_mean, running_var)
        if not training or not all(isinstance(r, torch.fx.Node) and r.op in ("placeholder", "call_function")
                                   for r in running):
            continue
        with graph.inserting_before(node):
            functional = graph.call_function(aten._native_batch_norm_legit_functional.default, tuple(args[:8]))
            functional.meta["val"] = _functional_meta(x.meta["val"], running_mean.meta["val"], running_var.meta["val"])
        for user in list(node.users):  # getitem(node, i) for i < 3 reads the same outputs
            user.replace_input_with(node, functional)
        for position, target in ((3, running_mean), (4, running_var)):
            with graph.inserting_after(functional):
                new = graph.call_function(operator.getitem, (functional, position))
                new.meta["val"] = functional.meta["val"][position]
            if target.op == "placeholder":
                with graph.inserting_before(output):
                    graph.call_function(aten.copy_.default, (target, new))
            else:
                for user in list(target.users):
                    if user is not functional and user is not new and _comes_after(user, node):
                        user.replace_input_with(target, new)
        graph.erase_node(node)
        changed = True
    if changed:
        graph.lint()
        gm.recompile()


def _comes_after(node: torch.fx.Node, anchor: torch.fx.Node) -> bool:
    current = anchor.next
    while current.op != "root":
        if current is node:
            return True
        current = current.next
    return False
