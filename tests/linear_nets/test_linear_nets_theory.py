"""Closed forms: exact values, landscape, optimal split, jit/vmap/no-recompile, validation."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import linear_nets as ln

CASES = [(2, 1), (2, 2), (3, 1), (3, 2)]


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def test_two_layer_closed_forms_by_hand():
    h, e1, e2 = 10.0, 30.0, 50.0
    s, p = e1 + e2, e1 * e2
    one = (1 - s / h**2) ** 2 + 1 / h + 2 * p / h**5 + p**2 / h**7
    q = 1 + p / h**3
    two = q**4 / h + (2 * s * q / h**2 - 1) ** 2 + 16 * p**2 / h**7 + 8 * q**2 * p / h**5
    np.testing.assert_allclose(ln.expected_test_loss(e1, e2, h, steps=1), one, rtol=1e-14)
    np.testing.assert_allclose(ln.expected_test_loss(e1, e2, h, steps=2), two, rtol=1e-14)
    # official one-step lacks exactly 2p/h^5; official two-step is the same formula
    np.testing.assert_allclose(ln.official_expected_test_loss(e1, e2, h, steps=1),
                               one - 2 * p / h**5, rtol=1e-14)
    np.testing.assert_allclose(ln.official_expected_test_loss(e1, e2, h, steps=2), two,
                               rtol=1e-14)


def test_three_layer_reduces_to_official_leading_order():
    h, e1, e2 = 50.0, 4.0, 9.0
    s, p = e1 + e2, e1 * e2
    off2 = ((2 * s * (h + p) / h**2 - 1) ** 2 + 1 / h + 2 * p / h**2 + 10 * p / h**3
            + 37 * p**2 / h**4 + 12 * p**3 / h**5 + p**4 / h**6 + p**2 / h**3)
    np.testing.assert_allclose(ln.official_expected_test_loss(e1, e2, h, layers=3, steps=2),
                               off2, rtol=1e-14)
    np.testing.assert_allclose(ln.leading_order_expected_test_loss(e1, e2, h, layers=3, steps=2),
                               off2, rtol=1e-14)
    off1 = (1 - s / h) ** 2 + 1 / h + p**2 / h**4
    np.testing.assert_allclose(ln.leading_order_expected_test_loss(e1, e2, h, layers=3, steps=1),
                               off1 + 2 * p / h**3, rtol=1e-14)
    # the exact forms approach the leading order as h grows (rates ~ sqrt(h))
    for steps in (1, 2):
        diffs = [abs(float(ln.expected_test_loss(0.3 * w**0.5, 0.6 * w**0.5, w, layers=3,
                                                 steps=steps)
                           - ln.leading_order_expected_test_loss(0.3 * w**0.5, 0.6 * w**0.5, w,
                                                                 layers=3, steps=steps)))
                 for w in (1e2, 1e4, 1e6)]
        assert diffs[0] > diffs[1] > diffs[2] and diffs[2] < 1e-5 and diffs[0] > 1e-4


@pytest.mark.parametrize("layers,steps", CASES)
def test_zero_rates_give_initial_loss(layers, steps):
    # Nothing moves: 2 layers ||M/h - beta||^2 has mean 1/h + 1; 3 layers the same.
    np.testing.assert_allclose(ln.expected_test_loss(0.0, 0.0, 8.0, layers=layers, steps=steps),
                               1 + 1 / 8, rtol=1e-14)


def test_fullgd_onestep_tends_to_surrogate():
    for h in (64.0, 256.0, 1024.0):
        e = h**1.25
        gap = float(ln.fullgd_expected_test_loss_onestep(e, e, h) - ln.expected_test_loss(e, e, h))
        assert gap > 0
    gaps = [float(ln.fullgd_expected_test_loss_onestep(h**1.25, h**1.25, h)
                  - ln.expected_test_loss(h**1.25, h**1.25, h)) for h in (64.0, 256.0, 1024.0)]
    assert gaps[0] > gaps[1] > gaps[2]


# Truth found with the exact closed forms (see docs/derivations/layer_balancing.md): at step 1
# equal rates are always a local maximum (the loss increases with p = eta1 eta2); at step 2 they
# are a local minimum for every case of the acceptance grid below.
@pytest.mark.parametrize("h", [512.0, 1000.0])
@pytest.mark.parametrize("alpha", [1.1, 1.25, 1.4, 1.5])
def test_landscape_midpoint_max_then_min(h, alpha):
    s = 2 * h**alpha
    assert float(ln.split_curvature_at_midpoint(h, s, steps=1)) < 0
    assert float(ln.split_curvature_at_midpoint(h, s, steps=2)) > 0


def test_landscape_exception_small_width_large_budget():
    # Where the step-2 claim fails: h = 256, alpha = 1.5 (and h <= 128 for alpha >= 1.4 or 1.5):
    # the midpoint is a shallow local maximum between two nearby minima.
    h, s = 256.0, 2 * 256.0**1.5
    assert float(ln.split_curvature_at_midpoint(h, s, steps=2)) < 0
    x = float(ln.optimal_split(h, s, steps=2))
    assert 0.4 < x < 0.5


@pytest.mark.parametrize("layers,steps,h,s", [(2, 1, 100.0, 2e3), (2, 2, 64.0, 2 * 64**1.5),
                                              (2, 2, 512.0, 2 * 512**1.25),
                                              (3, 1, 64.0, 20.0), (3, 2, 64.0, 30.0)])
def test_optimal_split_matches_dense_grid(layers, steps, h, s):
    x = float(ln.optimal_split(h, s, layers=layers, steps=steps))
    grid = jnp.linspace(0, 1, 200001)
    losses = ln.expected_test_loss(grid * s, (1 - grid) * s, h, layers=layers, steps=steps)
    best = float(jnp.min(losses))
    got = float(ln.expected_test_loss(x * s, (1 - x) * s, h, layers=layers, steps=steps))
    assert got <= best + 1e-12 * abs(best)
    # the argmin is symmetric (x and 1 - x); compare to the nearest grid minimiser
    xs = np.asarray(grid)[np.asarray(losses) <= best + 1e-9 * abs(best)]
    assert np.min(np.abs(xs - x)) < 1e-4


def test_step1_optimum_is_a_boundary():
    assert float(ln.optimal_split(1000.0, 2 * 1000.0**1.25, steps=1)) == 0.0


@pytest.mark.parametrize("layers,steps", CASES)
def test_jit_vmap_grad_and_no_recompile(layers, steps):
    loss = lambda a, b, h: ln.expected_test_loss(a, b, h, layers=layers, steps=steps)
    chex.clear_trace_counter()
    f = jax.jit(chex.assert_max_traces(loss, n=1))
    e1 = jnp.linspace(0.0, 40.0, 7)
    e2 = jnp.linspace(30.0, 5.0, 7)
    hs = jnp.array([16.0, 32.0, 64.0, 16.0, 32.0, 64.0, 100.0])
    batched = jax.jit(jax.vmap(loss))(e1, e2, hs)
    loop = jnp.stack([ln.expected_test_loss(a, b, h, layers=layers, steps=steps)
                      for a, b, h in zip(e1, e2, hs)])
    np.testing.assert_allclose(batched, loop, rtol=1e-14)
    np.testing.assert_allclose(f(3.0, 4.0, 20.0),
                               ln.expected_test_loss(3.0, 4.0, 20.0, layers=layers, steps=steps),
                               rtol=1e-15)
    f(5.0, 1.0, 24.0)  # new values: no retrace
    f(7.0, 2.0, 30.0)
    # differentiable in the rates: autodiff == central difference
    g = jax.grad(lambda a: ln.expected_test_loss(a, 9.0, 20.0, layers=layers, steps=steps))(6.0)
    fd = (ln.expected_test_loss(6.0 + 1e-5, 9.0, 20.0, layers=layers, steps=steps)
          - ln.expected_test_loss(6.0 - 1e-5, 9.0, 20.0, layers=layers, steps=steps)) / 2e-5
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_optimal_split_jits_without_recompiling():
    chex.clear_trace_counter()
    f = jax.jit(chex.assert_max_traces(lambda h, s: ln.optimal_split(h, s, steps=2), n=1))
    a = f(512.0, 2 * 512.0**1.25)
    b = f(1000.0, 2 * 1000.0**1.4)  # new values: no retrace
    np.testing.assert_allclose([a, b], [0.5, 0.5], atol=1e-6)


def test_float32_mode_close_to_float64():
    with jax.enable_x64(False):
        v32 = float(ln.expected_test_loss(2 * 1000**1.4 / 2, 2 * 1000**1.4 / 2, 1000, steps=2))
    v64 = float(ln.expected_test_loss(2 * 1000**1.4 / 2, 2 * 1000**1.4 / 2, 1000.0, steps=2))
    assert abs(v32 - v64) < 1e-5 * v64


def test_bad_inputs():
    with pytest.raises(ValueError, match="layers"):
        ln.expected_test_loss(1.0, 1.0, 8.0, layers=4)
    with pytest.raises(ValueError, match="steps"):
        ln.expected_test_loss(1.0, 1.0, 8.0, steps=3)
    with pytest.raises(ValueError, match="eta1"):
        ln.expected_test_loss(-1.0, 1.0, 8.0)
    with pytest.raises(ValueError, match="eta2"):
        ln.official_expected_test_loss(1.0, float("inf"), 8.0)
    with pytest.raises(ValueError, match=r"h must lie in \(0"):
        ln.expected_test_loss(1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="budget"):
        ln.optimal_split(8.0, -2.0)
    with pytest.raises(ValueError, match=r"h must lie in \(0"):
        ln.optimal_split(-8.0, 2.0)
