"""Slate-GLM-TS (Thompson-sampling variant of Slate-GLM-OFU; authors' ``Slate_GLM_TS.py``).

Letters: N slots, K items per slot, d item dimension.

Same estimator and matrices as :mod:`slate_glm_ofu`; per slot a sample
theta~_i = theta_i + r_t V_i^{-1/2} xi_i, xi_i ~ N(0, I_d), then argmax_j <theta~_i, x_ij>.
(The authors' optional kappa-dependent warm-up for fixed arm sets is not used.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxpapers.bandits._types import SlateAlgo
from jaxpapers.bandits.glm import Link, LOGISTIC, argmax_random_ties
from jaxpapers.bandits.slate_glm_ofu import (OFUState, _validate, make_slate_glm_ofu,
                                             ofu_radius)

__all__ = ["make_slate_glm_ts"]


def make_slate_glm_ts(*, num_slots: int, num_items: int, dim: int, param_norm_ub: float,
                      link: Link = LOGISTIC, l2reg: float = 5.0, failure_level: float = 0.05,
                      dtype=jnp.float32) -> SlateAlgo:
    """Slate-GLM-TS as an ``init / select / update`` triple (arguments as Slate-GLM-OFU).

    >>> algo = make_slate_glm_ts(num_slots=2, num_items=3, dim=2, param_norm_ub=2.0)
    >>> items, _ = algo.select(algo.init(jax.random.key(0)), jax.random.key(1),
    ...                        jnp.ones((2, 3, 2)) / 2)
    >>> items.dtype
    dtype('int32')
    """
    _validate(num_slots, num_items, dim, param_norm_ub, l2reg, failure_level)
    ofu = make_slate_glm_ofu(num_slots=num_slots, num_items=num_items, dim=dim,
                             param_norm_ub=param_norm_ub, link=link, l2reg=l2reg,
                             failure_level=failure_level, dtype=dtype)

    def select(state: OFUState, key, contexts):
        k_xi, k_tie = jax.random.split(key)
        r = ofu_radius(state.t, state.cum_loss, l2reg=l2reg, param_norm_ub=param_norm_ub,
                       failure_level=failure_level)
        chol = jnp.linalg.cholesky(state.v_inv)  # [N, d, d], L L^T = V_i^{-1}
        xi = jax.random.normal(k_xi, state.theta.shape, state.theta.dtype)
        theta_s = state.theta + r * jnp.einsum("nde,ne->nd", chol, xi)
        scores = jnp.einsum("nkd,nd->nk", contexts, theta_s)
        return argmax_random_ties(k_tie, scores), state

    return ofu._replace(select=select, name="slate_glm_ts")
