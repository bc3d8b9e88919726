"""TDM-R1 building blocks: group advantages, the DGPO group loss, the forward kernel, the losses.

TDM-R1 (Luo et al.; github.com/Luo-Yihong/TDM-R1; issue 24 and ``shared/papers/tdm_r1.md``)
fine-tunes a few-step generator G with a non-differentiable reward r by training a *surrogate*
denoiser S, started at the teacher T, to prefer high-reward samples (group DPO, "DGPO"), and
pulling G along ``D_S - D_T`` next to a trajectory-distribution-matching (TDM) term that keeps G
near T through a fake score f. Written here in EDM (variance-exploding) form ``x_s = x_0 + s eps``
with x_0-predicting, *unbatched* denoisers ``D(params, x, sigma, cond)`` (as
:func:`~jaxpapers.diffusion.edm_denoiser`), vmapped inside. Issue steps:

1. rollout boundaries ``x_0 .. x_K`` (:func:`~jaxpapers.diffusion.sample_trajectory`), reward on
   ``x_K``, :func:`group_advantages` ``A_i = clip((r_i - mean_g r) / (std r + 1e-4), +-5)``;
2. for M boundaries j: :func:`fake_score_loss` (2a), :func:`surrogate_loss` (2b: the forward
   kernel's exact target from :func:`forward_kernel`, :func:`trust_region_mask`,
   :func:`group_preference_loss`), :func:`generator_loss` (2c).

The trainer that strings them together is :func:`~jaxpapers.diffusion.make_tdm_r1`.

Batches are [B, ...] with a group id per sample in ``[0, num_groups)`` (a prompt's G samples
share one). With ``axis_name`` the batch is split over the devices of a ``shard_map`` axis:
group sums, counts and batch means are ``psum``-ed over it (so every device sees the global
statistics), and every loss returns the *global* value. Under ``shard_map``'s default
``check_vma=True`` the gradient of that value with respect to replicated parameters is the global
gradient (autodiff inserts the ``psum``). Value checks (NaN rewards, group ids out of range,
``beta < 0``) run on concrete inputs only, as everywhere in the library
(:mod:`jaxpapers.core.checks`): under ``jit`` / ``vmap`` out-of-range ids are dropped from the
group sums (``segment_sum`` semantics) and a NaN reward spreads NaN.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from jaxpapers.core import checks

__all__ = ["group_advantages", "group_preference_loss", "group_preference_terms",
           "forward_kernel", "trust_region_mask", "edm_weight", "shifted_sigma",
           "fake_score_loss", "surrogate_loss", "generator_loss", "ScoreDenoiser"]

# D(params, x [...], sigma [], cond) -> x0 estimate [...] for ONE example.
ScoreDenoiser = Callable[[Any, jax.Array, jax.Array, Any], jax.Array]

ADV_EPS = 1e-4  # the release's std offset (issue step 1)
_W_MIN = 1e-6  # floor of the DMD-style normalisers w, w_r (a 0/0 guard; the release has none)


# ----------------------------------------------------------------------------- collectives
def _psum(x, axis_name):
    return x if axis_name is None else lax.psum(x, axis_name)


def _pmax(x, axis_name):
    return x if axis_name is None else lax.pmax(x, axis_name)


def _mean(per_sample: jax.Array, axis_name) -> jax.Array:
    """Mean of a [B] vector over the (global) batch."""
    n = _psum(jnp.asarray(per_sample.shape[0], per_sample.dtype), axis_name)
    return _psum(jnp.sum(per_sample), axis_name) / n


def _mean_d(x: jax.Array) -> jax.Array:
    """[B, ...] -> [B]: mean over every axis but the first (the per-sample "/ d")."""
    return jnp.mean(x.reshape(x.shape[0], -1), axis=1)


def _bcast(v: jax.Array, x: jax.Array) -> jax.Array:
    """[B] -> [B, 1, ...] to broadcast against x [B, ...]."""
    return v.reshape(v.shape + (1,) * (x.ndim - 1))


def _apply(fn: ScoreDenoiser, params, x: jax.Array, sigma: jax.Array, cond) -> jax.Array:
    """Batched call of an unbatched denoiser: x [B, ...], sigma [] shared, cond [B, ...]."""
    return jax.vmap(fn, in_axes=(None, 0, None, 0))(params, x, sigma, cond)


# ----------------------------------------------------------------------------- checks
def _check_group_args(name: str, values, group_ids, num_groups) -> int:
    num_groups = checks.check_int("num_groups", num_groups, minimum=1)
    checks.check_ndim(name, values, 1, "[B]")
    if np.shape(group_ids) != np.shape(values):
        raise ValueError(f"group_ids must have the shape of {name} {tuple(np.shape(values))}, "
                         f"got {tuple(np.shape(group_ids))}")
    if not jnp.issubdtype(jnp.result_type(group_ids), jnp.integer):
        raise ValueError(f"group_ids must be integers, got dtype {jnp.result_type(group_ids)}")
    g = checks.concrete(group_ids)
    if g is not None and g.size and (g.min() < 0 or g.max() >= num_groups):
        raise ValueError(f"group_ids must lie in [0, num_groups={num_groups}), got values in "
                         f"[{g.min()}, {g.max()}]")
    return num_groups


def _float(x) -> jax.Array:
    x = jnp.asarray(x)
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.result_type(float))


# ----------------------------------------------------------------------------- step 1
def group_advantages(rewards: ArrayLike, group_ids: ArrayLike, *, num_groups: int,
                     clip: ArrayLike = 5.0, global_std: bool = True,
                     axis_name: str | None = None) -> jax.Array:
    """Group-relative advantages (issue 24 step 1; the release's ``global_std = True``).

    ``A_i = clip((r_i - mean_{g(i)} r) / (std + 1e-4), -clip, clip)`` where ``std`` is the
    population standard deviation (ddof 0) of all B rewards when ``global_std``, else that of
    the sample's own group. The group mean is taken after subtracting the group's maximum, so a
    group of equal rewards gives exactly zero advantages.

    Args:
      rewards: [B] float rewards.
      group_ids: [B] int group of each sample, in ``[0, num_groups)``.
      num_groups: static number of groups (>= 1); empty groups are allowed.
      clip: traced clip level (> 0).
      global_std: static; batch-wide (True) or per-group (False) standard deviation.
      axis_name: a ``shard_map`` axis the batch is split over: group and batch statistics are
        reduced over it (``group_ids`` are then global ids).

    Returns:
      [B] advantages, the rewards' float dtype.

    Raises:
      ValueError: naming ``rewards`` (not [B], or NaN / inf when concrete), ``group_ids``
        (shape, dtype, or out of range when concrete), ``num_groups`` (< 1) or ``clip``.

    >>> r = jnp.array([1.0, 0.0, 1.0, 1.0])
    >>> [round(float(a), 4) for a in group_advantages(r, jnp.array([0, 0, 1, 1]), num_groups=2)]
    [1.1544, -1.1544, 0.0, 0.0]
    """
    num_groups = _check_group_args("rewards", rewards, group_ids, num_groups)
    checks.check_finite("rewards", rewards)
    checks.check_range("clip", clip, low=0.0, low_open=True, scalar=True)
    global_std = checks.check_bool("global_std", global_std)
    r, g = _float(rewards), jnp.asarray(group_ids)
    seg = lambda v: _psum(jax.ops.segment_sum(v, g, num_groups), axis_name)  # noqa: E731
    count = jnp.maximum(seg(jnp.ones_like(r)), 1.0)  # [num_groups]
    shift = _pmax(jax.ops.segment_max(r, g, num_groups), axis_name)  # [num_groups]
    d = r - shift[g]
    centred = d - (seg(d) / count)[g]
    if global_std:
        mu = _mean(r, axis_name)
        std = jnp.sqrt(_mean((r - mu) ** 2, axis_name))
    else:
        std = jnp.sqrt(seg(centred ** 2) / count)[g]
    clip = jnp.asarray(clip, r.dtype)
    return jnp.clip(centred / (std + ADV_EPS), -clip, clip)


def group_preference_terms(loss: ArrayLike, ref_loss: ArrayLike, advantages: ArrayLike,
                           group_ids: ArrayLike, *, num_groups: int, beta: ArrayLike,
                           axis_name: str | None = None) -> tuple[jax.Array, jax.Array]:
    """:func:`group_preference_loss` and the per-sample weights ``sigmoid(Z_{g(i)})`` [B]."""
    num_groups = _check_group_args("loss", loss, group_ids, num_groups)
    for name, v in (("ref_loss", ref_loss), ("advantages", advantages)):
        if np.shape(v) != np.shape(loss):
            raise ValueError(f"{name} must have the shape of loss {tuple(np.shape(loss))}, got "
                             f"{tuple(np.shape(v))}")
    checks.check_range("beta", beta, low=0.0, scalar=True)
    loss = _float(loss)
    g = jnp.asarray(group_ids)
    a = lax.stop_gradient(jnp.asarray(advantages, loss.dtype))
    delta = lax.stop_gradient(loss - jnp.asarray(ref_loss, loss.dtype))
    seg = lambda v: _psum(jax.ops.segment_sum(v, g, num_groups), axis_name)  # noqa: E731
    count = jnp.maximum(seg(jnp.ones_like(loss)), 1.0)
    z = jnp.asarray(beta, loss.dtype) * seg(a * delta) / count  # [num_groups], detached
    weight = jax.nn.sigmoid(z)[g]
    return _mean(weight * a * loss, axis_name), weight


def group_preference_loss(loss: ArrayLike, ref_loss: ArrayLike, advantages: ArrayLike,
                          group_ids: ArrayLike, *, num_groups: int, beta: ArrayLike,
                          axis_name: str | None = None) -> jax.Array:
    """The DGPO group loss of the surrogate (issue 24 step 2b).

    ``L = mean_i sigmoid(Z_{g(i)}) A_i loss_i`` with
    ``Z_g = (beta / G_g) sum_{i in g} A_i (loss_i - ref_loss_i)`` held constant
    (``stop_gradient``; ``G_g`` = members of group g). Its gradient in ``loss_i`` is
    ``sigmoid(Z_g) A_i / B``: that of ``-(1/B) sum_g G_g log sigmoid(-Z_g) / beta``, the group
    DPO objective. Neither ``ref_loss`` nor ``advantages`` receive gradients.

    Args:
      loss: [B] per-sample denoising losses of the trained model (differentiable).
      ref_loss: [B] those of the reference model.
      advantages: [B] from :func:`group_advantages`.
      group_ids: [B] int in ``[0, num_groups)``.
      num_groups: static (>= 1).
      beta: traced strength (>= 0).
      axis_name: optional ``shard_map`` axis of the batch (global sums and mean).

    Returns:
      [] the loss.

    Raises:
      ValueError: naming the argument: shapes, ``group_ids`` out of range, ``num_groups < 1``,
        ``beta < 0`` (values when concrete).

    >>> l = group_preference_loss(jnp.array([1.0, 2.0]), jnp.array([1.0, 2.0]),
    ...                           jnp.array([1.0, -1.0]), jnp.array([0, 0]), num_groups=1,
    ...                           beta=10.0)
    >>> float(l)   # Z = 0: weights 1/2, (0.5 * 1 - 0.5 * 2) / 2
    -0.25
    """
    return group_preference_terms(loss, ref_loss, advantages, group_ids, num_groups=num_groups,
                                  beta=beta, axis_name=axis_name)[0]


# ----------------------------------------------------------------------------- kernels, masks
def forward_kernel(x_n: ArrayLike, s_n: ArrayLike, tau: ArrayLike,
                   eps: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """Diffuse ``x_n`` (noise level ``s_n``) to ``tau`` and return the exact denoising target.

    Issue 24 step 2b: ``b = sqrt(tau^2 - s_n^2)``, ``x_tau = x_n + b eps`` and
    ``x* = x_tau - tau^2 eps / b``, which equals ``x_n - (s_n^2 / b) eps``; the latter is what is
    computed, so ``x* = x_n`` exactly when ``s_n = 0`` (no 0/0). ``-eps / b`` is the score of the
    kernel ``p(x_tau | x_n)``, so by denoising score matching ``E[x* | x_tau] = x_tau + tau^2
    grad log p_tau(x_tau)``, the exact x_0-denoiser at ``tau`` of the data behind ``x_n``
    (Tweedie): regressing a denoiser on ``x*`` learns ``D(x_tau; tau)``.

    Elementwise (unbatched, or broadcastable batches).

    Args:
      x_n: [...] sample at noise level ``s_n``.
      s_n: [] or broadcastable, >= 0.
      tau: [] or broadcastable, ``> s_n`` (``tau = s_n > 0`` leaves the target infinite).
      eps: [...] standard-normal noise (share it within a group for DGPO).

    Returns:
      ``(x_tau, target)``, both x_n's shape.

    Raises:
      ValueError: naming ``tau`` when concrete values violate ``tau > s_n >= 0``.

    >>> x_tau, tgt = forward_kernel(jnp.ones(2), 0.0, 2.0, jnp.array([1.0, -1.0]))
    >>> x_tau.tolist(), tgt.tolist()
    ([3.0, -1.0], [1.0, 1.0])
    """
    s_c, t_c = checks.concrete(s_n), checks.concrete(tau)
    if s_c is not None and np.any(s_c < 0):
        raise ValueError(f"s_n must be >= 0, got {s_c}")
    if s_c is not None and t_c is not None and np.any(t_c <= s_c):
        raise ValueError(f"tau must be > s_n, got tau={t_c}, s_n={s_c}")
    x_n = _float(x_n)
    s_n, tau = jnp.asarray(s_n, x_n.dtype), jnp.asarray(tau, x_n.dtype)
    eps = jnp.asarray(eps, x_n.dtype)
    b = jnp.sqrt(jnp.maximum(tau ** 2 - s_n ** 2, 0.0))
    coef = s_n ** 2 / jnp.where(s_n > 0, b, 1.0)
    return x_n + b * eps, x_n - coef * eps


def edm_weight(sigma: ArrayLike, sigma_data: ArrayLike = 0.5) -> jax.Array:
    """EDM's loss weight ``lambda(sigma) = (sigma^2 + sd^2) / (sigma sd)^2`` (EDM Table 1).

    The ``l(tau)`` of the fake-score and surrogate losses (the release weights velocity errors,
    ``|dx0|^2 / t^2`` in flow time; this is the EDM analogue for these EDM denoisers).
    """
    sigma = jnp.asarray(sigma)
    return (sigma ** 2 + sigma_data ** 2) / (sigma * sigma_data) ** 2


def shifted_sigma(u: ArrayLike, low: ArrayLike, high: ArrayLike, *, shift: ArrayLike,
                  margin: ArrayLike) -> jax.Array:
    """Map ``u ~ U[0, 1)`` to a noise level in ``(low, high)``: the release's shifted-time draw.

    The release draws a flow time uniformly in the shift-3 warped space above the boundary
    (``u_lo + 0.02`` .. 1). With flow time ``t = sigma / (1 + sigma)`` the warp
    ``t = s u / (1 + (s - 1) u)`` becomes ``sigma = s u / (1 - u)``, i.e.
    ``u(sigma) = sigma / (s + sigma)``: ``sigma(u_lo' + (u_hi - u_lo') u)`` with
    ``u_lo = u(low)``, ``u_hi = u(high)``, ``u_lo' = u_lo + margin (u_hi - u_lo)``, so the level
    exceeds ``low`` whenever ``margin > 0``. Elementwise in traced arguments.

    >>> [round(float(shifted_sigma(u, 0.0, 20.0, shift=3.0, margin=0.0)), 3) for u in (0, .5)]
    [0.0, 2.308]
    """
    low, high = jnp.asarray(low), jnp.asarray(high)
    u_lo, u_hi = low / (shift + low), high / (shift + high)
    u_lo = u_lo + margin * (u_hi - u_lo)
    v = u_lo + (u_hi - u_lo) * u
    return shift * v / (1.0 - v)


def trust_region_mask(loss: ArrayLike, old_loss: ArrayLike, ref_loss: ArrayLike,
                      advantages: ArrayLike, anchor: ArrayLike, *, clip: ArrayLike,
                      anchor_threshold: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """Which samples' surrogate losses get no gradient (issue 24 step 2b; the release's clips).

    PPO-style against the lagging copy S-, ``ratio = exp(old_loss - loss)``:
    stop when ``A > 0`` and ``ratio > 1 + clip`` (S already improved this good sample enough) or
    ``A < 0`` and ``ratio < 1 - clip``. Against T, only while the anchor (the batch mean of
    ``mean_d |D_S - D_T|^2``) exceeds ``anchor_threshold``: stop when ``A > 0`` and S already
    beats T (``loss < ref_loss``) or ``A < 0`` and S already trails T (``loss > ref_loss``).
    ``A = 0`` is never stopped (it carries no gradient anyway).

    Args:
      loss, old_loss, ref_loss, advantages: [B] (values only; nothing is differentiated).
      anchor: [] the batch's anchor value.
      clip, anchor_threshold: traced scalars.

    Returns:
      ``(ppo, ref)``: [B] bool masks; the gradient of ``loss_i`` is stopped where either holds.

    >>> ppo, ref = trust_region_mask(jnp.array([0.0, 0.0]), jnp.array([0.1, -0.1]),
    ...                              jnp.array([1.0, 1.0]), jnp.array([1.0, -1.0]), 0.0,
    ...                              clip=1e-3, anchor_threshold=0.05)
    >>> ppo.tolist(), ref.tolist()
    ([True, True], [False, False])
    """
    loss, old_loss, ref_loss, a = (jnp.asarray(v) for v in
                                   (loss, old_loss, ref_loss, advantages))
    ratio = jnp.exp(old_loss - loss)
    pos, neg = a > 0, a < 0
    ppo = (pos & (ratio > 1.0 + clip)) | (neg & (ratio < 1.0 - clip))
    far = jnp.asarray(anchor) > anchor_threshold
    ref = far & ((pos & (loss < ref_loss)) | (neg & (loss > ref_loss)))
    return ppo, ref


# ----------------------------------------------------------------------------- the three losses
def fake_score_loss(fake_params, teacher_params, x_tau: jax.Array, tau: jax.Array,
                    x0: jax.Array, cond, *, score_fn: ScoreDenoiser, reg: ArrayLike,
                    sigma_data: float = 0.5,
                    axis_name: str | None = None) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Fake-score loss (issue 24 step 2a): f learns the generator's distribution at ``tau``.

    ``L_f = l(tau) mean_i [mean_d (D_f(x_tau) - x0)^2 + reg mean_d (D_f(x_tau) - D_T(x_tau))^2]``
    with ``x0 = G(x_j, s_j)`` (held fixed) and ``x_tau`` its Euler step to ``s_{j+1}`` diffused to
    ``tau`` (fresh noise); ``l = edm_weight``, ``reg = 0.02``.

    Args:
      fake_params: f's parameters (differentiated).
      teacher_params: T's (constant).
      x_tau: [B, ...]; tau: [] shared level; x0: [B, ...] targets; cond: [B, ...].
      score_fn: the unbatched denoiser of f and T.
      reg: traced weight of the pull towards T.

    Returns:
      ``([] loss, metrics)``.
    """
    d_f = _apply(score_fn, fake_params, x_tau, tau, cond)
    d_t = lax.stop_gradient(_apply(score_fn, teacher_params, x_tau, tau, cond))
    x0 = lax.stop_gradient(x0)
    per = _mean_d((d_f - x0) ** 2) + reg * _mean_d((d_f - d_t) ** 2)
    loss = edm_weight(tau, sigma_data) * _mean(per, axis_name)
    return loss, {"fake_loss": loss}


