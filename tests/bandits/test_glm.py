import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.bandits import LOGISTIC, PROBIT, fit_glm_mle, glm_nll
from jaxpapers.bandits.glm import pad_rows


@pytest.mark.parametrize("link", [LOGISTIC, PROBIT])
def test_mle_is_stationary_and_masks(key, x64, link):
    """Float64: gradient of the regularised loss vanishes at the fit; rows >= n are ignored."""
    kx, ky, kt = jax.random.split(key, 3)
    t, dim, n, reg = pad_rows(600), 4, 537, 0.3
    x = jax.random.normal(kx, (t, dim)) / 2
    theta_true = jnp.array([1.0, -2.0, 0.5, 0.0])
    y = jax.random.bernoulli(ky, link.mean(x @ theta_true)).astype(x.dtype)
    x_garbage = x.at[n:].set(jax.random.normal(kt, (t - n, dim)) * 50)
    th = fit_glm_mle(link, x_garbage, y, n, jnp.zeros(dim), reg, num_iters=15)
    loss = lambda th: jnp.sum(glm_nll(link, x[:n] @ th, y[:n])) + reg / 2 * th @ th
    assert float(jnp.max(jnp.abs(jax.grad(loss)(th)))) < 1e-8
    # numpy Newton reference (logistic closed-form Hessian)
    if link is LOGISTIC:
        xn, yn, w = np.asarray(x[:n]), np.asarray(y[:n]), np.zeros(dim)
        for _ in range(30):
            p = 1 / (1 + np.exp(-xn @ w))
            g = xn.T @ (p - yn) + reg * w
            h = (xn * (p * (1 - p))[:, None]).T @ xn + reg * np.eye(dim)
            w = w - np.linalg.solve(h, g)
        np.testing.assert_allclose(th, w, atol=1e-9)


def test_mle_zero_rows_is_ridge_solution(key):
    th = fit_glm_mle(LOGISTIC, jnp.ones((256, 3)), jnp.ones(256), 0, jnp.ones(3), 1.0)
    np.testing.assert_allclose(th, 0.0, atol=1e-6)


def test_mle_chunk_multiple():
    with pytest.raises(ValueError, match="multiple of chunk"):
        fit_glm_mle(LOGISTIC, jnp.ones((100, 3)), jnp.ones(100), 5, jnp.zeros(3), 1.0)
