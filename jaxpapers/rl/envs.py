"""Continuous-action test environments in pure JAX (unbatched; callers ``jax.vmap`` them).

* :func:`bandit2d` -- a one-step, four-peak bandit on ``[-1, 1]^2``: the reward is a sum of equal
  Gaussian bumps plus Gaussian noise, so a multimodal policy is optimal-in-expectation everywhere
  on the peaks and :func:`mode_masses` measures how many modes a policy keeps.
* :func:`point_goal` -- the MultiGoal point mass of soft Q-learning (Haarnoja et al. 2017, the
  didactic multi-goal example; also DACER's ``relax_env/multigoal.py``): a 2-D point moved by its
  velocity action towards one of up to four goals at distance 5.

Both are one :class:`Env` pytree whose arrays (peak centres, widths, costs) are leaves, so a
sweep can vmap over them, and whose structure (``kind``, dimensions, horizon) is static.
:func:`reset` and :func:`step` dispatch on the static ``kind`` at trace time only (no string
dispatch in the compiled program). :func:`step` does not reset; :func:`step_autoreset` does, with
the same outputs as :class:`jaxpapers.rl.gym.GymVecEnv.step` (true successor for the replay
buffer, and the observation to act on next).

Letters: O observation size, A action size (2), P peaks / goals, K actions.
"""

from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp

from jaxpapers.core import pytree

__all__ = ["Env", "EnvState", "bandit2d", "point_goal", "reset", "step", "step_autoreset",
           "bandit_mean_reward", "mode_masses", "goal_reached", "BANDIT_CENTRES", "GOALS"]

BANDIT_CENTRES = ((0.5, 0.5), (0.5, -0.5), (-0.5, 0.5), (-0.5, -0.5))
GOALS = ((5.0, 0.0), (-5.0, 0.0), (0.0, 5.0), (0.0, -5.0))

_KINDS = ("bandit2d", "point_goal")


@pytree.dataclass
class Env:
    """A continuous-action environment: traced parameters, static structure.

    Fields marked (bandit2d) or (point_goal) are zero and unused in the other kind.

    Attributes:
      targets: [P, 2] float32 reward peak centres (bandit2d) or goal positions (point_goal).
      width: [] float32 peak width (bandit2d).
      noise: [] float32 reward noise standard deviation (bandit2d).
      goal_radius: [] float32 a goal is reached within this distance (point_goal, 1).
      goal_reward: [] float32 bonus on reaching a goal (point_goal, 10).
      action_cost: [] float32 coefficient of ``|a|^2`` in the cost (point_goal, 30).
      start_std: [] float32 standard deviation of the start position (point_goal, 0.1).
      bound: [] float32 positions are clipped to ``[-bound, bound]`` (point_goal, 7).
      kind: static, ``"bandit2d"`` or ``"point_goal"``.
      name: static label.
      obs_dim: static O.
      act_dim: static A.
      max_steps: static episode truncation.
    """

    targets: jax.Array  # [P, 2]
    width: jax.Array  # []
    noise: jax.Array  # []
    goal_radius: jax.Array  # []
    goal_reward: jax.Array  # []
    action_cost: jax.Array  # []
    start_std: jax.Array  # []
    bound: jax.Array  # []
    kind: str = pytree.static_field(default="bandit2d")
    name: str = pytree.static_field(default="bandit2d")
    obs_dim: int = pytree.static_field(default=1)
    act_dim: int = pytree.static_field(default=2)
    max_steps: int = pytree.static_field(default=1)

    @property
    def num_targets(self) -> int:
        """P, the number of peaks (bandit2d) or goals (point_goal)."""
        return self.targets.shape[0]


@pytree.dataclass
class EnvState:
    """Unbatched environment state.

    Attributes:
      pos: [A] float32 position (point_goal) or the last clipped action (bandit2d; zeros at reset).
      t: [] int32 steps taken in the episode.
    """

    pos: jax.Array  # [A]
    t: jax.Array  # []


def _concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _f32(x) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