def surrogate_loss(sur_params, old_params, teacher_params, x_tau: jax.Array, tau: jax.Array,
                   target: jax.Array, advantages: jax.Array, group_ids: jax.Array, cond, *,
                   time_weight: ArrayLike, beta: ArrayLike, clip: ArrayLike,
                   anchor_threshold: ArrayLike, anchor_weight: ArrayLike,
                   score_fn: ScoreDenoiser, num_groups: int, sigma_data: float = 0.5,
                   axis_name: str | None = None) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Surrogate-reward loss (issue 24 step 2b): DGPO on the forward kernel's exact target.

    Per sample ``l_X,i = l(tau) mean_d (D_X(x_tau) - x*)^2`` for X = S (trained), S- (lagging
    copy, ``old_params``) and T (reference); anchor ``= mean_i mean_d (D_S - D_T)^2``;
    ``l_S,i`` loses its gradient where :func:`trust_region_mask` says so; then
    ``L = w_t (group_preference_loss(l_S, l_T, A) + anchor_weight * anchor)``.

    Args:
      sur_params: S's parameters (differentiated); old_params, teacher_params: constants.
      x_tau, target: [B, ...] from :func:`forward_kernel` (group-shared noise).
      tau: [] noise level; advantages, group_ids: [B]; cond: [B, ...].
      time_weight: traced ``w_t`` (``(k + 1) / K``, or 1 without the time weight).
      beta, clip, anchor_threshold, anchor_weight: traced (10, 1e-3, 0.05, 1e-3 in the release).
      score_fn: the unbatched denoiser of S and T; num_groups: static.

    Returns:
      ``([] loss, metrics)``: ``sur_loss``, ``dgpo_loss``, ``anchor``, ``clip_ratio``,
      ``clip_ref_ratio``, ``group_weight`` (mean sigmoid(Z)).
    """
    lam = edm_weight(tau, sigma_data)
    d_s = _apply(score_fn, sur_params, x_tau, tau, cond)
    d_old = lax.stop_gradient(_apply(score_fn, old_params, x_tau, tau, cond))
    d_t = lax.stop_gradient(_apply(score_fn, teacher_params, x_tau, tau, cond))
    target = lax.stop_gradient(target)
    l_s = lam * _mean_d((d_s - target) ** 2)
    l_old = lam * _mean_d((d_old - target) ** 2)
    l_ref = lam * _mean_d((d_t - target) ** 2)
    anchor = _mean(_mean_d((d_s - d_t) ** 2), axis_name)
    ppo, ref = trust_region_mask(lax.stop_gradient(l_s), l_old, l_ref, advantages,
                                 lax.stop_gradient(anchor), clip=clip,
                                 anchor_threshold=anchor_threshold)
    l_kept = jnp.where(ppo | ref, lax.stop_gradient(l_s), l_s)
    dgpo, weight = group_preference_terms(l_kept, l_ref, advantages, group_ids,
                                          num_groups=num_groups, beta=beta, axis_name=axis_name)
    loss = time_weight * (dgpo + anchor_weight * anchor)
    frac = lambda m: _mean(m.astype(l_s.dtype), axis_name)  # noqa: E731
    return loss, {"sur_loss": loss, "dgpo_loss": dgpo, "anchor": anchor,
                  "clip_ratio": frac(ppo), "clip_ref_ratio": frac(ref),
                  "group_weight": _mean(weight, axis_name)}


def generator_loss(gen_params, fake_params, sur_params, teacher_params, x_j: jax.Array,
                   s_j: jax.Array, s_next: jax.Array, tau: jax.Array, eps: jax.Array,
                   tau_d: jax.Array, eps_d: jax.Array, x_final: jax.Array, eps_w: jax.Array,
                   advantages: jax.Array, cond, *, reward_weight: ArrayLike, lam_r: ArrayLike,
                   rwr: ArrayLike, gen_fn: ScoreDenoiser, score_fn: ScoreDenoiser,
                   axis_name: str | None = None) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Generator loss at boundary j (issue 24 step 2c), plus the RWR control's term.

    ``x0 = G(x_j, s_j)`` (differentiated); ``x_n = x0 + (s_{j+1} / s_j)(x_j - x0)`` (Euler, held
    fixed); ``x_tau = x_n + sqrt(tau^2 - s_{j+1}^2) eps``,
    ``x_td = x_n + sqrt(tau_d^2 - s_{j+1}^2) eps_d``. Per sample (``|.|^2`` = mean over d, ``sg``
    = stop_gradient, ``w = mean_d |x0 - D_T(x_tau)|``, ``w_r = mean_d |x0 - D_S(x_td)|``):

    * TDM: ``|sg(x0 + D_T(x_tau) - D_f(x_tau)) - x0|^2 / w``;
    * reward: ``reward_weight |sg(x0 + lam_r (D_S(x_td) - D_T(x_td))) - x0|^2 / w_r`` (0.7);
    * RWR (the control, off with ``rwr = 0``): ``rwr max(A, 0) |G(x_K + s_j eps_w, s_j) - x_K|^2``,
      a reward-weighted denoising loss on the rollout's own final samples ``x_K``.

    ``L_G`` is their batch mean.

    Args:
      gen_params: G's parameters (differentiated); fake/sur/teacher params: constants.
      x_j: [B, ...] rollout boundary j; s_j, s_next: [] its level and the next one (s_j > 0).
      tau, tau_d: [] levels above ``s_next``; eps, eps_d, eps_w: [B, ...] noises (eps_d
        group-shared).
      x_final: [B, ...] the rollout's ``x_K``; advantages: [B]; cond: [B, ...].
      reward_weight, lam_r, rwr: traced weights.
      gen_fn: G's unbatched denoiser; score_fn: that of f, S and T.

    Returns:
      ``([] loss, metrics)``: ``gen_loss``, ``tdm_loss``, ``reward_loss``, ``rwr_loss``.
    """
    x0 = _apply(gen_fn, gen_params, x_j, s_j, cond)
    x0c = lax.stop_gradient(x0)
    x_n = x0c + (s_next / s_j) * (x_j - x0c)
    x_tau = x_n + jnp.sqrt(tau ** 2 - s_next ** 2) * eps
    x_td = x_n + jnp.sqrt(tau_d ** 2 - s_next ** 2) * eps_d
    sg = lax.stop_gradient
    d_t = sg(_apply(score_fn, teacher_params, x_tau, tau, cond))
    d_f = sg(_apply(score_fn, fake_params, x_tau, tau, cond))
    d_s = sg(_apply(score_fn, sur_params, x_td, tau_d, cond))
    d_t2 = sg(_apply(score_fn, teacher_params, x_td, tau_d, cond))
    w = jnp.maximum(_mean_d(jnp.abs(x0c - d_t)), _W_MIN)
    w_r = jnp.maximum(_mean_d(jnp.abs(x0c - d_s)), _W_MIN)
    tdm = _mean_d((sg(x0 + d_t - d_f) - x0) ** 2) / w
    rew = _mean_d((sg(x0 + lam_r * (d_s - d_t2)) - x0) ** 2) / w_r
    x_final = sg(x_final)
    x_w = x_final + s_j * eps_w
    rwr_i = jnp.maximum(sg(advantages), 0.0) * _mean_d(
        (_apply(gen_fn, gen_params, x_w, s_j, cond) - x_final) ** 2)
    tdm, rew, rwr_i = (_mean(v, axis_name) for v in (tdm, rew, rwr_i))
    loss = tdm + reward_weight * rew + rwr * rwr_i
    return loss, {"gen_loss": loss, "tdm_loss": tdm, "reward_loss": rew, "rwr_loss": rwr_i}
