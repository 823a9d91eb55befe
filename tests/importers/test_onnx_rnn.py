"""ONNX RNN, GRU and LSTM against onnx's reference evaluator and a numpy rendering of the spec.

onnx.reference is the oracle wherever it implements the feature. It ignores
sequence_lens, clip, input_forget and (for GRU and LSTM) the activations
attributes, so those cases use `spec_recurrent` below: a per-batch-entry numpy
loop over the spec's equations. That oracle is itself checked against
onnx.reference on the common features and against onnxruntime (when
installed) on the rest.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import tensorkiln as tk  # noqa: E402
from tensorkiln.kernels.schedule_defaults import thread_count  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_build import model, single  # noqa: E402

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
ONNX_TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16}
TOLERANCE = {np.float32: (1e-4, 1e-5), np.float64: (1e-10, 1e-12), np.float16: (1e-2, 1e-2)}
DIRECTIONS = ["forward", "reverse", "bidirectional"]


# ---- the spec in numpy -----------------------------------------------------------------------

def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# name -> (f(x, alpha, beta), default alpha or None when unused, default beta or None)
NP_ACTIVATIONS = {
    "Relu": (lambda x, a, b: np.maximum(x, 0.0), None, None),
    "Tanh": (lambda x, a, b: np.tanh(x), None, None),
    "Sigmoid": (lambda x, a, b: _sigmoid(x), None, None),
    "Affine": (lambda x, a, b: a * x + b, 1.0, 0.0),
    "LeakyRelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 0.01, None),
    "ThresholdedRelu": (lambda x, a, b: np.where(x >= a, x, 0.0), 1.0, None),
    "ScaledTanh": (lambda x, a, b: a * np.tanh(b * x), 1.0, 1.0),
    "HardSigmoid": (lambda x, a, b: np.clip(a * x + b, 0.0, 1.0), 0.2, 0.5),
    "Elu": (lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1.0)), 1.0, None),
    "Softsign": (lambda x, a, b: x / (1.0 + np.abs(x)), None, None),
    "Softplus": (lambda x, a, b: np.log1p(np.exp(x)), None, None),
}


def _np_activations(op, names, alphas, betas, directions):
    """Per direction, the activation callables; alphas/betas go in order to the functions that take them."""
    alphas, betas = list(alphas or []), list(betas or [])
    names = list(names or DEFAULT_ACTIVATIONS[op] * directions)
    funcs = []
    for name in names:
        fn, alpha, beta = NP_ACTIVATIONS[name]
        alpha = alphas.pop(0) if alpha is not None and alphas else alpha
        beta = betas.pop(0) if beta is not None and betas else beta
        funcs.append(lambda x, fn=fn, a=alpha, b=beta: fn(x, a, b))
    k = len(DEFAULT_ACTIVATIONS[op])
    if len(funcs) < k * directions:
        funcs = funcs[:k] * directions
    return [funcs[d * k:(d + 1) * k] for d in range(directions)]


def _cell(op, x, h, c, w, r, wb, rb, p, acts, clip, linear_before_reset, input_forget):
    """One time step of one batch entry (vectors), in float64."""
    hs = r.shape[1]
    cl = (lambda v: v) if clip is None else (lambda v: np.clip(v, -clip, clip))
    if op == "RNN":
        return acts[0](cl(w @ x + r @ h + wb + rb)), c
    if op == "GRU":
        f, g = acts
        z = f(cl(w[:hs] @ x + r[:hs] @ h + wb[:hs] + rb[:hs]))
        rt = f(cl(w[hs:2 * hs] @ x + r[hs:2 * hs] @ h + wb[hs:2 * hs] + rb[hs:2 * hs]))
        if linear_before_reset:
            cand = w[2 * hs:] @ x + rt * (r[2 * hs:] @ h + rb[2 * hs:]) + wb[2 * hs:]
        else:
            cand = w[2 * hs:] @ x + r[2 * hs:] @ (rt * h) + rb[2 * hs:] + wb[2 * hs:]
        return (1 - z) * g(cl(cand)) + z * h, c
    f, g, hf = acts
    pre = w @ x + r @ h + wb + rb
    gi, go, gf, gc = (pre[k * hs:(k + 1) * hs] for k in range(4))
    pi, po, pf = p[:hs], p[hs:2 * hs], p[2 * hs:]
    i = f(cl(gi + pi * c))
    ft = 1 - i if input_forget else f(cl(gf + pf * c))
    c_new = ft * c + i * g(cl(gc))
    o = f(cl(go + po * c_new))
    return o * hf(c_new), c_new


def spec_recurrent(op, X, W, R, B=None, lens=None, h0=None, c0=None, P=None, *, direction="forward", layout=0,
                   activations=None, activation_alpha=None, activation_beta=None, clip=None,
                   linear_before_reset=0, input_forget=0, **_):
    """[Y, Y_h(, Y_c)] by the spec: each batch entry runs its own length; past it Y is 0 and the state stays
    (onnxruntime's conventions where the spec is silent: zero-length entries end with zero states)."""
    dtype = X.dtype
    X, W, R = (np.asarray(a, np.float64) for a in (X, W, R))
    h0 = None if h0 is None else np.asarray(h0, np.float64)
    c0 = None if c0 is None else np.asarray(c0, np.float64)
    if layout:
        X = X.swapaxes(0, 1)
        h0 = None if h0 is None else h0.swapaxes(0, 1)
        c0 = None if c0 is None else c0.swapaxes(0, 1)
    seq, batch, _ = X.shape
    nd, hs = W.shape[0], R.shape[-1]
    B = np.zeros((nd, 2 * W.shape[1])) if B is None else np.asarray(B, np.float64)
    P = np.zeros((nd, 3 * hs)) if P is None else np.asarray(P, np.float64)
    acts = _np_activations(op, activations, activation_alpha, activation_beta, nd)
    Y, Yh, Yc = np.zeros((seq, nd, batch, hs)), np.zeros((nd, batch, hs)), np.zeros((nd, batch, hs))
    for d in range(nd):
        reverse = direction == "reverse" or d == 1
        wb, rb = np.split(B[d], 2)
        for b in range(batch):
            n = seq if lens is None else int(lens[b])
            h = np.zeros(hs) if h0 is None else h0[d, b]
            c = np.zeros(hs) if c0 is None else c0[d, b]
            for t in (range(n - 1, -1, -1) if reverse else range(n)):
                h, c = _cell(op, X[t, b], h, c, W[d], R[d], wb, rb, P[d], acts[d], clip, linear_before_reset,
                             input_forget)
                Y[t, d, b] = h
            if n:
                Yh[d, b], Yc[d, b] = h, c
    if layout:
        Y, Yh, Yc = Y.transpose(2, 0, 1, 3), Yh.swapaxes(0, 1), Yc.swapaxes(0, 1)
    outs = [Y, Yh, Yc] if op == "LSTM" else [Y, Yh]
    return [o.astype(dtype) for o in outs]


# ---- building cases --------------------------------------------------------------------------

INPUT_ORDER = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
ATTRIBUTES = ("direction", "layout", "activations", "activation_alpha", "activation_beta", "clip",
              "linear_before_reset", "input_forget")
WEIGHTS = ("W", "R", "B", "P", "sequence_lens")  # initializers; the rest are graph inputs


def make_case(op, seed, *, direction="forward", bias=False, initial=False, peephole=False, lens=None,
              dtype=np.float32, opset=None, **attrs):
    """(model, feeds, arrays): random shapes and values for `op` with the given options."""
    rng = np.random.default_rng(seed)
    seq, batch, size, hidden = (int(v) for v in rng.integers(1, 5, size=4))
    seq += 1
    if lens is not None:
        lens = np.asarray(lens(seq, batch, rng) if callable(lens) else lens, np.int32)
        batch = len(lens)
    nd, g = (2 if direction == "bidirectional" else 1), GATES[op]
    layout = attrs.get("layout", 0)

    def rand(*shape):
        return (rng.standard_normal(shape) * 0.7).astype(dtype)

    arrays = {"X": rand(batch, seq, size) if layout else rand(seq, batch, size),
              "W": rand(nd, g * hidden, size), "R": rand(nd, g * hidden, hidden)}
    if bias:
        arrays["B"] = rand(nd, 2 * g * hidden)
    if lens is not None:
        arrays["sequence_lens"] = lens
    state_shape = (batch, nd, hidden) if layout else (nd, batch, hidden)
    if initial:
        arrays["initial_h"] = rand(*state_shape)
        if op == "LSTM":
            arrays["initial_c"] = rand(*state_shape)
    if peephole:
        arrays["P"] = rand(nd, 3 * hidden)
    return build(op, arrays, hidden, dtype, opset or (14 if layout else 7), direction=direction, **attrs)


def build(op, arrays, hidden, dtype, opset, **attrs):
    """A one-node model over `arrays` (named as INPUT_ORDER): weights as initializers, the rest as inputs."""
    last = max(INPUT_ORDER.index(n) for n in arrays)
    names = [n if n in arrays else "" for n in INPUT_ORDER[:last + 1]]
    outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    node_attrs = {k: v for k, v in attrs.items() if k in ATTRIBUTES and v is not None}
    node = helper.make_node(op, names, outputs, hidden_size=hidden, **node_attrs)
    elem = ONNX_TYPES[dtype]
    inputs = [(n, elem, a.shape) for n, a in arrays.items() if n not in WEIGHTS]
    inits = {n: a for n, a in arrays.items() if n in WEIGHTS}
    m = model([node], inputs, [(o, elem, None) for o in outputs], inits, opset=opset)
    feeds = {n: a for n, a in arrays.items() if n not in WEIGHTS}
    return m, feeds, dict(arrays, **node_attrs)


def spec_expected(op, arrays):
    a = dict(arrays)
    return spec_recurrent(op, a.pop("X"), a.pop("W"), a.pop("R"), a.pop("B", None), a.pop("sequence_lens", None),
                          a.pop("initial_h", None), a.pop("initial_c", None), a.pop("P", None), **a)


def reference_expected(m, feeds):
    return ReferenceEvaluator(m).run(None, feeds)


def check(m, feeds, expected, dtype=np.float32, backend="interpreter"):
    outputs = tk.onnx.load(m, backend=backend)(**feeds)
    rtol, atol = TOLERANCE[dtype]
    assert len(outputs) == len(expected)
    for out, ref in zip(outputs, expected):
        assert out.shape == ref.shape and out.dtype == ref.dtype
        np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol)


