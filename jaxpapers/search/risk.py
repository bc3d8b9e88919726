"""Risk utilities on return samples, quantile sampling and the quantile-Huber loss.

Utilities are distortion risk measures on ``M`` samples (unbatched, vmap at the boundary):
``U(z) = sum_i z_(i) (g(i / M) - g((i - 1) / M))`` with ``z_(1) <= ... <= z_(M)`` and a concave
distortion ``g`` of [0, 1] (Wang 2000; Dhaene et al. 2006). ``g(u) = u`` is the mean;
``g(u) = min(u / alpha, 1)`` is CVaR_alpha, the mean of the worst ``alpha`` fraction (exactly the
mean of the ``alpha M`` lowest samples when ``alpha M`` is an integer); Wang's transform
``g(u) = Phi(Phi^-1(u) + eta)`` and the power distortion ``g(u) = 1 - (1 - u)^(1 + eta)`` are
risk-averse for ``eta > 0``. Risk levels are traceable arguments, so they can be swept or vmapped.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtr, ndtri

from jaxpapers.core.checks import check_int, check_range

__all__ = ["mean_utility", "cvar", "wang", "power", "distortion_utility", "make_utility",
           "quantile_midpoints", "kth_smallest", "sort_small", "mix32", "uniform_from_seed",
           "hashed_uniform", "quantile_function", "sample_quantiles",
           "quantile_huber_loss", "exact_cvar_discrete"]


def _check_alpha(alpha) -> None:
    """A CVaR level: a scalar in (0, 1] (1 is the mean); skipped for tracers."""
    check_range("alpha", alpha, low=0.0, high=1.0, low_open=True, scalar=True)


def distortion_utility(samples: jax.Array, g) -> jax.Array:
    """``sum_i z_(i) (g(i/M) - g((i-1)/M))`` for samples [M] and a distortion ``g`` (unbatched).

    Args:
      samples: [M] return samples.
      g: increasing distortion of [0, 1] with ``g(0) = 0``, ``g(1) = 1`` (vectorised).

    Returns:
      [] utility.

    >>> import jax.numpy as jnp
    >>> float(distortion_utility(jnp.arange(8.0), lambda u: jnp.minimum(u / 0.5, 1.0)))  # CVaR_0.5
    1.5
    """
    m = samples.shape[-1]
    z = jnp.sort(samples, axis=-1)
    u = jnp.arange(m + 1, dtype=z.dtype) / m
    w = jnp.diff(g(u))
    # zero weights must not meet infinite samples (0 * inf = NaN)
    return jnp.sum(jnp.where(w != 0, w * z, 0), axis=-1)


def mean_utility(samples: jax.Array) -> jax.Array:
    """Risk-neutral utility: the sample mean of samples [M] (unbatched).

    Args:
      samples: [M] return samples.

    Returns:
      [] their mean.

    >>> import jax.numpy as jnp
    >>> float(mean_utility(jnp.arange(8.0)))
    3.5
    """
    return jnp.mean(samples, axis=-1)


def _order_keys(x: jax.Array) -> jax.Array:
    """Unsigned integer keys in the IEEE total order of the floats ``x`` (-0.0 before 0.0), with
    every NaN (either sign) mapped to +NaN first, so NaN sorts above +inf as in ``jnp.sort``."""
    width = jnp.finfo(x.dtype).bits
    utype = {16: jnp.uint16, 32: jnp.uint32, 64: jnp.uint64}[width]
    x = jnp.where(jnp.isnan(x), jnp.array(jnp.nan, x.dtype), x)
    bits = jax.lax.bitcast_convert_type(x, utype)
    sign = utype(1 << (width - 1))
    return jnp.where((bits & sign) != 0, ~bits, bits | sign)


def _from_order_keys(key: jax.Array, dtype) -> jax.Array:
    width = jnp.finfo(dtype).bits
    sign = key.dtype.type(1 << (width - 1))
    bits = jnp.where((key & sign) != 0, key ^ sign, ~key)
    return jax.lax.bitcast_convert_type(bits, dtype)


def _count_true(mask: jax.Array) -> jax.Array:
    """Number of True entries along the last axis. Summed in float32 (exact below 2^24 entries):
    XLA's CPU reductions vectorise float sums but not integer ones (~2x per pass); int32 beyond."""
    one = jnp.float32(1) if mask.shape[-1] < 2 ** 24 else jnp.int32(1)
    return jnp.sum(jnp.where(mask, one, 0 * one), axis=-1)


