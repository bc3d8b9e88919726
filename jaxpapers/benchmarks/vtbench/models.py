"""VT-Bench fusion models in Flax linen: unimodal baselines, Concat, MAX, MUL, DAFT.

Every model is split as the official diagnostics adapter splits it: ``embed(params, image,
table) -> (z_img, z_tab)`` and ``head(params, z_img, z_tab) -> outputs`` with
``apply = head . embed``, so modality ablations (MCR) and integrated gradients act on the
embeddings. Shapes: image [N, H, W, C], table [N, D], outputs [N, K] (``num_outputs`` logits, or
column 0 as the value of a regression).

- ``image`` / ``table``: a linear head on one encoder (the other embedding is ignored).
- ``concat``: ``Linear([z_img, z_tab])`` (official: one linear layer, so the logits are an image
  term plus a table term and cannot represent an interaction of the two).
- ``concat_mlp``: an MLP head on the concatenation (ours: the smallest head that can).
- ``max``: ``Linear(max(W z_img, z_tab))`` (official MAX).
- ``mul``: a tabular stream whose outputs multiply the image feature maps channel-wise after
  every stage (official MUL). Its embeddings are the *inputs* (flattened image, table): the
  official adapter does not support MUL, we ablate at the input level instead.
- ``daft``: on the last stage's map F, ``h = [avgpool(F), table] -> Linear(|h| / 7) -> ReLU ->
  Linear(2C) = (scale, shift)``, ``F' = scale F + shift``, a bottleneck residual block (1x1,
  3x3, 1x1) on F' plus F, ReLU, average pool, Linear (official DAFT, without batch norm). The
  embeddings are (F flattened, the raw table): DAFT's tabular encoder is the identity.

The image encoder is three 3x3 conv stages (widths w, 2w, 4w; 2x2 average pooling before stages
2 and 3) written as patch extraction (shifted slices) plus a dense layer: the same
convolution, much cheaper on 8 x 8 maps on a CPU than ``nn.Conv``. The table encoder is a two-layer MLP.
All seeds and tasks of one model train in one jitted program (:func:`train_models`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.core import train

__all__ = ["MODELS", "ModelConfig", "init", "embed", "head", "apply", "train_models",
           "predict_stacked"]

MODELS = ("image", "table", "concat", "concat_mlp", "max", "mul", "daft")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """A model's static structure (hashable: one compiled program per config).

    Attributes:
      kind: one of :data:`MODELS`.
      num_outputs: K logits (a regression reads column 0).
      image_shape: (H, W, C) of one image.
      table_dim: D table features.
      width: w, channels of the first conv stage (then 2w, 4w).
      tab_width: width of the table MLP and of MAX's shared space.
      hidden: width of the concat_mlp head.
    """

    kind: str
    num_outputs: int
    image_shape: tuple[int, int, int]
    table_dim: int
    width: int = 16
    tab_width: int = 64
    hidden: int = 128

    def __post_init__(self):
        if self.kind not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.kind!r}")
        for name in ("num_outputs", "width", "tab_width", "hidden"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if (not isinstance(self.image_shape, tuple) or len(self.image_shape) != 3
                or any(not isinstance(s, int) or s < 1 for s in self.image_shape)):
            raise ValueError(f"image_shape must be a tuple (H, W, C) of ints >= 1, got "
                             f"{self.image_shape!r}")
        if isinstance(self.table_dim, bool) or not isinstance(self.table_dim, int) \
                or self.table_dim < 0:
            raise ValueError(f"table_dim must be an int >= 0, got {self.table_dim!r}")
        if self.table_dim == 0 and self.kind != "image":
            raise ValueError(f"table_dim 0 (no table) needs model 'image', got {self.kind!r}")


def _patches(x: jax.Array, size: int) -> jax.Array:
    """SAME, stride-1 patches of x [N, H, W, C] -> [N, H, W, size^2 C] by shifted slices
    (zero padding; on small maps on a CPU far cheaper to differentiate than
    ``lax.conv_general_dilated_patches``: 8.5 ms against 163 ms measured for one 4 x 4 stage)."""
    if size == 1:
        return x
    lo = (size - 1) // 2
    hi = size - 1 - lo
    _, h, w, _ = x.shape
    xp = jnp.pad(x, ((0, 0), (lo, hi), (lo, hi), (0, 0)))
    return jnp.concatenate([xp[:, i:i + h, j:j + w, :] for i in range(size)
                            for j in range(size)], axis=-1)


class _PatchConv(nn.Module):
    """A SAME convolution (stride 1) as patches [N, H, W, C k k] times a dense kernel."""

    features: int
    size: int = 3

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.features)(_patches(x, self.size))


def _pool(x):
    """2 x 2 average pooling (no-op on a side of 1)."""
    if x.shape[1] < 2 or x.shape[2] < 2:
        return x
    return nn.avg_pool(x, (2, 2), (2, 2))


class _Net(nn.Module):
    cfg: ModelConfig

    def setup(self):
        c = self.cfg
        w = c.width
        self.stages = [_PatchConv(w), _PatchConv(2 * w), _PatchConv(4 * w)]
        self.tab = [nn.Dense(c.tab_width), nn.Dense(c.tab_width)]
        if c.kind == "mul":
            self.mul = [nn.Dense(w), nn.Dense(2 * w), nn.Dense(4 * w)]
        if c.kind == "daft":
            n_h = 4 * w + c.table_dim
            self.daft_in = nn.Dense(max(n_h // 7, 1))
            self.daft_out = nn.Dense(2 * 4 * w)
            self.block = [_PatchConv(w, 1), _PatchConv(w, 3), _PatchConv(4 * w, 1)]
        if c.kind == "max":
            self.to_tab = nn.Dense(c.tab_width)
        if c.kind == "concat_mlp":
            self.hidden = nn.Dense(c.hidden)
        self.out = nn.Dense(c.num_outputs)

    def _maps(self, image, table=None):
        x = image
        h = table
        for i, conv in enumerate(self.stages):
            if i > 0:
                x = _pool(x)
            x = nn.relu(conv(x))
            if self.cfg.kind == "mul":
                m = self.mul[i](h)                               # [N, C_i] channel multipliers
                x = x * m[:, None, None, :]
                h = nn.relu(m)
        return x

    def _table(self, table):
        if self.cfg.table_dim == 0:  # an image-only model without a table
            return table
        return nn.relu(self.tab[1](nn.relu(self.tab[0](table))))

    def embed(self, image, table):
        k = self.cfg.kind
        n = image.shape[0]
        if k == "mul":
            return image.reshape(n, -1), table
        maps = self._maps(image)
        if k == "daft":
            return maps.reshape(n, -1), table
        return maps.mean(axis=(1, 2)), self._table(table)

    def head(self, z_img, z_tab):
        c, k = self.cfg, self.cfg.kind
        n = z_img.shape[0]
        if k == "mul":
            maps = self._maps(z_img.reshape((n,) + c.image_shape), z_tab)
            return self.out(maps.mean(axis=(1, 2)))
        if k == "daft":
            h_, w_ = _final_hw(c.image_shape)
            f = z_img.reshape(n, h_, w_, 4 * c.width)
            hvec = jnp.concatenate([f.mean(axis=(1, 2)), z_tab], axis=1)
            scale, shift = jnp.split(self.daft_out(nn.relu(self.daft_in(hvec))), 2, axis=1)
            f2 = scale[:, None, None, :] * f + shift[:, None, None, :]
            r = nn.relu(self.block[0](f2))
            r = nn.relu(self.block[1](r))
            r = self.block[2](r)
            return self.out(nn.relu(r + f).mean(axis=(1, 2)))
        if k == "image":
            return self.out(z_img)
        if k == "table":
            return self.out(z_tab)
        if k == "max":
            return self.out(jnp.maximum(self.to_tab(z_img), z_tab))
        both = jnp.concatenate([z_img, z_tab], axis=1)
        if k == "concat_mlp":
            return self.out(nn.relu(self.hidden(both)))
        return self.out(both)                                     # concat

    def __call__(self, image, table):
        return self.head(*self.embed(image, table))


def _final_hw(image_shape) -> tuple[int, int]:
    h, w = image_shape[:2]
    for _ in range(2):
        if h >= 2 and w >= 2:
            h, w = h // 2, w // 2
    return h, w


def _check_inputs(cfg: ModelConfig, image, table) -> None:
    if image.ndim != 4 or tuple(image.shape[1:]) != cfg.image_shape:
        raise ValueError(f"image must be [N, {', '.join(map(str, cfg.image_shape))}], got "
                         f"{tuple(image.shape)}")
    if table.ndim != 2 or table.shape[1] != cfg.table_dim:
        raise ValueError(f"table must be [N, {cfg.table_dim}], got {tuple(table.shape)}")
    if image.shape[0] != table.shape[0]:
        raise ValueError(f"image and table must have the same rows, got {image.shape[0]} and "
                         f"{table.shape[0]}")


def init(cfg: ModelConfig, key: jax.Array) -> dict:
    """Parameters of one model (``key`` consumed)."""
    img = jnp.zeros((1,) + cfg.image_shape, jnp.float32)
    tab = jnp.zeros((1, cfg.table_dim), jnp.float32)
    return _Net(cfg).init(key, img, tab)


def embed(cfg: ModelConfig, params: dict, image: jax.Array, table: jax.Array):
    """``(z_img [N, Di], z_tab [N, Dt])`` of image [N, H, W, C] and table [N, D]."""
    _check_inputs(cfg, image, table)
    return _Net(cfg).apply(params, image, table, method=_Net.embed)


def head(cfg: ModelConfig, params: dict, z_img: jax.Array, z_tab: jax.Array) -> jax.Array:
    """Outputs [N, K] from the embeddings (what MCR and integrated gradients probe)."""
    return _Net(cfg).apply(params, z_img, z_tab, method=_Net.head)


def apply(cfg: ModelConfig, params: dict, image: jax.Array, table: jax.Array) -> jax.Array:
    """Outputs [N, K] = ``head(embed(image, table))``."""
    _check_inputs(cfg, image, table)
    return _Net(cfg).apply(params, image, table)


@functools.partial(jax.jit, static_argnums=0)
def _init_stack(cfg: ModelConfig, keys: jax.Array) -> dict:
    """Parameters of one model per key, stacked (one compiled program per config)."""
    return jax.vmap(lambda k: init(cfg, k))(keys)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _init_state(cfg: ModelConfig, opt: optax.GradientTransformation, keys: jax.Array,
                k_run: jax.Array) -> train.TrainState:
    """:func:`_init_stack` and the fresh train state in one program (eagerly, the optimiser's
    zero moments would compile one small program per parameter shape)."""
    return train.init_train_state(_init_stack(cfg, keys), opt, k_run)


def _loss(cfg, params, image, table, y, regression):
    out = apply(cfg, params, image, table)
    labels = jnp.clip(y.astype(jnp.int32), 0, cfg.num_outputs - 1)
    ce = -jnp.take_along_axis(jax.nn.log_softmax(out), labels[:, None], axis=1)[:, 0]
    se = jnp.square(out[:, 0] - y)
    return jnp.mean(jnp.where(regression, se, ce))


def _at_step(step, data):
    """The batch of one step: the shared arrays and the step's minibatch rows of each replica."""
    return {**{k: v for k, v in data.items() if k != "idx"}, "idx": data["idx"][step]}


