"""Score validation for the conformal modules, built on :mod:`jaxpapers.core.checks`.

Value checks run on concrete values only (tracers pass through, jit stays intact). Levels
(``alpha``, ``beta``) use :func:`jaxpapers.core.checks.check_level`.
"""

from __future__ import annotations

import numpy as np

from jaxpapers.core import checks

__all__ = ["check_scores", "check_no_nan"]


def check_no_nan(scores, name: str) -> None:
    """A concrete float array must hold no NaN (infinite scores are allowed)."""
    v = checks.concrete(scores)
    if v is not None and v.dtype.kind == "f" and np.isnan(v).any():
        raise ValueError(f"{name} contains NaN scores")


def check_scores(scores, name: str, *, ndim: int | None = 1, min_size: int = 1) -> None:
    """Shape (static) always; emptiness and NaNs when concrete."""
    if ndim is not None:
        checks.check_ndim(name, scores, ndim)
    shape = np.shape(scores)
    if ndim is not None and ndim >= 1 and shape[-1] < min_size:
        raise ValueError(f"{name} must hold at least {min_size} score(s), got shape {shape}")
    check_no_nan(scores, name)
