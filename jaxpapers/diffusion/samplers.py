"""Few-step samplers: one step function per sampler, scanned with ``lax.scan``.

Every sampler follows the same loop. At step ``i`` with grid values from
:func:`jaxpapers.diffusion.schedules.discretize`:

1. ``out = denoise_fn(params, x, model_in[i])`` (the model sees the unscaled sample);
2. Q-Sched preconditioning: ``out <- m[i] * out``, ``x <- s[i] * x`` (all ones: plain sampler);
3. the sampler's update on the scaled values (``x_0`` and ``eps`` are read off ``out`` with the
   schedule's ``prediction``):

* ``ddim`` (VP, eta = 0): ``x' = sqrt(a') x_0 + sqrt(1 - a') eps`` (Song et al., 2021, eq. 12).
* ``ddpm`` (VP, ancestral; Ho et al., 2020, eqs. 6-7, as diffusers' ``DDPMScheduler`` with
  ``variance_type="fixed_small"``): ``x_0`` clipped to ``[-clip_sample, clip_sample]``
  (diffusers' ``clip_sample``; None = no clipping), optionally changed by ``guide`` (below), then
  with ``alpha = a / a'`` and ``beta = 1 - alpha``: ``x' = sqrt(a') beta / (1 - a) x_0 +
  sqrt(alpha) (1 - a') / (1 - a) x + sqrt(max(beta (1 - a') / (1 - a), 1e-20)) z`` (no noise
  after the last step). ``a'`` after the last step is the schedule's ``final_alpha_cumprod``: set
  it to 1 to match ``DDPMScheduler``, which always uses 1 there.
* ``lcm`` on VP (latent consistency models, diffusers' rule): boundary scalings
  ``c_skip = sd^2 / ((10 t)^2 + sd^2)``, ``c_out = 10 t / sqrt((10 t)^2 + sd^2)`` with sd = 0.5,
  ``d = c_out x_0 + c_skip x``; ``x' = sqrt(a') d + sqrt(1 - a') z`` except after the last step,
  where ``x' = d``.
* ``lcm`` on EDM / explicit sigmas (consistency multistep sampling, Song et al. 2023, Alg. 1):
  ``x' = x_0 + sigma' z`` (``sigma' = 0`` after the last step).
* ``tcd`` (VP; trajectory consistency distillation, the PCM/TCD stochastic step with gamma):
  ``s = floor((1 - gamma) t')``, ``x_s = sqrt(a_s) x_0 + sqrt(1 - a_s) eps``,
  ``x' = sqrt(a'/a_s) x_s + sqrt(1 - a'/a_s) z`` for gamma > 0 before the last step, else
  ``x' = x_s``.
* ``euler`` (EDM): ``d = (x - x_0) / sigma``, ``x' = x + (sigma' - sigma) d`` (EDM Alg. 1 without
  the Heun correction).
* ``euler_ancestral`` (EDM): ``sigma_up = sqrt(sigma'^2 (sigma^2 - sigma'^2) / sigma^2)``,
  ``sigma_down = sqrt(sigma'^2 - sigma_up^2)``, ``x' = x + (sigma_down - sigma) d + sigma_up z``.
* ``flow_euler`` (flow matching): ``x' = x + (t' - t) v``.

``z`` is standard normal noise, drawn from ``jax.random.split(key, steps)[i]`` with x's shape and
dtype (only by the stochastic samplers).

Guidance on x_0 (``ddpm`` only): with ``guide_steps = L > 0`` the first ``N - L`` steps run the
plain scan and the last ``L`` a second scan whose step replaces the clipped ``x_0`` by
``guide(x_0, x, model_in)`` before the posterior mean (CGPO's critic guidance in the final
denoising steps, issue 25). Splitting the scan keeps the guide's cost (e.g. a critic gradient) out
of the unguided steps, also under ``vmap``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxpapers.core import checks
from jaxpapers.diffusion._types import DenoiseFn, QSchedCoeffs
from jaxpapers.diffusion.schedules import (EDMSchedule, FlowSchedule, Grid, SigmaSchedule,
                                           VPSchedule, discretize, init_noise_sigma,
                                           validate_schedule)

__all__ = ["sample", "sample_trajectory", "SAMPLERS", "STOCHASTIC", "LCM_TIMESTEP_SCALING",
           "LCM_SIGMA_DATA", "DDPM_CLIP_SAMPLE", "check_coeffs"]

LCM_TIMESTEP_SCALING = 10.0  # diffusers LCMScheduler default
LCM_SIGMA_DATA = 0.5  # diffusers LCMScheduler default
DDPM_CLIP_SAMPLE = 1.0  # diffusers DDPMScheduler default (clip_sample=True, range 1.0)

_VP = (VPSchedule,)
_SIGMA = (EDMSchedule, SigmaSchedule)
SAMPLERS = {
    "ddim": _VP,
    "ddpm": _VP,
    "tcd": _VP,
    "lcm": _VP + _SIGMA,
    "euler": _SIGMA,
    "euler_ancestral": _SIGMA,
    "flow_euler": (FlowSchedule,),
}
STOCHASTIC = ("lcm", "tcd", "euler_ancestral", "ddpm")


def _vp_x0_eps(x, out, a, prediction):
    sa, s1a = jnp.sqrt(a), jnp.sqrt(1.0 - a)
    if prediction == "epsilon":
        return (x - s1a * out) / sa, out
    if prediction == "sample":
        return out, (x - sa * out) / s1a
    return sa * x - s1a * out, sa * out + s1a * x  # v_prediction


def _sigma_x0(x, out, sigma, prediction):
    return x - sigma * out if prediction == "epsilon" else out


def _ddim(schedule, x, out, g, z, last, gamma):
    x0, eps = _vp_x0_eps(x, out, g.level, schedule.prediction)
    return jnp.sqrt(g.level_next) * x0 + jnp.sqrt(1.0 - g.level_next) * eps


def _ddpm(schedule, x, out, g, z, last, gamma, *, clip, guide=None):
    x0, _ = _vp_x0_eps(x, out, g.level, schedule.prediction)
    if clip is not None:
        x0 = jnp.clip(x0, -clip, clip)
    if guide is not None:
        x0 = jnp.asarray(guide(x0, x, g.model_in), x.dtype)
    a, a_prev = g.level, g.level_next
    alpha = a / a_prev
    beta = 1.0 - alpha
    mean = (jnp.sqrt(a_prev) * beta / (1.0 - a)) * x0 + (jnp.sqrt(alpha) * (1.0 - a_prev)
                                                         / (1.0 - a)) * x
    std = jnp.sqrt(jnp.maximum(beta * (1.0 - a_prev) / (1.0 - a), 1e-20))
    return jnp.where(last, mean, mean + std * z)


def _lcm_vp(schedule, x, out, g, z, last, gamma):
    x0, _ = _vp_x0_eps(x, out, g.level, schedule.prediction)
    st = g.model_in * LCM_TIMESTEP_SCALING
    sd2 = LCM_SIGMA_DATA ** 2
    c_skip = sd2 / (st ** 2 + sd2)
    c_out = st / jnp.sqrt(st ** 2 + sd2)
    den = c_out * x0 + c_skip * x
    noised = jnp.sqrt(g.level_next) * den + jnp.sqrt(1.0 - g.level_next) * z
    return jnp.where(last, den, noised)


def _tcd(schedule, x, out, g, z, last, gamma):
    ac = schedule.alphas_cumprod
    x0, eps = _vp_x0_eps(x, out, g.level, schedule.prediction)
    t_s = jnp.floor((1.0 - gamma) * g.t_next).astype(jnp.int32)
    a_s = jnp.where(t_s >= 0, ac[jnp.maximum(t_s, 0)], schedule.final_alpha_cumprod)
    # diffusers' TCD: the "previous" timestep after the last step is 0, so a' = ac[0] there
    a_prev = ac[g.t_next.astype(jnp.int32)]
    x_s = jnp.sqrt(a_s) * x0 + jnp.sqrt(1.0 - a_s) * eps
    ratio = a_prev / a_s
    renoised = jnp.sqrt(ratio) * x_s + jnp.sqrt(jnp.maximum(1.0 - ratio, 0.0)) * z
    return jnp.where(jnp.logical_and(gamma > 0, jnp.logical_not(last)), renoised, x_s)


def _lcm_sigma(schedule, x, out, g, z, last, gamma):
    x0 = _sigma_x0(x, out, g.level, schedule.prediction)
    return x0 + g.level_next * z


def _euler(schedule, x, out, g, z, last, gamma):
    x0 = _sigma_x0(x, out, g.level, schedule.prediction)
    d = (x - x0) / g.level
    return x + (g.level_next - g.level) * d


def _euler_ancestral(schedule, x, out, g, z, last, gamma):
    x0 = _sigma_x0(x, out, g.level, schedule.prediction)
    d = (x - x0) / g.level
    s, sn = g.level, g.level_next
    s_up = jnp.sqrt(jnp.maximum(sn ** 2 * (s ** 2 - sn ** 2) / s ** 2, 0.0))
    s_down = jnp.sqrt(jnp.maximum(sn ** 2 - s_up ** 2, 0.0))
    return x + (s_down - s) * d + s_up * z


def _flow_euler(schedule, x, out, g, z, last, gamma):
    return x + (g.level_next - g.level) * out


def _step_fn(sampler, schedule, clip_sample=DDPM_CLIP_SAMPLE, guide=None):
    if sampler == "ddpm":
        return functools.partial(_ddpm, clip=clip_sample, guide=guide)
    if sampler == "lcm":
        return _lcm_vp if isinstance(schedule, VPSchedule) else _lcm_sigma
    return {"ddim": _ddim, "tcd": _tcd, "euler": _euler, "euler_ancestral": _euler_ancestral,
            "flow_euler": _flow_euler}[sampler]


def check_coeffs(coeffs, steps: int) -> QSchedCoeffs | None:
    """Validate ``coeffs`` (a :class:`QSchedCoeffs` or a ``{"m", "s"}`` dict) for ``steps``.

    Raises:
      ValueError: naming ``coeffs`` when a vector is missing or has the wrong length.
    """
    if coeffs is None:
        return None
    if isinstance(coeffs, dict):
        if set(coeffs) != {"m", "s"}:
            raise ValueError(f"coeffs must have exactly the keys 'm' and 's', got {sorted(coeffs)}")
        coeffs = QSchedCoeffs(m=coeffs["m"], s=coeffs["s"])
    if not isinstance(coeffs, QSchedCoeffs):
        raise ValueError(f"coeffs must be QSchedCoeffs or a dict {{m, s}}, got "
                         f"{type(coeffs).__name__}")
    for name in ("m", "s"):
        v = getattr(coeffs, name)
        if jnp.shape(v) != (steps,):
            raise ValueError(f"coeffs.{name} must have shape (steps,) = ({steps},), got "
                             f"{jnp.shape(v)}")
    return coeffs


def _scan(denoise_fn: DenoiseFn, params, key: jax.Array, x_T: jax.Array, *, schedule,
          sampler: str, steps: int, coeffs, gamma, keep: bool, clip_sample=DDPM_CLIP_SAMPLE,
          guide=None, guide_steps: int = 0):
    """The sampler loop shared by :func:`sample` and :func:`sample_trajectory`.

    Returns ``(x_start, x_final, xs)``: the scaled prior sample the scan starts from, its final
    carry and, when ``keep``, the [N, ...] stacked carries after every step (else None). One scan
    body for both public functions, so the trajectory's last row is ``sample``'s result.
    """
    checks.check_choice("sampler", sampler, sorted(SAMPLERS))
    validate_schedule(schedule, steps)
    if not isinstance(schedule, SAMPLERS[sampler]):
        raise ValueError(f"sampler {sampler!r} needs a schedule of type "
                         f"{[k.__name__ for k in SAMPLERS[sampler]]}, got "
                         f"{type(schedule).__name__}")
    coeffs = check_coeffs(coeffs, steps)
    guide_steps = checks.check_int("guide_steps", guide_steps, minimum=0)
    if guide_steps > steps:
        raise ValueError(f"guide_steps must be <= steps={steps}, got {guide_steps}")
    if guide_steps and guide is None:
        raise ValueError("guide_steps > 0 needs a guide callable, got guide=None")
    if guide_steps and sampler != "ddpm":
        raise ValueError(f"guide (x_0 guidance) is implemented for sampler 'ddpm' only, got "
                         f"{sampler!r}")
    if clip_sample is not None and not float(clip_sample) > 0:
        raise ValueError(f"clip_sample must be > 0 or None, got {clip_sample}")
    x_T = jnp.asarray(x_T)
    if not jnp.issubdtype(x_T.dtype, jnp.floating):
        raise ValueError(f"x_T must be a floating array, got dtype {x_T.dtype}")
    dtype = x_T.dtype
    grid = discretize(schedule, steps)
    grid = Grid(*(jnp.asarray(v, dtype) for v in grid))
    if coeffs is None:
        m = s = jnp.ones((steps,), dtype)
    else:
        m, s = jnp.asarray(coeffs.m, dtype), jnp.asarray(coeffs.s, dtype)
    stochastic = sampler in STOCHASTIC
    keys = jax.random.split(key, steps)
    last = jnp.asarray(np.arange(steps) == steps - 1)
    gamma = jnp.asarray(gamma, dtype)

    def make_body(step):
        def body(x, inp):
            g, mi, si, k, is_last = inp
            out = denoise_fn(params, x, g.model_in)
            z = jax.random.normal(k, x.shape, dtype) if stochastic else jnp.zeros((), dtype)
            x_new = step(schedule, si * x, mi * jnp.asarray(out, dtype), g, z, is_last, gamma)
            x_new = x_new.astype(dtype)
            return x_new, (x_new if keep else None)
        return body

    x0 = x_T * init_noise_sigma(schedule).astype(dtype)
    xs_in = (grid, m, s, keys, last)
    plain = make_body(_step_fn(sampler, schedule, clip_sample))
    if not guide_steps:
        x_final, xs = lax.scan(plain, x0, xs_in)
        return x0, x_final, xs
    cut = steps - guide_steps
    head = jax.tree.map(lambda v: v[:cut], xs_in)
    tail = jax.tree.map(lambda v: v[cut:], xs_in)
    x_mid, xs_a = lax.scan(plain, x0, head) if cut else (x0, None)
    x_final, xs_b = lax.scan(make_body(_step_fn(sampler, schedule, clip_sample, guide)), x_mid,
                             tail)
    xs = None
    if keep:
        xs = xs_b if xs_a is None else jnp.concatenate([xs_a, xs_b], axis=0)
    return x0, x_final, xs


def sample(denoise_fn: DenoiseFn, params, key: jax.Array, x_T: jax.Array, *, schedule,
           sampler: str, steps: int, coeffs: QSchedCoeffs | dict | None = None,
           gamma: jax.typing.ArrayLike = 0.3, clip_sample: float | None = DDPM_CLIP_SAMPLE,
           guide=None, guide_steps: int = 0) -> jax.Array:
    """Run a few-step sampler from standard-normal noise ``x_T``.

    Unbatched in spirit: ``x_T`` may be one example or a batch, as long as ``denoise_fn`` takes
    it; all updates are elementwise. vmap over keys / noise / coefficients at the call site.

    Args:
      denoise_fn: ``denoise_fn(params, x, noise_level) -> out`` (see ``DenoiseFn``).
      params: pytree passed to ``denoise_fn`` unchanged (float or quantized weights, conditioning).
      key: consumed; split into one key per step for the stochastic samplers.
      x_T: [...] standard-normal noise; multiplied by the prior's scale (sigma_max for EDM).
      schedule: a schedule pytree (:mod:`jaxpapers.diffusion.schedules`).
      sampler: one of ``SAMPLERS`` (static), compatible with the schedule's family.
      steps: number of model evaluations N (static, >= 1).
      coeffs: Q-Sched coefficients ``{m: [N], s: [N]}``; None = all ones (the plain sampler).
      gamma: TCD's stochasticity (traceable; used only by ``tcd``).
      clip_sample: ``ddpm`` only (static): x_0 is clipped to ``[-clip_sample, clip_sample]``
        (diffusers' default 1.0); None turns clipping off.
      guide: ``ddpm`` only: ``guide(x_0, x, model_in) -> x_0'`` applied to the clipped x_0 in
        the last ``guide_steps`` steps (see the module docstring); traced values it closes over
        (a critic, a scale) may vary between calls.
      guide_steps: L, number of final steps that use ``guide`` (static, 0 <= L <= steps).

    Returns:
      The final sample, x_T's shape and dtype.

    Raises:
      ValueError: unknown sampler, sampler/schedule mismatch, ``steps < 1``, malformed schedule
        (e.g. non-finite or negative sigmas) or coefficient vectors of the wrong length.
      TypeError: ``steps`` is not an int (bools included).

    >>> import jax, jax.numpy as jnp
    >>> sch = EDMSchedule(jnp.float32(0.002), jnp.float32(80.0), jnp.float32(7.0))
    >>> den = lambda p, x, sigma: x / jnp.sqrt(sigma ** 2 + 1.0)   # eps-prediction for N(0, 1) data
    >>> x = sample(den, None, jax.random.key(0), jnp.ones(3), schedule=sch, sampler="euler",
    ...            steps=4)
    >>> x.shape
    (3,)
    """
    _, x_final, _ = _scan(denoise_fn, params, key, x_T, schedule=schedule, sampler=sampler,
                          steps=steps, coeffs=coeffs, gamma=gamma, keep=False,
                          clip_sample=clip_sample, guide=guide, guide_steps=guide_steps)
    return x_final


def sample_trajectory(denoise_fn: DenoiseFn, params, key: jax.Array, x_T: jax.Array, *,
                      schedule, sampler: str, steps: int,
                      coeffs: QSchedCoeffs | dict | None = None,
                      gamma: jax.typing.ArrayLike = 0.3,
                      clip_sample: float | None = DDPM_CLIP_SAMPLE, guide=None,
                      guide_steps: int = 0) -> jax.Array:
    """Run :func:`sample` and keep every boundary ``x_0, ..., x_N`` of the path.

    Same arguments and the same scan body as :func:`sample` (TDM-R1 step 1 keeps the rollout's
    boundaries; issue 24). Row 0 is ``x_T`` times the prior's scale (sigma_max for EDM,
    ``sigmas[0]`` for an explicit grid, 1 for VP / flow): the value the scan starts from. Row
    ``i`` is the sample after step ``i``; the last row is ``sample(...)``'s result.

    Returns:
      [N + 1, *x_T.shape] array of x_T's dtype.

    Raises:
      As :func:`sample` (e.g. ``ValueError`` naming ``sigmas`` for a grid that is not
      non-increasing).

    >>> import jax, jax.numpy as jnp
    >>> sch = SigmaSchedule(jnp.array([2.0, 1.0, 0.0]), prediction="sample")
    >>> den = lambda p, x, sigma: x / (1.0 + sigma ** 2)   # x_0-prediction for N(0, 1) data
    >>> path = sample_trajectory(den, None, jax.random.key(0), jnp.ones(2), schedule=sch,
    ...                          sampler="euler", steps=2)
    >>> path.shape, [round(float(v), 4) for v in path[:, 0]]
    ((3, 2), [2.0, 1.2, 0.6])
    """
    x0, _, xs = _scan(denoise_fn, params, key, x_T, schedule=schedule, sampler=sampler,
                      steps=steps, coeffs=coeffs, gamma=gamma, keep=True,
                      clip_sample=clip_sample, guide=guide, guide_steps=guide_steps)
    return jnp.concatenate([x0[None], xs], axis=0)
