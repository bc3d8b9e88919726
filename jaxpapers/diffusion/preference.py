"""Diffusion-DPO for the class-conditional EDM denoiser of :mod:`jaxpapers.diffusion.training`.

Diffusion-DPO (Wallace et al. 2024, eq. 14; the objective of the reference code
SalesforceAIResearch/DiffusionDPO ``train.py``) fine-tunes a denoiser on preference pairs
``(x_w, x_l)`` of the same condition ``c`` against a frozen reference denoiser. Winner and loser
share the noise level and the noise draw; with the per-example denoising error

    e_theta(x) = lambda(sigma) * mean_d (D_theta(x + sigma n; sigma, c) - x)^2,
    lambda(sigma) = (sigma^2 + sigma_data^2) / (sigma sigma_data)^2      (EDM Table 1 weight),

the loss of one pair is

    inside = -(beta / 2) [(e_theta(x_w) - e_theta(x_l)) - (e_ref(x_w) - e_ref(x_l))],
    loss   = -log sigmoid(inside).

The reference code uses the epsilon-prediction MSE; for an EDM denoiser the EDM-weighted
denoising error is that MSE up to a sigma-dependent factor, and it is what :func:`edm_loss`
minimises, so ``beta`` plays the same role. At ``params == ref_params`` every ``inside`` is 0 and
the loss is ``log 2``. The share of pairs with ``inside > 0`` is the reference code's "implicit
accuracy".

* :func:`diffusion_dpo_terms`: loss, per-pair ``inside`` and errors, implicit accuracy, margin.
* :func:`diffusion_dpo_loss`: the scalar loss (for ``jax.grad``).
* :func:`train_dpo`: Adam on minibatches of pairs, one module-level jitted ``lax.scan``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.typing import ArrayLike

from jaxpapers.core import checks
from jaxpapers.diffusion.training import edm_denoiser

__all__ = ["diffusion_dpo_terms", "diffusion_dpo_loss", "train_dpo"]


def _weighted_error(params, x: jax.Array, label: jax.Array, sigma: jax.Array, noise: jax.Array,
                    sigma_data: float) -> jax.Array:
    """``lambda(sigma) mean_d (D(x + sigma n; sigma, label) - x)^2`` for one example (unbatched)."""
    den = edm_denoiser(params, x + sigma * noise, sigma, label, sigma_data=sigma_data)
    weight = (sigma ** 2 + sigma_data ** 2) / (sigma * sigma_data) ** 2
    return weight * jnp.mean((den - x) ** 2)


def _batched_error(params, x, labels, sigma, noise, sigma_data):
    return jax.vmap(_weighted_error, in_axes=(None, 0, 0, 0, 0, None))(
        params, x, labels, sigma, noise, sigma_data)


def _check_pairs(x_w, x_l, labels, sigma=None, noise=None) -> None:
    """Static shape checks (they also run under jit) and concrete value checks."""
    checks.check_ndim("x_w", x_w, 2, "[B, D]")
    if jnp.shape(x_l) != jnp.shape(x_w):
        raise ValueError(f"x_l must have the shape of x_w {tuple(jnp.shape(x_w))}, "
                         f"got {tuple(jnp.shape(x_l))}")
    b = jnp.shape(x_w)[0]
    if jnp.shape(labels) != (b,):
        raise ValueError(f"labels must have shape ({b},), got {tuple(jnp.shape(labels))}")
    if not jnp.issubdtype(jnp.result_type(labels), jnp.integer):
        raise ValueError(f"labels must hold integer class ids, got dtype "
                         f"{jnp.result_type(labels)}")
    if sigma is not None:
        if jnp.shape(sigma) != (b,):
            raise ValueError(f"sigma must have shape ({b},), got {tuple(jnp.shape(sigma))}")
        checks.check_range("sigma", sigma, low=0.0, low_open=True)
    if noise is not None and jnp.shape(noise) != jnp.shape(x_w):
        raise ValueError(f"noise must have the shape of x_w {tuple(jnp.shape(x_w))}, "
                         f"got {tuple(jnp.shape(noise))}")
    checks.check_finite("x_w", x_w)
    checks.check_finite("x_l", x_l)


def diffusion_dpo_terms(params, ref_params, x_w: ArrayLike, x_l: ArrayLike, labels: ArrayLike,
                        sigma: ArrayLike, noise: ArrayLike, *, beta: ArrayLike,
                        sigma_data: float = 0.5) -> dict[str, jax.Array]:
    """Diffusion-DPO loss and its diagnostics on a batch of ``B`` preference pairs.

    Winner ``x_w[i]`` and loser ``x_l[i]`` share the condition ``labels[i]``, the noise level
    ``sigma[i]`` and the noise ``noise[i]`` (as in the reference code). ``ref_params`` is frozen:
    its errors go through ``stop_gradient``. Wallace et al. (2024), eq. 14, with the EDM-weighted
    denoising error (module docstring) as the per-example error.

    Args:
      params: denoiser parameters (from :func:`init_mlp` / :func:`train_edm`), trained.
      ref_params: parameters of the frozen reference denoiser (same pytree structure and leaf
        shapes as ``params``: both are evaluated in one vmapped call).
      x_w: ``[B, D]`` float, preferred samples ("winners").
      x_l: ``[B, D]`` float, dispreferred samples ("losers").
      labels: ``[B]`` int class condition of each pair.
      sigma: ``[B]`` float noise level of each pair, ``> 0``.
      noise: ``[B, D]`` float ``n ~ N(0, I)`` of each pair, shared by winner and loser.
      beta: scalar ``> 0``, the KL strength; traced (may be swept, vmapped or differentiated).
      sigma_data: EDM's ``sigma_data`` (static float).

    Returns:
      A dict of
        ``loss``: ``[]`` mean over pairs of ``-log sigmoid(inside)``;
        ``inside``: ``[B]`` ``-(beta / 2) (model_diff - ref_diff)``;
        ``model_diff``: ``[B]`` ``e_theta(x_w) - e_theta(x_l)``;
        ``ref_diff``: ``[B]`` ``e_ref(x_w) - e_ref(x_l)`` (no gradient);
        ``implicit_accuracy``: ``[]`` share of pairs with ``inside > 0``;
        ``margin``: ``[]`` mean of ``inside`` (the implicit reward margin).

    Raises:
      ValueError: a shape does not match ``[B, D]`` / ``[B]`` (named), ``ref_params`` does not
        match ``params``, or a concrete ``beta`` or ``sigma`` is not positive and finite.

    >>> from jaxpapers.diffusion import init_mlp
    >>> p = init_mlp(jax.random.key(0), dim=4, num_classes=2, hidden=8, depth=1)
    >>> x = jnp.ones((3, 4))
    >>> t = diffusion_dpo_terms(p, p, x, -x, jnp.zeros(3, int), jnp.ones(3), jnp.ones((3, 4)),
    ...                         beta=10.0)
    >>> round(float(t["loss"]), 6), float(t["implicit_accuracy"]), float(t["margin"])
    (0.693147, 0.0, 0.0)
    """
    _check_pairs(x_w, x_l, labels, sigma, noise)
    checks.check_range("beta", beta, low=0.0, low_open=True, scalar=True)
    if jnp.ndim(beta) != 0:
        raise ValueError(f"beta must be a scalar, got shape {tuple(jnp.shape(beta))}")
    if (jax.tree.structure(ref_params) != jax.tree.structure(params)
            or [jnp.shape(a) for a in jax.tree.leaves(ref_params)]
            != [jnp.shape(a) for a in jax.tree.leaves(params)]):
        raise ValueError("ref_params must have the pytree structure and leaf shapes of params, "
                         f"got {jax.tree.structure(ref_params)} for "
                         f"{jax.tree.structure(params)}")
    x_w, x_l, sigma, noise = (jnp.asarray(a) for a in (x_w, x_l, sigma, noise))
    labels = jnp.asarray(labels)

    # One vmapped evaluation over the stacked [model, reference] weights and the concatenated
    # [winners; losers]: the reference goes through the very same compiled computation as the
    # model, so at params == ref the two errors agree bit for bit (inside = 0, loss = log 2) also
    # under jit, where separate calls may be fused differently and differ in the last bits.
    both = jax.tree.map(lambda a, b: jnp.stack([a, jax.lax.stop_gradient(b)]), params,
                        ref_params)
    x = jnp.concatenate([x_w, x_l])
    rep = lambda a: jnp.concatenate([a, a])
    err = jax.vmap(_batched_error, in_axes=(0, None, None, None, None, None))(
        both, x, rep(labels), rep(sigma), rep(noise), sigma_data)  # [2, 2B]
    b = x_w.shape[0]
    diffs = err[:, :b] - err[:, b:]  # [2, B]: e(x_w) - e(x_l) under model, reference
    model_diff, ref_diff = diffs[0], jax.lax.stop_gradient(diffs[1])
    inside = -0.5 * beta * (model_diff - ref_diff)
    return {
        "loss": -jnp.mean(jax.nn.log_sigmoid(inside)),
        "inside": inside,
        "model_diff": model_diff,
        "ref_diff": ref_diff,
        "implicit_accuracy": jnp.mean((inside > 0).astype(inside.dtype)),
        "margin": jnp.mean(inside),
    }


def diffusion_dpo_loss(params, ref_params, x_w: ArrayLike, x_l: ArrayLike, labels: ArrayLike,
                       sigma: ArrayLike, noise: ArrayLike, *, beta: ArrayLike,
                       sigma_data: float = 0.5) -> jax.Array:
    """The scalar Diffusion-DPO loss ``mean_i -log sigmoid(inside_i)`` (Wallace et al. eq. 14).

    Same arguments as :func:`diffusion_dpo_terms` (``x_w``, ``x_l``, ``noise`` [B, D];
    ``labels``, ``sigma`` [B]; ``beta`` a traced scalar); returns ``[]``. Differentiate it with
    respect to ``params``; ``ref_params`` gets no gradient.

    >>> from jaxpapers.diffusion import init_mlp
    >>> p = init_mlp(jax.random.key(0), dim=4, num_classes=2, hidden=8, depth=1)
    >>> x = jnp.ones((2, 4))
    >>> g = jax.grad(diffusion_dpo_loss)(p, p, x, -x, jnp.zeros(2, int), jnp.ones(2),
    ...                                  jnp.ones((2, 4)), beta=10.0)
    >>> jax.tree.structure(g) == jax.tree.structure(p)
    True
    """
    return diffusion_dpo_terms(params, ref_params, x_w, x_l, labels, sigma, noise, beta=beta,
                               sigma_data=sigma_data)["loss"]


def _train_dpo_run(params, ref_params, key, x_w, x_l, labels, learning_rate, beta, *,
                   num_steps, batch_size, sigma_data, p_mean, p_std):
    opt = optax.adam(learning_rate)

    def loss_fn(p, xw, xl, y, s, n):
        t = diffusion_dpo_terms(p, ref_params, xw, xl, y, s, n, beta=beta,
                                sigma_data=sigma_data)
        return t["loss"], t

    def body(carry, k):
        p, st = carry
        ki, ks, kn = jax.random.split(k, 3)
        idx = jax.random.randint(ki, (batch_size,), 0, x_w.shape[0])
        sigma = jnp.exp(p_mean + p_std * jax.random.normal(ks, (batch_size,)))
        noise = jax.random.normal(kn, (batch_size, x_w.shape[1]))
        (_, t), g = jax.value_and_grad(loss_fn, has_aux=True)(
            p, x_w[idx], x_l[idx], labels[idx], sigma, noise)
        upd, st = opt.update(g, st, p)
        hist = {"loss": t["loss"], "implicit_accuracy": t["implicit_accuracy"],
                "margin": t["margin"]}
        return (optax.apply_updates(p, upd), st), hist

    (p, _), history = jax.lax.scan(body, (params, opt.init(params)),
                                   jax.random.split(key, num_steps))
    return p, history


# Module-level jit, as train_edm: weights, pairs, learning rate and beta are arguments, so a
# second call with the same shapes and static settings reuses the compiled scan.
_train_dpo_jit = jax.jit(_train_dpo_run, static_argnames=(
    "num_steps", "batch_size", "sigma_data", "p_mean", "p_std"))


def train_dpo(params, ref_params, key: jax.Array, x_w: ArrayLike, x_l: ArrayLike,
              labels: ArrayLike, *, num_steps: int, batch_size: int, learning_rate: ArrayLike,
              beta: ArrayLike, sigma_data: float = 0.5, p_mean: float = -1.2,
              p_std: float = 1.2) -> tuple[Any, dict[str, jax.Array]]:
    """Fine-tune a denoiser with Diffusion-DPO against the frozen ``ref_params`` (Adam).

    Each step draws ``batch_size`` pair indices uniformly (with replacement) from the ``P``
    pairs, one ``sigma ~ logN(p_mean, p_std^2)`` (EDM's training distribution) and one
    ``n ~ N(0, I_D)`` per pair, shared by winner and loser, and takes an Adam step with a
    constant learning rate on :func:`diffusion_dpo_loss` (the reference code's objective; its
    warm-up is left out). One compiled ``lax.scan``: ``learning_rate`` and ``beta`` are traced,
    so a new value does not recompile; ``num_steps``, ``batch_size``, ``sigma_data``,
    ``p_mean`` and ``p_std`` are static.

    Args:
      params: initial trainable denoiser parameters (usually a copy of ``ref_params``).
      ref_params: frozen reference parameters.
      key: a typed key (consumed).
      x_w: ``[P, D]`` winners; cast to float32 like :func:`train_edm`'s data.
      x_l: ``[P, D]`` losers, ``x_l[i]`` paired with ``x_w[i]``.
      labels: ``[P]`` int class of each pair.
      num_steps: ``>= 1`` optimisation steps.
      batch_size: ``>= 1`` pairs per step.
      learning_rate: Adam step size ``> 0``.
      beta: DPO strength ``> 0``.
      sigma_data, p_mean, p_std: EDM settings (static floats).

    Returns:
      ``(params, history)``; ``history`` holds ``[num_steps]`` arrays ``loss``,
      ``implicit_accuracy`` and ``margin`` of each step's minibatch, before its update.

    Raises:
      TypeError: ``key`` is not a typed key; a count is not an int.
      ValueError: ``x_w`` / ``x_l`` are not the same ``[P, D]``, ``labels`` is not ``[P]``,
        ``num_steps`` or ``batch_size`` < 1, or ``beta`` / ``learning_rate`` is not positive.

    >>> from jaxpapers.diffusion import init_mlp
    >>> p = init_mlp(jax.random.key(0), dim=4, num_classes=1, hidden=8, depth=1)
    >>> x = jnp.ones((8, 4))
    >>> q, hist = train_dpo(p, p, jax.random.key(1), x, -x, jnp.zeros(8, int), num_steps=3,
    ...                     batch_size=4, learning_rate=1e-3, beta=5.0)
    >>> hist["loss"].shape, round(float(hist["loss"][0]), 6)
    ((3,), 0.693147)
    """
    checks.check_key("key", key)
    num_steps = checks.check_int("num_steps", num_steps, minimum=1)
    batch_size = checks.check_int("batch_size", batch_size, minimum=1)
    checks.check_range("beta", beta, low=0.0, low_open=True, scalar=True)
    checks.check_range("learning_rate", learning_rate, low=0.0, low_open=True, scalar=True)
    _check_pairs(x_w, x_l, labels)
    if jnp.shape(x_w)[0] < 1:
        raise ValueError("x_w must hold at least one pair, got shape "
                         f"{tuple(jnp.shape(x_w))}")
    x_w, x_l = jnp.asarray(x_w, jnp.float32), jnp.asarray(x_l, jnp.float32)
    labels = jnp.asarray(labels, jnp.int32)
    return _train_dpo_jit(params, ref_params, key, x_w, x_l, labels, jnp.asarray(learning_rate),
                          jnp.asarray(beta), num_steps=num_steps, batch_size=batch_size,
                          sigma_data=sigma_data, p_mean=p_mean, p_std=p_std)
