"""Q-Sched: ramp family, JAQ, grid calibration (vmapped == loop), gradient calibration."""

import inspect
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxpapers import diffusion as dfn
from jaxpapers import quant

D = 16


def _weights(key):
    k1, k2 = jax.random.split(key)
    return {"kernel": jax.random.normal(k1, (D, D)) / 4.0,
            "emb": jax.random.normal(k2, (3, D)) * 0.5}


def _den(w, x, sigma, prompts):
    """A conditional eps-model: a (possibly quantized) linear map plus a prompt embedding."""
    h = quant.dense(x / jnp.sqrt(sigma ** 2 + 1.0), w["kernel"])
    return jnp.tanh(h + w["emb"][prompts])


def _align(images, prompts):
    target = jnp.where(prompts[:, None] == 0, 0.5, -0.5)
    return -jnp.mean((images - target) ** 2, axis=-1)


def _quality(images):
    return -jnp.mean(jnp.abs(images), axis=-1)


def _problem(key, steps=3, sampler="euler_ancestral"):
    kn, ks = jax.random.split(key)
    prompts = jnp.array([0, 1, 2, 0, 1, 2])
    return dfn.CalibrationProblem(
        prompts=prompts, noise=jax.random.normal(kn, (6, D)), key=ks, k=jnp.float32(0.5),
        schedule=dfn.EDMSchedule(jnp.float32(0.01), jnp.float32(5.0), jnp.float32(7.0)),
        denoise_fn=_den, align_fn=_align, quality_fn=_quality, sampler=sampler, steps=steps)


def _qweights(key):
    return quant.quantize_params(_weights(key), quant.QuantRule(pattern="kernel", bits=4,
                                                                group_size=8, min_size=0))


def test_ramp_family_closed_form():
    c = dfn.ramp_coeffs(0.8, 1.15, 5)
    np.testing.assert_allclose(np.asarray(c.m), np.linspace(0.8, 1.0, 5), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(c.s), np.linspace(1.15, 1.0, 5), rtol=1e-6)
    one = dfn.ramp_coeffs(0.9, 1.1, 1)
    assert float(one.m[0]) == pytest.approx(0.9) and float(one.s[0]) == pytest.approx(1.1)
    g = jax.grad(lambda a: jnp.sum(dfn.ramp_coeffs(a, 1.0, 4).m))(0.9)
    assert float(g) == pytest.approx(np.sum(1 - np.linspace(0, 1, 4)))


def test_jaq_is_alignment_plus_k_quality(key):
    x = jax.random.normal(key, (5, D))
    p = jnp.array([0, 1, 0, 2, 1])
    j, a, q = dfn.jaq_score(x, p, align_fn=_align, quality_fn=_quality, k=2.5)
    a_np = np.mean(-np.mean((np.asarray(x) - np.where(np.asarray(p)[:, None] == 0, .5, -.5))
                            ** 2, -1))
    q_np = np.mean(-np.mean(np.abs(np.asarray(x)), -1))
    np.testing.assert_allclose([float(a), float(q), float(j)], [a_np, q_np, a_np + 2.5 * q_np],
                               rtol=1e-5)


def test_calibrate_grid_equals_loop_and_picks_argmax(key):
    w = _qweights(key)
    prob = _problem(jax.random.key(1))
    mv = jnp.array([0.8, 1.0, 1.2])
    sv = jnp.array([0.9, 1.0, 1.1, 1.2])
    cal = dfn.calibrate_grid(w, prob, m_values=mv, s_values=sv)
    assert cal.jaq.shape == (12,)
    loop = []
    jaq = jax.jit(dfn.jaq_objective)  # one compilation for the whole loop
    for m0 in np.asarray(mv):
        for s0 in np.asarray(sv):
            j, _, _ = jaq(w, dfn.ramp_coeffs(m0, s0, prob.steps), prob)
            loop.append(float(j))
    np.testing.assert_allclose(np.asarray(cal.jaq), loop, rtol=1e-4, atol=1e-5)
    i = int(np.argmax(loop))
    assert int(cal.best_index) == i
    np.testing.assert_allclose(np.asarray(cal.best.m),
                               np.asarray(dfn.ramp_coeffs(cal.m0[i], cal.s0[i], 3).m))
    # chunked evaluation (lax.map with batch_size) gives the same scores
    cal2 = dfn.calibrate_grid(w, prob, m_values=mv, s_values=sv, batch_size=5)
    np.testing.assert_allclose(np.asarray(cal2.jaq), np.asarray(cal.jaq), rtol=1e-5, atol=1e-6)


def _largest_constant(hlo_text: str) -> int:
    """Length of the longest ``dense<...>`` literal: weights baked in as constants would show."""
    return max((len(m) for m in re.findall(r"dense<[^>]*>", hlo_text)), default=0)


def test_calibrate_grid_compiles_once_for_new_values(key, monkeypatch):
    from jaxpapers.diffusion import qsched

    chex.clear_trace_counter()
    monkeypatch.setattr(qsched, "_grid_scores_jit", jax.jit(
        chex.assert_max_traces(qsched._grid_scores, n=1), static_argnames=("batch_size",)))
    w = _qweights(key)
    prob = _problem(jax.random.key(2))
    dfn.calibrate_grid(w, prob, m_values=jnp.linspace(0.8, 1.2, 3),
                       s_values=jnp.linspace(0.8, 1.2, 3))
    dfn.calibrate_grid(w, prob, m_values=jnp.linspace(0.7, 1.3, 3),
                       s_values=jnp.linspace(0.9, 1.1, 3))
    # a new problem with fresh noise / prompts / k (same shapes) also reuses the compilation
    dfn.calibrate_grid(w, _problem(jax.random.key(3)), m_values=jnp.linspace(0.7, 1.3, 3),
                       s_values=jnp.linspace(0.9, 1.1, 3))


