"""Online training on pure-JAX environments as one ``lax.scan`` (vmap it over seeds).

Each iteration of :func:`make_trainer`'s ``run``: act in E parallel environments (uniform
random actions during the first ``warmup`` iterations, then the agent's plain policy), step them
with same-step autoreset, add the E transitions to the ring buffer, draw a batch and apply
``updates_per_iter`` agent updates. ``run(..., critic_only=True)`` (static) acts uniformly and
updates only the critics: a warm-up phase in which the critics learn before the actor moves.
Rewards are multiplied by ``reward_scale`` before they enter the buffer (QVPO / DACER use 0.2 on
MuJoCo); episode returns are reported unscaled.
The whole run -- environment, buffer and learner -- is one compiled program; vmapped over seeds
(and over :class:`CGPOParams` for ablations) it trains every run at once.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxpapers.core import checks, pytree
from jaxpapers.rl import envs as envs_lib
from jaxpapers.rl.cgpo import Agent
from jaxpapers.rl.replay import ReplayBuffer, Transition, replay_add, replay_init, replay_sample

__all__ = ["TrainerState", "Trainer", "make_trainer", "evaluate"]


@pytree.dataclass
class TrainerState:
    """Everything a run carries (E environments).

    Attributes:
      agent: the agent's state. buffer: the replay ring.
      env_state: [E] environment states; obs: [E, O] observations to act on.
      episode_return: [E] unscaled return of the running episodes.
      iteration: [] int32 iterations done.
    """

    agent: Any
    buffer: ReplayBuffer
    env_state: Any
    obs: jax.Array
    episode_return: jax.Array
    iteration: jax.Array


class Trainer(NamedTuple):
    """``init(key) -> TrainerState``; ``step(state, hp, key, *, critic_only=False) -> (state,
    metrics)``: one iteration; ``run(state, hp, key, num_iters, *, critic_only=False) ->
    (state, metrics)``: ``lax.scan`` of ``step``
    over ``split(key, num_iters)``, metrics stacked over iterations ([num_iters] each): the
    agent's update metrics plus ``episodes`` (episodes finished in the iteration) and
    ``return_sum`` (their returns)."""

    init: Any
    step: Any
    run: Any


def make_trainer(agent: Agent, env: envs_lib.Env, *, num_envs: int, batch_size: int,
                 capacity: int, warmup: int = 0, updates_per_iter: int = 1,
                 reward_scale: float = 1.0) -> Trainer:
    """The scan-based trainer of ``agent`` on ``env`` (see the module docstring).

    Raises:
      ValueError: ``capacity`` < ``batch_size`` or < ``num_envs``, non-positive counts,
        ``reward_scale`` <= 0.
    """
    num_envs = checks.check_int("num_envs", num_envs, minimum=1)
    batch_size = checks.check_int("batch_size", batch_size, minimum=1)
    capacity = checks.check_int("capacity", capacity, minimum=1)
    warmup = checks.check_int("warmup", warmup, minimum=0)
    updates_per_iter = checks.check_int("updates_per_iter", updates_per_iter, minimum=1)
    checks.check_range("reward_scale", reward_scale, low=0.0, low_open=True, scalar=True)
    if capacity < max(batch_size, num_envs):
        raise ValueError(f"capacity must be >= batch_size ({batch_size}) and >= num_envs "
                         f"({num_envs}), got {capacity}")
    obs_dim, act_dim = env.obs_dim, env.act_dim
    v_reset = jax.vmap(envs_lib.reset, in_axes=(None, 0))
    v_step = jax.vmap(envs_lib.step_autoreset, in_axes=(None, 0, 0, 0))

    def init(key):
        checks.check_key("key", key)
        k_agent, k_env = jax.random.split(key)
        example = Transition(jnp.zeros((obs_dim,)), jnp.zeros((act_dim,)), jnp.zeros(()),
                             jnp.zeros((obs_dim,)), jnp.zeros(()))
        env_state, obs = v_reset(env, jax.random.split(k_env, num_envs))
        return TrainerState(agent.init(k_agent), replay_init(example, capacity), env_state, obs,
                            jnp.zeros((num_envs,), jnp.float32), jnp.zeros((), jnp.int32))

    def one_iter(ts: TrainerState, hp, key, *, critic_only: bool = False):
        k_act, k_uni, k_env, k_upd = jax.random.split(key, 4)
        uniform = jax.random.uniform(k_uni, (num_envs, act_dim), minval=-1.0, maxval=1.0)
        if critic_only:
            actions = uniform
        else:
            policy = agent.act(ts.agent, k_act, ts.obs)
            actions = jnp.where(ts.iteration < warmup, uniform, policy)
        env_state, next_obs, reward, term, trunc, obs = v_step(
            env, jax.random.split(k_env, num_envs), ts.env_state, actions)
        tr = Transition(ts.obs, actions, reward * reward_scale, next_obs,
                        term.astype(jnp.float32))
        buffer = replay_add(ts.buffer, tr)
        ret = ts.episode_return + reward
        done = term | trunc
        out = {"episodes": jnp.sum(done).astype(jnp.int32),
               "return_sum": jnp.sum(jnp.where(done, ret, 0.0))}
        agent_state = ts.agent
        for k in jax.random.split(k_upd, updates_per_iter):
            k_batch, k_learn = jax.random.split(k)
            batch = replay_sample(buffer, k_batch, batch_size)
            agent_state, met = agent.update(agent_state, hp, k_learn, batch,
                                            critic_only=critic_only)
        out.update(met)
        new = TrainerState(agent_state, buffer, env_state, obs, jnp.where(done, 0.0, ret),
                           ts.iteration + 1)
        return new, out

    def run(ts: TrainerState, hp, key, num_iters: int, *, critic_only: bool = False):
        num_iters = checks.check_int("num_iters", num_iters, minimum=1)
        return jax.lax.scan(lambda s, k: one_iter(s, hp, k, critic_only=critic_only), ts,
                            jax.random.split(key, num_iters))

    return Trainer(init, one_iter, run)


def evaluate(agent: Agent, env: envs_lib.Env, agent_state, key: jax.Array, *,
             num_episodes: int):
    """Run ``num_episodes`` full episodes with the agent's plain policy (no learning).

    Returns:
      ``(returns [E], final_state [E], obs [S, E, O], alive [S, E])``: unscaled returns, each
      episode's state at its end (frozen after termination), the observations acted on at each
      of the S = ``env.max_steps`` steps and whether the episode was still running there.
    """
    num_episodes = checks.check_int("num_episodes", num_episodes, minimum=1)
    k_reset, k_run = jax.random.split(key)
    state, obs = jax.vmap(envs_lib.reset, in_axes=(None, 0))(
        env, jax.random.split(k_reset, num_episodes))
    v_step = jax.vmap(envs_lib.step, in_axes=(None, 0, 0, 0))

    def body(carry, k):
        state, obs, ret, alive = carry
        k_act, k_env = jax.random.split(k)
        a = agent.act(agent_state, k_act, obs)
        nxt, nobs, r, term, trunc = v_step(env, jax.random.split(k_env, num_episodes), state, a)
        keep = lambda new, old: jnp.where(  # noqa: E731
            alive.reshape(alive.shape + (1,) * (new.ndim - 1)), new, old)
        state2 = jax.tree.map(keep, nxt, state)
        ret = ret + jnp.where(alive, r, 0.0)
        return (state2, keep(nobs, obs), ret, alive & ~(term | trunc)), (obs, alive)

    init = (state, obs, jnp.zeros((num_episodes,), jnp.float32),
            jnp.ones((num_episodes,), bool))
    (final, _, returns, _), (seen, alive) = jax.lax.scan(
        body, init, jax.random.split(k_run, env.max_steps))
    return returns, final, seen, alive