def bandit2d(*, centres=BANDIT_CENTRES, width: float = 0.15, noise: float = 0.1) -> Env:
    """One-step bandit with equal Gaussian reward peaks (obs_dim 1, act_dim 2, max_steps 1).

    ``r(a) = sum_k exp(-|a - c_k|^2 / (2 width^2)) + noise * N(0, 1)`` for ``a`` clipped to
    ``[-1, 1]^2``; every episode terminates after its one step; the observation is ``zeros(1)``.

    Args:
      centres: [P, 2] peak centres (default the four points ``(+-0.5, +-0.5)``).
      width: peak width (> 0).
      noise: reward noise standard deviation (>= 0).

    Returns:
      The :class:`Env` (``kind="bandit2d"``).

    Raises:
      ValueError: ``centres`` is not [P, 2] with P >= 1, ``width <= 0`` or ``noise < 0``.

    >>> import jax, jax.numpy as jnp
    >>> env = bandit2d()
    >>> state, obs = reset(env, jax.random.key(0))
    >>> _, _, r, term, trunc = step(env.replace(noise=jnp.float32(0.0)), jax.random.key(1), state,
    ...                             jnp.array([0.5, 0.5]))
    >>> round(float(r), 4), bool(term), bool(trunc), obs.shape
    (1.0, True, False, (1,))
    """
    if _concrete(centres):
        c = np.asarray(centres, np.float64)
        if c.ndim != 2 or c.shape[0] < 1 or c.shape[1] != 2:
            raise ValueError(f"centres must have shape [P, 2] with P >= 1, got {c.shape}")
    if _concrete(width) and not float(width) > 0:
        raise ValueError(f"width must be > 0, got {width}")
    if _concrete(noise) and not float(noise) >= 0:
        raise ValueError(f"noise must be >= 0, got {noise}")
    zero = _f32(0.0)
    return Env(targets=_f32(centres), width=_f32(width), noise=_f32(noise), goal_radius=zero,
               goal_reward=zero, action_cost=zero, start_std=zero, bound=_f32(1.0),
               kind="bandit2d", name="bandit2d", obs_dim=1, act_dim=2, max_steps=1)


def point_goal(*, num_goals: int = 4, horizon: int = 30) -> Env:
    """The MultiGoal point mass (obs = position [2], act_dim 2, max_steps = ``horizon``).

    Goals are the first ``num_goals`` of ``(5, 0), (-5, 0), (0, 5), (0, -5)``. With ``a`` clipped to
    ``[-1, 1]^2`` and ``p' = clip(p + a, -7, 7)``::

        r = -30 |a|^2 - min_g |p' - g|^2 + 10 * 1[min_g |p' - g| <= 1],

    and the episode terminates when a goal is reached; the start is ``N(0, 0.1^2 I)``. The other
    constants are :class:`Env` leaves (``goal_radius``, ``goal_reward``, ``action_cost``,
    ``start_std``, ``bound``) and may be changed with ``env.replace``.

    Args:
      num_goals: how many goals, 1 to 4 (1 gives a single-mode task for fast tests).
      horizon: episode truncation, >= 1.

    Returns:
      The :class:`Env` (``kind="point_goal"``).

    Raises:
      ValueError: ``num_goals`` not in 1..4 or ``horizon < 1``.

    >>> import jax, jax.numpy as jnp
    >>> env = point_goal(num_goals=1)
    >>> state = EnvState(pos=jnp.array([3.5, 0.0]), t=jnp.int32(0))
    >>> state, obs, r, term, trunc = step(env, jax.random.key(0), state, jnp.array([1.0, 0.0]))
    >>> obs.tolist(), float(r), bool(term), int(goal_reached(env, state))  # -30 - 0.25 + 10
    ([4.5, 0.0], -20.25, True, 0)
    """
    if not isinstance(num_goals, (int, np.integer)) or not 1 <= num_goals <= len(GOALS):
        raise ValueError(f"num_goals must be an int in 1..{len(GOALS)}, got {num_goals!r}")
    if not isinstance(horizon, (int, np.integer)) or horizon < 1:
        raise ValueError(f"horizon must be an int >= 1, got {horizon!r}")
    return Env(targets=_f32(GOALS[:num_goals]), width=_f32(0.0), noise=_f32(0.0),
               goal_radius=_f32(1.0), goal_reward=_f32(10.0), action_cost=_f32(30.0),
               start_std=_f32(0.1), bound=_f32(7.0), kind="point_goal",
               name=f"point_goal{num_goals}", obs_dim=2, act_dim=2, max_steps=int(horizon))


def _check_kind(env: Env, kind: str | None, fn: str):
    if env.kind not in _KINDS:
        raise ValueError(f"env.kind must be one of {_KINDS}, got {env.kind!r}")
    if kind is not None and env.kind != kind:
        raise ValueError(f"{fn} needs a {kind} env, got kind {env.kind!r}")


def _observe(env: Env, pos: jax.Array) -> jax.Array:
    if env.kind == "bandit2d":
        return jnp.zeros((env.obs_dim,), jnp.float32)
    return pos.astype(jnp.float32)


