"""sklearn wrappers: the split CP threshold equals the functional API; bad input."""

from __future__ import annotations


import numpy as np
import pytest
from sklearn.linear_model import LinearRegression, LogisticRegression

from jaxpapers import conformal as cp
from jaxpapers.conformal.sklearn import ConformalClassifier, ConformalRegressor


def test_regressor_matches_functional_api(x64):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 3))
    y = x @ np.array([1.0, -2.0, 0.5]) + rng.standard_t(3, size=400)
    split = ConformalRegressor(LinearRegression(), alpha=0.1, method="split")
    split.fit(x[:200], y[:200]).conformalize(x[200:230], y[200:230])
    res = np.abs(y[200:230] - split.estimator.predict(x[200:230]))
    assert split.half_width_ == float(cp.split_conformal_quantile(res, 0.1))
    rsa = ConformalRegressor(LinearRegression(), alpha=0.1, method="rsacp")
    rsa.fit(x[:200], y[:200]).conformalize(x[200:230], y[200:230])
    st = cp.rsacp_calibrate(res, rsa.reference_scores_, alpha=0.1, beta=0.4)
    assert rsa.half_width_ == pytest.approx(float(cp.rsacp_half_width(st)), rel=1e-12)
    pred, lo, hi = rsa.predict_interval(x[230:])
    np.testing.assert_allclose(hi - lo, 2 * rsa.half_width_)


def test_classifier_sets_contain_threshold_classes():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(600, 4))
    y = (x[:, 0] + 0.5 * rng.normal(size=600) > 0).astype(int) + (x[:, 1] > 1).astype(int)
    clf = ConformalClassifier(LogisticRegression(max_iter=500), alpha=0.1, method="split")
    clf.fit(x[:300], y[:300]).conformalize(x[300:340], y[300:340])
    sets = clf.predict_set(x[340:])
    probs = clf.estimator.predict_proba(x[340:])
    np.testing.assert_array_equal(sets, 1.0 - probs <= clf.threshold_)
    rsa = ConformalClassifier(LogisticRegression(max_iter=500), alpha=0.1, method="rsacp")
    rsa.fit(x[:300], y[:300]).conformalize(x[300:340], y[300:340])
    assert rsa.predict_set(x[340:]).shape == probs.shape


def test_bad_arguments():
    with pytest.raises(ValueError, match="alpha"):
        ConformalRegressor(LinearRegression(), alpha=1.0)
    with pytest.raises(ValueError, match="method"):
        ConformalRegressor(LinearRegression(), method="cqr")
