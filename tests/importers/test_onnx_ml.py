"""ai.onnx.ml operators on numbers, compiled, against onnxruntime: Binarizer, ArrayFeatureExtractor,
LabelEncoder and random TreeEnsembles (every comparison mode, set membership, missing values)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import tensorkiln as tk  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_ort import check_against_onnxruntime  # noqa: E402

rng = np.random.default_rng(53)
F = TensorProto.FLOAT


def _ml_model(nodes, inputs, outputs, ml_opset):
    graph = helper.make_graph(nodes, "ml", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                   helper.make_opsetid("ai.onnx.ml", ml_opset)])


def test_binarizer_feature_extractor_and_label_encoder_match_onnxruntime():
    nodes = [helper.make_node("Binarizer", ["x"], ["b"], domain="ai.onnx.ml", threshold=0.25),
             helper.make_node("ArrayFeatureExtractor", ["x", "idx"], ["f"], domain="ai.onnx.ml"),
             helper.make_node("LabelEncoder", ["k"], ["l"], domain="ai.onnx.ml", keys_int64s=[3, -1, 7, 0],
                              values_floats=[0.5, 1.5, -2.0, 4.0], default_float=9.0),
             helper.make_node("LabelEncoder", ["x"], ["m"], domain="ai.onnx.ml",
                              keys_tensor=numpy_helper.from_array(np.array([0.0, 1.0], np.float32)),
                              values_tensor=numpy_helper.from_array(np.array([10, 20], np.int64)),
                              default_tensor=numpy_helper.from_array(np.array([-5], np.int64)))]
    m = _ml_model(nodes, [("x", F, (3, 7)), ("idx", TensorProto.INT64, (4,)), ("k", TensorProto.INT64, (2, 5))],
                  [("b", F, None), ("f", F, None), ("l", F, None), ("m", TensorProto.INT64, None)], ml_opset=4)
    x = rng.standard_normal((3, 7)).astype(np.float32)
    x[0, :3] = [0.0, 1.0, 0.25]  # keys and the threshold itself
    feeds = {"x": x, "idx": np.array([6, 0, 3, 3], np.int64),
             "k": rng.choice([3, -1, 7, 0, 5, 100], (2, 5)).astype(np.int64)}
    check_against_onnxruntime(m, feeds)


def _random_ensemble(n_features: int, n_targets: int, trees: int):
    """TreeEnsemble attributes of `trees` random trees of depth 1 to 3 over every mode (set members are
    integers: ONNX Runtime implements membership for integer values only)."""
    modes, splits, features, true_ids, false_ids, true_leafs, false_leafs = [], [], [], [], [], [], []
    tracks, members, leaf_targets, leaf_weights, roots = [], [], [], [], []

    def leaf() -> int:
        leaf_targets.append(int(rng.integers(0, n_targets)))
        leaf_weights.append(float(rng.standard_normal()))
        return len(leaf_targets) - 1

    def node(depth: int) -> int:
        index = len(modes)
        mode = int(rng.integers(0, 7))
        modes.append(mode)
        splits.append(float(rng.integers(-2, 3)) / 2 if mode != 6 else 0.0)
        if mode == 6:
            members.extend([float(v) for v in rng.choice([-1.0, 0.0, 1.0, 2.0], 2, replace=False)] + [np.nan])
        features.append(int(rng.integers(0, n_features)))
        tracks.append(int(rng.integers(0, 2)))
        for ids, leafs in ((true_ids, true_leafs), (false_ids, false_leafs)):
            ids.append(0)
            leafs.append(0)
        for ids, leafs in ((true_ids, true_leafs), (false_ids, false_leafs)):
            if depth == 0 or rng.random() < 0.3:
                ids[index], leafs[index] = leaf(), 1
            else:
                ids[index], leafs[index] = node(depth - 1), 0
        return index

    for _ in range(trees):
        roots.append(node(int(rng.integers(0, 3))))
    tensor = numpy_helper.from_array
    extra = dict(membership_values=tensor(np.array(members, np.float32))) if members else {}
    return dict(**extra, nodes_modes=tensor(np.array(modes, np.uint8)),
                nodes_splits=tensor(np.array(splits, np.float32)),
                nodes_featureids=features, nodes_truenodeids=true_ids, nodes_falsenodeids=false_ids,
                nodes_trueleafs=true_leafs, nodes_falseleafs=false_leafs, nodes_missing_value_tracks_true=tracks,
                leaf_targetids=leaf_targets, leaf_weights=tensor(np.array(leaf_weights, np.float32)),
                tree_roots=roots, n_targets=n_targets)


def _tree_ensemble_model(attrs, aggregate: int, post: int):
    node = helper.make_node("TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", aggregate_function=aggregate,
                            post_transform=post, **attrs)
    return _ml_model([node], [("x", F, (9, 4))], [("y", F, None)], ml_opset=5)


@pytest.mark.parametrize("aggregate", [1, 0, 2, 3])
def test_tree_ensemble_matches_onnxruntime(aggregate):
    attrs = _random_ensemble(n_features=4, n_targets=3, trees=5)
    x = rng.choice([-1.0, -0.5, 0.0, 0.25, 1.0, 2.0, np.nan], (9, 4)).astype(np.float32)  # splits hit exactly
    check_against_onnxruntime(_tree_ensemble_model(attrs, aggregate, 0), {"x": x}, rtol=1e-5, atol=1e-6)


def test_tree_ensemble_post_transforms_follow_the_standard():
    """post_transform 1 is SOFTMAX and 2 LOGISTIC by the standard (onnxruntime 1.23 swaps the two)."""
    attrs = _random_ensemble(n_features=4, n_targets=3, trees=4)
    x = rng.choice([-1.0, 0.0, 0.25, 1.0, np.nan], (9, 4)).astype(np.float32)
    scores = tk.onnx.load(_tree_ensemble_model(attrs, 1, 0))(x)[0].astype(np.float64)
    softmax = tk.onnx.load(_tree_ensemble_model(attrs, 1, 1))(x)[0]
    logistic = tk.onnx.load(_tree_ensemble_model(attrs, 1, 2))(x)[0]
    e = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(softmax, e / e.sum(-1, keepdims=True), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(logistic, 1.0 / (1.0 + np.exp(-scores)), rtol=1e-6, atol=1e-7)


def test_label_encoder_with_string_keys_is_unsupported_by_name():
    node = helper.make_node("LabelEncoder", ["x"], ["y"], name="names", domain="ai.onnx.ml",
                            keys_strings=["a"], values_int64s=[1])
    m = _ml_model([node], [("x", TensorProto.INT64, (2,))], [("y", TensorProto.INT64, None)], ml_opset=4)
    with pytest.raises(tk.TensorKilnError, match="'names'.*string keys"):
        tk.onnx.load(m)(np.zeros(2, np.int64))