@functools.partial(jax.jit, static_argnames=("num_tasks", "steps", "batch_size", "n"))
def _minibatches(run_key: jax.Array, seeds: jax.Array, *, num_tasks: int, steps: int,
                 batch_size: int, n: int) -> jax.Array:
    """Row indices [steps, T * S, batch_size] of every step's minibatch of every replica.

    Replica (t, s) draws step ``i``'s rows with ``randint(fold_in(fold_in(fold_in(run_key, i),
    t), s), (batch_size,), 0, n)``, from the key the train step hands the loss at step ``i``.
    The rows do not depend on the parameters, so they are drawn here, in one program shared by
    every model of these shapes, rather than inside each model's training program (there the
    threefry loops were about 40% of a small model's step program). Memory: 4 bytes per row
    drawn (77 MB for the full config's 15k steps x 20 replicas x 64 rows).
    """
    ts = jnp.repeat(jnp.arange(num_tasks), seeds.shape[0])
    ss = jnp.tile(seeds, num_tasks)

    def at(i):
        step_key = jax.random.fold_in(run_key, i)

        def one(t, s):
            k = jax.random.fold_in(jax.random.fold_in(step_key, t), s)
            return jax.random.randint(k, (batch_size,), 0, n)

        return jax.vmap(one)(ts, ss)

    return jax.vmap(at)(jnp.arange(steps, dtype=jnp.int32))


