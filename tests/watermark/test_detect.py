"""kgw_z / sweet_z / ewd_z against float64 references; jit once, vmap, sharding, bad input."""

from __future__ import annotations

import itertools
import zlib

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxpapers import watermark as wm
from jaxpapers.watermark import detect
from tests.watermark import _reference as ref

T = 40
KEYS = (0, wm.DEFAULT_KEY, 2 ** 32 - 1)
GAMMAS = (0.25, 0.5, 0.3)


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _tokens(rng: np.random.Generator, t: int = T) -> np.ndarray:
    """Bytes from a small alphabet (repeated pairs, for dedup) mixed with arbitrary bytes."""
    small = rng.choice(np.array([32, 10, 97, 101, 0, 255]), t)
    wide = rng.integers(0, 256, t)
    return np.where(rng.random(t) < 0.75, small, wide)


def _weights(rng: np.random.Generator, kind: str):
    if kind == "none":
        return None
    w = rng.uniform(0.1, 2.0, T)
    if kind == "zeros":
        w[rng.random(T) < 0.35] = 0.0
    return w


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_kgw_z_matches_reference_float64(width, x64):
    """Every (key, gamma, weights, dedup, length), alternating two sequences, to 1e-12."""
    rng = _rng(f"kgw{width}")
    seqs = [_tokens(rng), np.tile(_tokens(rng, T // 4), 4)]  # the second repeats itself
    cases = itertools.product(KEYS, GAMMAS, ("none", "positive", "zeros"), (False, True),
                              (T, T - 13))
    for i, (key_, gamma, wkind, dedup, length) in enumerate(cases):
        tokens = seqs[i % 2]
        w = _weights(rng, wkind)
        want = ref.kgw_z(tokens, key=key_, gamma=gamma, weights=w, dedup=dedup, length=length,
                         h=width)
        got = wm.kgw_z(jnp.asarray(tokens), key=key_, gamma=gamma, weights=w, dedup=dedup,
                       length=length, context_width=width)
        assert got.dtype == jnp.float64
        np.testing.assert_allclose(float(got), want, rtol=1e-12, atol=1e-12,
                                   err_msg=f"{key_=} {gamma=} {wkind=} {dedup=} {length=}")


def test_kgw_z_float32_close_to_reference():
    rng = _rng("kgw32")
    tokens = _tokens(rng)
    for gamma, dedup in itertools.product(GAMMAS, (False, True)):
        w = _weights(rng, "positive")
        want = ref.kgw_z(tokens, key=wm.DEFAULT_KEY, gamma=gamma, weights=w, dedup=dedup)
        got = wm.kgw_z(tokens, key=wm.DEFAULT_KEY, gamma=gamma, weights=w, dedup=dedup)
        assert got.dtype == jnp.float32
        # 40 float32 terms summed: relative error ~ 40 eps32 ~ 5e-6 of the sums
        np.testing.assert_allclose(float(got), want, rtol=1e-5, atol=1e-5)


def test_kgw_z_edge_cases():
    tokens = jnp.asarray(list(b"abababab"))
    for length in (0, 1):  # nothing scored (positions t >= h = 1 only)
        assert float(wm.kgw_z(tokens, key=1, gamma=0.5, length=length)) == 0.0
    assert float(wm.kgw_z(tokens, key=1, gamma=0.5, weights=jnp.zeros(8))) == 0.0
    assert float(wm.kgw_z(tokens[:4], key=1, gamma=0.5, context_width=4)) == 0.0
    assert float(wm.kgw_z(jnp.zeros(0, jnp.int32), key=1, gamma=0.5, dedup=True)) == 0.0
    # "abab...": two pairs (a,b), (b,a); dedup scores exactly 2 positions
    green = float(wm.kgw_z(tokens, key=1, gamma=0.5, dedup=True)) * np.sqrt(2 * 0.25) + 1.0
    assert min(abs(green - g) for g in (0, 1, 2)) < 1e-5
    assert green == pytest.approx(sum(ref.green_flags(list(b"aba"), 1, 0.5, 1)[1:]), abs=1e-5)
    # positive weight scaling leaves z unchanged
    w = jnp.linspace(0.5, 2.0, 8)
    np.testing.assert_allclose(float(wm.kgw_z(tokens, key=3, gamma=0.3, weights=w)),
                               float(wm.kgw_z(tokens, key=3, gamma=0.3, weights=7 * w)),
                               rtol=1e-6)


def test_sweet_matches_markllm_formula(x64):
    rng = _rng("sweet")
    for key_, gamma in itertools.product(KEYS[:2], (0.5, 0.25)):  # gamma_e == gamma here
        tokens = _tokens(rng)
        logits = rng.normal(size=(T, 256)) * rng.uniform(0.5, 8.0, (T, 1))
        h_np = ref.entropy(logits)
        h = wm.entropy(jnp.asarray(logits))
        np.testing.assert_allclose(np.asarray(h), h_np, rtol=1e-12, atol=1e-12)
        assert 3 < (h_np > 0.9).sum() < T - 3  # both kinds of positions present
        want = ref.sweet_z(tokens, h_np, key=key_, gamma=gamma)
        got = wm.sweet_z(jnp.asarray(tokens), h, key=key_, gamma=gamma)
        np.testing.assert_allclose(float(got), want, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(np.asarray(wm.sweet_weights(h)), (h_np > 0.9) * 1.0)


def test_ewd_matches_markllm_formula(x64):
    rng = _rng("ewd")
    for key_, gamma, delta in ((wm.DEFAULT_KEY, 0.5, 2.0), (5, 0.25, 1.0), (0, 0.5, 0.5)):
        tokens = _tokens(rng)
        logits = rng.normal(size=(T, 256)) * rng.uniform(0.5, 8.0, (T, 1))
        se_np = ref.spike_entropy(logits, gamma, delta)
        se = wm.spike_entropy(jnp.asarray(logits), gamma=gamma, delta=delta)
        np.testing.assert_allclose(np.asarray(se), se_np, rtol=1e-12)
        want = ref.ewd_z(tokens, se_np, key=key_, gamma=gamma)
        got = wm.ewd_z(jnp.asarray(tokens), se, key=key_, gamma=gamma)
        np.testing.assert_allclose(float(got), want, rtol=1e-12, atol=1e-12)
        w = np.asarray(wm.ewd_weights(se))
        assert w[0] == 0 and w[1:].min() == 0
        np.testing.assert_allclose(w[1:], se_np[1:] - se_np[1:].min(), rtol=1e-12, atol=1e-15)
    # spike entropy's range: one-hot -> 1 / (1 + zeta); delta 0 -> 1
    zeta = (0.5 * (np.exp(2.0) - 1)) / (0.5 + 0.5 * np.exp(2.0))
    one_hot = jnp.full(256, -jnp.inf).at[3].set(0.0)
    np.testing.assert_allclose(float(wm.spike_entropy(one_hot, gamma=0.5, delta=2.0)),
                               1 / (1 + zeta), rtol=1e-12)
    np.testing.assert_allclose(float(wm.spike_entropy(jnp.asarray(logits[0]), gamma=0.5,
                                                      delta=0.0)), 1.0, rtol=1e-12)


def test_entropy_gradient_finite_with_masked_logits():
    logits = jnp.asarray([0.0, 1.0, -jnp.inf, 2.0])
    g = jax.grad(wm.entropy)(logits)
    assert np.isfinite(np.asarray(g)).all() and float(g[2]) == 0.0


def test_kgw_z_compiles_once(monkeypatch):
    """New keys, gammas, weights and lengths reuse one compilation."""
    chex.clear_trace_counter()
    monkeypatch.setattr(detect, "_kgw_z_jit", jax.jit(
        chex.assert_max_traces(detect._kgw_z_run, n=1), static_argnames=("width", "dedup")))
    rng = _rng("once")
    tokens = _tokens(rng)
    zs = []
    for i, (key_, gamma) in enumerate(itertools.product((1, 2, np.uint32(3)), GAMMAS)):
        w = None if i % 2 else rng.uniform(0.1, 1.0, T).astype(np.float32)
        zs.append(float(wm.kgw_z(tokens, key=key_, gamma=gamma, weights=w, length=T - i)))
        zs.append(float(wm.kgw_z(tokens.astype(np.uint8), key=key_, gamma=gamma,
                                 length=np.int64(T - 2 * i))))
    assert len(set(zs)) > 5  # the calls really differ


def test_vmap_over_sequences_and_keys_equals_loop():
    rng = _rng("vmap")
    b = 6
    tokens = np.stack([_tokens(rng) for _ in range(b)])
    lengths = rng.integers(2, T + 1, b)
    keys = rng.integers(0, 2 ** 32, b, dtype=np.uint64).astype(np.uint32)
    w = rng.uniform(0.0, 1.0, (b, T)).astype(np.float32)
    f = jax.vmap(lambda x, n, k, wt: wm.kgw_z(x, key=k, gamma=0.3, weights=wt, length=n,
                                              dedup=True, context_width=2))
    got = np.asarray(f(jnp.asarray(tokens), jnp.asarray(lengths), jnp.asarray(keys),
                       jnp.asarray(w)))
    loop = [float(wm.kgw_z(tokens[i], key=keys[i], gamma=0.3, weights=w[i], length=lengths[i],
                           dedup=True, context_width=2)) for i in range(b)]
    np.testing.assert_allclose(got, loop, rtol=1e-6, atol=1e-6)
    # jit of the scorers with traced key, gamma and length
    g = jax.jit(lambda x, k, gm, n: wm.ewd_z(x, jnp.asarray(w[0]), key=k, gamma=gm, length=n))
    np.testing.assert_allclose(
        float(g(jnp.asarray(tokens[0]), jnp.uint32(keys[0]), jnp.float32(0.5), jnp.int32(30))),
        float(wm.ewd_z(tokens[0], w[0], key=keys[0], gamma=0.5, length=30)), rtol=1e-6)


def test_sharded_equals_unsharded(num_devices):
    rng = _rng("shard")
    b = 2 * num_devices
    tokens = jnp.asarray(np.stack([_tokens(rng) for _ in range(b)]))
    lengths = jnp.asarray(rng.integers(2, T + 1, b), jnp.int32)
    h = jnp.asarray(rng.uniform(0.0, 2.0, (b, T)), jnp.float32)

    def score(x, n, ent):
        return (wm.kgw_z(x, key=wm.DEFAULT_KEY, gamma=0.5, length=n, dedup=True),
                wm.sweet_z(x, ent, key=wm.DEFAULT_KEY, gamma=0.5, length=n))

    f = jax.jit(jax.vmap(score))
    want = f(tokens, lengths, h)
    mesh = jax.make_mesh((num_devices,), ("b",), axis_types=(jax.sharding.AxisType.Auto,))
    rows = NamedSharding(mesh, P("b"))
    got = f(*(jax.device_put(a, rows) for a in (tokens, lengths, h)))
    assert got[0].sharding.is_equivalent_to(rows, 1)
    for g_, w_ in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g_), np.asarray(w_))


# ----------------------------------------------------------------------------- bad input

def test_bad_inputs_name_the_argument():
    x = jnp.asarray([1, 2, 3, 4])
    with pytest.raises(ValueError, match="tokens"):
        wm.kgw_z(jnp.asarray([0, 256]), key=1, gamma=0.5)
    with pytest.raises(ValueError, match="tokens"):
        wm.kgw_z(jnp.asarray([-1, 3]), key=1, gamma=0.5)
    with pytest.raises(ValueError, match="tokens"):
        wm.kgw_z(jnp.zeros(4), key=1, gamma=0.5)
    with pytest.raises(ValueError, match="tokens"):
        wm.kgw_z(jnp.zeros((2, 4), jnp.int32), key=1, gamma=0.5)
    for w in ([1.0, -0.5, 1.0, 1.0], [1.0, np.nan, 1.0, 1.0], [1.0, 1.0]):
        with pytest.raises(ValueError, match="weights"):
            wm.kgw_z(x, key=1, gamma=0.5, weights=jnp.asarray(w))
    for n in (-1, 5, 2.5):
        with pytest.raises(ValueError, match="length"):
            wm.kgw_z(x, key=1, gamma=0.5, length=n)
    for gamma in (0.0, 1.0, 0.001):
        with pytest.raises(ValueError, match="gamma"):
            wm.kgw_z(x, key=1, gamma=gamma)
    with pytest.raises(ValueError, match="delta"):
        wm.spike_entropy(jnp.zeros(8), gamma=0.5, delta=-0.1)
    with pytest.raises(ValueError, match="gamma"):
        wm.spike_entropy(jnp.zeros(8), gamma=1.2, delta=1.0)
    with pytest.raises(ValueError, match="entropies"):
        wm.sweet_z(x, jnp.asarray([0.0, np.nan, 1.0, 1.0]), key=1, gamma=0.5)
    with pytest.raises(TypeError, match="dedup"):  # a static flag: the library's TypeError
        wm.kgw_z(x, key=1, gamma=0.5, dedup=1)
