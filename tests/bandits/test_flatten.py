"""Single-action algorithms on flattened slates: enumeration order, round trip, learning, errors."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.bandits import (flatten_slates, make_b_slateglincb, make_random,
                               make_rs_slateglincb, make_slate_env, run_bandit_seeds,
                               slate_index_table)


def test_index_table_is_the_product_order():
    t = slate_index_table(3, 4)
    assert t.shape == (64, 3) and t.dtype == np.int32
    np.testing.assert_array_equal(t, np.array(list(itertools.product(range(4), repeat=3))))


class _Probe:
    """An inner one-slot algorithm that records what it sees (pure: the state is the record)."""

    def __init__(self, pick):
        self.pick = pick

    def make(self):
        from jaxpapers.bandits._types import SlateAlgo, make_update
        pick = self.pick

        def init(key):
            return {"ctx": jnp.zeros((1, 8, 6)), "idx": jnp.zeros((1,), jnp.int32)}

        def select(state, key, contexts):
            return jnp.array([pick], jnp.int32), {**state, "ctx": contexts}

        def observe(state, contexts, items, reward):
            return {**state, "idx": items}

        f = dict(refit=lambda s: (), get_fit=lambda s: (), set_fit=lambda s, f: s,
                 needs_refit=lambda s: jnp.zeros((), bool))
        return SlateAlgo(init=init, select=select, update=make_update(observe, **f),
                         observe=observe, num_switches=lambda s: jnp.int32(0), name="probe", **f)


@pytest.mark.parametrize("pick", [0, 5, 7])
def test_select_and_update_round_trip(key, pick):
    algo = flatten_slates(_Probe(pick).make(), num_slots=3, num_items=2)
    ctx = jax.random.normal(key, (3, 2, 2))
    items, st = jax.jit(algo.select)(algo.init(key), key, ctx)
    want = slate_index_table(3, 2)[pick]
    np.testing.assert_array_equal(items, want)
    # the inner algorithm saw the concatenated features of every slate, in table order
    feats = np.asarray(st["ctx"])[0]
    for r, row in enumerate(slate_index_table(3, 2)):
        np.testing.assert_array_equal(feats[r], np.concatenate([ctx[i, row[i]] for i in range(3)]))
    st = jax.jit(algo.update)(st, ctx, items, jnp.float32(1.0))
    assert int(st["idx"][0]) == pick


def test_flat_rs_learns(key):
    n, k, d, t, s = 2, 3, 2, 1500, 4
    k_env, k_run = jax.random.split(key)
    envs = jax.vmap(functools.partial(make_slate_env, num_slots=n, num_items=k, dim=d,
                                      theta_norm=2.0, link="logistic", mode="fresh"))(
        jax.random.split(k_env, s))
    inner = make_rs_slateglincb(num_slots=1, num_items=k ** n, dim=n * d, num_rounds=t,
                                param_norm_ub=3.0, kappa=10.0)
    flat = flatten_slates(inner, num_slots=n, num_items=k)
    keys = jax.random.split(k_run, s)
    r_flat = np.asarray(run_bandit_seeds(flat, envs, keys, num_rounds=t).regret).sum(1).mean()
    r_rand = np.asarray(run_bandit_seeds(make_random(num_slots=n, num_items=k), envs, keys,
                                         num_rounds=t).regret).sum(1).mean()
    assert r_flat < 0.5 * r_rand


def test_flat_bad_input():
    inner = make_b_slateglincb(num_slots=1, num_items=4, dim=4, num_rounds=10, param_norm_ub=2.0)
    with pytest.raises(ValueError, match="num_slots"):
        flatten_slates(inner, num_slots=0, num_items=2)
    with pytest.raises(ValueError, match="too many"):
        flatten_slates(inner, num_slots=20, num_items=4)
    algo = flatten_slates(inner, num_slots=2, num_items=2)
    with pytest.raises(ValueError, match="contexts"):
        algo.select(algo.init(jax.random.key(0)), jax.random.key(1), jnp.ones((3, 2, 2)))
