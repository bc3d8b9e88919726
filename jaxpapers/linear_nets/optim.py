"""Per-layer learning rates as an optax transformation (built on ``optax.multi_transform``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import optax
from jax.typing import ArrayLike

from jaxpapers.linear_nets import _checks

__all__ = ["per_layer", "per_layer_sgd"]

_FROZEN = "__frozen__"


def per_layer(make_optimizer: Callable[[ArrayLike], optax.GradientTransformation],
              learning_rates: Mapping[str, ArrayLike]) -> optax.GradientTransformation:
    """One optimizer per top-level parameter, each with its own learning rate.

    Parameters are labelled by their top-level key in the params dict; keys listed in
    ``learning_rates`` get ``make_optimizer(rate)``, every other key (e.g. the fixed readout
    ``"a"`` of the 3-layer net) gets ``optax.set_to_zero()`` (frozen).

    Args:
      make_optimizer: e.g. ``optax.sgd`` or ``optax.adam``; called with one learning rate.
      learning_rates: ``{"w1": eta1, "w2": eta2}``; non-negative, finite (checked if concrete).

    Returns:
      An ``optax.GradientTransformation`` usable in any optax loop.

    >>> import jax.numpy as jnp, optax
    >>> tx = per_layer(optax.sgd, {"w1": 2.0, "w2": 3.0})
    >>> p = {"w1": jnp.ones(2), "w2": jnp.ones(2)}
    >>> u, _ = tx.update(p, tx.init(p))
    >>> [float(u["w1"][0]), float(u["w2"][0])]
    [-2.0, -3.0]
    """
    if not isinstance(learning_rates, Mapping) or not learning_rates:
        raise ValueError(f"learning_rates must be a non-empty dict, got {learning_rates!r}")
    if _FROZEN in learning_rates:
        raise ValueError(f"learning_rates may not use the reserved label {_FROZEN!r}")
    _checks.check_rates(**{f"learning_rates[{k!r}]": v for k, v in learning_rates.items()})
    transforms = {name: make_optimizer(rate) for name, rate in learning_rates.items()}
    transforms[_FROZEN] = optax.set_to_zero()

    def labels(params):
        if not isinstance(params, Mapping):
            raise ValueError(f"params must be a dict keyed by layer name, got {type(params)}")
        return {k: (k if k in learning_rates else _FROZEN) for k in params}

    return optax.multi_transform(transforms, labels)


def per_layer_sgd(eta1: ArrayLike, eta2: ArrayLike) -> optax.GradientTransformation:
    """Plain GD with rate ``eta1`` on ``"w1"``, ``eta2`` on ``"w2"``, everything else frozen."""
    return per_layer(optax.sgd, {"w1": eta1, "w2": eta2})
