"""Diffusion-DPO: float64 reference, log 2 at the reference, gradient direction, jit / vmap /
no-recompile, a short training run on a toy preference, and input validation."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import diffusion as dfn
from jaxpapers.diffusion import preference

D, C = 4, 2
SD = 0.5


def _problem(key, b=8, scale=1.0):
    """Two different random denoisers and a batch of ``b`` pairs with their sigma and noise."""
    k = jax.random.split(key, 7)
    params = dfn.init_mlp(k[0], dim=D, num_classes=C, hidden=16, depth=2)
    ref = dfn.init_mlp(k[1], dim=D, num_classes=C, hidden=16, depth=2)
    x_w = scale * jax.random.normal(k[2], (b, D))
    x_l = scale * jax.random.normal(k[3], (b, D))
    labels = jax.random.randint(k[4], (b,), 0, C)
    sigma = jnp.exp(-1.2 + 1.2 * jax.random.normal(k[5], (b,)))
    noise = jax.random.normal(k[6], (b, D))
    return params, ref, x_w, x_l, labels, sigma, noise


def _direct(params, ref, x_w, x_l, labels, sigma, noise, beta):
    """The Diffusion-DPO loss pair by pair, written out with edm_denoiser and NumPy."""

    denoise = jax.jit(dfn.edm_denoiser, static_argnames="sigma_data")  # one example at a time

    def err(p, i, x):
        s = sigma[i]
        den = np.asarray(denoise(p, x[i] + s * noise[i], s, labels[i], sigma_data=SD))
        lam = (float(s) ** 2 + SD ** 2) / (float(s) * SD) ** 2
        return lam * np.mean((den - np.asarray(x[i])) ** 2)

    inside = np.array([-(beta / 2) * ((err(params, i, x_w) - err(params, i, x_l))
                                      - (err(ref, i, x_w) - err(ref, i, x_l)))
                       for i in range(x_w.shape[0])])
    return np.mean(np.log1p(np.exp(-inside))), inside


def test_loss_matches_direct_computation_float64(x64, key):
    args = _problem(key)
    assert args[2].dtype == jnp.float64
    beta = 20.0
    terms = dfn.diffusion_dpo_terms(*args, beta=beta, sigma_data=SD)
    want, inside = _direct(*args, beta)
    assert abs(np.asarray(inside)).max() > 0.1  # a non-trivial case, not all at log 2
    np.testing.assert_allclose(float(terms["loss"]), want, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(terms["inside"]), inside, rtol=1e-10, atol=1e-12)
    assert float(terms["implicit_accuracy"]) == pytest.approx(np.mean(inside > 0), abs=1e-15)
    np.testing.assert_allclose(float(terms["margin"]), inside.mean(), rtol=1e-10)


def test_reference_copy_gives_exactly_log2(x64, key):
    params, _, x_w, x_l, labels, sigma, noise = _problem(key)
    ref = jax.tree.map(jnp.copy, params)
    for beta in (0.1, 5.0, 5000.0):
        t = dfn.diffusion_dpo_terms(params, ref, x_w, x_l, labels, sigma, noise, beta=beta)
        assert np.all(np.asarray(t["inside"]) == 0.0)
        assert float(t["loss"]) == pytest.approx(np.log(2.0), rel=1e-15, abs=0)
        assert float(t["implicit_accuracy"]) == 0.0  # inside > 0 is strict


def _sgd(p, g, lr):
    return jax.tree.map(lambda a, b: a - lr * b, p, g)


@pytest.mark.parametrize("start", ["at_ref", "perturbed"])
def test_one_sgd_step_increases_the_margin(x64, key, start):
    k1, k2 = jax.random.split(key)
    _, ref, x_w, x_l, labels, sigma, noise = _problem(k1)
    params = ref
    if start == "perturbed":
        leaves, tree = jax.tree.flatten(ref)
        ks = jax.random.split(k2, len(leaves))
        params = jax.tree.unflatten(tree, [a + 0.05 * jax.random.normal(k, a.shape)
                                           for a, k in zip(leaves, ks)])
    beta = 10.0
    kw = dict(beta=beta, sigma_data=SD)
    margin = jax.jit(lambda p: dfn.diffusion_dpo_terms(p, ref, x_w, x_l, labels, sigma, noise,
                                                       **kw)["margin"])
    loss2 = lambda p, r: dfn.diffusion_dpo_loss(p, r, x_w, x_l, labels, sigma, noise, **kw)
    g, g_ref = jax.jit(jax.grad(loss2, argnums=(0, 1)))(params, ref)
    # the reference is frozen: no gradient reaches it
    assert all(float(jnp.abs(a).max()) == 0.0 for a in jax.tree.leaves(g_ref))
    g_margin = jax.jit(jax.grad(margin))(params)
    if start == "at_ref":
        # at params == ref every inside is 0: grad loss = -sigmoid(0) grad mean(inside)
        chex.assert_trees_all_close(g, jax.tree.map(lambda a: -0.5 * a, g_margin), rtol=1e-10,
                                    atol=1e-14)
    lr = 1e-4
    new = _sgd(params, g, lr)
    gain = float(margin(new) - margin(params))
    first_order = lr * sum(float(jnp.vdot(a, b)) for a, b in
                           zip(jax.tree.leaves(g_margin), jax.tree.leaves(g)))
    first_order = -first_order  # step is -lr g: d margin = -lr <grad margin, g>
    assert first_order > 0 and gain > 0
    # the margin is smooth in params: the first-order prediction is accurate for a small step
    assert gain == pytest.approx(first_order, rel=0.05)
    # and the model's own margin e(x_l) - e(x_w) grew relative to the (unchanged) reference
    terms = jax.jit(lambda p: dfn.diffusion_dpo_terms(p, ref, x_w, x_l, labels, sigma, noise,
                                                      **kw))
    d_old, d_new = terms(params), terms(new)
    assert float(jnp.mean(d_new["model_diff"])) < float(jnp.mean(d_old["model_diff"]))
    assert np.array_equal(np.asarray(d_new["ref_diff"]), np.asarray(d_old["ref_diff"]))


def test_jit_equals_eager_and_vmap_over_beta_equals_loop(x64, key):
    # float64: in float32, inside = -(beta/2)(e_w - e_l - ...) cancels O(1) errors, and jit's
    # fusion changes their last bits (~1e-6 absolute in inside); float64 leaves ~1e-15
    args = _problem(key)
    eager = dfn.diffusion_dpo_terms(*args, beta=7.0)
    jitted = jax.jit(dfn.diffusion_dpo_terms, static_argnames="sigma_data")(*args, beta=7.0)
    chex.assert_trees_all_close(jitted, eager, rtol=1e-10, atol=1e-12)
    betas = jnp.array([0.5, 7.0, 300.0])
    vm = jax.vmap(lambda b: dfn.diffusion_dpo_loss(*args, beta=b))(betas)
    one = jax.jit(dfn.diffusion_dpo_loss)
    loop = jnp.stack([one(*args, beta=b) for b in betas])
    np.testing.assert_allclose(np.asarray(vm), np.asarray(loop), rtol=1e-10)
    # at params == ref the loss is log 2 exactly under jit too (one evaluation for both)
    same = jax.jit(dfn.diffusion_dpo_terms)(args[0], args[0], *args[2:], beta=7.0)
    assert np.all(np.asarray(same["inside"]) == 0.0)
    # beta is differentiable: d loss / d beta = mean(-sigmoid(-inside) inside / beta)
    t = dfn.diffusion_dpo_terms(*args, beta=7.0)
    db = jax.grad(lambda b: dfn.diffusion_dpo_loss(*args, beta=b))(7.0)
    want = jnp.mean(-jax.nn.sigmoid(-t["inside"]) * t["inside"] / 7.0)
    np.testing.assert_allclose(float(db), float(want), rtol=1e-4)


def _toy_pairs(key, n):
    """Winners near prototype A of their class, losers near prototype B (systematic)."""
    protos_w = jnp.array([[0.8, -0.8, 0.8, -0.8], [-0.6, 0.6, 0.6, -0.6]])
    protos_l = jnp.array([[-0.8, 0.8, -0.8, 0.8], [0.6, -0.6, -0.6, 0.6]])
    kw, kl = jax.random.split(key)
    labels = jnp.arange(n) % C
    x_w = protos_w[labels] + 0.05 * jax.random.normal(kw, (n, D))
    x_l = protos_l[labels] + 0.05 * jax.random.normal(kl, (n, D))
    return x_w, x_l, labels


def test_train_dpo_compiles_once_and_is_deterministic(monkeypatch):
    chex.clear_trace_counter()
    monkeypatch.setattr(preference, "_train_dpo_jit", jax.jit(
        chex.assert_max_traces(preference._train_dpo_run, n=1),
        static_argnames=("num_steps", "batch_size", "sigma_data", "p_mean", "p_std")))
    x_w, x_l, labels = _toy_pairs(jax.random.key(1), 16)
    p = dfn.init_mlp(jax.random.key(0), dim=D, num_classes=C, hidden=8, depth=1)
    kw = dict(num_steps=4, batch_size=8)
    a = dfn.train_dpo(p, p, jax.random.key(2), x_w, x_l, labels, learning_rate=1e-3, beta=5.0,
                      **kw)
    b = dfn.train_dpo(p, p, jax.random.key(2), x_w, x_l, labels, learning_rate=1e-3, beta=5.0,
                      **kw)
    chex.assert_trees_all_equal(a, b)  # same key, same inputs: bit for bit
    # new beta, new learning rate, new weights and pairs: the same compiled scan
    c = dfn.train_dpo(a[0], p, jax.random.key(3), x_w + 0.1, x_l, labels, learning_rate=3e-3,
                      beta=50.0, **kw)
    assert not np.array_equal(np.asarray(c[1]["loss"]), np.asarray(a[1]["loss"]))
    assert a[1]["loss"].shape == (4,) and float(a[1]["loss"][0]) == pytest.approx(np.log(2))


def test_train_dpo_learns_the_preference():
    """On a toy where winners sit near one prototype per class and losers near another, DPO
    makes the model denoise winners better than the reference does, relative to losers: the
    implicit accuracy on *fresh* pairs, sigmas and noise rises well above 1/2. With 512
    evaluation pairs a chance-level accuracy has standard deviation ~0.022, so 0.7 is ~9 sd."""
    x_w, x_l, labels = _toy_pairs(jax.random.key(1), 128)
    ref = dfn.init_mlp(jax.random.key(0), dim=D, num_classes=C, hidden=16, depth=1)
    params, hist = dfn.train_dpo(ref, ref, jax.random.key(2), x_w, x_l, labels, num_steps=40,
                                 batch_size=32, learning_rate=1e-3, beta=10.0)
    acc, loss = np.asarray(hist["implicit_accuracy"]), np.asarray(hist["loss"])
    assert acc[0] == 0.0 and loss[0] == np.float32(np.log(2))  # params == ref: inside = 0
    assert acc[-10:].mean() > 0.7
    assert loss[-10:].mean() < 0.75 * np.log(2)  # observed ~0.41 = 0.6 log 2

    n = 512
    kp, ks, kn = jax.random.split(jax.random.key(7), 3)
    ew, el, ey = _toy_pairs(kp, n)
    sigma = jnp.exp(-1.2 + 1.2 * jax.random.normal(ks, (n,)))
    noise = jax.random.normal(kn, (n, D))
    t = jax.jit(dfn.diffusion_dpo_terms)(params, ref, ew, el, ey, sigma, noise, beta=10.0)
    assert float(t["implicit_accuracy"]) > 0.7
    assert float(t["margin"]) > 0.0


def test_bad_inputs_name_the_argument(key):
    params, ref, x_w, x_l, labels, sigma, noise = _problem(key, b=4)
    f = dfn.diffusion_dpo_terms
    with pytest.raises(ValueError, match="x_w"):
        f(params, ref, x_w[0], x_l[0], labels, sigma, noise, beta=1.0)
    with pytest.raises(ValueError, match="x_l"):
        f(params, ref, x_w, x_l[:3], labels, sigma, noise, beta=1.0)
    with pytest.raises(ValueError, match="labels"):
        f(params, ref, x_w, x_l, labels[:3], sigma, noise, beta=1.0)
    with pytest.raises(ValueError, match="sigma"):
        f(params, ref, x_w, x_l, labels, sigma[:2], noise, beta=1.0)
    with pytest.raises(ValueError, match="sigma"):
        f(params, ref, x_w, x_l, labels, -sigma, noise, beta=1.0)
    with pytest.raises(ValueError, match="noise"):
        f(params, ref, x_w, x_l, labels, sigma, noise[:, :2], beta=1.0)
    with pytest.raises(ValueError, match="beta"):
        f(params, ref, x_w, x_l, labels, sigma, noise, beta=0.0)
    with pytest.raises(ValueError, match="beta"):
        f(params, ref, x_w, x_l, labels, sigma, noise, beta=jnp.ones(2))
    small = dfn.init_mlp(key, dim=D, num_classes=C, hidden=8, depth=2)
    with pytest.raises(ValueError, match="ref_params"):
        f(params, small, x_w, x_l, labels, sigma, noise, beta=1.0)
    t = dict(num_steps=2, batch_size=2, learning_rate=1e-3, beta=1.0)
    with pytest.raises(ValueError, match="x_l"):
        dfn.train_dpo(params, ref, key, x_w, x_l[:, :2], labels, **t)
    with pytest.raises(ValueError, match="labels"):
        dfn.train_dpo(params, ref, key, x_w, x_l, labels[:, None], **t)
    with pytest.raises(ValueError, match="num_steps"):
        dfn.train_dpo(params, ref, key, x_w, x_l, labels, **{**t, "num_steps": 0})
    with pytest.raises(ValueError, match="beta"):
        dfn.train_dpo(params, ref, key, x_w, x_l, labels, **{**t, "beta": -1.0})
    with pytest.raises(ValueError, match="learning_rate"):
        dfn.train_dpo(params, ref, key, x_w, x_l, labels, **{**t, "learning_rate": 0.0})
    with pytest.raises(TypeError, match="key"):
        dfn.train_dpo(params, ref, jax.random.PRNGKey(0), x_w, x_l, labels, **t)
