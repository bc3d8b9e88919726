"""Risk test environments in pure JAX, their true models, and exact risk-optimal solutions.

Both environments are deterministic-transition MDPs on a DAG with independent, discrete stochastic
rewards: ``s' = next_state[s, a]`` and ``r ~ sum_k reward_probs[s, a, k] delta(reward_values[s, a, k])``.
That is exactly what a MuZero tree with distributional rewards can represent, so the true model
plugs into :func:`jaxpapers.search.risk_search` unchanged.

* :func:`grid_risk` -- GridRisk of RiskZero (as read in yyassin/riskzero ``src/env/grid_risk.py``):
  5x5 grid, start top-left, actions down/right (a move off the grid stays in place), -1 per step;
  entering a cell for the first time pays Y: +10 w.p. 0.75, B: +2, R: +40 w.p. 0.3; an O cell costs
  -10 on every entry; the goal ends the episode. Layout (rows top to bottom)::

      N N R O O
      N B N R O
      Y N B N R
      O Y N B N
      O O Y N G

* :func:`cliff_corridor` -- ours: a corridor of ``length`` steps with a safe lane (-1 per step) and
  a fast lane (+1 per step, but a rare -25 catastrophe with probability 0.03 at every step), so the
  fast lane has the higher mean and a far worse lower tail.

:func:`exact_path_objectives` enumerates every path (open-loop policies are all the deterministic
Markov policies here, since transitions are deterministic) and :func:`exact_cvar_dp` solves the
history-dependent CVaR problem with the augmented-state dynamic program of Baeuerle & Ott (2011):
``CVaR_alpha(Z) = max_b b - E[(b - Z)^+] / alpha`` with ``min_pi E[(b - Z)^+]`` solved on states
``(s, return so far)``.
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import pytree
from jaxpapers.search.risk import exact_cvar_discrete, quantile_midpoints

__all__ = ["TabularEnv", "EnvState", "grid_risk", "cliff_corridor", "reset", "step", "observe",
           "reward_quantiles", "rollout_value_quantiles", "greedy_value_quantiles",
           "path_distribution", "exact_path_objectives", "exact_cvar_dp", "GRID_RISK_LAYOUT"]

GRID_RISK_LAYOUT = ("NNROO", "NBNRO", "YNBNR", "OYNBN", "OOYNG")


@pytree.dataclass
class TabularEnv:
    """A deterministic-transition MDP with discrete stochastic rewards (S states, A actions, K).

    Attributes:
      next_state: [S, A] int32 successor.
      reward_values: [S, A, K] reward outcomes; reward_probs: [S, A, K] their probabilities.
      terminal: [S] bool absorbing end states.
      start: [] int32 start state.
      max_steps: episode truncation (static).
      name: static name.
    """

    next_state: jax.Array  # [S, A]
    reward_values: jax.Array  # [S, A, K]
    reward_probs: jax.Array  # [S, A, K]
    terminal: jax.Array  # [S]
    start: jax.Array  # []
    max_steps: int = pytree.static_field(default=16)
    name: str = pytree.static_field(default="env")

    @property
    def num_states(self) -> int:
        return self.next_state.shape[0]

    @property
    def num_actions(self) -> int:
        return self.next_state.shape[1]


@pytree.dataclass
class EnvState:
    """Unbatched environment state.

    Attributes:
      s: [] int32 current state; t: [] int32 steps taken; done: [] bool;
      ret: [] float32 return so far.
    """

    s: jax.Array
    t: jax.Array
    done: jax.Array
    ret: jax.Array


def _make(next_state, values, probs, terminal, start, max_steps, name) -> TabularEnv:
    return TabularEnv(next_state=jnp.asarray(next_state, jnp.int32),
                      reward_values=jnp.asarray(values, jnp.float32),
                      reward_probs=jnp.asarray(probs, jnp.float32),
                      terminal=jnp.asarray(terminal, bool), start=jnp.asarray(start, jnp.int32),
                      max_steps=max_steps, name=name)


def grid_risk(max_steps: int = 16) -> TabularEnv:
    """GridRisk (RiskZero's 5x5 risk grid); state = row * 5 + col; actions 0 down, 1 right.

    Args:
      max_steps: episode truncation (static).

    Returns:
      The :class:`TabularEnv` (25 states, 2 actions, 2 reward outcomes per move).

    >>> env = grid_risk()
    >>> env.num_states, env.next_state[0].tolist()  # from the top-left: down -> 5, right -> 1
    (25, [5, 1])
    """
    n = 5
    bonus = {"Y": (10.0, 0.75), "B": (2.0, 1.0), "R": (40.0, 0.3)}
    ns = np.zeros((n * n, 2), np.int32)
    vals = np.zeros((n * n, 2, 2))
    probs = np.zeros((n * n, 2, 2))
    for r, c, a in itertools.product(range(n), range(n), range(2)):
        s = r * n + c
        r2, c2 = (min(r + 1, n - 1), c) if a == 0 else (r, min(c + 1, n - 1))
        s2 = r2 * n + c2
        ns[s, a] = s2
        cell = GRID_RISK_LAYOUT[r2][c2]
        base = -1.0 - (10.0 if cell == "O" else 0.0)
        v, p = bonus.get(cell, (0.0, 1.0))
        if s2 == s:  # off-grid move: stay; the cell's bonus was already collected
            v, p = 0.0, 1.0
        vals[s, a] = [base, base + v]
        probs[s, a] = [1.0 - p, p]
    terminal = np.zeros(n * n, bool)
    terminal[n * n - 1] = True
    return _make(ns, vals, probs, terminal, 0, max_steps, "grid_risk")


def cliff_corridor(length: int = 6, p_catastrophe: float = 0.03, catastrophe: float = -25.0,
                   max_steps: int | None = None) -> TabularEnv:
    """Corridor with a safe lane (action 0: -1) and a fast lane (action 1: +1, or ``catastrophe``
    with probability ``p_catastrophe``); ``length`` steps to the end.

    Args:
      length: steps from the start to the end.
      p_catastrophe: probability of the catastrophe on each fast step.
      catastrophe: its reward.
      max_steps: episode truncation (default ``2 * length``).

    Returns:
      The :class:`TabularEnv` (``length + 1`` states, 2 actions).

    >>> env = cliff_corridor(length=3)
    >>> env.num_states, env.max_steps
    (4, 6)
    """
    s_n = length + 1
    ns = np.zeros((s_n, 2), np.int32)
    vals = np.zeros((s_n, 2, 2))
    probs = np.zeros((s_n, 2, 2))
    for s in range(s_n):
        ns[s] = min(s + 1, length)
        vals[s, 0] = [-1.0, -1.0]
        probs[s, 0] = [1.0, 0.0]
        vals[s, 1] = [1.0, catastrophe]
        probs[s, 1] = [1.0 - p_catastrophe, p_catastrophe]
    terminal = np.zeros(s_n, bool)
    terminal[length] = True
    return _make(ns, vals, probs, terminal, 0, max_steps or 2 * length, "cliff_corridor")


def reset(env: TabularEnv) -> EnvState:
    """Initial state (deterministic start).

    Args:
      env: the environment.

    Returns:
      :class:`EnvState` at ``env.start`` with no step taken and return 0.

    >>> int(reset(cliff_corridor()).s)
    0
    """
    return EnvState(s=env.start, t=jnp.zeros((), jnp.int32), done=env.terminal[env.start],
                    ret=jnp.zeros((), jnp.float32))


def observe(env: TabularEnv, state: EnvState) -> jax.Array:
    """[S] float32 one-hot observation of the state.

    Args:
      env: the environment.
      state: unbatched state.

    Returns:
      [S] one-hot vector.

    >>> observe(cliff_corridor(length=3), reset(cliff_corridor(length=3))).tolist()
    [1.0, 0.0, 0.0, 0.0]
    """
    return jax.nn.one_hot(state.s, env.num_states, dtype=jnp.float32)


def step(env: TabularEnv, state: EnvState, action: jax.Array,
         key: jax.Array) -> tuple[EnvState, jax.Array]:
    """One transition (unbatched; ``key`` consumed). Steps after ``done`` are no-ops with reward 0.

    Args:
      env: the environment.
      state: unbatched state.
      action: [] int action.
      key: consumed (draws the reward outcome).

    Returns:
      ``(next_state, reward [])``.

    >>> import jax, jax.numpy as jnp
    >>> env = cliff_corridor(length=3)
    >>> s, r = step(env, reset(env), jnp.int32(0), jax.random.key(0))  # the safe lane
    >>> int(s.s), float(r)
    (1, -1.0)
    """
    k = jax.random.choice(key, env.reward_values.shape[-1], p=env.reward_probs[state.s, action])
    r = jnp.where(state.done, 0.0, env.reward_values[state.s, action, k])
    s2 = jnp.where(state.done, state.s, env.next_state[state.s, action])
    t2 = state.t + jnp.where(state.done, 0, 1)
    done = state.done | env.terminal[s2] | (t2 >= env.max_steps)
    return EnvState(s=s2, t=t2, done=done, ret=state.ret + r), r


def reward_quantiles(env: TabularEnv, num_quantiles: int) -> jax.Array:
    """[S, A, Q] quantiles at the midpoints of each reward distribution (the true reward head).

    Args:
      env: the environment.
      num_quantiles: Q (levels ``(2 i + 1) / 2Q``).

    Returns:
      [S, A, Q] reward quantiles.

    >>> reward_quantiles(cliff_corridor(length=3), 4)[0].tolist()  # safe, fast lane
    [[-1.0, -1.0, -1.0, -1.0], [1.0, 1.0, 1.0, 1.0]]
    """
    tau = quantile_midpoints(num_quantiles)
    order = jnp.argsort(env.reward_values, axis=-1)
    v = jnp.take_along_axis(env.reward_values, order, -1)
    cdf = jnp.cumsum(jnp.take_along_axis(env.reward_probs, order, -1), -1)
    idx = jax.vmap(jax.vmap(lambda c: jnp.searchsorted(c, tau)))(cdf)
    idx = jnp.minimum(idx, v.shape[-1] - 1)
    return jnp.take_along_axis(v, idx, -1)


def rollout_value_quantiles(env: TabularEnv, num_quantiles: int) -> jax.Array:
    """[S, Q] quantiles of the return-to-go of the uniform policy over moves that do not stay put.

    The classic MCTS rollout evaluation, computed exactly (float64 DP over the DAG); 0 at terminals.

    Args:
      env: the environment (small, deterministic transitions).
      num_quantiles: Q.

    Returns:
      [S, Q] float32 quantiles.

    >>> rollout_value_quantiles(cliff_corridor(length=3), 4)[0].tolist()
    [-3.0, -1.0, 1.0, 1.0]
    """
    ns, vals, probs, term, _ = _tables(env)
    tau = np.asarray(quantile_midpoints(num_quantiles), np.float64)

    @functools.lru_cache(maxsize=None)
    def dist(s):
        if term[s]:
            return {0.0: 1.0}
        acts = [a for a in range(ns.shape[1]) if ns[s, a] != s]
        out: dict[float, float] = {}
        for a in acts:
            for v, p in zip(vals[s, a], probs[s, a]):
                if p <= 0:
                    continue
                for z, pz in dist(int(ns[s, a])).items():
                    key = round(z + v, 9)
                    out[key] = out.get(key, 0.0) + pz * p / len(acts)
        return out

    table = np.zeros((env.num_states, num_quantiles))
    for s in range(env.num_states):
        if not any(ns[s, a] != s for a in range(ns.shape[1])) and not term[s]:
            continue
        d = dist(s)
        z = np.array(sorted(d))
        cdf = np.cumsum([d[x] for x in z])
        table[s] = z[np.minimum(np.searchsorted(cdf, tau - 1e-12), len(z) - 1)]
    return jnp.asarray(table, jnp.float32)


def greedy_value_quantiles(env: TabularEnv, num_quantiles: int, *, objective: str = "mean",
                           alpha: float = 1.0) -> jax.Array:
    """[S, Q] quantiles of the return-to-go of the best continuation *path* from each state.

    For every state the continuation (a move sequence to a terminal state) maximising the objective
    of its own return-to-go is found by enumeration, and its return distribution is tabulated:
    what a value head trained to convergence under a Markov objective-greedy policy represents
    (for ``objective="mean"`` the exact optimal value distribution of the risk-neutral MDP).
    Float64 enumeration; 0 at terminals; meant for small deterministic-transition envs.

    Args:
      env: the environment. num_quantiles: Q (midpoint levels).
      objective: ``"mean"`` or ``"cvar"`` (CVaR_alpha of the return-to-go).
      alpha: CVaR level in (0, 1] (ignored for ``"mean"``).

    Returns:
      [S, Q] float32 quantiles.

    >>> env = cliff_corridor(length=3)
    >>> greedy_value_quantiles(env, 4, objective="cvar", alpha=0.25)[0].tolist()  # the safe lane
    [-3.0, -3.0, -3.0, -3.0]
    """
    if objective not in ("mean", "cvar"):
        raise ValueError(f"objective must be 'mean' or 'cvar', got {objective!r}")
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
    ns, _, _, term, _ = _tables(env)
    tau = np.asarray(quantile_midpoints(num_quantiles), np.float64)
    table = np.zeros((env.num_states, num_quantiles))
    for s in range(env.num_states):
        if term[s]:
            continue
        best, best_dist = -np.inf, None
        for path in _enumerate_paths(env, s):
            if not path:
                continue
            z, pr = path_distribution(env, path, s)
            score = float(np.sum(z * pr)) if objective == "mean" else exact_cvar_discrete(z, pr, alpha)
            if score > best + 1e-12:
                best, best_dist = score, (z, pr)
        if best_dist is None:  # no move leads anywhere: a dead end
            continue
        z, pr = best_dist
        table[s] = z[np.minimum(np.searchsorted(np.cumsum(pr), tau - 1e-12), len(z) - 1)]
    return jnp.asarray(table, jnp.float32)


# ----------------------------------------------------------------- exact solutions (numpy, float64)

def _tables(env: TabularEnv):
    # float32 tables -> float64, rounded to 1e-6 so that 0.3 is 0.3 again
    return (np.asarray(env.next_state), np.round(np.asarray(env.reward_values, np.float64), 6),
            np.round(np.asarray(env.reward_probs, np.float64), 6), np.asarray(env.terminal),
            int(env.start))


def _enumerate_paths(env: TabularEnv, start: int | None = None):
    """All action sequences from ``start`` (default: the env's) to a terminal state that never
    stay in place."""
    ns, _, _, term, s0 = _tables(env)
    start = s0 if start is None else start
    out = []

    def dfs(s, acts):
        if term[s]:
            out.append(tuple(acts))
            return
        for a in range(ns.shape[1]):
            if ns[s, a] != s and len(acts) < env.max_steps:
                dfs(ns[s, a], acts + [a])

    dfs(start, [])
    return out


def path_distribution(env: TabularEnv, actions,
                      start: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact distribution of the return of an open-loop action sequence (numpy, float64).

    The rewards of the steps are independent, so the law of their sum is the convolution of the
    per-step laws (transitions are deterministic: the path fixes every state).

    Args:
      env: the environment (its tables are read as float64, rounded to 1e-6).
      actions: sequence of ``T`` action indices taken from ``start``.
      start: start state (default: ``env.start``).

    Returns:
      ``(values [K], probs [K])``: the distinct returns in increasing order and their probabilities.

    >>> z, p = path_distribution(cliff_corridor(length=2), (1, 1))  # the fast lane twice
    >>> z.tolist(), [round(x, 4) for x in p.tolist()]
    ([-50.0, -24.0, 2.0], [0.0009, 0.0582, 0.9409])
    """
    ns, vals, probs, _, s0 = _tables(env)
    dist = {0.0: 1.0}
    s = s0 if start is None else start
    for a in actions:
        new: dict[float, float] = {}
        for z, pz in dist.items():
            for v, p in zip(vals[s, a], probs[s, a]):
                if p > 0:
                    new[z + v] = new.get(z + v, 0.0) + pz * p
        dist = new
        s = ns[s, a]
    z = np.array(sorted(dist))
    return z, np.array([dist[x] for x in z])


def exact_path_objectives(env: TabularEnv, alpha: float) -> dict:
    """Mean and CVaR_alpha of every path; the best path of each objective (float64).

    Args:
      env: the environment (small, deterministic transitions).
      alpha: CVaR level in (0, 1].

    Returns:
      dict with ``paths`` (list of action tuples), ``mean`` [P], ``cvar`` [P] and ``neutral`` /
      ``cvar_opt`` entries ``{"path", "mean", "cvar"}`` for the mean- and CVaR-optimal paths.

    >>> ex = exact_path_objectives(cliff_corridor(length=3), 0.25)
    >>> ex["neutral"]["path"], ex["cvar_opt"]["path"], ex["cvar_opt"]["cvar"]
    ((1, 1, 1), (0, 0, 0), -3.0)
    """
    paths = _enumerate_paths(env)
    means, cvars = [], []
    for p in paths:
        z, pr = path_distribution(env, p)
        means.append(float(np.sum(z * pr)))
        cvars.append(exact_cvar_discrete(z, pr, alpha))
    means, cvars = np.array(means), np.array(cvars)
    i, j = int(np.argmax(means)), int(np.argmax(cvars))
    pick = lambda k: {"path": paths[k], "mean": float(means[k]), "cvar": float(cvars[k])}
    return {"paths": paths, "mean": means, "cvar": cvars, "neutral": pick(i), "cvar_opt": pick(j)}


def exact_cvar_dp(env: TabularEnv, alpha: float) -> float:
    """Optimal CVaR_alpha of the return over history-dependent policies (Baeuerle & Ott 2011).

    ``max_b b - min_pi E[(b - Z)^+] / alpha``; the inner problem is a DP on (state, return so far)
    over the DAG (moves that stay in place are excluded: they add a sure -1 and are dominated). The
    maximising ``b`` is a value of Z's support, so the candidates are all reachable path returns.

    Args:
      env: the environment (small, deterministic transitions, a DAG).
      alpha: CVaR level in (0, 1].

    Returns:
      The optimal CVaR_alpha of the episode return.

    >>> exact_cvar_dp(cliff_corridor(length=3), 0.25)
    -3.0
    """
    ns, vals, probs, term, start = _tables(env)
    num_a = ns.shape[1]
    cands = sorted({float(z) for p in _enumerate_paths(env)
                    for z in path_distribution(env, p)[0]})
    best = -np.inf
    for b in cands:
        @functools.lru_cache(maxsize=None)
        def v(s, c):  # min E[(b - (c + future))^+]
            if term[s]:
                return max(b - c, 0.0)
            outs = []
            for a in range(num_a):
                if ns[s, a] == s:
                    continue
                outs.append(sum(p * v(int(ns[s, a]), round(c + r, 9))
                                for r, p in zip(vals[s, a], probs[s, a]) if p > 0))
            return min(outs)
        best = max(best, b - v(start, 0.0) / alpha)
    return float(best)
