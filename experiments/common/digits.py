"""The sklearn digits shared by the digit experiments (qsched, fedpdg, later tdm_r1).

* :func:`load_digits`: 8 x 8 images scaled to [-1, 1] with a seeded train / held-out split;
* Frechet distance in classifier features: :func:`fit_fid_features` trains an sklearn MLP
  classifier and returns its penultimate-layer features as a pure JAX function;
  :func:`feature_stats` and :func:`frechet` compare feature sets (FID's formula);
* :func:`trained_denoisers`: the class-conditional EDM teacher (and optionally its consistency
  student) trained on given rows, cached with orbax under ``$JAXPAPERS_CACHE/digits`` (default
  ``~/.cache/jaxpapers/digits``) keyed by the data, the recipe and the keys.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["load_digits", "fit_mlp_classifier", "fit_fid_features", "frechet", "feature_stats", "trained_denoisers",
           "DIM", "NUM_CLASSES"]

DIM = 64  # 8 x 8 pixels
NUM_CLASSES = 10


def load_digits(test_fraction: float, seed: int):
    """(x_train [N, 64] in [-1, 1], y_train, x_heldout, y_heldout) as numpy arrays.

    ``seed`` decides the train / held-out split (the run derives it from its key).
    """
    from jaxpapers.core.data import load_sklearn

    ds = load_sklearn("digits", test_fraction=test_fraction, seed=seed, standardize=False)
    return (ds.x_train / 8.0 - 1.0, ds.y_train, ds.x_test / 8.0 - 1.0, ds.y_test)


def fit_mlp_classifier(x: np.ndarray, y: np.ndarray, *, hidden: tuple[int, ...], max_iter: int,
                       seed: int):
    """An sklearn ``MLPClassifier`` (relu) fitted on (x, y), convergence warnings silenced.

    Fitted with one BLAS thread: these small matrices gain nothing from more, and OpenBLAS's
    spinning threads on 2 busy cores made a fit ~30x slower (18 s vs 0.6 s, measured 2026-12-02).
    """
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from threadpoolctl import threadpool_limits

    clf = MLPClassifier(hidden_layer_sizes=tuple(hidden), max_iter=max_iter, random_state=seed)
    with warnings.catch_warnings(), threadpool_limits(limits=1, user_api="blas"):
        warnings.simplefilter("ignore", ConvergenceWarning)  # tiny configs stop early on purpose
        clf.fit(x, y)
    return clf


def fit_fid_features(x: np.ndarray, y: np.ndarray, seed: int, max_iter: int = 500):
    """MLP classifier on held-out rows -> pure ``features(images) -> [B, 64]`` (and its acc.)."""
    clf = fit_mlp_classifier(x, y, hidden=(128, 64), max_iter=max_iter, seed=seed)
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


_FORMAT = 1  # bump when the recipe below changes


def trained_denoisers(key_model, x: np.ndarray, y: np.ndarray, *, hidden: int, depth: int,
                      train_steps: int, batch_size: int, learning_rate: float,
                      sigma_data: float = 0.5, key_distill=None, distill_steps: int = 0,
                      sigma_min: float = 0.002, sigma_max: float = 20.0, rho: float = 7.0,
                      cache: bool = True) -> dict:
    """The EDM teacher on (x, y), and its consistency student when ``distill_steps > 0``.

    Teacher: ``init_mlp(key_model)`` trained by ``train_edm`` with ``fold_in(key_model, 1)``;
    student: ``distill_consistency(teacher, key_distill, ...)`` on the same rows (Karras grid
    ``sigma_min, sigma_max, rho``). The result is cached (orbax) keyed by the rows' digest,
    every setting and both keys, so the experiments that share a model train it once.

    Args:
      key_model, key_distill: ``jax.random.key``s (``key_distill`` needed with distillation).
      x: [N, 64] rows in [-1, 1]; y: [N] labels 0..9.
      cache: False trains without reading or writing the cache.

    Returns:
      ``{"teacher": params, "train_loss": [train_steps]}`` plus ``"student"`` and
      ``"distill_loss": [distill_steps]`` when distilling, and ``"cached"`` (bool).
    """
    from jaxpapers import diffusion as dfn
    from jaxpapers.core import cache as core_cache

    if distill_steps > 0 and key_distill is None:
        raise ValueError("key_distill is required when distill_steps > 0")
    x = np.asarray(x, np.float32)
    y = np.asarray(y, np.int32)

    def init():
        return dfn.init_mlp(key_model, dim=DIM, num_classes=NUM_CLASSES, hidden=hidden,
                            depth=depth)

    def compute():
        params, losses = dfn.train_edm(init(), jax.random.fold_in(key_model, 1), x, y,
                                       num_steps=train_steps, batch_size=batch_size,
                                       learning_rate=learning_rate, sigma_data=sigma_data)
        out = {"teacher": params, "train_loss": jnp.asarray(losses, jnp.float32)}
        if distill_steps > 0:
            out["student"], dl = dfn.distill_consistency(
                params, key_distill, x, y, num_steps=distill_steps, batch_size=batch_size,
                sigma_min=sigma_min, sigma_max=sigma_max, rho=rho, sigma_data=sigma_data)
            out["distill_loss"] = jnp.asarray(dl, jnp.float32)
        return jax.block_until_ready(out), {}

    if not cache:
        return {**compute()[0], "cached": False}
    template = jax.eval_shape(init)
    like = {"teacher": template, "train_loss": jax.ShapeDtypeStruct((train_steps,), jnp.float32)}
    if distill_steps > 0:
        like["student"] = template
        like["distill_loss"] = jax.ShapeDtypeStruct((distill_steps,), jnp.float32)
    fingerprint = {"format": _FORMAT, "data": core_cache.array_digest(x, y), "hidden": hidden,
                   "depth": depth, "train_steps": train_steps, "batch_size": batch_size,
                   "learning_rate": learning_rate, "sigma_data": sigma_data,
                   "key_model": key_model, "distill_steps": distill_steps,
                   "key_distill": key_distill if distill_steps > 0 else None,
                   "sigma_min": sigma_min, "sigma_max": sigma_max, "rho": rho}
    tree, meta = core_cache.load_or_compute(core_cache.cache_root("digits"), fingerprint,
                                            compute, like=like)
    tree = jax.tree.map(jnp.asarray, tree)
    return {**tree, "cached": meta["cached"]}
