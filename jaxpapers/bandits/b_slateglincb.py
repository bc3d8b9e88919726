"""B-SlateGLinCB (and the modified B-SlateGLinCB+): batched contextual slate GLM bandit
(our reconstruction).

Letters: N slots, K items per slot, d item dimension, D = N d, T horizon, M batches.

No code of the paper exists. We lift B-GLinCB (Sawarni et al. 2024, Alg. 2; authors' code
``tanmaygoyal258/Batched_GLM_Bandits``) to slates with per-slot blocks:

* batch grid (B-GLinCB): two warm-up batches of length sqrt(T), then batches of length
  T^{1 - 2^-i}, i = 1 .. ceil(ln ln T) + 1, cumulative ends clipped at T -> O(log log T) batches;
* the first batch plays uniformly random slates (it has no data; B-GLinCB plays a design on the
  raw arms);
* at the end of each batch: theta_k = regularised MLE on all earlier rounds, projected onto
  ||theta|| <= S, and per-slot H_i = lambda I + sum_s mu'(<x_s, theta_k>) x_si x_si^T
  (the "scaled" design matrix that makes the confidence kappa-free);
* inside batch k >= 1 the policy is fixed: per slot keep items whose UCB
  <theta_k,i, x> + beta ||x||_{H_i^-1} reaches the best LCB, and play the surviving item of largest
  width ||x||_{H_i^-1} (B-SlateGLinCB: exploration along the per-slot G-optimal-design direction)
  or of largest UCB (B-SlateGLinCB+, our reading of "slightly modified").
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.bandits._types import SlateAlgo, make_update
from jaxpapers.bandits.glm import (Link, LOGISTIC, argmax_random_ties, fit_glm_mle, pad_rows,
                                   slot_sq_norms)
from jaxpapers.core import checks
from jaxpapers.core.pytree import dataclass

__all__ = ["BState", "batch_schedule", "batch_bound", "make_b_slateglincb"]


def batch_schedule(num_rounds: int) -> np.ndarray:
    """Cumulative batch ends (int, strictly increasing, last = T) of the B-GLinCB grid.

    >>> batch_schedule(10_000).tolist()
    [100, 200, 300, 1300, 4462, 10000]
    """
    num_rounds = checks.check_int("num_rounds", num_rounds, minimum=1)
    t = float(num_rounds)
    m = math.ceil(math.log(math.log(t))) + 1 if t > math.e else 1
    lengths = [math.sqrt(t), math.sqrt(t)] + [t ** (1 - 2.0 ** -i) for i in range(1, m + 1)]
    ends, total = [], 0
    for length in lengths:
        total += max(1, int(length))
        if total >= num_rounds:
            break
        ends.append(total)
    if len(ends) == len(lengths):  # grid shorter than T: the last batch runs to T
        ends[-1] = num_rounds
    else:
        ends.append(num_rounds)
    return np.asarray(ends, np.int64)


def batch_bound(num_rounds: int) -> int:
    """The stated O(log log T) count: 2 warm-up batches + ceil(ln ln T) + 1 (>= 1)."""
    t = float(num_rounds)
    return 2 + (math.ceil(math.log(math.log(t))) + 1 if t > math.e else 1)


@dataclass
class BState:
    """B-SlateGLinCB state.

    Attributes:
      theta: [N, d] estimate used by the current batch.
      h_inv: [N, d, d] per-slot inverse scaled design matrices of earlier batches.
      buf_x: [Tp, D] played slates.  buf_y: [Tp] rewards.  n: [] int32 rounds seen.
      batch: [] int32 index of the current batch (0-based).
      pending: [] bool, a batch just ended (refit due).
    """

    theta: jax.Array  # [N, d]
    h_inv: jax.Array  # [N, d, d]
    buf_x: jax.Array  # [Tp, D]
    buf_y: jax.Array  # [Tp]
    n: jax.Array  # [] int32
    batch: jax.Array  # [] int32
    pending: jax.Array  # [] bool


def make_b_slateglincb(*, num_slots: int, num_items: int, dim: int, num_rounds: int,
                       param_norm_ub: float, link: Link = LOGISTIC, lam: float = 1.0,
                       failure_level: float = 0.05, beta: float | None = None,
                       plus: bool = False, mle_iters: int = 10, dtype=jnp.float32) -> SlateAlgo:
    """B-SlateGLinCB (``plus=False``) or B-SlateGLinCB+ (``plus=True``), unbatched.

    Args:
      num_slots: N.  num_items: K.  dim: d.  num_rounds: T (static; fixes the grid).
      param_norm_ub: S (projection radius of the MLE).  link: GLM link.  lam: ridge lambda.
      failure_level: delta.  beta: confidence multiplier; default 4 sqrt(d log(T / delta))
        (the RS-GLinCB value, so both limited-adaptivity algorithms use the same width).
      plus: play the surviving item of largest UCB instead of largest width.
      mle_iters: Newton steps per refit.

    Returns:
      A :class:`SlateAlgo`; ``num_switches`` is the number of batches started so far.

    >>> algo = make_b_slateglincb(num_slots=2, num_items=3, dim=2, num_rounds=100,
    ...                           param_norm_ub=2.0)
    >>> int(algo.num_switches(algo.init(jax.random.key(0))))
    1
    """
    for name, v in (("num_slots", num_slots), ("num_items", num_items), ("dim", dim),
                    ("num_rounds", num_rounds)):
        checks.check_int(name, v, minimum=1)
    checks.check_range("param_norm_ub", param_norm_ub, low=0.0, low_open=True, scalar=True)
    n_s, d = num_slots, dim
    big = n_s * d
    if beta is None:
        beta = 4.0 * math.sqrt(d * math.log(max(num_rounds, 2) / failure_level))
    ends = jnp.asarray(batch_schedule(num_rounds), jnp.int32)
    t_pad = pad_rows(num_rounds)
    chunk = 256

    def init(key):
        del key
        return BState(theta=jnp.zeros((n_s, d), dtype),
                      h_inv=jnp.broadcast_to(jnp.eye(d, dtype=dtype) / lam, (n_s, d, d)),
                      buf_x=jnp.zeros((t_pad, big), dtype), buf_y=jnp.zeros((t_pad,), dtype),
                      n=jnp.zeros((), jnp.int32), batch=jnp.zeros((), jnp.int32),
                      pending=jnp.zeros((), bool))

    def select(state, key, contexts):
        k_r, k_a = jax.random.split(key)
        rand_items = jax.random.randint(k_r, (n_s,), 0, num_items).astype(jnp.int32)
        mean = jnp.einsum("nkd,nd->nk", contexts, state.theta)
        width = beta * jnp.sqrt(slot_sq_norms(contexts, state.h_inv))
        survive = mean + width >= jnp.max(mean - width, axis=1, keepdims=True)
        score = mean + width if plus else width
        items = argmax_random_ties(k_a, score, survive)
        return jnp.where(state.batch == 0, rand_items, items), state

    def observe(state, contexts, items, reward):
        x = jnp.take_along_axis(contexts, items[:, None, None], axis=1)[:, 0].reshape(-1)
        n = state.n + 1
        end = ends[jnp.minimum(state.batch, ends.shape[0] - 1)]
        return state.replace(buf_x=state.buf_x.at[state.n].set(x),
                             buf_y=state.buf_y.at[state.n].set(reward), n=n,
                             pending=(n == end) & (n < num_rounds))

    def refit(state):
        p = state.pending
        nv = jnp.where(p, state.n, 0)
        th = fit_glm_mle(link, state.buf_x, state.buf_y, nv, state.theta.reshape(-1), lam,
                         num_iters=mle_iters)
        nrm = jnp.linalg.norm(th)
        th = jnp.where(nrm > param_norm_ub, th * param_norm_ub / jnp.maximum(nrm, 1e-30), th)

        def body(c, h):
            xs = jax.lax.dynamic_slice_in_dim(state.buf_x, c * chunk, chunk, 0)
            w = link.dmean(xs @ th) * ((c * chunk + jnp.arange(chunk)) < nv)
            xs = xs.reshape(chunk, n_s, d)
            return h + jnp.einsum("t,tnd,tne->nde", w, xs, xs)

        h = jax.lax.fori_loop(0, (nv + chunk - 1) // chunk, body,
                              jnp.broadcast_to(lam * jnp.eye(d, dtype=dtype), (n_s, d, d)))
        return {"theta": jnp.where(p, th.reshape(n_s, d), state.theta),
                "h_inv": jnp.where(p, jnp.linalg.inv(h), state.h_inv),
                "batch": state.batch + p.astype(jnp.int32), "pending": jnp.zeros((), bool)}

    def get_fit(state):
        return {f: getattr(state, f) for f in ("theta", "h_inv", "batch", "pending")}

    def set_fit(state, fit):
        return state.replace(**fit)

    needs = lambda s: s.pending
    return SlateAlgo(init=init, select=select,
                     update=make_update(observe, refit, get_fit, set_fit, needs),
                     observe=observe, refit=refit, get_fit=get_fit, set_fit=set_fit,
                     needs_refit=needs,
                     num_switches=lambda s: s.batch + 1,
                     name="b_slateglincb_plus" if plus else "b_slateglincb")
