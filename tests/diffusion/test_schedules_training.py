"""Schedules (closed forms) and the training utilities on a toy two-class problem."""

import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import diffusion as dfn
from jaxpapers import quant


def test_preconditioning_closed_forms(x64):
    sig = np.array([0.002, 0.1, 0.5, 2.0, 80.0])
    sd = 0.5
    c_skip, c_out, c_in, c_noise = dfn.edm_preconditioning(jnp.asarray(sig), sd)
    np.testing.assert_allclose(np.asarray(c_skip), sd ** 2 / (sig ** 2 + sd ** 2), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(c_out), sig * sd / np.sqrt(sig ** 2 + sd ** 2),
                               rtol=1e-12)
    np.testing.assert_allclose(np.asarray(c_in), 1 / np.sqrt(sig ** 2 + sd ** 2), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(c_noise), np.log(sig) / 4, rtol=1e-12)
    # EDM's design: the training target F = (x0 - c_skip (x0 + sigma n)) / c_out has unit
    # variance when x0 has variance sd^2 (EDM App. B.6)
    var_f = ((1 - c_skip) ** 2 * sd ** 2 + c_skip ** 2 * sig ** 2) / c_out ** 2
    np.testing.assert_allclose(np.asarray(var_f), np.ones_like(sig), rtol=1e-9)
    cs, co, _, _ = dfn.consistency_preconditioning(jnp.asarray(sig), sd, 0.002)
    assert float(cs[0]) == 1.0 and float(co[0]) == 0.0  # boundary condition f(x, smin) = x
    np.testing.assert_allclose(np.asarray(cs[-1]), np.asarray(c_skip[-1]), rtol=1e-3)


def test_karras_and_vp_grids(x64):
    s = np.asarray(dfn.karras_sigmas(6, 0.002, 80.0, 7.0))
    assert s[0] == pytest.approx(80.0) and s[-2] == pytest.approx(0.002) and s[-1] == 0.0
    assert np.all(np.diff(s) < 0)
    rho = 7.0
    i = np.arange(6) / 5
    ref = (80 ** (1 / rho) + i * (0.002 ** (1 / rho) - 80 ** (1 / rho))) ** rho
    np.testing.assert_allclose(s[:-1], ref, rtol=1e-12)
    ac = dfn.ddpm_alphas_cumprod(1000)
    g = dfn.discretize(dfn.VPSchedule(ac, jnp.float64(1.0), spacing="trailing"), 4)
    assert np.asarray(g.model_in).tolist() == [999, 749, 499, 249]
    assert float(g.level_next[-1]) == 1.0
    g = dfn.discretize(dfn.VPSchedule(ac, jnp.float64(1.0), spacing="leading"), 4)
    assert np.asarray(g.model_in).tolist() == [750, 500, 250, 0]
    np.testing.assert_allclose(np.asarray(g.level), np.asarray(ac)[[750, 500, 250, 0]])
    betas = np.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000) ** 2
    np.testing.assert_allclose(np.asarray(ac), np.cumprod(1 - betas), rtol=1e-12)


def test_grid_is_differentiable_in_schedule_fields():
    f = lambda smax: jnp.sum(dfn.discretize(dfn.EDMSchedule(jnp.float32(0.002), smax,
                                                            jnp.float32(7.0)), 4).level)
    g = jax.grad(f)(jnp.float32(20.0))
    eps = 1e-2
    fd = (f(jnp.float32(20.0 + eps)) - f(jnp.float32(20.0 - eps))) / (2 * eps)
    assert float(g) == pytest.approx(float(fd), rel=1e-2)


PROTOS = jnp.array([[0.8, -0.8, 0.8, -0.8], [-0.6, 0.6, 0.6, -0.6]])


@pytest.fixture(scope="module")
def toy_teacher():
    labels = jnp.arange(256) % 2
    data = PROTOS[labels] + 0.05 * jax.random.normal(jax.random.key(1), (256, 4))
    p = dfn.init_mlp(jax.random.key(0), dim=4, num_classes=2, hidden=64, depth=2)
    p, losses = dfn.train_edm(p, jax.random.key(2), data, labels, num_steps=800,
                              batch_size=64, learning_rate=3e-3)
    return p, data, labels, np.asarray(losses)


def _sample(den, params, steps, sampler, prediction, n=200):
    labels = jnp.arange(n) % 2
    sch = dfn.EDMSchedule(jnp.float32(0.002), jnp.float32(10.0), jnp.float32(7.0),
                          prediction=prediction)
    run = jax.jit(dfn.sample, static_argnums=0, static_argnames=("sampler", "steps"))
    x = run(lambda p, x, t: jax.vmap(lambda a, b: den(p, a, t, b))(x, labels), params,
            jax.random.key(5), jax.random.normal(jax.random.key(6), (n, 4)),
            schedule=sch, sampler=sampler, steps=steps)
    return np.asarray(x), np.asarray(labels)


def _own_proto_rate(x, labels):
    d = np.linalg.norm(x[:, None, :] - np.asarray(PROTOS)[None], axis=-1)
    return float(np.mean(np.argmin(d, axis=1) == labels)), float(
        np.mean(d[np.arange(len(x)), labels]))


def test_edm_teacher_learns_the_conditional_law_and_runs_quantized(toy_teacher):
    p, _, _, losses = toy_teacher
    assert losses[-100:].mean() < 0.5 * losses[:100].mean()

    def den_x0(w, x, t, y):
        return dfn.edm_denoiser(w, x, t, y)

    x, labels = _sample(den_x0, p, 16, "euler", "sample")
    rate, dist = _own_proto_rate(x, labels)
    assert rate > 0.95 and dist < 0.3, (rate, dist)  # prototypes 1.6+ apart, noise 0.05
    q = quant.quantize_params(p, quant.QuantRule(pattern="kernel", bits=8, group_size=16,
                                                 min_size=0))
    assert any(isinstance(l, quant.QuantizedArray) for l in jax.tree.leaves(
        q, is_leaf=lambda v: isinstance(v, quant.QuantizedArray)))
    xq, _ = _sample(den_x0, q, 16, "euler", "sample")
    assert np.mean(np.abs(xq - x)) < 0.05  # W8 barely moves the samples


