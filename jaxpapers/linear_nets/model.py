"""Deep linear networks with per-layer learning rates: init, forward, loss, gradients, GD steps.

Parameters are dicts: ``{"w1": [d, h], "w2": [h, h]}`` for the 2-layer net
``f(x) = x W1 W2 / h`` (output dim h), and ``{"w1": [d, h], "w2": [h, h], "a": [h, 1]}`` for the
3-layer net ``f(x) = x W1 W2 a / sqrt(h)`` (scalar output, ``a`` fixed during training).
Letters: n samples, d input dim, h width, k output dim (h for 2 layers, 1 for 3 layers).
The training loss is ``(1/2n) ||f(X) - Y||_F^2``; the test loss for ``x ~ N(0, I_d)`` and a
linear target ``x beta`` is ``E_x ||x (W_eff - beta)||^2 = ||W_eff - beta||_F^2`` with
``W_eff = W1 W2 / h`` (resp. ``W1 W2 a / sqrt(h)``).
"""

from __future__ import annotations

import math
from typing import Literal

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxpapers.core import checks
from jaxpapers.linear_nets import _checks

__all__ = [
    "haar",
    "init_params",
    "sample_problem",
    "effective_matrix",
    "forward",
    "loss",
    "gradients",
    "gd_step",
    "population_loss",
    "population_gd_step",
    "surrogate_step",
    "test_loss",
]

Params = dict[str, jax.Array]


def haar(key: jax.Array, rows: int, cols: int | None = None, dtype=None) -> jax.Array:
    """Haar-distributed matrix with orthonormal columns: QR of a Gaussian with the sign fix.

    ``Q R = G`` with ``G ~ N(0, 1)^{rows x cols}``; multiplying column j of Q by
    ``sign(R_jj)`` makes the law exactly Haar (Mezzadri 2007).

    Args:
      key: PRNG key, consumed.
      rows, cols: shape, ``rows >= cols`` (``cols`` defaults to ``rows``).
      dtype: float dtype (default float).

    Returns:
      ``Q`` of shape [rows, cols] with ``Q^T Q = I``.
    """
    cols = rows if cols is None else cols
    rows = _checks.check_int_width(rows, "rows")
    cols = _checks.check_int_width(cols, "cols")
    if rows < cols:
        raise ValueError(f"rows must be >= cols for orthonormal columns, got {rows} x {cols}")
    g = jax.random.normal(key, (rows, cols), dtype or jnp.result_type(float))
    q, r = jnp.linalg.qr(g)
    sign = jnp.sign(jnp.diagonal(r))
    return q * jnp.where(sign == 0, 1.0, sign)[None, :]


def init_params(key: jax.Array, d: int, h: int, *, layers: int = 2,
                kind: Literal["orthogonal", "gaussian"] = "orthogonal") -> Params:
    """Initial weights as in the official scripts.

    ``orthogonal``: W1 Haar with orthonormal columns [d, h] (needs d >= h), W2 Haar [h, h].
    ``gaussian``: W1 ~ N(0, 1/d), W2 ~ N(0, 1/h). 3 layers add the fixed ``a ~ N(0, I_h / h)``.

    Args:
      key: PRNG key, consumed. d, h: input dim and width. layers: 2 or 3.
      kind: "orthogonal" or "gaussian".

    Returns:
      ``{"w1": [d, h], "w2": [h, h]}`` (+ ``"a": [h, 1]`` for 3 layers).
    """
    _checks.check_layers_steps(layers, 1)
    d = _checks.check_int_width(d, "d")
    h = _checks.check_int_width(h, "h")
    checks.check_choice("kind", kind, ("orthogonal", "gaussian"))
    k1, k2, k3 = jax.random.split(key, 3)
    dt = jnp.result_type(float)
    if kind == "orthogonal":
        if d < h:
            raise ValueError(f"d must be >= h for orthonormal W1 columns, got d={d}, h={h}")
        params = {"w1": haar(k1, d, h), "w2": haar(k2, h, h)}
    else:
        params = {"w1": jax.random.normal(k1, (d, h), dt) / math.sqrt(d),
                  "w2": jax.random.normal(k2, (h, h), dt) / math.sqrt(h)}
    if layers == 3:
        params["a"] = jax.random.normal(k3, (h, 1), dt) / math.sqrt(h)
    return params


