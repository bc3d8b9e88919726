"""TQC targets, the quantile Huber loss and Q from atoms against float64 numpy; the ring buffer."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import rl


def _np_target(z, r, d, gamma, k):
    b, n, m = z.shape
    out = np.zeros((b, n * (m - k)))
    for i in range(b):
        atoms = np.sort(z[i].reshape(-1).astype(np.float64))[:n * (m - k)]
        out[i] = r[i] + gamma * (1.0 - d[i]) * atoms
    return out


def _np_qhuber(pred, target, kappa):
    b, n, m = pred.shape
    tot, cnt = 0.0, 0
    for i in range(b):
        for j in range(n):
            for q in range(m):
                tau = (2 * q + 1) / (2 * m)
                for y in target[i]:
                    u = float(y) - float(pred[i, j, q])
                    h = 0.5 * u * u if abs(u) <= kappa else kappa * (abs(u) - 0.5 * kappa)
                    tot += abs(tau - (u < 0)) * h
                    cnt += 1
    return tot / cnt


@pytest.mark.parametrize("k", [0, 2])
def test_truncated_target_matches_numpy(k):
    rng = np.random.default_rng(0)
    z = rng.normal(size=(5, 3, 7)).astype(np.float32)
    r = rng.normal(size=5).astype(np.float32)
    d = np.array([0, 1, 0, 0, 1], np.float32)
    ours = rl.truncated_quantile_target(jnp.asarray(z), jnp.asarray(r), jnp.asarray(d),
                                        gamma=0.9, drop_per_net=k)
    assert ours.shape == (5, 3 * (7 - k))
    np.testing.assert_allclose(np.asarray(ours), _np_target(z, r, d, 0.9, k), rtol=1e-6,
                               atol=1e-6)
    assert np.all(np.diff(np.asarray(ours), axis=1) >= 0)  # ascending
    # dropping the k N largest pooled atoms, not k per critic separately
    z2 = np.zeros((1, 2, 3), np.float32)
    z2[0, 0] = [10.0, 11.0, 12.0]
    t = rl.truncated_quantile_target(jnp.asarray(z2), jnp.zeros(1), jnp.zeros(1), gamma=1.0,
                                     drop_per_net=1)
    assert sorted(np.asarray(t)[0].tolist()) == [0.0, 0.0, 0.0, 10.0]


@pytest.mark.parametrize("kappa", [1.0, 0.3])
def test_quantile_huber_matches_numpy(kappa):
    rng = np.random.default_rng(1)
    pred = rng.normal(size=(3, 2, 5)).astype(np.float32)
    target = (2.0 * rng.normal(size=(3, 4))).astype(np.float32)
    ours = rl.quantile_huber_loss(jnp.asarray(pred), jnp.asarray(target), kappa=kappa)
    np.testing.assert_allclose(float(ours), _np_qhuber(pred, target, kappa), rtol=1e-5)
    # the minimiser of the loss over a constant atom is the tau-quantile of the targets
    ys = jnp.asarray(rng.normal(size=(1, 400)).astype(np.float32))
    grid = jnp.linspace(-3, 3, 601)
    losses = jax.vmap(lambda c: rl.quantile_huber_loss(
        jnp.full((1, 1, 1), c), ys, kappa=1e-3))(grid)  # M=1: tau = 1/2, the median
    assert abs(float(grid[jnp.argmin(losses)]) - float(jnp.median(ys))) < 0.02


def test_q_value_is_mean_of_kept_atoms():
    z = jnp.arange(12.0).reshape(2, 6)  # N=2, M=6, drop 2 per net -> 4 largest of 12 dropped
    assert float(rl.q_value(z, drop_per_net=2)) == pytest.approx(np.mean(np.arange(8.0)))
    assert rl.q_value(jnp.zeros((4, 3, 2, 5)), drop_per_net=1).shape == (4, 3)


def test_critic_bad_input():
    z = jnp.zeros((2, 2, 3))
    with pytest.raises(ValueError, match="rewards"):
        rl.truncated_quantile_target(z, jnp.array([0.0, jnp.nan]), jnp.zeros(2), gamma=0.9,
                                     drop_per_net=1)
    with pytest.raises(ValueError, match="drop_per_net"):
        rl.truncated_quantile_target(z, jnp.zeros(2), jnp.zeros(2), gamma=0.9, drop_per_net=3)
    with pytest.raises(ValueError, match="gamma"):
        rl.truncated_quantile_target(z, jnp.zeros(2), jnp.zeros(2), gamma=1.5, drop_per_net=0)
    with pytest.raises(ValueError, match="dones"):
        rl.truncated_quantile_target(z, jnp.zeros(2), jnp.zeros(3), gamma=0.9, drop_per_net=0)
    with pytest.raises(ValueError, match="kappa"):
        rl.quantile_huber_loss(z, jnp.zeros((2, 4)), kappa=0.0)


def _tr(vals):
    v = jnp.asarray(vals, jnp.float32)
    return rl.Transition(v[:, None], v[:, None], v, v[:, None], jnp.zeros_like(v))


def test_ring_buffer_wraps_around():
    buf = rl.replay_init(jax.tree.map(lambda x: x[0], _tr([0.0])), capacity=5)
    add = jax.jit(rl.replay_add)
    buf = add(buf, _tr([1, 2, 3]))
    assert int(buf.size) == 3 and int(buf.ptr) == 3
    buf = add(buf, _tr([4, 5, 6]))  # 6 overwrites row 0
    assert int(buf.size) == 5 and int(buf.ptr) == 1
    np.testing.assert_array_equal(np.asarray(buf.data.reward), [6, 2, 3, 4, 5])
    buf = add(buf, _tr([7, 8, 9, 10, 11]))  # a full lap
    np.testing.assert_array_equal(np.asarray(buf.data.reward), [11, 7, 8, 9, 10])
    assert int(buf.ptr) == 1 and add._cache_size() == 2  # two batch shapes, no other retrace
    # sampling only ever returns filled rows
    small = add(rl.replay_init(jax.tree.map(lambda x: x[0], _tr([0.0])), capacity=50),
                _tr([3, 4]))
    s = rl.replay_sample(small, jax.random.key(0), 40)
    assert set(np.asarray(s.reward).tolist()) <= {3.0, 4.0}
    assert set(np.asarray(s.reward).tolist()) == {3.0, 4.0}


def test_replay_bad_input():
    buf = rl.replay_init(jax.tree.map(lambda x: x[0], _tr([0.0])), capacity=4)
    with pytest.raises(ValueError, match="capacity"):
        rl.replay_sample(buf, jax.random.key(0), 8)
    with pytest.raises(ValueError, match="capacity"):
        rl.replay_add(buf, _tr([1, 2, 3, 4, 5]))
    bad = _tr([1.0, 2.0]).replace(reward=jnp.array([1.0, jnp.nan]))
    with pytest.raises(ValueError, match="batch.reward"):
        rl.replay_add(buf, bad)
    with pytest.raises(ValueError, match="capacity"):
        rl.replay_init({"x": jnp.zeros(2)}, capacity=0)
