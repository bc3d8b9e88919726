"""State containers for the conformal module (frozen, registered pytree dataclasses)."""

from __future__ import annotations

import jax

from jaxpapers.core.pytree import dataclass

__all__ = ["RSACPState"]


@dataclass
class RSACPState:
    """Calibrated RSA-CP state for one calibration set (unbatched; vmap adds a leading axis).

    Letters: M real calibration scores, N reference scores.

    Attributes:
      cal_sorted: [M] sorted real calibration scores S_(1) <= ... <= S_(M).
      z_sorted: [M] their images Z_(i) = T(S_(i)) under the barycentric OT map (nondecreasing).
      slope_lo: [] slope of T left of S_(1) (0 for the released end clamp).
      slope_hi: [] slope of T right of S_(M) (0 for the released end clamp).
      q_by_k: [M + 1] thresholds q(k), k = 1..M+1, in the reference (mapped) scale.
      s_floor: [] guard: a real-scale score <= s_floor is always included (-inf unless the
        ``guard`` option was used; then split CP's threshold S_(ceil((1 - alpha)(M + 1))),
        +inf when that rank exceeds M).
    """

    cal_sorted: jax.Array  # [M]
    z_sorted: jax.Array  # [M]
    slope_lo: jax.Array  # []
    slope_hi: jax.Array  # []
    q_by_k: jax.Array  # [M + 1]
    s_floor: jax.Array  # []