def sample_problem(key: jax.Array, n: int, d: int, h: int, *, layers: int = 2
                   ) -> tuple[Params, dict[str, jax.Array]]:
    """One draw of the official orthogonal setting: weights, data and target.

    ``X = sqrt(n) Q_x`` ([n, d], ``X^T X = n I``), ``Y = X beta``; 2 layers:
    ``beta = Q_b / sqrt(d)`` ([d, h], Haar columns); 3 layers: ``beta ~ N(0, I_d / h)`` ([d, 1]).

    Returns:
      ``(params, data)`` with ``data = {"x": [n, d], "y": [n, k], "beta": [d, k]}``.
    """
    _checks.check_layers_steps(layers, 1)
    n = _checks.check_int_width(n, "n")
    d = _checks.check_int_width(d, "d")
    h = _checks.check_int_width(h, "h")
    if n < d:
        raise ValueError(f"n must be >= d so that X^T X = n I, got n={n}, d={d}")
    k_w, k_x, k_b = jax.random.split(key, 3)
    params = init_params(k_w, d, h, layers=layers)
    x = math.sqrt(n) * haar(k_x, n, d)
    if layers == 2:
        beta = haar(k_b, d, h) / math.sqrt(d)
    else:
        beta = jax.random.normal(k_b, (d, 1), jnp.result_type(float)) / math.sqrt(h)
    return params, {"x": x, "y": x @ beta, "beta": beta}


def effective_matrix(params: Params) -> jax.Array:
    """``W1 W2 / h`` ([d, h]) or ``W1 W2 a / sqrt(h)`` ([d, 1])."""
    w1, w2 = params["w1"], params["w2"]
    h = w1.shape[1]
    if "a" in params:
        return w1 @ (w2 @ params["a"]) / math.sqrt(h)
    return w1 @ w2 / h


def forward(params: Params, x: ArrayLike) -> jax.Array:
    """Network output ``x W_eff``: [n, d] -> [n, k]. Unbatched over parameter sets."""
    _checks.check_params(params)
    return jnp.asarray(x) @ effective_matrix(params)


def _check_data(params, x, y):
    _checks.check_params(params)
    d, h = params["w1"].shape
    k = 1 if "a" in params else h
    if jnp.ndim(x) != 2 or jnp.shape(x)[1] != d:
        raise ValueError(f"x must have shape [n, {d}], got {jnp.shape(x)}")
    if jnp.shape(y) != (jnp.shape(x)[0], k):
        raise ValueError(f"y must have shape [{jnp.shape(x)[0]}, {k}], got {jnp.shape(y)}")


def loss(params: Params, x: ArrayLike, y: ArrayLike) -> jax.Array:
    """Training loss ``(1/2n) ||f(X) - Y||_F^2``. x: [n, d], y: [n, k]. Returns a scalar."""
    _check_data(params, x, y)
    r = forward(params, x) - y
    return 0.5 * jnp.sum(r**2) / x.shape[0]


def gradients(params: Params, x: ArrayLike, y: ArrayLike) -> Params:
    """Closed-form gradients of :func:`loss` (same pytree as ``params``).

    With ``G = X^T (f(X) - Y) / n`` ([d, k]):
    2 layers: ``dW1 = G W2^T / h``, ``dW2 = W1^T G / h``;
    3 layers: ``dW1 = G a^T W2^T / sqrt(h)``, ``dW2 = W1^T G a^T / sqrt(h)``,
    ``da = W2^T W1^T G / sqrt(h)``.
    """
    _check_data(params, x, y)
    x = jnp.asarray(x)
    w1, w2 = params["w1"], params["w2"]
    h = w1.shape[1]
    g = x.T @ (forward(params, x) - y) / x.shape[0]
    if "a" in params:
        a = params["a"]
        c = 1.0 / math.sqrt(h)
        return {"w1": c * g @ (w2 @ a).T, "w2": c * (w1.T @ g) @ a.T, "a": c * w2.T @ (w1.T @ g)}
    return {"w1": g @ w2.T / h, "w2": w1.T @ g / h}


