"""RiskZero learning (and the Risk-AlphaZero and risk-neutral MuZero baselines) on a TabularEnv.

* Networks (Flax linen): representation ``h = f_repr(o)``, dynamics ``(h', R-quantiles) =
  f_dyn(h, a)``, prediction ``(pi-logits, V-quantiles) = f_pred(h)``, and the return-history head
  ``H-quantiles = f_hist(o_{t-L+1..t})`` (RiskZero, Sec. 4).
* Losses: quantile-Huber (QR-DQN Eq. 10) on reward and value quantiles over a ``K``-step unroll with
  ``n``-step distributional targets ``sum_{i<n} gamma^i r_{t+i} + gamma^n Z_{t+n}`` (``Z`` the stored
  root value quantiles of self-play), cross-entropy to the search policy, quantile-Huber of the
  history head against the realised return so far.
* Self-play is a ``lax.scan`` over the steps of a batch of vmapped environments (one search per step
  for the whole batch); episodes go into a replay ring buffer that is a pytree.
* Variants: ``riskzero`` (learned model, CVaR utility), ``risk_alphazero`` (true transitions and
  reward quantiles, learned value/policy/history heads, CVaR), ``muzero`` (learned model, mean utility).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from jaxpapers.core import pytree
from jaxpapers.core.train import init_train_state, make_train_step
from jaxpapers.search import envs as envs_lib
from jaxpapers.search import risk as risk_lib
from jaxpapers.search._types import RiskRecurrentFnOutput, RiskRootFnOutput
from jaxpapers.search.distributional import risk_gumbel_muzero_policy

__all__ = ["AgentConfig", "Net", "ReplayBuffer", "make_agent", "self_play", "train_agent",
           "evaluate_agent", "VARIANTS"]

VARIANTS = ("riskzero", "risk_alphazero", "muzero")


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    """Static structure of an agent (hashable; risk levels are part of it for the static-k CVaR)."""

    variant: str = "riskzero"
    risk_level: float = 0.25
    num_quantiles: int = 32
    num_samples: int = 256
    num_simulations: int = 16
    hidden: int = 64
    latent: int = 32
    history_len: int = 10
    num_envs: int = 16
    buffer_episodes: int = 512
    batch_size: int = 64
    unroll: int = 5
    n_step: int = 5
    discount: float = 1.0
    updates_per_iter: int = 8
    learning_rate: float = 5e-3
    gumbel_scale: float = 1.0
    value_scale: float = 10.0

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if not 0.0 < self.risk_level <= 1.0:
            raise ValueError(f"risk_level (alpha) must lie in (0, 1], got {self.risk_level}")
        if self.num_simulations < 1:
            raise ValueError(f"num_simulations must be >= 1, got {self.num_simulations}")

    @property
    def utility(self):
        if self.variant == "muzero":
            return risk_lib.mean_utility
        return risk_lib.make_utility("cvar", self.risk_level)


class _MLP(nn.Module):
    sizes: tuple

    @nn.compact
    def __call__(self, x):
        for i, s in enumerate(self.sizes):
            x = nn.Dense(s)(x)
            if i < len(self.sizes) - 1:
                x = nn.relu(x)
        return x


def _minmax(h):
    lo, hi = jnp.min(h, -1, keepdims=True), jnp.max(h, -1, keepdims=True)
    return (h - lo) / jnp.maximum(hi - lo, 1e-5)


class Net(nn.Module):
    """The five RiskZero heads (unbatched or batched over leading axes)."""

    num_actions: int
    num_quantiles: int
    hidden: int
    latent: int
    value_scale: float

    def setup(self):
        h, q = self.hidden, self.num_quantiles
        self.repr_net = _MLP((h, self.latent))
        self.dyn_net = _MLP((h, self.latent))
        self.rew_net = _MLP((h, q))
        self.pol_net = _MLP((h, self.num_actions))
        self.val_net = _MLP((h, q))
        self.hist_net = _MLP((h, q))

    def represent(self, obs):
        return _minmax(self.repr_net(obs))

    def dynamics(self, h, action):
        x = jnp.concatenate([h, jax.nn.one_hot(action, self.num_actions)], -1)
        return _minmax(self.dyn_net(x)), self.value_scale * self.rew_net(x)

    def predict(self, h):
        return self.pol_net(h), self.value_scale * self.val_net(h)

    def history(self, hist_obs):
        return self.value_scale * self.hist_net(hist_obs.reshape(hist_obs.shape[:-2] + (-1,)))

    def __call__(self, obs, hist_obs, action):
        h = self.represent(obs)
        h2, r = self.dynamics(h, action)
        return self.predict(h2), r, self.history(hist_obs)


_EPISODE_FIELDS = ("obs", "hist", "action", "reward", "policy", "value_q", "valid", "ret_before",
                   "state")


@pytree.dataclass
class ReplayBuffer:
    """Ring buffer of whole episodes (C episodes, T steps, S observation size, L history length).

    Attributes:
      obs: [C, T, S]; hist: [C, T, L, S]; action: [C, T] int32; reward: [C, T];
      policy: [C, T, A] search policy targets; value_q: [C, T, Q] root value quantiles;
      valid: [C, T] bool step happened; ret_before: [C, T] return before the step;
      state: [C, T] int32 true state (Risk-AlphaZero); ptr, size: [] int32.
    """

    obs: jax.Array
    hist: jax.Array
    action: jax.Array
    reward: jax.Array
    policy: jax.Array
    value_q: jax.Array
    valid: jax.Array
    ret_before: jax.Array
    state: jax.Array
    ptr: jax.Array
    size: jax.Array

    def add(self, traj: dict) -> ReplayBuffer:
        """Insert episodes ``traj[name]`` [E, T, ...] at the write pointer (wrapping around)."""
        cap = self.obs.shape[0]
        e = traj["obs"].shape[0]
        idx = (self.ptr + jnp.arange(e)) % cap
        new = {f: getattr(self, f).at[idx].set(traj[f].astype(getattr(self, f).dtype))
               for f in ("obs", "hist", "action", "reward", "policy", "value_q", "valid",
                         "ret_before", "state")}
        return self.replace(**new, ptr=(self.ptr + e) % cap, size=jnp.minimum(self.size + e, cap))


def _empty_buffer(cfg: AgentConfig, env: envs_lib.TabularEnv) -> ReplayBuffer:
    c, t, s, a = cfg.buffer_episodes, env.max_steps, env.num_states, env.num_actions
    z = lambda *shape, dt=jnp.float32: jnp.zeros(shape, dt)
    return ReplayBuffer(obs=z(c, t, s), hist=z(c, t, cfg.history_len, s),
                        action=z(c, t, dt=jnp.int32), reward=z(c, t), policy=z(c, t, a),
                        value_q=z(c, t, cfg.num_quantiles), valid=z(c, t, dt=bool),
                        ret_before=z(c, t), state=z(c, t, dt=jnp.int32),
                        ptr=jnp.zeros((), jnp.int32), size=jnp.zeros((), jnp.int32))


def make_agent(cfg: AgentConfig, env: envs_lib.TabularEnv):
    """The network and the search's model functions for the variant.

    Args:
      cfg: agent structure.
      env: the environment (``risk_alphazero`` uses its true transitions and rewards).

    Returns:
      ``(net, root_fn, recurrent_fn)``: ``root_fn(params, s [B], hist [B, L, S], ret [B]) ->
      RiskRootFnOutput`` and ``recurrent_fn(params, key, action [B], embedding) ->
      (RiskRecurrentFnOutput, embedding)`` for :func:`jaxpapers.search.risk_gumbel_muzero_policy`.

    >>> import jax, jax.numpy as jnp
    >>> cfg = AgentConfig(num_quantiles=4, hidden=8, latent=4, history_len=2)
    >>> env = envs_lib.cliff_corridor(length=2)
    >>> net, root_fn, rec = make_agent(cfg, env)
    >>> params = net.init(jax.random.key(0), jnp.zeros(3), jnp.zeros((2, 3)), jnp.int32(0))
    >>> root = root_fn(params, jnp.array([0, 1]), jnp.zeros((2, 2, 3)), jnp.zeros(2))
    >>> root.prior_logits.shape, root.value.shape
    ((2, 2), (2, 4))
    """
    net = Net(env.num_actions, cfg.num_quantiles, cfg.hidden, cfg.latent, cfg.value_scale)
    true_rq = envs_lib.reward_quantiles(env, cfg.num_quantiles)

    def root_fn(params, s, hist, ret):
        del ret  # the agent does not see rewards; its history head estimates them (RiskZero)
        obs = jax.nn.one_hot(s, env.num_states)
        h = net.apply(params, obs, method=Net.represent)
        logits, v = net.apply(params, h, method=Net.predict)
        hq = net.apply(params, hist, method=Net.history)
        emb = s if cfg.variant == "risk_alphazero" else h
        return RiskRootFnOutput(prior_logits=logits, value=v, embedding=emb, return_history=hq,
                                root_discount=jnp.ones(s.shape[0]))

    def learned_recurrent(params, key, action, h):
        h2, r = net.apply(params, h, action, method=Net.dynamics)
        logits, v = net.apply(params, h2, method=Net.predict)
        out = RiskRecurrentFnOutput(reward=r, discount=jnp.full(action.shape, cfg.discount),
                                    prior_logits=logits, value=v)
        return out, h2

    def true_recurrent(params, key, action, s):
        s2 = env.next_state[s, action]
        done = env.terminal[s] | env.terminal[s2]
        r = jnp.where(env.terminal[s][:, None], 0.0, true_rq[s, action])
        h2 = net.apply(params, jax.nn.one_hot(s2, env.num_states), method=Net.represent)
        logits, v = net.apply(params, h2, method=Net.predict)
        out = RiskRecurrentFnOutput(reward=r, discount=jnp.where(done, 0.0, cfg.discount),
                                    prior_logits=logits, value=jnp.where(done[:, None], 0.0, v))
        return out, s2

    rec = true_recurrent if cfg.variant == "risk_alphazero" else learned_recurrent
    return net, root_fn, rec


def self_play(cfg: AgentConfig, env: envs_lib.TabularEnv, params: Any, key: jax.Array, *,
              num_envs: int, gumbel_scale: float | None = None,
              sharding: jax.sharding.Sharding | None = None) -> dict[str, jax.Array]:
    """Play one episode in each of ``num_envs`` vmapped environments (``lax.scan`` over steps).

    Every step runs one batched search over all environments (RiskZero's Gumbel policy).

    Args:
      cfg, env: agent and environment.
      params: network parameters.
      key: consumed.
      num_envs: E.
      gumbel_scale: root Gumbel scale (default ``cfg.gumbel_scale``; 0 for greedy evaluation).
      sharding: optional sharding of the leading environment axis (e.g.
        ``NamedSharding(mesh, P("env"))``); the result equals the unsharded one.

    Returns:
      dict of [E, T, ...] arrays (the :class:`ReplayBuffer` fields) and ``returns`` [E].
    """
    _, root_fn, rec = make_agent(cfg, env)
    gs = cfg.gumbel_scale if gumbel_scale is None else gumbel_scale
    e = num_envs
    shard = ((lambda x: jax.lax.with_sharding_constraint(x, sharding)) if sharding is not None
             else (lambda x: x))
    # fresh environments tied to the parameters: seed-batched from the start under vmap (_tie)
    state, hist = _tie((jax.vmap(lambda _: envs_lib.reset(env))(jnp.arange(e)),
                        jnp.zeros((e, cfg.history_len, env.num_states))),
                       jax.tree.leaves(params)[0])
    state, hist = jax.tree.map(shard, state), shard(hist)
    stay = env.next_state == jnp.arange(env.num_states)[:, None]

    def body(carry, k):
        st, hist = carry
        k_search, k_env = jax.random.split(k)
        obs = jax.nn.one_hot(st.s, env.num_states)
        hist = shard(jnp.concatenate([hist[:, 1:], obs[:, None]], 1))
        root = root_fn(params, st.s, hist, st.ret)
        out = risk_gumbel_muzero_policy(
            params, k_search, root, rec, cfg.num_simulations,
            invalid_actions=stay[st.s].astype(jnp.float32), utility_fn=cfg.utility,
            num_samples=cfg.num_samples, gumbel_scale=gs)
        action = shard(out.action)
        st2, r = jax.vmap(functools.partial(envs_lib.step, env))(
            st, action, jax.random.split(k_env, e))
        st2 = jax.tree.map(shard, st2)
        rec_ = {"obs": obs, "hist": hist, "action": action, "reward": r,
                "policy": out.action_weights, "value_q": root.value, "valid": ~st.done,
                "ret_before": st.ret, "state": st.s}
        return (st2, hist), rec_

    (final, _), traj = jax.lax.scan(body, (state, hist), jax.random.split(key, env.max_steps))
    traj = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), traj)
    traj["returns"] = final.ret
    return traj


def _tie(tree: Any, ref: jax.Array, *, floating_only: bool = False) -> Any:
    """``tree`` unchanged (``select(c, x, x) == x`` bit for bit), made to depend on ``ref``.

    Under ``vmap`` over seeds, a loop carry that starts seed-independent (empty replay buffer,
    zero optimiser moments and biases, fresh environments) and turns seed-dependent after one
    step makes ``lax.scan``'s batching rule batch the loop body twice (a fixpoint search), and
    with it every loop nested inside: ~40% of the vmapped trainer's tracing time. Tied to
    a seed-dependent ``ref``, such carries are batched from the start; the batched program is
    the one the fixpoint search ended with. ``floating_only`` leaves integer leaves (Adam's step
    count) alone: those stay seed-independent, and batching them would change the program.
    """
    c = jnp.ravel(ref)[0] == jnp.ravel(ref)[0]

    def tie(x):
        if floating_only and not jnp.issubdtype(x.dtype, jnp.floating):
            return x
        return jnp.where(c, x, x)

    return jax.tree.map(tie, tree)


def _sample_batch(cfg: AgentConfig, buf: ReplayBuffer, key: jax.Array) -> dict:
    """Unroll targets for ``cfg.batch_size`` (episode, step) pairs (n-step quantile targets)."""
    k1, k2 = jax.random.split(key)
    t_len = buf.obs.shape[1]
    e = jax.random.randint(k1, (cfg.batch_size,), 0, jnp.maximum(buf.size, 1))
    t = jax.random.randint(k2, (cfg.batch_size,), 0, t_len)
    kk = cfg.unroll

    def one(e, t):
        idx = t + jnp.arange(kk + 1)
        ok = (idx < t_len) & buf.valid[e, jnp.minimum(idx, t_len - 1)]
        ci = jnp.minimum(idx, t_len - 1)
        rew_all = jnp.where((jnp.arange(t_len) < t_len) & buf.valid[e], buf.reward[e], 0.0)

        def value_target(i):  # n-step target quantiles [Q] at step i
            steps = i + jnp.arange(cfg.n_step)
            r = jnp.where(steps < t_len, rew_all[jnp.minimum(steps, t_len - 1)], 0.0)
            disc = cfg.discount ** jnp.arange(cfg.n_step)
            boot_i = i + cfg.n_step
            boot_ok = (boot_i < t_len) & buf.valid[e, jnp.minimum(boot_i, t_len - 1)]
            boot = jnp.where(boot_ok, buf.value_q[e, jnp.minimum(boot_i, t_len - 1)], 0.0)
            return jnp.sum(disc * r) + cfg.discount ** cfg.n_step * boot

        return {"obs": buf.obs[e, t], "hist": buf.hist[e, t], "ret_before": buf.ret_before[e, t],
                "actions": buf.action[e, ci[:kk]], "obs_seq": buf.obs[e, ci],
                "policy": buf.policy[e, ci], "ok": ok,
                "reward": jnp.where(ok[:kk], buf.reward[e, ci[:kk]], 0.0),
                "value": jnp.where(ok[:, None], jax.vmap(value_target)(idx), 0.0)}

    return jax.vmap(one)(e, t)


def _loss_fn(cfg: AgentConfig, net: Net):
    qh = jax.vmap(risk_lib.quantile_huber_loss)

    def loss(params, batch, key):
        del key
        ok = batch["ok"].astype(jnp.float32)  # [B, K+1]
        h = net.apply(params, batch["obs"], method=Net.represent)
        lp = lv = lr = 0.0
        for k in range(cfg.unroll + 1):
            if cfg.variant == "risk_alphazero" and k > 0:
                h = net.apply(params, batch["obs_seq"][:, k], method=Net.represent)
            logits, v = net.apply(params, h, method=Net.predict)
            ce = -jnp.sum(batch["policy"][:, k] * jax.nn.log_softmax(logits), -1)
            lp += jnp.mean(ok[:, k] * ce)
            lv += jnp.mean(qh(v, batch["value"][:, k]))
            if k < cfg.unroll and cfg.variant != "risk_alphazero":
                h, r = net.apply(params, h, batch["actions"][:, k], method=Net.dynamics)
                lr += jnp.mean(qh(r, batch["reward"][:, k, None]))
                h = jax.lax.stop_gradient(0.5 * h) + 0.5 * h  # MuZero: scale dynamics grads
        hq = net.apply(params, batch["hist"], method=Net.history)
        lh = jnp.mean(qh(hq, batch["ret_before"][:, None]))
        n = cfg.unroll + 1
        total = (lp + lv + lr) / n + lh
        return total, {"policy_loss": lp / n, "value_loss": lv / n, "reward_loss": lr / n,
                       "history_loss": lh}

    return loss


def evaluate_agent(cfg: AgentConfig, env: envs_lib.TabularEnv, params: Any, key: jax.Array, *,
                   num_episodes: int) -> dict[str, jax.Array]:
    """Greedy (Gumbel scale 0) episodes; returns mean and CVaR_alpha of the episode returns.

    Args:
      cfg, env, params: agent, environment and network parameters.
      key: consumed.
      num_episodes: E (run in parallel, :func:`self_play`).

    Returns:
      ``{"mean": [], "cvar": [], "returns": [E]}``.
    """
    traj = self_play(cfg, env, params, key, num_envs=num_episodes, gumbel_scale=0.0)
    r = traj["returns"]
    return {"mean": jnp.mean(r), "cvar": risk_lib.cvar(r, cfg.risk_level), "returns": r}


def train_agent(cfg: AgentConfig, env: envs_lib.TabularEnv, key: jax.Array, *, num_evals: int,
                iters_per_eval: int, eval_episodes: int) -> dict[str, jax.Array]:
    """Self-play + replay training; ``num_evals`` greedy evaluations, one after each chunk.

    Jittable and vmappable over ``key`` (seeds). Examples: ``tests/search/test_riskzero.py`` (a
    compiled run takes tens of seconds, too slow for a doctest).

    Args:
      cfg, env: agent and environment.
      key: consumed.
      num_evals: evaluation chunks (static).
      iters_per_eval: self-play + update iterations per chunk (static).
      eval_episodes: greedy episodes per evaluation (static).

    Returns:
      ``{"mean": [num_evals], "cvar": [num_evals], "loss": [num_evals], "params": ...}``.
    """
    net, _, _ = make_agent(cfg, env)
    k_init, k_run, k_eval = jax.random.split(key, 3)
    s, l_ = env.num_states, cfg.history_len
    params = net.init(k_init, jnp.zeros((s,)), jnp.zeros((l_, s)), jnp.zeros((), jnp.int32))
    opt = optax.adam(cfg.learning_rate)
    step = make_train_step(_loss_fn(cfg, net), opt, has_aux=True)
    state = init_train_state(params, opt, k_run)
    buf = _empty_buffer(cfg, env)
    # seed-dependent from the start under vmap (see _tie); the write pointer and fill level
    # stay seed-independent
    kd = jax.random.key_data(k_run)
    state = state.replace(params=_tie(state.params, kd),
                          opt_state=_tie(state.opt_state, kd, floating_only=True))
    buf = buf.replace(**_tie({f: getattr(buf, f) for f in _EPISODE_FIELDS}, kd))

    def iteration(carry, k):
        st, buf = carry
        k_sp, k_up = jax.random.split(k)
        traj = self_play(cfg, env, st.params, k_sp, num_envs=cfg.num_envs)
        buf = buf.add(traj)

        def upd(st, ku):
            return step(st, _sample_batch(cfg, buf, ku))

        st, m = jax.lax.scan(upd, st, jax.random.split(k_up, cfg.updates_per_iter))
        return (st, buf), m["loss"].mean()

    def chunk(carry, k):
        k_it, k_ev = jax.random.split(k)
        carry, losses = jax.lax.scan(iteration, carry, jax.random.split(k_it, iters_per_eval))
        ev = evaluate_agent(cfg, env, carry[0].params, k_ev, num_episodes=eval_episodes)
        return carry, (ev["mean"], ev["cvar"], losses.mean())

    (state, _), (means, cvars, losses) = jax.lax.scan(
        chunk, (state, buf), jax.random.split(k_eval, num_evals))
    return {"mean": means, "cvar": cvars, "loss": losses, "params": state.params}
