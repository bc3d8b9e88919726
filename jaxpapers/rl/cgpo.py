"""CGPO and the agents compared with it, as optax-style ``init`` / ``update`` pairs (issue 25).

One configuration type, one state type and one critic update serve every method, so baselines
differ only in their actor:

* ``cgpo`` -- critic-guided policy optimisation (our reading of the paper's page; the digest
  ``../shared/papers/cgpo.md`` lists what is ours):
  1. critics: N quantile nets x M atoms, DDQN-style target ``a' = argmax`` over ``n_cand``
     plain samples at s' by the online critics, valued by the target critics, TQC truncation
     (:func:`truncated_quantile_target`), quantile Huber loss;
  2. value calibration: ``V(s)`` regressed on ``Q(s, a)``, ``a ~ pi(.|s)`` plain;
  3. guided target ``a_tilde`` (:func:`sample_actions` with guidance in the last L steps, no
     gradient into the policy), advantage ``A = Q(s, a_tilde) - V(s)``,
     ``w = exp(clip(beta A / std(A), -3, 3))`` (ours: the page names no formula);
  4. actor: ``sum_i w_i (err(a_tilde_i) + alpha_ent mean_j err(u_ij)) / sum_i w_i`` with
     ``u_ij ~ U[-1, 1]^A`` (QVPO's entropy term) and ``err`` the denoising error.
  Ablations are traced switches of :class:`CGPOParams`: ``guidance_scale = 0`` (no guidance),
  ``beta = 0`` (w = 1), both (the drift control: plain self-regression), ``alpha_ent = 0``.
* ``qvpo``, ``qgrad``, ``sac``: :mod:`jaxpapers.rl.baselines` (same critics and target rule;
  SAC's target samples its own a' and subtracts ``alpha log pi``).

Rollouts and evaluation use the plain sampler for every diffusion method (the page's rule).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxpapers.core import checks, pytree
from jaxpapers.rl import baselines
from jaxpapers.rl.critics import q_value, quantile_huber_loss, truncated_quantile_target
from jaxpapers.rl.diffusion_policy import guided_gain, sample_actions, weighted_denoising_loss
from jaxpapers.rl.networks import EpsMLP, QuantileCritics, TanhGaussianActor, ValueMLP
from jaxpapers.rl.replay import Transition

__all__ = ["AgentConfig", "CGPOParams", "AgentState", "Agent", "make_agent", "METHODS",
           "cgpo_weights", "DIFFUSION_METHODS", "fit_uniform"]

DIFFUSION_METHODS = ("cgpo", "qvpo", "qgrad")
METHODS = DIFFUSION_METHODS + ("sac",)


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    """Static settings (Python structure and optimiser constants) of every method.

    Attributes:
      method: one of ``METHODS``.
      num_steps: T, denoising steps of the policy (DACER / QVPO: 20).
      guidance_steps: L, final steps guided by the critic (cgpo; 0 <= L <= T).
      num_critics, num_quantiles, drop_per_net: N, M, k of the TQC critics (k < M).
      n_cand: plain samples per state for the DDQN-style target a' (all diffusion methods) and
        QVPO's best-of-n actor target.
      n_uniform: uniform actions per state of the entropy term (cgpo, qvpo).
      gamma: discount; 0 skips the target sampling (one-step tasks).
      tau: Polyak rate of the target critics.
      lr_actor, lr_critic, lr_value: Adam learning rates (SAC's temperature uses lr_critic).
      hidden: hidden sizes of every MLP.
      kappa: quantile Huber threshold.
      max_grad_norm: global-norm gradient clipping of every optimiser (None: off).
    """

    method: str = "cgpo"
    num_steps: int = 20
    guidance_steps: int = 5
    num_critics: int = 2
    num_quantiles: int = 25
    drop_per_net: int = 2
    n_cand: int = 4
    n_uniform: int = 4
    gamma: float = 0.99
    tau: float = 0.005
    lr_actor: float = 3e-4
    lr_critic: float = 3e-4
    lr_value: float = 3e-4
    hidden: tuple[int, ...] = (128, 128)
    kappa: float = 1.0
    max_grad_norm: float | None = 10.0

    def __post_init__(self):
        checks.check_choice("method", self.method, METHODS)
        for name in ("num_steps", "num_critics", "num_quantiles", "n_cand", "n_uniform"):
            checks.check_int(name, getattr(self, name), minimum=1)
        checks.check_int("guidance_steps", self.guidance_steps, minimum=0)
        if self.guidance_steps > self.num_steps:
            raise ValueError(f"guidance_steps must be <= num_steps={self.num_steps}, got "
                             f"{self.guidance_steps}")
        checks.check_int("drop_per_net", self.drop_per_net, minimum=0)
        if self.drop_per_net >= self.num_quantiles:
            raise ValueError(f"drop_per_net must be < num_quantiles={self.num_quantiles}, got "
                             f"{self.drop_per_net}")
        checks.check_range("gamma", self.gamma, low=0.0, high=1.0, scalar=True)
        checks.check_range("tau", self.tau, low=0.0, high=1.0, low_open=True, scalar=True)
        for name in ("lr_actor", "lr_critic", "lr_value", "kappa"):
            checks.check_range(name, getattr(self, name), low=0.0, low_open=True, scalar=True)


@pytree.dataclass
class CGPOParams:
    """Traced hyperparameters (vmap over them to run ablations in one program).

    Attributes:
      guidance_scale: [] lam >= 0, the critic-guidance step (cgpo).
      beta: [] temperature of the advantage weights (cgpo; 0 = unweighted).
      alpha_ent: [] weight of the uniform-action entropy term (cgpo, qvpo).
    """

    guidance_scale: jax.Array
    beta: jax.Array
    alpha_ent: jax.Array

    @classmethod
    def make(cls, guidance_scale=0.05, beta=1.0, alpha_ent=0.02) -> "CGPOParams":
        for name, v in (("guidance_scale", guidance_scale), ("beta", beta),
                        ("alpha_ent", alpha_ent)):
            checks.check_range(name, v, low=0.0)
        f = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
        return cls(f(guidance_scale), f(beta), f(alpha_ent))


@pytree.dataclass
class AgentState:
    """Parameters and optimiser states of one agent (shapes from the networks).

    Attributes:
      actor: eps-model params (diffusion methods) or SAC's actor params.
      critic, target: online and target critic params (N x M atoms).
      value: V(s) params (cgpo; an empty dict otherwise).
      log_alpha: [] SAC's log temperature (0 otherwise).
      opt_actor, opt_critic, opt_value, opt_alpha: optax states.
      step: [] int32 number of updates.
    """

    actor: Any
    critic: Any
    target: Any
    value: Any
    log_alpha: jax.Array
    opt_actor: Any
    opt_critic: Any
    opt_value: Any
    opt_alpha: Any
    step: jax.Array


class Agent(NamedTuple):
    """``init(key) -> state``; ``act(state, key, obs [B, O]) -> [B, A]`` (plain sampler /
    stochastic SAC); ``update(state, hp, key, batch, *, critic_only=False) -> (state,
    metrics)`` (``critic_only``, static: only the critics and their target move); ``q(state, obs [B,
    O], act [B, A]) -> [B]`` (truncated mean); ``gain(state, hp, key, obs [B, O]) -> [B]``
    (cgpo's Q(s, a_tilde) - Q(s, a_plain); zeros for other methods); ``eps_fn(params, obs
    [O], a_t [A], t) -> [A]`` the unbatched eps-model (diffusion methods; None for SAC)."""

    config: AgentConfig
    init: Callable
    act: Callable
    update: Callable
    q: Callable
    gain: Callable
    eps_fn: Callable | None


def fit_uniform(agent: Agent, actor_params, key: jax.Array, obs: jax.Array, *, steps: int,
                lr: float = 1e-3):
    """Fit a diffusion policy to uniform actions on ``obs`` (the "uniform start").

    ``steps`` Adam steps of :func:`weighted_denoising_loss` (weights 1) on fresh
    ``U[-1, 1]^A`` actions paired with the rows of ``obs [B, O]``; one ``lax.scan``.

    Returns:
      The fitted eps-model parameters (same structure as ``actor_params``).
    """
    if agent.eps_fn is None:
        raise ValueError(f"fit_uniform needs a diffusion agent, got method "
                         f"{agent.config.method!r}")
    steps = checks.check_int("steps", steps, minimum=0)
    checks.check_ndim("obs", obs, 2, "[B, O]")
    opt = optax.adam(lr)
    act_dim = jax.tree.leaves(actor_params)[-1].shape[-1]

    def body(carry, k):
        p, o = carry
        k_a, k_l = jax.random.split(k)
        a = jax.random.uniform(k_a, (obs.shape[0], act_dim), minval=-1.0, maxval=1.0)
        loss, g = jax.value_and_grad(weighted_denoising_loss, argnums=1)(
            agent.eps_fn, p, k_l, obs, a, jnp.ones((obs.shape[0],)),
            num_steps=agent.config.num_steps)
        upd, o = opt.update(g, o, p)
        return (optax.apply_updates(p, upd), o), loss

    (params, _), _ = jax.lax.scan(body, (actor_params, opt.init(actor_params)),
                                  jax.random.split(key, steps))
    return params


def cgpo_weights(adv: jax.Array, beta: jax.typing.ArrayLike) -> jax.Array:
    """[B] advantages -> ``exp(clip(beta A / std(A), -3, 3))`` (std over the batch)."""
    z = beta * adv / (jnp.std(adv) + 1e-6)
    return jnp.exp(jnp.clip(z, -3.0, 3.0))


def _opt(lr, max_grad_norm):
    adam = optax.adam(lr)
    return adam if max_grad_norm is None else optax.chain(
        optax.clip_by_global_norm(max_grad_norm), adam)


def make_agent(config: AgentConfig, obs_dim: int, act_dim: int) -> Agent:
    """Build the pure functions of ``config.method`` for observations [O] and actions [A].

    >>> import jax, jax.numpy as jnp
    >>> ag = make_agent(AgentConfig(num_steps=4, guidance_steps=2, hidden=(16,)), 1, 2)
    >>> st = ag.init(jax.random.key(0))
    >>> ag.act(st, jax.random.key(1), jnp.zeros((3, 1))).shape
    (3, 2)
    """
    c = config
    obs_dim = checks.check_int("obs_dim", obs_dim, minimum=1)
    act_dim = checks.check_int("act_dim", act_dim, minimum=1)
    diffusion = c.method in DIFFUSION_METHODS
    eps_net = EpsMLP(act_dim, c.hidden)
    sac_net = TanhGaussianActor(act_dim, c.hidden)
    critic_net = QuantileCritics(c.num_critics, c.num_quantiles, c.hidden)
    value_net = ValueMLP(c.hidden)
    opt_actor, opt_critic = _opt(c.lr_actor, c.max_grad_norm), _opt(c.lr_critic, c.max_grad_norm)
    opt_value, opt_alpha = _opt(c.lr_value, c.max_grad_norm), optax.adam(c.lr_critic)
    sample_kw = dict(num_steps=c.num_steps, act_dim=act_dim)

    def eps_fn(p, s, a, t):
        return eps_net.apply(p, s, a, t)

    def q_fn_of(critic_params):
        return lambda s, a: q_value(critic_net.apply(critic_params, s, a),
                                    drop_per_net=c.drop_per_net)

    def init(key):
        checks.check_key("key", key)
        k_a, k_c, k_v = jax.random.split(key, 3)
        s0, a0 = jnp.zeros((obs_dim,)), jnp.zeros((act_dim,))
        actor = (eps_net.init(k_a, s0, a0, jnp.zeros((), jnp.int32)) if diffusion
                 else sac_net.init(k_a, s0))
        critic = critic_net.init(k_c, s0, a0)
        value = value_net.init(k_v, s0) if c.method == "cgpo" else {}
        log_alpha = jnp.zeros((), jnp.float32)
        return AgentState(actor, critic, critic, value, log_alpha, opt_actor.init(actor),
                          opt_critic.init(critic), opt_value.init(value),
                          opt_alpha.init(log_alpha), jnp.zeros((), jnp.int32))

    def policy_sample(actor, key, obs):
        if diffusion:
            return sample_actions(eps_fn, actor, key, obs, **sample_kw)
        return baselines.sac_sample(sac_net, actor, key, obs)[0]

    def act(state, key, obs):
        return policy_sample(state.actor, key, obs)

    def q(state, obs, actions):
        return jax.vmap(q_fn_of(state.critic))(obs, actions)

    def gain(state, hp, key, obs):
        if c.method != "cgpo" or not c.guidance_steps:
            return jnp.zeros((obs.shape[0],), jnp.float32)
        return guided_gain(eps_fn, state.actor, key, obs, q_fn=q_fn_of(state.critic),
                           guidance_scale=hp.guidance_scale, guidance_steps=c.guidance_steps,
                           **sample_kw)[2]

    def critic_target(state, key, batch):
        b = batch.reward.shape[0]
        shape = (b, c.num_critics, c.num_quantiles)
        if c.gamma == 0.0:  # one-step task: nothing to bootstrap
            return truncated_quantile_target(jnp.zeros(shape), batch.reward, batch.done,
                                             gamma=0.0, drop_per_net=c.drop_per_net)
        if diffusion:  # DDQN-style: best of n_cand by the online critics, target critics value
            nxt = jnp.repeat(batch.next_obs, c.n_cand, axis=0)
            cand = sample_actions(eps_fn, state.actor, key, nxt, **sample_kw)
            qs = jax.vmap(q_fn_of(state.critic))(nxt, cand).reshape(b, c.n_cand)
            best = jnp.argmax(qs, axis=1)
            a_next = cand.reshape(b, c.n_cand, act_dim)[jnp.arange(b), best]
            atoms = critic_net.apply(state.target, batch.next_obs, a_next)
        else:
            a_next, logp = baselines.sac_sample(sac_net, state.actor, key, batch.next_obs)
            atoms = critic_net.apply(state.target, batch.next_obs, a_next)
            atoms = atoms - jnp.exp(state.log_alpha) * logp[:, None, None]
        return truncated_quantile_target(jax.lax.stop_gradient(atoms), batch.reward, batch.done,
                                         gamma=c.gamma, drop_per_net=c.drop_per_net)

    def update(state, hp, key, batch: Transition, *, critic_only: bool = False):
        k_tgt, k_act, k_loss, k_uni = jax.random.split(key, 4)
        metrics = {}
        # 1. critics
        y = critic_target(state, k_tgt, batch)

        def critic_loss(p):
            return quantile_huber_loss(critic_net.apply(p, batch.obs, batch.action), y,
                                       kappa=c.kappa)

        lc, gc = jax.value_and_grad(critic_loss)(state.critic)
        upd, opt_c = opt_critic.update(gc, state.opt_critic, state.critic)
        critic = optax.apply_updates(state.critic, upd)
        target = optax.incremental_update(critic, state.target, c.tau)
        metrics["critic_loss"] = lc
        if critic_only:  # e.g. a warm-up phase: the critics learn, nothing else moves
            return state.replace(critic=critic, target=target, opt_critic=opt_c,
                                 step=state.step + 1), metrics
        q_fn = q_fn_of(state.critic)
        qb = jax.vmap(q_fn)
        value, opt_v, log_alpha, opt_al = state.value, state.opt_value, state.log_alpha, \
            state.opt_alpha
        # 2. actor (and value / temperature)
        if c.method == "cgpo":
            a_plain, a_tilde, dq = guided_gain(
                eps_fn, state.actor, k_act, batch.obs, q_fn=q_fn,
                guidance_scale=hp.guidance_scale, guidance_steps=c.guidance_steps, **sample_kw)
            a_tilde = jax.lax.stop_gradient(a_tilde)
            q_plain = jax.lax.stop_gradient(qb(batch.obs, a_plain))

            def value_loss(p):
                return jnp.mean((value_net.apply(p, batch.obs) - q_plain) ** 2)

            lv, gv = jax.value_and_grad(value_loss)(state.value)
            upd, opt_v = opt_value.update(gv, state.opt_value, state.value)
            value = optax.apply_updates(state.value, upd)
            adv = qb(batch.obs, a_tilde) - value_net.apply(state.value, batch.obs)
            w = jax.lax.stop_gradient(cgpo_weights(adv, hp.beta))
            loss_fn = baselines.regression_loss(eps_fn, batch.obs, a_tilde, w, hp.alpha_ent,
                                                k_loss, k_uni, c.num_steps, c.n_uniform)
            metrics.update(value_loss=lv, delta_q=jnp.mean(dq), w_max_over_mean=jnp.max(w) /
                           jnp.mean(w))
        elif c.method == "qvpo":
            loss_fn, extra = baselines.qvpo_actor_loss(
                eps_fn, state.actor, qb, batch.obs, hp.alpha_ent, k_act, k_loss, k_uni,
                num_steps=c.num_steps, act_dim=act_dim, n_cand=c.n_cand, n_uniform=c.n_uniform)
            metrics.update(extra)
        elif c.method == "qgrad":
            def loss_fn(p):
                a = sample_actions(eps_fn, p, k_act, batch.obs, **sample_kw)
                return -jnp.mean(qb(batch.obs, a))
        else:
            loss_fn = baselines.sac_actor_loss(sac_net, qb, batch.obs, jnp.exp(state.log_alpha),
                                               k_act)
        la, ga = jax.value_and_grad(loss_fn)(state.actor)
        upd, opt_a = opt_actor.update(ga, state.opt_actor, state.actor)
        actor = optax.apply_updates(state.actor, upd)
        metrics["actor_loss"] = la
        if c.method == "sac":
            la_, log_alpha, opt_al = baselines.sac_temperature_step(
                sac_net, state.actor, state.log_alpha, state.opt_alpha, opt_alpha, k_act,
                batch.obs, target_entropy=-float(act_dim))
            metrics["alpha"] = jnp.exp(log_alpha)
        metrics["q_mean"] = jnp.mean(qb(batch.obs, batch.action))
        new = AgentState(actor, critic, target, value, log_alpha, opt_a, opt_c, opt_v, opt_al,
                         state.step + 1)
        return new, metrics

    return Agent(c, init, act, update, q, gain, eps_fn if diffusion else None)
