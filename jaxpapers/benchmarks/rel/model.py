"""A small transformer learning the RC family, many relational complexities in one program.

The learner is the library's decoder (:mod:`jaxpapers.lm`: RMSNorm, RoPE attention, SwiGLU) over
cell tokens: a grid is read row by row, each value ``v`` in Z_P is token ``v``, a separator
(token ``P + 1``) ends every row, and the hidden query cell is token ``P``, the last token. The
logits of the last position over the P values, taken at the 8 candidates, are the choice
scores; the loss is cross-entropy over the candidates. Row and column reach the model through
the positions (RoPE) and the separators.

Every family of one grid shape has the same token shapes, so models for every k (each with its
own operand columns) and seed are stacked on a leading axis and trained by one jitted
:func:`jaxpapers.core.train.fit`; each step draws fresh instances from each model's own family
(:func:`sample_rc`, no uniqueness resampling: a model learns one fixed rule).

Shapes: M stacked models, B instances, R x C grid, T = R (C + 1) tokens, N choices.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers import lm
from jaxpapers.benchmarks.rel.algebra import generate_rc, sample_rc
from jaxpapers.core import train

__all__ = ["model_config", "tokens", "choice_logits", "loss_fn", "train_rc_models",
           "accuracy"]


def model_config(modulus: int = 10, rows: int = 2, cols: int = 8, *, d_model: int = 48,
                 n_layers: int = 2, n_heads: int = 4) -> lm.LMConfig:
    """The decoder's shape for a grid family (vocabulary P + 2: values, query, separator)."""
    return lm.LMConfig(vocab=modulus + 2, d_model=d_model, n_layers=n_layers,
                       n_q_heads=n_heads, n_kv_heads=n_heads, head_dim=d_model // n_heads,
                       d_ff=2 * d_model, max_len=rows * (cols + 1))


def tokens(grid: jax.Array, modulus: int) -> jax.Array:
    """Cell tokens of grids [..., R, C] (query cell -1) -> int32 [..., R (C + 1) - 1]: rows in
    order, a separator after each complete row, the query token last."""
    g = jnp.where(grid < 0, modulus, grid).astype(jnp.int32)
    sep = jnp.full(grid.shape[:-1] + (1,), modulus + 1, jnp.int32)
    seq = jnp.concatenate([g, sep], axis=-1).reshape(grid.shape[:-2] + (-1,))
    return seq[..., :-1]  # drop the last separator: the query is the final token


def choice_logits(params: dict, grid: jax.Array, choices: jax.Array, *,
                  config: lm.LMConfig) -> jax.Array:
    """Scores of the candidates [B, N] for grids [B, R, C] and choices [B, N] (unbatched over
    models: one model's parameters)."""
    modulus = config.vocab - 2
    logits = lm.forward(params, tokens(grid, modulus), config=config)[:, -1, :modulus]
    return jnp.take_along_axis(logits, choices, axis=1)


def loss_fn(params: dict, grid, choices, target, *, config: lm.LMConfig):
    """Mean cross-entropy over the candidates and accuracy of one model on one batch."""
    lg = choice_logits(params, grid, choices, config=config)
    logp = jax.nn.log_softmax(lg)
    nll = -jnp.take_along_axis(logp, target[:, None], axis=1)[:, 0]
    return jnp.mean(nll), jnp.mean(jnp.argmax(lg, axis=1) == target)


def _whole_data(t, data):
    return data


@functools.lru_cache(maxsize=16)
def _train_step(config, m, rows, cols, modulus, num_choices, batch_size, lr):
    """The stacked training step, built once per setting (``fit`` compiles per step function,
    so a repeated call with the same setting does not recompile)."""

    def stacked_loss(p, batch, step_key):
        def one(ps, ops, i):
            d = sample_rc(jax.random.fold_in(step_key, i), ops, num=batch_size, rows=rows,
                          cols=cols, modulus=modulus, num_choices=num_choices)
            return loss_fn(ps, d["grid"], d["choices"], d["target"], config=config)

        losses, accs = jax.vmap(one)(p, batch["operands"], jnp.arange(m))
        per = {f"loss_{i}": losses[i] for i in range(m)}  # fit keeps scalar metrics
        return jnp.sum(losses), {"acc": jnp.mean(accs), **per}

    opt = optax.adam(lr)
    return opt, train.make_train_step(stacked_loss, opt, has_aux=True)


def train_rc_models(key, operands: np.ndarray, *, rows: int, cols: int, modulus: int = 10,
                    num_choices: int = 8, steps: int = 1000, batch_size: int = 64,
                    lr: float = 1e-3, d_model: int = 48, n_layers: int = 2,
                    progress: bool = False) -> tuple[dict, dict]:
    """Train one model per row of ``operands`` (bool [M, C - 1]: each model's rule) at once.

    Model i's initial parameters come from ``fold_in(key_init, i)`` and its batches from
    ``fold_in(step key, i)``, so a model's run does not depend on the others stacked with it.

    Returns:
      (params stacked [M, ...], history: ``loss`` [steps] summed over models, ``acc`` [steps]
      mean over models, ``loss_per_model`` [steps, M]).
    """
    operands = jnp.asarray(operands, bool)
    if operands.ndim != 2 or operands.shape[1] != cols - 1:
        raise ValueError(f"operands must be bool [M, {cols - 1}], got {operands.shape}")
    m = operands.shape[0]
    config = model_config(modulus, rows, cols, d_model=d_model, n_layers=n_layers)
    k_init, k_run = jax.random.split(key)
    params = jax.vmap(lambda i: lm.init(config, jax.random.fold_in(k_init, i)))(jnp.arange(m))
    opt, step = _train_step(config, m, rows, cols, modulus, num_choices, batch_size, lr)
    state = train.init_train_state(params, opt, k_run)
    state, hist = train.fit(step, state, _whole_data, num_steps=steps, chunk_size=steps,
                            progress=progress, desc="rel transformers",
                            data={"operands": operands})
    out = {"loss": np.asarray(hist["loss"]), "acc": np.asarray(hist["acc"]),
           "loss_per_model": np.stack([np.asarray(hist[f"loss_{i}"]) for i in range(m)], 1)}
    return state.params, out


@functools.partial(jax.jit, static_argnames=("config",))
def _accuracy(params, grid, choices, target, config):
    lg = choice_logits(params, grid, choices, config=config)
    return jnp.mean(jnp.argmax(lg, axis=1) == target)


def accuracy(params: dict, key, operands, *, rows: int, cols: int, num: int = 4000,
             modulus: int = 10, num_choices: int = 8, d_model: int = 48,
             n_layers: int = 2) -> np.ndarray:
    """Test accuracy of stacked models (params [M, ...], operands bool [M, C - 1]) on ``num``
    fresh instances of each model's family (:func:`generate_rc` with ``unique=False``: a model
    knows its one rule, and on wide 2-row grids unique instances are too rare to draw):
    float [M]."""
    config = model_config(modulus, rows, cols, d_model=d_model, n_layers=n_layers)
    ops = np.asarray(operands, bool)
    out = []
    for i, k_i in enumerate(jax.random.split(key, ops.shape[0])):
        d = generate_rc(k_i, num, k=int(ops[i].sum()), rows=rows, cols=cols, modulus=modulus,
                        num_choices=num_choices, operands=ops[i], unique=False)
        p = jax.tree.map(lambda x, i=i: x[i], params)
        out.append(float(_accuracy(p, d["grid"], d["choices"], d["target"], config)))
    return np.asarray(out)
