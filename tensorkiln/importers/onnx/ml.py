"""ONNX-ML operators (domain ai.onnx.ml) on numbers: Binarizer, ArrayFeatureExtractor, LabelEncoder
(numeric keys and values) and TreeEnsemble (opset 5).

A tree ensemble's structure is static, so it becomes two matmuls instead of a walk: every node's
decision is computed for every row at once (the feature, gathered, compared with the split by
the node's mode; NaN takes the branch `missing_value_tracks_true` names), and leaf l of depth d
is reached exactly when the d decisions on its path go its way:

    satisfied = D @ TAKES_TRUE + (1 - D) @ TAKES_FALSE        (N, leaves), small exact integers
    reached   = satisfied == depth

The scores are then `reached @ WEIGHTS` (sum or average over trees), or a min/max over trees.
String keys, values and inputs are not supported: tensorkiln holds no strings.
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import ShapeError
from ...frontend.functions import matmul, where
from ...frontend.tensor import Tensor, apply, as_tensor
from ...nn import functional as F
from .registry import NodeContext, converter

ML = "ai.onnx.ml::"
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)  # TreeEnsemble's nodes_modes
POST_TRANSFORMS = {0: "NONE", 1: "SOFTMAX", 2: "LOGISTIC", 3: "SOFTMAX_ZERO", 4: "PROBIT"}
AGGREGATES = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}


def _array(value) -> np.ndarray:
    """An attribute tensor (TensorProto) or list as a numpy array."""
    from onnx import TensorProto, numpy_helper
    return numpy_helper.to_array(value) if isinstance(value, TensorProto) else np.asarray(value)


@converter(ML + "Binarizer")
def _binarizer(ctx, inputs, attrs):
    x = inputs[0]
    return (x > float(attrs.get("threshold", 0.0))).to(x.dtype)


@converter(ML + "ArrayFeatureExtractor")
def _array_feature_extractor(ctx, inputs, attrs):
    x, indices = inputs
    if indices.ndim > 2 or (indices.ndim == 2 and indices.shape[0] != 1):
        raise ShapeError(f"node '{ctx.name}' (ArrayFeatureExtractor): indices must be [K] or [1, K], got "
                         f"{list(indices.shape)}")
    picked = x.index_select(-1, indices.reshape(-1).to(dt.int64))
    return picked.reshape((1, -1)) if x.ndim == 1 else picked  # a vector gives one row (as ONNX Runtime)


def _label_table(ctx: NodeContext, attrs: dict, side: str) -> np.ndarray:
    """LabelEncoder's keys or values: from keys_tensor / keys_int64s / keys_floats (strings refused)."""
    if f"{side}_tensor" in attrs:
        return _array(attrs[f"{side}_tensor"])
    if f"{side}_strings" in attrs:
        raise ctx.unsupported(f"string {side} ({side}_strings): tensorkiln holds no strings")
    if f"{side}_int64s" in attrs:
        return np.array(attrs[f"{side}_int64s"], np.int64)
    if f"{side}_floats" in attrs:
        return np.array(attrs[f"{side}_floats"], np.float32)
    raise ShapeError(f"node '{ctx.name}' (LabelEncoder): no {side}")


def _label_default(attrs: dict, values: np.ndarray):
    if "default_tensor" in attrs:
        return _array(attrs["default_tensor"]).reshape(-1)[0]
    if values.dtype.kind == "f":
        return attrs.get("default_float", -0.0)
    return attrs.get("default_int64", -1)


