"""Input validation shared by the linear-network modules.

Only concrete (non-traced) values are checked, so every public function still works under
``jax.jit`` and ``jax.vmap``: inside a trace the checks are skipped silently.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

__all__ = ["is_concrete", "check_layers_steps", "check_width", "check_rates", "check_params"]


def is_concrete(x: Any) -> bool:
    """True when ``x`` holds a value (not a tracer), i.e. it can be validated."""
    return not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(x))


def check_layers_steps(layers: Any, steps: Any, *, max_steps: int | None = 2) -> None:
    """``layers`` must be 2 or 3; ``steps`` a positive int (at most ``max_steps`` if given)."""
    if isinstance(layers, bool) or not isinstance(layers, (int, np.integer)) or layers not in (2, 3):
        raise ValueError(f"layers must be 2 or 3, got {layers!r}")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if max_steps is not None and steps > max_steps:
        raise ValueError(f"steps must be in 1..{max_steps} for the closed forms, got {steps!r}")


def check_width(h: Any, name: str = "h") -> None:
    """A width must be positive and finite (checked only when concrete)."""
    if not is_concrete(h):
        return
    arr = np.asarray(h, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be positive and finite, got {h!r}")


def check_int_width(h: Any, name: str = "h") -> int:
    """A static integer width (used for shapes)."""
    if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or h < 1:
        raise ValueError(f"{name} must be a positive int, got {h!r}")
    return int(h)


def check_rates(**rates: Any) -> None:
    """Learning rates must be finite and non-negative (checked only when concrete)."""
    for name, value in rates.items():
        if not is_concrete(value):
            continue
        arr = np.asarray(value, dtype=float)
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} must be finite, got {value!r}")
        if np.any(arr < 0):
            raise ValueError(f"{name} must be non-negative, got {value!r}")


def check_params(params: Any) -> int:
    """Check a linear-net parameter dict; return its depth (2 or 3).

    Expected ``{"w1": [d, h], "w2": [h, h]}`` (2 layers) or with ``"a": [h, 1]`` (3 layers).
    """
    if not isinstance(params, dict) or "w1" not in params or "w2" not in params:
        raise ValueError("params must be a dict with keys 'w1', 'w2' (and 'a' for 3 layers), "
                         f"got {type(params).__name__} with keys {list(getattr(params, 'keys', list)())}")
    extra = set(params) - {"w1", "w2", "a"}
    if extra:
        raise ValueError(f"params has unexpected keys {sorted(extra)}")
    w1, w2 = params["w1"], params["w2"]
    if np.ndim(w1) != 2 or np.ndim(w2) != 2:
        raise ValueError(f"params['w1'] and params['w2'] must be matrices, got shapes "
                         f"{np.shape(w1)} and {np.shape(w2)}")
    h = np.shape(w1)[1]
    if np.shape(w2) != (h, h):
        raise ValueError(f"params['w2'] must have shape ({h}, {h}) to match params['w1'] "
                         f"{np.shape(w1)}, got {np.shape(w2)}")
    if "a" in params:
        if np.shape(params["a"]) != (h, 1):
            raise ValueError(f"params['a'] must have shape ({h}, 1), got {np.shape(params['a'])}")
        return 3
    return 2
