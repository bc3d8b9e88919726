"""Input validation that runs on concrete values only (tracers pass through, jit stays intact)."""

from __future__ import annotations

import jax
import numpy as np

__all__ = ["concrete", "check_alpha", "check_level", "check_scores"]


def concrete(x):
    """``np.asarray(x)`` for concrete inputs, ``None`` for tracers."""
    if isinstance(x, jax.core.Tracer):
        return None
    try:
        return np.asarray(x)
    except (TypeError, jax.errors.TracerArrayConversionError):  # pragma: no cover - defensive
        return None


def check_level(value, name: str) -> None:
    """``value`` must lie in the open interval (0, 1) (checked when concrete)."""
    v = concrete(value)
    if v is None:
        return
    if v.ndim != 0 and v.size != 1:
        # batched levels are allowed; check every entry
        pass
    if not np.all(np.isfinite(v)) or np.any(v <= 0.0) or np.any(v >= 1.0):
        raise ValueError(f"{name} must be in the open interval (0, 1), got {v.tolist()!r}")


def check_alpha(alpha) -> None:
    check_level(alpha, "alpha")


def check_scores(scores, name: str, *, ndim: int | None = 1, min_size: int = 1) -> None:
    """Shape (static) always; emptiness and NaNs when concrete."""
    shape = np.shape(scores)
    if ndim is not None and len(shape) != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array, got shape {shape}")
    if ndim is not None and ndim >= 1 and shape[-1] < min_size:
        raise ValueError(f"{name} must hold at least {min_size} score(s), got shape {shape}")
    v = concrete(scores)
    if v is not None and v.dtype.kind == "f" and np.isnan(v).any():
        raise ValueError(f"{name} contains NaN scores")
