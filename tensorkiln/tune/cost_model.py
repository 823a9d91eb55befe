"""The learned cost model: gradient-boosted trees over a configuration's loop-nest features.

It predicts log(time relative to the default) from the template's features
(kernels/knob_space.py: extents, tile shape, bytes per cache level,
arithmetic intensity, padding, tasks per thread) and is refitted on every
measurement so far each time the search asks it (online, as in Ansor).

xgboost is used where it is installed (`pip install tensorkiln[tune]`);
otherwise the same model in plain numpy (`NumpyBoostedTrees`: depth-3
regression trees fitted to residuals), which is slower to fit but fine for
the few hundred points a search measures. `make_cost_model` says which one
it made (`.name`).
"""
from __future__ import annotations

import numpy as np


class NumpyBoostedTrees:
    """Least-squares gradient boosting of small regression trees, in numpy."""

    name = "numpy gradient-boosted trees"

    def __init__(self, rounds: int = 60, depth: int = 3, learning_rate: float = 0.3, min_leaf: int = 2):
        self.rounds, self.depth, self.learning_rate, self.min_leaf = rounds, depth, learning_rate, min_leaf
        self.base = 0.0
        self.trees: list = []

    def fit(self, x: np.ndarray, y: np.ndarray) -> NumpyBoostedTrees:
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        self.base = float(y.mean()) if y.size else 0.0
        residual = y - self.base
        self.trees = []
        for _ in range(self.rounds):
            tree = self._grow(x, residual, self.depth)
            residual = residual - self.learning_rate * self._apply(tree, x)
            self.trees.append(tree)
        return self

    def _grow(self, x: np.ndarray, r: np.ndarray, depth: int):
        """A leaf value, or (feature, threshold, left subtree, right subtree) with the least squared error."""
        if depth == 0 or len(r) < 2 * self.min_leaf:
            return float(r.mean()) if len(r) else 0.0
        best = None
        n = len(r)
        for f in range(x.shape[1]):
            order = np.argsort(x[:, f], kind="stable")
            column, sums = x[order, f], np.cumsum(r[order])
            # a split after position i (left: the i + 1 smallest) where the next value differs
            i = np.arange(self.min_leaf - 1, n - self.min_leaf)
            i = i[column[i] < column[i + 1]]
            if not len(i):
                continue
            left_sum = sums[i]
            gain = left_sum ** 2 / (i + 1) + (sums[-1] - left_sum) ** 2 / (n - i - 1)
            at = int(np.argmax(gain))
            if best is None or gain[at] > best[0]:
                best = (gain[at], f, column[i[at]], x[:, f] <= column[i[at]])
        if best is None:
            return float(r.mean())
        _, f, threshold, left = best
        return (f, threshold, self._grow(x[left], r[left], depth - 1), self._grow(x[~left], r[~left], depth - 1))

    def _apply(self, tree, x: np.ndarray) -> np.ndarray:
        if not isinstance(tree, tuple):
            return np.full(len(x), tree)
        f, threshold, left, right = tree
        go_left = x[:, f] <= threshold
        out = np.empty(len(x))
        out[go_left] = self._apply(left, x[go_left])
        out[~go_left] = self._apply(right, x[~go_left])
        return out

    def predict(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        out = np.full(len(x), self.base)
        for tree in self.trees:
            out += self.learning_rate * self._apply(tree, x)
        return out


class XGBoostModel:
    """xgboost's gradient-boosted trees with the same fit / predict."""

    name = "xgboost gradient-boosted trees"

    def __init__(self) -> None:
        import xgboost
        self.model = xgboost.XGBRegressor(n_estimators=80, max_depth=4, learning_rate=0.3, n_jobs=1,
                                          verbosity=0)

    def fit(self, x: np.ndarray, y: np.ndarray) -> XGBoostModel:
        self.model.fit(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.model.predict(np.asarray(x, dtype=np.float64))


def make_cost_model(prefer: str = "auto"):
    """xgboost's model where installed (prefer="auto" or "xgboost"), else numpy's (prefer="numpy" forces it)."""
    if prefer != "numpy":
        try:
            return XGBoostModel()
        except ImportError:
            if prefer == "xgboost":
                raise
    return NumpyBoostedTrees()


__all__ = ["NumpyBoostedTrees", "XGBoostModel", "make_cost_model"]
