"""The autodiff half of Tensor: requires_grad, .grad, backward(), .data and the in-place methods.

They are added to `Tensor` (tensor.py) from here, since they build on
tensor.py, creation and the tape, which tensor.py sits below. In-place methods keep the tensor's
identity and give it a new value; eagerly the value is replaced (earlier views
do not see the update), and inside a tk.jit trace the write is recorded, so
the compiled function replays it on every call (see trace.py).
"""
from __future__ import annotations

import numpy as np

from ..creation import full, ones_like, rand, randn
from ..tensor import Tensor, as_tensor, tensor_methods
from ..trace import current_trace
from .build import TENSOR_BUILD
from .mode import is_grad_enabled, no_grad
from .tape import accumulate_grad, backward, set_grad


def assign(tensor, value, check_leaf: bool = True):
    """Give `tensor` the value `value` (broadcast and cast to its shape and dtype), keeping its identity."""
    value = as_tensor(value) if not isinstance(value, Tensor) else value
    if value.dtype != tensor.dtype:
        value = value.to(tensor.dtype)
    if tuple(value.shape) != tuple(tensor.shape):
        value = value.expand(tensor.shape)
    recording = is_grad_enabled() and (tensor._requires_grad or value._requires_grad)
    if recording and check_leaf and tensor._requires_grad and tensor._grad_fn is None:
        raise RuntimeError("a leaf tensor that requires grad is used in an in-place operation; "
                           "do it under tk.no_grad() (as optimizers do) or assign to .data")
    trace = current_trace()
    if trace is not None and trace.holds_eager(tensor):
        trace.record_write(tensor, value._node if value._node is not None else trace.constant_for(value))
    elif tensor._node is not None:
        tensor._node = value._node if value._node is not None else tensor._trace.constant_for(value)
    else:
        if value._node is not None:
            raise RuntimeError("a traced value cannot be assigned to an eager tensor outside its tk.jit trace")
        tensor._value = np.ascontiguousarray(value._value).reshape(value._value.shape)  # keeps 0-d arrays 0-d
    if recording:
        tensor._requires_grad, tensor._grad_fn = value._requires_grad, value._grad_fn
    return tensor


@tensor_methods
class TensorAutodiff:
    """Autodiff state and in-place methods of Tensor (added to Tensor, which holds the slots)."""

    __slots__ = ()

    # ---- autodiff state -----------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        """Whether operations on this tensor are recorded so backward() can reach it."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        if self._grad_fn is not None and not flag:
            raise RuntimeError("requires_grad can only be turned off on a leaf tensor; use detach()")
        if flag and not self.dtype.is_floating:
            raise RuntimeError(f"only floating tensors can require grad, this one is {self.dtype.name}")
        self._requires_grad = bool(flag)

    def requires_grad_(self, requires_grad: bool = True):
        """Set requires_grad in place; returns self."""
        self.requires_grad = requires_grad
        return self

    @property
    def grad(self):
        """The gradient accumulated by backward() (None until then)."""
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        set_grad(self, value)

    @property
    def grad_fn(self):
        """The tape node that produced this tensor (None for leaves)."""
        return self._grad_fn

    @property
    def is_leaf(self) -> bool:
        return self._grad_fn is None

    def backward(self, gradient=None, retain_graph: bool | None = None, create_graph: bool = False,
                 inputs=None) -> None:
        """Accumulate d(self)/d(leaf) * gradient into every leaf's .grad (gradient defaults to 1 for scalars)."""
        if gradient is None:
            if self.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs; pass gradient=")
            gradient = ones_like(self)
        retain = create_graph if retain_graph is None else retain_graph
        if inputs is not None:
            grads = backward([self], [as_tensor(gradient)], retain, create_graph, inputs=list(inputs),
                             build=TENSOR_BUILD)
            for t, g in zip(inputs, grads):
                if g is not None:
                    accumulate_grad(t, g)
            return
        backward([self], [as_tensor(gradient)], retain, create_graph, build=TENSOR_BUILD)

    def retain_grad(self) -> None:
        """Accepted for PyTorch compatibility; only leaves keep .grad in tensorkiln."""

    # ---- .data and in-place methods --------------------------------------------------
    @property
    def data(self):
        """The value without autodiff history; assigning replaces the value in place."""
        return self.detach()

    @data.setter
    def data(self, value) -> None:
        with no_grad():
            assign(self, value.detach() if isinstance(value, Tensor) else value, check_leaf=False)

    def _inplace(self):
        """Inside a trace, start reading this eager tensor symbolically before computing its update."""
        trace = current_trace()
        if trace is not None and self._node is None:
            trace.track(self)
        return self

    def copy_(self, src):
        """Copy src (broadcast, cast) into this tensor in place."""
        return assign(self, src)

    def add_(self, other, alpha=1):
        return assign(self, self._inplace() + (other * alpha if alpha != 1 else other))

    def sub_(self, other, alpha=1):
        return assign(self, self._inplace() - (other * alpha if alpha != 1 else other))

    def mul_(self, other):
        return assign(self, self._inplace() * other)

    def div_(self, other):
        return assign(self, self._inplace() / other)

    def clamp_(self, min=None, max=None):  # noqa: A002
        return assign(self, self._inplace().clamp(min, max))

    def zero_(self):
        return self.fill_(0)

    def fill_(self, value):
        return assign(self, full((), value, self.dtype))

    def addcmul_(self, tensor1, tensor2, value=1):
        return assign(self, self._inplace() + tensor1 * tensor2 * value)

    def addcdiv_(self, tensor1, tensor2, value=1):
        return assign(self, self._inplace() + tensor1 / tensor2 * value)

    def lerp_(self, end, weight):
        return assign(self, self._inplace() + (end - self) * weight)

    def uniform_(self, a: float = 0.0, b: float = 1.0, seed: int | None = None):
        """Fill with uniform samples in [a, b) from tk's random generator (tk.manual_seed)."""
        with no_grad():
            return assign(self, rand(*self.shape, seed=seed, dtype=self.dtype) * (b - a) + a, check_leaf=False)

    def normal_(self, mean: float = 0.0, std: float = 1.0, seed: int | None = None):
        """Fill with normal samples from tk's random generator (tk.manual_seed)."""
        with no_grad():
            return assign(self, randn(*self.shape, seed=seed, dtype=self.dtype) * std + mean, check_leaf=False)