def kth_smallest(x: jax.Array, k: int) -> jax.Array:
    """The ``k``-th smallest entry (1-based, static ``k``) along the last axis: [..., M] -> [...].

    Equal to ``jnp.sort(x, -1)[..., k - 1]``, with NaN (of either sign; returned as +NaN) above
    +inf and -0.0 before 0.0 (which can change only the sign of a zero result). Any float dtype
    (16, 32 or 64 bits). Radix select on order-preserving integer keys, most significant bit
    first: the answer key is built bit by bit, keeping a bit set while fewer than ``k`` entries
    lie below the candidate (one compare-and-count pass per bit, no sort, no scatter).

    Args:
      x: [..., M] floats.
      k: 1-based rank in [1, M] (static int; bools are rejected).

    Returns:
      [...] the k-th smallest entries.

    >>> import jax.numpy as jnp
    >>> float(kth_smallest(jnp.array([3.0, 1.0, 2.0]), 2))
    2.0
    """
    m = x.shape[-1]
    check_int("k", k, minimum=1, maximum=m)
    keys = _order_keys(x)
    width = jnp.finfo(x.dtype).bits
    one = keys.dtype.type(1)

    # one pass per bit in a fori_loop, not a Python loop: unrolled, the passes made up a third of
    # a CVaR search's program (a copy per utility call site) and nearly half its compile time
    def body(i, t):
        cand = t | (one << (width - 1 - i).astype(keys.dtype))
        return jnp.where(_count_true(keys < cand[..., None]) < k, cand, t)

    t = jax.lax.fori_loop(0, width, body, jnp.zeros(x.shape[:-1], keys.dtype))
    return _from_order_keys(t, x.dtype)


def sort_small(x: jax.Array, max_size: int = 64) -> jax.Array:
    """``jnp.sort(x, -1)`` for short last axes by ranking (O(Q^2) compares, no sort primitive).

    XLA's CPU sort costs ~150 us for a [64, 32] array, which the search pays twice per
    simulation; ranking every entry against the others and placing it with a one-hot select is
    about 4x cheaper for Q <= 64. Entries are ranked by their order keys (IEEE total order:
    -0.0 before 0.0, NaN of either sign last, as +NaN), ties by position, so the ranks are a
    permutation and every entry lands exactly once, bit for bit. Falls back to ``jnp.sort`` when
    the last axis is longer than ``max_size``.

    Args:
      x: [..., Q] floats.
      max_size: longest last axis sorted by ranking (static).

    Returns:
      [..., Q] sorted along the last axis.

    >>> import jax.numpy as jnp
    >>> sort_small(jnp.array([3.0, -0.0, 1.0, 0.0])).tolist()
    [-0.0, 0.0, 1.0, 3.0]
    """
    n = x.shape[-1]
    if n > max_size:
        return jnp.sort(x, axis=-1)
    keys = _order_keys(x)
    idx = jnp.arange(n)
    a, b = keys[..., :, None], keys[..., None, :]
    before = (b < a) | ((b == a) & (idx[None, :] < idx[:, None]))  # [..., j, i]: i before j
    rank = jnp.sum(before, axis=-1)  # [..., j], a permutation of 0..n-1
    place = rank[..., :, None] == idx  # [..., j, r]
    # exactly one j per r: an integer sum of the selected keys is that key
    sorted_keys = jnp.sum(jnp.where(place, keys[..., :, None], jnp.zeros((), keys.dtype)), axis=-2)
    return _from_order_keys(sorted_keys, x.dtype)


