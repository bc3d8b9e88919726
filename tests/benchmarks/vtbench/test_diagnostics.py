"""VT-Bench diagnostics: IG closed forms and quadrature error, MCR by hand, jit/vmap, bad input."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.benchmarks.vtbench import diagnostics as D

MIN_STEPS = {"trapezoid": 2, "gauss_legendre": 1, "riemann_right": 1}
# Jitted entry points (f / predict, steps, method, task static): one compiled program per case is
# ~5x faster here than eager op-by-op dispatch; jit == eager is checked once for each below.
IG = jax.jit(D.integrated_gradients, static_argnums=0, static_argnames=("steps", "method"))
MCR = jax.jit(D.mcr, static_argnums=0, static_argnames="task")


def _normal(rng, *shape):
    """Test data from a seeded numpy generator (eager jax.random costs seconds of compiles here);
    float64 under x64, float32 otherwise."""
    return jnp.asarray(rng.standard_normal(shape))


def _mlp(rng, sizes):
    """A small tanh MLP's parameters (float64 under x64) and its scalar output function."""
    params = [(_normal(rng, a, b) / np.sqrt(a), 0.1 * _normal(rng, b))
              for a, b in zip(sizes[:-1], sizes[1:])]

    def f(x):
        h = x
        for w, b in params[:-1]:
            h = jnp.tanh(h @ w + b)
        w, b = params[-1]
        return (h @ w + b)[0]

    return f


# ---------------------------------------------------------------- IG: closed forms (float64)

def test_product_and_sine_closed_form(x64):
    # f(x) = x0 x1 + sin(x2), x' = 0: the path is a x, so
    #   attr_0 = x0 int_0^1 a x1 da = x0 x1 / 2 (and attr_1 likewise): the integrand is linear
    #     in a, which the trapezoid rule integrates exactly -> only rounding error;
    #   attr_2 = x2 int_0^1 cos(a x2) da = sin(x2), integrand g(a) = cos(a x2).
    # Composite trapezoid on [0, 1] with n = steps - 1 intervals, h = 1/n:
    #   |T - I| <= h^2 / 12 max|g''| = x2^2 / (12 n^2)   (g'' = -x2^2 cos(a x2))
    # so |attr_2 - sin x2| <= |x2|^3 / (12 (steps - 1)^2). Euler-Maclaurin gives the leading
    # term T - I = h^2/12 (g'(1) - g'(0)) + O(h^4) = -h^2 x2 sin(x2) / 12, i.e.
    #   attr_2 - sin x2 ~= -x2^2 sin(x2) / (12 n^2), the next term smaller by ~h^2 x2^2 / 60.
    steps = 100
    x = jnp.array([1.3, -0.7, 2.1])
    f = lambda z: z[0] * z[1] + jnp.sin(z[2])  # noqa: E731
    attr = np.asarray(IG(f, x, jnp.zeros(3), steps=steps))
    x0, x1, x2 = map(float, x)
    n = steps - 1
    np.testing.assert_allclose(attr[:2], [x0 * x1 / 2, x0 * x1 / 2], rtol=0, atol=1e-13)
    err = attr[2] - np.sin(x2)
    assert abs(err) <= abs(x2) ** 3 / (12 * n ** 2)
    leading = -x2 ** 2 * np.sin(x2) / (12 * n ** 2)
    assert abs(err - leading) <= 1e-3 * abs(leading)
    total = f(x) - f(jnp.zeros(3))
    assert abs(attr.sum() - total) / abs(total) <= 1e-3


def test_trapezoid_error_order_two(x64):
    # the same sine attribution: halving h divides the error by 4 (up to the O(h^4) term)
    f = lambda z: jnp.sin(z[0])  # noqa: E731
    x = jnp.array([1.7])
    errs = [float(IG(f, x, jnp.zeros(1), steps=n + 1)[0] - np.sin(1.7))
            for n in (10, 20, 40)]
    ratios = [errs[0] / errs[1], errs[1] / errs[2]]
    np.testing.assert_allclose(ratios, [4.0, 4.0], rtol=0.02)


