"""PINN training on optax and the core loop: weighted loss terms, adaptive weights, causal
weighting, and data parallelism over the collocation batch with ``shard_map``.

Parameters are ``{"net": flax params, "weights": {term: []}}``: the loss weights ride in the
state (never differentiated; only ``"net"`` has an optimizer state) so that the core
:func:`jaxpapers.core.train.fit` loop carries and checkpoints them. The loss is

  L(theta) = sum_k lambda_k L_k(theta),   L_k = mean_i |r_k(x_i; theta)|^2,

with lambda refreshed every ``update_every`` steps by an exponential moving average
(momentum m) of

  grad-norm weighting:  lambda_k = mean_j ||grad L_j|| / ||grad L_k||,
  NTK weighting:        lambda_k = mean_j tr(K_j) / tr(K_k),  tr(K_k) = mean_i ||d r_k(x_i)/d theta||^2

(Wang, Wang & Perdikaris; jaxpi). Causal weighting (Wang, Sankaran & Perdikaris 2022) splits the
time-sorted interior residuals into M windows with losses L^1..L^M and uses
w_i = exp(-eps sum_{j<i} L^j) (no gradient through w); L_res = mean_i w_i L^i.

>>> import jax, optax
>>> from jaxpapers.pinn import make_network, make_problem
>>> prob = make_problem("gradient_fit", omega=1.0, eval_n=20)
>>> net = make_network("mlp", depth=2, width=16)
>>> state, hist = train(prob, net, jax.random.key(0), num_steps=20, batch_size=32,
...                     optimizer=optax.adam(1e-3), progress=False)
>>> hist["loss"].shape, int(state.step)
((20,), 20)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec as P

from jaxpapers.core import checks
from jaxpapers.core.train import TrainState, fit
from jaxpapers.pinn._types import Problem

__all__ = ["WEIGHTINGS", "loss_terms", "init_pinn_state", "make_pinn_step", "train",
           "relative_l2", "grad_norm_weights", "ntk_weights", "causal_weights"]

WEIGHTINGS = ("none", "grad_norm", "ntk")


def _sq(r: jax.Array) -> jax.Array:
    """Per-point squared residual [N] from [N] or [N, m]."""
    return r**2 if r.ndim == 1 else jnp.sum(r**2, axis=tuple(range(1, r.ndim)))


def causal_weights(window_losses: jax.Array, tol: jax.typing.ArrayLike) -> jax.Array:
    """w_i = exp(-tol * sum_{j<i} L^j) for window losses L [M]; returns [M] (no gradient)."""
    prev = jnp.cumsum(window_losses) - window_losses
    return jax.lax.stop_gradient(jnp.exp(-tol * prev))


def loss_terms(net, problem: Problem, net_params: Any, batch: Mapping[str, jax.Array], *,
               causal_tol: jax.typing.ArrayLike | None = None,
               num_chunks: int = 16) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
    """Mean-square loss of every residual term (causally weighted ``"res"`` if ``causal_tol``).

    Returns:
      (terms, aux): ``terms[k]`` scalar L_k; ``aux`` holds ``causal_min_weight`` when causal.
    """
    u = lambda z: net.apply(net_params, z)
    res = problem.residuals(u, batch)
    terms = {k: jnp.mean(_sq(r)) for k, r in res.items()}
    aux = {}
    if causal_tol is not None:
        sq = _sq(res["res"])
        if sq.shape[0] % num_chunks:
            raise ValueError(f"num_chunks={num_chunks} must divide the interior batch size "
                             f"{sq.shape[0]}")
        window = jnp.mean(sq.reshape(num_chunks, -1), axis=1)
        w = causal_weights(window, causal_tol)
        terms["res"] = jnp.mean(w * window)
        aux["causal_min_weight"] = w[-1]
    return terms, aux


def grad_norm_weights(terms_fn: Callable[[Any], dict[str, jax.Array]], net_params: Any
                      ) -> dict[str, jax.Array]:
    """lambda_k = mean_j ||grad L_j|| / ||grad L_k|| for ``terms_fn(net_params) -> {k: L_k}``."""
    grads = jax.jacrev(terms_fn)(net_params)
    norms = {k: optax.tree.norm(g) for k, g in grads.items()}
    mean = jnp.mean(jnp.stack(list(norms.values())))
    return {k: mean / jnp.maximum(n, 1e-30) for k, n in norms.items()}


def ntk_weights(residuals_fn: Callable[[Any], dict[str, jax.Array]], net_params: Any
                ) -> dict[str, jax.Array]:
    """lambda_k = mean_j tr K_j / tr K_k, tr K_k = mean over points of ||d r_k / d theta||^2."""
    jac = jax.jacrev(residuals_fn)(net_params)
    traces = {}
    for k, jk in jac.items():
        sq = sum(jnp.sum(leaf.reshape(leaf.shape[0], -1) ** 2, axis=1)
                 for leaf in jax.tree.leaves(jk))
        traces[k] = jnp.mean(sq)
    mean = jnp.mean(jnp.stack(list(traces.values())))
    return {k: mean / jnp.maximum(t, 1e-30) for k, t in traces.items()}


def init_pinn_state(net, problem: Problem, optimizer: optax.GradientTransformation,
                    key: jax.Array) -> TrainState:
    """Initial :class:`~jaxpapers.core.train.TrainState`: network init, all loss weights 1.

    ``key`` is consumed: one half initialises the network, the other is the run's base key.
    """
    k_net, k_run = jax.random.split(key)
    net_params = net.init(k_net, jnp.zeros((problem.dim,), jnp.float32))
    batch = jax.eval_shape(lambda k: problem.sample(k, 16), jax.random.key(0))
    batch = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), batch)
    names = jax.eval_shape(lambda p: loss_terms(net, problem, p, batch)[0], net_params)
    params = {"net": net_params, "weights": {k: jnp.ones((), jnp.float32) for k in names}}
    return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                      opt_state=optimizer.init(net_params), key_data=jax.random.key_data(k_run))


@dataclasses.dataclass(frozen=True)
class _PinnStep:
    """The step of :func:`make_pinn_step`: a frozen, hashable value, so that two steps built
    with equal settings (same net, problem and optimizer objects) share one compilation of the
    core loop's ``run_chunk`` (its ``step_fn`` is a static argument)."""

    net: Any
    problem: Problem
    optimizer: optax.GradientTransformation
    weighting: str
    update_every: int
    momentum: float
    causal_tol: float | None
    num_chunks: int
    ntk_points: int
    mesh: jax.sharding.Mesh | None
    axis: str | None

    def _weighted(self, net_params, weights, batch):
        terms, aux = loss_terms(self.net, self.problem, net_params, batch,
                                causal_tol=self.causal_tol, num_chunks=self.num_chunks)
        loss = sum(weights[k] * terms[k] for k in terms)
        return loss, {**{f"loss_{k}": v for k, v in terms.items()}, **aux}

    def _grads(self, net_params, weights, batch):
        axis = self.axis

        def grads(net_params, weights, batch):
            (loss, aux), g = jax.value_and_grad(self._weighted, has_aux=True)(
                net_params, weights, batch)
            if axis is not None:
                # Under shard_map (check_vma) the gradient w.r.t. the replicated parameters is
                # already psum-reduced over the axis by the transpose; divide to get the mean.
                loss, aux = jax.lax.pmean((loss, aux), axis)
                g = jax.tree.map(lambda a: a / jax.lax.axis_size(axis), g)
            return loss, aux, g

        if self.mesh is not None:
            grads = jax.shard_map(grads, mesh=self.mesh, in_specs=(P(), P(), P(axis)),
                                  out_specs=(P(), P(), P()))
        return grads(net_params, weights, batch)

    def _new_weights(self, net_params, batch, old):
        net, problem = self.net, self.problem
        if self.weighting == "grad_norm":
            w = grad_norm_weights(
                lambda p: loss_terms(net, problem, p, batch, causal_tol=self.causal_tol,
                                     num_chunks=self.num_chunks)[0], net_params)
        else:
            sub = jax.tree.map(lambda x: x[:: max(1, x.shape[0] // self.ntk_points)], batch)
            w = ntk_weights(lambda p: problem.residuals(lambda z: net.apply(p, z), sub),
                            net_params)
        m = self.momentum
        return jax.tree.map(lambda a, b: m * a + (1.0 - m) * b, old, w)

    def __call__(self, state: TrainState, batch):
        net_params, weights = state.params["net"], state.params["weights"]
        if self.weighting != "none":
            weights = jax.lax.cond(state.step % self.update_every == 0,
                                   lambda: self._new_weights(net_params, batch, weights),
                                   lambda: weights)
            weights = jax.lax.stop_gradient(weights)
        loss, aux, g = self._grads(net_params, weights, batch)
        updates, opt_state = self.optimizer.update(g, state.opt_state, net_params)
        net_params = optax.apply_updates(net_params, updates)
        metrics = {"loss": loss, "grad_norm": optax.tree.norm(g), **aux,
                   **{f"weight_{k}": v for k, v in weights.items()}}
        return TrainState(step=state.step + 1, params={"net": net_params, "weights": weights},
                          opt_state=opt_state, key_data=state.key_data), metrics


def make_pinn_step(net, problem: Problem, optimizer: optax.GradientTransformation, *,
                   weighting: str = "none", update_every: int = 1000, momentum: float = 0.9,
                   causal_tol: float | None = None, num_chunks: int = 16,
                   ntk_points: int = 64, mesh: jax.sharding.Mesh | None = None,
                   axis_name: str | None = None):
    """One PINN step ``(state, batch) -> (state, metrics)`` for :func:`~jaxpapers.core.train.fit`.

    The step is a frozen, hashable value: steps made with equal arguments (the same ``net``
    settings, ``problem`` and ``optimizer`` objects) compare equal, so the core loop compiles
    once for all of them.

    Args:
      net: a network from :func:`~jaxpapers.pinn.make_network`.
      problem: the PDE problem.
      optimizer: optax transformation for the network parameters.
      weighting: ``"none"``, ``"grad_norm"`` or ``"ntk"`` (loss-term weights lambda).
      update_every: refresh period of lambda in steps (also at step 0).
      momentum: EMA momentum of lambda.
      causal_tol: eps of causal weighting (time-dependent problems only), None disables it.
      num_chunks: number of time windows for causal weighting.
      ntk_points: points per term (strided subsample) for the NTK traces.
      mesh: if given, the gradient is computed under ``jax.shard_map`` with the collocation
        batch split over ``axis_name`` (default: the mesh's first axis) and ``pmean``-reduced;
        parameters replicated. Equal to the unsharded step when shards are equal-sized.

    Raises:
      ValueError: unknown ``weighting``; causal weighting on a stationary problem or together
        with ``mesh`` (the window losses would need a cross-device reduction before the exp);
        bad ``update_every``/``momentum``.
      TypeError: a non-int ``update_every``, ``num_chunks`` or ``ntk_points``.
    """
    checks.check_choice("weighting", weighting, WEIGHTINGS)
    update_every = checks.check_int("update_every", update_every, minimum=1)
    num_chunks = checks.check_int("num_chunks", num_chunks, minimum=1)
    ntk_points = checks.check_int("ntk_points", ntk_points, minimum=1)
    checks.check_range("momentum", momentum, low=0.0, high=1.0, high_open=True)
    if causal_tol is not None and not problem.time_dependent:
        raise ValueError(f"causal_tol needs a time-dependent problem; {problem.name!r} is not")
    if causal_tol is not None and mesh is not None:
        raise ValueError("causal_tol is not supported with mesh (sharded time windows)")
    axis = None
    if mesh is not None:
        axis = axis_name or mesh.axis_names[0]
    # plain floats: the step is hashed and compared as a static argument
    momentum = float(momentum) if checks.is_concrete(momentum) else momentum
    if causal_tol is not None and checks.is_concrete(causal_tol):
        causal_tol = float(causal_tol)
    return _PinnStep(net=net, problem=problem, optimizer=optimizer, weighting=weighting,
                     update_every=update_every, momentum=momentum, causal_tol=causal_tol,
                     num_chunks=num_chunks, ntk_points=ntk_points, mesh=mesh, axis=axis)


@dataclasses.dataclass(frozen=True)
class _PinnBatch:
    """``batch_fn(t, k_data)`` of :func:`train`: fresh collocation points of step t (hashable)."""

    problem: Problem
    batch_size: int

    def __call__(self, t, k_data):
        return self.problem.sample(jax.random.fold_in(k_data, t), self.batch_size)


def train(problem: Problem, net, key: jax.Array, *, num_steps: int, batch_size: int,
          optimizer: optax.GradientTransformation, chunk_size: int = 100,
          progress: bool = True, desc: str = "pinn", checkpoint_dir=None,
          checkpoint_every: int | None = None, **step_kwargs) -> tuple[TrainState, dict]:
    """Train ``net`` on ``problem`` with fresh collocation points every step (core ``fit``).

    The batch of step t is ``problem.sample(fold_in(k_data, t), batch_size)``; ``key`` is
    consumed (network init, data stream, run key). Extra keywords go to :func:`make_pinn_step`.
    A second call with the same ``problem``, ``net`` settings and ``optimizer`` object (any key)
    reuses the compiled chunks.

    Returns:
      (final TrainState, history dict of [num_steps] arrays).
    """
    batch_size = checks.check_int("batch_size", batch_size, minimum=1)
    k_init, k_data = jax.random.split(key)
    state = init_pinn_state(net, problem, optimizer, k_init)
    step = make_pinn_step(net, problem, optimizer, **step_kwargs)
    return fit(step, state, _PinnBatch(problem, batch_size), num_steps=num_steps,
               chunk_size=chunk_size, progress=progress, desc=desc,
               checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every, data=k_data)


def relative_l2(net, net_params: Any, problem: Problem) -> jax.Array:
    """||u_theta - u_ref|| / ||u_ref|| over ``problem.eval_points`` (a scalar)."""
    pts = jnp.asarray(problem.eval_points, jnp.result_type(float))
    ref = jnp.asarray(problem.eval_values, pts.dtype)
    pred = jax.vmap(lambda z: net.apply(net_params, z))(pts)
    return jnp.linalg.norm(pred - ref) / jnp.linalg.norm(ref)
