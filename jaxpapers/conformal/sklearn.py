"""scikit-learn style wrappers (for users coming from MAPIE): fit / conformalize / predict.

The estimators here are thin, mutable convenience shells around the pure functions of
:mod:`jaxpapers.conformal`; the calibrated state is an ordinary pytree (``self.state_``).

>>> import numpy as np
>>> from sklearn.linear_model import LinearRegression
>>> rng = np.random.default_rng(0)
>>> x = rng.normal(size=(300, 3)); y = x.sum(1) + rng.normal(size=300)
>>> reg = ConformalRegressor(LinearRegression(), alpha=0.1, method="split")
>>> reg = reg.fit(x[:200], y[:200]).conformalize(x[200:220], y[200:220])
>>> pred, lo, hi = reg.predict_interval(x[220:])
>>> bool(np.all(lo <= pred)) and bool(np.all(pred <= hi))
True
"""

from __future__ import annotations

import numpy as np

from jaxpapers.conformal.rsacp import (
    rsacp_calibrate,
    rsacp_half_width,
    rsacp_prediction_set,
)
from jaxpapers.conformal.split import split_conformal_quantile
from jaxpapers.core import checks

__all__ = ["oof_residual_reference", "oof_lac_reference", "ConformalRegressor",
           "ConformalClassifier"]

_METHODS = ("split", "rsacp")


def oof_residual_reference(estimator, x, y, *, cv: int = 5) -> np.ndarray:
    """Out-of-fold |residuals| of a clone of ``estimator`` on (x, y): reference scores.

    Args:
      estimator: an unfitted sklearn regressor. x: [N, D]. y: [N]. cv: folds.

    Returns:
      [N] reference scores (independent of any later calibration set).
    """
    from sklearn.model_selection import cross_val_predict

    oof = cross_val_predict(estimator, x, y, cv=cv)
    return np.abs(np.asarray(y, np.float64) - oof)


def oof_lac_reference(estimator, x, y, *, cv: int = 5) -> np.ndarray:
    """Out-of-fold LAC scores 1 - p_y of a clone of ``estimator``: reference scores."""
    from sklearn.model_selection import cross_val_predict

    probs = cross_val_predict(estimator, x, y, cv=cv, method="predict_proba")
    return 1.0 - probs[np.arange(len(y)), np.asarray(y)]


class _ConformalBase:
    """Shared constructor and ``fit`` of the sklearn-style wrappers."""

    def __init__(self, estimator, *, alpha: float = 0.1, method: str = "rsacp",
                 beta: float = 0.4, reference="oof", guard: bool = False, prefit: bool = False):
        checks.check_choice("method", method, _METHODS)
        checks.check_level("alpha", alpha)
        self.estimator, self.alpha, self.method, self.beta = estimator, alpha, method, beta
        self.reference, self.guard, self.prefit = reference, guard, prefit
        self.reference_scores_ = None if isinstance(reference, str) else np.asarray(reference)

    def _oof_reference(self, estimator, x, y):
        raise NotImplementedError

    def fit(self, x, y):
        from sklearn.base import clone

        if self.method == "rsacp" and isinstance(self.reference, str):
            if self.reference != "oof":
                raise ValueError(f"reference must be 'oof' or an array, got {self.reference!r}")
            self.reference_scores_ = self._oof_reference(clone(self.estimator), x, y)
        if not self.prefit:
            self.estimator.fit(x, y)
        return self


class ConformalRegressor(_ConformalBase):
    """Split CP or RSA-CP intervals around any sklearn regressor (absolute-residual score).

    Args:
      estimator: sklearn regressor. alpha: miscoverage in (0, 1). method: "split" | "rsacp".
      beta: RSA-CP window level. reference: "oof" (out-of-fold residuals on the training
        data, computed in :meth:`fit`) or an array of reference scores. guard: RSA-CP
        split-CP floor (restores coverage >= 1 - alpha, no shortening). prefit: the
        estimator is already fitted (then ``reference`` must be an array).
    """

    def _oof_reference(self, estimator, x, y):
        return oof_residual_reference(estimator, x, y)

    def conformalize(self, x_cal, y_cal):
        y_cal = np.asarray(y_cal, np.float64)
        if len(y_cal) != len(x_cal):
            raise ValueError(f"x_cal and y_cal must have the same length, got {len(x_cal)} "
                             f"and {len(y_cal)}")
        scores = np.abs(y_cal - self.estimator.predict(x_cal))
        if self.method == "split":
            self.half_width_ = float(split_conformal_quantile(scores, self.alpha))
        else:
            if self.reference_scores_ is None:
                raise ValueError("reference scores missing: call fit() or pass an array")
            self.state_ = rsacp_calibrate(scores, self.reference_scores_, alpha=self.alpha,
                                          beta=self.beta, guard=self.guard)
            self.half_width_ = float(rsacp_half_width(self.state_))
        return self

    def predict(self, x):
        return self.estimator.predict(x)

    def predict_interval(self, x):
        """Returns (prediction [n], lower [n], upper [n])."""
        pred = np.asarray(self.estimator.predict(x), np.float64)
        return pred, pred - self.half_width_, pred + self.half_width_


class ConformalClassifier(_ConformalBase):
    """Split CP or RSA-CP prediction sets around any sklearn classifier (LAC score 1 - p_y).

    Args: as :class:`ConformalRegressor`; ``reference="oof"`` uses out-of-fold LAC scores.
    """

    def _oof_reference(self, estimator, x, y):
        return oof_lac_reference(estimator, x, y)

    def conformalize(self, x_cal, y_cal):
        y_cal = np.asarray(y_cal)
        probs = self.estimator.predict_proba(x_cal)
        if len(y_cal) != len(probs):
            raise ValueError(f"x_cal and y_cal must have the same length, got {len(probs)} "
                             f"and {len(y_cal)}")
        scores = 1.0 - probs[np.arange(len(y_cal)), y_cal]
        if self.method == "split":
            self.threshold_ = float(split_conformal_quantile(scores, self.alpha))
        else:
            self.state_ = rsacp_calibrate(scores, self.reference_scores_, alpha=self.alpha,
                                          beta=self.beta, guard=self.guard)
        return self

    def predict(self, x):
        return self.estimator.predict(x)

    def predict_set(self, x):
        """[n, K] boolean membership of each class in the prediction set."""
        cand = 1.0 - np.asarray(self.estimator.predict_proba(x))
        if self.method == "split":
            return cand <= self.threshold_
        return np.asarray(rsacp_prediction_set(self.state_, cand))
