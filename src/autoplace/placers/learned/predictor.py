"""A cheap predictor of a mapping's fitness, learned from the mappings actually run (HTF-MPR §III-F).

A *mapping* is a device index per node (``[n_nodes]`` integers, a grouping's groups); its *fitness* is
``1 / step time`` (0 for a mapping that fails). :class:`FitnessPredictor` follows scikit-learn's
conventions (``fit(X, y)``, ``predict(X)``, ``score(X, y)``, ``get_params``): its features are the
one-hot device of every node (less the columns no mapping varies in, and for the linear models each
node's first device, whose column the others determine), its model scikit-learn's gradient-boosting regressor
by default (or one of :data:`MODELS`, the paper's Figure 8 field). Any search can screen candidate mappings with it.

Models are compared by the *normalised Kendall tau rank distance* (eq. 1–2): over all pairs of mappings,
the share whose predicted fitnesses are in the other order than their actual ones (a pair tied on one
side only counts ½) —
:func:`kendall_tau_distance` — under k-fold cross-validation (:func:`cross_validate`, :func:`compare_models`).
"""

from __future__ import annotations

import importlib
import warnings

import numpy as np

from autoplace.errors import AutoplaceError

__all__ = ["MODELS", "FitnessPredictor", "kendall_tau_distance", "cross_validate", "compare_models", "one_hot"]

#: the regressors HTF-MPR's Figure 8 compares: name -> (scikit-learn class path, default parameters)
MODELS = {
    "gbr": ("sklearn.ensemble.GradientBoostingRegressor", {}),
    "svr": ("sklearn.svm.SVR", {}),
    "ridge": ("sklearn.linear_model.Ridge", {}),
    "lars": ("sklearn.linear_model.Lars", {}),
    "omp": ("sklearn.linear_model.OrthogonalMatchingPursuit", {}),
    "knn": ("sklearn.neighbors.KNeighborsRegressor", {}),
}
_SEEDED = ("gbr",)          # the models that take a random_state
_LINEAR = ("ridge", "lars", "omp")


def one_hot(X: np.ndarray, n_devices: int) -> np.ndarray:
    """``[n, n_nodes]`` device indices -> ``[n, n_nodes * n_devices]`` one-hot features (float32)."""
    X = np.atleast_2d(np.asarray(X, dtype=np.int64))
    if X.size and (X.min() < 0 or X.max() >= n_devices):
        raise AutoplaceError(f"a mapping names device {int(X.max()) if X.max() >= n_devices else int(X.min())}; "
                             f"the predictor knows {n_devices} devices")
    out = np.zeros((X.shape[0], X.shape[1] * n_devices), dtype=np.float32)
    rows = np.repeat(np.arange(X.shape[0]), X.shape[1])
    out[rows, (np.arange(X.shape[1]) * n_devices)[None, :].repeat(X.shape[0], 0).ravel() + X.ravel()] = 1.0
    return out


class FitnessPredictor:
    """Predicts a mapping's fitness from the device of each node (one-hot).

    ``model``: a name of :data:`MODELS` (default ``"gbr"``); ``n_devices``: the devices a mapping may name
    (default: one more than the largest index seen by :meth:`fit`); ``random_state``: the seed of a model
    that draws (gradient boosting's subsampling); ``params``: the model's own parameters."""

    def __init__(self, model: str = "gbr", *, n_devices: int | None = None, random_state: int | None = 0,
                 **params):
        if model not in MODELS:
            raise AutoplaceError(f"unknown fitness model {model!r} (choose from: {', '.join(MODELS)})")
        self.model, self.n_devices, self.random_state, self.params = model, n_devices, random_state, params

    def get_params(self, deep: bool = True) -> dict:
        return {"model": self.model, "n_devices": self.n_devices, "random_state": self.random_state, **self.params}

    def set_params(self, **params) -> FitnessPredictor:
        for k in ("model", "n_devices", "random_state"):
            if k in params:
                setattr(self, k, params.pop(k))
        self.params.update(params)
        return self

    def __sklearn_tags__(self):
        """A regressor to scikit-learn's model selection (``cross_val_score``, ``GridSearchCV``, ``clone``)."""
        from sklearn.utils import RegressorTags, Tags, TargetTags

        return Tags(estimator_type="regressor", target_tags=TargetTags(required=True),
                    regressor_tags=RegressorTags())

    def _estimator(self):

        if self.model not in MODELS:
            raise AutoplaceError(f"unknown fitness model {self.model!r} (choose from: {', '.join(MODELS)})")
        path, defaults = MODELS[self.model]
        module, cls = path.rsplit(".", 1)
        kwargs = {**defaults, **self.params}
        if self.model in _SEEDED and self.random_state is not None:
            kwargs.setdefault("random_state", self.random_state)
        return getattr(importlib.import_module(module), cls)(**kwargs)

    def fit(self, X, y) -> FitnessPredictor:
        """Learn from mappings ``X`` ``[n, n_nodes]`` and their fitnesses ``y`` ``[n]``."""
        X = np.atleast_2d(np.asarray(X, dtype=np.int64))
        y = np.asarray(y, dtype=float)
        if len(X) != len(y) or len(X) == 0:
            raise AutoplaceError(f"a fitness predictor needs one fitness per mapping ({len(X)} mappings, "
                                 f"{len(y)} fitnesses)")
        self.n_devices_ = self.n_devices if self.n_devices is not None else int(X.max()) + 1
        self.n_nodes_ = X.shape[1]
        self.scale_ = float(np.abs(y).max()) or 1.0          # fitnesses of 1e1–1e4: scaled to about 1
        self.estimator_ = self._estimator()
        features = one_hot(X, self.n_devices_)
        # the columns the mappings vary in; for a linear model less each node's first device (its column
        # is one minus the others': collinear columns break LARS)
        self.columns_ = features.min(0) != features.max(0)
        if self.model in _LINEAR:
            self.columns_[::self.n_devices_] = False
        if len(X) == 1 or np.ptp(y) == 0 or not self.columns_.any():      # nothing to learn: a constant
            self.constant_ = float(y.mean())
        else:
            self.constant_ = None
            self.estimator_.fit(features[:, self.columns_], y / self.scale_)
        return self

    def predict(self, X) -> np.ndarray:
        """The predicted fitness of each mapping of ``X`` ``[n, n_nodes]``."""
        if not hasattr(self, "estimator_"):
            raise AutoplaceError("the fitness predictor is used before fit()")
        X = np.atleast_2d(np.asarray(X, dtype=np.int64))
        if X.shape[1] != self.n_nodes_:
            raise AutoplaceError(f"mappings of {X.shape[1]} nodes; the predictor was fitted on {self.n_nodes_}")
        if self.constant_ is not None:
            return np.full(len(X), self.constant_)
        return self.estimator_.predict(one_hot(X, self.n_devices_)[:, self.columns_]) * self.scale_

    def score(self, X, y) -> float:
        """``1 -`` the normalised Kendall tau distance of the predictions of ``X`` to ``y`` (1: same order)."""
        return 1.0 - kendall_tau_distance(y, self.predict(X))