@functools.lru_cache(maxsize=32)
def _step(cfg: ModelConfig, lr: float, num_tasks: int, num_seeds: int):
    """The stacked step for (tasks x seeds) replicas, built once per setting (seed values and
    minibatch rows travel in the data, see :func:`_minibatches`, so new seeds reuse the
    program)."""

    def stacked(params, batch, step_key):
        del step_key  # the step's minibatch rows were drawn from it beforehand: batch["idx"]

        def one(p, t, idx):
            return _loss(cfg, p, batch["image"][idx], batch["table"][t, idx],
                         batch["y"][t, idx], batch["regression"][t])

        ts = jnp.repeat(jnp.arange(num_tasks), num_seeds)
        losses = jax.vmap(one)(params, ts, batch["idx"])
        return jnp.sum(losses), {f"loss_{i}": losses[i] for i in range(num_tasks * num_seeds)}

    opt = optax.adam(lr)
    return opt, train.make_train_step(stacked, opt, has_aux=True)


def train_models(key: jax.Array, image: Any, tables: Any, ys: Any, *, cfg: ModelConfig,
                 regression: Any, seeds: Sequence[int], steps: int, batch_size: int = 128,
                 lr: float = 2e-3, progress: bool = False) -> tuple[dict, np.ndarray]:
    """Train one copy of a model per (task, seed) on T tasks sharing the images, in one program.

    Replica (t, s) starts from ``fold_in(fold_in(k_init, t), s)`` and draws its minibatches
    from ``fold_in(fold_in(step key, t), s)``, so its run does not depend on the other replicas
    stacked with it: training seeds (0, 1) together equals training (0,) and (1,) apart.

    Args:
      key: consumed (split into k_init and the run key).
      image: [N, H, W, C] float32, the training images (shared by the tasks).
      tables: [T, N, D] float32 (pad tables of different widths with zero columns).
      ys: [T, N] float32 targets (class ids as floats, or regression values).
      cfg: the model; ``regression``: bool [T], squared error on output 0 instead of
        cross-entropy.
      seeds: S distinct ints >= 0; steps, batch_size, lr: Adam, minibatches drawn with
        replacement per step.

    Returns:
      ``(params [T * S, ...] stacked task-major, loss history [steps, T * S])``.
    """
    image = jnp.asarray(image, jnp.float32)
    tables = jnp.asarray(tables, jnp.float32)
    ys = jnp.asarray(ys, jnp.float32)
    regression = jnp.asarray(regression, bool)
    if tables.ndim != 3 or ys.shape != tables.shape[:2] or regression.shape != tables.shape[:1]:
        raise ValueError(f"tables [T, N, D], ys [T, N] and regression [T] must agree, got "
                         f"{tables.shape}, {ys.shape}, {regression.shape}")
    _check_inputs(cfg, image, tables[0])
    for name, v in (("steps", steps), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    seeds = tuple(seeds)
    if (not seeds or len(set(seeds)) != len(seeds)
            or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0
                   for s in seeds)):
        raise ValueError(f"seeds must be distinct ints >= 0, got {seeds!r}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr!r}")
    t = tables.shape[0]
    k_init, k_run = jax.random.split(key)
    keys = jnp.stack([jax.random.fold_in(jax.random.fold_in(k_init, i), int(s))
                      for i in range(t) for s in seeds])
    opt, step = _step(cfg, float(lr), t, len(seeds))
    state = _init_state(cfg, opt, keys, k_run)
    idx = _minibatches(k_run, np.asarray(seeds, np.int32), num_tasks=t, steps=steps,
                       batch_size=int(batch_size), n=ys.shape[1])
    data = {"image": image, "table": tables, "y": ys, "regression": regression, "idx": idx}
    state, hist = train.fit(step, state, _at_step, num_steps=steps, chunk_size=steps,
                            progress=progress, desc=f"vtbench {cfg.kind}", data=data)
    losses = np.stack([hist[f"loss_{i}"] for i in range(t * len(seeds))], axis=1)
    return state.params, losses


@functools.partial(jax.jit, static_argnames=("cfg",))
def predict_stacked(params: dict, image: jax.Array, tables: jax.Array, *,
                    cfg: ModelConfig) -> jax.Array:
    """Outputs [T * S, N, K] of stacked models (task-major, as :func:`train_models` returns
    them) on image [N, ...] and each task's table ``tables`` [T, N, D]."""
    t = tables.shape[0]
    s = jax.tree.leaves(params)[0].shape[0] // t
    tab = jnp.repeat(tables, s, axis=0)
    return jax.vmap(lambda p, tb: apply(cfg, p, image, tb))(params, tab)
