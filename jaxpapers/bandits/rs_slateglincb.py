"""RS-SlateGLinCB: rarely-switching contextual slate GLM bandit (our reconstruction).

Letters: N slots, K items per slot, d item dimension, D = N d, T horizon, W warm-up buffer.

No code of the paper exists. We lift RS-GLinCB (Sawarni et al. 2024, Alg. 1; authors' code
``nirjhar-das/GLBandit_Limited_Adaptivity/glmbanditexp/algorithms/rs_glinucb.py``) to slates by
giving each slot its own d x d matrices, which keeps the per-round cost O(N K d^2) (poly(N)):

* warm-up switch (Alg. 1 "if max ||x||^2_{V^-1} > tau"): if some item of some slot has
  ||x_ij||^2_{V_i^{-1}} > tau = 1 / (0.01 kappa R^4 S^2 d), play in every slot its largest-norm
  item, update all V_i and refit theta_w by regularised MLE on the warm-up rounds;
* determinant switch: H_i = lambda I + sum_{non-warm-up s} mu'(<x_s, theta_w>) x_si x_si^T; when
  det H_i >= (1 + c) det H_i^tau for some slot, refit theta_tau by MLE on all rounds and set
  H^tau <- H;
* action: per slot eliminate items with  <theta_w,i, x> + g sqrt(kappa) ||x||_{V_i^-1}  below the
  best lower bound, then play argmax <theta_tau,i, x> + beta ||x||_{H_i^tau -1} (the RS-GLinCB
  code centres on (theta_w + theta_tau) / 2: ``mix_warmup=True``).

Parameter updates: at most  N d log(1 + T L^2/(d lambda)) / log(1 + tau)  warm-up refits plus
N d log(1 + T mu'_max L^2 / (d lambda)) / log(1 + c)  determinant refits (``switch_bound``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxpapers.bandits._types import SlateAlgo, make_update
from jaxpapers.bandits.glm import (Link, LOGISTIC, argmax_random_ties, fit_glm_mle, pad_rows,
                                   sherman_morrison, slot_sq_norms)
from jaxpapers.core import checks
from jaxpapers.core.pytree import dataclass

__all__ = ["RSState", "make_rs_slateglincb", "rs_switch_bound", "rs_warmup_threshold"]


@dataclass
class RSState:
    """RS-SlateGLinCB state.

    Attributes:
      v_inv: [N, d, d] warm-up matrices' inverses (lambda I + sum_warm x_si x_si^T)^{-1}.
      h: [N, d, d] current H_i.   h_tau: [N, d, d] H_i at the last switch.
      h_tau_inv: [N, d, d] its inverse.
      theta_w: [N, d] warm-up estimate.   theta_tau: [N, d] switching estimate.
      buf_x: [Tp, D] all played slates (Tp = T padded).  buf_y: [Tp].  n: [] int32 rows used.
      wbuf_x: [Wp, D] warm-up slates.  wbuf_y: [Wp].  nw: [] int32.
      warm: [] bool, whether the last ``select`` chose a warm-up slate.
      pending_w, pending_tau: [] bool refits due.
      num_warm: [] int32 warm-up refits.  num_det: [] int32 determinant refits.
    """

    v_inv: jax.Array  # [N, d, d]
    h: jax.Array  # [N, d, d]
    h_tau: jax.Array  # [N, d, d]
    h_tau_inv: jax.Array  # [N, d, d]
    theta_w: jax.Array  # [N, d]
    theta_tau: jax.Array  # [N, d]
    buf_x: jax.Array  # [Tp, D]
    buf_y: jax.Array  # [Tp]
    n: jax.Array  # [] int32
    wbuf_x: jax.Array  # [Wp, D]
    wbuf_y: jax.Array  # [Wp]
    nw: jax.Array  # [] int32
    warm: jax.Array  # [] bool
    pending_w: jax.Array  # [] bool
    pending_tau: jax.Array  # [] bool
    num_warm: jax.Array  # [] int32
    num_det: jax.Array  # [] int32


def rs_warmup_threshold(*, kappa: float, param_norm_ub: float, dim: int, noise_r: float = 1.0,
                        warmup_scale: float = 0.01) -> float:
    """tau = 1 / (0.01 kappa R^4 S^2 d) (RS-GLinCB code's ``warmup_threshold``)."""
    return 1.0 / (warmup_scale * kappa * noise_r ** 4 * param_norm_ub ** 2 * dim)


def rs_switch_bound(*, num_rounds: int, num_slots: int, dim: int, tau: float, lam: float = 0.5,
                    doubling: float = 0.5, max_dmean: float = 0.25,
                    item_sq_norm: float | None = None) -> tuple[float, float]:
    """(warm-up refit bound, determinant refit bound) from the elliptical-potential argument.

    Each warm-up round multiplies some det V_i by more than 1 + tau, each determinant switch
    some det H_i^tau by at least 1 + c, and log det of a d x d matrix lambda I + (sum of n terms of
    trace <= w L^2) is at most d log(lambda + n w L^2 / d). Hence
    W <= N d log(1 + T L^2 / (d lambda)) / log(1 + tau) and
    switches <= N d log(1 + T mu'_max L^2 / (d lambda)) / log(1 + c). L^2 = 1/N by default.
    """
    l2 = 1.0 / num_slots if item_sq_norm is None else item_sq_norm
    nd = num_slots * dim
    warm = nd * math.log1p(num_rounds * l2 / (dim * lam)) / math.log1p(tau)
    det = nd * math.log1p(num_rounds * max_dmean * l2 / (dim * lam)) / math.log1p(doubling)
    return warm, det


def make_rs_slateglincb(*, num_slots: int, num_items: int, dim: int, num_rounds: int,
                        param_norm_ub: float, kappa: float, link: Link = LOGISTIC,
                        lam: float = 0.5, doubling: float = 0.5, failure_level: float = 0.05,
                        noise_r: float = 1.0, warmup_scale: float = 0.01, mle_iters: int = 8,
                        beta: float | None = None, mix_warmup: bool = False,
                        dtype=jnp.float32) -> SlateAlgo:
    """RS-SlateGLinCB as an ``init / select / update`` triple (unbatched).

    Args:
      num_slots: N.  num_items: K.  dim: d.  num_rounds: T (sizes the static data buffer).
      param_norm_ub: S >= ||theta*||.  kappa: upper bound on 1/mu' (sets the warm-up threshold).
      link: GLM link.  lam: lambda (RS-GLinCB code: 0.5; the MLE uses lambda/2).
      doubling: c in det H >= (1 + c) det H^tau (code: 0.5).  failure_level: delta.
      noise_r: R.  warmup_scale: the 0.01 in tau.  mle_iters: Newton steps per refit.
      beta: exploration multiplier of the UCB step; default the theory value
        4 sqrt(d log(T / delta)) of RS-GLinCB (~31 at d = 5, T = 10^4), which dominates the
        reward differences at small T (see ``experiments/slate_glm``).
      mix_warmup: centre the UCB on (theta_w + theta_tau) / 2 as the RS-GLinCB code
        (``rs_glinucb.py``) does. Default False: centre it on theta_tau alone, the estimate whose
        error the width beta ||x||_{H_tau^-1} bounds in the analysis; theta_w is fitted on the
        few warm-up rounds only and never refined, and the code's centre gave linear regret on
        our slate settings (``experiments/slate_glm`` reports both).

    Returns:
      A :class:`SlateAlgo`; ``num_switches`` counts warm-up plus determinant refits.

    >>> algo = make_rs_slateglincb(num_slots=2, num_items=3, dim=2, num_rounds=10,
    ...                            param_norm_ub=2.0, kappa=10.0)
    >>> s = algo.init(jax.random.key(0))
    >>> int(algo.num_switches(s))
    0
    """
    for name, v in (("num_slots", num_slots), ("num_items", num_items), ("dim", dim),
                    ("num_rounds", num_rounds)):
        checks.check_int(name, v, minimum=1)
    checks.check_range("kappa", kappa, low=1.0, scalar=True)
    checks.check_range("param_norm_ub", param_norm_ub, low=0.0, low_open=True, scalar=True)
    n_s, d = num_slots, dim
    big = n_s * d
    tau = rs_warmup_threshold(kappa=kappa, param_norm_ub=param_norm_ub, dim=d, noise_r=noise_r,
                              warmup_scale=warmup_scale)
    gamma = noise_r * param_norm_ub * math.sqrt(d * math.log(num_rounds / failure_level))
    elim = gamma * math.sqrt(kappa)
    if beta is None:
        beta = 4.0 * math.sqrt(d * math.log(num_rounds / failure_level))
    checks.check_range("beta", beta, low=0.0, scalar=True)
    warm_bound, _ = rs_switch_bound(num_rounds=num_rounds, num_slots=n_s, dim=d, tau=tau, lam=lam,
                                    doubling=doubling, max_dmean=link.max_dmean)
    t_pad = pad_rows(num_rounds)
    w_pad = pad_rows(min(num_rounds, int(math.ceil(warm_bound)) + 1))
    log_c = math.log1p(doubling)

    def init(key):
        del key
        eye = jnp.eye(d, dtype=dtype)
        return RSState(
            v_inv=jnp.broadcast_to(eye / lam, (n_s, d, d)),
            h=jnp.broadcast_to(eye * lam, (n_s, d, d)),
            h_tau=jnp.broadcast_to(eye * lam, (n_s, d, d)),
            h_tau_inv=jnp.broadcast_to(eye / lam, (n_s, d, d)),
            theta_w=jnp.zeros((n_s, d), dtype), theta_tau=jnp.zeros((n_s, d), dtype),
            buf_x=jnp.zeros((t_pad, big), dtype), buf_y=jnp.zeros((t_pad,), dtype),
            n=jnp.zeros((), jnp.int32),
            wbuf_x=jnp.zeros((w_pad, big), dtype), wbuf_y=jnp.zeros((w_pad,), dtype),
            nw=jnp.zeros((), jnp.int32), warm=jnp.zeros((), bool),
            pending_w=jnp.zeros((), bool), pending_tau=jnp.zeros((), bool),
            num_warm=jnp.zeros((), jnp.int32), num_det=jnp.zeros((), jnp.int32))

    def select(state, key, contexts):
        k_w, k_a = jax.random.split(key)
        wn2 = slot_sq_norms(contexts, state.v_inv)  # [N, K]
        # Warm-up rounds are capped by the buffer (never binding: W <= warm_bound, tested).
        warm = jnp.any(wn2 > tau) & (state.nw < w_pad)
        warm_items = argmax_random_ties(k_w, wn2)
        mean_w = jnp.einsum("nkd,nd->nk", contexts, state.theta_w)
        width_w = elim * jnp.sqrt(wn2)
        max_lcb = jnp.max(mean_w - width_w, axis=1, keepdims=True)
        survive = mean_w + width_w >= max_lcb
        theta_mix = (0.5 * (state.theta_w + state.theta_tau) if mix_warmup
                     else state.theta_tau)
        ucb = (jnp.einsum("nkd,nd->nk", contexts, theta_mix)
               + beta * jnp.sqrt(slot_sq_norms(contexts, state.h_tau_inv)))
        ucb_items = argmax_random_ties(k_a, ucb, survive)
        items = jnp.where(warm, warm_items, ucb_items)
        return items, state.replace(warm=warm)

    def observe(state, contexts, items, reward):
        x_slots = jnp.take_along_axis(contexts, items[:, None, None], axis=1)[:, 0]  # [N, d]
        x = x_slots.reshape(-1)
        warm = state.warm
        buf_x = state.buf_x.at[state.n].set(x)
        buf_y = state.buf_y.at[state.n].set(reward)
        wi = jnp.minimum(state.nw, w_pad - 1)
        wbuf_x = jnp.where(warm, state.wbuf_x.at[wi].set(x), state.wbuf_x)
        wbuf_y = jnp.where(warm, state.wbuf_y.at[wi].set(reward), state.wbuf_y)
        v_inv_new = jax.vmap(sherman_morrison, in_axes=(0, 0, None))(state.v_inv, x_slots, 1.0)
        v_inv = jnp.where(warm, v_inv_new, state.v_inv)
        mud = link.dmean(x @ state.theta_w.reshape(-1))
        h_new = state.h + mud * jnp.einsum("nd,ne->nde", x_slots, x_slots)
        h = jnp.where(warm, state.h, h_new)
        ld_h = jnp.linalg.slogdet(h)[1]
        ld_tau = jnp.linalg.slogdet(state.h_tau)[1]
        det_switch = (~warm) & jnp.any(ld_h >= ld_tau + log_c)
        return state.replace(v_inv=v_inv, h=h, buf_x=buf_x, buf_y=buf_y, n=state.n + 1,
                             wbuf_x=wbuf_x, wbuf_y=wbuf_y, nw=state.nw + warm.astype(jnp.int32),
                             pending_w=state.pending_w | warm,
                             pending_tau=state.pending_tau | det_switch)

    fit_fields = ("theta_w", "theta_tau", "h_tau", "h_tau_inv", "pending_w", "pending_tau",
                  "num_warm", "num_det")

    def get_fit(state):
        return {f: getattr(state, f) for f in fit_fields}

    def set_fit(state, fit):
        return state.replace(**fit)

    def refit(state):
        # num_valid = 0 for a refit that is not due: the chunk loop then does no work.
        pw, pt = state.pending_w, state.pending_tau
        th_w = fit_glm_mle(link, state.wbuf_x, state.wbuf_y, jnp.where(pw, state.nw, 0),
                           (0.5 * (state.theta_w + state.theta_tau)).reshape(-1), lam / 2,
                           num_iters=mle_iters).reshape(n_s, d)
        th_t = fit_glm_mle(link, state.buf_x, state.buf_y, jnp.where(pt, state.n, 0),
                           state.theta_tau.reshape(-1), lam / 2,
                           num_iters=mle_iters).reshape(n_s, d)
        return {"theta_w": jnp.where(pw, th_w, state.theta_w),
                "theta_tau": jnp.where(pt, th_t, state.theta_tau),
                "h_tau": jnp.where(pt, state.h, state.h_tau),
                "h_tau_inv": jnp.where(pt, jnp.linalg.inv(state.h), state.h_tau_inv),
                "pending_w": jnp.zeros((), bool), "pending_tau": jnp.zeros((), bool),
                "num_warm": state.num_warm + pw.astype(jnp.int32),
                "num_det": state.num_det + pt.astype(jnp.int32)}

    needs = lambda s: s.pending_w | s.pending_tau
    return SlateAlgo(init=init, select=select,
                     update=make_update(observe, refit, get_fit, set_fit, needs),
                     observe=observe, refit=refit, get_fit=get_fit, set_fit=set_fit,
                     needs_refit=needs,
                     num_switches=lambda s: s.num_warm + s.num_det, name="rs_slateglincb")
