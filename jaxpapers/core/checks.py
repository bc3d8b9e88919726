"""Boundary checks shared by every capability: one definition of a tracer, of an int, of a level.

Value checks run only on *concrete* inputs: inside ``jit`` / ``vmap`` / ``scan`` the values are
unknown, so the checks are skipped silently and the function stays traceable. Static checks
(Python ints used for shapes, flags) always run.

Conventions (the same everywhere in the library):

* a **tracer** is any leaf of a pytree that is a ``jax.core.Tracer``;
* an **int** is a Python ``int`` or a NumPy integer scalar, never a ``bool`` (``True`` is rejected
  with a ``TypeError`` wherever an int is expected);
* errors name the argument: ``TypeError`` for a wrong kind of value, ``ValueError`` for a wrong
  value (out of range, NaN, bad shape).

>>> import jax.numpy as jnp
>>> check_int("num_steps", 4, minimum=1)
4
>>> check_int("num_steps", True)
Traceback (most recent call last):
...
TypeError: num_steps must be an int, got bool True
>>> check_level("alpha", 0.1)
>>> check_finite("x", jnp.array([1.0, jnp.nan]))
Traceback (most recent call last):
...
ValueError: x holds NaN or inf values; expected finite values
"""

from __future__ import annotations

import numbers
from typing import Any

import jax
import numpy as np

__all__ = [
    "is_tracer",
    "is_concrete",
    "concrete",
    "is_int",
    "check_int",
    "check_bool",
    "check_level",
    "check_range",
    "check_finite",
    "check_ndim",
    "check_choice",
    "check_key",
]


def is_tracer(x: Any) -> bool:
    """True when any leaf of the pytree ``x`` is a tracer (inside jit / vmap / grad / scan)."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(x))


def is_concrete(x: Any) -> bool:
    """True when ``x`` holds values that can be inspected (no leaf is a tracer)."""
    return not is_tracer(x)


def concrete(x: Any) -> np.ndarray | None:
    """``np.asarray(x)`` for a concrete array-like, ``None`` for a tracer."""
    if is_tracer(x):
        return None
    try:
        return np.asarray(x)
    except (TypeError, jax.errors.TracerArrayConversionError,
            jax.errors.ConcretizationTypeError):  # pragma: no cover - defensive
        return None


def is_int(x: Any) -> bool:
    """A Python or NumPy integer scalar, not a bool."""
    return isinstance(x, (numbers.Integral, np.integer)) and not isinstance(x, (bool, np.bool_))


def check_int(name: str, value: Any, *, minimum: int | None = None,
              maximum: int | None = None) -> int:
    """Return ``int(value)`` after checking it is an int in ``[minimum, maximum]``.

    Raises:
      TypeError: ``value`` is not an int (bools, floats and arrays are rejected).
      ValueError: ``value`` is out of range.
    """
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    v = int(value)
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    if maximum is not None and v > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {v}")
    return v


def check_bool(name: str, value: Any) -> bool:
    """A Python or NumPy bool (a static flag)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def check_range(name: str, value: Any, *, low: float | None = None, high: float | None = None,
                low_open: bool = False, high_open: bool = False, scalar: bool = False) -> None:
    """Every entry of a concrete ``value`` is finite and in the interval (skipped for tracers).

    ``low_open`` / ``high_open`` exclude the end points; ``scalar=True`` also requires a scalar.
    """
    v = concrete(value)
    if v is None:
        return
    if scalar and v.ndim != 0:
        raise ValueError(f"{name} must be a scalar, got shape {v.shape}")
    if v.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be a real number, got dtype {v.dtype}")
    v = v.astype(np.float64)
    bad = ~np.isfinite(v)
    if low is not None:
        bad |= (v <= low) if low_open else (v < low)
    if high is not None:
        bad |= (v >= high) if high_open else (v > high)
    if np.any(bad):
        lo = "-inf" if low is None else f"{low}"
        hi = "inf" if high is None else f"{high}"
        interval = f"{'(' if low_open or low is None else '['}{lo}, {hi}" \
                   f"{')' if high_open or high is None else ']'}"
        shown = v.tolist() if v.size <= 8 else f"{v.size} values, {int(bad.sum())} outside"
        raise ValueError(f"{name} must lie in {interval}, got {shown}")


def check_level(name: str, value: Any) -> None:
    """A probability level (confidence, miscoverage, risk level) in the open interval (0, 1)."""
    check_range(name, value, low=0.0, high=1.0, low_open=True, high_open=True)


def check_finite(name: str, x: Any) -> None:
    """A concrete floating array must hold no NaN or inf (skipped for tracers)."""
    v = concrete(x)
    if v is not None and v.dtype.kind in "fc" and not bool(np.all(np.isfinite(v))):
        raise ValueError(f"{name} holds NaN or inf values; expected finite values")


def check_ndim(name: str, x: Any, ndim: int, letters: str = "") -> None:
    """``x`` has ``ndim`` axes (static: also checked under jit)."""
    shape = np.shape(x)
    if len(shape) != ndim:
        what = f"shape {letters} ({ndim} axes)" if letters else f"{ndim} axes"
        raise ValueError(f"{name} must have {what}, got shape {tuple(shape)}")


def check_choice(name: str, value: Any, choices) -> Any:
    """``value`` is one of ``choices`` (static strings / flags)."""
    if value not in tuple(choices):
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_key(name: str, key: Any) -> None:
    """A typed PRNG key from ``jax.random.key(seed)`` (legacy uint32 keys are rejected).

    Checked from the dtype alone, so it also runs on tracers.
    """
    dtype = getattr(key, "dtype", None)
    if dtype is None or not jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        what = f"dtype {dtype}" if dtype is not None else f"{type(key).__name__} {key!r}"
        raise TypeError(f"{name} must be a typed key from jax.random.key(seed), got {what}")
