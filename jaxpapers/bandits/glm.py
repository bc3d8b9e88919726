"""GLM link functions and a static-shape, masked maximum-likelihood fit.

Letters: T buffer length (rows), D feature dimension (N * d for a flattened slate).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import log_ndtr, ndtr

from jaxpapers.core import checks

__all__ = ["Link", "LOGISTIC", "PROBIT", "get_link", "glm_nll", "fit_glm_mle"]


class Link(NamedTuple):
    """A GLM inverse link ``mu`` with its derivative and log-likelihood pieces.

    Attributes:
      name: "logistic" or "probit".
      mean: z -> mu(z), the expected reward of a linear score z.
      dmean: z -> mu'(z).
      log_mean: z -> log mu(z) (numerically stable).
      log_one_minus_mean: z -> log(1 - mu(z)).
      max_dmean: sup_z mu'(z) (1/4 logistic, 1/sqrt(2 pi) probit).
    """

    name: str
    mean: Callable[[jax.Array], jax.Array]
    dmean: Callable[[jax.Array], jax.Array]
    log_mean: Callable[[jax.Array], jax.Array]
    log_one_minus_mean: Callable[[jax.Array], jax.Array]
    max_dmean: float


def _sig_d(z):
    s = jax.nn.sigmoid(z)
    return s * (1.0 - s)


def _probit_d(z):
    return jnp.exp(-0.5 * z * z) / jnp.sqrt(2.0 * jnp.pi)


LOGISTIC = Link("logistic", jax.nn.sigmoid, _sig_d, jax.nn.log_sigmoid,
                lambda z: jax.nn.log_sigmoid(-z), 0.25)
PROBIT = Link("probit", ndtr, _probit_d, log_ndtr, lambda z: log_ndtr(-z),
              float(1.0 / (2.0 * 3.141592653589793) ** 0.5))


def get_link(name: str) -> Link:
    """The :class:`Link` called ``name`` ("logistic" or "probit"); ValueError otherwise."""
    if name == "logistic":
        return LOGISTIC
    if name == "probit":
        return PROBIT
    raise ValueError(f"link must be 'logistic' or 'probit', got {name!r}")


def glm_nll(link: Link, z: jax.typing.ArrayLike, y: jax.typing.ArrayLike) -> jax.Array:
    """Bernoulli negative log-likelihood -y log mu(z) - (1-y) log(1-mu(z)), elementwise."""
    z = jnp.asarray(z)
    y = jnp.asarray(y, z.dtype)
    return -(y * link.log_mean(z) + (1.0 - y) * link.log_one_minus_mean(z))


def _grad_weight(link: Link, z, y):
    """d nll / dz and d^2 nll / dz^2 (exact for both links)."""
    if link.name == "logistic":
        m = jax.nn.sigmoid(z)
        return m - y, m * (1.0 - m)
    # probit: nll' = -y phi/Phi + (1-y) phi/(1-Phi); use log-space ratios for stability.
    lphi = -0.5 * z * z - 0.5 * jnp.log(2.0 * jnp.pi)
    r1 = jnp.exp(lphi - log_ndtr(z))      # phi / Phi(z)
    r0 = jnp.exp(lphi - log_ndtr(-z))     # phi / (1 - Phi(z))
    g = -y * r1 + (1.0 - y) * r0
    h = y * r1 * (z + r1) + (1.0 - y) * r0 * (r0 - z)
    return g, h


def fit_glm_mle(link: Link, x: jax.Array, y: jax.Array, num_valid: jax.Array,
                theta0: jax.Array, reg: jax.typing.ArrayLike, *, num_iters: int = 8,
                chunk: int = 256) -> jax.Array:
    """Regularised GLM maximum likelihood on the first ``num_valid`` rows of a static buffer.

    Minimises  sum_{s < n} nll(<x_s, theta>, y_s) + reg/2 ||theta||^2  (the RS-GLinCB/B-GLinCB
    MLE, e.g. RS-GLinCB Alg. 1 "theta_tau <- argmin L(theta)") by ``num_iters`` Newton steps from
    ``theta0``. Rows at index >= ``num_valid`` are ignored, and the cost is proportional to
    ``num_valid`` (a ``while_loop`` over chunks of ``chunk`` rows), so a refit early in a run is
    cheap although the buffer has the static length T. Unbatched.

    Args:
      link: the GLM link.
      x: [T, D] features; T must be a multiple of ``chunk`` (see :func:`pad_rows`).
      y: [T] rewards in {0, 1} (or [0, 1]).
      num_valid: int scalar n <= T.
      theta0: [D] starting point.
      reg: ridge coefficient (> 0 keeps the Hessian positive definite).
      num_iters: static number of Newton steps.
      chunk: static rows per accumulation chunk.

    Returns:
      [D] the estimate; if a Newton step produces a non-finite value the previous iterate is kept.

    >>> import jax, jax.numpy as jnp
    >>> x = jnp.ones((256, 1)); y = jnp.concatenate([jnp.ones(192), jnp.zeros(64)])
    >>> th = fit_glm_mle(LOGISTIC, x, y, 256, jnp.zeros(1), 1e-6)
    >>> round(float(jax.nn.sigmoid(th[0])), 3)
    0.75
    """
    t_len, dim = x.shape
    if t_len % chunk:
        raise ValueError(f"x rows ({t_len}) must be a multiple of chunk ({chunk})")
    num_valid = jnp.asarray(num_valid, jnp.int32)
    num_chunks = (num_valid + chunk - 1) // chunk
    eye = jnp.eye(dim, dtype=x.dtype)

    def newton(_, theta):
        def body(c, carry):
            g, h = carry
            xs = jax.lax.dynamic_slice_in_dim(x, c * chunk, chunk, 0)
            ys = jax.lax.dynamic_slice_in_dim(y, c * chunk, chunk, 0)
            mask = (c * chunk + jnp.arange(chunk)) < num_valid
            gz, hz = _grad_weight(link, xs @ theta, ys)
            gz = jnp.where(mask, gz, 0.0)
            hz = jnp.where(mask, hz, 0.0)
            return g + xs.T @ gz, h + (xs * hz[:, None]).T @ xs

        g, h = jax.lax.fori_loop(0, num_chunks, body,
                                 (reg * theta, reg * eye))
        step = jnp.linalg.solve(h, g)
        new = theta - step
        return jnp.where(jnp.all(jnp.isfinite(new)), new, theta)

    return jax.lax.fori_loop(0, num_iters, newton, theta0.astype(x.dtype))


def pad_rows(num_rows: int, chunk: int = 256) -> int:
    """The smallest multiple of ``chunk`` that is >= ``num_rows`` (buffer length for the MLE)."""
    return max(chunk, -(-num_rows // chunk) * chunk)


# ---- small linear-algebra helpers shared by the slate algorithms (private) ----

def sherman_morrison(a_inv: jax.Array, v: jax.Array, w: jax.typing.ArrayLike) -> jax.Array:
    """(A + w v v^T)^{-1} from A^{-1} [D, D], v [D], w >= 0 (rank-one Sherman-Morrison)."""
    av = a_inv @ v
    return a_inv - w * jnp.outer(av, av) / (1.0 + w * (v @ av))


def slot_sq_norms(contexts: jax.Array, mats: jax.Array) -> jax.Array:
    """||x_ij||^2_{M_i} for contexts [N, K, d] and per-slot matrices [N, d, d] -> [N, K]."""
    return jnp.maximum(jnp.einsum("nkd,nde,nke->nk", contexts, mats, contexts), 0.0)


def argmax_random_ties(key: jax.Array, scores: jax.Array,
                       valid: jax.Array | None = None) -> jax.Array:
    """Per-row argmax of scores [N, K] -> [N] int32, uniform among ties (Slate-GLM-OFU's
    ``find_slotwise_argmax`` randomises when all scores tie). Entries with ``valid`` [N, K]
    False are never chosen (each row needs one valid entry). ``key`` consumed."""
    if valid is not None:
        scores = jnp.where(valid, scores, -jnp.inf)
    best = jnp.max(scores, axis=1, keepdims=True)
    # Ties up to float rounding (relative 1e-6): equal-norm items otherwise tie-break by the
    # rounding of a particular fusion, so jit and eager would disagree.
    tie = scores >= best - 1e-6 * jnp.maximum(jnp.abs(best), 1e-6)
    u = jax.random.uniform(key, scores.shape)
    return jnp.argmax(jnp.where(tie, u, -1.0), axis=1).astype(jnp.int32)


def check_contexts(contexts, shape) -> None:
    """Eager boundary check of a contexts array [N, K, d] (ValueError naming ``contexts``)."""
    if checks.is_tracer(contexts):
        return
    c = jnp.asarray(contexts)
    if c.shape != tuple(shape):
        raise ValueError(f"contexts must have shape [N, K, d] = {tuple(shape)}, got {c.shape}")
    checks.check_finite("contexts", c)
