"""The sklearn digits shared by the digit experiments (qsched, fedpdg, later tdm_r1).

* :func:`load_digits`: 8 x 8 images scaled to [-1, 1] with a seeded train / held-out split;
* Frechet distance in classifier features: :func:`fit_fid_features` trains an sklearn MLP
  classifier and returns its penultimate-layer features as a pure JAX function;
  :func:`feature_stats` and :func:`frechet` compare feature sets (FID's formula).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["load_digits", "fit_fid_features", "frechet", "feature_stats"]


def load_digits(test_fraction: float, seed: int):
    """(x_train [N, 64] in [-1, 1], y_train, x_heldout, y_heldout) as numpy arrays.

    ``seed`` decides the train / held-out split (the run derives it from its key).
    """
    from jaxpapers.core.data import load_sklearn

    ds = load_sklearn("digits", test_fraction=test_fraction, seed=seed, standardize=False)
    return (ds.x_train / 8.0 - 1.0, ds.y_train, ds.x_test / 8.0 - 1.0, ds.y_test)


def fit_fid_features(x: np.ndarray, y: np.ndarray, seed: int, max_iter: int = 500):
    """MLP classifier on held-out rows -> pure ``features(images) -> [B, 64]`` (and its acc.)."""
    from sklearn.neural_network import MLPClassifier

    import warnings

    from sklearn.exceptions import ConvergenceWarning

    clf = MLPClassifier(hidden_layer_sizes=(128, 64), max_iter=max_iter, random_state=seed)
    with warnings.catch_warnings():  # short fits (tiny configs) stop early on purpose
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(x, y)
    ws = [jnp.asarray(w, jnp.float32) for w in clf.coefs_[:2]]
    bs = [jnp.asarray(b, jnp.float32) for b in clf.intercepts_[:2]]

    def features(images):
        h = jax.nn.relu(images @ ws[0] + bs[0])
        return jax.nn.relu(h @ ws[1] + bs[1])

    return features, clf


def frechet(f1: np.ndarray, f2_stats) -> float:
    """FID between features [N, F] and reference (mu, cov)."""
    from scipy import linalg

    f1 = np.asarray(f1, np.float64)
    mu1, c1 = f1.mean(0), np.cov(f1, rowvar=False)
    mu2, c2 = f2_stats
    # ReLU features that never fire make the covariances singular; a tiny ridge keeps sqrtm
    # well defined (the usual FID fix) and changes the distance by O(1e-6)
    eye = 1e-6 * np.eye(c1.shape[0])
    covmean = linalg.sqrtm((c1 + eye) @ (c2 + eye))
    covmean = np.real(covmean)
    return float(np.sum((mu1 - mu2) ** 2) + np.trace(c1 + c2 - 2.0 * covmean))


def feature_stats(f: np.ndarray):
    f = np.asarray(f, np.float64)
    return f.mean(0), np.cov(f, rowvar=False)