@pytest.mark.parametrize("method", D.METHODS)
def test_linear_is_exact_for_every_rule(x64, method):
    # grad f = w everywhere and every rule's weights sum to 1: attr = w (x - x') exactly
    rng = np.random.default_rng(0)
    w, x, xb = (_normal(rng, 7) for _ in range(3))
    f = lambda z: jnp.dot(w, z) + 0.3  # noqa: E731
    for steps in (MIN_STEPS[method], 9):
        attr = IG(f, x, xb, steps=steps, method=method)
        np.testing.assert_allclose(attr, w * (x - xb), rtol=0, atol=1e-12)


def test_riemann_right_nodes(x64):
    # f = x0 x1, x' = 0: integrand a x1 on the nodes k/n, k = 1..n, weights 1/n:
    # sum_k k / n^2 = (n + 1) / (2 n), so attr_0 = x0 x1 (n + 1) / (2 n)
    x = jnp.array([1.5, -2.0])
    for n in (1, 4, 10):
        attr = IG(lambda z: z[0] * z[1], x, jnp.zeros(2), steps=n,
                                      method="riemann_right")
        np.testing.assert_allclose(attr, [-3.0 * (n + 1) / (2 * n)] * 2, rtol=0, atol=1e-13)


def test_gauss_legendre_polynomial_exactness(x64):
    # f = x0^5 x1, x' = 0: integrands 5 a^5 x0^4 x1 and a^5 x0^5 (degree 5), so
    # attr = x0^5 x1 (5/6, 1/6). k Gauss nodes are exact up to degree 2k - 1: 3 nodes exact,
    # 2 nodes not (int a^5 ~= 0.1525 instead of 1/6, ~8% off).
    f = lambda z: z[0] ** 5 * z[1]  # noqa: E731
    x = jnp.array([1.2, -0.8])
    exact = float(x[0] ** 5 * x[1]) * np.array([5 / 6, 1 / 6])
    three = IG(f, x, jnp.zeros(2), steps=3, method="gauss_legendre")
    np.testing.assert_allclose(three, exact, rtol=1e-12)
    two = IG(f, x, jnp.zeros(2), steps=2, method="gauss_legendre")
    assert np.all(np.abs(np.asarray(two) - exact) > 0.05 * np.abs(exact))
    # from a non-zero baseline the integrand is still degree 5 in a: completeness is exact
    xb = jnp.array([-0.4, 0.9])
    attr = IG(f, x, xb, steps=3, method="gauss_legendre")
    np.testing.assert_allclose(float(attr.sum()), float(f(x) - f(xb)), rtol=1e-12)


def test_mlp_completeness(x64):
    rng = np.random.default_rng(1)
    f = _mlp(rng, (6, 16, 16, 1))
    x, xb = 1.5 * _normal(rng, 6), 1.5 * _normal(rng, 6)
    total = float(jax.jit(lambda a, b: f(a) - f(b))(x, xb))
    assert abs(total) > 0.05  # a non-degenerate difference for the relative error below
    trap = IG(f, x, xb, steps=100)
    assert abs(float(trap.sum()) - total) / abs(total) <= 1e-3
    # the integrand is analytic in a: Gauss-Legendre converges geometrically
    gl = IG(f, x, xb, steps=100, method="gauss_legendre")
    assert abs(float(gl.sum()) - total) / abs(total) <= 1e-10