def cvar(samples: jax.Array, alpha) -> jax.Array:
    """CVaR_alpha of samples [M]: mean of the worst ``alpha`` fraction (lower tail, returns).

    ``alpha`` in (0, 1]; ``alpha = 1`` is the mean. The boundary sample gets the fractional weight
    (Rockafellar & Uryasev 2002, Eq. 10), so the estimator is continuous in ``alpha``.

    Args:
      samples: [M] return samples.
      alpha: level in (0, 1]; a Python float selects the radix-select path, an array (or tracer)
        the distortion form (both give the same value).

    Returns:
      [] CVaR.

    Raises:
      ValueError: a concrete ``alpha`` outside (0, 1] or not a scalar.

    >>> import jax.numpy as jnp
    >>> float(cvar(jnp.arange(8.0), 0.25))
    0.5
    """
    _check_alpha(alpha)
    m = samples.shape[-1]
    if isinstance(alpha, (int, float)):
        # Static level: only the k = ceil(alpha M) lowest samples matter. The k-th smallest is
        # found by a radix select (one compare-and-count pass over the samples per key bit), which
        # on CPU is several times faster than lax.top_k and far faster than a sort at M = 256.
        am = alpha * m
        k = min(m, int(np.ceil(am - 1e-9)))
        zk = kth_smallest(samples, k)
        below = samples < zk[..., None]
        n_below = _count_true(below)
        # the k - 1 lowest: everything strictly below z_(k), padded with copies of z_(k) (ties);
        # a zero pad must not multiply an infinite z_(k)
        pad = (k - 1 - n_below).astype(samples.dtype)
        low_sum = (jnp.sum(jnp.where(below, samples, 0), axis=-1)
                   + jnp.where(pad > 0, pad * zk, 0))
        out = (low_sum + (am - (k - 1)) * zk) / am
        return jnp.where(jnp.any(jnp.isnan(samples), axis=-1), jnp.nan, out)
    return distortion_utility(samples, lambda u: jnp.minimum(u / alpha, 1.0))


def wang(samples: jax.Array, eta) -> jax.Array:
    """Wang-transform utility ``g(u) = Phi(Phi^-1(u) + eta)`` (risk-averse for eta > 0).

    Args:
      samples: [M] return samples.
      eta: [] distortion strength (traceable).

    Returns:
      [] utility.

    >>> import jax.numpy as jnp
    >>> round(float(wang(jnp.arange(8.0), 0.5)), 4)  # below the mean 3.5
    2.4241
    """
    def g(u):
        inner = ndtri(jnp.clip(u, 0.0, 1.0))
        return jnp.where(u <= 0, 0.0, jnp.where(u >= 1, 1.0, ndtr(inner + eta)))
    return distortion_utility(samples, g)


def power(samples: jax.Array, eta) -> jax.Array:
    """Power-distortion utility ``g(u) = 1 - (1 - u)^(1 + eta)`` (eta > -1; risk-averse if > 0).

    Args:
      samples: [M] return samples.
      eta: [] exponent offset > -1 (traceable).

    Returns:
      [] utility.

    >>> import jax.numpy as jnp
    >>> float(power(jnp.arange(8.0), 1.0))
    2.1875
    """
    check_range("eta", eta, low=-1.0, low_open=True, scalar=True)
    return distortion_utility(samples, lambda u: 1.0 - (1.0 - u) ** (1.0 + eta))


def make_utility(name: str, level=None):
    """``samples [M] -> scalar`` for ``name`` in mean / cvar / wang / power (level = alpha or eta).

    The name is resolved here, in Python, never inside jitted code.

    Args:
      name: ``"mean"``, ``"cvar"``, ``"wang"`` or ``"power"``.
      level: alpha in (0, 1] for ``"cvar"``, eta for ``"wang"`` / ``"power"``; unused for
        ``"mean"``.

    Returns:
      The utility function ``samples [M] -> []``.

    >>> import jax.numpy as jnp
    >>> float(make_utility("cvar", 0.25)(jnp.arange(8.0)))
    0.5
    """
    if name == "mean":
        return mean_utility
    if level is None:
        raise ValueError(f"level is required for utility {name!r}")
    fns = {"cvar": cvar, "wang": wang, "power": power}
    if name not in fns:
        raise ValueError(f"utility must be one of mean, cvar, wang, power; got {name!r}")
    if name == "cvar":
        _check_alpha(level)
    return functools.partial(fns[name], **({"alpha": level} if name == "cvar" else {"eta": level}))


def quantile_midpoints(num_quantiles: int, dtype=jnp.float32) -> jax.Array:
    """tau_i = (2 i + 1) / (2 Q), i = 0..Q-1 [Q] (QR-DQN, Dabney et al. 2018, Lemma 2).

    Args:
      num_quantiles: Q.
      dtype: float dtype.

    Returns:
      [Q] midpoint levels.

    >>> quantile_midpoints(4).tolist()
    [0.125, 0.375, 0.625, 0.875]
    """
    return (2 * jnp.arange(num_quantiles, dtype=dtype) + 1) / (2 * num_quantiles)


