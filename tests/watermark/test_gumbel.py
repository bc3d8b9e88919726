"""gumbel_topk: exact k-hot Plackett-Luce samples forward, successive-softmax gradient backward."""

from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import watermark as wm
from tests.watermark import _reference as ref


def _key(name: str) -> jax.Array:
    return jax.random.key(zlib.crc32(name.encode()))


def _scores(name: str, v: int = 16) -> jax.Array:
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    return jnp.asarray(rng.normal(size=v) * 1.2, jnp.float32)


def relaxed_topk(perturbed, tau, k, allowed=None):
    """The documented relaxation, written out: a_1 = s~, p_j = softmax(a_j / tau) over the allowed
    entries, a_{j+1} = a_j + log(max(1 - p_j, tiny)); returns sum_j p_j."""
    tiny = jnp.finfo(perturbed.dtype).tiny
    a = perturbed
    total = jnp.zeros_like(perturbed)
    for _ in range(k):
        z = a / tau
        if allowed is not None:
            z = jnp.where(allowed, z, -jnp.inf)
        p = jnp.exp(z - jnp.max(z))
        p = p / jnp.sum(p)
        total = total + p
        a = a + jnp.log(jnp.maximum(1 - p, tiny))
    return total


@pytest.mark.parametrize("k", [1, 4, 16])
def test_exactly_k_hot_and_equal_to_top_k(k):
    s = _scores(f"hot{k}")
    for i, kk in enumerate(jax.random.split(_key(f"hot{k}"), 5)):
        out = np.asarray(wm.gumbel_topk(kk, s, k=k))
        assert set(np.unique(out).tolist()) <= {0.0, 1.0} and out.sum() == k
        # the chosen set is the top k of scores + G, G from the documented gumbel draw
        g = np.asarray(jax.random.gumbel(kk, (16,), jnp.float32))
        top = np.argsort(-(np.asarray(s) + g))[:k]
        assert set(np.flatnonzero(out).tolist()) == set(top.tolist())


def test_mask_allows_only_allowed_entries():
    s = _scores("mask")
    allowed = np.zeros(16, bool)
    allowed[[1, 3, 4, 8, 9, 15]] = True
    for kk in jax.random.split(_key("mask"), 20):
        out = np.asarray(wm.gumbel_topk(kk, s, k=4, mask=jnp.asarray(allowed)))
        assert out.sum() == 4 and (out[~allowed] == 0).all()
    # k == number allowed: exactly the allowed set
    out = np.asarray(wm.gumbel_topk(_key("all"), s, k=6, mask=jnp.asarray(allowed)))
    np.testing.assert_array_equal(out, allowed.astype(np.float32))


@pytest.mark.parametrize("masked", [False, True])
def test_inclusion_frequencies_equal_plackett_luce(masked):
    """1e5 draws; the frequency of each item is within 0.01 of its exact marginal (sd <= 0.0016,
    so 0.01 is > 6 standard errors)."""
    s = _scores("pl")
    allowed = None
    if masked:
        allowed = np.ones(16, bool)
        allowed[[0, 5, 6, 11, 12, 13]] = False
    n = 100_000
    keys = jax.random.split(_key(f"pl{masked}"), n)
    m = None if allowed is None else jnp.asarray(allowed)
    draws = jax.jit(jax.vmap(lambda kk: wm.gumbel_topk(kk, s, k=4, mask=m)))(keys)
    freq = np.asarray(draws, np.float64).mean(0)
    exact = ref.plackett_luce_inclusion(np.asarray(s, np.float64), 4, allowed)
    np.testing.assert_allclose(exact.sum(), 4.0, rtol=1e-12)
    np.testing.assert_allclose(freq, exact, atol=0.01)
    assert np.abs(freq - exact).max() < 0.01


