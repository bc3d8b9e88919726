"""The uint32 hash, contexts, green lists and logits processors against the Python-int reference."""

from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import watermark as wm
from jaxpapers.watermark import hashing
from tests.watermark import _reference as ref

KEYS = (0, 1, wm.DEFAULT_KEY, 2 ** 32 - 1, np.uint32(2654435761))
GAMMAS = (0.25, 0.5, 0.3)


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def test_fmix32_matches_python_ints():
    rng = _rng("fmix")
    x = np.concatenate([[0, 1, 2, 0xFFFFFFFF, 0x80000000],
                        rng.integers(0, 2 ** 32, 200, dtype=np.uint64)]).astype(np.uint32)
    got = np.asarray(wm.fmix32(x))
    assert got.dtype == np.uint32
    assert got.tolist() == [ref.fmix(int(v)) for v in x]
    # fmix32 is a bijection of uint32: no collisions on the sample
    assert len(set(got.tolist())) == len(x)
    # traced input (int32 reinterpreted as uint32) gives the same values
    jitted = jax.jit(wm.fmix32)(jnp.asarray(x[:50]))
    assert np.asarray(jitted).tolist() == got[:50].tolist()


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_context_ids_match_definition(width):
    tokens = _rng(f"ctx{width}").integers(0, 256, 30)
    got = np.asarray(wm.context_ids(jnp.asarray(tokens), width))
    assert got.dtype == np.uint32
    for t in range(width, 30):
        assert int(got[t]) == ref.context(tokens, t, width)
    # all-255 bytes with width 4 reach the top of uint32
    assert int(wm.context_ids(jnp.full(5, 255), 4)[4]) == 2 ** 32 - 1


@pytest.mark.parametrize("key_", KEYS)
@pytest.mark.parametrize("gamma", GAMMAS)
def test_green_mask_matches_reference(key_, gamma):
    rng = _rng(f"green{int(key_)}{gamma}")
    contexts = [0, 255, 65535, 2 ** 32 - 1] + rng.integers(0, 2 ** 32, 4).tolist()
    n = int(np.floor(256 * gamma))
    for c in contexts:
        m = np.asarray(wm.green_mask(c, key=key_, gamma=gamma))
        assert m.dtype == bool and m.shape == (256,)
        assert m.sum() == n
        assert set(np.flatnonzero(m).tolist()) == ref.green_set(int(key_), gamma, int(c))
        # deterministic: a second call gives the same list
        assert (np.asarray(wm.green_mask(c, key=key_, gamma=gamma)) == m).all()


def test_green_lists_depend_on_key_and_context():
    a = np.asarray(wm.green_mask(5, key=1, gamma=0.5))
    b = np.asarray(wm.green_mask(5, key=2, gamma=0.5))
    c = np.asarray(wm.green_mask(6, key=1, gamma=0.5))
    # independent halves agree on about half the bytes (128 +- 8 sd); far from identical
    assert 64 < (a == b).sum() < 200 and 64 < (a == c).sum() < 200
    # nested in gamma: the 0.25 list is the head of the 0.5 list (same order)
    small = np.asarray(wm.green_mask(5, key=1, gamma=0.25))
    assert (small <= a).all()


def test_tie_break_smaller_token_first():
    smallest = jax.jit(hashing.smallest)
    score = jnp.asarray([5, 3, 3, 7, 3, 1, 5, 5], jnp.uint32)
    got = np.asarray(smallest(score, 3))
    # 1 (token 5) then the 3s in token order 1, 2 (token 4 is the third 3 and misses out)
    assert np.flatnonzero(got).tolist() == [1, 2, 5]
    got = np.asarray(smallest(score, 6))
    assert np.flatnonzero(got).tolist() == [0, 1, 2, 4, 5, 6]
    # many tied rows (values from {0, 1, 2, 3} and {2^32 - 2, 2^32 - 1}), every n: equal to a
    # stable sort by (score, token)
    rng = _rng("ties")
    rows = np.concatenate([rng.integers(0, 4, (40, 12)),
                           rng.integers(2 ** 32 - 2, 2 ** 32, (20, 12))]).astype(np.uint32)
    ns = np.arange(13)
    got = np.asarray(jax.vmap(jax.vmap(smallest, (None, 0)), (0, None))(jnp.asarray(rows),
                                                                        jnp.asarray(ns)))
    for r, row in enumerate(rows):
        order = sorted(range(12), key=lambda v, row=row: (int(row[v]), v))
        for n in ns:
            assert set(np.flatnonzero(got[r, n]).tolist()) == set(order[:n])
    # real scores never tie: v -> score(c, v) is injective
    s = hashing.scores(hashing.as_key(wm.DEFAULT_KEY), jnp.uint32(97),
                       jnp.arange(256, dtype=jnp.uint32))
    assert len(np.unique(np.asarray(s))) == 256


