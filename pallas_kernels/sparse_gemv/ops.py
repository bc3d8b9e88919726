"""Public op: argument checks, padding, block choice, ``implementation`` dispatch, ``custom_vjp``.

The kernel path carries a ``custom_vjp`` (a bare ``pallas_call`` has no VJP): with
``m = |x| > tau``, ``dx = m * (dy @ w^T)``, ``dw = where(m, x, 0)^T @ dy``, ``dbias = sum_b dy``
and a zero threshold cotangent (the output is piecewise constant in ``tau``). The XLA path is
plain jnp, differentiable by autodiff with the same result.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import _common
from pallas_kernels._common import IMPLEMENTATIONS, Implementation, is_pow2, pow2_ceil, resolve
from pallas_kernels.sparse_gemv.kernel import (MAX_BATCH, BlockSizes, nonempty_blocks,
                                               sparse_gemv_gpu_call, sparse_gemv_tpu_call)
from pallas_kernels.sparse_gemv.reference import accumulation_dtype, keep_mask

__all__ = ["sparse_gemv", "IMPLEMENTATIONS", "VARIANTS"]

VARIANTS = ("gpu", "tpu")   # fetch patterns (kernel.py): Triton row masks / TPU scalar prefetch
_HIGHEST = jax.lax.Precision.HIGHEST
# Auto split-K: aim for about this many programs (a few waves on a 132-SM H200) when N / bn
# column blocks alone are too few to fill the GPU. Not tuned on hardware yet.
_TARGET_PROGRAMS = 512


def _round_up(v: int, m: int) -> int:
    return -(-v // m) * m


@dataclasses.dataclass(frozen=True)
class _Config:
    """Everything static about one call (hashable: a ``custom_vjp`` non-differentiable arg)."""

    implementation: str          # "xla" | "pallas"
    variant: str                 # "gpu" | "tpu"
    block_k: int
    block_n: int
    num_splits: int
    acc_dtype: str
    out_dtype: str
    interpret: object            # bool, or a pallas InterpretParams
    platform: str


# ----------------------------------------------------------------------------- checks


def _is_tracer(a) -> bool:
    return isinstance(a, jax.core.Tracer)


def _check_threshold(threshold):
    """The threshold as a 0-d float array; raises on bad dtype / shape / concrete value."""
    if isinstance(threshold, (bool, np.bool_)):
        raise TypeError(f"threshold must be a float scalar, got a bool ({threshold!r})")
    if isinstance(threshold, numbers.Real) and not isinstance(threshold, np.generic):
        tau = jnp.asarray(float(threshold))
    else:
        tau = jnp.asarray(threshold)
        if not jnp.issubdtype(tau.dtype, jnp.floating):
            raise TypeError(f"threshold must be a float scalar, got dtype {tau.dtype}")
    if tau.ndim != 0:
        raise ValueError(f"threshold must be a scalar (vmap over it for several), got shape "
                         f"{tau.shape}")
    if not _is_tracer(threshold):   # traced thresholds (jit / vmap) cannot be checked here
        v = float(np.asarray(threshold))
        if np.isnan(v):
            raise ValueError("threshold must be a number >= 0, got NaN")
        if v < 0:
            raise ValueError(f"threshold must be >= 0 (0 keeps every nonzero entry), got {v}")
    return tau


def _check(x, w, bias):
    for name, a in (("x", x), ("w", w), ("bias", bias)):
        if a is not None and not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"{name} must be floating, got dtype {a.dtype}")
    if w.ndim != 2:
        raise ValueError(f"w must be 2-D [K, N], got shape {w.shape}")
    if x.ndim not in (1, 2):
        raise ValueError(f"x must be [B, K] (1 <= B <= {MAX_BATCH}) or [K], got shape {x.shape}")
    if x.ndim == 2 and not 1 <= x.shape[0] <= MAX_BATCH:
        raise ValueError(f"x must have 1 <= B <= {MAX_BATCH} rows (a GEMV kernel for decoding; "
                         f"use a matmul for larger batches), got x of shape {x.shape}")
    k, n = w.shape
    if x.shape[-1] != k:
        raise ValueError(f"x and w disagree on K: x {x.shape} has K={x.shape[-1]} features, "
                         f"w {w.shape} has K={k} rows (expected x [B, K], w [K, N])")
    if k == 0 or n == 0:
        raise ValueError(f"w must have K >= 1 rows and N >= 1 columns, got shape {w.shape}")
    if bias is not None and bias.shape != (n,):
        raise ValueError(f"bias must be None or [N]=({n},), got shape {bias.shape}")


# ----------------------------------------------------------------------------- blocks


def _choose_blocks(variant: str, k: int, n: int, bs: BlockSizes,
                   compiled: bool) -> tuple[int, int, int]:
    """(block_k, block_n, num_splits), validated for the variant."""
    if variant == "gpu":
        bk = bs.block_k or min(128, pow2_ceil(k))
        # interpret mode: wider column blocks, one split (fewer interpreted grid steps)
        bn = bs.block_n or min(64 if compiled else 128, pow2_ceil(n))
        for name, v in (("block_k", bk), ("block_n", bn)):
            if not is_pow2(v):
                raise ValueError(f"block_sizes.{name} must be a power of two for the GPU kernel "
                                 f"(Triton blocks), got {v}")
        num_blocks = -(-k // bk)
        splits = bs.num_splits
        if splits is None:
            splits = 1
            if compiled:
                splits = min(num_blocks, max(1, -(-_TARGET_PROGRAMS // -(-n // bn))))
                splits = -(-num_blocks // -(-num_blocks // splits))   # no empty split
        if not isinstance(splits, (int, np.integer)) or not 1 <= splits <= num_blocks:
            raise ValueError(f"block_sizes.num_splits must be in [1, {num_blocks}] (the number "
                             f"of K blocks), got {splits!r}")
        return int(bk), int(bn), int(splits)
    bk = bs.block_k or min(512, _round_up(k, 128))
    bn = bs.block_n or min(256, _round_up(n, 128))
    for name, v in (("block_k", bk), ("block_n", bn)):
        if v % 128:
            raise ValueError(f"block_sizes.{name} must be a multiple of 128 for the TPU kernel "
                             f"(Mosaic lane tiles), got {v}")
    return int(bk), int(bn), 1


# ----------------------------------------------------------------------------- forward


def _xla_forward(x2, w, tau, bias, cfg: _Config):
    """Mask, then one ``jnp.dot`` accumulating in the accumulation dtype."""
    acc = np.dtype(cfg.acc_dtype)
    xm = jnp.where(keep_mask(x2, tau, acc), x2, jnp.zeros((), x2.dtype))
    y = jnp.dot(xm, w, precision=_HIGHEST, preferred_element_type=acc)
    if bias is not None:
        y = y + bias.astype(acc)
    return y.astype(cfg.out_dtype)


def _pallas_forward(x2, w, tau, bias, cfg: _Config):
    b, k = x2.shape
    n = w.shape[1]
    bk, bn = cfg.block_k, cfg.block_n
    kp, np_ = _round_up(k, bk), _round_up(n, bn)
    # Ragged K / N: zero padding (rows of zeros are masked out; extra columns are sliced off).
    # This copies w; shapes that are multiples of the blocks (every LLM shape) skip it.
    wp = w if (kp, np_) == (k, n) else jnp.pad(w, ((0, kp - k), (0, np_ - n)))
    acc = np.dtype(cfg.acc_dtype)
    if cfg.variant == "gpu":
        xt = jnp.pad(x2.T, ((0, kp - k), (0, 0)))
        parts = sparse_gemv_gpu_call(tau.astype(acc).reshape(1, 1), xt, wp, block_k=bk,
                                     block_n=bn, num_splits=cfg.num_splits,
                                     acc_dtype=acc.name, interpret=cfg.interpret,
                                     platform=cfg.platform)
        y = parts[0] if cfg.num_splits == 1 else jnp.sum(parts, axis=0)
    else:
        xm = jnp.where(keep_mask(x2, tau, acc), x2, jnp.zeros((), x2.dtype))
        bp = _round_up(b, 8)   # a sublane tile of rows
        xm = jnp.pad(xm, ((0, bp - b), (0, kp - k)))
        ids, count = nonempty_blocks(xm, bk)
        y = sparse_gemv_tpu_call(ids, count, xm, wp, block_k=bk, block_n=bn,
                                 acc_dtype=acc.name, interpret=cfg.interpret,
                                 platform=cfg.platform)
    y = y[:b, :n]
    if bias is not None:
        y = y + bias.astype(acc)
    return y.astype(cfg.out_dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _sgemv(x2, w, tau, bias, cfg):
    return _pallas_forward(x2, w, tau, bias, cfg)


def _sgemv_fwd(x2, w, tau, bias, cfg):
    return _pallas_forward(x2, w, tau, bias, cfg), (x2, w, tau, bias)


def _sgemv_bwd(cfg, res, dy):
    x2, w, tau, bias = res
    acc = np.dtype(cfg.acc_dtype)
    keep = keep_mask(x2, tau, acc)
    dya = dy.astype(acc)
    dx = jnp.where(keep, jnp.matmul(dya, w.astype(acc).T, precision=_HIGHEST), 0)
    xm = jnp.where(keep, x2.astype(acc), 0)
    dw = jnp.matmul(xm.T, dya, precision=_HIGHEST)
    dbias = None if bias is None else jnp.sum(dya, axis=0).astype(bias.dtype)
    return dx.astype(x2.dtype), dw.astype(w.dtype), jnp.zeros_like(tau), dbias


_sgemv.defvjp(_sgemv_fwd, _sgemv_bwd)


# ----------------------------------------------------------------------------- public


def _sparse_gemv(x, w, threshold, *, bias=None, implementation: Implementation = "auto",
                 interpret=None, block_sizes: BlockSizes | None = None,
                 variant: str | None = None) -> jax.Array:
    """:func:`sparse_gemv` with its tuning knobs (benchmark and tests).

    Args:
      block_sizes: :class:`BlockSizes`; ``None`` fields are chosen per platform.
      variant: "gpu" (row-masked loads, split-K partials: the Triton pattern) or "tpu"
        (scalar-prefetched block list); default "tpu" on TPU, else "gpu" (also in interpret mode).
      Other arguments: as :func:`sparse_gemv`.
    """
    x, w = jnp.asarray(x), jnp.asarray(w)
    bias = None if bias is None else jnp.asarray(bias)
    tau = _check_threshold(threshold)
    _check(x, w, bias)
    bs = BlockSizes() if block_sizes is None else block_sizes
    if not isinstance(bs, BlockSizes):
        raise TypeError(f"block_sizes must be a BlockSizes, got {type(bs).__name__}")
    if variant not in (None, *VARIANTS):
        raise ValueError(f"variant must be None or one of {VARIANTS}, got {variant!r}")
    acc = accumulation_dtype(x.dtype, w.dtype)
    plat = _common.platform()
    variant = variant or ("tpu" if plat == "tpu" else "gpu")
    why = None
    if plat == "tpu" and acc == np.float64:
        why = "Mosaic TPU kernels have no float64"
    if plat in _common.COMPILED_PLATFORMS and variant != ("tpu" if plat == "tpu" else "gpu"):
        why = f"the {variant!r} variant does not compile for {plat!r}"
    run = resolve("sparse_gemv", implementation, unsupported=why, interpret=interpret)
    bk, bn, splits = _choose_blocks(variant, w.shape[0], w.shape[1], bs,
                                    compiled=not run.interpret)
    cfg = _Config(implementation=run.implementation, variant=variant, block_k=bk, block_n=bn,
                  num_splits=splits, acc_dtype=acc.name,
                  out_dtype=np.dtype(jnp.result_type(x.dtype, w.dtype)).name,
                  interpret=interpret if not isinstance(interpret, (bool, type(None)))
                  else run.interpret,
                  platform=run.platform)
    x2 = x[None] if x.ndim == 1 else x
    if cfg.implementation == "xla":
        y = _xla_forward(x2, w, tau, bias, cfg)   # plain jnp: autodiff and jvp work
    else:
        y = _sgemv(x2, w, tau, bias, cfg)
    return y[0] if x.ndim == 1 else y


def sparse_gemv(x, w, threshold, *, bias=None, implementation: Implementation = "auto",
                interpret: bool | None = None) -> jax.Array:
    """TEAL-style sparse GEMV: ``where(|x| > threshold, x, 0) @ w (+ bias)``.

    Activation sparsity as used by SPON (arXiv 2512.12744) after TEAL: hidden-state entries with
    magnitude at most the threshold are dropped, and the kernel reads only the weight rows whose
    activation survives in at least one of the B rows (the union over the batch); whole K blocks
    with no surviving activation are skipped.

    Args:
      x: [B, K] floating activations, 1 <= B <= 8 (decoding), or [K] (then the result is [N]).
      w: [K, N] floating weight.
      threshold: scalar ``tau >= 0``; may be traced (one compilation serves every threshold) and
        vmapped. ``tau = 0`` keeps every nonzero entry. A concrete NaN or negative value raises;
        a traced one is not checked (NaN drops everything, a negative value keeps everything).
      bias: optional [N] floating bias, added in the accumulation dtype.
      implementation: "pallas" (the kernel; on CPU it runs in interpret mode; raises if it
        cannot run), "xla" (mask, then ``jnp.dot`` with a float32 accumulator), or "auto" (the
        compiled kernel on GPU / TPU, otherwise XLA with a warning saying why).
      interpret: force the Pallas interpreter (default: True exactly when there is no compiled
        Pallas backend, i.e. on CPU).

    Returns:
      [B, N] (or [N]) in ``jnp.result_type(x, w)``, accumulated in float32 (float64 when an input
      is float64). Differentiable with respect to ``x``, ``w`` and ``bias``; the threshold gets
      a zero gradient.

    >>> import jax, jax.numpy as jnp
    >>> from pallas_kernels.sparse_gemv import sparse_gemv_reference
    >>> kx, kw = jax.random.split(jax.random.key(0))
    >>> x = jax.random.normal(kx, (2, 256))
    >>> w = jax.random.normal(kw, (256, 96))
    >>> y = sparse_gemv(x, w, 0.7, implementation="pallas")   # drops ~52% of x (interpreted)
    >>> ref = sparse_gemv_reference(x, w, 0.7)
    >>> y.shape, bool(jnp.allclose(y, ref, atol=1e-4))
    ((2, 96), True)
    """
    return _sparse_gemv(x, w, threshold, bias=bias, implementation=implementation,
                        interpret=interpret)
