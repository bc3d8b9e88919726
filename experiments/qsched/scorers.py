"""Data and scorers of the Q-Sched experiment (sklearn digits, all offline, pure JAX scorers).

* alignment: log-probability of the prompt's class under a logistic-regression classifier with
  temperature ``T`` (``log_softmax(logits / T)[y]``);
* quality (reference-free): ``-0.5 * Mahalanobis^2 / S`` of S simple image statistics (ink
  mean / spread, mean absolute horizontal and vertical gradients, mean absolute Laplacian,
  mid-tone mass ``mean(ink (1 - ink))``, fourth moment) under a Gaussian fitted on real
  training images. Blur lowers the gradients and raises the mid-tone mass, so blurred digits
  score *lower* than real ones; the run checks this (``quality/blurred < quality/real``);
* FID: Frechet distance in the 64-d penultimate features of an sklearn MLP classifier trained
  on the held-out rows, against the training rows. No calibration step sees it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["load_digits", "image_stats", "fit_quality", "fit_alignment", "fit_fid_features",
           "frechet", "feature_stats", "blur"]


def load_digits(test_fraction: float, seed: int):
    """(x_train [N, 64] in [-1, 1], y_train, x_heldout, y_heldout) as numpy arrays.

    ``seed`` decides the train / held-out split (the run derives it from its key).
    """
    from jaxpapers.core.data import load_sklearn

    ds = load_sklearn("digits", test_fraction=test_fraction, seed=seed, standardize=False)
    return (ds.x_train / 8.0 - 1.0, ds.y_train, ds.x_test / 8.0 - 1.0, ds.y_test)


def image_stats(x: jax.Array) -> jax.Array:
    """[..., 64] images in [-1, 1] -> [..., 7] statistics (see the module docstring)."""
    img = x.reshape(x.shape[:-1] + (8, 8))
    ink = (img + 1.0) / 2.0
    gx = img[..., :, 1:] - img[..., :, :-1]
    gy = img[..., 1:, :] - img[..., :-1, :]
    lap = (4.0 * img[..., 1:-1, 1:-1] - img[..., :-2, 1:-1] - img[..., 2:, 1:-1]
           - img[..., 1:-1, :-2] - img[..., 1:-1, 2:])
    red = (-2, -1)
    return jnp.stack([ink.mean(red), ink.std(red), jnp.abs(gx).mean(red), jnp.abs(gy).mean(red),
                      jnp.abs(lap).mean(red), (ink * (1.0 - ink)).mean(red),
                      (ink ** 4).mean(red)], axis=-1)


def fit_quality(x_real: np.ndarray):
    """Gaussian on the image statistics of real images -> pure ``quality(images) -> [B]``."""
    f = np.asarray(image_stats(jnp.asarray(x_real)), np.float64)
    mu = f.mean(0)
    cov = np.cov(f, rowvar=False)
    cov += 1e-4 * np.trace(cov) / cov.shape[0] * np.eye(cov.shape[0])
    prec = jnp.asarray(np.linalg.inv(cov), jnp.float32)
    mu = jnp.asarray(mu, jnp.float32)
    s = float(f.shape[1])

    def quality(images):
        d = image_stats(images) - mu
        return -0.5 * jnp.einsum("...i,ij,...j->...", d, prec, d) / s

    return quality


def fit_alignment(x: np.ndarray, y: np.ndarray, temperature: float):
    """Logistic regression -> pure ``align(images, labels) -> [B]`` tempered log-probabilities."""
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=0.5, max_iter=3000).fit(x, y)
    w = jnp.asarray(clf.coef_.T, jnp.float32)
    b = jnp.asarray(clf.intercept_, jnp.float32)

    def align(images, labels):
        logp = jax.nn.log_softmax((images @ w + b) / temperature, axis=-1)
        return jnp.take_along_axis(logp, labels[:, None], axis=-1)[:, 0]

    return align, float(clf.score(x, y))


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


def blur(x: jax.Array) -> jax.Array:
    """[1, 2, 1] / 4 separable blur of [..., 64] images (edge-replicated)."""
    img = x.reshape(x.shape[:-1] + (8, 8))
    p = jnp.pad(img, [(0, 0)] * (img.ndim - 2) + [(1, 1), (1, 1)], mode="edge")
    h = 0.25 * p[..., :, :-2] + 0.5 * p[..., :, 1:-1] + 0.25 * p[..., :, 2:]
    v = 0.25 * h[..., :-2, :] + 0.5 * h[..., 1:-1, :] + 0.25 * h[..., 2:, :]
    return v.reshape(x.shape)