def test_green_mask_traced_and_vmapped():
    contexts = jnp.asarray([0, 1, 97, 40000, 2 ** 31 + 5], jnp.uint32)
    loop = np.stack([np.asarray(wm.green_mask(int(c), key=7, gamma=0.3)) for c in contexts])
    vm = jax.vmap(lambda c: wm.green_mask(c, key=7, gamma=0.3))(contexts)
    np.testing.assert_array_equal(np.asarray(vm), loop)
    # key and gamma traced too (gamma 0.3 floors to 76 green in float32 as in float64)
    f = jax.jit(lambda c, k, g: wm.green_mask(c, key=k, gamma=g))
    out = jax.vmap(f, in_axes=(0, None, None))(contexts, jnp.uint32(7), jnp.float32(0.3))
    np.testing.assert_array_equal(np.asarray(out), loop)
    keys = jnp.asarray([7, 8], jnp.uint32)
    per_key = jax.vmap(lambda k: wm.green_mask(97, key=k, gamma=0.3))(keys)
    np.testing.assert_array_equal(np.asarray(per_key[1]),
                                  np.asarray(wm.green_mask(97, key=8, gamma=0.3)))


def test_green_table_equals_masks():
    table = np.asarray(wm.green_table(key=wm.DEFAULT_KEY, gamma=0.5))
    assert table.shape == (256, 256) and (table.sum(1) == 128).all()
    for c in (0, 10, 97, 255):
        np.testing.assert_array_equal(table[c], np.asarray(
            wm.green_mask(c, key=wm.DEFAULT_KEY, gamma=0.5)))
    wide = np.asarray(wm.green_table(key=3, gamma=0.25, context_width=2))
    assert wide.shape == (65536, 256)
    for c in (0, 300, 65535):
        assert set(np.flatnonzero(wide[c]).tolist()) == ref.green_set(3, 0.25, c)


# ----------------------------------------------------------------------------- processors

def test_kgw_bias_adds_delta_on_green():
    logits = jax.random.normal(jax.random.key(1), (256,))
    out = wm.kgw_bias(logits, 1234, key=9, gamma=0.3, delta=2.0)
    diff = np.asarray(out - logits)
    green = np.asarray(wm.green_mask(1234, key=9, gamma=0.3))
    np.testing.assert_allclose(diff[green], 2.0, rtol=1e-6)
    assert (diff[~green] == 0).all()
    # traced context, delta and key; vmapped over rows
    ctx = jnp.asarray([1234, 5], jnp.uint32)
    rows = jnp.stack([logits, -logits])
    f = jax.jit(jax.vmap(lambda lg, c, d: wm.kgw_bias(lg, c, key=jnp.uint32(9), gamma=0.3,
                                                      delta=d), in_axes=(0, 0, None)))
    got = f(rows, ctx, jnp.float32(2.0))
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(out))
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(
        wm.kgw_bias(-logits, 5, key=9, gamma=0.3, delta=2.0)))


def test_sweet_bias_only_above_threshold():
    flat = jnp.zeros(256)                       # entropy log 256 = 5.5 nats
    peaked = jnp.zeros(256).at[3].set(12.0)     # entropy ~ 0.002 nats
    kw = dict(key=4, gamma=0.5, delta=2.0)
    np.testing.assert_array_equal(np.asarray(wm.sweet_bias(flat, 65, **kw)),
                                  np.asarray(wm.kgw_bias(flat, 65, **kw)))
    np.testing.assert_array_equal(np.asarray(wm.sweet_bias(peaked, 65, **kw)), np.asarray(peaked))
    # the threshold decides: a distribution with entropy between 0.5 and 5
    mid = jnp.zeros(256).at[:4].set(8.0)
    h = float(wm.entropy(mid))
    assert 0.5 < h < 5
    assert not (np.asarray(wm.sweet_bias(mid, 65, threshold=h - 0.01, **kw)) == mid).all()
    assert (np.asarray(wm.sweet_bias(mid, 65, threshold=h + 0.01, **kw)) == mid).all()


