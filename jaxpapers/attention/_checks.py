"""Boundary checks shared by the attention module (ValueError naming the argument)."""

from __future__ import annotations

import jax
import numpy as np


def is_concrete(x) -> bool:
    """True when ``x`` holds values (not a tracer inside jit / vmap / scan)."""
    return not isinstance(x, jax.core.Tracer)


def check_finite(name: str, x) -> None:
    """Raise if a concrete array holds NaN or inf (skipped for traced values)."""
    if is_concrete(x) and not bool(np.all(np.isfinite(np.asarray(x)))):
        raise ValueError(f"{name} holds NaN or inf values; expected finite {name}")


def check_ndim(name: str, x, ndim: int, letters: str) -> None:
    if x.ndim != ndim:
        raise ValueError(f"{name} must have shape {letters} ({ndim} axes), got shape {x.shape}")


def check_num_bits(num_bits, name: str = "num_bits") -> None:
    if isinstance(num_bits, bool) or not isinstance(num_bits, int) or num_bits < 32 \
            or num_bits % 32:
        raise ValueError(f"{name} must be a positive multiple of 32, got {num_bits!r}")


def check_head_dims(q_name: str, q_dim: int, k_name: str, k_dim: int) -> None:
    if q_dim != k_dim:
        raise ValueError(f"head dimension mismatch: {q_name} has D={q_dim} but {k_name} has "
                         f"D={k_dim}")


def check_groups(num_q_heads: int, num_kv_heads: int) -> int:
    if num_kv_heads < 1 or num_q_heads % num_kv_heads:
        raise ValueError(f"q heads ({num_q_heads}) must be a multiple of the key heads "
                         f"({num_kv_heads})")
    return num_q_heads // num_kv_heads


def check_budget(budget, context: int, name: str = "budget") -> None:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"{name} must be a positive int, got {budget!r}")
    if budget > context:
        raise ValueError(f"{name}={budget} is larger than the context ({context} tokens)")


def check_length(name: str, length, upper: int) -> None:
    """A concrete length must lie in [1, upper]."""
    if is_concrete(length):
        a = np.asarray(length)
        if a.size and (a.min() < 1 or a.max() > upper):
            raise ValueError(f"{name} must lie in [1, {upper}], got {a.tolist()}")
