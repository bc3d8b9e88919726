"""PINN networks (Flax linen): tanh MLP, residual MLP, modified MLP, PirateNet-style, coupling net.

Every network maps one point [d] to a scalar [] (unbatched; ``vmap`` at the boundary) and is built
from three stages that the diagnostics can call one at a time:

  ``embed(x) -> (h0, ctx)``   lift of the input (and gates ``ctx`` for modified MLP / PirateNet),
  ``depth`` blocks            h_i = B_i(h_{i-1}), run by ``nn.scan`` over parameters stacked on a
                              leading [L] axis (compile time independent of depth);
                              :func:`apply_block` runs block i alone,
  ``out``                     a dense layer to the scalar output.

The coupling network follows the released CoupledNet code (Meng, Shi, Pan, ICML 2026), one block:

  x <- P_i x;  [x0, x1] = split(x);
  s = exp(c * LayerNorm_noBias(tanh(D(tanh(D(x0))))),   c = ln 2 / (sqrt(L) * 2.3263);
  t = D(tanh(D(x0)));   x <- [x0, s * x1 + t]

so the block Jacobian is block-triangular with log|det J| = sum(log s) (0 when ``affine=False``).
``c`` bounds the scale: a LayerNorm output within +-2.3263 (the standard normal 99% quantile)
gives s within 2^(+-1/sqrt(L)), so the product over L blocks stays within a factor 2^(sqrt(L)).

Switches that deviate from the release (off by default unless noted):
  ``zero_init_shift``: zero-initialise the last layer of the shift branch t (identity-like init).
  ``affine=False``: additive coupling (no scale branch), volume preserving.
  ``permute=False``: no fixed permutation (the release permutes with ``random.permutation(PRNGKey(i))``;
    we use our own fixed permutation from ``numpy.random.default_rng(i)``, not the same one).
The "output-layer constraint" mentioned in reviews of the paper is not in the release and is not
implemented. Weight factorisation (Wang et al.): W = diag-free ``g * V`` per output unit, g =
exp(mean + std * N(0, 1)), V = W_glorot / g.

>>> import jax, jax.numpy as jnp
>>> net = make_network("coupled", depth=4, width=16)
>>> params = net.init(jax.random.key(0), jnp.zeros(2))
>>> net.apply(params, jnp.array([0.1, -0.3])).shape
()
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import checks

__all__ = ["ARCHITECTURES", "Dense", "MLP", "ResNet", "ModifiedMLP", "PirateNet", "CoupledNet",
           "CouplingBlock", "make_network", "hidden_states", "embed", "apply_block",
           "block_params", "block_log_det"]

ARCHITECTURES = ("mlp", "resnet", "modified_mlp", "pirate", "coupled")

Z99 = 2.3263  # standard-normal quantile at 0.99, as in the release


class Dense(nn.Module):
    """Dense layer with optional random weight factorisation ``W = g * V`` (g per output unit).

    Attributes:
      features: output width.
      weight_fact: (mean, std) of log g at init, or None for a plain glorot-normal kernel.
      zero_init: initialise the kernel (V) to zero.
    """

    features: int
    weight_fact: tuple[float, float] | None = None
    zero_init: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        shape = (x.shape[-1], self.features)
        glorot = nn.initializers.glorot_normal()
        if self.weight_fact is None:
            init = nn.initializers.zeros if self.zero_init else glorot
            kernel = self.param("kernel", init, shape)
        else:
            mean, std = self.weight_fact

            def init_fact(key, shape):
                k_w, k_g = jax.random.split(key)
                w = jnp.zeros(shape) if self.zero_init else glorot(k_w, shape)
                g = jnp.exp(mean + std * jax.random.normal(k_g, (shape[-1],)))
                return {"g": g, "v": w / g}

            f = self.param("kernel", init_fact, shape)
            kernel = f["g"] * f["v"]
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        return x @ kernel + bias


class FourierFeatures(nn.Module):
    """[cos(x B), sin(x B)] with B ~ N(0, scale^2) of shape [d_in, dim / 2] (trainable)."""

    scale: float
    dim: int

    @nn.compact
    def __call__(self, x):
        b = self.param("kernel", nn.initializers.normal(self.scale), (x.shape[-1], self.dim // 2))
        return jnp.concatenate([jnp.cos(x @ b), jnp.sin(x @ b)], axis=-1)


def _dense(width, weight_fact, zero_init=False, name=None):
    return Dense(width, weight_fact=weight_fact, zero_init=zero_init, name=name)


# ---- blocks: __call__(h, ctx, aux) -> (h_new, h_new); scanned over depth with stacked params ----

class MLPBlock(nn.Module):
    """h <- tanh(D h)."""

    width: int
    weight_fact: tuple[float, float] | None = None

    @nn.compact
    def __call__(self, h, ctx, aux):
        h = jnp.tanh(_dense(self.width, self.weight_fact)(h))
        return h, h


class ResBlock(nn.Module):
    """h <- tanh(h + D_b tanh(D_a h))."""

    width: int
    weight_fact: tuple[float, float] | None = None

    @nn.compact
    def __call__(self, h, ctx, aux):
        r = _dense(self.width, self.weight_fact)(jnp.tanh(_dense(self.width, self.weight_fact)(h)))
        h = jnp.tanh(h + r)
        return h, h


class ModifiedBlock(nn.Module):
    """z = tanh(D h); h <- z U + (1 - z) V with gates ctx = (U, V)."""

    width: int
    weight_fact: tuple[float, float] | None = None

    @nn.compact
    def __call__(self, h, ctx, aux):
        u, v = ctx
        z = jnp.tanh(_dense(self.width, self.weight_fact)(h))
        h = z * u + (1.0 - z) * v
        return h, h


class PirateBlock(nn.Module):
    """Adaptive residual block, alpha initialised to 0 (so the block starts as the identity)."""

    width: int
    weight_fact: tuple[float, float] | None = None

    @nn.compact
    def __call__(self, h, ctx, aux):
        u, v = ctx
        f = jnp.tanh(_dense(self.width, self.weight_fact)(h))
        z = f * u + (1.0 - f) * v
        g = jnp.tanh(_dense(self.width, self.weight_fact)(z))
        z = g * u + (1.0 - g) * v
        r = jnp.tanh(_dense(self.width, self.weight_fact)(z))
        alpha = self.param("alpha", nn.initializers.zeros, ())
        h = alpha * r + (1.0 - alpha) * h
        return h, h


class CouplingBlock(nn.Module):
    """One coupling block (module docstring); ``aux`` is this block's permutation matrix [W, W].

    ``h @ aux`` permutes the features: a matmul batches and differentiates faster on CPU than a
    gather (whose transpose is a scatter-add); measured 2x+ per training step.

    Attributes:
      width: W (even). depth: L of the whole network (sets c = ln 2 / (sqrt(L) z_0.99)).
      affine: scale branch on (False: additive coupling). zero_init_shift: zero last shift layer.
    """

    width: int
    depth: int
    weight_fact: tuple[float, float] | None = None
    affine: bool = True
    zero_init_shift: bool = False

    def setup(self):
        half = self.width // 2
        if self.affine:
            self.s1 = _dense(half, self.weight_fact)
            self.s2 = _dense(half, self.weight_fact)
            self.norm = nn.LayerNorm(use_bias=False, use_scale=True)
        self.t1 = _dense(half, self.weight_fact)
        self.t2 = _dense(half, self.weight_fact, zero_init=self.zero_init_shift)

    def log_scale(self, x0):
        """log s given the conditioning half x0 [W/2] (zeros when not affine)."""
        if not self.affine:
            return jnp.zeros_like(x0)
        c = math.log(2.0) / (math.sqrt(self.depth) * Z99)
        return c * self.norm(jnp.tanh(self.s2(jnp.tanh(self.s1(x0)))))

    def __call__(self, h, ctx, aux):
        h = h @ aux
        half = self.width // 2
        x0, x1 = h[:half], h[half:]
        t = self.t2(jnp.tanh(self.t1(x0)))
        h = jnp.concatenate([x0, jnp.exp(self.log_scale(x0)) * x1 + t])
        return h, h

    def log_det(self, h, ctx, aux):
        """log|det dB/dh| = sum(log s) (the permutation has |det| = 1)."""
        return jnp.sum(self.log_scale((h @ aux)[: self.width // 2]))


# ---- networks: embed -> scanned blocks -> head ----

class _Base(nn.Module):
    """Shared fields and the staged forward pass (see the module docstring)."""

    depth: int
    width: int
    weight_fact: tuple[float, float] | None = None
    fourier_scale: float | None = None
    unroll: int = 1

    def block_config(self) -> tuple[type, dict[str, Any]]:
        """(block class, its attributes): the module scanned over depth."""
        raise NotImplementedError

    def block_aux(self) -> np.ndarray:
        """Per-block scanned input [L, ...]: the block index (permutations for the coupling net)."""
        return np.arange(self.depth)

    def setup(self):
        self.setup_embed()
        cls, fields = self.block_config()
        scanned = nn.scan(cls, variable_axes={"params": 0}, split_rngs={"params": True},
                          in_axes=(nn.broadcast, 0), length=self.depth,
                          unroll=min(self.unroll, self.depth))
        self.blocks = scanned(**fields)
        self.out = _dense(1, self.weight_fact)

    def _features(self, z):
        return z if self.emb is None else self.emb(z)

    def __call__(self, x: jax.Array) -> jax.Array:
        h, ctx = self.embed(x)
        h, _ = self.blocks(h, ctx, jnp.asarray(self.block_aux()))
        return self.out(h)[0]

    def all_hidden(self, x: jax.Array) -> jax.Array:
        """[h_0, ..., h_L] of one point: the embedding and every block output, [L+1, W]."""
        h, ctx = self.embed(x)
        _, hs = self.blocks(h, ctx, jnp.asarray(self.block_aux()))
        return jnp.concatenate([h[None], hs])


def _fourier_or_none(self):
    return FourierFeatures(self.fourier_scale, self.width) if self.fourier_scale else None


class MLP(_Base):
    """Plain tanh MLP: h_0 = tanh(D_0 x), h_i = tanh(D_i h_{i-1}) for i = 1..depth
    (``depth`` + 1 tanh layers of width W; the first is the lift)."""

    def setup_embed(self):
        self.emb = _fourier_or_none(self)
        self.lift = _dense(self.width, self.weight_fact)

    def block_config(self):
        return MLPBlock, {"width": self.width, "weight_fact": self.weight_fact}

    def embed(self, x):
        return jnp.tanh(self.lift(self._features(x))), None


class ResNet(_Base):
    """Residual tanh MLP: h_0 = tanh(D(x)); h_i = tanh(h_{i-1} + D_b(tanh(D_a(h_{i-1}))))."""

    def setup_embed(self):
        self.emb = _fourier_or_none(self)
        self.lift = _dense(self.width, self.weight_fact)

    def block_config(self):
        return ResBlock, {"width": self.width, "weight_fact": self.weight_fact}

    def embed(self, x):
        return jnp.tanh(self.lift(self._features(x))), None


class ModifiedMLP(_Base):
    """Modified MLP (Wang et al.): gates U = tanh(D_u x), V = tanh(D_v x);
    z = tanh(D_i h); h_i = z * U + (1 - z) * V for i = 0..depth with h_{-1} = x (i = 0 is the
    lift, so there are ``depth`` + 1 gated layers)."""

    def setup_embed(self):
        self.emb = _fourier_or_none(self)
        self.gate_u = _dense(self.width, self.weight_fact)
        self.gate_v = _dense(self.width, self.weight_fact)
        self.lift = _dense(self.width, self.weight_fact)

    def block_config(self):
        return ModifiedBlock, {"width": self.width, "weight_fact": self.weight_fact}

    def embed(self, x):
        x = self._features(x)
        u, v = jnp.tanh(self.gate_u(x)), jnp.tanh(self.gate_v(x))
        z = jnp.tanh(self.lift(x))
        return z * u + (1.0 - z) * v, (u, v)


class PirateNet(_Base):
    """PirateNet-style network (Wang et al. 2024): h_0 = Fourier features of x (or D x), gates
    U, V from h_0, blocks f = tanh(D1 h); z1 = f U + (1 - f) V; g = tanh(D2 z1);
    z2 = g U + (1 - g) V; r = tanh(D3 z2); h <- alpha r + (1 - alpha) h, alpha = 0 at init."""

    def setup_embed(self):
        self.emb = _fourier_or_none(self)
        self.lift = None if self.emb is not None else _dense(self.width, self.weight_fact)
        self.gate_u = _dense(self.width, self.weight_fact)
        self.gate_v = _dense(self.width, self.weight_fact)

    def block_config(self):
        return PirateBlock, {"width": self.width, "weight_fact": self.weight_fact}

    def embed(self, x):
        h = self.emb(x) if self.emb is not None else self.lift(x)
        return h, (jnp.tanh(self.gate_u(h)), jnp.tanh(self.gate_v(h)))


class CoupledNet(_Base):
    """Deep coupling network (the paper's architecture; see the module docstring for the block).

    Extra attributes:
      affine: use the scale branch s (affine coupling); False gives additive coupling.
      permute: apply a fixed feature permutation before each block.
      zero_init_shift: zero-initialise the last dense of the shift branch (deviation).
    """

    affine: bool = True
    permute: bool = True
    zero_init_shift: bool = False

    def setup_embed(self):
        self.lift = _dense(self.width, self.weight_fact)
        self.emb = _fourier_or_none(self)

    def block_config(self):
        return CouplingBlock, {"width": self.width, "depth": self.depth,
                               "weight_fact": self.weight_fact, "affine": self.affine,
                               "zero_init_shift": self.zero_init_shift}

    def permutations(self) -> np.ndarray:
        """The fixed permutations [L, W] (ours: ``numpy.random.default_rng(i)``, not the release's)."""
        if not self.permute:
            return np.tile(np.arange(self.width), (self.depth, 1))
        return np.stack([np.random.default_rng(i).permutation(self.width)
                         for i in range(self.depth)])

    def block_aux(self):
        """One-hot permutation matrices [L, W, W]: (h @ P_i)[j] = h[perm_i[j]]."""
        eye = np.eye(self.width, dtype=np.float32)
        return np.stack([eye[:, p] for p in self.permutations()])

    def embed(self, x):
        h = self.lift(x)
        if self.emb is not None:  # as released: Fourier features of the lifted vector, added
            h = h + self.emb(h)
        return h, None


# make_network(unroll=None) unrolls nets of at most this many blocks fully
AUTO_UNROLL_MAX_DEPTH = 8

_CLASSES = {"mlp": MLP, "resnet": ResNet, "modified_mlp": ModifiedMLP, "pirate": PirateNet,
            "coupled": CoupledNet}


def make_network(arch: str, *, depth: int, width: int,
                 weight_fact: tuple[float, float] | None = None,
                 fourier_scale: float | None = None, unroll: int | None = None,
                 **kwargs: Any) -> _Base:
    """Build a network by name.

    Args:
      arch: one of :data:`ARCHITECTURES`.
      depth: number of hidden blocks after the input lift (>= 1); the lift is a tanh layer for
        the MLP, ResNet and modified MLP, a linear layer (+ Fourier features) for the coupling
        net and Fourier features or a linear layer for PirateNet.
      width: hidden width W (>= 1; even for ``"coupled"``, whose blocks split it in halves).
      weight_fact: (mean, std) for random weight factorisation, or None (plain dense layers).
      fourier_scale: std of the Fourier-feature matrix, or None for no Fourier features.
      unroll: blocks per iteration of the ``nn.scan`` over depth (>= 1; ``depth`` or more
        unrolls fully). Same function and parameters; unrolling trades compile time (grows with
        depth) for speed: on CPU the fully unrolled 4 x 64 MLP's Poisson step is ~2-3x faster
        than the scanned one (``experiments/coupling_pinn/bench.py``). ``None`` (default):
        :data:`AUTO_UNROLL_MAX_DEPTH` or fewer blocks unroll fully, deeper nets are scanned one
        block per iteration (compile time then does not grow with depth).
      **kwargs: extra attributes of :class:`CoupledNet` (``affine``, ``permute``,
        ``zero_init_shift``).

    Raises:
      ValueError: unknown ``arch``, ``depth`` < 1, ``width`` < 1 or odd where it must be even,
        ``unroll`` < 1, or coupling keywords for another architecture.
    """
    if arch not in _CLASSES:
        raise ValueError(f"arch must be one of {ARCHITECTURES}, got {arch!r}")
    depth = checks.check_int("depth", depth, minimum=1)
    width = checks.check_int("width", width, minimum=1)
    if arch == "coupled" and width % 2:
        raise ValueError(f"width must be even for the coupling network (split in halves), "
                         f"got {width}")
    if fourier_scale is not None and width % 2:
        raise ValueError(f"width must be even with Fourier features (cos and sin halves), got {width}")
    if unroll is None:
        unroll = depth if depth <= AUTO_UNROLL_MAX_DEPTH else 1
    unroll = checks.check_int("unroll", unroll, minimum=1)
    if kwargs and arch != "coupled":
        raise ValueError(f"keywords {sorted(kwargs)} only apply to arch='coupled'")
    return _CLASSES[arch](depth=depth, width=width, weight_fact=weight_fact,
                          fourier_scale=fourier_scale, unroll=unroll, **kwargs)


def _standalone_block(net: _Base) -> nn.Module:
    cls, fields = net.block_config()
    return cls(**fields, parent=None)


def block_params(net: _Base, params: Any, i: int) -> Any:
    """Variables of block ``i`` (a slice of the stacked, scanned block parameters)."""
    i = checks.check_int("i", i, minimum=0, maximum=net.depth - 1)
    return {"params": jax.tree.map(lambda p: p[i], params["params"]["blocks"])}


def apply_block(net: _Base, params: Any, i: int, h: jax.Array, ctx: Any = None) -> jax.Array:
    """Block ``i`` of ``net`` alone: h_i = B_i(h_{i-1}) for one hidden state h [W]."""
    aux = jnp.asarray(net.block_aux()[i])
    return _standalone_block(net).apply(block_params(net, params, i), h, ctx, aux)[0]


def hidden_states(net: _Base, params: Any, x: jax.Array) -> jax.Array:
    """[h_0, ..., h_depth] of one point ``x`` [d]: an array [depth + 1, W]."""
    return net.apply(params, x, method=type(net).all_hidden)


def embed(net: _Base, params: Any, x: jax.Array) -> tuple[jax.Array, Any]:
    """(h_0 [W], ctx) of one point: the lifted input and the gates (None where there are none)."""
    return net.apply(params, x, method=type(net).embed)


def block_log_det(net: CoupledNet, params: Any, i: int, h: jax.Array) -> jax.Array:
    """Analytic log|det| of the Jacobian of coupling block ``i`` at hidden state ``h`` [W]."""
    if not isinstance(net, CoupledNet):
        raise ValueError(f"net must be a CoupledNet, got {type(net).__name__}")
    aux = jnp.asarray(net.block_aux()[i])
    return _standalone_block(net).apply(block_params(net, params, i), h, None, aux,
                                    method=CouplingBlock.log_det)