def test_pytree_input_matches_flat_array(x64):
    # IG is per coordinate: on the tuple (z_img, z_tab) it equals IG on the concatenation
    rng = np.random.default_rng(2)
    g = _mlp(rng, (7, 8, 1))
    f_tree = lambda z: g(jnp.concatenate(z))  # noqa: E731
    x = (_normal(rng, 4), _normal(rng, 3))
    xb = (_normal(rng, 4), _normal(rng, 3))
    attr = IG(f_tree, x, xb, steps=50)
    assert isinstance(attr, tuple) and attr[0].shape == (4,) and attr[1].shape == (3,)
    flat = IG(g, jnp.concatenate(x), jnp.concatenate(xb), steps=50)
    np.testing.assert_allclose(jnp.concatenate(attr), flat, rtol=0, atol=1e-13)
    total = float(jax.jit(lambda a, b: f_tree(a) - f_tree(b))(x, xb))
    assert abs(float(attr[0].sum() + attr[1].sum()) - total) <= 1e-3 * abs(total)


# ---------------------------------------------------------------- IG: jit, vmap, recompilation

def _logit_f(w):
    """f(x, label) = the label's logit of a tanh layer; x = (z_img [4], z_tab [3])."""
    def f(z, label):
        h = jnp.tanh(jnp.concatenate(z) @ w)
        return h[label]
    return f


def test_vmap_and_batch_equal_loop():
    rng = np.random.default_rng(3)
    f = _logit_f(_normal(rng, 7, 3))
    xs = (_normal(rng, 5, 4), _normal(rng, 5, 3))
    base = (jnp.full((4,), 0.1), jnp.full((3,), -0.2))
    ys = jnp.array([0, 2, 1, 1, 0])

    def one(x, label):  # one sample; the label is closed over by f's target
        return D.integrated_gradients(lambda z: f(z, label), x, base, steps=20)

    jitted = jax.jit(one)
    loop = [jitted((xs[0][i], xs[1][i]), ys[i]) for i in range(5)]
    assert jitted._cache_size() == 1  # five calls with new values, one compilation
    loop = tuple(jnp.stack([a[m] for a in loop]) for m in range(2))
    batch = functools.partial(D.integrated_gradients_batch, f, steps=20)
    per_sample_base = tuple(jnp.broadcast_to(b, x.shape) for b, x in zip(base, xs))
    chunked = jax.jit(functools.partial(batch, batch_size=2))  # lax.map, 5 = 2 + 2 + 1
    got = {"vmap": jax.jit(jax.vmap(one))(xs, ys),
           "batch, shared baseline": jax.jit(batch)(xs, base, ys),
           "chunks of 2, per-sample baselines": chunked(xs, per_sample_base, ys)}
    for m in range(2):
        for name, value in got.items():
            np.testing.assert_allclose(value[m], loop[m], rtol=1e-5, atol=1e-6, err_msg=name)


def test_jit_equals_eager_and_no_recompilation():
    rng = np.random.default_rng(4)
    f = lambda z: jnp.sum(jnp.sin(z) ** 2)  # noqa: E731
    eager = functools.partial(D.integrated_gradients, f, steps=30, method="gauss_legendre")
    ig = jax.jit(eager)
    x1, x2 = _normal(rng, 6), _normal(rng, 6)
    a = ig(x1, jnp.zeros(6))
    b = ig(x2, jnp.ones(6))
    assert ig._cache_size() == 1
    np.testing.assert_allclose(eager(x2, jnp.ones(6)), b, rtol=1e-5, atol=1e-6)
    assert not np.allclose(a, b)


def test_ig_bad_inputs():
    f = lambda z: jnp.sum(z ** 2)  # noqa: E731
    x = jnp.ones(3)
    with pytest.raises(ValueError, match="steps"):
        D.integrated_gradients(f, x, x, steps=1)
    with pytest.raises(ValueError, match="steps"):
        D.integrated_gradients(f, x, x, steps=0, method="riemann_right")
    with pytest.raises(ValueError, match="steps"):
        D.integrated_gradients(f, x, x, steps=10.0)
    with pytest.raises(ValueError, match="method"):
        D.integrated_gradients(f, x, x, method="simpson")
    with pytest.raises(ValueError, match="baseline"):
        D.integrated_gradients(f, x, jnp.ones(4))
    with pytest.raises(ValueError, match="baseline"):
        D.integrated_gradients(lambda z: f(z[0]), (x, x), (x, x, x))
    with pytest.raises(ValueError, match="x must hold floating"):
        D.integrated_gradients(f, jnp.arange(3), x)
    with pytest.raises(ValueError, match="f must return a scalar"):
        D.integrated_gradients(lambda z: z ** 2, x, x)
    xs = jnp.ones((5, 3))
    with pytest.raises(ValueError, match="baselines"):
        D.integrated_gradients_batch(f, xs, jnp.ones((4, 3)))
    with pytest.raises(ValueError, match="aux"):
        D.integrated_gradients_batch(lambda z, a: f(z) * a, xs, jnp.ones(3), jnp.ones(4))
    with pytest.raises(ValueError, match="batch_size"):
        D.integrated_gradients_batch(f, xs, jnp.ones(3), batch_size=0)