def test_printable_mask():
    m = np.asarray(wm.printable_mask())
    want = [b in range(0x20, 0x7F) or b in (9, 10) for b in range(256)]
    assert m.tolist() == want


def test_generation_and_detection_agree():
    """Sampling from KGW-biased uniform logits gives the z the hash predicts; no bias gives ~0."""
    gamma, delta, steps, n_seq = 0.5, 2.0, 128, 16

    def generate(key, delta):
        def step(prev, k):
            logits = wm.kgw_bias(jnp.zeros(256), prev, key=wm.DEFAULT_KEY, gamma=gamma,
                                 delta=delta)
            x = jax.random.categorical(k, logits)
            return x, x
        first = jnp.asarray(ord("\n"))
        _, xs = jax.lax.scan(step, first, jax.random.split(key, steps))
        return jnp.concatenate([first[None], xs])  # the prompt byte is the first context

    @jax.jit
    def zs(key, delta):
        seqs = jax.vmap(generate, in_axes=(0, None))(jax.random.split(key, n_seq), delta)
        return jax.vmap(lambda s: wm.kgw_z(s, key=wm.DEFAULT_KEY, gamma=gamma))(seqs)

    k1, k2 = jax.random.split(jax.random.key(zlib.crc32(b"gen")))
    p = gamma * np.exp(delta) / (gamma * np.exp(delta) + 1 - gamma)
    mean_z = (p - gamma) * steps / np.sqrt(steps * gamma * (1 - gamma))          # 8.62
    sd_z = np.sqrt(p * (1 - p) / (gamma * (1 - gamma)))                          # 0.65
    marked = np.asarray(zs(k1, delta))
    plain = np.asarray(zs(k2, 0.0))
    # means of 16 draws: 5 standard errors
    assert abs(marked.mean() - mean_z) < 5 * sd_z / 4
    assert abs(plain.mean()) < 5 * 1.0 / 4
    assert marked.min() > wm.DEFAULT_Z_THRESHOLD


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("gamma", [0.0, 1.0, -0.2, 1.5, 0.003, float("nan"), "0.5", True])
def test_bad_gamma(gamma):
    with pytest.raises(ValueError, match="gamma"):
        wm.green_mask(1, key=1, gamma=gamma)


@pytest.mark.parametrize("key_", [-1, 2 ** 32, 1.5, True, "7", jax.random.key(0),
                                  np.int64(-3), np.zeros(2, np.uint32)])
def test_bad_key(key_):
    with pytest.raises(ValueError, match="key"):
        wm.green_mask(1, key=key_, gamma=0.5)
    with pytest.raises(ValueError, match="key"):
        wm.kgw_z(jnp.arange(4), key=key_, gamma=0.5)


def test_bad_context_width_delta_and_context():
    for w in (0, 5, 1.0, None):
        with pytest.raises(ValueError, match="context_width"):
            wm.green_table(key=1, gamma=0.5, context_width=w)
        with pytest.raises(ValueError, match="context_width"):
            wm.kgw_z(jnp.arange(4), key=1, gamma=0.5, context_width=w)
    with pytest.raises(ValueError, match="context_width"):
        wm.green_table(key=1, gamma=0.5, context_width=3)  # too many rows for a table
    with pytest.raises(ValueError, match="delta"):
        wm.kgw_bias(jnp.zeros(256), 1, key=1, gamma=0.5, delta=-1.0)
    for c in (-1, 2 ** 32, 1.5):
        with pytest.raises(ValueError, match="context"):
            wm.green_mask(c, key=1, gamma=0.5)
    with pytest.raises(ValueError, match="logits"):
        wm.kgw_bias(jnp.zeros((2, 256)), 1, key=1, gamma=0.5, delta=1.0)
