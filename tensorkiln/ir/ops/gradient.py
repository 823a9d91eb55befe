"""What gradient rules (vector-Jacobian products) are made of: their signature, `Build`, helpers.

Each primitive's rule sits in its op table entry (`register(..., gradient=rule)`;
an elementwise row's `grad=`). A rule has the signature `vjp(grad, inputs, output, attrs, needs, build)` and
returns one gradient per input (None: no gradient, e.g. for an index operand
or an input with `needs[i]` false). `build` is the front-end's `Build`: the
rules make new values only with `build.apply`, `build.constant` and
`build.zeros` and the tensors' own methods, so the same rule runs eagerly,
builds backward graphs inside tk.jit, and can itself be differentiated
(higher order: the rules use the forward tensors, which are on the tape).
An op without a gradient says so: `gradient=NOT_DIFFERENTIABLE`.

Conventions (as PyTorch): abs and relu have subgradient 0 at 0; sign, floor,
ceil, round and floor_div have gradient 0; max/min reductions split the
gradient evenly among tied maxima (minima), and maximum/minimum give half to
each operand on a tie; comparisons, argmax/argmin and boolean ops carry no
gradient. Broadcast operands get the gradient summed back to their shape.

Composite ops (softmax, layer_norm, attention, losses, pooling) need no rules:
they are compositions of these primitives.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence



class Build(Protocol):
    """What a gradient rule builds new tensors with; the front-end (the autodiff tape's caller) supplies it."""

    def apply(self, op: str, inputs: Sequence[Any], **attrs: Any) -> Any:
        """Primitive `op` on `inputs` (recorded on the tape like any operation)."""

    def constant(self, array, dtype=None) -> Any:
        """A constant tensor holding `array` (a scalar or numpy array), in `dtype` when given."""

    def zeros(self, shape, dtype) -> Any:
        """A tensor of zeros."""


# rule(grad, inputs, output, attrs, needs, build) -> one gradient (or None) per input
Rule = Callable[..., tuple]


class NotDifferentiable:
    """The gradient fact of an op whose result carries no gradient (comparisons, logic, indices)."""

    def __repr__(self) -> str:
        return "NOT_DIFFERENTIABLE"


NOT_DIFFERENTIABLE = NotDifferentiable()


# ---- helpers --------------------------------------------------------------------------------

def sum_to(build, g, shape):
    """Sum a broadcast gradient back to `shape`."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1)
    if axes:
        g = build.apply("reduce_sum", [g], axes=axes, keepdims=True)
    return g.reshape(shape)


def mask(build, condition, g):
    """g where condition, else 0."""
    return build.apply("where", [condition, g, build.constant(0, g.dtype)])


def slice_axis(build, x, axis, start, stop, step=1):
    starts = [0] * x.ndim
    stops = list(x.shape)
    steps = [1] * x.ndim
    starts[axis], stops[axis], steps[axis] = start, stop, step
    return build.apply("slice", [x], starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))


def pad_axis(build, x, axis, before, after):
    if not before and not after:
        return x
    pads = [(0, 0)] * x.ndim
    pads[axis] = (before, after)
    return build.apply("pad", [x], pads=tuple(pads), value=0.0)


def place(build, g, axis, start, step, size):
    """A tensor of `size` along `axis` holding g's elements at start, start+step, ... and zeros elsewhere."""
    length = g.shape[axis]
    if length == 0:
        shape = list(g.shape)
        shape[axis] = size
        return build.zeros(shape, g.dtype)
    if step > 1:  # interleave step-1 zeros after each element
        shape = tuple(g.shape)
        g = g.reshape(shape[:axis + 1] + (1,) + shape[axis + 1:])
        g = pad_axis(build, g, axis + 1, 0, step - 1)
        g = g.reshape(shape[:axis] + (length * step,) + shape[axis + 1:])
        span = (length - 1) * step + 1
        g = slice_axis(build, g, axis, 0, span)
    else:
        span = length
    return pad_axis(build, g, axis, start, size - start - span)


def keep_shape(shape, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def kept(t, in_shape, axes, keepdims):
    """A reduction's result (or its gradient) reshaped to keep the reduced axes as size 1."""
    return t if keepdims else t.reshape(keep_shape(in_shape, axes))
