"""A small helper for registered, frozen pytree dataclasses (STYLE.md "State")."""

from __future__ import annotations

import dataclasses
from typing import TypeVar

import jax

__all__ = ["dataclass", "static_field", "replace"]

T = TypeVar("T")


def static_field(**kwargs):
    """A dataclass field that is part of the treedef (hashable Python data), not a leaf."""
    return dataclasses.field(metadata=dict(static=True), **kwargs)


def replace(obj: T, **changes) -> T:
    """A copy of the frozen dataclass ``obj`` with ``changes`` applied (``dataclasses.replace``).

    Every class made by :func:`dataclass` also has it as a method: ``state.replace(step=1)``.
    """
    return dataclasses.replace(obj, **changes)


def dataclass(cls: type[T]) -> type[T]:
    """``@dataclass``: frozen dataclass registered with ``jax.tree_util.register_dataclass``.

    Fields declared with :func:`static_field` are static metadata; all others are children.
    The class gains a ``replace(**changes)`` method (the one definition, :func:`replace`) unless
    it defines its own.

    >>> import jax.numpy as jnp
    >>> @dataclass
    ... class State:
    ...     count: jnp.ndarray  # []
    ...     name: str = static_field(default="s")
    >>> s = State(jnp.zeros(()))
    >>> s.replace(count=jnp.ones(())).count.item(), len(jax.tree.leaves(s))
    (1.0, 1)
    """
    if "replace" not in cls.__dict__:
        cls.replace = replace
    cls = dataclasses.dataclass(frozen=True)(cls)
    return jax.tree_util.register_dataclass(cls)