def mix32(x: jax.Array) -> jax.Array:
    """The "lowbias32" integer mixer (C. Wellons) on uint32 arrays: a bijection with good avalanche.

    Args:
      x: integer array (cast to uint32).

    Returns:
      uint32 array of the same shape.

    >>> import jax.numpy as jnp
    >>> mix32(jnp.arange(3, dtype=jnp.uint32)).tolist()
    [0, 1753845952, 3507691905]
    """
    x = x.astype(jnp.uint32)
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def uniform_from_seed(seed: jax.Array, num_samples: int, dtype=jnp.float32) -> jax.Array:
    """[..., M] uniforms in (0, 1) from uint32 seeds [...]: ``u_j = mix32(seed + j golden) / 2^32``.

    A Weyl sequence through an integer mixer: about ten integer operations per sample instead of a
    Threefry block each (the search draws ``B x 2 x M`` samples per simulation, and Threefry
    dominated its run time on CPU). 24 bits of resolution (computed in float32, then cast and
    clipped into the open interval of ``dtype``).

    Args:
      seed: [...] uint32 seeds.
      num_samples: M (static).
      dtype: float dtype of the result.

    Returns:
      [..., M] uniforms.

    >>> import jax.numpy as jnp
    >>> u = uniform_from_seed(jnp.array([7, 8], jnp.uint32), 4)
    >>> u.shape, bool(((u > 0) & (u < 1)).all())
    ((2, 4), True)
    """
    seed = jnp.asarray(seed, jnp.uint32)
    x = seed[..., None] + jnp.arange(num_samples, dtype=jnp.uint32) * jnp.uint32(0x9E3779B9)
    u = ((mix32(x) >> 8).astype(jnp.float32) + 0.5) * (1.0 / (1 << 24))
    # v + 0.5 is not representable above 2^23 and can round up to 2^24 (u = 1); keep u < 1, also
    # after casting to a coarser dtype
    info = jnp.finfo(dtype)
    return jnp.clip(jnp.minimum(u, 1.0 - 2.0 ** -24).astype(dtype), info.tiny, 1 - info.epsneg)


def hashed_uniform(key: jax.Array, num_samples: int, dtype=jnp.float32) -> jax.Array:
    """[M] uniforms in (0, 1) from one 32-bit seed drawn with ``key`` (see :func:`uniform_from_seed`).

    Stateless, like ``jax.random``. ``key`` is consumed.

    Args:
      key: consumed.
      num_samples: M (static).
      dtype: float dtype of the result.

    Returns:
      [M] uniforms.

    >>> import jax
    >>> hashed_uniform(jax.random.key(0), 3).shape
    (3,)
    """
    return uniform_from_seed(jax.random.bits(key, (), jnp.uint32), num_samples, dtype)


def quantile_function(quantiles: jax.Array, tau: jax.Array) -> jax.Array:
    """Piecewise-linear quantile function of sorted midpoint quantiles [..., Q] at tau [..., M].

    ``tau_i = (i + 0.5) / Q`` maps to ``quantiles[i]``; linear between neighbours, constant beyond
    the outer midpoints. A gather and a lerp (``jnp.interp``'s search is far slower on CPU).

    Args:
      quantiles: [..., Q] sorted quantiles at the midpoints.
      tau: [..., M] levels in [0, 1] (leading axes broadcast with ``quantiles``'s).

    Returns:
      [..., M] values of the quantile function.

    >>> import jax.numpy as jnp
    >>> quantile_function(jnp.array([0.0, 1.0]), jnp.array([0.0, 0.25, 0.5, 0.75, 1.0])).tolist()
    [0.0, 0.0, 0.5, 1.0, 1.0]
    """
    nq = quantiles.shape[-1]
    x = jnp.clip(tau * nq - 0.5, 0.0, nq - 1)
    i0 = jnp.floor(x).astype(jnp.int32)
    i1 = jnp.minimum(i0 + 1, nq - 1)
    w = x - i0
    lead = jnp.broadcast_shapes(quantiles.shape[:-1], tau.shape[:-1])
    q = jnp.broadcast_to(quantiles, lead + (nq,)).reshape(-1, nq)
    # a row-wise gather (vmapped) is ~30% faster on CPU than take_along_axis's general gather
    take = jax.vmap(lambda row, i: row[i])
    shape = lead + tau.shape[-1:]
    lo = take(q, i0.reshape(q.shape[0], -1)).reshape(shape)
    hi = take(q, i1.reshape(q.shape[0], -1)).reshape(shape)
    return lo * (1 - w) + hi * w


