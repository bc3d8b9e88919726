"""Q-Sched: scheduler-level post-training quantization with the JAQ loss.

The quantized weights stay fixed; the few-step sampler gets per-step coefficients
``{m: [N], s: [N]}`` (see :class:`QSchedCoeffs`) that scale the model output and the sample inside
each step. The paper's family is a linear ramp from ``(m0, s0)`` to 1 over the steps
(:func:`ramp_coeffs`), chosen by maximising the reference-free Joint Alignment-Quality score

    JAQ = mean(alignment) + k * mean(quality)

on a few calibration prompts (:func:`jaq_score`). Two calibrations are provided:

* :func:`calibrate_grid`: the official procedure, a grid over ``(m0, s0)`` evaluated as one
  vmapped, compiled call; the argmax wins.
* :func:`calibrate_gradient`: projected gradient ascent on JAQ with optax, over the ramp's
  ``(m0, s0)`` or over unconstrained per-step vectors, projected onto a box (or not at all).

Both receive only the quantized parameters: the signature has no slot for a full-precision
model, and by default a parameter pytree without any ``QuantizedArray`` is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxpapers import quant
from jaxpapers.core import checks, pytree
from jaxpapers.diffusion._types import QSchedCoeffs, ScoreFn
from jaxpapers.diffusion.samplers import check_coeffs, sample

__all__ = ["ones_coeffs", "ramp_coeffs", "jaq_score", "CalibrationProblem", "jaq_objective",
           "GridCalibration", "calibrate_grid", "GradientCalibration", "calibrate_gradient"]


def ones_coeffs(steps: int, dtype=jnp.float32) -> QSchedCoeffs:
    """All-ones coefficients: the plain sampler.

    >>> ones_coeffs(3).m.tolist()
    [1.0, 1.0, 1.0]
    """
    steps = checks.check_int("steps", steps, minimum=1)
    return QSchedCoeffs(m=jnp.ones((steps,), dtype), s=jnp.ones((steps,), dtype))


def ramp_coeffs(m0: jax.typing.ArrayLike, s0: jax.typing.ArrayLike, steps: int) -> QSchedCoeffs:
    """The ramp family: ``m = linspace(m0, 1, N)``, ``s = linspace(s0, 1, N)``; traceable in m0, s0.

    With N = 1 the single coefficient is the start value (as ``linspace`` gives).

    >>> c = ramp_coeffs(0.8, 1.2, 3)
    >>> [round(float(v), 3) for v in c.m], [round(float(v), 3) for v in c.s]
    ([0.8, 0.9, 1.0], [1.2, 1.1, 1.0])
    """
    steps = checks.check_int("steps", steps, minimum=1)
    frac = jnp.linspace(0.0, 1.0, steps) if steps > 1 else jnp.zeros((1,))
    m0 = jnp.asarray(m0, jnp.float32)
    s0 = jnp.asarray(s0, jnp.float32)
    return QSchedCoeffs(m=m0 + (1.0 - m0) * frac, s=s0 + (1.0 - s0) * frac)


def jaq_score(images: jax.Array, prompts: jax.Array, *, align_fn: ScoreFn,
              quality_fn: Callable[[jax.Array], jax.Array], k: jax.typing.ArrayLike):
    """JAQ = mean alignment + k * mean quality over a batch; higher is better.

    Args:
      images: [B, ...] generated samples.
      prompts: [B] the conditioning each sample was generated with.
      align_fn: pure ``(images, prompts) -> [B]`` alignment scores.
      quality_fn: pure ``images -> [B]`` reference-free quality scores.
      k: weight of the quality term (traceable).

    Returns:
      ``(jaq, alignment, quality)``: three scalars (batch means).

    >>> import jax.numpy as jnp
    >>> j, a, q = jaq_score(jnp.ones((2, 3)), jnp.zeros(2, int), align_fn=lambda x, y: -x.sum(1),
    ...                     quality_fn=lambda x: x.mean(1), k=2.0)
    >>> float(j), float(a), float(q)
    (-1.0, -3.0, 1.0)
    """
    a = jnp.mean(align_fn(images, prompts))
    q = jnp.mean(quality_fn(images))
    return a + k * q, a, q


@pytree.dataclass
class CalibrationProblem:
    """What calibration samples and how it scores: data leaves plus static callables.

    ``denoise_fn(weights, x, noise_level, prompts)`` is the conditional model on a batch; the
    sampler is run on ``noise`` [P, ...] with ``prompts`` [P] and the fixed ``key``.

    Attributes:
      prompts: [P] calibration prompts (class labels here).
      noise: [P, ...] fixed standard-normal starting noise.
      key: the fixed sampling key (stochastic samplers).
      k: [] weight of the quality term in JAQ.
      denoise_fn, align_fn, quality_fn, schedule, sampler, steps: static.
    """

    prompts: jax.Array  # [P]
    noise: jax.Array  # [P, ...]
    key: jax.Array
    k: jax.Array  # []
    schedule: Any
    denoise_fn: Callable = pytree.static_field()
    align_fn: Callable = pytree.static_field()
    quality_fn: Callable = pytree.static_field()
    sampler: str = pytree.static_field()
    steps: int = pytree.static_field()


def _generate(weights, coeffs: QSchedCoeffs, problem: CalibrationProblem) -> jax.Array:
    den = problem.denoise_fn
    return sample(lambda p, x, t: den(p[0], x, t, p[1]), (weights, problem.prompts), problem.key,
                  problem.noise, schedule=problem.schedule, sampler=problem.sampler,
                  steps=problem.steps, coeffs=coeffs)


def jaq_objective(weights, coeffs: QSchedCoeffs, problem: CalibrationProblem):
    """``(jaq, alignment, quality)`` of the samples generated with ``coeffs`` (differentiable)."""
    x = _generate(weights, coeffs, problem)
    return jaq_score(x, problem.prompts, align_fn=problem.align_fn,
                     quality_fn=problem.quality_fn, k=problem.k)


def _check_quantized(quant_params, allow_float: bool) -> None:
    if allow_float:
        return
    leaves = jax.tree.leaves(quant_params, is_leaf=lambda x: isinstance(x, quant.QuantizedArray))
    if not any(isinstance(x, quant.QuantizedArray) for x in leaves):
        raise ValueError("quant_params holds no QuantizedArray: calibration must see only the "
                         "quantized model (pass allow_float=True for the full-precision control)")


@pytree.dataclass
class GridCalibration:
    """Result of :func:`calibrate_grid`. G = number of grid points.

    Attributes:
      m0, s0: [G] ramp start values of each grid point.
      jaq, alignment, quality: [G] scores of each grid point.
      best: the ramp coefficients of the argmax.
      best_index: [] index of the argmax.
    """

    m0: jax.Array  # [G]
    s0: jax.Array  # [G]
    jaq: jax.Array  # [G]
    alignment: jax.Array  # [G]
    quality: jax.Array  # [G]
    best: QSchedCoeffs
    best_index: jax.Array  # []


def _grid_scores(weights, m0, s0, problem, batch_size):
    def one(ms):
        return jaq_objective(weights, ramp_coeffs(ms[0], ms[1], problem.steps), problem)

    ms = jnp.stack([m0, s0], axis=1)
    if batch_size is None:
        return jax.vmap(one)(ms)
    # vmapped chunks of batch_size: bounded memory, still one compilation
    return jax.lax.map(one, ms, batch_size=batch_size)


_grid_scores_jit = jax.jit(_grid_scores, static_argnames=("batch_size",))


def calibrate_grid(quant_params, problem: CalibrationProblem, *, m_values: jax.Array,
                   s_values: jax.Array, batch_size: int | None = None,
                   allow_float: bool = False) -> GridCalibration:
    """Grid search over the ramp starts ``(m0, s0)``; one compiled, vmapped call (official method).

    Args:
      quant_params: the quantized weights (the only model this function sees).
      problem: prompts, noise, scorers, sampler (see :class:`CalibrationProblem`).
      m_values: [Gm] candidate ``m0``. s_values: [Gs] candidate ``s0``; G = Gm * Gs.
      batch_size: evaluate the grid in vmapped chunks of this many points (None: all at once).
      allow_float: accept weights without any ``QuantizedArray`` (the FP control).

    Returns:
      :class:`GridCalibration` with the scores of every grid point and the argmax.
    """
    _check_quantized(quant_params, allow_float)
    m_values, s_values = jnp.asarray(m_values, jnp.float32), jnp.asarray(s_values, jnp.float32)
    if m_values.ndim != 1 or s_values.ndim != 1 or m_values.size == 0 or s_values.size == 0:
        raise ValueError(f"m_values and s_values must be non-empty 1-D arrays, got shapes "
                         f"{m_values.shape} and {s_values.shape}")
    mm, ss = jnp.meshgrid(m_values, s_values, indexing="ij")
    m0, s0 = mm.reshape(-1), ss.reshape(-1)
    j, a, q = _grid_scores_jit(quant_params, m0, s0, problem, batch_size)
    j = jnp.where(jnp.isfinite(j), j, -jnp.inf)
    i = jnp.argmax(j)
    return GridCalibration(m0=m0, s0=s0, jaq=j, alignment=a, quality=q,
                           best=ramp_coeffs(m0[i], s0[i], problem.steps), best_index=i)


@pytree.dataclass
class GradientCalibration:
    """Result of :func:`calibrate_gradient`. I = iterations.

    Attributes:
      coeffs: the final coefficients.
      history: [I] JAQ before each update.
    """

    coeffs: QSchedCoeffs
    history: jax.Array  # [I]


@dataclasses.dataclass(frozen=True)
class _Family:
    per_step: bool
    steps: int

    def to_coeffs(self, theta):
        if self.per_step:
            return QSchedCoeffs(m=theta["m"], s=theta["s"])
        return ramp_coeffs(theta["m"], theta["s"], self.steps)


def calibrate_gradient(quant_params, problem: CalibrationProblem, *,
                       optimizer: optax.GradientTransformation, num_iters: int,
                       per_step: bool = False, box: tuple[float, float] | None = (0.8, 1.2),
                       init: QSchedCoeffs | None = None,
                       allow_float: bool = False) -> GradientCalibration:
    """Projected gradient ascent on JAQ with optax (one jitted ``lax.scan``).

    Args:
      quant_params: the quantized weights (the only model this function sees).
      problem: see :class:`CalibrationProblem`.
      optimizer: an optax transformation; it minimises ``-JAQ``. Static: calls with the same
        optimizer object (and the same shapes) share one compilation; a freshly built
        ``optax.adam(...)`` is a new program.
      num_iters: optimisation steps (static).
      per_step: False: optimise the ramp's ``(m0, s0)``; True: free ``m, s`` vectors [N].
      box: project every coefficient onto ``[lo, hi]`` after each update (traced: a new box
        does not recompile); None: unconstrained.
      init: starting coefficients (default all ones); for the ramp family only ``m[0], s[0]``
        are used.
      allow_float: accept weights without any ``QuantizedArray`` (the FP control).

    Returns:
      :class:`GradientCalibration`.
    """
    _check_quantized(quant_params, allow_float)
    num_iters = checks.check_int("num_iters", num_iters, minimum=1)
    if box is not None and not (len(box) == 2 and box[0] < box[1]):
        raise ValueError(f"box must be (lo, hi) with lo < hi or None, got {box!r}")
    n = problem.steps
    init = check_coeffs(init, n) or ones_coeffs(n)
    fam = _Family(per_step=per_step, steps=n)
    theta = ({"m": jnp.asarray(init.m, jnp.float32), "s": jnp.asarray(init.s, jnp.float32)}
             if per_step else {"m": jnp.asarray(init.m[0], jnp.float32),
                               "s": jnp.asarray(init.s[0], jnp.float32)})
    box_arr = None if box is None else jnp.asarray(box, theta["m"].dtype)
    th, hist = _gradient_loop_jit(quant_params, problem, theta, box_arr, optimizer=optimizer,
                                  num_iters=num_iters, fam=fam)
    return GradientCalibration(coeffs=fam.to_coeffs(th), history=hist)


def _gradient_loop(weights, problem, theta, box, *, optimizer, num_iters, fam):
    """The ascent as one ``lax.scan``; ``box`` is ``None`` or a [2] array ``(lo, hi)``."""

    def loss(th):
        j, _, _ = jaq_objective(weights, fam.to_coeffs(th), problem)
        return -j

    def project(th):
        return th if box is None else jax.tree.map(lambda v: jnp.clip(v, box[0], box[1]), th)

    opt_state = optimizer.init(theta)

    def body(carry, _):
        th, st = carry
        val, g = jax.value_and_grad(loss)(th)
        upd, st = optimizer.update(g, st, th)
        th = project(optax.apply_updates(th, upd))
        return (th, st), -val

    (th, _), hist = jax.lax.scan(body, (project(theta), opt_state), None, length=num_iters)
    return th, hist


# Module level, so that a second call with the same optimizer object, static structure and
# shapes reuses the compilation; weights, problem data, start and box are arguments (never
# constants baked into the program).
_GRADIENT_STATIC = ("optimizer", "num_iters", "fam")
_gradient_loop_jit = jax.jit(_gradient_loop, static_argnames=_GRADIENT_STATIC)
