"""Input validation shared by the linear-network modules, built on :mod:`jaxpapers.core.checks`.

Value checks run only on concrete (non-traced) values, so every public function still works under
``jax.jit`` and ``jax.vmap``: inside a trace they are skipped silently. Static ints (widths,
layers, steps) are always checked; bools are rejected with a ``TypeError``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxpapers.core import checks

__all__ = ["check_layers_steps", "check_width", "check_int_width", "check_rates", "check_params"]


def check_layers_steps(layers: Any, steps: Any, *, max_steps: int | None = 2) -> None:
    """``layers`` must be 2 or 3; ``steps`` a positive int (at most ``max_steps`` if given)."""
    checks.check_choice("layers", checks.check_int("layers", layers), (2, 3))
    steps = checks.check_int("steps", steps, minimum=1)
    if max_steps is not None and steps > max_steps:
        raise ValueError(f"steps must be in 1..{max_steps} for the closed forms, got {steps!r}")


def check_width(h: Any, name: str = "h") -> None:
    """A (possibly real-valued) width must be positive and finite (checked only when concrete)."""
    checks.check_range(name, h, low=0.0, low_open=True)


def check_int_width(h: Any, name: str = "h") -> int:
    """A static integer width (used for shapes): an int >= 1."""
    return checks.check_int(name, h, minimum=1)


def check_rates(**rates: Any) -> None:
    """Learning rates must be finite and non-negative (checked only when concrete)."""
    for name, value in rates.items():
        checks.check_range(name, value, low=0.0)


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
    checks.check_ndim("params['w1']", w1, 2, "[d, h]")
    checks.check_ndim("params['w2']", w2, 2, "[h, h]")
    h = np.shape(w1)[1]
    if np.shape(w2) != (h, h):
        raise ValueError(f"params['w2'] must have shape ({h}, {h}) to match params['w1'] "
                         f"{np.shape(w1)}, got {np.shape(w2)}")
    if "a" in params:
        if np.shape(params["a"]) != (h, 1):
            raise ValueError(f"params['a'] must have shape ({h}, 1), got {np.shape(params['a'])}")
        return 3
    return 2