@pytest.mark.parametrize("tau", [1.0, 0.5])
@pytest.mark.parametrize("masked", [False, True])
def test_gradient_is_the_relaxation_gradient(tau, masked, x64):
    s = jnp.asarray(_scores(f"grad{tau}{masked}"), jnp.float64)
    key = _key(f"grad{tau}{masked}")
    allowed = None
    if masked:
        allowed = jnp.asarray(np.arange(16) % 3 != 0)
    coef = jnp.asarray(np.random.default_rng(7).normal(size=16))
    k = 4

    def through_sample(scores, t):
        return jnp.sum(coef * wm.gumbel_topk(key, scores, k=k, tau=t, mask=allowed))

    def through_relaxation(scores, t):
        g = jax.random.gumbel(key, (16,), jnp.float64)
        return jnp.sum(coef * relaxed_topk(scores + g, t, k, allowed))

    got = jax.grad(through_sample, argnums=(0, 1))(s, tau)
    want = jax.grad(through_relaxation, argnums=(0, 1))(s, tau)
    for a, b in zip(got, want):
        assert np.isfinite(np.asarray(a)).all()
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)
    assert np.abs(np.asarray(got[0])).max() > 1e-3  # a real, non-zero gradient
    if masked:
        assert (np.asarray(got[0])[~np.asarray(allowed)] == 0).all()
    # forward mode too (jvp along a random direction)
    d = jnp.asarray(np.random.default_rng(8).normal(size=16))
    _, t_got = jax.jvp(lambda x: wm.gumbel_topk(key, x, k=k, tau=tau, mask=allowed), (s,), (d,))
    _, t_want = jax.jvp(lambda x: relaxed_topk(
        x + jax.random.gumbel(key, (16,), jnp.float64), tau, k, allowed), (s,), (d,))
    assert np.isfinite(np.asarray(t_got)).all()
    np.testing.assert_allclose(np.asarray(t_got), np.asarray(t_want), rtol=1e-10, atol=1e-12)


def test_jit_vmap_and_determinism():
    s = _scores("jit")
    keys = jax.random.split(_key("jit"), 8)
    eager = np.stack([np.asarray(wm.gumbel_topk(kk, s, k=3)) for kk in keys])
    jitted = jax.jit(lambda kk: wm.gumbel_topk(kk, s, k=3))
    np.testing.assert_array_equal(np.stack([np.asarray(jitted(kk)) for kk in keys]), eager)
    vm = jax.vmap(lambda kk, sc: wm.gumbel_topk(kk, sc, k=3, tau=0.7))(keys, jnp.tile(s, (8, 1)))
    np.testing.assert_array_equal(np.asarray(vm), eager)  # tau only changes the gradient
    again = np.stack([np.asarray(wm.gumbel_topk(kk, s, k=3)) for kk in keys])
    np.testing.assert_array_equal(again, eager)
    assert len({tuple(row) for row in eager.tolist()}) > 1  # keys matter
    # gradient under jit and vmap
    grads = jax.jit(jax.vmap(jax.grad(lambda sc, kk: wm.gumbel_topk(kk, sc, k=3)[0]),
                             in_axes=(None, 0)))(s, keys)
    assert grads.shape == (8, 16) and np.isfinite(np.asarray(grads)).all()


def test_bad_inputs_name_the_argument():
    s = _scores("bad")
    key = _key("bad")
    for k in (0, 17, 2.0):
        with pytest.raises(ValueError, match="k must"):
            wm.gumbel_topk(key, s, k=k)
    with pytest.raises(ValueError, match="k must"):
        wm.gumbel_topk(key, s, k=5, mask=jnp.arange(16) < 4)
    for tau in (0.0, -1.0):
        with pytest.raises(ValueError, match="tau"):
            wm.gumbel_topk(key, s, k=2, tau=tau)
    with pytest.raises(ValueError, match="mask"):
        wm.gumbel_topk(key, s, k=2, mask=jnp.ones(15, bool))
    with pytest.raises(ValueError, match="mask"):
        wm.gumbel_topk(key, s, k=2, mask=jnp.ones(16))
    with pytest.raises(ValueError, match="scores"):
        wm.gumbel_topk(key, jnp.zeros((2, 16)), k=2)
    with pytest.raises(ValueError, match="scores"):
        wm.gumbel_topk(key, s.at[3].set(jnp.nan), k=2)
    with pytest.raises(TypeError, match="key"):  # a PRNG key, as everywhere in the library
        wm.gumbel_topk(0, s, k=2)
