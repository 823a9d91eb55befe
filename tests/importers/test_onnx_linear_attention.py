"""LinearAttention (every update rule, grouped queries, both decay layouts), compiled, against onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import tensorkiln as tk  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_build import model  # noqa: E402
from onnx_ort import check_against_onnxruntime  # noqa: E402

rng = np.random.default_rng(5)
F = TensorProto.FLOAT


def _model(rule, b, t, q_heads, kv_heads, d_k, d_v, past, decay_width, beta_width, scale):
    names = ["q", "k", "v", "past" if past else "", "decay" if decay_width else "", "beta" if beta_width else ""]
    while not names[-1]:
        names.pop()
    node = helper.make_node("LinearAttention", names, ["out", "state"], update_rule=rule, q_num_heads=q_heads,
                            kv_num_heads=kv_heads, scale=scale, domain="")
    inputs = [("q", F, (b, t, q_heads * d_k)), ("k", F, (b, t, kv_heads * d_k)), ("v", F, (b, t, kv_heads * d_v))]
    if past:
        inputs.append(("past", F, (b, kv_heads, d_k, d_v)))
    if decay_width:
        inputs.append(("decay", F, (b, t, decay_width)))
    if beta_width:
        inputs.append(("beta", F, (b, t, beta_width)))
    return model([node], inputs, [("out", F, None), ("state", F, None)], opset=27), inputs


# (rule, B, T, H_q, H_kv, d_k, d_v, past state, decay width, beta width, scale): T = 1 (a decode step),
# grouped and multi-query heads, per-head and per-key decay, per-head and shared beta
CASES = [("linear", 2, 3, 2, 2, 4, 3, False, 0, 0, 0.0), ("gated", 1, 5, 4, 2, 3, 5, True, 2 * 3, 0, 0.5),
         ("delta", 2, 1, 3, 1, 4, 2, True, 0, 1, 0.0), ("gated_delta", 1, 4, 2, 2, 5, 3, True, 2, 2, 0.0)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_linear_attention_matches_onnxruntime(case):
    m, inputs = _model(*case)
    feeds = {name: rng.standard_normal(shape).astype(np.float32) * 0.5 for name, _, shape in inputs}
    if "k" in feeds and case[0] in ("delta", "gated_delta"):  # the delta rules expect unit keys
        k = feeds["k"].reshape(case[1], case[2], case[4], case[5])
        feeds["k"] = (k / np.linalg.norm(k, axis=-1, keepdims=True)).reshape(feeds["k"].shape)
    if "beta" in feeds:
        feeds["beta"] = 1.0 / (1.0 + np.exp(-feeds["beta"]))
    if "decay" in feeds:
        feeds["decay"] = -np.abs(feeds["decay"])
    check_against_onnxruntime(m, feeds, rtol=1e-4, atol=1e-5)


def test_linear_attention_with_heads_that_do_not_divide_names_the_node():
    m, inputs = _model("linear", 1, 2, 3, 2, 4, 4, False, 0, 0, 0.0)
    m.graph.node[0].name = "mixer"
    feeds = [np.zeros(shape, np.float32) for _, _, shape in inputs]
    with pytest.raises(tk.TensorKilnError, match=r"'mixer'.*multiple of kv_num_heads"):
        tk.onnx.load(m)(*feeds)