# ---------------------------------------------------------------- IG shares

def test_ig_shares_by_hand():
    attr_img = jnp.array([[1.0, -3.0], [0.0, 0.0], [2.0, 2.0]])
    attr_tab = jnp.array([[-4.0], [5.0], [0.0]])
    # L1: (4, 4) -> 50; (0, 5) -> 0; (4, 0) -> 100
    shares = jax.jit(D.ig_shares)
    np.testing.assert_allclose(shares(attr_img, attr_tab), [50.0, 0.0, 100.0], rtol=1e-6)
    assert float(shares(jnp.zeros((1, 2)), jnp.zeros((1, 1)))[0]) == 0.0  # eps: no NaN
    with pytest.raises(ValueError, match="attr_tab"):
        D.ig_shares(attr_img, jnp.ones((2, 1)))


def test_ig_modality_shares_on_a_concat_head(x64):
    # logits = z_img A + z_tab B + c is linear: IG of logit y is exactly
    # A[:, y] (z_img - mean_img) and B[:, y] (z_tab - mean_tab), for any rule
    rng = np.random.default_rng(5)
    a_mat, b_mat = _normal(rng, 4, 3), _normal(rng, 2, 3)
    predict = lambda zi, zt: zi @ a_mat + zt @ b_mat + 0.5  # noqa: E731
    z_img, z_tab = _normal(rng, 6, 4), _normal(rng, 6, 2)
    y = jnp.array([0, 1, 2, 2, 1, 0])
    mean_img, mean_tab = z_img.mean(0), z_tab.mean(0)
    shares = jax.jit(functools.partial(D.ig_modality_shares, predict, steps=3,
                                       method="gauss_legendre"))
    out = shares(z_img, z_tab, y, mean_img, mean_tab)
    ai = np.asarray(a_mat)[:, np.asarray(y)].T * np.asarray(z_img - mean_img)
    at = np.asarray(b_mat)[:, np.asarray(y)].T * np.asarray(z_tab - mean_tab)
    np.testing.assert_allclose(out["attr_img"], ai, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out["attr_tab"], at, rtol=0, atol=1e-12)
    li, lt = np.abs(ai).sum(1), np.abs(at).sum(1)
    share = 100 * li / (li + lt)
    np.testing.assert_allclose(out["img"], share, rtol=1e-9)
    np.testing.assert_allclose(out["img"] + out["tab"], 100.0, rtol=1e-9)
    np.testing.assert_allclose(out["img_mean"], share.mean(), rtol=1e-9)
    np.testing.assert_allclose(out["img_ci95"], 1.96 * share.std() / np.sqrt(6), rtol=1e-9)


# ---------------------------------------------------------------- MCR

def _sign_head(zi, zt):
    """Two-class logits [0, z_img + z_tab]: class 1 iff z_img + z_tab > 0."""
    s = zi[:, 0] + zt[:, 0]
    return jnp.stack([jnp.zeros_like(s), s], axis=1)


def _col(values):
    return jnp.asarray(values, jnp.float32)[:, None]