def sample_quantiles(key: jax.Array, quantiles: jax.Array, num_samples: int, *,
                     stratified: bool = False, assume_sorted: bool = False) -> jax.Array:
    """Samples [M] of the distribution whose quantiles at the midpoints are ``quantiles`` [Q].

    The quantile function is the piecewise-linear interpolation of the sorted quantiles (constant
    beyond the outer midpoints, :func:`quantile_function`); a sample is its value at
    ``tau ~ U(0, 1)``. With ``stratified``, ``tau`` is the grid ``(j + 0.5) / M`` in a random order
    (so sums of independent variables are not comonotone), which removes most Monte-Carlo error of
    one variable. ``key`` is consumed. ``assume_sorted`` skips sorting ``quantiles`` (the caller
    sorted them once).

    Args:
      key: consumed.
      quantiles: [Q] quantiles at the midpoint levels.
      num_samples: M (static).
      stratified: use the shuffled grid of M levels instead of uniform draws.
      assume_sorted: the quantiles are already sorted.

    Returns:
      [M] samples.

    >>> import jax, jax.numpy as jnp
    >>> z = sample_quantiles(jax.random.key(0), jnp.array([0.0, 1.0]), 4, stratified=True)
    >>> sorted(z.tolist())
    [0.0, 0.25, 0.75, 1.0]
    """
    q = quantiles if assume_sorted else jnp.sort(quantiles, axis=-1)
    if stratified:
        grid = (jnp.arange(num_samples, dtype=q.dtype) + 0.5) / num_samples
        u = jax.random.permutation(key, grid)
    else:
        u = hashed_uniform(key, num_samples, q.dtype)
    return quantile_function(q, u)


def quantile_huber_loss(pred: jax.Array, target: jax.Array, *, kappa: float = 1.0) -> jax.Array:
    """Quantile-Huber loss (QR-DQN, Dabney et al. 2018, Eq. 10) of pred [Q] vs target samples [T].

    ``mean_j sum_i |tau_i - 1{target_j < pred_i}| L_kappa(target_j - pred_i) / kappa`` (unbatched;
    ``target`` is treated as a constant).

    Args:
      pred: [Q] predicted quantiles at the midpoint levels.
      target: [T] target samples (no gradient flows into them).
      kappa: Huber threshold > 0.

    Returns:
      [] loss.

    >>> import jax.numpy as jnp
    >>> float(quantile_huber_loss(jnp.array([0.0, 1.0]), jnp.array([0.0, 1.0])))
    0.125
    """
    target = jax.lax.stop_gradient(target)
    tau = quantile_midpoints(pred.shape[-1], pred.dtype)
    diff = target[None, :] - pred[:, None]  # [Q, T]
    absd = jnp.abs(diff)
    huber = jnp.where(absd <= kappa, 0.5 * diff ** 2, kappa * (absd - 0.5 * kappa))
    weight = jnp.abs(tau[:, None] - (diff < 0).astype(pred.dtype))
    return jnp.sum(jnp.mean(weight * huber / kappa, axis=1))


def exact_cvar_discrete(values, probs, alpha: float) -> float:
    """CVaR_alpha of a finite distribution (numpy float64 reference): ``E[Z | Z in worst alpha]``.

    Args:
      values: [K] outcomes.
      probs: [K] their probabilities (summing to 1).
      alpha: level in (0, 1].

    Returns:
      The CVaR as a Python float.

    >>> exact_cvar_discrete([-10.0, 5.0], [0.1, 0.9], 0.2)
    -2.5
    """
    import numpy as np
    v = np.asarray(values, np.float64)
    p = np.asarray(probs, np.float64)
    order = np.argsort(v, kind="stable")
    v, p = v[order], p[order]
    cum = np.concatenate([[0.0], np.cumsum(p)])
    take = np.clip(np.minimum(cum[1:], alpha) - cum[:-1], 0.0, None)
    return float(np.sum(take * v) / alpha)
