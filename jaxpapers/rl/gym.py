"""Host-side wrapper around gymnasium's vectorised MuJoCo environments (``gymnasium.make_vec``).

The agent acts with jitted JAX functions; the environments step on the host in one process
(``vectorization_mode="sync"``). Episodes are reset in the same step that ends them
(``AutoresetMode.SAME_STEP``), so every :meth:`GymVecEnv.step` returns both the true successor
(``next_obs``, from gymnasium's ``info["final_obs"]`` for rows whose episode ended) for the replay
buffer, and the observation to act on next (``obs``, the reset one for those rows). Actions come in
``[-1, 1]`` and are rescaled to the action space's bounds.

gymnasium is imported lazily: ``pip install "gymnasium[mujoco]>=1.0"`` to use this module.

Letters: E environments, O observation size, A action size.
"""

from __future__ import annotations

import numpy as np

__all__ = ["GymVecEnv"]

_INSTALL = 'GymVecEnv needs gymnasium with MuJoCo: pip install "gymnasium[mujoco]>=1.0"'


def _import_gymnasium():
    try:
        import gymnasium
    except ImportError as err:
        raise ImportError(_INSTALL) from err
    return gymnasium


class GymVecEnv:
    """E synchronous copies of a gymnasium environment with same-step autoreset and episode returns.

    A plain Python object (host state; not a pytree, never traced).

    Args:
      env_id: gymnasium id, e.g. ``"HalfCheetah-v5"`` (flat Box observation and action spaces with
        finite action bounds).
      num_envs: E >= 1.
      seed: the first :meth:`reset` seeds copy ``i`` with ``seed + i``; later resets (automatic or
        explicit) continue the environments' own generators, so the same seed and the same actions
        give the same trajectory.
      env_kwargs: optional keyword arguments for ``gymnasium.make`` (e.g. ``max_episode_steps``).

    Attributes:
      obs_dim: O.
      act_dim: A.
      num_envs: E.
      env_steps: total environment transitions taken (E per :meth:`step`).

    Raises:
      ImportError: gymnasium (with MuJoCo) is not installed.
      ValueError: bad ``num_envs`` or ``seed``, or spaces this wrapper does not handle.
    """

    def __init__(self, env_id: str, num_envs: int, seed: int, *, env_kwargs: dict | None = None):
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        gym = _import_gymnasium()
        mode = gym.vector.AutoresetMode.SAME_STEP
        self._env = gym.make_vec(env_id, num_envs=int(num_envs), vectorization_mode="sync",
                                 vector_kwargs={"autoreset_mode": mode}, **(env_kwargs or {}))
        obs_space = self._env.single_observation_space
        act_space = self._env.single_action_space
        if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
            self._env.close()
            raise ValueError(f"{env_id}: needs a flat Box observation space, got {obs_space}")
        if not isinstance(act_space, gym.spaces.Box) or len(act_space.shape) != 1:
            self._env.close()
            raise ValueError(f"{env_id}: needs a flat Box action space, got {act_space}")
        low = np.asarray(act_space.low, np.float64)
        high = np.asarray(act_space.high, np.float64)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(high > low)):
            self._env.close()
            raise ValueError(f"{env_id}: needs finite action bounds low < high, got {act_space}")
        self.env_id = env_id
        self.num_envs = int(num_envs)
        self.obs_dim = int(obs_space.shape[0])
        self.act_dim = int(act_space.shape[0])
        self.seed = int(seed)
        self._low, self._high = low, high
        self._act_dtype = act_space.dtype
        self._seeded = False
        self._started = False
        self._running = np.zeros(self.num_envs, np.float64)  # [E] return of the open episodes
        self._completed: list[float] = []
        self.env_steps = 0

    def reset(self) -> np.ndarray:
        """Start new episodes in every copy (open episodes are dropped from the bookkeeping).

        Returns:
          [E, O] float32 observations.
        """
        if not self._seeded:
            obs, _ = self._env.reset(seed=self.seed)
            self._seeded = True
        else:
            obs, _ = self._env.reset()
        self._running[:] = 0.0
        self._started = True
        return np.asarray(obs, np.float32)

    def step(self, actions) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step every copy; copies whose episode ends are reset in the same call.

        Args:
          actions: [E, A] actions in ``[-1, 1]`` (clipped to it, then mapped linearly to the
            action space's ``[low, high]``).

        Returns:
          ``(next_obs [E, O] float32, reward [E] float32, terminated [E] bool, truncated [E] bool,
          obs [E, O] float32)``: ``next_obs`` is the true successor (the final observation where an
          episode ended), ``obs`` the observation to act on next (the reset one there).

        Raises:
          ValueError: ``actions`` is not [E, A] or not finite.
          RuntimeError: :meth:`reset` was not called first.
        """
        a = np.asarray(actions, np.float64)
        if a.shape != (self.num_envs, self.act_dim):
            raise ValueError(f"actions must have shape [{self.num_envs}, {self.act_dim}], "
                             f"got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError("actions must be finite, got NaN or inf")
        if not self._started:
            raise RuntimeError("call reset() before step()")
        a = np.clip(a, -1.0, 1.0)
        scaled = self._low + 0.5 * (a + 1.0) * (self._high - self._low)
        obs, reward, terminated, truncated, info = self._env.step(scaled.astype(self._act_dtype))
        reward = np.asarray(reward, np.float64)
        terminated = np.asarray(terminated, bool)
        truncated = np.asarray(truncated, bool)
        obs = np.asarray(obs, np.float32)
        next_obs = obs.copy()
        done = terminated | truncated
        if done.any():
            final = info["final_obs"]
            for i in np.flatnonzero(done):
                next_obs[i] = np.asarray(final[i], np.float32)
        self._running += reward
        self._completed.extend(self._running[done].tolist())
        self._running[done] = 0.0
        self.env_steps += self.num_envs
        return next_obs, reward.astype(np.float32), terminated, truncated, obs

    def completed_returns(self) -> list[float]:
        """Undiscounted returns (sums of raw rewards) of the episodes finished since the last call.

        Returns:
          A list of floats, in the order the episodes ended (rows in index order within a step).
        """
        out, self._completed = self._completed, []
        return out

    def close(self) -> None:
        """Close the environments."""
        self._env.close()

    def __repr__(self) -> str:
        return (f"GymVecEnv({self.env_id!r}, num_envs={self.num_envs}, seed={self.seed}, "
                f"obs_dim={self.obs_dim}, act_dim={self.act_dim}, env_steps={self.env_steps})")
