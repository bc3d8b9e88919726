"""SuperMeshNet (ICML 2026): semi-supervised mesh super-resolution with complementary MPNNs.

A low-resolution (LR) field on a coarse triangle mesh is mapped to a high-resolution (HR) field on a
finer mesh of the same domain (the meshes need not be nested). A shared MeshGraphNets trunk embeds
a sample on its HR nodes; two heads read the embedding:

* ``F_i = MLP_F(emb_i) + knn(y^L_i: L_i -> H_i)``, the super-resolved field (the kNN residual when
  ``residual``);
* ``G_ij = MLP_G(emb_i - knn(emb_j: H_j -> H_i))
  + knn(y^L_i - knn(y^L_j: L_j -> L_i), L_i -> H_i)``, the *difference* of the HR fields of
  samples i and j, on i's HR nodes.

Complementary training (the release's ``train_MGN_comp``) draws two paired samples 1, 2 (LR and HR
fields) and one LR-only sample 3 and minimises ``L = L_F + L_G`` with (sg = stop-gradient; every
term the mean square over the real HR nodes of the sample it lives on; ``knn(a -> b)`` moves a
field from sample a's HR nodes to sample b's)::

    L_F = |F1 - y1|^2 + |F2 - y2|^2 + |F3 - sg(G31 + knn(y1 -> 3))|^2
          + |F3 - sg(knn(y2 - G23 -> 3))|^2
    L_G = |G12 - (y1 - knn(y2 -> 1))|^2 + |G31 - (sg(F3) - knn(y1 -> 3))|^2
          + |G23 - (y2 - sg(knn(F3 -> 2)))|^2

so F teaches G on the LR-only sample and G (through the paired targets) teaches F. The supervised
baseline minimises ``|F - y|^2`` on one pair.

Model (release ``models/MGN.py``, ``MGN_shared``): MLPs Linear-ReLU-Linear-ReLU-Linear of width
``hidden`` (30); LR node input ``[y^L, pos]``, edge input ``[pos_s, pos_r]``; encoders, ``depth``
(3) :class:`~jaxpapers.graph.MPNNBlock` s with residuals (``ib_n``: centre node outputs over real
nodes; ``ib_e``: centre aggregated messages over real nodes), kNN interpolation (k = 3,
``w = 1 / (d^2 + 1e-8)``) of the node embeddings to the HR nodes, an HR edge encoder from
``[pos_s, pos_r]`` and ``depth`` more blocks. Edges: the 6 directed edges of every triangle, with
the duplicates of shared edges kept, as the release builds them (``utils/dataset.py``); see
:func:`triangle_edges`.

Data: :class:`MeshSample` holds one sample's LR and HR graphs, positions and fields, padded to fixed
node and edge slots so that samples stack into batches; :func:`mesh_sample` builds one from numpy
meshes with the release's normalisation (positions min-max per sample and axis, both fields scaled
by the LR field's min and range). Every function below is written for one sample or one triplet
(unbatched) and ignores padded slots; :func:`batch_loss` vmaps over a batch (optionally under
``jax.shard_map`` on a caller's mesh) and :func:`train` runs it on
:func:`jaxpapers.core.train.fit`.

>>> pts = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
>>> tri = np.array([[0, 1, 2], [1, 3, 2]])
>>> sample = mesh_sample(pts, tri, [0.0, 1.0, 1.0, 2.0], pts, tri, [0.0, 1.0, 1.0, 2.0])
>>> params = init(jax.random.key(0), sample)
>>> jax.jit(predict)(params, sample).shape
(4,)
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
from jax.sharding import PartitionSpec as P

from jaxpapers.core import checks, pytree
from jaxpapers.core import sharding as core_sharding
from jaxpapers.core import train as core_train
from jaxpapers.graph.build import real_edges
from jaxpapers.graph.meshes import (MeshSample, _check_sample, mesh_sample, stack_samples,
                                    triangle_edges)
from jaxpapers.graph.mpnn import MPNNBlock
from jaxpapers.graph.propagate import (KnnNeighbours, knn_apply, knn_interpolate,
                                       knn_neighbours)

__all__ = ["MeshSample", "SuperMeshNet", "SuperMeshNetParams", "triangle_edges", "mesh_sample",
           "stack_samples", "init", "trunk", "decoder_f", "decoder_g", "predict",
           "complementary_loss", "supervised_loss", "batch_loss", "make_loss_fn", "train",
           "draw_indices",
           "rmse", "knn_rmse"]

KINDS = ("complementary", "supervised")


# --------------------------------------------------------------------------- containers
@dataclasses.dataclass(frozen=True)
class SuperMeshNet:
    """Static model configuration (hashable; carried by :class:`SuperMeshNetParams`).

    Attributes:
      hidden: MLP width and embedding size (release: 30).
      depth: message-passing blocks on each of the LR and HR graphs (release: 3).
      k: neighbours of the kNN interpolations (release: 3).
      eps: added to squared distances in the kNN weights ``1 / (d^2 + eps)`` (release: 1e-8).
      ib_n: centre node outputs over real nodes after each block (inductive bias ``ib_n``).
      ib_e: centre aggregated messages over real nodes in each block (``ib_e``).
      residual: add the kNN-interpolated LR field (difference) to the F (G) head.
    """

    hidden: int = 30
    depth: int = 3
    k: int = 3
    eps: float = 1e-8
    ib_n: bool = True
    ib_e: bool = True
    residual: bool = True

    def __post_init__(self):
        checks.check_int("hidden", self.hidden, minimum=1)
        checks.check_int("depth", self.depth, minimum=0)
        checks.check_int("k", self.k, minimum=1)
        checks.check_range("eps", float(self.eps), low=0.0, low_open=True, scalar=True)
        for name in ("ib_n", "ib_e", "residual"):
            checks.check_bool(name, getattr(self, name))


@pytree.dataclass
class SuperMeshNetParams:
    """Parameters of the trunk and both heads; the configuration rides along as static data.

    Attributes:
      trunk: Flax variables of the shared encoder-processor (both graphs).
      decoder_f: Flax variables of ``MLP_F``.
      decoder_g: Flax variables of ``MLP_G``.
      config: the :class:`SuperMeshNet` they were made for (static, part of the treedef).
    """

    trunk: Any
    decoder_f: Any
    decoder_g: Any
    config: SuperMeshNet = pytree.static_field()


# --------------------------------------------------------------------------- networks


class _MLP(nn.Module):
    """Linear-ReLU-Linear-ReLU-Linear (release ``models/Common.py`` ``MLP``)."""

    hidden: int
    out: int

    @nn.compact
    def __call__(self, v):
        v = nn.relu(nn.Dense(self.hidden)(v))
        v = nn.relu(nn.Dense(self.hidden)(v))
        return nn.Dense(self.out)(v)


class _Block(nn.Module):
    """One GN block (release ``GnBlock``) as a scan body: carry ``(x, e)``, broadcast graph."""

    config: SuperMeshNet

    @nn.compact
    def __call__(self, carry, graph):
        c = self.config
        x, e = MPNNBlock(c.hidden, num_layers=3, residual=True, center_nodes=c.ib_n,
                         center_aggregate=c.ib_e, activation=nn.relu, name="block")(graph, *carry)
        self.sow("intermediates", "x", x)
        return (x, e), None


class _Trunk(nn.Module):
    """Encoders, LR blocks, kNN to HR, HR edge encoder, HR blocks -> [N_H, H] embeddings.

    The ``depth`` blocks of each graph run as one ``nn.scan`` (parameters stacked on a leading
    axis of size depth): the same numbers as an unrolled loop, a third of the program to compile.
    """

    config: SuperMeshNet

    @nn.compact
    def __call__(self, sample: MeshSample, lr_to_hr: KnnNeighbours) -> jax.Array:
        c = self.config
        lg, hg = sample.lr_graph, sample.hr_graph

        def edge_input(g, pos):
            return jnp.concatenate([pos[g.senders], pos[g.receivers]], -1)  # [E, 4]

        def blocks(name, g, x, e):
            if c.depth == 0:
                return x
            scan = nn.scan(_Block, variable_axes={"params": 0, "intermediates": 0},
                           split_rngs={"params": True}, in_axes=nn.broadcast, length=c.depth)
            (x, _), _ = scan(c, name=name)((x, e), g)
            return x

        x = jnp.concatenate([sample.lr_y[:, None], sample.lr_pos], -1)  # [N_L, 3]
        x = jnp.where(lg.node_mask[:, None], _MLP(c.hidden, c.hidden, name="lr_node_encoder")(x),
                      0.0)
        e = _MLP(c.hidden, c.hidden, name="lr_edge_encoder")(edge_input(lg, sample.lr_pos))
        e = jnp.where(real_edges(lg)[:, None], e, 0.0)
        x = blocks("lr_blocks", lg, x, e)
        x = knn_apply(lr_to_hr, x)  # [N_H, H]
        x = jnp.where(hg.node_mask[:, None], x, 0.0)
        e = _MLP(c.hidden, c.hidden, name="hr_edge_encoder")(edge_input(hg, sample.hr_pos))
        e = jnp.where(real_edges(hg)[:, None], e, 0.0)
        return blocks("hr_blocks", hg, x, e)


def _head(config: SuperMeshNet) -> _MLP:
    return _MLP(config.hidden, 1)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _torch_linear_init(key: jax.Array, treedef: Any, shapes: tuple) -> Any:
    """PyTorch's ``nn.Linear`` default init for every Dense of ``shapes`` (a tree of shape structs).

    ``kernel`` and ``bias`` ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in the kernel's input
    size (``kernel`` [..., fan_in, fan_out], a leading axis for scanned blocks), as the release's
    torch modules start. All values come from one ``uniform`` draw, cut in tree order. Jitted
    with the (hashable) treedef and leaf shapes static: traceable, and compiled once per model.
    """
    leaves = jax.tree_util.tree_flatten_with_path(jax.tree.unflatten(treedef, shapes))[0]
    sizes = [int(np.prod(x.shape)) for _, x in leaves]
    u = jax.random.uniform(key, (sum(sizes),), leaves[0][1].dtype, -1.0, 1.0)
    fan_in = {}
    for path, x in leaves:
        if getattr(path[-1], "key", None) == "kernel":
            fan_in[jax.tree_util.keystr(path[:-1])] = x.shape[-2]
    out, offset = [], 0
    for (path, x), size in zip(leaves, sizes):
        bound = 1.0 / np.sqrt(fan_in[jax.tree_util.keystr(path[:-1])])
        out.append(bound * u[offset:offset + size].reshape(x.shape))
        offset += size
    return jax.tree_util.tree_unflatten(treedef, out)


def init(key: jax.Array, sample: MeshSample, *, hidden: int = 30, depth: int = 3, k: int = 3,
         eps: float = 1e-8, ib_n: bool = True, ib_e: bool = True,
         residual: bool = True) -> SuperMeshNetParams:
    """Fresh parameters for samples shaped like ``sample``, initialised as PyTorch's ``nn.Linear``.

    Every Dense layer's kernel and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (the release's torch
    default), drawn in one ``jax.random.uniform`` call, so nothing but the draw is compiled.

    Args:
      key: consumed.
      sample: an unbatched :class:`MeshSample` (only its structure and dtype are used; the
        parameters fit every sample size).
      hidden, depth, k, eps, ib_n, ib_e, residual: the :class:`SuperMeshNet` configuration.

    Returns:
      :class:`SuperMeshNetParams` carrying the configuration.

    Raises:
      ValueError: a bad configuration value (naming it, e.g. ``k`` < 1) or sample shape.
    """
    config = SuperMeshNet(hidden=hidden, depth=depth, k=k, eps=eps, ib_n=ib_n, ib_e=ib_e,
                          residual=residual)
    checks.check_key("key", key)
    sample = _check_sample(sample, "sample")
    probe = jnp.zeros((1, config.hidden), sample.lr_pos.dtype)
    k0 = jax.random.key(0)  # shapes only: eval_shape never draws
    shapes = jax.eval_shape(lambda: (
        _Trunk(config).init(k0, sample, _lr_to_hr(config, sample)),
        _head(config).init(k0, probe), _head(config).init(k0, probe)))
    leaves, treedef = jax.tree.flatten(shapes)
    v_trunk, v_f, v_g = _torch_linear_init(key, treedef, tuple(leaves))
    return SuperMeshNetParams(v_trunk, v_f, v_g, config)


def _check_params(params: Any) -> SuperMeshNet:
    if not isinstance(params, SuperMeshNetParams):
        raise ValueError(f"params must be SuperMeshNetParams (from init), got "
                         f"{type(params).__name__}")
    return params.config


def _neighbours(config: SuperMeshNet, pos_src, mask_src, pos_dst) -> KnnNeighbours:
    """The k nearest real sources (``mask_src``) of every destination, release weights."""
    return knn_neighbours(pos_src, pos_dst, k=config.k, src_mask=mask_src, eps=config.eps)


def _lr_to_hr(config: SuperMeshNet, sample: MeshSample) -> KnnNeighbours:
    return _neighbours(config, sample.lr_pos, sample.lr_mask, sample.hr_pos)


def trunk(params: SuperMeshNetParams, sample: MeshSample, *, intermediates: bool = False):
    """HR node embeddings of one sample (unbatched): ``emb`` [N_H, H], 0 on padded nodes.

    Args:
      params: from :func:`init`.
      sample: an unbatched :class:`MeshSample`.
      intermediates: also return the node outputs of every block (static).

    Returns:
      ``emb``, or ``(emb, (lr_blocks, hr_blocks))`` with the node outputs of every block:
      ``lr_blocks`` [depth, N_L, H] and ``hr_blocks`` [depth, N_H, H].
    """
    config = _check_params(params)
    sample = _check_sample(sample, "sample")
    return _trunk(params, sample, _lr_to_hr(config, sample), intermediates)


def _trunk(params, sample, lr_to_hr, intermediates=False):
    config = params.config
    module = _Trunk(config)
    if not intermediates:
        return module.apply(params.trunk, sample, lr_to_hr)
    emb, state = module.apply(params.trunk, sample, lr_to_hr, mutable=["intermediates"])
    got = state.get("intermediates", {})

    def blocks(name, n):  # [depth, n, H] (nothing sown when depth == 0)
        return got[name]["x"][0] if name in got else jnp.zeros((0, n, config.hidden))

    return emb, (blocks("lr_blocks", sample.lr_y.shape[0]),
                 blocks("hr_blocks", sample.hr_y.shape[0]))


def decoder_f(params: SuperMeshNetParams, emb: jax.Array, sample: MeshSample) -> jax.Array:
    """``F = MLP_F(emb) + knn(y^L: L -> H)`` (the residual when ``residual``), unbatched.

    Args:
      params: from :func:`init`.
      emb: [N_H, H] embeddings of ``sample`` (:func:`trunk`).
      sample: the sample.

    Returns:
      [N_H] predicted normalised HR field (values on padded nodes are meaningless).
    """
    config = _check_params(params)
    sample = _check_sample(sample, "sample")
    return _decoder_f(params, emb, sample.lr_y, _lr_to_hr(config, sample))


def _decoder_f(params, emb, lr_y, lr_to_hr):
    out = _head(params.config).apply(params.decoder_f, emb)[:, 0]
    if params.config.residual:
        out = out + knn_apply(lr_to_hr, lr_y)
    return out


def decoder_g(params: SuperMeshNetParams, emb_i: jax.Array, sample_i: MeshSample,
              emb_j: jax.Array, sample_j: MeshSample) -> jax.Array:
    """The field difference ``G_ij`` ~ ``y_i - knn(y_j: H_j -> H_i)`` on i's HR nodes, unbatched.

    ``G_ij = MLP_G(emb_i - knn(emb_j: H_j -> H_i))
    + knn(y^L_i - knn(y^L_j: L_j -> L_i), L_i -> H_i)``
    (the second term when ``residual``; release ``Decoder_G``).

    Args:
      params: from :func:`init`.
      emb_i, emb_j: [N_H, H] embeddings of samples i and j.
      sample_i, sample_j: the samples.

    Returns:
      [N_H] on sample i's HR nodes.
    """
    c = _check_params(params)
    sample_i = _check_sample(sample_i, "sample_i")
    sample_j = _check_sample(sample_j, "sample_j")
    return _decoder_g(params, emb_i, emb_j, sample_i.lr_y, sample_j.lr_y,
                      _neighbours(c, sample_j.hr_pos, sample_j.hr_mask, sample_i.hr_pos),
                      _neighbours(c, sample_j.lr_pos, sample_j.lr_mask, sample_i.lr_pos),
                      _lr_to_hr(c, sample_i))


def _decoder_g(params, emb_i, emb_j, lr_y_i, lr_y_j, hr_j_to_i, lr_j_to_i, lr_i_to_hr_i):
    out = _head(params.config).apply(params.decoder_g, emb_i - knn_apply(hr_j_to_i, emb_j))[:, 0]
    if params.config.residual:
        out = out + knn_apply(lr_i_to_hr_i, lr_y_i - knn_apply(lr_j_to_i, lr_y_j))
    return out


def predict(params: SuperMeshNetParams, sample: MeshSample) -> jax.Array:
    """[N_H] normalised HR prediction ``F`` of one sample (``y_min + y_range * F`` in units)."""
    return decoder_f(params, trunk(params, sample), sample)


# --------------------------------------------------------------------------- losses


def _masked_mse(pred: jax.Array, target: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean of ``(pred - target)^2`` over the real nodes ``mask``."""
    sq = jnp.where(mask, (pred - target) ** 2, 0.0)
    return jnp.sum(sq) / jnp.maximum(jnp.sum(mask), 1).astype(sq.dtype)


