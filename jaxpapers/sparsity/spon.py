"""SPON: spontaneous neurons, learned input-independent shifts that restore a sparse model.

SPON (arXiv 2512.12744) adds one learnable vector ``s`` per linear-layer input per layer to the
magnitude-sparsified activation, ``x~ = sparsify(x) + s``, trains the vectors with the backbone
frozen by matching the dense model's next-token distribution, and then folds them into biases:
``W (x~ + s) + b = W x~ + (b + W s)``, so inference costs nothing extra (:func:`absorb`).

The official code could not be read; the loss here is the reconstruction
``KL(p_dense || p_sparse)`` of next-byte distributions, averaged over positions, with Adam on the
shifts (zero-initialised). Several sparsity levels train together in one compiled, vmapped call
(their losses are independent, so the summed loss gives each level its own gradient and Adam is
elementwise: the same updates as separate runs).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.core import checks
from jaxpapers.lm import model
from jaxpapers.lm._types import LMConfig

__all__ = ["FEEDS", "spon_loss", "train_spon", "absorb", "kl_to_dense"]

#: the linear layers each site feeds (SPON's shift at that site becomes their bias)
FEEDS = {"attn_in": ("wq", "wk", "wv"), "attn_out": ("wo",), "mlp_in": ("w_gate", "w_up"),
         "mlp_hidden": ("w_down",)}


def kl_to_dense(dense_logits: jax.Array, sparse_logits: jax.Array) -> jax.Array:
    """Mean over positions of ``KL(softmax(dense) || softmax(sparse))`` in nats.

    Args:
      dense_logits: [..., V]. sparse_logits: [..., V].

    Returns:
      [] in the logits' dtype (at least float32).
    """
    dt = jnp.promote_types(dense_logits.dtype, jnp.float32)
    lp = jax.nn.log_softmax(dense_logits.astype(dt), axis=-1)
    lq = jax.nn.log_softmax(sparse_logits.astype(dt), axis=-1)
    return jnp.mean(jnp.sum(jnp.exp(lp) * (lp - lq), axis=-1))


def _loss(shift, params, tokens, threshold, config, dense_logits=None):
    if dense_logits is None:
        dense_logits = model._forward_impl(params, tokens, config)
    dense_logits = jax.lax.stop_gradient(dense_logits)
    sparse = model._forward_impl(params, tokens, config,
                                 {"threshold": threshold, "shift": shift})
    return kl_to_dense(dense_logits, sparse)


def spon_loss(shift: dict, params: dict, tokens: jax.Array, *, config: LMConfig,
              threshold: dict) -> jax.Array:
    """SPON's distribution-matching loss (reconstruction): ``KL(p_dense || p_sparse)``.

    ``p_dense`` is the frozen model's next-byte distribution at every position of ``tokens``;
    ``p_sparse`` the same model with ``x <- where(|x| > tau, x, 0) + s`` at each site.

    Args:
      shift: ``{site: [N, width]}`` the spontaneous-neuron vectors (differentiate w.r.t. these).
      params: the frozen language model.
      tokens: [B, T] windows.
      config: the model shape.
      threshold: ``{site: [N]}`` magnitude thresholds.

    Returns:
      [] mean KL in nats.
    """
    model._check_config(config)
    tokens = model._check_tokens(tokens, "tokens", config, 2)
    model._check_length(tokens.shape[1], config)
    model._check_params(params, config)
    sp = model.check_sparsity({"threshold": threshold, "shift": shift}, config)
    return _loss(sp["shift"], params, tokens, sp["threshold"], config)


def absorb(params: dict, shift: dict) -> dict:
    """Fold shifts into the biases of the linears they feed: ``b' = b + s W`` per layer.

    ``attn_in`` -> ``bq, bk, bv``; ``attn_out`` -> ``bo``; ``mlp_in`` -> ``b_gate, b_up``;
    ``mlp_hidden`` -> ``b_down`` (absent biases start at zero). With ``x~ = where(|x| > tau,
    x, 0)``, ``(x~ + s) W + b = x~ W + b'`` exactly in real arithmetic, so
    ``forward(absorb(params, s), sparsity={"threshold": tau})`` equals
    ``forward(params, sparsity={"threshold": tau, "shift": s})`` (up to rounding, which may flip
    a mask entry lying at ``tau`` in float32).

    Args:
      params: the language model; not modified.
      shift: ``{site: [N, width]}`` (``sparsity["shift"]``).

    Returns:
      a new parameter pytree with the updated biases (other leaves shared with ``params``).
    """
    if not isinstance(params, dict) or "layers" not in params:
        raise TypeError("params must be the pytree returned by jaxpapers.lm.init")
    if not isinstance(shift, dict):
        raise TypeError(f"shift must be a dict {{site: [N, width]}}, got {type(shift).__name__}")
    layers = dict(params["layers"])
    for site, s in shift.items():
        if site not in FEEDS:
            raise ValueError(f"shift: unknown site {site!r}; expected one of {list(FEEDS)}")
        s = jnp.asarray(s)
        for w in FEEDS[site]:
            mat = layers[w]  # [N, in, out]
            if s.shape != mat.shape[:2]:
                raise ValueError(f"shift['{site}'] must have shape {tuple(mat.shape[:2])} "
                                 f"([N, width] of {w}'s input), got {s.shape}")
            b = model.BIASES[w]
            old = layers.get(b, jnp.zeros((mat.shape[0], mat.shape[2]), mat.dtype))
            layers[b] = old + jnp.einsum("nk,nkm->nm", s.astype(mat.dtype), mat)
    return {**params, "layers": layers}


# ----------------------------------------------------------------------------- training

@dataclasses.dataclass(frozen=True)
class _Batches:
    """``batch_fn(step, data)``: random training windows plus the frozen model and thresholds
    (all traced, never constants of the compiled loop). Static and hashable."""

    batch_size: int
    seq_len: int
    mesh: Any = None
    axis: str = ""

    def __call__(self, step, data):
        from jaxpapers.core import data as core_data

        data_key, tokens, params, threshold = data
        windows, _ = core_data.sample_windows(jax.random.fold_in(data_key, step), tokens,
                                              batch_size=self.batch_size,
                                              seq_len=self.seq_len)
        if self.mesh is not None:
            from jax.sharding import NamedSharding, PartitionSpec

            windows = jax.lax.with_sharding_constraint(
                windows, NamedSharding(self.mesh, PartitionSpec(self.axis)))
        return {"tokens": windows, "params": params, "threshold": threshold}


@functools.lru_cache(maxsize=16)
def _step(config: LMConfig, learning_rate: float, num_levels: int):
    from jaxpapers.core import train as core_train

    def loss_fn(shift, batch, key):
        del key
        params, tokens = batch["params"], batch["tokens"]
        dense = model._forward_impl(params, tokens, config)
        per_level = jax.vmap(lambda s, t: _loss(s, params, tokens, t, config, dense))(
            shift, batch["threshold"])
        return jnp.sum(per_level), {f"kl/{i}": per_level[i] for i in range(num_levels)}

    optimizer = optax.adam(learning_rate)
    return optimizer, core_train.make_train_step(loss_fn, optimizer, has_aux=True)


def train_spon(params: dict, threshold: dict, train_tokens: Any, *, config: LMConfig,
               key: jax.Array, num_steps: int = 150, batch_size: int = 8, seq_len: int = 128,
               learning_rate: float = 3e-3, sites: Any = None, mesh: Any = None,
               chunk_size: int = 50, checkpoint_dir: Any = None,
               checkpoint_every: int | None = None,
               progress: bool = True) -> tuple[dict, dict[str, np.ndarray]]:
    """Learn SPON shifts for one or several sets of thresholds at once (backbone frozen).

    Each step draws ``batch_size`` random windows of ``seq_len`` bytes from ``train_tokens``
    (from ``fold_in(key, step)``) and takes an Adam step on the shifts of every level to reduce
    :func:`spon_loss`. Levels (a leading axis ``L`` on the thresholds) are vmapped inside one
    compiled step. Runs on :func:`jaxpapers.core.train.fit` (chunks, progress, checkpoints).

    Args:
      params: the frozen language model.
      threshold: ``{site: [N]}`` or ``{site: [L, N]}`` (L sparsity levels).
      train_tokens: [M] integer byte ids to draw windows from (M > ``seq_len``).
      config: the model shape.
      key: a ``jax.random.key``; consumed (window sampling).
      num_steps: Adam steps. batch_size: windows per step. seq_len: bytes per window.
      learning_rate: Adam's step size (SPON's reconstruction uses 3e-3).
      sites: sites that get a shift (default: the thresholded ones that accept a shift).
      mesh: optional 1-D mesh (``jaxpapers.core.sharding.data_parallel_mesh``): the batch is
        split over it, everything else replicated; the result equals the single-device one.
      chunk_size, checkpoint_dir, checkpoint_every, progress: as :func:`jaxpapers.core.train.fit`.

    Returns:
      ``(shift, history)``: ``shift`` ``{site: [N, width]}`` (``[L, N, width]`` for batched
      thresholds) in the parameters' dtype; ``history["loss"]`` [num_steps] the summed KL and
      ``history["kl/<l>"]`` each level's.
    """
    from jaxpapers.core import sharding
    from jaxpapers.core import train as core_train

    model._check_config(config)
    model._check_params(params, config)
    checks.check_key("key", key)
    num_steps = checks.check_int("num_steps", num_steps, minimum=0)
    batch_size = checks.check_int("batch_size", batch_size, minimum=1)
    seq_len = checks.check_int("seq_len", seq_len, minimum=1, maximum=config.max_len)
    checks.check_range("learning_rate", learning_rate, low=0.0)
    if not isinstance(threshold, dict) or not threshold:
        raise ValueError("threshold must be a non-empty dict {site: [N] or [L, N]}")
    ndims = {jnp.ndim(v) for v in threshold.values()}
    if ndims not in ({1}, {2}):
        raise ValueError(f"threshold values must all be [N] or all [L, N], got shapes "
                         f"{[jnp.shape(v) for v in threshold.values()]}")
    batched = ndims == {2}
    thr = {s: jnp.asarray(v) for s, v in threshold.items()}
    if not batched:
        thr = {s: v[None] for s, v in thr.items()}
    num_levels = {v.shape[0] for v in thr.values()}
    if len(num_levels) != 1:
        raise ValueError(f"threshold values disagree on the number of levels: {num_levels}")
    num_levels = num_levels.pop()
    for i in range(num_levels):  # shapes, sites, NaN
        model.check_sparsity({"threshold": {s: v[i] for s, v in thr.items()}}, config)
    if sites is None:
        sites = tuple(s for s in model.SHIFT_SITES if s in thr)
    elif isinstance(sites, str):
        sites = (sites,)
    for s in sites:
        if s not in model.SHIFT_SITES:
            raise ValueError(f"sites: {s!r} takes no shift; expected some of "
                             f"{list(model.SHIFT_SITES)}")
    if not sites:
        raise ValueError("no site to train a shift at (pass sites=)")
    tokens = np.asarray(train_tokens)
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise TypeError(f"train_tokens must be a 1-D integer array, got {tokens.dtype} "
                        f"{tokens.shape}")
    if tokens.size <= seq_len + 1:
        raise ValueError(f"train_tokens has {tokens.size} bytes, too few for seq_len={seq_len}")
    dtype = params["layers"]["wq"].dtype
    shift0 = {s: jnp.zeros((num_levels, config.n_layers, model.site_width(config, s)), dtype)
              for s in sites}
    optimizer, step_fn = _step(config, float(learning_rate), num_levels)
    data_key, run_key = jax.random.split(key)
    state = core_train.init_train_state(shift0, optimizer, run_key)
    data = (data_key, jnp.asarray(tokens), params, thr)
    if mesh is not None:
        if batch_size % mesh.size:
            raise ValueError(f"batch_size={batch_size} must be a multiple of the mesh's "
                             f"{mesh.size} devices")
        state = sharding.replicate(state, mesh)
        data = sharding.replicate(data, mesh)
        batch_fn = _Batches(batch_size, seq_len, mesh, mesh.axis_names[0])
    else:
        batch_fn = _Batches(batch_size, seq_len)
    state, history = core_train.fit(step_fn, state, batch_fn, num_steps=num_steps,
                                    chunk_size=chunk_size, checkpoint_dir=checkpoint_dir,
                                    checkpoint_every=checkpoint_every, progress=progress,
                                    desc="spon", data=data)
    shift = state.params if batched else {s: v[0] for s, v in state.params.items()}
    return shift, history