def reset(env: Env, key: jax.Array) -> tuple[EnvState, jax.Array]:
    """Start an episode (unbatched; ``key`` consumed).

    Args:
      env: the environment.
      key: draws the start position (point_goal); unused by bandit2d.

    Returns:
      ``(state, obs [O] float32)``.

    >>> import jax
    >>> state, obs = reset(point_goal(), jax.random.key(0))
    >>> obs.shape, int(state.t)
    ((2,), 0)
    """
    _check_kind(env, None, "reset")
    t = jnp.zeros((), jnp.int32)
    if env.kind == "bandit2d":
        pos = jnp.zeros((env.act_dim,), jnp.float32)
    else:
        pos = env.start_std * jax.random.normal(key, (env.act_dim,), jnp.float32)
        pos = jnp.clip(pos, -env.bound, env.bound)
    return EnvState(pos=pos, t=t), _observe(env, pos)


def _bandit_mean(env: Env, a: jax.Array) -> jax.Array:
    d2 = jnp.sum((a[..., None, :] - env.targets) ** 2, axis=-1)  # [..., P]
    return jnp.sum(jnp.exp(-d2 / (2.0 * env.width ** 2)), axis=-1)


def step(env: Env, key: jax.Array, state: EnvState, action: jax.Array
         ) -> tuple[EnvState, jax.Array, jax.Array, jax.Array, jax.Array]:
    """One transition (unbatched; ``key`` consumed). No reset: see :func:`step_autoreset`.

    The action is clipped to ``[-1, 1]^A`` first. ``truncated`` is ``t' >= max_steps`` and not
    ``terminated``.

    Args:
      env: the environment.
      key: draws the reward noise (bandit2d); unused by point_goal.
      state: unbatched state.
      action: [A] action in ``[-1, 1]``.

    Returns:
      ``(next_state, obs [O] float32, reward [] float32, terminated [] bool, truncated [] bool)``.

    Raises:
      ValueError: ``action`` does not have shape [A].

    >>> import jax, jax.numpy as jnp
    >>> env = point_goal(horizon=1)
    >>> s0 = EnvState(pos=jnp.zeros(2), t=jnp.int32(0))
    >>> _, obs, r, term, trunc = step(env, jax.random.key(0), s0, jnp.array([0.0, 3.0]))
    >>> obs.tolist(), float(r), bool(term), bool(trunc)  # clipped to 1: -30 - |(0, 1) - (0, 5)|^2
    ([0.0, 1.0], -46.0, False, True)
    """
    _check_kind(env, None, "step")
    action = jnp.asarray(action)
    if action.shape != (env.act_dim,):
        raise ValueError(f"action must have shape [{env.act_dim}] (unbatched; vmap for a batch), "
                         f"got {action.shape}")
    a = jnp.clip(action.astype(jnp.float32), -1.0, 1.0)
    t = state.t + 1
    if env.kind == "bandit2d":
        pos = a
        reward = _bandit_mean(env, a) + env.noise * jax.random.normal(key, (), jnp.float32)
        terminated = jnp.ones((), bool)
    else:
        pos = jnp.clip(state.pos + a, -env.bound, env.bound)
        d2 = jnp.sum((pos - env.targets) ** 2, axis=-1)  # [P]
        terminated = jnp.min(d2) <= env.goal_radius ** 2
        reward = (-env.action_cost * jnp.sum(a ** 2) - jnp.min(d2)
                  + env.goal_reward * terminated.astype(jnp.float32))
    truncated = (t >= env.max_steps) & ~terminated
    return (EnvState(pos=pos, t=t), _observe(env, pos), reward.astype(jnp.float32), terminated,
            truncated)