def test_calibrate_gradient_compiles_once(key, monkeypatch):
    """A second identical call, and one with new weights / noise / box, reuse one trace."""
    from jaxpapers.diffusion import qsched

    chex.clear_trace_counter()
    monkeypatch.setattr(qsched, "_gradient_loop_jit", jax.jit(
        chex.assert_max_traces(qsched._gradient_loop, n=1),
        static_argnames=qsched._GRADIENT_STATIC))
    opt = optax.adam(0.05)  # static: the same object is the same program
    kw = dict(optimizer=opt, num_iters=4, per_step=False)
    w, prob = _qweights(key), _problem(jax.random.key(1))
    first = dfn.calibrate_gradient(w, prob, box=(0.9, 1.1), **kw)
    second = dfn.calibrate_gradient(w, prob, box=(0.9, 1.1), **kw)
    chex.assert_trees_all_equal(first, second)
    other = dfn.calibrate_gradient(_qweights(jax.random.key(7)), _problem(jax.random.key(2)),
                                   box=(0.8, 1.2), **kw)
    assert not np.array_equal(np.asarray(other.history), np.asarray(first.history))


def test_calibrate_gradient_weights_are_arguments_not_constants(key):
    from jaxpapers.diffusion import qsched

    w, prob = _qweights(key), _problem(jax.random.key(1))
    theta = {"m": jnp.float32(1.0), "s": jnp.float32(1.0)}
    lowered = qsched._gradient_loop_jit.lower(
        w, prob, theta, jnp.array([0.9, 1.1], jnp.float32), optimizer=optax.adam(0.05),
        num_iters=2, fam=qsched._Family(per_step=False, steps=prob.steps))
    text = lowered.as_text()
    # the [D, D] kernel and [3, D] embedding would be literals of >= 3 * D * 8 hex characters
    assert _largest_constant(text) < 3 * D * 8, _largest_constant(text)
    n_args = len(jax.tree.leaves(lowered.args_info))
    assert n_args >= len(jax.tree.leaves(w)) + len(jax.tree.leaves(prob))


def test_calibration_sees_only_quantized_params(key):
    for fn in (dfn.calibrate_grid, dfn.calibrate_gradient):
        params = list(inspect.signature(fn).parameters)
        assert params[:2] == ["quant_params", "problem"]
        assert not any("fp" in p or "float_params" in p or "teacher" in p for p in params)
    prob = _problem(jax.random.key(1))
    with pytest.raises(ValueError, match="QuantizedArray"):
        dfn.calibrate_grid(_weights(key), prob, m_values=jnp.ones(2), s_values=jnp.ones(2))
    with pytest.raises(ValueError, match="QuantizedArray"):
        dfn.calibrate_gradient(_weights(key), prob, optimizer=optax.adam(0.01), num_iters=2)
    # the full-precision control is explicit
    dfn.calibrate_grid(_weights(key), prob, m_values=jnp.ones(1), s_values=jnp.ones(1),
                       allow_float=True)


def test_gradient_calibration_respects_box_and_improves_jaq(key):
    w = _qweights(key)
    prob = _problem(jax.random.key(4), sampler="euler")
    j0, _, _ = dfn.jaq_objective(w, dfn.ones_coeffs(3), prob)
    res = dfn.calibrate_gradient(w, prob, optimizer=optax.adam(0.05), num_iters=30,
                                 per_step=False, box=(0.9, 1.1))
    assert res.history.shape == (30,)
    assert float(jnp.min(res.coeffs.m)) >= 0.9 - 1e-6 and float(jnp.max(res.coeffs.m)) <= 1.1
    assert float(jnp.min(res.coeffs.s)) >= 0.9 - 1e-6 and float(jnp.max(res.coeffs.s)) <= 1.1
    j1, _, _ = dfn.jaq_objective(w, res.coeffs, prob)
    assert float(j1) >= float(j0) - 1e-6
    free = dfn.calibrate_gradient(w, prob, optimizer=optax.adam(0.05), num_iters=30,
                                  per_step=True, box=None)
    assert free.coeffs.m.shape == (3,)
    j2, _, _ = dfn.jaq_objective(w, free.coeffs, prob)
    # more freedom and no box: at least as good on the proxy as the boxed ramp's start
    assert float(j2) >= float(j0) - 1e-6


@pytest.mark.parametrize("kwargs, match", [
    (dict(m_values=jnp.ones((2, 2)), s_values=jnp.ones(2)), "m_values"),
    (dict(m_values=jnp.ones(2), s_values=jnp.ones(0)), "s_values"),
])
def test_bad_grid_arguments(key, kwargs, match):
    with pytest.raises(ValueError, match=match):
        dfn.calibrate_grid(_qweights(key), _problem(jax.random.key(1)), **kwargs)


def test_bad_gradient_arguments(key):
    w, prob = _qweights(key), _problem(jax.random.key(1))
    with pytest.raises(ValueError, match="num_iters"):
        dfn.calibrate_gradient(w, prob, optimizer=optax.adam(0.1), num_iters=0)
    with pytest.raises(ValueError, match="box"):
        dfn.calibrate_gradient(w, prob, optimizer=optax.adam(0.1), num_iters=2, box=(1.2, 0.8))
    with pytest.raises(ValueError, match="coeffs"):
        dfn.calibrate_gradient(w, prob, optimizer=optax.adam(0.1), num_iters=2,
                               init=dfn.ones_coeffs(5))
