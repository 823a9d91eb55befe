"""ONNX recurrent operators (RNN, GRU, LSTM) as one tk.scan over time per direction.

For each direction the input projection X @ W^T (plus every bias that does
not depend on the state) is one matmul over all time steps; the cell (H @ R^T,
the gate activations, the state update) is the body of a scan over the
projected steps, so the compiled code is one C loop over time whatever the
sequence length, and the per-step hidden states are written straight into Y.
The body's gate arithmetic fuses into a few kernels like any graph's.

`sequence_lens` is read at run time (onnxruntime's semantics): batch entry b
runs `len[b]` steps; at step k an entry with k >= len[b] keeps its state and
writes zeros to Y. The reverse direction reads the projected steps reversed
within each entry's length (a gather whose rows are computed from the lengths)
and reverses its Y back the same way, so it starts at step `len[b] - 1`. A
batch entry of length 0 gets zero Y_h and Y_c, as onnxruntime gives. Lengths
outside [0, seq] are clamped to it.

Behaviour that the ONNX text leaves open follows onnxruntime: `clip` bounds
the gate pre-activations (after peephole terms and biases) and not the cell
state before h(); `activation_alpha`/`activation_beta` are consumed in order
only by the activations that take them; `input_forget` sets f = 1 - i; a
list of activations for one direction serves both directions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ... import dtypes as dt
from ...errors import ShapeError
from ...frontend.control import scan
from ...frontend.creation import arange
from ...frontend.functions import concat, flip, matmul, stack, where
from ...nn import functional as F
from ...frontend.tensor import Tensor
from ...frontend.trace import composite_scope
from .helpers import filled
from .registry import NodeContext, converter

# ---- activations -------------------------------------------------------------------------

# lower-case name -> (function of x, alpha, beta; default alpha; default beta). A default of
# None means the function takes no such parameter, so it consumes no activation_alpha/_beta
# entry. The defaults are those of the ONNX operators of the same name.
_ACTIVATIONS: dict[str, tuple[Callable[[Tensor, float, float], Tensor], float | None, float | None]] = {
    "relu": (lambda x, a, b: x.relu(), None, None),
    "tanh": (lambda x, a, b: x.tanh(), None, None),
    "sigmoid": (lambda x, a, b: x.sigmoid(), None, None),
    "affine": (lambda x, a, b: x * a + b, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: where(x >= 0, x, x * a), 0.01, None),
    "thresholdedrelu": (lambda x, a, b: where(x >= a, x, 0.0), 1.0, None),
    "scaledtanh": (lambda x, a, b: (x * b).tanh() * a, 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: (x * a + b).clamp(0.0, 1.0), 0.2, 0.5),
    "elu": (lambda x, a, b: F.elu(x, a), 1.0, None),
    "softsign": (lambda x, a, b: x / (x.abs() + 1.0), None, None),
    "softplus": (lambda x, a, b: F.softplus(x), None, None),
}


@dataclass(frozen=True)
class Activation:
    """One of the activation functions the recurrent operators name, with its parameters."""

    name: str
    alpha: float = 0.0
    beta: float = 0.0

    def __call__(self, x: Tensor) -> Tensor:
        return _ACTIVATIONS[self.name][0](x, self.alpha, self.beta)


def parse_activations(ctx: NodeContext, attrs: dict, defaults: list[str], num_directions: int
                      ) -> list[list[Activation]]:
    """The activations of each direction: `len(defaults)` per direction, from the attributes."""
    per_direction = len(defaults)
    names = list(attrs.get("activations") or defaults * num_directions)
    alphas, betas = list(attrs.get("activation_alpha") or []), list(attrs.get("activation_beta") or [])
    parsed = []
    for name in names:
        key = name.lower()
        if key not in _ACTIVATIONS:
            raise ctx.unsupported(f"activation {name!r} is not supported (one of Relu, Tanh, Sigmoid, Affine, "
                                  "LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus)")
        _, alpha, beta = _ACTIVATIONS[key]
        if alpha is not None:  # alphas and betas go, in order, to the functions that take them
            alpha = float(alphas.pop(0)) if alphas else alpha
        if beta is not None:
            beta = float(betas.pop(0)) if betas else beta
        parsed.append(Activation(key, alpha or 0.0, beta or 0.0))
    if len(parsed) < per_direction:
        raise ctx.unsupported(f"{len(parsed)} activations given, {per_direction} per direction needed")
    if len(parsed) < per_direction * num_directions:  # one direction's list serves both
        parsed = parsed[:per_direction] * num_directions
    return [parsed[d * per_direction:(d + 1) * per_direction] for d in range(num_directions)]


# ---- inputs --------------------------------------------------------------------------------

@dataclass
class Recurrence:
    """A recurrent node's inputs in the [seq, batch, ...] layout, checked."""

    x: Tensor  # [seq, batch, input]
    w: Tensor  # [directions, gates * hidden, input]
    r: Tensor  # [directions, gates * hidden, hidden]
    b: Tensor | None  # [directions, 2 * gates * hidden]
    lengths: Tensor | None  # [batch] int64, read at run time
    initial: list[Tensor | None]  # initial_h (and initial_c): [directions, batch, hidden]
    directions: list[str]  # "forward" / "reverse", one per direction
    hidden: int
    clip: float | None
    batch_first: bool

    @property
    def seq(self) -> int:
        return self.x.shape[0]

    @property
    def batch(self) -> int:
        return self.x.shape[1]