def complementary_loss(params: SuperMeshNetParams, triplet: Sequence[MeshSample]
                       ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The complementary loss ``L_F + L_G`` of one triplet (module docs; ``train_MGN_comp``).

    Unbatched (see :func:`batch_loss`). The stop-gradients make ``L_F`` independent of the G head's
    parameters and ``L_G`` of the F head's; the trunk gets gradients from both.

    Args:
      params: from :func:`init`.
      triplet: ``(sample_1, sample_2, sample_3)``: two paired samples (``hr_y`` the HR targets)
        and one LR-only sample (its ``hr_y`` is not read), with equal slot counts.

    Returns:
      ``(loss, aux)``; aux holds the seven terms ``f1``, ``f2``, ``f3_g31``
      (``|F3 - sg(G31 + knn(y1 -> 3))|^2``), ``f3_g23`` (``|F3 - sg(knn(y2 - G23 -> 3))|^2``),
      ``g12``, ``g31``, ``g23``, and their sums ``loss_f``, ``loss_g``.
    """
    config = _check_params(params)
    if not isinstance(triplet, (tuple, list)) or len(triplet) != 3:
        raise ValueError(f"triplet must be a (paired, paired, LR-only) tuple of 3 MeshSamples, "
                         f"got {type(triplet).__name__}")
    s1, s2, s3 = (_check_sample(s, f"triplet[{i}]") for i, s in enumerate(triplet))
    if len({jax.tree.structure(s) for s in triplet}) > 1 or len(
            {tuple(x.shape for x in jax.tree.leaves(s)) for s in triplet}) > 1:
        raise ValueError("triplet samples must share node and edge slot counts (build them with "
                         "the same max_lr_nodes / max_lr_edges / max_hr_nodes / max_hr_edges)")
    # The three samples run as one vmapped trunk / head (a third of the program to compile), and
    # each neighbour search runs once: LR_i -> HR_i (trunk, F and G residuals), HR_j -> HR_i and
    # LR_j -> LR_i for the pairs (i, j) = (1, 2), (2, 3), (3, 1) of G12, G23, G31 (their HR
    # searches also move y2 -> 1, F3 -> 2 and y1 -> 3 in the loss), and HR_2 -> HR_3.
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), s1, s2, s3)  # [3, ...]
    nxt = lambda tree: jax.tree.map(lambda a: jnp.roll(a, -1, axis=0), tree)  # j = i + 1 mod 3
    others = nxt(stacked)
    nb = jax.vmap(_neighbours, in_axes=(None, 0, 0, 0))
    lr_to_hr = nb(config, stacked.lr_pos, stacked.lr_mask, stacked.hr_pos)
    hr_j_to_i = nb(config, others.hr_pos, others.hr_mask, stacked.hr_pos)
    lr_j_to_i = nb(config, others.lr_pos, others.lr_mask, stacked.lr_pos)
    emb = jax.vmap(_trunk, in_axes=(None, 0, 0))(params, stacked, lr_to_hr)  # [3, N_H, H]
    f1, f2, f3 = jax.vmap(_decoder_f, in_axes=(None, 0, 0, 0))(params, emb, stacked.lr_y,
                                                               lr_to_hr)
    g12, g23, g31 = jax.vmap(_decoder_g, in_axes=(None, 0, 0, 0, 0, 0, 0, 0))(
        params, emb, nxt(emb), stacked.lr_y, others.lr_y, hr_j_to_i, lr_j_to_i, lr_to_hr)
    h2_to_h3 = _neighbours(config, s2.hr_pos, s2.hr_mask, s3.hr_pos)
    sg = jax.lax.stop_gradient

    y1, y2 = s1.hr_y, s2.hr_y
    # y2 -> 1, F3 -> 2, y1 -> 3 through the three HR searches at once: slicing the searches
    # instead would stop XLA from rewriting their sort into its fast top-k (20x slower on CPU)
    y2_on_1, f3_on_2, y1_on_3 = jax.vmap(knn_apply)(hr_j_to_i, jnp.stack([y2, sg(f3), y1]))
    terms = {
        "f1": _masked_mse(f1, y1, s1.hr_mask),
        "f2": _masked_mse(f2, y2, s2.hr_mask),
        "f3_g31": _masked_mse(f3, sg(g31 + y1_on_3), s3.hr_mask),
        "f3_g23": _masked_mse(f3, sg(knn_apply(h2_to_h3, y2 - g23)), s3.hr_mask),
        "g12": _masked_mse(g12, y1 - y2_on_1, s1.hr_mask),
        "g31": _masked_mse(g31, sg(f3) - y1_on_3, s3.hr_mask),
        "g23": _masked_mse(g23, y2 - f3_on_2, s2.hr_mask),
    }
    loss_f = terms["f1"] + terms["f2"] + terms["f3_g31"] + terms["f3_g23"]
    loss_g = terms["g12"] + terms["g31"] + terms["g23"]
    return loss_f + loss_g, {**terms, "loss_f": loss_f, "loss_g": loss_g}


def supervised_loss(params: SuperMeshNetParams, pair: MeshSample
                    ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """``|F - y|^2`` over the real HR nodes of one paired sample (release ``train_MGN_sup``).

    Returns:
      ``(loss, {"mse": loss})``.
    """
    _check_params(params)
    pair = _check_sample(pair, "pair")
    loss = _masked_mse(predict(params, pair), pair.hr_y, pair.hr_mask)
    return loss, {"mse": loss}


def rmse(params: SuperMeshNetParams, sample: MeshSample) -> jax.Array:
    """[] ``sqrt(mean over real HR nodes of (F - y)^2)`` in normalised units (unbatched)."""
    return jnp.sqrt(supervised_loss(params, sample)[0])


def knn_rmse(sample: MeshSample, *, k: int = 3, eps: float = 1e-8) -> jax.Array:
    """[] RMSE of the kNN-interpolation baseline ``knn(y^L: L -> H)`` (normalised units)."""
    sample = _check_sample(sample, "sample")
    base = knn_interpolate(sample.lr_y, sample.lr_pos, sample.hr_pos, k=k, src_mask=sample.lr_mask,
                           eps=eps)
    return jnp.sqrt(_masked_mse(base, sample.hr_y, sample.hr_mask))


def batch_loss(params: SuperMeshNetParams, batch: Any, *, kind: str = "complementary",
               mesh: jax.sharding.Mesh | None = None, axis_name: str | None = None
               ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Mean loss and aux over a batch: ``vmap`` of the per-sample loss, optionally sharded.

    With ``mesh``, ``jax.shard_map`` splits the batch over ``axis_name``; each device averages its
    block and a ``pmean`` averages the blocks (equal sizes, so this is the batch mean).

    Args:
      params: from :func:`init` (replicated).
      batch: ``kind="complementary"``: a triplet of batched samples ``(S1, S2, S3)``, each
        :class:`MeshSample` with leading axis B; ``"supervised"``: one batched sample.
      kind: ``"complementary"`` or ``"supervised"`` (static).
      mesh: optional mesh made by the caller; B must be divisible by its ``axis_name`` size.
      axis_name: the batch axis of ``mesh`` (default: its first axis).

    Returns:
      ``(loss, aux)``, batch means of :func:`complementary_loss` or :func:`supervised_loss`.
    """
    checks.check_choice("kind", kind, KINDS)
    per_sample = complementary_loss if kind == "complementary" else supervised_loss
    if kind == "complementary":
        batch = tuple(batch)

    def local(params, batch):
        loss, aux = jax.vmap(per_sample, in_axes=(None, 0))(params, batch)
        return jnp.mean(loss), jax.tree.map(jnp.mean, aux)

    if mesh is None:
        return local(params, batch)
    axis = axis_name or mesh.axis_names[0]
    if axis not in mesh.axis_names:
        raise ValueError(f"axis_name must be one of the mesh axes {mesh.axis_names}, got {axis!r}")
    size = {np.shape(x)[0] for x in jax.tree.leaves(batch)}
    if len(size) != 1 or next(iter(size)) % mesh.shape[axis]:
        raise ValueError(f"the batch size {sorted(size)} must be one number divisible by the "
                         f"size {mesh.shape[axis]} of mesh axis {axis!r}")

    def sharded(params, batch):
        return jax.lax.pmean(local(params, batch), axis)

    return jax.shard_map(sharded, mesh=mesh, in_specs=(P(), P(axis)),
                         out_specs=(P(), P()))(params, batch)


def make_loss_fn(*, kind: str = "complementary", mesh: jax.sharding.Mesh | None = None,
                 axis_name: str | None = None):
    """``loss_fn(params, batch, key) -> (loss, aux)`` for ``core.train.make_train_step``.

    Use with ``has_aux=True``. ``key`` is unused (the model is deterministic).

    >>> import optax
    >>> from jaxpapers.core.train import make_train_step
    >>> step = make_train_step(make_loss_fn(kind="supervised"), optax.adam(1e-3), has_aux=True)
    """
    checks.check_choice("kind", kind, KINDS)

    def loss_fn(params, batch, key):
        del key
        return batch_loss(params, batch, kind=kind, mesh=mesh, axis_name=axis_name)

    return loss_fn


@dataclasses.dataclass(frozen=True)
class _Sampler:
    """``batch_fn(step, data)`` for :func:`~jaxpapers.core.train.fit`: draws B samples / triplets.

    Hashable by value (a static argument of the compiled chunk). The draw of step t uses
    ``fold_in(key, t)``: two distinct paired samples and one LR-only sample per triplet (release
    ``train_MGN_comp``), or one paired sample (``train_MGN_sup``), with replacement across steps.
    """

    kind: str
    batch_size: int

    def __call__(self, step, data):
        key = jax.random.fold_in(jax.random.wrap_key_data(data["key"]), step)
        paired = data["paired"]
        num_paired = jax.tree.leaves(paired)[0].shape[0]
        take = lambda tree, idx: jax.tree.map(lambda a: a[idx], tree)
        if self.kind == "supervised":
            return take(paired, draw_indices(key, self.batch_size, num_paired))
        unpaired = data["unpaired"]
        i1, i2, i3 = draw_indices(key, self.batch_size, num_paired,
                                  jax.tree.leaves(unpaired)[0].shape[0])
        return take(paired, i1), take(paired, i2), take(unpaired, i3)


def draw_indices(key: jax.Array, batch_size: int, num_paired, num_unpaired=None):
    """Sample ids of one step's batch (release ``train_MGN_comp`` / ``train_MGN_sup``).

    Args:
      key: consumed.
      batch_size: B (static).
      num_paired: P, paired samples to draw from (may be traced; >= 2 for triplets).
      num_unpaired: U, LR-only samples; None for a supervised batch.

    Returns:
      ``i1`` [B] uniform in [0, P) when ``num_unpaired`` is None, else ``(i1, i2, i3)``: two
      distinct paired ids per triplet (``i2 = i1 + U{1..P-1} mod P``) and one LR-only id in
      [0, U).
    """
    k1, k2, k3 = jax.random.split(key, 3)
    i1 = jax.random.randint(k1, (batch_size,), 0, num_paired)
    if num_unpaired is None:
        return i1
    i2 = (i1 + jax.random.randint(k2, (batch_size,), 1, num_paired)) % num_paired
    return i1, i2, jax.random.randint(k3, (batch_size,), 0, num_unpaired)


def train(params: SuperMeshNetParams, key: jax.Array, *, paired: MeshSample,
          unpaired: MeshSample | None = None, num_steps: int, kind: str = "complementary",
          batch_size: int = 1, learning_rate: float = 1e-3,
          mesh: jax.sharding.Mesh | None = None, axis_name: str | None = None,
          **fit_kwargs) -> tuple[core_train.TrainState, dict[str, np.ndarray]]:
    """Adam on :func:`batch_loss` via :func:`jaxpapers.core.train.fit` (checkpoints, progress).

    Each step draws ``batch_size`` triplets (two distinct paired samples and one LR-only sample)
    or paired samples, uniformly with replacement across steps, from ``fold_in(key, step)``.

    Args:
      params: from :func:`init`.
      key: consumed: the run's base key and the data-drawing key.
      paired: batched :class:`MeshSample` [P] with HR targets (P >= 2 for complementary).
      unpaired: batched LR-only samples [U] (complementary only).
      num_steps: total optimisation steps (a resumed run continues to it).
      kind: ``"complementary"`` or ``"supervised"``.
      batch_size: triplets / pairs per step (release: 1).
      learning_rate: Adam step size (release: 1e-3).
      mesh, axis_name: optional data-parallel mesh (``batch_size`` divisible by its size);
        state and data are replicated on it.
      **fit_kwargs: passed to :func:`~jaxpapers.core.train.fit` (``checkpoint_dir``,
        ``checkpoint_every``, ``chunk_size``, ``progress``, ...).

    Returns:
      ``(state, history)`` from ``fit``; ``state.params`` are the trained parameters; history
      has ``loss``, ``grad_norm`` and the aux terms per step.
    """
    checks.check_key("key", key)
    checks.check_choice("kind", kind, KINDS)
    batch_size = checks.check_int("batch_size", batch_size, minimum=1)
    num_paired = jax.tree.leaves(paired)[0].shape[0] if jax.tree.leaves(paired) else 0
    if kind == "complementary":
        if num_paired < 2:
            raise ValueError(f"paired must hold >= 2 samples for complementary training, got "
                             f"{num_paired}")
        if unpaired is None:
            raise ValueError("unpaired (the LR-only samples) is required for complementary "
                             "training, got None")
    elif num_paired < 1:
        raise ValueError("paired must hold >= 1 sample, got 0")
    k_state, k_data = jax.random.split(key)
    optimizer = optax.adam(learning_rate)
    step_fn = core_train.make_train_step(
        make_loss_fn(kind=kind, mesh=mesh, axis_name=axis_name), optimizer, has_aux=True)
    state = core_train.init_train_state(params, optimizer, k_state)
    data = {"key": jax.random.key_data(k_data), "paired": paired}
    if kind == "complementary":
        data["unpaired"] = unpaired
    if mesh is not None:
        state = core_sharding.replicate(state, mesh)
        data = core_sharding.replicate(data, mesh)
    fit_kwargs.setdefault("desc", f"supermeshnet-{kind}")
    return core_train.fit(step_fn, state, _Sampler(kind, batch_size), num_steps=num_steps,
                          data=data, **fit_kwargs)
