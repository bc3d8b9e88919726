"""Pytree containers and callable aliases of the diffusion capability."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from jaxpapers.core import pytree

__all__ = ["DenoiseFn", "ScoreFn", "QSchedCoeffs"]

# denoise_fn(params, x, noise_level) -> model output with x's shape. ``noise_level`` is the
# schedule's native model input: the integer-valued timestep for VP schedules, sigma for EDM,
# the flow time for flow matching. What the output means is the schedule's ``prediction``.
DenoiseFn = Callable[[Any, jax.Array, jax.Array], jax.Array]

# A pure scorer: (images [B, ...], prompts [B]) -> [B] per-sample scores (higher is better).
ScoreFn = Callable[[jax.Array, jax.Array], jax.Array]


@pytree.dataclass
class QSchedCoeffs:
    """Q-Sched preconditioning coefficients, one pair per sampler step.

    Inside step ``i`` of a sampler, right after the model call, the model output is multiplied
    by ``m[i]`` and the current sample by ``s[i]``; the step's usual update then runs on the
    scaled values. All ones is the plain sampler. N is the number of steps.

    Attributes:
      m: [N] model-output coefficients.
      s: [N] sample coefficients.
    """

    m: jax.Array  # [N]
    s: jax.Array  # [N]
