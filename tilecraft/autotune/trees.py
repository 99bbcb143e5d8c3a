"""A fitted tree ensemble as plain arrays: predicts without scikit-learn, and is stored as
an `.npz` of numbers (read with `allow_pickle=False`), so a cost-model file planted or
damaged in the cache can at worst be refused, never run code.

Example::

    trees = TreeEnsemble.from_regressor(HistGradientBoostingRegressor().fit(x, y))
    trees.save(path, stamp="what it was fitted on")
    again = TreeEnsemble.load(path, stamp="what it was fitted on")  # None if not that
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tilecraft.runtime.cache import write_private

_ARRAYS = ("feature", "threshold", "left", "right", "leaf", "value", "missing_left", "roots")


@dataclass
class TreeEnsemble:
    """Regression trees whose nodes are rows of flat arrays; the prediction is `baseline`
    plus the leaf value each tree reaches. Children always come after their parent, so
    a walk ends within `depth` steps."""

    feature: np.ndarray  # int64: the feature an inner node splits on
    threshold: np.ndarray  # float64: left when the value is <= threshold
    left: np.ndarray  # int64: child indices (into the flat arrays)
    right: np.ndarray
    leaf: np.ndarray  # bool
    value: np.ndarray  # float64: leaf values
    missing_left: np.ndarray  # bool: where NaN goes
    roots: np.ndarray  # int64: the first node of each tree
    baseline: float
    features: int
    depth: int
    extra: tuple[int, ...] = ()  # counts the owner keeps with it (stored, not used here)

    @classmethod
    def from_regressor(cls, regressor: Any, extra: tuple[int, ...] = ()) -> TreeEnsemble:
        """The trees of a fitted `HistGradientBoostingRegressor` (numeric features only);
        raises ValueError for a model it cannot represent."""
        if getattr(regressor, "is_categorical_", None) is not None:
            raise ValueError("categorical features are not supported")
        parts, roots, start = [], [], 0
        for (predictor,) in regressor._predictors:  # one tree per boosting iteration
            nodes = predictor.nodes
            parts.append((nodes, start))
            roots.append(start)
            start += len(nodes)
        cat = lambda f: np.concatenate([f(n, s) for n, s in parts])  # noqa: E731
        leaf = cat(lambda n, s: n["is_leaf"].astype(bool))
        trees = cls(
            feature=np.where(leaf, 0, cat(lambda n, s: n["feature_idx"].astype(np.int64))),
            threshold=cat(lambda n, s: n["num_threshold"].astype(np.float64)),
            left=np.where(leaf, 0, cat(lambda n, s: n["left"].astype(np.int64) + s)),
            right=np.where(leaf, 0, cat(lambda n, s: n["right"].astype(np.int64) + s)),
            leaf=leaf,
            value=cat(lambda n, s: n["value"].astype(np.float64)),
            missing_left=cat(lambda n, s: n["missing_go_to_left"].astype(bool)),
            roots=np.asarray(roots, dtype=np.int64),
            baseline=float(np.ravel(regressor._baseline_prediction)[0]),
            features=int(regressor.n_features_in_),
            depth=int(max((int(n["depth"].max()) for n, _ in parts), default=0)),
            extra=extra,
        )
        trees.check()
        return trees

    @classmethod
    def from_decision_trees(
        cls, trees: list[Any], weight: float = 1.0, extra: tuple[int, ...] = ()
    ) -> TreeEnsemble:
        """`weight` times the summed predictions of fitted `DecisionTreeRegressor`s (one
        output each); raises ValueError for trees it cannot represent."""
        if not trees:
            raise ValueError("no trees")
        parts, roots, start = [], [], 0
        for tree in trees:
            t = tree.tree_
            if t.n_outputs != 1:
                raise ValueError("trees of several outputs are not supported")
            parts.append((t, start))
            roots.append(start)
            start += t.node_count
        cat = lambda f: np.concatenate([f(t, s) for t, s in parts])  # noqa: E731
        leaf = cat(lambda t, s: t.children_left < 0)
        ensemble = cls(
            feature=np.where(leaf, 0, cat(lambda t, s: t.feature.astype(np.int64))),
            threshold=cat(lambda t, s: t.threshold.astype(np.float64)),
            left=np.where(leaf, 0, cat(lambda t, s: t.children_left.astype(np.int64) + s)),
            right=np.where(leaf, 0, cat(lambda t, s: t.children_right.astype(np.int64) + s)),
            leaf=leaf,
            value=cat(lambda t, s: t.value[:, 0, 0].astype(np.float64)) * weight,
            missing_left=np.zeros(len(leaf), dtype=bool),  # features are never NaN here
            roots=np.asarray(roots, dtype=np.int64),
            baseline=0.0,
            features=int(trees[0].n_features_in_),
            depth=int(max(t.max_depth for t, _ in parts)),
            extra=extra,
        )
        ensemble.check()
        return ensemble

    @classmethod
    def blend(
        cls, parts: list[tuple[TreeEnsemble, float]], extra: tuple[int, ...] = ()
    ) -> TreeEnsemble:
        """One ensemble predicting the weighted sum of `parts`' predictions: their trees
        side by side, leaf values and baselines scaled by the weights."""
        if not parts or len({e.features for e, _ in parts}) != 1:
            raise ValueError("nothing to blend, or ensembles of different features")
        offsets = np.cumsum([0] + [len(e.leaf) for e, _ in parts[:-1]])
        pairs = list(zip(parts, offsets, strict=True))
        join = lambda f: np.concatenate([f(e, w, o) for (e, w), o in pairs])  # noqa: E731
        trees = cls(
            feature=join(lambda e, w, o: e.feature),
            threshold=join(lambda e, w, o: e.threshold),
            left=join(lambda e, w, o: np.where(e.leaf, 0, e.left + o)),
            right=join(lambda e, w, o: np.where(e.leaf, 0, e.right + o)),
            leaf=join(lambda e, w, o: e.leaf),
            value=join(lambda e, w, o: e.value * w),
            missing_left=join(lambda e, w, o: e.missing_left),
            roots=join(lambda e, w, o: e.roots + o),
            baseline=float(sum(e.baseline * w for e, w in parts)),
            features=parts[0][0].features,
            depth=max(e.depth for e, _ in parts),
            extra=extra,
        )
        trees.check()
        return trees

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The predicted value of each row of `x`."""
        x = np.asarray(x, dtype=np.float64).reshape(-1, self.features)
        rows = np.arange(len(x))[:, None]
        node = np.broadcast_to(self.roots, (len(x), len(self.roots))).copy()
        for _ in range(self.depth + 1):
            inner = ~self.leaf[node]
            if not inner.any():
                break
            value = x[rows, self.feature[node]]
            below = value <= self.threshold[node]
            go_left = np.where(np.isnan(value), self.missing_left[node], below)
            node = np.where(inner, np.where(go_left, self.left[node], self.right[node]), node)
        return self.baseline + self.value[node].sum(axis=1)

    def check(self) -> None:
        """Raise ValueError unless the arrays describe trees a walk can finish."""
        if any(getattr(self, name).ndim != 1 for name in _ARRAYS):
            raise ValueError("node arrays that are not flat")
        n = len(self.leaf)
        if any(len(getattr(self, name)) != n for name in _ARRAYS[:-1]) or n == 0:
            raise ValueError("node arrays of different lengths")
        inner = np.flatnonzero(~self.leaf)
        index = np.arange(n)
        for child in (self.left, self.right):
            if ((child[inner] <= index[inner]) | (child[inner] >= n)).any():
                raise ValueError("a child that does not come after its parent")
        if ((self.feature[inner] < 0) | (self.feature[inner] >= self.features)).any():
            raise ValueError("a split on a feature that does not exist")
        if ((self.roots < 0) | (self.roots >= n)).any() or not 0 <= self.depth <= 4 * n:
            raise ValueError("roots or depth out of range")

    def save(self, path: Path, stamp: str) -> None:
        """Write the arrays and `stamp` (what the model was fitted on) as one .npz file."""
        buffer = io.BytesIO()
        head = [self.baseline, self.features, self.depth, *self.extra]
        numbers = np.asarray(head, dtype=np.float64)
        arrays = {name: getattr(self, name) for name in _ARRAYS}
        np.savez(buffer, stamp=np.asarray(stamp), numbers=numbers, **arrays)
        write_private(path, buffer.getvalue())

    @classmethod
    def load(cls, path: Path, stamp: str) -> TreeEnsemble | None:
        """The ensemble saved at `path` if it was fitted on `stamp`, else None; raises
        ValueError or OSError for a file that is not one (no code in it ever runs)."""
        with np.load(path, allow_pickle=False) as data:
            if str(data["stamp"]) != stamp:
                return None
            baseline, features, depth, *extra = (float(v) for v in data["numbers"])
            arrays = {name: data[name] for name in _ARRAYS}
        kinds = {"leaf": bool, "missing_left": bool, "threshold": np.float64, "value": np.float64}
        typed = {k: np.asarray(v, dtype=kinds.get(k, np.int64)) for k, v in arrays.items()}
        counts = tuple(int(v) for v in extra)
        trees = cls(
            **typed, baseline=baseline, features=int(features), depth=int(depth), extra=counts
        )
        trees.check()
        return trees
