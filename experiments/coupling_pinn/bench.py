"""Poisson training-step timings: ours vs DeepXDE (JAX backend), and forward mode vs vmap(hessian).

Same PDE (2-D Poisson -lap u = 2 pi^2 sin(pi x) sin(pi y) on [-1, 1]^2, u = 0 on the boundary),
same network (tanh MLP, 4 hidden layers of 64: our ``mlp`` with depth 3 = lift + 3 blocks, vs
DeepXDE ``FNN([2] + [64] * 4 + [1], "tanh", "Glorot normal")``), same points, Adam 1e-3, float32.

DeepXDE's ``PDE`` data evaluates the PDE residual on its whole training set (its boundary-condition
points, then the domain and boundary samples). Our step is given that same whole set as its
``interior`` batch and DeepXDE's boundary-condition points as its ``boundary`` batch, so both
compute the Laplacian at the same points (the loss then differs only in that DeepXDE drops the
residual at the BC points from its mean; the work is the same).

Timed, after a warm-up that compiles (each number: median over ``repeats`` runs of ``iters``
iterations, divided by ``iters``):
  * ``ours_step_ms``: our jitted :func:`~jaxpapers.pinn.make_pinn_step` (forward-mode Laplacian)
    on the default network (``unroll=None``: 3 blocks <= 8, so the depth loop is unrolled),
    called ``iters`` times from Python with the batch already on device, blocked at the end;
    ``ours_scanned_step_ms``: the same with ``make_network(..., unroll=1)`` (an XLA while-loop
    over the blocks, the default for nets deeper than 8; same function and parameters).
  * ``dde_train_ms``: ``model.train(iterations=iters)`` of DeepXDE (its Python loop: per-step
    batch fetch and host-to-device copy, callbacks; one loss evaluation at the end of the call).
  * ``dde_step_ms``: DeepXDE's own jitted ``model.train_step`` (reverse-mode ``dde.grad.hessian``)
    in the same loop as ours, inputs on device: the kernel-to-kernel comparison.
  * ``forward_ms`` / ``vmap_hessian_ms``: our step with the Laplacian from ``pinn.laplacian``
    vs ``trace(vmap(hessian))`` (hand-written loss, same points).

Run: ``DDE_BACKEND=jax python -m experiments.coupling_pinn.bench`` (the DeepXDE part is skipped,
with the import error printed, if DeepXDE is not installed).
"""

from __future__ import annotations

import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers import pinn

WIDTH, HIDDEN = 64, 4


def _f(z):
    return 2 * math.pi**2 * jnp.sin(math.pi * z[..., 0]) * jnp.sin(math.pi * z[..., 1])


def _loop_time(step, carry, args, iters, repeats):
    """Median seconds per iteration of ``carry = step(*carry, *args)`` (compiled before)."""
    jax.block_until_ready(step(*carry, *args))
    ts = []
    for _ in range(repeats):
        c = carry
        t0 = time.perf_counter()
        for _ in range(iters):
            c = step(*c, *args)
        jax.block_until_ready(c)
        ts.append((time.perf_counter() - t0) / iters)
    return float(np.median(ts))


def _points(num_domain, num_boundary, seed=0):
    """DeepXDE-style points without DeepXDE: (all training points, BC points)."""
    rng = np.random.default_rng(seed)
    dom = rng.uniform(-1, 1, (num_domain, 2))
    t = rng.uniform(0, 4, num_boundary)
    side, s = np.floor(t).astype(int), 2 * (t % 1) - 1
    bnd = np.select([side[:, None] == k for k in range(4)],
                    [np.stack([s, -np.ones_like(s)], 1), np.stack([s, np.ones_like(s)], 1),
                     np.stack([-np.ones_like(s), s], 1), np.stack([np.ones_like(s), s], 1)])
    return np.vstack([bnd, dom, bnd]).astype(np.float32), bnd.astype(np.float32)


def _dde_model(num_domain, num_boundary, seed=0):
    os.environ.setdefault("DDE_BACKEND", "jax")  # before DeepXDE's first import picks one
    import deepxde as dde

    if dde.backend.backend_name != "jax":
        raise RuntimeError(f"DeepXDE backend is {dde.backend.backend_name!r}, not 'jax'")
    dde.config.set_random_seed(seed)
    geom = dde.geometry.Rectangle([-1, -1], [1, 1])

    def pde(x, y):
        u_xx = dde.grad.hessian(y, x, i=0, j=0)
        u_yy = dde.grad.hessian(y, x, i=1, j=1)
        u_xx, u_yy = u_xx[0], u_yy[0]  # jax backend: (value, function) pairs
        return -u_xx - u_yy - _f(x)[:, None]

    bc = dde.icbc.DirichletBC(geom, lambda x: np.zeros((len(x), 1)), lambda _, on_b: on_b)
    data = dde.data.PDE(geom, pde, bc, num_domain=num_domain, num_boundary=num_boundary,
                        num_test=256)
    net = dde.nn.FNN([2] + [WIDTH] * HIDDEN + [1], "tanh", "Glorot normal")
    model = dde.Model(data, net)
    model.compile("adam", lr=1e-3)
    return dde, model


