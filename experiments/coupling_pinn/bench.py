"""Time one Poisson training step: batched forward-mode Laplacian vs ``vmap(hessian)``.

Same PDE (2-D Poisson), network (tanh MLP, 4 x 64) and batch (1024 interior + 4 x 1024 boundary
points, the boundary being the interior's edge projections), Adam. Median of repeats after a
warm-up. DeepXDE is not installed here, so the issue's DeepXDE ratio is not measured; the
``vmap(hessian)`` step stands in as the reverse-mode-Hessian baseline.

Run: ``python -m experiments.coupling_pinn.bench``.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers import pinn


def _time(fn, *args, repeats=20):
    out = fn(*args)
    jax.block_until_ready(out)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def bench(batch: int = 1024, repeats: int = 20) -> dict[str, float]:
    prob = pinn.make_problem("poisson", eval_n=10)
    net = pinn.make_network("mlp", depth=3, width=64)  # lift + 3 blocks = 4 tanh layers
    opt = optax.adam(1e-3)
    params = net.init(jax.random.key(0), jnp.zeros(2))
    data = prob.sample(jax.random.key(1), batch)
    f = lambda z: 2 * jnp.pi**2 * jnp.sin(jnp.pi * z[:, 0]) * jnp.sin(jnp.pi * z[:, 1])

    def make(lap):
        def loss(p):
            u = lambda z: net.apply(p, z)
            r = -lap(u, data["interior"]) - f(data["interior"])
            return jnp.mean(r**2) + jnp.mean(jax.vmap(u)(data["boundary"]) ** 2)

        @jax.jit
        def step(p, s):
            g = jax.grad(loss)(p)
            upd, s = opt.update(g, s, p)
            return optax.apply_updates(p, upd), s

        return step

    hess_lap = lambda u, x: jnp.trace(jax.vmap(jax.hessian(u))(x), axis1=1, axis2=2)
    s0 = opt.init(params)
    fwd = _time(make(pinn.laplacian), params, s0, repeats=repeats)
    rev = _time(make(hess_lap), params, s0, repeats=repeats)
    return {"forward_ms": 1e3 * fwd, "vmap_hessian_ms": 1e3 * rev, "ratio": fwd / rev}


if __name__ == "__main__":  # pragma: no cover
    print(bench())
