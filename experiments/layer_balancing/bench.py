"""Benchmark: vmapped, jitted full-GD sweep vs a numpy loop (as the official scripts loop).

Both run the same thing: for each seed (setting with explicit data X = sqrt(n) Q_x) and each
rate pair on the diagonal eta1 + eta2 = s, two simultaneous GD steps with per-layer rates, then
the test loss. Not a test; prints the timings and their ratio.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers import linear_nets as ln

H, SEEDS, POINTS, STEPS = 256, 3, 19, 2


def _numpy_sweep(problems, e1s, e2s):
    out = np.zeros((len(problems), len(e1s)))
    for i, (params, data) in enumerate(problems):
        x, y, beta = (np.asarray(data[k]) for k in ("x", "y", "beta"))
        n, h = x.shape[0], params["w1"].shape[1]
        for j, (e1, e2) in enumerate(zip(e1s, e2s)):
            w1, w2 = np.array(params["w1"]), np.array(params["w2"])
            for _ in range(STEPS):
                g = x.T @ (x @ w1 @ w2 / h - y) / n
                w1, w2 = w1 - e1 * g @ w2.T / h, w2 - e2 * w1.T @ g / h
            out[i, j] = np.sum((w1 @ w2 / h - beta) ** 2)
    return out


@jax.jit
def _jax_sweep(params, data, e1s, e2s):
    def one(p, d, a, b):
        for _ in range(STEPS):
            p = ln.gd_step(p, d["x"], d["y"], a, b)
        return ln.test_loss(p, d["beta"])

    per_rate = jax.vmap(one, in_axes=(None, None, 0, 0))
    return jax.vmap(per_rate, in_axes=(0, 0, None, None))(params, data, e1s, e2s)


def main() -> None:
    with jax.enable_x64(True):
        keys = jax.random.split(jax.random.key(0), SEEDS)
        problems = [ln.sample_problem(k, H, H, H) for k in keys]
        s = 2 * H**1.25
        e1s = np.array([i / 20 * s for i in range(1, 20)])
        e2s = s - e1s
        params = jax.tree.map(lambda *a: jnp.stack(a), *[p for p, _ in problems])
        data = jax.tree.map(lambda *a: jnp.stack(a), *[d for _, d in problems])
        ref = _numpy_sweep(problems, e1s, e2s)
        got = _jax_sweep(params, data, jnp.asarray(e1s), jnp.asarray(e2s)).block_until_ready()
        np.testing.assert_allclose(got, ref, rtol=1e-9)
        t_np = []
        for _ in range(3):
            t0 = time.perf_counter()
            _numpy_sweep(problems, e1s, e2s)
            t_np.append(time.perf_counter() - t0)
        t_jx = []
        for _ in range(5):
            t0 = time.perf_counter()
            _jax_sweep(params, data, jnp.asarray(e1s), jnp.asarray(e2s)).block_until_ready()
            t_jx.append(time.perf_counter() - t0)
        a, b = float(np.median(t_np)), float(np.median(t_jx))
        print(f"h={H}, {SEEDS} seeds x {POINTS} rate pairs x {STEPS} GD steps (float64, CPU)")
        print(f"numpy loop: {a:.3f} s   jax vmap+jit: {b:.3f} s   speed-up: {a / b:.1f}x")


if __name__ == "__main__":
    main()
