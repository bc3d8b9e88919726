"""RSA-CP: Random Score Alignment conformal prediction (ICML 2026), as released.

Procedure (checked against the released ``score_ot_utils.py``; M real calibration scores S,
N reference scores R, levels alpha and beta):

1. Barycentric 1-D OT map from the uniform measure on the sorted S onto the sorted R:
   ``T(S_(i)) = M * integral_{(i-1)/M}^{i/M} Q_R(u) du`` with Q_R the step quantile function of R;
   made monotone by a cumulative max, averaged over tied S values, cumulative max again. New
   scores are mapped by linear interpolation between the nodes, clamped at the end nodes
   (``extrapolate=True`` continues the end segments instead; not in the release).
2. ``Z = T(S)``, ``A = sort(Z u R)`` (length M + N), ``J = ceil((1 - alpha)(M + N + 1))`` clipped
   to [1, M + N] as in the release.
3. For k = 1..M+1: b-(k), b+(k) = quantiles of Beta-Binomial(N, k, M + 2 - k) at beta/2 and
   1 - beta/2 (the law of the number of reference scores below the k-th smallest of M + 1
   real scores, were real and reference exchangeable), and
   ``q(k) = max(min(A_(k + b+), A_(J)), A_(k + b-))`` with A_(i) = -inf for i < 1, +inf for
   i > M + N.
4. A test score s is included iff ``T(s) <= q(k)`` with ``k = 1 + #{Z <= T(s)}``.

Coverage. Because T sends the i-th smallest calibration score to the mean of the i-th block of
reference quantiles (plotting position (i - 1/2)/M) rather than to the i/(M + 1) position that
exchangeability gives, the pooled threshold A_(J) corresponds to the real-score rank
(1 - alpha) M + 1/2 instead of split CP's ceil((1 - alpha)(M + 1)). The interpolated threshold
then lies *below* split CP's order statistic and the coverage is about
((1 - alpha) M + 1/2) / (M + 1) (0.864 at M = 10, alpha = 0.1). What does hold for any reference
and any real-score law is the worst-case bound of :func:`rsacp_coverage_lower_bound`, K / (M + 1)
with K the number of leading ranks whose whole gap is included (the analogue of SPI's
``get_wc_bounds``). ``guard=True`` adds the floor "include whenever s <= S_(ceil((1 - alpha)(M + 1)))"
(split CP's threshold), which restores ``coverage >= 1 - alpha`` for every reference, at the price of
never being shorter than split CP.

Everything is static-shape in (M, N): vmap :func:`rsacp_calibrate` over calibration splits.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln
from jax.typing import ArrayLike

from jaxpapers.conformal._checks import check_no_nan, check_scores
from jaxpapers.core import checks
from jaxpapers.conformal._types import RSACPState
from jaxpapers.conformal.split import conformal_rank

__all__ = [
    "barycentric_ot_nodes",
    "betabinomial_quantiles",
    "rsacp_calibrate",
    "rsacp_map",
    "rsacp_include",
    "rsacp_half_width",
    "rsacp_half_width_grid",
    "rsacp_prediction_set",
    "rsacp_coverage_lower_bound",
]


def _check_reference(ref) -> None:
    """Reference scores must be finite with at least 2 distinct values (checked when concrete)."""
    checks.check_finite("ref_scores", ref)
    v = checks.concrete(ref)
    if v is None:
        return
    if np.unique(v).size < 2:
        raise ValueError("ref_scores is degenerate: it needs at least 2 distinct values to "
                         f"define a reference distribution, got all equal to {float(v.flat[0])!r}")


def barycentric_ot_nodes(cal_sorted: ArrayLike, ref_sorted: ArrayLike) -> jax.Array:
    """Images of the sorted calibration scores under the barycentric 1-D OT map (step 1).

    ``T(S_(i)) = M * integral_{(i-1)/M}^{i/M} Q_R(u) du``, computed exactly from cumulative sums
    of R with integer arithmetic for the block edges, then cumulative max, tie averaging over
    equal S values, cumulative max.

    Args:
      cal_sorted: [M] sorted calibration scores.
      ref_sorted: [N] sorted reference scores.

    Returns:
      [M] nondecreasing mapped scores Z_(1..M).
    """
    s = jnp.asarray(cal_sorted)
    r = jnp.asarray(ref_sorted)
    m, n = s.shape[0], r.shape[0]
    dtype = jnp.result_type(s.dtype, r.dtype, float)
    r = r.astype(dtype)
    csum = jnp.concatenate([jnp.zeros((1,), dtype), jnp.cumsum(r)])  # [N + 1], C_j = sum_{l<=j}
    i = jnp.arange(m + 1, dtype=jnp.int32)
    num = i * n  # block edge (i/M) in units of 1/(M N): integer
    full = num // m
    frac = (num % m).astype(dtype) / m
    nxt = r[jnp.clip(full, 0, n - 1)]
    g = csum[full] + jnp.where(full < n, frac * nxt, 0.0)  # N * integral_0^{i/M} Q_R
    z = (g[1:] - g[:-1]) * (m / n)
    z = jax.lax.cummax(z)
    # average over tied calibration values (segments of equal S), then cummax again
    new_group = jnp.concatenate([jnp.ones((1,), bool), s[1:] != s[:-1]])
    gid = jnp.cumsum(new_group) - 1
    tot = jax.ops.segment_sum(z, gid, num_segments=m)
    cnt = jax.ops.segment_sum(jnp.ones_like(z), gid, num_segments=m)
    z = (tot / jnp.maximum(cnt, 1.0))[gid]
    return jax.lax.cummax(z)


def betabinomial_quantiles(p: ArrayLike, n: int, a: ArrayLike, b: ArrayLike) -> jax.Array:
    """Smallest x in {0..n} with Beta-Binomial(n, a, b) CDF(x) >= p (step 3).

    Args:
      p: [] probability level. n: number of trials (static). a, b: [K] shape parameters.

    Returns:
      [K] int32 quantiles (0 when p <= 0, n when p >= 1).
    """
    a = jnp.asarray(a)
    b = jnp.asarray(b)
    dtype = jnp.result_type(a.dtype, b.dtype, float)
    x = jnp.arange(n + 1, dtype=dtype)
    a_, b_ = a.astype(dtype)[:, None], b.astype(dtype)[:, None]
    logpmf = (gammaln(n + 1.0) - gammaln(x + 1.0) - gammaln(n - x + 1.0)
              + gammaln(x + a_) + gammaln(n - x + b_) - gammaln(n + a_ + b_)
              - (gammaln(a_) + gammaln(b_) - gammaln(a_ + b_)))
    pmf = jnp.exp(logpmf - jnp.max(logpmf, axis=1, keepdims=True))
    pmf = pmf / jnp.sum(pmf, axis=1, keepdims=True)
    cdf = jnp.cumsum(pmf, axis=1)
    p = jnp.asarray(p, dtype)
    q = jnp.sum(cdf < p, axis=1).astype(jnp.int32)
    q = jnp.minimum(q, n)
    return jnp.where(p <= 0, 0, jnp.where(p >= 1, n, q))


def _interp(x, xp, fp, slope_lo, slope_hi):
    """Piecewise-linear map through (xp, fp) (xp sorted, may repeat) with end slopes."""
    m = xp.shape[0]
    if m == 1:
        return jnp.full(jnp.shape(x), fp[0]) + 0.0 * x
    idx = jnp.clip(jnp.searchsorted(xp, x, side="right", method="compare_all"), 1, m - 1)
    x0, x1, f0, f1 = xp[idx - 1], xp[idx], fp[idx - 1], fp[idx]
    dx = x1 - x0
    t = jnp.where(dx > 0, (x - x0) / jnp.where(dx > 0, dx, 1.0), 0.0)
    inner = f0 + t * (f1 - f0)
    inner = jnp.where(dx > 0, inner, f1)
    lo = fp[0] + slope_lo * (x - xp[0])
    hi = fp[-1] + slope_hi * (x - xp[-1])
    return jnp.where(x <= xp[0], lo, jnp.where(x >= xp[-1], hi, inner))


def _end_slopes(s, z, extrapolate):
    m = s.shape[0]
    zero = jnp.zeros((), z.dtype)
    if m < 2:
        return zero, zero

    def slope(x0, x1, f0, f1):
        dx = x1 - x0
        return jnp.where(dx > 0, (f1 - f0) / jnp.where(dx > 0, dx, 1.0), 0.0)

    on = jnp.asarray(extrapolate, bool)
    return (jnp.where(on, slope(s[0], s[1], z[0], z[1]), zero),
            jnp.where(on, slope(s[-2], s[-1], z[-2], z[-1]), zero))


def rsacp_calibrate(cal_scores: ArrayLike, ref_scores: ArrayLike, *, alpha: ArrayLike,
                    beta: ArrayLike = 0.4, extrapolate: bool | jax.Array = False,
                    guard: bool | jax.Array = False) -> RSACPState:
    """Calibrate RSA-CP on one calibration set (steps 1-3 of the module docstring).

    Unbatched; vmap over calibration splits (and over reference sets if they vary).

    Args:
      cal_scores: [M] real calibration scores, M >= 1, no NaN.
      ref_scores: [N] reference scores, N >= 2, at least 2 distinct values, no NaN.
      alpha: [] miscoverage level in (0, 1) (traceable).
      beta: [] window level in (0, 1): the rank window covers 1 - beta of the Beta-Binomial law
        (the release uses 0.4 in simulations and ImageNet, 0.1 on MEPS).
      extrapolate: bool (may be traced, so variants share one compilation); continue the end
        segments of T instead of clamping (not released).
      guard: bool (may be traced); also include every score <= S_(ceil((1 - alpha)(M + 1))), split CP's
        threshold (everything when that rank exceeds M). Restores coverage >= 1 - alpha for any reference (not released).

    Returns:
      An :class:`RSACPState`.

    >>> import jax, jax.numpy as jnp
    >>> k1, k2 = jax.random.split(jax.random.key(0))
    >>> cal = jnp.exp(jax.random.normal(k1, (20,)))
    >>> ref = jnp.exp(jax.random.normal(k2, (1000,)))
    >>> state = rsacp_calibrate(cal, ref, alpha=0.1, beta=0.4)
    >>> state.q_by_k.shape
    (21,)
    >>> bool(rsacp_include(state, jnp.min(cal)))
    True
    """
    check_scores(cal_scores, "cal_scores")
    check_scores(ref_scores, "ref_scores", min_size=2)
    _check_reference(ref_scores)
    checks.check_level("alpha", alpha)
    checks.check_level("beta", beta)
    s = jnp.sort(jnp.asarray(cal_scores))
    r = jnp.sort(jnp.asarray(ref_scores))
    dtype = jnp.result_type(s.dtype, r.dtype, float)
    s, r = s.astype(dtype), r.astype(dtype)
    m, n = s.shape[0], r.shape[0]
    z = barycentric_ot_nodes(s, r)
    slope_lo, slope_hi = _end_slopes(s, z, extrapolate)

    a = jnp.sort(jnp.concatenate([z, r]))  # [M + N]
    alpha = jnp.asarray(alpha, dtype)
    beta = jnp.asarray(beta, dtype)
    j = jnp.clip(conformal_rank(m + n, alpha), 1, m + n)

    def a_at(idx):  # one-based, -inf below 1, +inf past M + N
        v = a[jnp.clip(idx - 1, 0, m + n - 1)]
        return jnp.where(idx < 1, -jnp.inf, jnp.where(idx > m + n, jnp.inf, v))

    k = jnp.arange(1, m + 2)
    b_minus = betabinomial_quantiles(beta / 2.0, n, k, m + 2 - k)
    b_plus = betabinomial_quantiles(1.0 - beta / 2.0, n, k, m + 2 - k)
    q = jnp.maximum(jnp.minimum(a_at(k + b_plus), a_at(j)), a_at(k + b_minus))

    kg = conformal_rank(m, alpha)
    s_floor = jnp.where(kg > m, jnp.inf, s[jnp.clip(kg - 1, 0, m - 1)])
    s_floor = jnp.where(jnp.asarray(guard, bool), s_floor, -jnp.inf)
    return RSACPState(cal_sorted=s, z_sorted=z, slope_lo=slope_lo, slope_hi=slope_hi,
                      q_by_k=q, s_floor=s_floor.astype(dtype))


def rsacp_map(state: RSACPState, scores: ArrayLike) -> jax.Array:
    """T(s): the fitted OT map applied to new scores (step 1).

    Args:
      state: from :func:`rsacp_calibrate`. scores: [...] scores.

    Returns:
      [...] mapped scores.
    """
    return _interp(jnp.asarray(scores), state.cal_sorted, state.z_sorted, state.slope_lo,
                   state.slope_hi)


def rsacp_include(state: RSACPState, test_scores: ArrayLike) -> jax.Array:
    """Whether each candidate score is in the RSA-CP prediction set (step 4).

    Args:
      state: from :func:`rsacp_calibrate` (unbatched).
      test_scores: [...] candidate scores (any shape).

    Returns:
      [...] bool: ``T(s) <= q(k)`` with ``k = 1 + #{Z <= T(s)}`` (or ``s <= s_floor``).
    """
    s = jnp.asarray(test_scores)
    check_no_nan(s, "test_scores")
    z = rsacp_map(state, s)
    m = state.z_sorted.shape[0]
    rank = jnp.searchsorted(state.z_sorted, z, side="right", method="compare_all")
    k = jnp.clip(1 + rank, 1, m + 1)
    return (z <= state.q_by_k[k - 1]) | (s <= state.s_floor)


def _inverse_sup(state: RSACPState, zstar):
    """sup{s : T(s) <= zstar} (+inf / -inf at the ends when T is flat there)."""
    s, z = state.cal_sorted, state.z_sorted
    m = s.shape[0]
    above = jnp.where(state.slope_hi > 0,
                      s[-1] + (zstar - z[-1]) / jnp.where(state.slope_hi > 0, state.slope_hi, 1.0),
                      jnp.inf)
    below = jnp.where(state.slope_lo > 0,
                      s[0] + (zstar - z[0]) / jnp.where(state.slope_lo > 0, state.slope_lo, 1.0),
                      -jnp.inf)
    if m == 1:
        inner = s[0]
    else:
        idx = jnp.clip(jnp.searchsorted(z, zstar, side="right", method="compare_all"), 1, m - 1)
        z0, z1, s0, s1 = z[idx - 1], z[idx], s[idx - 1], s[idx]
        dz = z1 - z0
        inner = jnp.where(dz > 0, s0 + (zstar - z0) / jnp.where(dz > 0, dz, 1.0) * (s1 - s0), s1)
    return jnp.where(zstar >= z[-1], above, jnp.where(zstar < z[0], below, inner))


def rsacp_half_width(state: RSACPState) -> jax.Array:
    """Closed-form regression half-width: the supremum of the included scores s >= 0.

    The rank-k segment of mapped scores is [Z_(k-1), Z_(k)) (Z_(0) = -inf, Z_(M+1) = +inf); its
    included part is z <= q(k), so the largest included mapped score is
    ``max_k min(q(k), Z_(k))`` over segments with ``q(k) >= Z_(k-1)``, mapped back through T
    (with the end clamp, reaching Z_(M) means every s >= S_(M): unbounded), then the guard
    floor ``s_floor`` if any. The interval is ``pred +- half_width`` (as in the release, which
    found it on a grid: :func:`rsacp_half_width_grid`).

    Args:
      state: from :func:`rsacp_calibrate` (unbatched).

    Returns:
      [] half-width in [0, inf].
    """
    z = state.z_sorted
    lo_edge = jnp.concatenate([jnp.array([-jnp.inf], z.dtype), z])  # Z_(k-1), k=1..M+1
    hi_edge = jnp.concatenate([z, jnp.array([jnp.inf], z.dtype)])  # Z_(k)
    q = state.q_by_k
    seg_sup = jnp.where(q >= lo_edge, jnp.minimum(q, hi_edge), -jnp.inf)
    zstar = jnp.max(seg_sup)
    w = jnp.where(jnp.isposinf(zstar), jnp.inf, _inverse_sup(state, zstar))
    return jnp.maximum(jnp.maximum(w, state.s_floor), 0.0)


def rsacp_half_width_grid(state: RSACPState, grid: ArrayLike) -> jax.Array:
    """Grid oracle for :func:`rsacp_half_width`: the largest included grid point (0 if none).

    Args:
      state: from :func:`rsacp_calibrate`. grid: [G] nonnegative candidate scores.

    Returns:
      [] largest grid value with ``rsacp_include`` true.
    """
    grid = jnp.asarray(grid)
    inc = rsacp_include(state, grid)
    return jnp.max(jnp.where(inc, grid, 0.0))


def rsacp_prediction_set(state: RSACPState, class_scores: ArrayLike) -> jax.Array:
    """Classification prediction set: ``rsacp_include`` on every class's score.

    Args:
      state: from :func:`rsacp_calibrate`. class_scores: [..., K] candidate scores per class.

    Returns:
      [..., K] bool membership mask.
    """
    return rsacp_include(state, class_scores)


def rsacp_coverage_lower_bound(state: RSACPState) -> jax.Array:
    """Distribution-free coverage bound K / (M + 1) that holds for this reference.

    K is the largest rank such that every rank k <= K has its whole gap included
    (``Z_(k) <= q(k)`` or ``S_(k) <= s_floor``): a test score of rank k <= K among the M + 1 real
    scores satisfies T(s) <= Z_(k) and is included whatever the real-score law, so
    ``P(covered) >= K / (M + 1)`` by exchangeability. (Same role as SPI's worst-case bounds.)
    With the clamp, rank 1 is evaluated at k = 2 (T(s) = Z_(1) below S_(1)); this is covered by
    also requiring ``Z_(1) <= q(2)``.

    Args:
      state: from :func:`rsacp_calibrate` (unbatched).

    Returns:
      [] bound in [0, 1].
    """
    z = state.z_sorted
    m = z.shape[0]
    q = state.q_by_k
    guarded = state.cal_sorted <= state.s_floor
    ok = (z <= q[:m]) | guarded  # rank k = 1..M, evaluated at k
    # a score equal to Z_(k) is evaluated at rank k + 1 (searchsorted right): require both
    ok = ok & ((z <= q[1:]) | guarded)
    prefix = jnp.cumprod(ok.astype(jnp.int32))
    kmax = jnp.sum(prefix)
    # rank M + 1 (s > S_(M)): with the clamp (flat end) T(s) = Z_(M), evaluated at k = M + 1;
    # with extrapolation T(s) grows without bound, so only q(M + 1) = +inf includes all of it.
    top_ok = (jnp.isposinf(state.s_floor) | jnp.isposinf(q[m])
              | ((state.slope_hi <= 0) & (z[-1] <= q[m])))
    kmax = jnp.where(top_ok & (kmax == m), m + 1, kmax)
    return kmax / (m + 1.0)