def kendall_tau_distance(actual, predicted) -> float:
    """The normalised Kendall tau rank distance (HTF-MPR eq. 1–2): over the ``n (n - 1) / 2`` pairs ``i < j``,
    the mean of ``K(i, j)``: 1 where ``(f_i - f_j)`` and ``(f̂_i - f̂_j)`` have opposite signs, 0 where the same,
    and ½ where one side ties and the other does not (Fagin et al.'s penalty ``p = ½``; eq. 1 as printed
    counts such a pair 0, which would rank a constant predictor perfect). 0: the same ranking; 1:
    reversed; about ½: no better than chance, as a constant predictor."""
    f = np.asarray(actual, dtype=float)
    g = np.asarray(predicted, dtype=float)
    if f.shape != g.shape or f.ndim != 1:
        raise AutoplaceError(f"kendall_tau_distance needs two lists of one length ({f.shape}, {g.shape})")
    n = len(f)
    if n < 2:
        return 0.0
    i, j = np.triu_indices(n, k=1)
    a, b = np.sign(f[i] - f[j]), np.sign(g[i] - g[j])
    k = np.where(a * b < 0, 1.0, np.where(a == b, 0.0, 0.5))     # opposite, same, one-sided tie
    return float(k.sum() / (n * (n - 1) / 2))


def cross_validate(predictor: FitnessPredictor, X, y, *, k: int = 5, seed: int = 0) -> np.ndarray:
    """k-fold cross-validation (§III-F.2): the mappings shuffled with ``seed`` and split into ``k``
    partitions; each is the validation set once, the predictor fitted on the others. The ``k`` Kendall
    tau distances of the validation sets."""
    X = np.atleast_2d(np.asarray(X, dtype=np.int64))
    y = np.asarray(y, dtype=float)
    if not 2 <= k <= len(X):
        raise AutoplaceError(f"{k}-fold cross-validation needs at least {k} mappings, got {len(X)}")

    order = np.random.default_rng(seed).permutation(len(X))
    folds = np.array_split(order, k)
    out = []
    with warnings.catch_warnings():          # LARS / OMP on one-hot features warn of degenerate regressors
        warnings.simplefilter("ignore")
        for f in folds:
            train = np.setdiff1d(order, f)
            p = FitnessPredictor(**predictor.get_params()).fit(X[train], y[train])
            out.append(kendall_tau_distance(y[f], p.predict(X[f])))
    return np.array(out)


def compare_models(X, y, *, n_devices: int | None = None, models=tuple(MODELS), k: int = 5, runs: int = 5,
                   seed: int = 0) -> dict[str, tuple[float, float, int]]:
    """The paper's Figure 8: per model, ``(mean, std, failed)`` — the mean and (population) standard
    deviation over ``runs`` runs (each a differently shuffled ``k``-fold cross-validation) of the mean
    Kendall tau distance over the folds, and how many runs failed (a fold whose fit raised: LARS on
    degenerate one-hot columns); the failed runs are left out of the mean, which is ``nan`` if all failed."""
    out = {}
    for name in models:
        per_run, failed = [], 0
        for r in range(runs):
            try:
                per_run.append(float(cross_validate(FitnessPredictor(name, n_devices=n_devices, random_state=seed + r),
                                                    X, y, k=k, seed=seed + r).mean()))
            except (ValueError, FloatingPointError, np.linalg.LinAlgError):
                failed += 1
        out[name] = ((float(np.mean(per_run)), float(np.std(per_run)), failed) if per_run
                     else (float("nan"), float("nan"), failed))
    return out

