"""Per-layer optax transform == manual per-layer GD."""

import jax
import numpy as np
import optax
import pytest

from jaxpapers import linear_nets as ln


@pytest.mark.parametrize("layers", [2, 3])
def test_per_layer_sgd_equals_manual_gd_step(layers):
    with jax.enable_x64(True):
        params, data = ln.sample_problem(jax.random.key(2), 10, 6, 5, layers=layers)
        tx = ln.per_layer_sgd(3.5, 0.75)
        grads = ln.gradients(params, data["x"], data["y"])  # the same grads gd_step uses; has "a"
        updates, _ = tx.update(grads, tx.init(params), params)
        stepped = optax.apply_updates(params, updates)
        manual = ln.gd_step(params, data["x"], data["y"], 3.5, 0.75)
        for name in manual:
            np.testing.assert_array_equal(stepped[name], manual[name])  # exactly
        # the two rates really differ in effect
        assert not np.allclose(stepped["w1"] - params["w1"],
                               3.5 / 0.75 * (stepped["w1"] - params["w1"]))


def test_per_layer_works_with_any_optax_optimizer_and_freezes_others():
    params = {"w1": jax.numpy.ones(3), "w2": jax.numpy.ones(3), "a": jax.numpy.ones(3)}
    tx = ln.per_layer(optax.adam, {"w1": 0.1, "w2": 0.01})
    updates, _ = tx.update(params, tx.init(params), params)
    np.testing.assert_allclose(updates["w1"], -0.1, rtol=1e-5)  # first Adam step is -lr*sign
    np.testing.assert_allclose(updates["w2"], -0.01, rtol=1e-5)
    np.testing.assert_array_equal(updates["a"], 0.0)


def test_per_layer_bad_input():
    with pytest.raises(ValueError, match="learning_rates"):
        ln.per_layer(optax.sgd, {})
    with pytest.raises(ValueError, match="'w1'"):
        ln.per_layer(optax.sgd, {"w1": -1.0})
