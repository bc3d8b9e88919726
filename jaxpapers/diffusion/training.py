"""Training utilities for small real models: a class-conditional EDM denoiser and a
consistency-distilled (LCM-style) few-step student.

The network is a plain-function MLP, not a Flax module, on purpose: every matmul goes through
:func:`jaxpapers.quant.dense`, so the *same* apply function runs on float weights and on a pytree
whose kernels were replaced by :class:`jaxpapers.quant.QuantizedArray` (W8 / W4 / W3). Its first
layer's input is zero-padded to a multiple of 16 so every kernel can be quantized group-wise with
groups of 16.

Networks (all unbatched: ``x`` [D], ``sigma`` [], ``label`` [] int; vmap at the boundary):

* :func:`edm_denoiser`: ``D(x; sigma, y) = c_skip x + c_out F(c_in x, c_noise, y)`` (EDM Table 1).
* :func:`consistency_denoiser`: the same with consistency-model boundary scalings, so
  ``f(x; sigma_min) = x`` (Song et al. 2023, eq. 7).

Training (one jitted ``lax.scan`` each):

* :func:`train_edm`: EDM loss (EDM eq. 2 with the weighting of Table 1; log-normal sigmas).
* :func:`distill_consistency`: consistency distillation (Song et al. 2023, Alg. 2) from an EDM
  teacher with Heun ODE steps on an ``num_scales``-point Karras grid, EMA target network,
  squared-L2 distance, student initialised from the teacher's weights.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxpapers import quant
from jaxpapers.core import checks
from jaxpapers.diffusion.schedules import (consistency_preconditioning, edm_preconditioning,
                                           karras_sigmas)

__all__ = ["init_mlp", "mlp_apply", "edm_denoiser", "consistency_denoiser", "edm_loss",
           "train_edm", "distill_consistency"]

_PAD = 16


def _in_dim(dim: int, num_classes: int, fourier: int) -> int:
    raw = dim + num_classes + 2 * fourier
    return int(math.ceil(raw / _PAD) * _PAD)


def init_mlp(key: jax.Array, *, dim: int, num_classes: int, hidden: int = 256, depth: int = 3,
             fourier: int = 16) -> dict[str, Any]:
    """Parameters of the conditional MLP ``F`` (LeCun-normal kernels, zero biases).

    Layers: ``in -> hidden`` x depth -> ``dim`` with SiLU; ``in`` = x, one-hot label and
    ``2 * fourier`` Fourier features of ``c_noise``, zero-padded to a multiple of 16.

    >>> p = init_mlp(jax.random.key(0), dim=64, num_classes=10)
    >>> [l["kernel"].shape for l in p["layers"]]
    [(112, 256), (256, 256), (256, 256), (256, 64)]
    """
    dim, num_classes, hidden, depth, fourier = (
        checks.check_int(name, v, minimum=1) for name, v in
        (("dim", dim), ("num_classes", num_classes), ("hidden", hidden), ("depth", depth),
         ("fourier", fourier)))
    sizes = [_in_dim(dim, num_classes, fourier)] + [hidden] * depth + [dim]
    keys = jax.random.split(key, len(sizes))
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = jax.random.normal(keys[i], (a, b)) / jnp.sqrt(a)
        if i == len(sizes) - 2:
            w = w * 0.1  # small output layer: F starts near 0, D near c_skip x
        layers.append({"kernel": w, "bias": jnp.zeros((b,))})
    freqs = jax.random.normal(keys[-1], (fourier,)) * 4.0
    return {"layers": layers, "freqs": freqs}


def mlp_apply(params, x: jax.Array, c_noise: jax.Array, label: jax.Array) -> jax.Array:
    """``F(x, c_noise, label)`` for one example: x [D], c_noise [], label [] int -> [D]."""
    layers = params["layers"]
    num_in = layers[0]["kernel"].shape[0]
    freqs = params["freqs"]
    d = x.shape[-1]
    num_classes = num_in - d - 2 * freqs.shape[0]
    ang = 2.0 * jnp.pi * freqs * c_noise
    h = jnp.concatenate([x, jnp.cos(ang), jnp.sin(ang)])
    onehot = jax.nn.one_hot(label, num_classes, dtype=x.dtype)  # includes the zero padding
    h = jnp.concatenate([h, onehot])
    for i, layer in enumerate(layers):
        h = quant.dense(h, layer["kernel"], layer["bias"])
        if i < len(layers) - 1:
            h = jax.nn.silu(h)
    return h


def edm_denoiser(params, x: jax.Array, sigma: jax.Array, label: jax.Array, *,
                 sigma_data: float = 0.5) -> jax.Array:
    """EDM-preconditioned ``D(x; sigma, label)`` for one example (x [D], sigma [], label [])."""
    c_skip, c_out, c_in, c_noise = edm_preconditioning(sigma, sigma_data)
    f = mlp_apply(params, c_in * x, c_noise, label)
    return c_skip * x + c_out * f


def consistency_denoiser(params, x: jax.Array, sigma: jax.Array, label: jax.Array, *,
                         sigma_data: float = 0.5, sigma_min: float = 0.002) -> jax.Array:
    """Consistency function ``f(x; sigma, label)`` with ``f(x; sigma_min) = x`` (one example)."""
    c_skip, c_out, c_in, c_noise = consistency_preconditioning(sigma, sigma_data, sigma_min)
    f = mlp_apply(params, c_in * x, c_noise, label)
    return c_skip * x + c_out * f


def edm_loss(params, key: jax.Array, x0: jax.Array, labels: jax.Array, *,
             sigma_data: float = 0.5, p_mean: float = -1.2, p_std: float = 1.2) -> jax.Array:
    """EDM training loss on a batch (x0 [B, D], labels [B]); sigma ~ logN(p_mean, p_std^2).

    ``lambda(sigma) ||D(x0 + sigma n; sigma) - x0||^2`` with
    ``lambda = (sigma^2 + sd^2) / (sigma sd)^2`` (EDM Table 1), averaged.
    """
    ks, kn = jax.random.split(key)
    sigma = jnp.exp(p_mean + p_std * jax.random.normal(ks, (x0.shape[0],)))
    noisy = x0 + sigma[:, None] * jax.random.normal(kn, x0.shape)
    den = jax.vmap(lambda x, s, y: edm_denoiser(params, x, s, y, sigma_data=sigma_data))(
        noisy, sigma, labels)
    w = (sigma ** 2 + sigma_data ** 2) / (sigma * sigma_data) ** 2
    return jnp.mean(w * jnp.mean((den - x0) ** 2, axis=-1))


def _batch(key, data, labels, batch_size):
    idx = jax.random.randint(key, (batch_size,), 0, data.shape[0])
    return data[idx], labels[idx]


def _check_data(data, labels):
    if data.ndim != 2:
        raise ValueError(f"data must be [num_examples, D], got shape {data.shape}")
    if labels.shape != (data.shape[0],):
        raise ValueError(f"labels must have shape ({data.shape[0]},), got {labels.shape}")


def _train_edm_run(params, key, data, labels, learning_rate, *, num_steps, batch_size,
                   sigma_data):
    opt = optax.adam(optax.cosine_decay_schedule(learning_rate, num_steps, alpha=0.05))

    def body(carry, k):
        p, st = carry
        kb, kl = jax.random.split(k)
        xb, yb = _batch(kb, data, labels, batch_size)
        loss, g = jax.value_and_grad(edm_loss)(p, kl, xb, yb, sigma_data=sigma_data)
        upd, st = opt.update(g, st, p)
        return (optax.apply_updates(p, upd), st), loss

    (p, _), losses = jax.lax.scan(body, (params, opt.init(params)),
                                  jax.random.split(key, num_steps))
    return p, losses


# Module-level jits: params, data and the learning rate are arguments (not constants baked into
# the program), so a second call with the same shapes and static settings does not recompile.
# Float settings that enter Python arithmetic (sigma_data, ema, ...) stay static so the results
# are bit-identical to closing over them.
_train_edm_jit = jax.jit(_train_edm_run,
                         static_argnames=("num_steps", "batch_size", "sigma_data"))


def train_edm(params, key: jax.Array, data: jax.Array, labels: jax.Array, *, num_steps: int,
              batch_size: int = 256, learning_rate: float = 2e-3, sigma_data: float = 0.5):
    """Train the EDM denoiser with Adam + cosine decay; returns ``(params, losses [num_steps])``.

    One compiled ``lax.scan``; a second call with the same shapes, ``num_steps``, ``batch_size``
    and ``sigma_data`` reuses it (``learning_rate`` is traced).

    >>> import jax.numpy as jnp
    >>> p = init_mlp(jax.random.key(0), dim=4, num_classes=2, hidden=16, depth=1)
    >>> data = jnp.tile(jnp.array([[0.5, -0.5, 0.5, -0.5]]), (32, 1))
    >>> p, losses = train_edm(p, jax.random.key(1), data, jnp.zeros(32, int), num_steps=200,
    ...                       batch_size=32)
    >>> bool(losses[-20:].mean() < losses[:20].mean())
    True
    """
    num_steps = checks.check_int("num_steps", num_steps, minimum=1)
    batch_size = checks.check_int("batch_size", batch_size, minimum=1)
    data, labels = jnp.asarray(data, jnp.float32), jnp.asarray(labels, jnp.int32)
    _check_data(data, labels)
    return _train_edm_jit(params, key, data, labels, jnp.asarray(learning_rate),
                          num_steps=num_steps, batch_size=batch_size, sigma_data=sigma_data)


def _distill_run(teacher_params, key, data, labels, sig, learning_rate, *, num_steps,
                 batch_size, num_scales, sigma_min, ema, sigma_data):
    opt = optax.adam(optax.cosine_decay_schedule(learning_rate, num_steps, alpha=0.1))
    teach = jax.vmap(lambda x, s, y: edm_denoiser(teacher_params, x, s, y,
                                                  sigma_data=sigma_data))

    def f(p, x, s, y):
        return jax.vmap(lambda a, b, c: consistency_denoiser(p, a, b, c, sigma_data=sigma_data,
                                                             sigma_min=sigma_min))(x, s, y)

    def loss_fn(p, target_p, k, x0, y):
        kn, kz = jax.random.split(k)
        n = jax.random.randint(kn, (x0.shape[0],), 0, num_scales - 1)
        s_hi, s_lo = sig[n], sig[n + 1]
        x = x0 + s_hi[:, None] * jax.random.normal(kz, x0.shape)
        d1 = (x - teach(x, s_hi, y)) / s_hi[:, None]
        x_e = x + (s_lo - s_hi)[:, None] * d1
        d2 = (x_e - teach(x_e, s_lo, y)) / s_lo[:, None]
        x_hat = x + (s_lo - s_hi)[:, None] * 0.5 * (d1 + d2)
        target = jax.lax.stop_gradient(f(target_p, x_hat, s_lo, y))
        return jnp.mean(jnp.sum((f(p, x, s_hi, y) - target) ** 2, axis=-1))

    def body(carry, k):
        p, tp, st = carry
        kb, kl = jax.random.split(k)
        xb, yb = _batch(kb, data, labels, batch_size)
        loss, g = jax.value_and_grad(loss_fn)(p, tp, kl, xb, yb)
        upd, st = opt.update(g, st, p)
        p = optax.apply_updates(p, upd)
        tp = jax.tree.map(lambda a, b: ema * a + (1.0 - ema) * b, tp, p)
        return (p, tp, st), loss

    params = teacher_params
    (p, _, _), losses = jax.lax.scan(body, (params, params, opt.init(params)),
                                     jax.random.split(key, num_steps))
    return p, losses


_distill_jit = jax.jit(_distill_run, static_argnames=(
    "num_steps", "batch_size", "num_scales", "sigma_min", "ema", "sigma_data"))


def distill_consistency(teacher_params, key: jax.Array, data: jax.Array, labels: jax.Array, *,
                        num_steps: int, batch_size: int = 256, learning_rate: float = 5e-4,
                        num_scales: int = 40, sigma_min: float = 0.002, sigma_max: float = 20.0,
                        rho: float = 7.0, ema: float = 0.95, sigma_data: float = 0.5):
    """Consistency distillation of an EDM teacher into a few-step student.

    For ``n ~ U{0..num_scales-2}`` on the Karras grid ``sigma_0 > ... > sigma_{S-1}``
    (descending here), draws ``x = x0 + sigma_n z``, takes one Heun step of the teacher's
    probability-flow ODE to ``sigma_{n+1}``, and minimises
    ``||f_theta(x; sigma_n) - f_ema(x_hat; sigma_{n+1})||^2`` (Song et al. 2023, Alg. 2). The EMA
    target ``theta^- <- ema theta^- + (1 - ema) theta`` starts from the teacher's weights, as does
    the student.

    One compiled ``lax.scan``; the teacher's weights, the data, the sigma grid and the learning
    rate are its arguments, so a second call with the same shapes and settings does not
    recompile.

    Returns:
      ``(student_params, losses [num_steps])``; sample with ``consistency_denoiser`` (prediction
      "sample") and the ``lcm`` sampler on an EDM schedule.
    """
    num_steps = checks.check_int("num_steps", num_steps, minimum=1)
    batch_size = checks.check_int("batch_size", batch_size, minimum=1)
    num_scales = checks.check_int("num_scales", num_scales, minimum=2)
    data, labels = jnp.asarray(data, jnp.float32), jnp.asarray(labels, jnp.int32)
    _check_data(data, labels)
    sig = karras_sigmas(num_scales, sigma_min, sigma_max, rho)[:-1]  # [S], descending
    return _distill_jit(teacher_params, key, data, labels, sig, jnp.asarray(learning_rate),
                        num_steps=num_steps, batch_size=batch_size, num_scales=num_scales,
                        sigma_min=sigma_min, ema=ema, sigma_data=sigma_data)