def test_consistency_student_boundary_and_few_step_quality(toy_teacher):
    p, data, labels, _ = toy_teacher
    x = jax.random.normal(jax.random.key(0), (4,))
    np.testing.assert_allclose(np.asarray(dfn.consistency_denoiser(p, x, 0.002, 1)),
                               np.asarray(x), atol=1e-6)
    student, losses = dfn.distill_consistency(p, jax.random.key(3), data, labels,
                                              num_steps=300, batch_size=64, sigma_max=10.0,
                                              num_scales=18)
    assert np.all(np.isfinite(np.asarray(losses)))
    xs, lab = _sample(dfn.consistency_denoiser, student, 2, "lcm", "sample")
    rate, dist = _own_proto_rate(xs, lab)
    assert rate > 0.9 and dist < 0.5, (rate, dist)


def test_bad_training_arguments():
    with pytest.raises(ValueError, match="labels"):
        dfn.train_edm({}, jax.random.key(1), jnp.ones((8, 4)), jnp.zeros(7, int), num_steps=2)
    with pytest.raises(ValueError, match="dim"):
        dfn.init_mlp(jax.random.key(0), dim=0, num_classes=2)


def _tiny_data(n=32):
    labels = jnp.arange(n) % 2
    return PROTOS[labels] + 0.05 * jax.random.normal(jax.random.key(1), (n, 4)), labels


def test_training_compiles_once(monkeypatch):
    """A second train_edm / distill_consistency call (new weights, data, learning rate) reuses
    the module-level compilation."""
    from jaxpapers.diffusion import training

    chex.clear_trace_counter()
    monkeypatch.setattr(training, "_train_edm_jit", jax.jit(
        chex.assert_max_traces(training._train_edm_run, n=1),
        static_argnames=("num_steps", "batch_size", "sigma_data")))
    monkeypatch.setattr(training, "_distill_jit", jax.jit(
        chex.assert_max_traces(training._distill_run, n=1),
        static_argnames=("num_steps", "batch_size", "num_scales", "sigma_min", "ema",
                         "sigma_data")))
    data, labels = _tiny_data()
    p = dfn.init_mlp(jax.random.key(0), dim=4, num_classes=2, hidden=16, depth=1)
    kw = dict(num_steps=5, batch_size=8)
    p1, l1 = dfn.train_edm(p, jax.random.key(2), data, labels, **kw)
    p2, l2 = dfn.train_edm(p, jax.random.key(2), data, labels, **kw)
    chex.assert_trees_all_equal((p1, l1), (p2, l2))
    dfn.train_edm(p1, jax.random.key(3), data + 0.1, labels, learning_rate=1e-3, **kw)
    s1, d1 = dfn.distill_consistency(p1, jax.random.key(4), data, labels, num_scales=6, **kw)
    s2, d2 = dfn.distill_consistency(p1, jax.random.key(4), data, labels, num_scales=6, **kw)
    chex.assert_trees_all_equal((s1, d1), (s2, d2))
    dfn.distill_consistency(p2, jax.random.key(5), data, labels, num_scales=6, sigma_max=5.0,
                            learning_rate=1e-3, **kw)


def test_training_weights_and_data_are_not_constants():
    """The lowered program does not grow with the weight count (weights are parameters)."""
    from jaxpapers.diffusion import training

    data, labels = _tiny_data()
    sizes, largest = [], []
    for hidden in (16, 256):
        p = dfn.init_mlp(jax.random.key(0), dim=4, num_classes=2, hidden=hidden, depth=2)
        text = training._train_edm_jit.lower(
            p, jax.random.key(2), data, jnp.asarray(labels, jnp.int32), jnp.asarray(1e-3),
            num_steps=3, batch_size=8, sigma_data=0.5).as_text()
        sizes.append(len(text))
        largest.append(max(len(m) for m in re.findall(r"dense<[^>]*>", text)))
        # teacher weights in distillation too
        sig = dfn.karras_sigmas(6, 0.002, 10.0)[:-1]
        text = training._distill_jit.lower(
            p, jax.random.key(2), data, jnp.asarray(labels, jnp.int32), sig, jnp.asarray(1e-3),
            num_steps=3, batch_size=8, num_scales=6, sigma_min=0.002, ema=0.95,
            sigma_data=0.5).as_text()
        largest.append(max(len(m) for m in re.findall(r"dense<[^>]*>", text)))
    # 256 x 256 float32 weights baked in would add ~500 kB of hex; the data [32, 4] ~1 kB
    assert sizes[1] - sizes[0] < 5_000, sizes
    assert max(largest) < 32 * 4 * 8, largest


def test_bad_training_integers():
    data, labels = _tiny_data()
    p = dfn.init_mlp(jax.random.key(0), dim=4, num_classes=2, hidden=8, depth=1)
    with pytest.raises(TypeError, match="num_steps"):
        dfn.train_edm(p, jax.random.key(1), data, labels, num_steps=True)
    with pytest.raises(ValueError, match="batch_size"):
        dfn.train_edm(p, jax.random.key(1), data, labels, num_steps=2, batch_size=0)
    with pytest.raises(ValueError, match="num_scales"):
        dfn.distill_consistency(p, jax.random.key(1), data, labels, num_steps=2, num_scales=1)
