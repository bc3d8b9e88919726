"""Planning with a known model: the true distributional model of a :class:`TabularEnv` as a
``recurrent_fn``, and batched evaluation episodes (``lax.scan`` over steps, envs vmapped).

At every step the root's return history is the realised return so far (a point mass: with a known
model nothing about the past is uncertain), so the search optimises the utility of the *whole*
episode return, the objective RiskZero targets.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxpapers.search import envs as envs_lib
from jaxpapers.search._types import RiskRecurrentFnOutput, RiskRootFnOutput

__all__ = ["TrueModel", "make_true_model", "true_recurrent_fn", "true_root",
           "evaluate_planner", "empirical_cvar"]

from jaxpapers.core import pytree


@pytree.dataclass
class TrueModel:
    """Known model tables (S states, A actions, Q quantiles).

    Attributes:
      next_state: [S, A] int32; reward_q: [S, A, Q] reward quantiles; value_q: [S, Q] leaf value
      quantiles; terminal: [S] bool; stay: [S, A] bool (move that stays in place).
    """

    next_state: jax.Array  # [S, A]
    reward_q: jax.Array  # [S, A, Q]
    value_q: jax.Array  # [S, Q]
    terminal: jax.Array  # [S]
    stay: jax.Array  # [S, A]


def make_true_model(env: envs_lib.TabularEnv, num_quantiles: int, *,
                    leaf_value: str = "rollout", objective: str = "mean",
                    alpha: float = 1.0) -> TrueModel:
    """True reward quantiles and a table of leaf-value quantiles.

    Args:
      env: the environment. num_quantiles: Q.
      leaf_value: ``"rollout"``: exact return-to-go of the uniform random policy (the classic MCTS
        rollout); ``"zero"``: no leaf evaluation; ``"greedy"``: return-to-go of the best
        continuation path for ``objective`` from each state
        (:func:`envs.greedy_value_quantiles`), what a value head trained to its fixed point under an
        objective-greedy policy represents.
      objective, alpha: the objective of ``"greedy"`` (``"mean"`` or ``"cvar"`` at level alpha).

    Returns:
      :class:`TrueModel` with ``reward_q`` [S, A, Q] and ``value_q`` [S, Q].

    >>> m = make_true_model(envs_lib.cliff_corridor(length=3), 4)
    >>> m.reward_q.shape, m.value_q.shape
    ((4, 2, 4), (4, 4))
    """
    if leaf_value not in ("rollout", "zero", "greedy"):
        raise ValueError(f"leaf_value must be 'rollout', 'zero' or 'greedy', got {leaf_value!r}")
    if leaf_value == "rollout":
        vq = envs_lib.rollout_value_quantiles(env, num_quantiles)
    elif leaf_value == "greedy":
        vq = envs_lib.greedy_value_quantiles(env, num_quantiles, objective=objective, alpha=alpha)
    else:
        vq = jnp.zeros((env.num_states, num_quantiles))
    stay, reward_q = _model_tables(env, num_quantiles)
    return TrueModel(next_state=env.next_state, reward_q=reward_q, value_q=vq,
                     terminal=env.terminal, stay=stay)


@functools.partial(jax.jit, static_argnums=1)
def _model_tables(env: envs_lib.TabularEnv, num_quantiles: int) -> tuple[jax.Array, jax.Array]:
    """``stay`` [S, A] and the reward quantiles [S, A, Q] as one compiled program (run eagerly,
    the sort, cumsum and searches compile a dozen single-op programs)."""
    stay = env.next_state == jnp.arange(env.num_states)[:, None]
    return stay, envs_lib.reward_quantiles(env, num_quantiles)


def true_recurrent_fn(model: TrueModel, key: jax.Array, action: jax.Array,
                      s: jax.Array) -> tuple[RiskRecurrentFnOutput, jax.Array]:
    """``recurrent_fn`` of the known model; the embedding is the state index [B].

    Args:
      model: the known model (the search's ``params``).
      key: unused.
      action: [B] int actions.
      s: [B] int states (the embedding).

    Returns:
      ``(RiskRecurrentFnOutput, next states [B])``: reward quantiles [B, Q] (0 after the end),
      discount 0 at the end, next-state value quantiles and logits (``-1e9`` for moves that stay).

    >>> import jax.numpy as jnp
    >>> m = make_true_model(envs_lib.cliff_corridor(length=3), 4)
    >>> out, s2 = true_recurrent_fn(m, None, jnp.array([1, 0]), jnp.array([0, 2]))
    >>> s2.tolist(), out.discount.tolist()  # the second move reaches the end
    ([1, 3], [1.0, 0.0])
    """
    del key
    s2 = model.next_state[s, action]
    done = model.terminal[s] | model.terminal[s2]
    was_done = model.terminal[s]
    reward = jnp.where(was_done[:, None], 0.0, model.reward_q[s, action])
    value = jnp.where(done[:, None], 0.0, model.value_q[s2])
    logits = jnp.where(model.stay[s2], -1e9, 0.0)
    out = RiskRecurrentFnOutput(reward=reward, discount=jnp.where(done, 0.0, 1.0),
                                prior_logits=logits, value=value)
    return out, s2


def true_root(model: TrueModel, s: jax.Array, history_q: jax.Array) -> RiskRootFnOutput:
    """Root of the known model at states ``s`` [B] with return-history quantiles [B, Q].

    Args:
      model: the known model.
      s: [B] int states.
      history_q: [B, Q] quantiles of the return accumulated before the root.

    Returns:
      :class:`RiskRootFnOutput` (root discount 1).

    >>> import jax.numpy as jnp
    >>> m = make_true_model(envs_lib.cliff_corridor(length=3), 4)
    >>> true_root(m, jnp.array([0, 1]), jnp.zeros((2, 4))).value.shape
    (2, 4)
    """
    return RiskRootFnOutput(prior_logits=jnp.where(model.stay[s], -1e9, 0.0),
                            value=model.value_q[s], embedding=s, return_history=history_q,
                            root_discount=jnp.ones(s.shape, history_q.dtype))


def empirical_cvar(returns: jax.Array, alpha: float) -> jax.Array:
    """CVaR_alpha of equally weighted returns [E] (mean of the worst alpha fraction).

    Args:
      returns: [E] returns.
      alpha: level in (0, 1].

    Returns:
      [] CVaR.

    >>> import jax.numpy as jnp
    >>> float(empirical_cvar(jnp.array([-10.0, 1.0, 2.0, 3.0]), 0.25))
    -10.0
    """
    from jaxpapers.search.risk import cvar
    return cvar(returns, alpha)


def _quantiles_of_samples(x: jax.Array, num_quantiles: int) -> jax.Array:
    """[Q] empirical quantiles at the midpoints of samples [M]."""
    m = x.shape[-1]
    idx = jnp.floor((2 * jnp.arange(num_quantiles) + 1) * m / (2 * num_quantiles)).astype(int)
    return jnp.sort(x, -1)[..., jnp.minimum(idx, m - 1)]


def evaluate_planner(env: envs_lib.TabularEnv, model: TrueModel,
                     search_fn: Callable[[jax.Array, RiskRootFnOutput, jax.Array], jax.Array],
                     key: jax.Array, *, num_episodes: int, history: str = "path",
                     num_history_samples: int = 1024) -> dict[str, jax.Array]:
    """Run ``num_episodes`` episodes in parallel, planning every step with the known model.

    Args:
      env: the environment; model: its :class:`TrueModel`.
      search_fn: ``(key, root, invalid_actions [E, A]) -> actions [E]``.
      key: consumed.
      num_episodes: E.
      history: the root's return history. ``"path"``: the distribution of the return accumulated so
        far *given the path* (independent samples of the reward distributions along it), what
        RiskZero's history head estimates from observations; the planner then scores whole
        trajectories from the episode's start and is time-consistent on deterministic-transition
        MDPs. ``"realized"``: a point mass at the realised return; CVaR being translation
        equivariant, the search then ignores the past (a Markov "CVaR of the future" policy).
      num_history_samples: samples kept per episode for ``"path"``.

    Returns:
      ``{"returns": [E], "actions": [T, E]}``.

    >>> import jax, jax.numpy as jnp
    >>> env = envs_lib.cliff_corridor(length=3)
    >>> safe = lambda key, root, invalid: jnp.zeros(root.value.shape[0], jnp.int32)
    >>> out = evaluate_planner(env, make_true_model(env, 4), safe, jax.random.key(0),
    ...                        num_episodes=2)
    >>> out["returns"].tolist()
    [-3.0, -3.0]
    """
    if history not in ("path", "realized"):
        raise ValueError(f"history must be 'path' or 'realized', got {history!r}")
    nq = model.value_q.shape[-1]
    state = jax.vmap(lambda _: envs_lib.reset(env))(jnp.arange(num_episodes))
    hist = jnp.zeros((num_episodes, num_history_samples))

    def body(carry, k):
        st, hist = carry
        k_pol, k_env, k_hist = jax.random.split(k, 3)
        if history == "path":
            hq = jax.vmap(lambda h: _quantiles_of_samples(h, nq))(hist)
        else:
            hq = jnp.broadcast_to(st.ret[:, None], (num_episodes, nq))
        root = true_root(model, st.s, hq)
        a = search_fn(k_pol, root, model.stay[st.s].astype(jnp.float32))
        st2, _ = jax.vmap(functools.partial(envs_lib.step, env))(
            st, a, jax.random.split(k_env, num_episodes))
        from jaxpapers.search.risk import sample_quantiles
        add = jax.vmap(lambda kk, q: sample_quantiles(kk, q, num_history_samples, stratified=True))(
            jax.random.split(k_hist, num_episodes), model.reward_q[st.s, a])
        hist = hist + jnp.where(st.done[:, None], 0.0, add)
        return (st2, hist), a

    (final, _), acts = jax.lax.scan(body, (state, hist), jax.random.split(key, env.max_steps))
    return {"returns": final.ret, "actions": acts}