def test_mcr_image_only():
    # logits = z_img (one-hot of y): full accuracy 1; with z_img -> its mean (0.75, 0.25)
    # every row says class 0: accuracy 3/4, D_img = 1/4; the table is ignored: D_tab = 0
    y = jnp.array([0, 0, 0, 1])
    z_img = jax.nn.one_hot(y, 2)
    z_tab = _normal(np.random.default_rng(6), 4, 3)
    out = MCR(lambda zi, zt: zi, z_img, z_tab, y, z_img.mean(0), z_tab.mean(0))
    np.testing.assert_allclose([out["acc"], out["acc_no_img"], out["acc_no_tab"]],
                               [1.0, 0.75, 1.0])
    np.testing.assert_allclose([out["img"], out["tab"]], [100.0, 0.0], atol=1e-4)


def test_mcr_both_modalities_additive():
    # rows (z_img, z_tab, y), head: class 1 iff z_img + z_tab > 0; means are 0, so
    # "no_img" predicts from z_tab alone and "no_tab" from z_img alone:
    #   (+1,+1,1) x2, (-1,-1,0) x2: all right;  (-1,+3,1) x2: image alone wrong;
    #   (+3,-1,1) x2, (-3,+1,0) x2: table alone wrong.
    # acc = 1, acc_no_img = 6/10, acc_no_tab = 8/10: D_img = 0.4, D_tab = 0.2,
    # MCR_img = 100 * 0.4 / 0.6 = 66.67, MCR_tab = 33.33.
    zi = _col([1, 1, -1, -1, -1, -1, 3, 3, -3, -3])
    zt = _col([1, 1, -1, -1, 3, 3, -1, -1, 1, 1])
    y = jnp.array([1, 1, 0, 0, 1, 1, 1, 1, 0, 0])
    out = MCR(_sign_head, zi, zt, y, jnp.zeros(1), jnp.zeros(1))
    np.testing.assert_allclose([out["acc"], out["acc_no_img"], out["acc_no_tab"]],
                               [1.0, 0.6, 0.8], rtol=1e-6)
    np.testing.assert_allclose([out["d_img"], out["d_tab"]], [0.4, 0.2], rtol=1e-5)
    np.testing.assert_allclose([out["img"], out["tab"]], [200 / 3, 100 / 3], rtol=1e-5)


def test_mcr_harmful_modality_is_negative():
    #   (+2,+1,1) x2, (-2,-1,0) x4: all right;  (+3,-1,1): table alone wrong;
    #   (+1,-3,1) x2: full and table alone wrong, image alone right;
    #   (-1,+3,1): image alone wrong.
    # acc = 8/10, acc_no_img (table alone) = 7/10, acc_no_tab (image alone) = 9/10:
    # D_img = 0.1, D_tab = -0.1 -> MCR_img = +50, MCR_tab = -50 (the table hurts).
    zi = _col([2, 2, -2, -2, -2, -2, 3, 1, 1, -1])
    zt = _col([1, 1, -1, -1, -1, -1, -1, -3, -3, 3])
    y = jnp.array([1, 1, 0, 0, 0, 0, 1, 1, 1, 1])
    out = MCR(_sign_head, zi, zt, y, jnp.zeros(1), jnp.zeros(1))
    np.testing.assert_allclose([out["acc"], out["acc_no_img"], out["acc_no_tab"]],
                               [0.8, 0.7, 0.9], rtol=1e-6)
    np.testing.assert_allclose([out["img"], out["tab"]], [50.0, -50.0], rtol=1e-4)