def _apply(params, grads, eta1, eta2):
    out = {"w1": params["w1"] - eta1 * grads["w1"], "w2": params["w2"] - eta2 * grads["w2"]}
    if "a" in params:
        out["a"] = params["a"]  # fixed readout
    return out


def gd_step(params: Params, x: ArrayLike, y: ArrayLike, eta1: ArrayLike,
            eta2: ArrayLike) -> Params:
    """One simultaneous GD step with rate ``eta1`` on W1 and ``eta2`` on W2 (``a`` fixed)."""
    _checks.check_rates(eta1=eta1, eta2=eta2)
    return _apply(params, gradients(params, x, y), eta1, eta2)


def population_loss(params: Params, beta: ArrayLike) -> jax.Array:
    """``(1/2) ||W_eff - beta||_F^2``: equals :func:`loss` whenever ``X^T X = n I``, ``Y = X beta``."""
    _checks.check_params(params)
    return 0.5 * jnp.sum((effective_matrix(params) - beta) ** 2)


def population_gd_step(params: Params, beta: ArrayLike, eta1: ArrayLike,
                       eta2: ArrayLike) -> Params:
    """Full GD step of the orthogonal-data problem, written without X (needs ``X^T X = n I``).

    ``R = W_eff - beta``; 2 layers: ``W1 -= eta1 R W2^T / h``, ``W2 -= eta2 W1^T R / h``;
    3 layers: ``W1 -= eta1 R a^T W2^T / sqrt(h)``, ``W2 -= eta2 W1^T R a^T / sqrt(h)``.
    """
    _checks.check_params(params)
    _checks.check_rates(eta1=eta1, eta2=eta2)
    w1, w2 = params["w1"], params["w2"]
    h = w1.shape[1]
    r = effective_matrix(params) - beta
    if "a" in params:
        a = params["a"]
        c = 1.0 / math.sqrt(h)
        grads = {"w1": c * r @ (w2 @ a).T, "w2": c * (w1.T @ r) @ a.T}
    else:
        grads = {"w1": r @ w2.T / h, "w2": w1.T @ r / h}
    return _apply(params, grads, eta1, eta2)


def surrogate_step(params: Params, beta: ArrayLike, eta1: ArrayLike, eta2: ArrayLike) -> Params:
    """Signal-only surrogate step: the GD step with the residual ``R`` replaced by ``-beta``.

    2 layers: ``W1 += eta1 beta W2^T / h``, ``W2 += eta2 W1^T beta / h``;
    3 layers: ``W1 += eta1 beta a^T W2^T / sqrt(h)``, ``W2 += eta2 W1^T beta a^T / sqrt(h)``.
    This is the update whose expected test loss :func:`expected_test_loss` gives in closed form.
    """
    _checks.check_params(params)
    _checks.check_rates(eta1=eta1, eta2=eta2)
    w1, w2 = params["w1"], params["w2"]
    h = w1.shape[1]
    beta = jnp.asarray(beta)
    if "a" in params:
        a = params["a"]
        c = 1.0 / math.sqrt(h)
        grads = {"w1": -c * beta @ (w2 @ a).T, "w2": -c * (w1.T @ beta) @ a.T}
    else:
        grads = {"w1": -beta @ w2.T / h, "w2": -(w1.T @ beta) / h}
    return _apply(params, grads, eta1, eta2)


def test_loss(params: Params, beta: ArrayLike) -> jax.Array:
    """Expected test loss ``E_{x ~ N(0, I_d)} ||x (W_eff - beta)||^2 = ||W_eff - beta||_F^2``."""
    _checks.check_params(params)
    return jnp.sum((effective_matrix(params) - beta) ** 2)


test_loss.__test__ = False  # not a pytest test despite the name