@converter(ML + "LabelEncoder")
def _label_encoder(ctx, inputs, attrs):
    x = inputs[0]
    keys, values = _label_table(ctx, attrs, "keys"), _label_table(ctx, attrs, "values")
    if keys.shape != values.shape or keys.ndim != 1 or keys.size == 0:
        raise ShapeError(f"node '{ctx.name}' (LabelEncoder): {keys.size} keys for {values.size} values")
    out_dtype = dt.from_numpy_dtype(values.dtype)
    matches = x.unsqueeze(-1) == as_tensor(keys.astype(x.dtype.storage))  # (..., K)
    if keys.dtype.kind == "f":  # a NaN key maps NaN inputs
        matches = matches | (x.unsqueeze(-1).isnan() & as_tensor(np.isnan(keys)))
    found = matches.any(-1)
    position = matches.to(dt.int32).argmax(-1)  # the first matching key
    mapped = apply("take", [as_tensor(values), position.reshape(-1)], axis=0).reshape(tuple(x.shape))
    return where(found, mapped, as_tensor(np.array(_label_default(attrs, values), values.dtype)))


def _leaf_paths(roots, true_ids, false_ids, true_leafs, false_leafs) -> list[tuple[int, int, list]]:
    """(tree, leaf index, [(node, takes the true branch)]) of every leaf, by walking each tree once."""
    paths = []
    for tree, root in enumerate(roots):
        if true_leafs[root] and false_leafs[root] and true_ids[root] == false_ids[root]:
            paths.append((tree, int(true_ids[root]), []))  # a tree that is a single leaf
            continue
        stack = [(int(root), [])]
        while stack:
            node, path = stack.pop()
            for branch, child, is_leaf in ((True, true_ids[node], true_leafs[node]),
                                           (False, false_ids[node], false_leafs[node])):
                step = path + [(node, branch)]
                if is_leaf:
                    paths.append((tree, int(child), step))
                elif len(step) > len(true_ids):
                    raise ShapeError("the tree has a cycle")
                else:
                    stack.append((int(child), step))
    return paths


def _decisions(x: Tensor, features, modes, splits, members, tracks_true) -> Tensor:
    """(N, M) bool: each node's test on each row (x (N, F))."""
    v = x.index_select(1, as_tensor(np.asarray(features, np.int64)))  # (N, M)
    s = as_tensor(splits.astype(x.dtype.storage))
    by_mode = {LEQ: v <= s, LT: v < s, GTE: v >= s, GT: v > s, EQ: v == s, NEQ: v != s}
    modes = np.asarray(modes)
    decision = None
    for mode, test in by_mode.items():
        if (modes == mode).any():
            chosen = test & as_tensor(modes == mode)
            decision = chosen if decision is None else decision | chosen
    if (modes == MEMBER).any():  # (N, M, S) against each node's set, padded with NaN (equal to nothing)
        member = (v.unsqueeze(-1) == as_tensor(members.astype(x.dtype.storage))).any(-1)
        decision = member if decision is None else decision | member
    if tracks_true.any():
        decision = decision | (v.isnan() & as_tensor(tracks_true))
    return decision


def _member_sets(modes, values) -> np.ndarray:
    """(M, S) set members of each MEMBER node (NaN-separated in `values`, in node order), NaN-padded."""
    sets, current, rest = [], [], list(np.asarray(values, np.float64).reshape(-1)) if values is not None else []
    for _ in range(int((np.asarray(modes) == MEMBER).sum())):
        current = []
        while rest and not np.isnan(rest[0]):
            current.append(rest.pop(0))
        if rest:
            rest.pop(0)
        sets.append(current)
    width = max([len(s) for s in sets] + [1])
    table = np.full((len(modes), width), np.nan)
    for node, members in zip(np.flatnonzero(np.asarray(modes) == MEMBER), sets):
        table[node, :len(members)] = members
    return table


