"""Distributional critics: TQC's truncated targets, the quantile Huber loss, Q from atoms.

Truncated quantile critics (Kuznetsov et al., 2020, eqs. 9-11): N critics each predict M
quantile atoms ``theta_{n,m}(s, a)`` at levels ``tau_m = (2m + 1) / (2M)``. The target pools the
N M atoms of the target critics at ``(s', a')``, sorts them, drops the ``k N`` largest and
shifts: ``y_i = r + gamma (1 - d) z_(i)``, i < N (M - k). CGPO uses the truncated mean as its Q
for weights and guidance (its page: "truncated-quantile aggregation"), so :func:`q_value` is the
mean of the same kept atoms.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxpapers.core import checks

__all__ = ["truncated_quantile_target", "quantile_huber_loss", "q_value", "quantile_levels"]


def _check_drop(drop_per_net, num_quantiles):
    drop = checks.check_int("drop_per_net", drop_per_net, minimum=0)
    if drop >= num_quantiles:
        raise ValueError(f"drop_per_net must be < the number of quantiles M={num_quantiles}, "
                         f"got {drop}")
    return drop


def quantile_levels(num_quantiles: int) -> jax.Array:
    """[M] quantile midpoints ``tau_m = (2m + 1) / (2M)``."""
    return (2.0 * jnp.arange(num_quantiles) + 1.0) / (2.0 * num_quantiles)


def truncated_quantile_target(next_quantiles: jax.Array, rewards: jax.Array, dones: jax.Array,
                              *, gamma: jax.typing.ArrayLike,
                              drop_per_net: int) -> jax.Array:
    """TQC's target atoms (Kuznetsov et al., 2020, eq. 10).

    Args:
      next_quantiles: [B, N, M] target critics' atoms at ``(s', a')`` (for SAC already minus
        ``alpha log pi(a'|s')``).
      rewards: [B]; dones: [B] terminal flags (bool or 0/1; truncation is not terminal).
      gamma: discount in [0, 1] (traceable).
      drop_per_net: k, atoms dropped per critic (static): the ``k N`` largest pooled atoms go.

    Returns:
      [B, N (M - k)] ascending targets ``r + gamma (1 - d) z_(i)``, gradient stopped.

    >>> import jax.numpy as jnp
    >>> z = jnp.array([[[3.0, 1.0], [2.0, 4.0]]])          # B=1, N=2, M=2
    >>> truncated_quantile_target(z, jnp.array([1.0]), jnp.array([0.0]), gamma=0.5,
    ...                           drop_per_net=1).tolist()
    [[1.5, 2.0]]
    """
    checks.check_ndim("next_quantiles", next_quantiles, 3, "[B, N, M]")
    b, n, m = next_quantiles.shape
    drop = _check_drop(drop_per_net, m)
    if jnp.shape(rewards) != (b,):
        raise ValueError(f"rewards must have shape [B] = ({b},), got {jnp.shape(rewards)}")
    if jnp.shape(dones) != (b,):
        raise ValueError(f"dones must have shape [B] = ({b},), got {jnp.shape(dones)}")
    checks.check_finite("rewards", rewards)
    checks.check_range("gamma", gamma, low=0.0, high=1.0, scalar=True)
    atoms = jnp.sort(next_quantiles.reshape(b, n * m), axis=-1)[:, :n * (m - drop)]
    notdone = 1.0 - jnp.asarray(dones, atoms.dtype)
    y = rewards[:, None] + gamma * notdone[:, None] * atoms
    return jax.lax.stop_gradient(y.astype(next_quantiles.dtype))


def quantile_huber_loss(pred: jax.Array, target: jax.Array, *, kappa: float = 1.0) -> jax.Array:
    """Quantile Huber loss (Dabney et al., 2018, eq. 10; TQC's eq. 11, no division by kappa).

    ``mean over b, n, m, k of |tau_m - 1[u < 0]| H_kappa(u)``, ``u = target_k - pred_{n,m}``,
    ``H(u) = u^2 / 2`` if ``|u| <= kappa`` else ``kappa (|u| - kappa / 2)``.

    Args:
      pred: [B, N, M] online atoms; target: [B, K] target atoms (gradient stopped here).
      kappa: Huber threshold > 0.

    Returns:
      [] loss.

    >>> import jax.numpy as jnp
    >>> float(quantile_huber_loss(jnp.zeros((1, 1, 1)), jnp.array([[2.0]])))  # tau=1/2, H=1.5
    0.75
    """
    checks.check_ndim("pred", pred, 3, "[B, N, M]")
    checks.check_ndim("target", target, 2, "[B, K]")
    if target.shape[0] != pred.shape[0]:
        raise ValueError(f"target must have B={pred.shape[0]} rows like pred, got "
                         f"{target.shape[0]}")
    checks.check_range("kappa", kappa, low=0.0, low_open=True, scalar=True)
    target = jax.lax.stop_gradient(target)
    u = target[:, None, None, :] - pred[..., None]  # [B, N, M, K]
    abs_u = jnp.abs(u)
    huber = jnp.where(abs_u <= kappa, 0.5 * u ** 2, kappa * (abs_u - 0.5 * kappa))
    tau = quantile_levels(pred.shape[-1]).astype(pred.dtype)[None, None, :, None]
    return jnp.mean(jnp.abs(tau - (u < 0).astype(pred.dtype)) * huber)


def q_value(quantiles: jax.Array, *, drop_per_net: int) -> jax.Array:
    """[..., N, M] atoms -> [...] mean of the pooled atoms without the ``k N`` largest."""
    n, m = quantiles.shape[-2:]
    drop = _check_drop(drop_per_net, m)
    atoms = jnp.sort(quantiles.reshape(quantiles.shape[:-2] + (n * m,)), axis=-1)
    return jnp.mean(atoms[..., :n * (m - drop)], axis=-1)
