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

from experiments.common.digits import (feature_stats, fit_fid_features, frechet,  # noqa: F401
                                       load_digits)

__all__ = ["load_digits", "image_stats", "fit_quality", "fit_alignment", "fit_fid_features",
           "frechet", "feature_stats", "blur"]


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


def blur(x: jax.Array) -> jax.Array:
    """[1, 2, 1] / 4 separable blur of [..., 64] images (edge-replicated)."""
    img = x.reshape(x.shape[:-1] + (8, 8))
    p = jnp.pad(img, [(0, 0)] * (img.ndim - 2) + [(1, 1), (1, 1)], mode="edge")
    h = 0.25 * p[..., :, :-2] + 0.5 * p[..., :, 1:-1] + 0.25 * p[..., :, 2:]
    v = 0.25 * h[..., :-2, :] + 0.5 * h[..., 1:-1, :] + 0.25 * h[..., 2:, :]
    return v.reshape(x.shape)