def _optional(inputs: list, i: int) -> Tensor | None:
    return inputs[i] if len(inputs) > i else None


def _check_shape(t: Tensor | None, expected: tuple, what: str) -> None:
    if t is not None and tuple(t.shape) != tuple(expected):
        raise ShapeError(f"input {what} has shape {list(t.shape)}, expected {list(expected)}")


def sequence_lengths(ctx: NodeContext, t: Tensor | None, seq: int, batch: int) -> Tensor | None:
    """sequence_lens as an int64 tensor of [batch] (None when absent), read at run time; a known value is
    checked now, a runtime one is clamped to [0, seq]."""
    if t is None:
        return None
    if tuple(t.shape) != (batch,):
        raise ShapeError(f"input sequence_lens has shape {list(t.shape)}, expected [{batch}]")
    if not t.is_traced:
        lengths = t.numpy().astype(np.int64)
        if lengths.min(initial=0) < 0 or lengths.max(initial=0) > seq:
            raise ShapeError(f"sequence_lens {lengths.tolist()} must lie in [0, {seq}] (the sequence length)")
    return t.to(dt.int64).clamp(0, seq)


def parse_recurrence(ctx: NodeContext, inputs: list, attrs: dict, gates: int, states: int) -> Recurrence:
    """Read and check X, W, R, B, sequence_lens and the initial states (`states` of them)."""
    x, w, r = inputs[0], inputs[1], inputs[2]
    b = _optional(inputs, 3)
    direction = attrs.get("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ctx.unsupported(f"direction {direction!r} is not one of forward, reverse, bidirectional")
    directions = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    batch_first = bool(attrs.get("layout", 0))
    initial = [_optional(inputs, 5 + i) for i in range(states)]
    if x.ndim != 3:
        raise ShapeError(f"input X must have rank 3, got shape {list(x.shape)}")
    if batch_first:  # work in [seq, batch, ...]; the outputs go back at the end
        x = x.transpose(0, 1)
        initial = [None if h is None else h.transpose(0, 1) for h in initial]
    hidden = int(attrs["hidden_size"]) if "hidden_size" in attrs else int(r.shape[-1])
    nd, seq, batch, size = len(directions), x.shape[0], x.shape[1], x.shape[2]
    _check_shape(w, (nd, gates * hidden, size), "W")
    _check_shape(r, (nd, gates * hidden, hidden), "R")
    _check_shape(b, (nd, 2 * gates * hidden), "B")
    for i, h in enumerate(initial):
        _check_shape(h, (nd, batch, hidden), ("initial_h", "initial_c")[i] + " (in [directions, batch, hidden])")
    lengths = sequence_lengths(ctx, _optional(inputs, 4), seq, batch)
    clip = attrs.get("clip")
    return Recurrence(x, w, r, b, lengths, initial, directions, hidden,
                      None if clip is None else float(clip), batch_first)


def clipped(t: Tensor, clip: float | None) -> Tensor:
    """Bound a pre-activation to [-clip, clip] when the node has a clip."""
    return t if clip is None else t.clamp(-clip, clip)


def input_projection(rec: Recurrence, bias: list[Tensor | None]) -> list[Tensor]:
    """X @ W^T + bias for every direction and time step, in one matmul: [seq, batch, gates * hidden] each."""
    nd, width = len(rec.directions), rec.w.shape[1]
    w_all = rec.w.reshape((nd * width, rec.w.shape[2])).transpose(0, 1)  # [input, directions * width]
    projected = matmul(rec.x.reshape((rec.seq * rec.batch, rec.x.shape[2])), w_all)
    projected = projected.reshape((rec.seq, rec.batch, nd * width))
    result = []
    for d in range(nd):
        part = projected[:, :, d * width:(d + 1) * width] if nd > 1 else projected
        result.append(part if bias[d] is None else part + bias[d])
    return result


# ---- time steps and sequence lengths -------------------------------------------------------

def _reverse_in_length(t: Tensor, lengths: Tensor) -> Tensor:
    """Reverse [seq, batch, ...] along time within each batch entry's length (rows past it stay):
    row t of entry b comes from row len[b] - 1 - t while t < len[b]."""
    seq, batch = t.shape[0], t.shape[1]
    time = arange(seq, dtype=dt.int64).reshape((seq, 1))
    source = where(time < lengths.reshape((1, batch)), lengths.reshape((1, batch)) - 1 - time, time)
    rows = (source * batch + arange(batch, dtype=dt.int64).reshape((1, batch))).reshape((seq * batch,))
    flat = t.reshape((seq * batch,) + tuple(t.shape[2:]))
    return flat.index_select(0, rows).reshape(tuple(t.shape))


Step = Callable[[Tensor, tuple], tuple]  # (projected input [batch, gates * hidden], states) -> new states


def run_direction(projected: Tensor, states: tuple, step: Step, lengths: Tensor | None, reverse: bool
                  ) -> tuple[Tensor, tuple]:
    """One direction as a scan over time: Y [seq, batch, hidden] and the final states."""
    seq, batch = projected.shape[0], projected.shape[1]
    if reverse:
        projected = flip(projected, 0) if lengths is None else _reverse_in_length(projected, lengths)
    if lengths is None:
        def body(carry, xw):
            new = step(xw, tuple(carry))
            return list(new), new[0]
        final, y = scan(body, list(states), projected)
    else:  # entries past their length keep their state and write zeros
        running = arange(seq, dtype=dt.int64).reshape((seq, 1, 1)) < lengths.reshape((1, batch, 1))

        def body(carry, x):
            xw, active = x
            new = step(xw, tuple(carry))
            new = [where(active, n, c) for n, c in zip(new, carry)]
            return new, where(active, new[0], 0.0)
        final, y = scan(body, list(states), (projected, running))
        started = (lengths > 0).reshape((batch, 1))
        final = [where(started, s, 0.0) for s in final]  # zero-length entries: zero state
    if reverse:
        y = flip(y, 0) if lengths is None else _reverse_in_length(y, lengths)
    return y, tuple(final)


def run_recurrence(ctx: NodeContext, rec: Recurrence, projected: list[Tensor], steps: list[Step]) -> list:
    """Run every direction and assemble the outputs Y, Y_h (and Y_c) in the node's layout."""
    dtype = rec.x.dtype
    want_y = ctx.n_outputs > 0 and ctx.outputs_used[0]
    ys, finals = [], []
    for d, direction in enumerate(rec.directions):
        states = tuple(filled((rec.batch, rec.hidden), 0, dtype) if h is None else h[d] for h in rec.initial)
        y, final = run_direction(projected[d], states, steps[d], rec.lengths, direction == "reverse")
        ys.append(y)
        finals.append(final)
    y = stack(ys, 1) if want_y else None  # [seq, directions, batch, hidden]
    last = [stack([f[i] for f in finals], 0) for i in range(len(rec.initial))]  # [directions, batch, hidden]
    if rec.batch_first:
        y = None if y is None else y.permute(2, 0, 1, 3)
        last = [s.transpose(0, 1) for s in last]
    return [y] + last


def _bias_halves(rec: Recurrence, d: int) -> tuple[Tensor, Tensor] | None:
    """(Wb, Rb) of direction d, or None without B."""
    if rec.b is None:
        return None
    width = rec.w.shape[1]
    return rec.b[d, :width], rec.b[d, width:]


# ---- the operators -------------------------------------------------------------------------

@converter("RNN")
def _rnn(ctx, inputs, attrs):
    """Ht = f(Xt W^T + Ht-1 R^T + Wb + Rb)."""
    rec = parse_recurrence(ctx, inputs, attrs, gates=1, states=1)
    acts = parse_activations(ctx, attrs, ["Tanh"], len(rec.directions))
    with composite_scope("rnn"):
        biases, steps = [], []
        for d in range(len(rec.directions)):
            halves = _bias_halves(rec, d)
            biases.append(None if halves is None else halves[0] + halves[1])
            steps.append(_rnn_step(rec.r[d].transpose(0, 1), acts[d][0], rec.clip))
        outputs = run_recurrence(ctx, rec, input_projection(rec, biases), steps)
    return outputs[:max(ctx.n_outputs, 1)]


def _rnn_step(r_t: Tensor, f: Activation, clip: float | None) -> Step:
    def step(xw: Tensor, states: tuple) -> tuple:
        (h,) = states
        return (f(clipped(xw + matmul(h, r_t), clip)),)
    return step


@converter("GRU")
def _gru(ctx, inputs, attrs):
    """Gates z, r and candidate h; Ht = (1 - z) h + z Ht-1, with `linear_before_reset` choosing where r applies."""
    rec = parse_recurrence(ctx, inputs, attrs, gates=3, states=1)
    acts = parse_activations(ctx, attrs, ["Sigmoid", "Tanh"], len(rec.directions))
    linear_before_reset = bool(attrs.get("linear_before_reset", 0))
    hidden = rec.hidden
    with composite_scope("gru"):
        biases, steps = [], []
        for d in range(len(rec.directions)):
            halves = _bias_halves(rec, d)
            rb_h = None
            if halves is None:
                biases.append(None)
            elif linear_before_reset:  # Rbh is scaled by r, so it stays in the step
                wb, rb = halves
                biases.append(wb + concat([rb[:2 * hidden], filled((hidden,), 0, rb.dtype)], 0))
                rb_h = rb[2 * hidden:]
            else:
                biases.append(halves[0] + halves[1])
            steps.append(_gru_step(rec.r[d].transpose(0, 1), rb_h, acts[d], hidden, linear_before_reset, rec.clip))
        outputs = run_recurrence(ctx, rec, input_projection(rec, biases), steps)
    return outputs[:max(ctx.n_outputs, 1)]


def _gru_step(r_t: Tensor, rb_h: Tensor | None, acts: list[Activation], hidden: int, linear_before_reset: bool,
              clip: float | None) -> Step:
    f, g = acts
    r_zr, r_h = r_t[:, :2 * hidden], r_t[:, 2 * hidden:]

    def step(xw: Tensor, states: tuple) -> tuple:
        (h,) = states
        xw_zr, xw_h = xw[:, :2 * hidden], xw[:, 2 * hidden:]
        if linear_before_reset:  # one matmul for all three gates
            hr = matmul(h, r_t)
            zr, hr_h = xw_zr + hr[:, :2 * hidden], hr[:, 2 * hidden:]
        else:
            zr = xw_zr + matmul(h, r_zr)
        z = f(clipped(zr[:, :hidden], clip))
        r = f(clipped(zr[:, hidden:], clip))
        if linear_before_reset:
            candidate = xw_h + r * (hr_h if rb_h is None else hr_h + rb_h)
        else:
            candidate = xw_h + matmul(r * h, r_h)
        candidate = g(clipped(candidate, clip))
        return ((1.0 - z) * candidate + z * h,)
    return step


@converter("LSTM")
def _lstm(ctx, inputs, attrs):
    """Gates i, o, f, c with optional peepholes P; Ct = f Ct-1 + i c, Ht = o h(Ct)."""
    rec = parse_recurrence(ctx, inputs, attrs, gates=4, states=2)
    acts = parse_activations(ctx, attrs, ["Sigmoid", "Tanh", "Tanh"], len(rec.directions))
    p = _optional(inputs, 7)
    _check_shape(p, (len(rec.directions), 3 * rec.hidden), "P")
    input_forget = bool(attrs.get("input_forget", 0))
    with composite_scope("lstm"):
        biases, steps = [], []
        for d in range(len(rec.directions)):
            halves = _bias_halves(rec, d)
            biases.append(None if halves is None else halves[0] + halves[1])
            steps.append(_lstm_step(rec.r[d].transpose(0, 1), None if p is None else p[d], acts[d], rec.hidden,
                                    input_forget, rec.clip))
        outputs = run_recurrence(ctx, rec, input_projection(rec, biases), steps)
    return outputs[:max(ctx.n_outputs, 1)]


def _lstm_step(r_t: Tensor, p: Tensor | None, acts: list[Activation], hidden: int, input_forget: bool,
               clip: float | None) -> Step:
    f, g, h_act = acts
    p_i, p_o, p_f = (None, None, None) if p is None else (p[:hidden], p[hidden:2 * hidden], p[2 * hidden:])

    def peep(gate: Tensor, weight: Tensor | None, cell: Tensor) -> Tensor:
        return gate if weight is None else gate + weight * cell

    def step(xw: Tensor, states: tuple) -> tuple:
        h, c = states
        gates = xw + matmul(h, r_t)
        gi, go, gf, gc = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
        i = f(clipped(peep(gi, p_i, c), clip))
        forget = 1.0 - i if input_forget else f(clipped(peep(gf, p_f, c), clip))
        cell = forget * c + i * g(clipped(gc, clip))
        o = f(clipped(peep(go, p_o, cell), clip))
        return o * h_act(cell), cell
    return step
