"""tk.Function: an operation with a hand-written gradient, as torch.autograd.Function.

    class StraightThroughSign(tk.Function):
        @staticmethod
        def forward(ctx, x):
            return x.sign()
        @staticmethod
        def backward(ctx, grad):
            return grad          # identity gradient

    y = StraightThroughSign.apply(x)

forward runs under no_grad; backward returns one gradient (or None) per
argument of forward. One tensor output per Function.
"""
from __future__ import annotations

from ..tensor import Tensor
from .mode import is_grad_enabled, no_grad
from .tape import TapeNode, attach


class FunctionCtx:
    """What forward leaves for backward: saved tensors and which inputs need a gradient."""

    def __init__(self, needs_input_grad: tuple[bool, ...]):
        self.needs_input_grad = needs_input_grad
        self.saved_tensors: tuple = ()

    def save_for_backward(self, *tensors) -> None:
        """Keep tensors for backward (read them as ctx.saved_tensors)."""
        self.saved_tensors = tensors

    def mark_non_differentiable(self, *tensors) -> None:
        """Accepted for PyTorch compatibility."""


class Function:
    """Subclass with static forward(ctx, *args) and backward(ctx, grad); call with Subclass.apply(*args)."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError

    @classmethod
    def apply(cls, *args, **kwargs):
        positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx = FunctionCtx(tuple(isinstance(a, Tensor) and a._requires_grad for a in args))
        with no_grad():
            out = cls.forward(ctx, *args, **kwargs)
        if not (is_grad_enabled() and any(ctx.needs_input_grad)):
            return out
        if not isinstance(out, Tensor):
            raise TypeError(f"{cls.__name__}.forward must return one Tensor")
        out = Tensor._from_node(out._node, out._trace) if out._node is not None else \
            Tensor._from_value(out._value, out.dtype)  # never put the tape node on an input

        def rule(g, inputs, output, attrs, needs, build):
            grads = cls.backward(ctx, g)
            grads = grads if isinstance(grads, tuple) else (grads,)
            if len(grads) != len(args):
                raise RuntimeError(f"{cls.__name__}.backward returned {len(grads)} gradients for "
                                   f"{len(args)} arguments of forward")
            return tuple(grads[i] for i in positions)

        attach(out, TapeNode(cls.__name__, rule, tuple(args[i] for i in positions), out, None))
        return out
