"""A small helper for registered, frozen pytree dataclasses (STYLE.md "State")."""

from __future__ import annotations

import dataclasses
from typing import TypeVar

import jax

__all__ = ["dataclass", "static_field"]

T = TypeVar("T")


def static_field(**kwargs):
    """A dataclass field that is part of the treedef (hashable Python data), not a leaf."""
    return dataclasses.field(metadata=dict(static=True), **kwargs)


def dataclass(cls: type[T]) -> type[T]:
    """``@dataclass``: frozen dataclass registered with ``jax.tree_util.register_dataclass``.

    Fields declared with :func:`static_field` are static metadata; all others are children.
    """
    cls = dataclasses.dataclass(frozen=True)(cls)
    return jax.tree_util.register_dataclass(cls)
