"""Functional gradients (jax-style): tk.grad(fn) and tk.value_and_grad(fn) return new functions;
tk.vjp(fn, *primals) returns fn's value and its vector-Jacobian product.

They compose: tk.grad(tk.grad(f)) is the second derivative, because when an
argument is itself on the tape the gradient is computed with create_graph.
They also work inside tk.jit, where the backward pass becomes part of the graph.
"""
from __future__ import annotations

import functools
from typing import Callable, Sequence

from ..creation import ones_like, zeros_like
from ..tensor import Tensor, apply, as_tensor
from .build import TENSOR_BUILD
from .mode import enable_grad, is_grad_enabled
from .tape import backward


def _alias(x):
    """A new leaf with x's value (eager or traced) that requires grad."""
    t = Tensor._from_node(x._node, x._trace) if x._node is not None else Tensor._from_value(x._value, x.dtype)
    t._requires_grad = True
    return t


def _differentiable_argument(x):
    x = as_tensor(x)
    if not x.dtype.is_floating:
        raise TypeError(f"tk.grad: can only differentiate with respect to floating tensors, got {x.dtype.name}")
    if x._requires_grad and is_grad_enabled():  # an outer gradient is watching: stay on its tape
        return apply("cast", [x], dtype=x.dtype), True
    return _alias(x), False


def value_and_grad(fn: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """A function returning (fn(*args), gradient of fn w.r.t. args[argnums]); fn must return a scalar."""
    many = not isinstance(argnums, int)
    positions = tuple(argnums) if many else (argnums,)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        args = list(args)
        leaves, nested = [], False
        for p in positions:
            args[p], watched = _differentiable_argument(args[p])
            leaves.append(args[p])
            nested = nested or watched
        with enable_grad():
            value = fn(*args, **kwargs)
            if not isinstance(value, Tensor) or value.numel() != 1:
                raise TypeError("tk.grad: the function must return a tensor with one element")
            if not value._requires_grad:
                grads = [None] * len(leaves)
            else:
                grads = backward([value], [ones_like(value)], retain_graph=nested, create_graph=nested,
                                 inputs=leaves, build=TENSOR_BUILD)
        grads = [zeros_like(x) if g is None else g for g, x in zip(grads, leaves)]
        if not nested:
            value = value.detach()
        return value, (tuple(grads) if many else grads[0])
    return wrapper


def grad(fn: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """A function returning the gradient of scalar fn w.r.t. args[argnums] (a tuple for several argnums)."""
    vg = value_and_grad(fn, argnums)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return vg(*args, **kwargs)[1]
    return wrapper


def vjp(fn: Callable, *primals) -> tuple:
    """(fn(*primals), pullback) as JAX's jax.vjp: pullback(cotangent) is the tuple of gradients of
    sum(fn(*primals) * cotangent) with respect to each primal (zeros where fn does not depend on it).
    fn returns one tensor; primals are floating tensors. Eager or inside tk.jit."""
    leaves = []
    for p in primals:
        leaf, _ = _differentiable_argument(p)
        leaves.append(leaf)
    with enable_grad():
        out = fn(*leaves)
    if not isinstance(out, Tensor):
        raise TypeError(f"tk.vjp: the function must return one tensor, got {type(out).__name__}")

    def pullback(cotangent) -> tuple:
        cotangent = as_tensor(cotangent)
        if tuple(cotangent.shape) != tuple(out.shape):
            raise ValueError(f"tk.vjp: the cotangent has shape {list(cotangent.shape)}, the output "
                             f"{list(out.shape)}")
        if not out._requires_grad:
            return tuple(zeros_like(x) for x in leaves)
        with enable_grad():
            grads = backward([out], [cotangent.to(out.dtype)], retain_graph=True, inputs=leaves,
                             build=TENSOR_BUILD)
        return tuple(zeros_like(x) if g is None else g for g, x in zip(grads, leaves))
    return out.detach(), pullback