def random_lengths(seq, batch, rng):
    """Unequal lengths in [1, seq], one entry at full length and one shorter when batch allows."""
    lens = rng.integers(1, seq + 1, size=max(batch, 3))
    lens[0], lens[1] = seq, max(seq - 2, 1)
    return lens


# ---- against onnx.reference -------------------------------------------------------------------

VARIANTS = {
    "plain": {},
    "bias": {"bias": True},
    "initial": {"initial": True},
    "bias_initial": {"bias": True, "initial": True},
    "layout1": {"bias": True, "initial": True, "layout": 1},
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", list(GATES))
def test_matches_reference(op, direction, variant):
    for seed in range(2):
        m, feeds, _ = make_case(op, seed, direction=direction, **VARIANTS[variant])
        check(m, feeds, reference_expected(m, feeds))


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_lstm_peepholes_match_reference(direction):
    m, feeds, _ = make_case("LSTM", 3, direction=direction, bias=True, initial=True, peephole=True)
    check(m, feeds, reference_expected(m, feeds))


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_gru_linear_before_reset_matches_reference(direction):
    m, feeds, _ = make_case("GRU", 4, direction=direction, bias=True, initial=True, linear_before_reset=1)
    check(m, feeds, reference_expected(m, feeds))


def test_rnn_affine_matches_reference():
    m, feeds, _ = make_case("RNN", 5, bias=True, activations=["Affine"], activation_alpha=[0.6],
                            activation_beta=[0.1])
    check(m, feeds, reference_expected(m, feeds))


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
@pytest.mark.parametrize("op", list(GATES))
def test_other_float_types(op, dtype):
    m, feeds, _ = make_case(op, 6, direction="bidirectional", bias=True, initial=True, dtype=dtype,
                            peephole=op == "LSTM")
    check(m, feeds, reference_expected(m, feeds), dtype=dtype)


# ---- features onnx.reference ignores, against the numpy spec ----------------------------------

SPEC_CASES = {
    "rnn_relu": ("RNN", {"activations": ["Relu"]}),
    "rnn_bidi_two_activations": ("RNN", {"direction": "bidirectional", "activations": ["LeakyRelu", "Elu"],
                                         "activation_alpha": [0.2, 0.7]}),
    "rnn_clip": ("RNN", {"clip": 0.5, "bias": True}),
    "gru_activations": ("GRU", {"activations": ["HardSigmoid", "ScaledTanh"], "activation_alpha": [0.3, 0.8],
                                "activation_beta": [0.4, 1.2]}),
    "gru_bidi_activations": ("GRU", {"direction": "bidirectional", "bias": True,
                                     "activations": ["Sigmoid", "Softsign", "HardSigmoid", "Softplus"],
                                     "activation_alpha": [0.25], "activation_beta": [0.6]}),
    "gru_one_list_for_both": ("GRU", {"direction": "bidirectional", "activations": ["Sigmoid", "Relu"]}),
    "gru_clip_lbr": ("GRU", {"clip": 0.4, "bias": True, "linear_before_reset": 1}),
    "lstm_activations": ("LSTM", {"activations": ["Sigmoid", "ThresholdedRelu", "Affine"],
                                  "activation_alpha": [0.1, 0.9], "activation_beta": [0.3]}),
    "lstm_clip_peephole": ("LSTM", {"clip": 0.3, "bias": True, "peephole": True, "initial": True}),
    "lstm_input_forget": ("LSTM", {"input_forget": 1, "bias": True, "peephole": True, "initial": True}),
}


@pytest.mark.parametrize("name", list(SPEC_CASES))
def test_activations_clip_input_forget(name):
    op, options = SPEC_CASES[name]
    for seed in range(2):
        m, feeds, arrays = make_case(op, 10 + seed, **options)
        check(m, feeds, spec_expected(op, arrays))


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", list(GATES))
def test_sequence_lens(op, direction):
    for seed, layout in ((20, 0), (21, 1)):
        m, feeds, arrays = make_case(op, seed, direction=direction, bias=True, initial=True, lens=random_lengths,
                                     peephole=op == "LSTM", layout=layout)
        expected = spec_expected(op, arrays)
        check(m, feeds, expected)
        lens = arrays["sequence_lens"]
        y = expected[0] if not layout else expected[0].transpose(1, 2, 0, 3)
        assert (lens < y.shape[0]).any() and not y[lens.max():].any()  # the case really pads


def test_sequence_lens_zero_and_full():
    m, feeds, arrays = make_case("LSTM", 22, direction="bidirectional", bias=True, initial=True,
                                 lens=lambda seq, batch, rng: [seq, 0, 1])
    expected = spec_expected("LSTM", arrays)
    check(m, feeds, expected)
    assert not expected[1][:, 1].any() and not expected[2][:, 1].any()


def test_sequence_lens_is_read_at_run_time():
    op, rng = "GRU", np.random.default_rng(23)
    arrays = {"X": rng.standard_normal((4, 3, 2)).astype(np.float32),
              "W": rng.standard_normal((1, 9, 2)).astype(np.float32),
              "R": rng.standard_normal((1, 9, 3)).astype(np.float32)}
    node = helper.make_node(op, ["X", "W", "R", "", "L"], ["Y", "Y_h"], hidden_size=3, direction="reverse")
    m = model([node], [("X", TensorProto.FLOAT, (4, 3, 2)), ("L", TensorProto.INT32, (3,))],
              [("Y", TensorProto.FLOAT, None), ("Y_h", TensorProto.FLOAT, None)],
              {"W": arrays["W"], "R": arrays["R"]})
    loaded = tk.onnx.load(m)
    assert loaded.value_inputs == set()  # one compiled scan serves every length
    assert loaded.graph(arrays["X"], np.array([4, 2, 3], np.int32)) is \
        loaded.graph(arrays["X"], np.array([0, 1, 1], np.int32))
    for lens in ([4, 2, 3], [1, 4, 4], [0, 3, 1]):
        lens = np.asarray(lens, np.int32)
        expected = spec_recurrent(op, arrays["X"], arrays["W"], arrays["R"], lens=lens, direction="reverse")
        for out, ref in zip(loaded(arrays["X"], lens), expected):
            np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_only_some_outputs():
    m, feeds, arrays = make_case("LSTM", 24, direction="bidirectional", bias=True, initial=True)
    expected = reference_expected(m, feeds)
    for wanted in (["", "Y_h"], ["Y"], ["", "", "Y_c"]):
        node = m.graph.node[0]
        del node.output[:]
        node.output.extend(wanted)
        del m.graph.output[:]
        m.graph.output.extend([helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in wanted if o])
        outputs = tk.onnx.load(m, backend="interpreter")(**feeds)
        refs = [expected[i] for i, o in enumerate(wanted) if o]
        for out, ref in zip(outputs, refs):
            np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


# ---- compiled to C ------------------------------------------------------------------------------

COMPILED = {
    "lstm_bidi_lens_peephole": ("LSTM", {"direction": "bidirectional", "bias": True, "initial": True,
                                         "peephole": True, "lens": random_lengths}),
    "gru_reverse_lbr_layout1": ("GRU", {"direction": "reverse", "bias": True, "initial": True,
                                        "linear_before_reset": 1, "layout": 1}),
    "rnn_bidi_activations_clip": ("RNN", {"direction": "bidirectional", "bias": True, "clip": 0.8,
                                          "activations": ["Relu", "HardSigmoid"], "activation_alpha": [0.3]}),
}


@pytest.mark.parametrize("name", list(COMPILED))
def test_compiled(name):
    op, options = COMPILED[name]
    m, feeds, arrays = make_case(op, 30, **options)
    check(m, feeds, spec_expected(op, arrays), backend="c")


def test_compiled_float16_lstm():
    m, feeds, _ = make_case("LSTM", 31, bias=True, initial=True, dtype=np.float16)
    check(m, feeds, reference_expected(m, feeds), dtype=np.float16, backend="c")


# ---- errors -------------------------------------------------------------------------------------

def test_sequence_lens_computed_at_run_time():
    nodes = [helper.make_node("ReduceSum", ["mask", "axes"], ["total"], keepdims=0),
             helper.make_node("Cast", ["total"], ["lens"], to=TensorProto.INT32),
             helper.make_node("RNN", ["X", "W", "R", "", "lens"], ["Y", "Y_h"], hidden_size=2,
                              direction="bidirectional")]
    rng = np.random.default_rng(40)
    arrays = {"W": rng.standard_normal((2, 2, 1)).astype(np.float32),
              "R": rng.standard_normal((2, 2, 2)).astype(np.float32)}
    m = model(nodes, [("X", TensorProto.FLOAT, (3, 2, 1)), ("mask", TensorProto.FLOAT, (2, 3))],
              [("Y", TensorProto.FLOAT, None), ("Y_h", TensorProto.FLOAT, None)],
              dict(arrays, axes=np.asarray([1], np.int64)), opset=14)
    loaded = tk.onnx.load(m)
    x = rng.standard_normal((3, 2, 1)).astype(np.float32)
    for mask in ([[1, 1, 0], [1, 0, 0]], [[0, 0, 0], [1, 1, 1]]):
        mask = np.asarray(mask, np.float32)
        expected = spec_recurrent("RNN", x, arrays["W"], arrays["R"], lens=mask.sum(1).astype(np.int32),
                                  direction="bidirectional")
        for out, ref in zip(loaded(X=x, mask=mask), expected):
            np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", list(GATES))
def test_compiled_scan_with_sequence_lens_matches_onnxruntime(op):
    """One compiled scan over time per direction; sequence_lens a graph input read at run time."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(70)
    seq, batch, size, hidden, g = 7, 4, 5, 6, GATES[op]
    arrays = {"W": (rng.standard_normal((2, g * hidden, size)) * 0.5).astype(np.float32),
              "R": (rng.standard_normal((2, g * hidden, hidden)) * 0.5).astype(np.float32),
              "B": (rng.standard_normal((2, 2 * g * hidden)) * 0.5).astype(np.float32)}
    outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    node = helper.make_node(op, ["X", "W", "R", "B", "L", "H0"] + (["C0"] if op == "LSTM" else []), outputs,
                            hidden_size=hidden, direction="bidirectional")
    inputs = [("X", TensorProto.FLOAT, (seq, batch, size)), ("L", TensorProto.INT32, (batch,)),
              ("H0", TensorProto.FLOAT, (2, batch, hidden))] + \
        ([("C0", TensorProto.FLOAT, (2, batch, hidden))] if op == "LSTM" else [])
    m = model([node], inputs, [(o, TensorProto.FLOAT, None) for o in outputs], arrays, opset=14)
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    loaded = tk.onnx.load(m)
    for lens in ([7, 0, 3, 1], [2, 7, 7, 5]):
        feeds = {"X": rng.standard_normal((seq, batch, size)).astype(np.float32),
                 "L": np.asarray(lens, np.int32), "H0": rng.standard_normal((2, batch, hidden)).astype(np.float32)}
        if op == "LSTM":
            feeds["C0"] = rng.standard_normal((2, batch, hidden)).astype(np.float32)
        for ours, theirs in zip(loaded(**feeds), session.run(None, feeds)):
            np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
    kernels = loaded.report(**feeds).kernels
    scans = [line for k in kernels for line in k.nodes if "= scan(" in line]
    assert len(scans) == 2  # one scan per direction, not one cell per step
    if thread_count() >= 2:  # the two directions run side by side (kernels/concurrent.py)
        assert any("concurrently" in k.loop_ir for k in kernels)


def test_unknown_activation_and_bad_shapes():
    w, r = np.zeros((1, 2, 1), np.float32), np.zeros((1, 2, 2), np.float32)
    m = single("RNN", ["X", "W", "R"], {"hidden_size": 2, "activations": ["Swish"]}, initializers={"W": w, "R": r})
    with pytest.raises(tk.UnsupportedOpError, match="activation 'Swish'"):
        tk.onnx.load(m, backend="interpreter")(np.zeros((3, 2, 1), np.float32))
    m = single("RNN", ["X", "W", "R"], {"hidden_size": 3}, initializers={"W": w, "R": r})
    with pytest.raises(tk.ShapeError, match="input W has shape"):
        tk.onnx.load(m, backend="interpreter")(np.zeros((3, 2, 1), np.float32))
    m = single("RNN", ["X", "W", "R", "", "L"], {"hidden_size": 2},
               initializers={"W": w, "R": r, "L": np.asarray([1, 4], np.int32)})
    with pytest.raises(tk.ShapeError, match="sequence_lens"):
        tk.onnx.load(m, backend="interpreter")(np.zeros((3, 2, 1), np.float32))


# ---- the numpy oracle itself ------------------------------------------------------------------

@pytest.mark.parametrize("op", list(GATES))
def test_spec_oracle_matches_reference(op):
    for direction in DIRECTIONS:
        for seed, variant in enumerate(("plain", "bias_initial", "layout1")):
            extra = {"linear_before_reset": seed % 2} if op == "GRU" else {"peephole": op == "LSTM"}
            m, feeds, arrays = make_case(op, 50 + seed, direction=direction, **extra, **VARIANTS[variant])
            for ours, ref in zip(spec_expected(op, arrays), reference_expected(m, feeds)):
                np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


# onnxruntime rejects one direction's activations for both directions (tensorkiln accepts them)
ORT_CASES = [name for name in SPEC_CASES if name != "gru_one_list_for_both"] + ["lens_" + op for op in GATES]


@pytest.mark.parametrize("name", ORT_CASES)
def test_spec_oracle_matches_onnxruntime(name):
    ort = pytest.importorskip("onnxruntime")
    if name.startswith("lens_"):
        op = name[5:]
        options = {"direction": "bidirectional", "bias": True, "initial": True, "peephole": op == "LSTM",
                   "lens": lambda seq, batch, rng: [seq, 0] + [max(seq - 2, 1)] * 2}
    else:
        op, options = SPEC_CASES[name]
    m, feeds, arrays = make_case(op, 60, opset=14, **options)
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for ours, theirs in zip(spec_expected(op, arrays), session.run(None, feeds)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
