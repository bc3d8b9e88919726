"""The definition of correct for sparse GEMV (pure jnp, fp32 or float64 accumulation).

TEAL-style activation sparsity (training-free magnitude thresholding of the hidden states, used
by SPON, arXiv 2512.12744): entries of ``x`` with ``|x| <= threshold`` are dropped before the
product with a weight ``w``, so rows of ``w`` whose activation is zero need not be read::

    y[b, n] = sum_k where(|x[b, k]| > tau, x[b, k], 0) * w[k, n]  (+ bias[n])

Dtypes: the comparison and the accumulation happen in the accumulation dtype (float64 when
``x`` or ``w`` is float64, else float32; upcasting bf16 / f16 / f32 is exact, so every
implementation keeps exactly the same entries); the result is cast to
``jnp.result_type(x, w)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["sparse_gemv_reference", "accumulation_dtype", "keep_mask", "threshold_for_sparsity"]

_HIGHEST = jax.lax.Precision.HIGHEST


def accumulation_dtype(*dtypes) -> np.dtype:
    """float64 if any of ``dtypes`` is float64, else float32."""
    return np.dtype(np.float64 if any(np.dtype(d) == np.float64 for d in dtypes)
                    else np.float32)


def keep_mask(x: jax.Array, threshold, acc_dtype) -> jax.Array:
    """``|x| > threshold`` compared in ``acc_dtype`` (bool, x's shape).

    ``threshold = 0`` keeps exactly the nonzero entries; NaN entries of ``x`` are dropped.
    """
    tau = jnp.asarray(threshold).astype(acc_dtype)
    return jnp.abs(jnp.asarray(x).astype(acc_dtype)) > tau


def sparse_gemv_reference(x: jax.Array, w: jax.Array, threshold, *,
                          bias: jax.Array | None = None) -> jax.Array:
    """``where(|x| > threshold, x, 0) @ w (+ bias)`` upcast first, accumulated at full precision.

    Args:
      x: [B, K] or [K] floating activations.
      w: [K, N] floating weight.
      threshold: scalar ``tau >= 0`` (may be traced). ``tau = 0`` keeps every nonzero entry.
      bias: optional [N], added in the accumulation dtype before the final cast.

    Returns:
      [B, N] (or [N] for 1-D ``x``) in ``jnp.result_type(x, w)``.

    >>> import jax.numpy as jnp
    >>> x = jnp.array([[0.5, -2.0, 0.1]])
    >>> w = jnp.arange(6.0).reshape(3, 2)
    >>> sparse_gemv_reference(x, w, 0.3).tolist()   # 0.1 is dropped: 0.5 * [0, 1] - 2 * [2, 3]
    [[-4.0, -5.5]]
    """
    x, w = jnp.asarray(x), jnp.asarray(w)
    acc = accumulation_dtype(x.dtype, w.dtype)
    xa = x.astype(acc)
    xm = jnp.where(keep_mask(xa, threshold, acc), xa, jnp.zeros((), acc))
    y = jnp.matmul(xm, w.astype(acc), precision=_HIGHEST)
    if bias is not None:
        y = y + jnp.asarray(bias).astype(acc)
    return y.astype(jnp.result_type(x.dtype, w.dtype))


def threshold_for_sparsity(x: jax.Array, sparsity: float) -> jax.Array:
    """The threshold that drops a fraction ``sparsity`` of ``x``'s entries: the empirical
    ``sparsity``-quantile of ``|x|`` in float32 (0 for ``sparsity = 0``).

    TEAL calibrates one such threshold per layer from a sample of hidden states; for
    standard-normal ``x`` it approaches ``sqrt(2) * erfinv(sparsity)``.
    """
    if sparsity <= 0:
        return jnp.zeros((), jnp.float32)
    return jnp.quantile(jnp.abs(jnp.asarray(x).astype(jnp.float32)), sparsity)