def test_mcr_regression_by_hand():
    # prediction z_img + z_tab; full: exact (MAE 0). z_img -> 2.5: predictions (3, 2, 3, 2),
    # errors (1.5, .5, .5, 1.5): MAE 1. z_tab -> 0: errors .5 each: MAE .5.
    # D_img = 1, D_tab = .5 -> 66.67 / 33.33.
    predict = lambda zi, zt: zi + zt  # noqa: E731  ([N, 1] values are accepted)
    zi, zt = _col([1, 2, 3, 4]), _col([0.5, -0.5, 0.5, -0.5])
    y = jnp.array([1.5, 1.5, 3.5, 3.5])
    out = MCR(predict, zi, zt, y, jnp.array([2.5]), jnp.zeros(1), task="regression")
    np.testing.assert_allclose([out["mae"], out["mae_no_img"], out["mae_no_tab"]],
                               [0.0, 1.0, 0.5], atol=1e-7)
    np.testing.assert_allclose([out["img"], out["tab"]], [200 / 3, 100 / 3], rtol=1e-5)
    # a table that hurts: targets equal z_img, so removing the table lowers the MAE
    out = MCR(lambda a, b: (a + b)[:, 0], zi, zt, zi[:, 0], jnp.array([2.5]), jnp.zeros(1),
                task="regression")
    # MAE full .5; no_img: |(3,2,3,2) - (1,2,3,4)| = 1; no_tab 0: D_img .5, D_tab -.5
    np.testing.assert_allclose([out["img"], out["tab"]], [50.0, -50.0], rtol=1e-5)


def test_mcr_jit_vmap_and_no_recompilation():
    zi = _col([1, 1, -1, -1, -1, -1, 3, 3, -3, -3])
    zt = _col([1, 1, -1, -1, 3, 3, -1, -1, 1, 1])
    y = jnp.array([1, 1, 0, 0, 1, 1, 1, 1, 0, 0])
    eager = D.mcr(_sign_head, zi, zt, y, jnp.zeros(1), jnp.zeros(1))
    jitted = jax.jit(functools.partial(D.mcr, _sign_head, task="classification"))
    got = jitted(zi, zt, y, jnp.zeros(1), jnp.zeros(1))
    assert got.keys() == eager.keys()
    for k in eager:
        np.testing.assert_allclose(got[k], eager[k], rtol=1e-6)
    # a second dataset (the table flipped) through the same compiled function, then a vmap
    zt2 = -zt
    jitted(zi, zt2, y, jnp.array([0.5]), jnp.zeros(1))
    assert jitted._cache_size() == 1
    vm = jax.vmap(jitted)(jnp.stack([zi, zi]), jnp.stack([zt, zt2]), jnp.stack([y, y]),
                          jnp.zeros((2, 1)), jnp.zeros((2, 1)))
    second = D.mcr(_sign_head, zi, zt2, y, jnp.zeros(1), jnp.zeros(1))
    for k in eager:
        np.testing.assert_allclose(vm[k], [eager[k], second[k]], rtol=1e-6)


def test_mcr_bad_inputs():
    zi, zt, y = jnp.ones((4, 2)), jnp.ones((4, 3)), jnp.zeros(4, jnp.int32)
    head = lambda a, b: jnp.concatenate([a, b], axis=1)  # noqa: E731
    m_i, m_t = jnp.zeros(2), jnp.zeros(3)
    with pytest.raises(ValueError, match="z_tab"):
        D.mcr(head, zi, jnp.ones((5, 3)), y, m_i, m_t)
    with pytest.raises(ValueError, match="y must"):
        D.mcr(head, zi, zt, jnp.zeros(5, jnp.int32), m_i, m_t)
    with pytest.raises(ValueError, match="y must hold integer"):
        D.mcr(head, zi, zt, jnp.zeros(4), m_i, m_t)
    with pytest.raises(ValueError, match="mean_img"):
        D.mcr(head, zi, zt, y, jnp.zeros(3), m_t)
    with pytest.raises(ValueError, match="mean_tab"):
        D.mcr(head, zi, zt, y, m_i, jnp.zeros((1, 3)))
    with pytest.raises(ValueError, match="task"):
        D.mcr(head, zi, zt, y, m_i, m_t, task="ranking")
    with pytest.raises(ValueError, match="predict"):
        D.mcr(lambda a, b: a[:, 0], zi, zt, y, m_i, m_t)
    with pytest.raises(ValueError, match="predict"):
        D.mcr(head, zi, zt, jnp.zeros(4), m_i, m_t, task="regression")
