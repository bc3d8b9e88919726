"""Noise schedules and parameterisations as pytrees, and their few-step discretisations.

Three families, each a frozen pytree whose float fields may be traced (swept, vmapped,
differentiated) and whose Python fields (``prediction``, spacing) are static:

* :class:`VPSchedule`: discrete-time DDPM, ``x_t = sqrt(a_t) x_0 + sqrt(1 - a_t) eps`` with
  ``a_t = alphas_cumprod[t]``; the model input is the timestep ``t``.
* :class:`EDMSchedule`: Karras et al. (2022) sigmas, ``x = x_0 + sigma eps``; the model input is
  sigma. :func:`edm_preconditioning` gives ``c_skip, c_out, c_in, c_noise`` (EDM Table 1) and
  :func:`consistency_preconditioning` the boundary-respecting variant of consistency models.
* :class:`FlowSchedule`: rectified flow, ``x_t = (1 - t) x_0 + t eps``, velocity ``eps - x_0``.

:class:`SigmaSchedule` holds an explicit decreasing sigma grid (EDM convention), e.g. to match
another library's sigmas exactly.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxpapers.core import checks, pytree

__all__ = ["VPSchedule", "EDMSchedule", "FlowSchedule", "SigmaSchedule", "Grid",
           "ddpm_alphas_cumprod", "vp_sde_alphas_cumprod", "karras_sigmas",
           "edm_preconditioning", "consistency_preconditioning", "discretize",
           "init_noise_sigma", "validate_schedule", "PREDICTIONS"]

PREDICTIONS = ("epsilon", "sample", "v_prediction")


def _fdtype():
    """float64 when x64 is enabled, else float32 (so float64 tests run in float64 throughout)."""
    return jnp.result_type(float)


@pytree.dataclass
class VPSchedule:
    """Discrete-time variance-preserving (DDPM) schedule.

    Attributes:
      alphas_cumprod: [T] cumulative products of ``1 - beta`` (T training timesteps).
      final_alpha_cumprod: [] alpha used after the last step (1.0 = diffusers'
        ``set_alpha_to_one``).
      prediction: static; what the model predicts: "epsilon", "sample" (x_0) or "v_prediction".
      spacing: static; "leading" (``arange(0, N) * T // N`` reversed) or "trailing"
        (``round(arange(T, 0, -T / N)) - 1``), as in diffusers.
    """

    alphas_cumprod: jax.Array  # [T]
    final_alpha_cumprod: jax.Array  # []
    prediction: str = pytree.static_field(default="epsilon")
    spacing: str = pytree.static_field(default="trailing")


@pytree.dataclass
class EDMSchedule:
    """Karras (EDM) schedule in sigma space, ``x = x_0 + sigma * eps``.

    Attributes:
      sigma_min: [] smallest sigma of the grid (> 0).
      sigma_max: [] largest sigma (the prior's scale).
      rho: [] Karras' warping exponent (7 in EDM).
      prediction: static; "epsilon" (``x_0 = x - sigma * out``) or "sample" (``x_0 = out``).
    """

    sigma_min: jax.Array  # []
    sigma_max: jax.Array  # []
    rho: jax.Array  # []
    prediction: str = pytree.static_field(default="epsilon")


@pytree.dataclass
class SigmaSchedule:
    """An explicit sigma grid (EDM convention), N steps.

    Attributes:
      sigmas: [N + 1] non-negative, non-increasing sigmas; usually the last is 0.
      prediction: static; "epsilon" or "sample".
    """

    sigmas: jax.Array  # [N + 1]
    prediction: str = pytree.static_field(default="epsilon")


@pytree.dataclass
class FlowSchedule:
    """Rectified-flow schedule ``x_t = (1 - t) x_0 + t eps``; the model predicts ``eps - x_0``.

    Attributes:
      shift: [] time shift ``t -> shift t / (1 + (shift - 1) t)`` (1 = uniform grid).
    """

    shift: jax.Array  # []
    prediction: str = pytree.static_field(default="v_prediction")


class Grid(NamedTuple):
    """A discretisation of a schedule into N steps (all arrays [N]).

    ``model_in`` is what ``denoise_fn`` receives. VP: ``level`` = alpha_cumprod at the step's
    timestep, ``level_next`` = the next timestep's alpha_cumprod (final alpha after the last),
    ``t_next`` = the next timestep (0 after the last, as in diffusers' TCD). EDM/flow/sigma:
    ``level`` = sigma, ``level_next`` = the next sigma (0 after the last), ``t_next`` unused.
    """

    model_in: jax.Array  # [N]
    level: jax.Array  # [N]
    level_next: jax.Array  # [N]
    t_next: jax.Array  # [N]


def ddpm_alphas_cumprod(num_train_timesteps: int = 1000, beta_start: float = 0.00085,
                        beta_end: float = 0.012, kind: str = "scaled_linear") -> jax.Array:
    """[T] ``cumprod(1 - beta)`` for "linear" or "scaled_linear" (Stable Diffusion) betas.

    >>> a = ddpm_alphas_cumprod(1000)
    >>> a.shape, bool(a[0] > a[-1])
    ((1000,), True)
    """
    if kind == "linear":
        betas = np.linspace(beta_start, beta_end, num_train_timesteps, dtype=np.float64)
    elif kind == "scaled_linear":
        betas = np.linspace(beta_start ** 0.5, beta_end ** 0.5, num_train_timesteps,
                            dtype=np.float64) ** 2
    else:
        raise ValueError(f"kind must be 'linear' or 'scaled_linear', got {kind!r}")
    return jnp.asarray(np.cumprod(1.0 - betas), _fdtype())


def vp_sde_alphas_cumprod(num_steps: int, beta_min: float = 0.1,
                          beta_max: float = 10.0) -> jax.Array:
    """[T] ``cumprod(alpha_t)`` of the discretised VP SDE with linear beta(s) on [0, 1].

    ``alpha_t = exp(-beta_min / T - (beta_max - beta_min) (2 t - 1) / (2 T^2))`` for
    t = 1..T: the exact decay of the VP SDE over ``[(t - 1) / T, t / T]`` (Song et al., 2021,
    eq. 11), the schedule of the DACER / QVPO diffusion policies (T = 20, 0.1, 10; issue 25).
    Computed in float64, returned in the default float dtype.

    >>> a = vp_sde_alphas_cumprod(20)
    >>> a.shape, round(float(a[-1]), 5)
    ((20,), 0.00641)
    """
    num_steps = checks.check_int("num_steps", num_steps, minimum=1)
    if not (0 <= beta_min < beta_max and np.isfinite(beta_max)):
        raise ValueError(f"need 0 <= beta_min < beta_max < inf, got beta_min={beta_min}, "
                         f"beta_max={beta_max}")
    t = np.arange(1, num_steps + 1, dtype=np.float64)
    log_alpha = -beta_min / num_steps - (beta_max - beta_min) * (2 * t - 1) / (2 * num_steps ** 2)
    return jnp.asarray(np.exp(np.cumsum(log_alpha)), _fdtype())


def karras_sigmas(steps: int, sigma_min: ArrayLike, sigma_max: ArrayLike,
                  rho: ArrayLike = 7.0) -> jax.Array:
    """[steps + 1] Karras sigmas, ``(smax^(1/rho) + i/(N-1) (smin^(1/rho) - smax^(1/rho)))^rho``; 0.

    EDM eq. (5). With ``steps == 1`` the grid is ``[sigma_max, 0]``.

    >>> s = karras_sigmas(4, 0.002, 80.0)
    >>> [round(float(v), 3) for v in s]
    [80.0, 9.723, 0.47, 0.002, 0.0]
    """
    sigma_min = jnp.asarray(sigma_min, _fdtype())
    sigma_max = jnp.asarray(sigma_max, _fdtype())
    ramp = jnp.linspace(0.0, 1.0, steps, dtype=_fdtype()) if steps > 1 else \
        jnp.zeros((1,), _fdtype())
    lo, hi = sigma_min ** (1.0 / rho), sigma_max ** (1.0 / rho)
    sig = (hi + ramp * (lo - hi)) ** rho
    return jnp.concatenate([sig, jnp.zeros((1,), sig.dtype)])


def edm_preconditioning(sigma: ArrayLike, sigma_data: ArrayLike = 0.5):
    """EDM Table 1: ``(c_skip, c_out, c_in, c_noise)``; ``D = c_skip x + c_out F(c_in x, c_noise)``.

    >>> c_skip, c_out, c_in, c_noise = edm_preconditioning(0.5, 0.5)
    >>> round(float(c_skip), 3), round(float(c_out), 3)
    (0.5, 0.354)
    """
    sigma = jnp.asarray(sigma, _fdtype())
    sd2 = jnp.asarray(sigma_data, _fdtype()) ** 2
    c_skip = sd2 / (sigma ** 2 + sd2)
    c_out = sigma * jnp.sqrt(sd2) / jnp.sqrt(sigma ** 2 + sd2)
    c_in = 1.0 / jnp.sqrt(sigma ** 2 + sd2)
    c_noise = jnp.log(sigma) / 4.0
    return c_skip, c_out, c_in, c_noise


def consistency_preconditioning(sigma: ArrayLike, sigma_data: ArrayLike = 0.5,
                                sigma_min: ArrayLike = 0.002):
    """Consistency-model preconditioning: ``c_skip(sigma_min) = 1`` and ``c_out(sigma_min) = 0``.

    Song et al. (2023), App. C: ``c_skip = sd^2 / ((sigma - smin)^2 + sd^2)``,
    ``c_out = (sigma - smin) sd / sqrt(sigma^2 + sd^2)``; ``c_in``, ``c_noise`` as EDM.

    >>> c_skip, c_out, _, _ = consistency_preconditioning(0.002)
    >>> float(c_skip), float(c_out)
    (1.0, 0.0)
    """
    sigma = jnp.asarray(sigma, _fdtype())
    sd2 = jnp.asarray(sigma_data, _fdtype()) ** 2
    d = sigma - sigma_min
    c_skip = sd2 / (d ** 2 + sd2)
    c_out = d * jnp.sqrt(sd2) / jnp.sqrt(sigma ** 2 + sd2)
    c_in = 1.0 / jnp.sqrt(sigma ** 2 + sd2)
    c_noise = jnp.log(sigma) / 4.0
    return c_skip, c_out, c_in, c_noise


def _vp_timesteps(num_train: int, steps: int, spacing: str) -> np.ndarray:
    if spacing == "leading":
        return (np.arange(0, steps) * (num_train // steps))[::-1].astype(np.int64)
    if spacing == "trailing":
        return (np.round(np.arange(num_train, 0, -num_train / steps)) - 1).astype(np.int64)
    raise ValueError(f"schedule.spacing must be 'leading' or 'trailing', got {spacing!r}")


def validate_schedule(schedule, steps: int) -> None:
    """Raise naming the argument for a malformed schedule (values checked when concrete).

    Raises:
      TypeError: ``steps`` is not an int (bools included).
      ValueError: ``steps < 1``, an unknown schedule or prediction, or out-of-range values.
    """
    steps = checks.check_int("steps", steps, minimum=1)
    kinds = (VPSchedule, EDMSchedule, FlowSchedule, SigmaSchedule)
    if not isinstance(schedule, kinds):
        raise ValueError(f"schedule must be one of {[k.__name__ for k in kinds]}, got "
                         f"{type(schedule).__name__}")
    allowed = ("epsilon", "sample") if isinstance(schedule, (EDMSchedule, SigmaSchedule)) else \
        ("v_prediction",) if isinstance(schedule, FlowSchedule) else PREDICTIONS
    checks.check_choice(f"schedule.prediction (for {type(schedule).__name__})",
                        schedule.prediction, allowed)
    if isinstance(schedule, VPSchedule):
        if schedule.alphas_cumprod.ndim != 1:
            raise ValueError(f"schedule.alphas_cumprod must be 1-D [T], got shape "
                             f"{schedule.alphas_cumprod.shape}")
        if steps > schedule.alphas_cumprod.shape[0]:
            raise ValueError(f"steps must be <= T={schedule.alphas_cumprod.shape[0]}, got {steps}")
        checks.check_range("schedule.alphas_cumprod", schedule.alphas_cumprod, low=0.0,
                           low_open=True, high=1.0)
        _vp_timesteps(schedule.alphas_cumprod.shape[0], steps, schedule.spacing)
    elif isinstance(schedule, EDMSchedule):
        checks.check_range("schedule.sigma_min", schedule.sigma_min, low=0.0, low_open=True)
        checks.check_range("schedule.sigma_max", schedule.sigma_max, low=0.0, low_open=True)
        lo, hi = checks.concrete(schedule.sigma_min), checks.concrete(schedule.sigma_max)
        if lo is not None and hi is not None and np.any(hi < lo):
            raise ValueError(f"sigmas must satisfy sigma_min <= sigma_max, got "
                             f"sigma_min={lo}, sigma_max={hi}")
    elif isinstance(schedule, SigmaSchedule):
        if schedule.sigmas.shape != (steps + 1,):
            raise ValueError(f"sigmas must have shape (steps + 1,) = ({steps + 1},), got "
                             f"{schedule.sigmas.shape}")
        checks.check_range("schedule.sigmas", schedule.sigmas, low=0.0)
        s = checks.concrete(schedule.sigmas)
        if s is not None and (np.any(np.diff(s) > 0) or s[0] <= 0):
            raise ValueError(f"sigmas must be non-increasing from a positive value, got {s}")
    else:  # FlowSchedule
        checks.check_range("schedule.shift", schedule.shift, low=0.0, low_open=True)


def discretize(schedule, steps: int) -> Grid:
    """The N-step :class:`Grid` of a schedule (differentiable in its float fields).

    >>> g = discretize(EDMSchedule(jnp.float32(0.002), jnp.float32(80.0), jnp.float32(7.0)), 2)
    >>> [round(float(v), 3) for v in g.level], [round(float(v), 3) for v in g.level_next]
    ([80.0, 0.002], [0.002, 0.0])
    """
    validate_schedule(schedule, steps)
    if isinstance(schedule, VPSchedule):
        ac = schedule.alphas_cumprod
        ts = _vp_timesteps(ac.shape[0], steps, schedule.spacing)
        nxt = np.concatenate([ts[1:], [-1]])
        level_next = jnp.where(jnp.asarray(nxt) >= 0, ac[np.maximum(nxt, 0)],
                               schedule.final_alpha_cumprod)
        t_next = np.concatenate([ts[1:], [0]])
        return Grid(jnp.asarray(ts, ac.dtype), ac[ts], level_next.astype(ac.dtype),
                    jnp.asarray(t_next, ac.dtype))
    if isinstance(schedule, EDMSchedule):
        sig = karras_sigmas(steps, schedule.sigma_min, schedule.sigma_max, schedule.rho)
    elif isinstance(schedule, SigmaSchedule):
        sig = jnp.asarray(schedule.sigmas, _fdtype())
    else:
        t = jnp.linspace(1.0, 0.0, steps + 1, dtype=_fdtype())[:-1]
        t = schedule.shift * t / (1.0 + (schedule.shift - 1.0) * t)
        sig = jnp.concatenate([t, jnp.zeros((1,), t.dtype)])
    return Grid(sig[:-1], sig[:-1], sig[1:], jnp.zeros((steps,), sig.dtype))


def init_noise_sigma(schedule) -> jax.Array:
    """Scale of the prior: sigma_max (EDM), sigmas[0] (explicit grid), 1 (VP, flow)."""
    if isinstance(schedule, EDMSchedule):
        return jnp.asarray(schedule.sigma_max, _fdtype())
    if isinstance(schedule, SigmaSchedule):
        return jnp.asarray(schedule.sigmas[0], _fdtype())
    return jnp.ones((), _fdtype())