def bench(num_domain: int = 1024, num_boundary: int = 256, iters: int = 200,
          repeats: int = 3, deepxde: bool = True) -> dict:
    out: dict = {"num_domain": num_domain, "num_boundary": num_boundary, "iters": iters}
    model = None
    if deepxde:
        try:
            dde, model = _dde_model(num_domain, num_boundary)
        except Exception as e:  # pragma: no cover - depends on the environment
            out["deepxde_error"] = f"{type(e).__name__}: {e}"
    if model is not None:
        x_all = np.asarray(model.data.train_x, np.float32)
        x_bc = np.asarray(model.data.train_x_bc, np.float32)
        out["deepxde_version"] = dde.__version__
    else:
        x_all, x_bc = _points(num_domain, num_boundary)
    out["residual_points"], out["bc_points"] = len(x_all), len(x_bc)

    prob = pinn.make_problem("poisson", eval_n=10)
    net = pinn.make_network("mlp", depth=HIDDEN - 1, width=WIDTH)
    opt = optax.adam(1e-3)
    batch = {"interior": jnp.asarray(x_all), "boundary": jnp.asarray(x_bc)}
    state = pinn.init_pinn_state(net, prob, opt, jax.random.key(0))
    step = jax.jit(pinn.make_pinn_step(net, prob, opt))
    ours = _loop_time(lambda s, b: (step(s, b)[0],), (state,), (batch,), iters, repeats)
    out["ours_step_ms"] = 1e3 * ours
    # Same network and parameters with the depth loop scanned (``unroll=1``): an XLA while-loop.
    net_s = pinn.make_network("mlp", depth=HIDDEN - 1, width=WIDTH, unroll=1)
    step_s = jax.jit(pinn.make_pinn_step(net_s, prob, opt))
    out["ours_scanned_step_ms"] = 1e3 * _loop_time(lambda s, b: (step_s(s, b)[0],), (state,),
                                                   (batch,), iters, repeats)

    if model is not None:
        model.train(iterations=20, display_every=10**9, verbose=0)  # compile + warm-up
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            model.train(iterations=iters, display_every=10**9, verbose=0)
            jax.block_until_ready(model.params)
            ts.append((time.perf_counter() - t0) / iters)
        out["dde_train_ms"] = 1e3 * float(np.median(ts))
        xs, ys = jnp.asarray(model.train_state.X_train), model.train_state.y_train
        dstep = lambda p, s, x, y: model.train_step(p, s, x, y)
        out["dde_step_ms"] = 1e3 * _loop_time(dstep, (model.params, model.opt_state), (xs, ys),
                                              iters, repeats)
        out["ratio_ours_over_dde_train"] = out["ours_step_ms"] / out["dde_train_ms"]
        out["ratio_ours_over_dde_step"] = out["ours_step_ms"] / out["dde_step_ms"]
        out["ratio_scanned_over_dde_train"] = out["ours_scanned_step_ms"] / out["dde_train_ms"]
        out["ratio_scanned_over_dde_step"] = out["ours_scanned_step_ms"] / out["dde_step_ms"]

    # Forward mode vs vmap(hessian), same hand-written loss, same points.
    params = state.params["net"]

    def make(lap):
        def loss(p):
            u = lambda z: net.apply(p, z)
            r = -lap(u, batch["interior"]) - _f(batch["interior"])
            return jnp.mean(r**2) + jnp.mean(jax.vmap(u)(batch["boundary"]) ** 2)

        @jax.jit
        def step_(p, s):
            upd, s = opt.update(jax.grad(loss)(p), s, p)
            return optax.apply_updates(p, upd), s

        return step_

    hess_lap = lambda u, x: jnp.trace(jax.vmap(jax.hessian(u))(x), axis1=1, axis2=2)
    s0 = opt.init(params)
    fwd = _loop_time(make(pinn.laplacian), (params, s0), (), iters, repeats)
    rev = _loop_time(make(hess_lap), (params, s0), (), iters, repeats)
    out.update(forward_ms=1e3 * fwd, vmap_hessian_ms=1e3 * rev, forward_over_hessian=fwd / rev)
    return out


if __name__ == "__main__":  # pragma: no cover
    for k, v in bench().items():
        print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")