@converter(ML + "TreeEnsemble")
def _tree_ensemble(ctx, inputs, attrs):
    x = inputs[0]
    where_ = f"node '{ctx.name}' (TreeEnsemble)"
    if x.ndim != 2 or not x.dtype.is_floating:
        raise ShapeError(f"{where_}: X must be a float matrix (N, features), got {x.dtype.name} {list(x.shape)}")
    modes = _array(attrs["nodes_modes"]).astype(np.int64)
    splits = _array(attrs["nodes_splits"]).astype(np.float64)
    features = np.asarray(attrs["nodes_featureids"], np.int64)
    true_ids, false_ids = attrs["nodes_truenodeids"], attrs["nodes_falsenodeids"]
    true_leafs, false_leafs = attrs["nodes_trueleafs"], attrs["nodes_falseleafs"]
    targets = np.asarray(attrs["leaf_targetids"], np.int64)
    weights = _array(attrs["leaf_weights"]).astype(np.float64)
    n_targets = int(attrs["n_targets"])
    tracks_true = np.asarray(attrs.get("nodes_missing_value_tracks_true") or [0] * len(modes), bool)
    post = POST_TRANSFORMS.get(attrs.get("post_transform", 0))
    aggregate = AGGREGATES.get(attrs.get("aggregate_function", 1))
    if post not in ("NONE", "SOFTMAX", "LOGISTIC") or aggregate is None:
        raise ctx.unsupported(f"post_transform {post} / aggregate_function {attrs.get('aggregate_function')}")
    if len(features) and (features.max() >= x.shape[1] or features.min() < 0):
        raise ShapeError(f"{where_}: a node reads feature {features.max()} of {x.shape[1]}")
    if len(targets) and (targets.max() >= n_targets or targets.min() < 0):
        raise ShapeError(f"{where_}: a leaf scores target {targets.max()} of n_targets={n_targets}")
    paths = _leaf_paths(attrs["tree_roots"], true_ids, false_ids, true_leafs, false_leafs)
    trees, leaves = len(attrs["tree_roots"]), len(paths)
    takes_true, takes_false = np.zeros((len(modes), leaves)), np.zeros((len(modes), leaves))
    depth = np.zeros(leaves)
    scores = np.zeros((leaves, trees, n_targets))  # the score each reached leaf gives its tree
    scored = np.zeros((leaves, trees, n_targets))  # 1 where it gives one
    for column, (tree, leaf, path) in enumerate(paths):
        for node, branch in path:
            (takes_true if branch else takes_false)[node, column] += 1
        depth[column] = len(path)
        scores[column, tree, targets[leaf]] += weights[leaf]
        scored[column, tree, targets[leaf]] = 1
    compute = dt.promote_types(x.dtype.compute, dt.float32)
    members = _array(attrs["membership_values"]) if "membership_values" in attrs else None
    decided = _decisions(x, features, modes, splits, _member_sets(modes, members), tracks_true).to(compute)
    satisfied = matmul(decided, as_tensor(takes_true.astype(compute.storage))) + \
        matmul(1.0 - decided, as_tensor(takes_false.astype(compute.storage)))
    reached = (satisfied == as_tensor(depth.astype(compute.storage))).to(compute)  # (N, leaves)
    if aggregate in ("SUM", "AVERAGE"):
        out = matmul(reached, as_tensor(scores.sum(1).astype(compute.storage)))
        if aggregate == "AVERAGE":
            out = out * (1.0 / trees)
    else:  # per tree and target, then the extreme over the trees that score the target
        per_tree = matmul(reached, as_tensor(scores.reshape(leaves, -1).astype(compute.storage)))
        has = matmul(reached, as_tensor(scored.reshape(leaves, -1).astype(compute.storage))) > 0.0
        per_tree, has = per_tree.reshape((-1, trees, n_targets)), has.reshape((-1, trees, n_targets))
        fill = float("inf") if aggregate == "MIN" else float("-inf")
        masked = where(has, per_tree, fill)
        extreme = masked.min(1).values if aggregate == "MIN" else masked.max(1).values
        out = where(has.any(1), extreme, 0.0)
    if post == "SOFTMAX":
        out = F.softmax(out, -1)
    elif post == "LOGISTIC":
        out = out.sigmoid()
    return out.to(x.dtype)