def step_autoreset(env: Env, key: jax.Array, state: EnvState, action: jax.Array
                   ) -> tuple[EnvState, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """:func:`step`, then :func:`reset` where the episode ended (same-step autoreset; unbatched).

    Args:
      env: the environment.
      key: consumed (split for the step and the reset).
      state: unbatched state.
      action: [A] action in ``[-1, 1]``.

    Returns:
      ``(state, next_obs [O], reward [], terminated [], truncated [], obs [O])``: ``next_obs``
      is the true successor (for the replay buffer); ``state`` and ``obs`` are the reset ones
      where ``terminated | truncated``, else the successor.

    >>> import jax, jax.numpy as jnp
    >>> env = bandit2d()
    >>> s0, _ = reset(env, jax.random.key(0))
    >>> s1, next_obs, r, term, trunc, obs = step_autoreset(env, jax.random.key(1), s0, jnp.zeros(2))
    >>> int(s1.t), bool(term)
    (0, True)
    """
    key_step, key_reset = jax.random.split(key)
    nxt, next_obs, reward, terminated, truncated = step(env, key_step, state, action)
    fresh, fresh_obs = reset(env, key_reset)
    done = terminated | truncated
    new_state = jax.tree.map(lambda f, n: jnp.where(done, f, n), fresh, nxt)
    obs = jnp.where(done, fresh_obs, next_obs)
    return new_state, next_obs, reward, terminated, truncated, obs


def bandit_mean_reward(env: Env, actions: jax.Array) -> jax.Array:
    """Noise-free bandit reward ``sum_k exp(-|a - c_k|^2 / (2 width^2))`` (``a`` clipped to
    [-1, 1]).

    Equals the expected reward of :func:`step` at the same action.

    Args:
      env: a bandit2d env.
      actions: [..., 2] actions.

    Returns:
      [...] float32 mean rewards.

    Raises:
      ValueError: ``env`` is not a bandit2d env or ``actions`` is not [..., 2].

    >>> import jax.numpy as jnp
    >>> bandit_mean_reward(bandit2d(), jnp.array([[0.5, -0.5], [5.0, 5.0]])).round(4).tolist()
    [1.0, 0.0]
    """
    _check_kind(env, "bandit2d", "bandit_mean_reward")
    actions = jnp.asarray(actions)
    if actions.ndim < 1 or actions.shape[-1] != env.act_dim:
        raise ValueError(f"actions must have shape [..., {env.act_dim}], got {actions.shape}")
    a = jnp.clip(actions.astype(jnp.float32), -1.0, 1.0)
    return _bandit_mean(env, a)


def mode_masses(env: Env, actions: jax.Array, *, radius=0.25) -> jax.Array:
    """Share of the K actions within Euclidean distance ``radius`` of each peak.

    Args:
      env: a bandit2d env (P peaks).
      actions: [K, 2] actions (e.g. samples of a policy).
      radius: distance from a peak counted as its mode (> 0; may be traced).

    Returns:
      [P] float32 shares in ``[0, 1]`` (they sum to at most 1 while the radius is under half the
      distance between peaks).

    Raises:
      ValueError: ``env`` is not a bandit2d env, ``actions`` is not [K, 2] with K >= 1, or
      ``radius <= 0``.

    >>> import jax.numpy as jnp
    >>> acts = jnp.array([[0.5, 0.5], [0.6, 0.4], [-0.5, -0.5], [0.0, 0.0]])
    >>> mode_masses(bandit2d(), acts).tolist()
    [0.5, 0.0, 0.0, 0.25]
    """
    _check_kind(env, "bandit2d", "mode_masses")
    actions = jnp.asarray(actions)
    if actions.ndim != 2 or actions.shape[0] < 1 or actions.shape[1] != env.act_dim:
        raise ValueError(f"actions must have shape [K, {env.act_dim}] with K >= 1, "
                         f"got {actions.shape}")
    if _concrete(radius) and not float(radius) > 0:
        raise ValueError(f"radius must be > 0, got {radius}")
    d2 = jnp.sum((actions[:, None, :].astype(jnp.float32) - env.targets) ** 2, axis=-1)  # [K, P]
    return jnp.mean(d2 <= jnp.asarray(radius, jnp.float32) ** 2, axis=0, dtype=jnp.float32)


def goal_reached(env: Env, state: EnvState) -> jax.Array:
    """[] int32 index of the goal within ``goal_radius`` of ``state.pos``, else -1 (unbatched).

    Args:
      env: a point_goal env.
      state: unbatched state.

    Returns:
      [] int32 goal index in ``0..P-1``, or -1.

    Raises:
      ValueError: ``env`` is not a point_goal env.

    >>> import jax.numpy as jnp
    >>> env = point_goal()
    >>> [int(goal_reached(env, EnvState(pos=jnp.array(p), t=jnp.int32(3))))
    ...  for p in ([0.0, -4.5], [2.0, 2.0])]
    [3, -1]
    """
    _check_kind(env, "point_goal", "goal_reached")
    d2 = jnp.sum((state.pos - env.targets) ** 2, axis=-1)  # [P]
    i = jnp.argmin(d2).astype(jnp.int32)
    return jnp.where(d2[i] <= env.goal_radius ** 2, i, jnp.int32(-1))
