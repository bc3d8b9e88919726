"""The TDM-R1 trainer: one jitted update = rollout, reward, advantages, M boundary updates.

``make_tdm_r1(gen_fn, score_fn, reward_fn, *, sigmas, num_groups, sample_shape) -> (init,
update)`` in the optax style (issue 24; ``shared/papers/tdm_r1.md``). One ``update`` does:

1. rollout: ``x_T ~ N(0, I)`` per sample, deterministic Euler on ``sigmas`` (K steps, x_0
   outputs) with :func:`~jaxpapers.diffusion.sample_trajectory`, boundaries ``x_0 .. x_K``;
   reward ``r = reward_fn(x_K, cond)`` (never differentiated); advantages
   (:func:`~jaxpapers.diffusion.group_advantages`);
2. ``lax.scan`` over M boundaries j drawn without replacement from ``0 .. K-1``, each doing in
   turn (issue step 2): the fake score f, the surrogate S (boundary k ~ P(k) ∝ k + 1, then the
   lagging copy ``S- <- S- + (1 - d)(S - S-)``, ``d = min(0.3, 0.001 (1 + step))``), the generator
   G; each an AdamW step after clipping the gradient norm to 1;
3. EMA of G with decay ``min((1 + n) / (10 + n), 0.9)`` (n = the update count).

Noise levels drawn per boundary (shared by the batch, as in the release): ``tau`` for f and
G's TDM term above ``s_{j+1}``; ``tau_d`` above ``max(s_{j+1}, gen_sigma_floor)`` for G's reward
term; ``tau_S`` above ``max(s_{k+1}, sur_sigma_floor)`` for S (:func:`shifted_sigma`).

Variants are *traced numbers* in :class:`TDMR1Params` (see ``TDM_R1_VARIANTS``): ``reward_weight``
(0.7; 0 = the TDM-only control), ``per_step`` (1: S sees the intermediate boundaries; 0: only
``x_K``), ``time_weight`` (1: ``w_t = (k + 1) / K``; 0: ``w_t = 1``), ``rwr`` (the weight of the
reward-weighted denoising control). Every variant and seed therefore runs under one compiled
``jax.vmap(update)``.

Randomness: one normal draw (rows for every sample of the *global* batch and every group) and
one uniform draw per update; each device takes the rows of its samples, so a batch split over
the devices of a ``shard_map`` axis (``axis_name``) sees exactly the numbers of the unsplit
batch. Group statistics and loss means are ``psum``-ed over that axis.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from jaxpapers.core import checks, pytree
from jaxpapers.diffusion.samplers import sample_trajectory
from jaxpapers.diffusion.schedules import SigmaSchedule
from jaxpapers.diffusion.tdm_r1 import (ScoreDenoiser, _apply, _check_group_args, _mean,
                                        _psum, fake_score_loss, forward_kernel,
                                        generator_loss, group_advantages, shifted_sigma,
                                        surrogate_loss)

__all__ = ["TDMR1State", "TDMR1Params", "TDMR1", "TDM_R1_VARIANTS", "TDM_R1_DEFAULTS",
           "tdm_r1_params", "stack_params", "make_tdm_r1", "host_reward", "group_batch"]

RewardFn = Callable[[jax.Array, Any], jax.Array]  # (images [B, ...], cond [B, ...]) -> [B]


@pytree.dataclass
class TDMR1State:
    """Trainer state (all leaves arrays; B-independent).

    Attributes:
      gen: G's parameters; fake: f's; surrogate: S's; surrogate_old: S-'s; gen_ema: EMA of G.
      gen_opt, fake_opt, sur_opt: AdamW states (clip-by-norm chain) of G, f and S.
      step: [] int32, updates taken.
    """

    gen: Any
    fake: Any
    surrogate: Any
    surrogate_old: Any
    gen_ema: Any
    gen_opt: Any
    fake_opt: Any
    sur_opt: Any
    step: jax.Array  # [] int32


@pytree.dataclass
class TDMR1Params:
    """Traced hyperparameters (scalars, or [V] stacked for a vmap over variants).

    Defaults (``TDM_R1_DEFAULTS``, from the release's OCR preset and the issue): reward_weight 0.7,
    lam_r 3.5 (stands in for the surrogate's CFG scale 2.5-4.5: no unconditional branch here),
    rwr 0, per_step 1, time_weight 1, beta 10, clip 1e-3, anchor_threshold 0.05, anchor_weight
    1e-3, fake_reg 0.02, adv_clip 5, sur_sigma_floor = gen_sigma_floor = 0.3 / 0.7 (the release's
    t_min 300/1000 as a sigma), tau_shift 3, tau_margin 0.02, lr_gen 7.5e-5, lr_fake 3e-4,
    lr_sur 3e-4, weight_decay 1e-4, ema_max 0.9, old_decay_max 0.3, old_decay_rate 1e-3.
    """

    reward_weight: jax.Array
    lam_r: jax.Array
    rwr: jax.Array
    per_step: jax.Array
    time_weight: jax.Array
    beta: jax.Array
    clip: jax.Array
    anchor_threshold: jax.Array
    anchor_weight: jax.Array
    fake_reg: jax.Array
    adv_clip: jax.Array
    sur_sigma_floor: jax.Array
    gen_sigma_floor: jax.Array
    tau_shift: jax.Array
    tau_margin: jax.Array
    lr_gen: jax.Array
    lr_fake: jax.Array
    lr_sur: jax.Array
    weight_decay: jax.Array
    ema_max: jax.Array
    old_decay_max: jax.Array
    old_decay_rate: jax.Array


TDM_R1_DEFAULTS: dict[str, float] = dict(
    reward_weight=0.7, lam_r=3.5, rwr=0.0, per_step=1.0, time_weight=1.0, beta=10.0, clip=1e-3,
    anchor_threshold=0.05, anchor_weight=1e-3, fake_reg=0.02, adv_clip=5.0,
    sur_sigma_floor=0.3 / 0.7, gen_sigma_floor=0.3 / 0.7, tau_shift=3.0, tau_margin=0.02,
    lr_gen=7.5e-5, lr_fake=3e-4, lr_sur=3e-4, weight_decay=1e-4, ema_max=0.9,
    old_decay_max=0.3, old_decay_rate=1e-3)

# The runs, as overrides of TDM_R1_DEFAULTS.
TDM_R1_VARIANTS: dict[str, dict[str, float]] = {
    "tdm_r1": {},
    "tdm_only": {"reward_weight": 0.0},
    "rwr": {"reward_weight": 0.0, "rwr": 1.0},
    "no_per_step": {"per_step": 0.0},
    "no_tweight": {"time_weight": 0.0},
}


def tdm_r1_params(variant: str = "tdm_r1", dtype=jnp.float32, **overrides) -> TDMR1Params:
    """:class:`TDMR1Params` of ``variant`` (a key of ``TDM_R1_VARIANTS``), then ``overrides``.

    >>> p = tdm_r1_params("tdm_only", lr_gen=0.5)
    >>> float(p.reward_weight), float(p.lr_gen), p.beta.dtype
    (0.0, 0.5, dtype('float32'))
    """
    checks.check_choice("variant", variant, sorted(TDM_R1_VARIANTS))
    unknown = set(overrides) - set(TDM_R1_DEFAULTS)
    if unknown:
        raise ValueError(f"overrides must be fields of TDMR1Params, got {sorted(unknown)}")
    values = {**TDM_R1_DEFAULTS, **TDM_R1_VARIANTS[variant], **overrides}
    return TDMR1Params(**{k: jnp.asarray(v, dtype) for k, v in values.items()})


def stack_params(params: list[TDMR1Params]) -> TDMR1Params:
    """Stack several :class:`TDMR1Params` along a new leading axis (for ``jax.vmap``)."""
    return jax.tree.map(lambda *a: jnp.stack(a), *params)


def group_batch(prompts: Any, group_size: int) -> tuple[Any, jax.Array]:
    """``(cond [P * G, ...], group_ids [P * G])``: each prompt repeated ``group_size`` times.

    >>> cond, ids = group_batch(jnp.array([7, 3]), 2)
    >>> cond.tolist(), ids.tolist()
    ([7, 7, 3, 3], [0, 0, 1, 1])
    """
    group_size = checks.check_int("group_size", group_size, minimum=1)
    cond = jax.tree.map(lambda a: jnp.repeat(jnp.asarray(a), group_size, axis=0), prompts)
    num = jax.tree.leaves(prompts)[0].shape[0]
    return cond, jnp.repeat(jnp.arange(num, dtype=jnp.int32), group_size)


def host_reward(fn: Callable[[np.ndarray, Any], Any], dtype=jnp.float32) -> RewardFn:
    """Wrap a host (NumPy / sklearn / any Python) reward as a ``reward_fn`` via ``pure_callback``.

    ``fn(images: np.ndarray [B, ...], cond) -> [B]`` runs on the host and is never
    differentiated; under ``vmap`` it is called once per mapped element (``sequential``).

    >>> r = host_reward(lambda x, c: (x[:, 0] > 0).astype(np.float32))
    >>> jax.jit(r)(jnp.array([[1.0], [-1.0]]), jnp.zeros(2, int)).tolist()
    [1.0, 0.0]
    """
    def reward(images, cond):
        out = jax.ShapeDtypeStruct(images.shape[:1], dtype)
        host = lambda x, c: np.asarray(fn(np.asarray(x), c), dtype=dtype)  # noqa: E731
        return jax.pure_callback(host, out, images, cond, vmap_method="sequential")

    return reward


class TDMR1(NamedTuple):
    """``init(gen_params, teacher_params) -> TDMR1State``;
    ``update(state, teacher_params, key, cond, group_ids, hparams) -> (state, metrics)``."""

    init: Callable[..., TDMR1State]
    update: Callable[..., tuple[TDMR1State, dict[str, jax.Array]]]


def _check_sigmas(sigmas) -> np.ndarray:
    s = checks.concrete(sigmas)
    if s is None:
        raise ValueError("sigmas must be concrete (a static grid), got a tracer")
    if s.ndim != 1 or s.shape[0] < 2:
        raise ValueError(f"sigmas must be a 1-D grid [K + 1] with K >= 1, got shape {s.shape}")
    if not np.all(np.isfinite(s)) or s[-1] < 0 or np.any(np.diff(s) >= 0):
        raise ValueError(f"sigmas must be finite, >= 0 and strictly decreasing, got {s}")
    return s


def _tree_mix(a, b, w):
    """``a + w (b - a)`` leaf by leaf (an EMA step towards b)."""
    return jax.tree.map(lambda x, y: x + w * (y - x), a, b)


def make_tdm_r1(gen_fn: ScoreDenoiser, score_fn: ScoreDenoiser, reward_fn: RewardFn, *,
                sigmas, num_groups: int, sample_shape: tuple[int, ...],
                num_boundaries: int = 2, global_std: bool = True, sigma_data: float = 0.5,
                gen_b1: float = 0.0, fake_b1: float = 0.0, sur_b1: float = 0.9,
                b2: float = 0.999, max_grad_norm: float = 1.0,
                axis_name: str | None = None) -> TDMR1:
    """Build the TDM-R1 trainer (issue 24 steps 1-2; see the module docstring).

    Args:
      gen_fn: G's unbatched x_0-denoiser ``(params, x [*sample_shape], sigma [], cond) -> x0``
        (e.g. :func:`~jaxpapers.diffusion.consistency_denoiser`).
      score_fn: the unbatched x_0-denoiser shared by T, f and S (e.g.
        :func:`~jaxpapers.diffusion.edm_denoiser`); f, S and S- start from T's weights.
      reward_fn: ``(images [B, *sample_shape], cond [B, ...]) -> [B]``; a jnp function or a host
        function wrapped by :func:`host_reward`. Its output is ``stop_gradient``-ed.
      sigmas: [K + 1] concrete, strictly decreasing, >= 0 (e.g. ``karras_sigmas(4, 0.002, 20)``);
        the rollout's Euler grid and the boundaries' levels.
      num_groups: static number of groups (prompts) in a batch.
      sample_shape: static shape of one sample.
      num_boundaries: M (static, 1..K), boundaries per update, drawn without replacement.
      global_std: advantages' std over the batch (True, the release) or per group.
      sigma_data: for the loss weight ``l(tau)`` (:func:`edm_weight`).
      gen_b1, fake_b1, sur_b1, b2: AdamW betas of G (0, .999), f (0, .999), S (.9, .999).
      max_grad_norm: gradient-norm clip before every AdamW step.
      axis_name: a ``shard_map`` axis the batch is split over (call ``update`` inside it, with
        the state, teacher, key and hparams replicated and ``cond`` / ``group_ids`` split).

    Returns:
      :class:`TDMR1` ``(init, update)``. ``update`` is jitted once (denoisers and reward are
      closed over); ``hparams`` is a :class:`TDMR1Params` of traced scalars. Metrics (all []):
      ``reward``, ``reward_nonfinite`` (count; value checks cannot run inside jit),
      ``adv_abs``, and the boundary means of the losses' metrics.

    Raises:
      ValueError: naming ``sigmas`` (not strictly decreasing, negative, not 1-D), ``num_groups``,
        ``num_boundaries``; at ``update``: ``group_ids`` (shape, range when concrete), ``cond``.

    >>> from jaxpapers.diffusion import karras_sigmas
    >>> den = lambda p, x, s, c: p["a"] * x / (1.0 + s ** 2)
    >>> tdm = make_tdm_r1(den, den, lambda x, c: (x[:, 0] > 0).astype(jnp.float32),
    ...                   sigmas=karras_sigmas(2, 0.01, 2.0), num_groups=2, sample_shape=(3,))
    >>> state = tdm.init({"a": jnp.float32(1.0)}, {"a": jnp.float32(1.0)})
    >>> cond, ids = group_batch(jnp.arange(2), 4)
    >>> state, m = tdm.update(state, {"a": jnp.float32(1.0)}, jax.random.key(0), cond, ids,
    ...                       tdm_r1_params())
    >>> int(state.step), sorted(m)[:3]
    (1, ['adv_abs', 'anchor', 'clip_ratio'])
    """
    sig_np = _check_sigmas(sigmas)
    num_steps = sig_np.shape[0] - 1
    num_groups = checks.check_int("num_groups", num_groups, minimum=1)
    num_boundaries = checks.check_int("num_boundaries", num_boundaries, minimum=1,
                                      maximum=num_steps)
    global_std = checks.check_bool("global_std", global_std)
    sample_shape = tuple(checks.check_int("sample_shape", d, minimum=1) for d in sample_shape)

    def opt(lr, b1, wd):
        return optax.chain(optax.clip_by_global_norm(max_grad_norm),
                           optax.adamw(lr, b1=b1, b2=b2, eps=1e-8, weight_decay=wd))

    def init(gen_params, teacher_params) -> TDMR1State:
        """Fresh state: f = S = S- = T, EMA(G) = G, zero optimizer moments, step 0."""
        # strong-typed copies: a weak-typed leaf (e.g. from jnp.full(.., python float)) would
        # come back strong from update and cost a second compilation
        def strong(tree):
            return jax.tree.map(lambda a: jnp.asarray(a, jnp.asarray(a).dtype), tree)

        gen_params, teacher_params = strong(gen_params), strong(teacher_params)
        zero = jnp.zeros((), jnp.float32)
        return TDMR1State(
            gen=gen_params, fake=teacher_params, surrogate=teacher_params,
            surrogate_old=teacher_params, gen_ema=gen_params,
            gen_opt=opt(zero, gen_b1, zero).init(gen_params),
            fake_opt=opt(zero, fake_b1, zero).init(teacher_params),
            sur_opt=opt(zero, sur_b1, zero).init(teacher_params),
            step=jnp.zeros((), jnp.int32))

    def _step(params, grads, opt_state, lr, b1, wd):
        updates, opt_state = opt(lr, b1, wd).update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def _update(state: TDMR1State, teacher, key, cond, group_ids, hp: TDMR1Params):
        batch = group_ids.shape[0]
        sig = jnp.asarray(sig_np, jnp.result_type(float))
        dtype = sig.dtype
        if axis_name is None:
            idx, total = jnp.arange(batch), batch
        else:
            idx = lax.axis_index(axis_name) * batch + jnp.arange(batch)
            total = batch * lax.axis_size(axis_name)
        # All randomness in two draws at the top (each threefry instance costs ~0.7 s of
        # compilation on CPU): noise rows for the *global* batch and every group, of which
        # this device takes its samples' rows, so a split batch sees the unsplit numbers.
        m, rows = num_boundaries, 3 * total + 2 * num_groups
        k_n, k_u, k_roll = jax.random.split(key, 3)
        noise = jax.random.normal(k_n, (total + m * rows,) + sample_shape, dtype)
        unif = jax.random.uniform(k_u, (num_steps + 4 * m,), dtype)
        x_T = noise[:total][idx]
        per_step = noise[total:].reshape((m, rows) + sample_shape)
        u_perm, u_body = unif[:num_steps], unif[num_steps:].reshape(m, 4)

        # ---- step 1: rollout, reward, advantages
        den = lambda p, x, s: _apply(gen_fn, p[0], x, s, p[1])  # noqa: E731
        traj = sample_trajectory(den, (state.gen, cond), k_roll, x_T,  # unused by euler
                                 schedule=SigmaSchedule(sig, prediction="sample"),
                                 sampler="euler", steps=num_steps)  # [K + 1, B, ...]
        rewards = lax.stop_gradient(jnp.asarray(reward_fn(traj[-1], cond), dtype))
        adv = group_advantages(rewards, group_ids, num_groups=num_groups, clip=hp.adv_clip,
                               global_std=global_std, axis_name=axis_name)
        s_max = sig[0]
        k_probs = jnp.arange(1, num_steps + 1, dtype=dtype)
        k_probs = hp.per_step * k_probs / jnp.sum(k_probs) + (1.0 - hp.per_step) * (
            jnp.arange(num_steps) == num_steps - 1)
        k_cdf = jnp.cumsum(k_probs)[:-1]
        n = state.step.astype(dtype)
        old_decay = jnp.minimum(hp.old_decay_max, hp.old_decay_rate * (1.0 + n))
        sigma_at = lambda u, low: shifted_sigma(u, low, s_max, shift=hp.tau_shift,  # noqa
                                                margin=hp.tau_margin)

        def body(carry, inp):
            gen, fake, sur, old, g_opt, f_opt, s_opt = carry
            j, z, u = inp  # boundary, noise rows [rows, ...], uniforms [4]
            eps_f, eps_g, eps_w = (z[i * total:(i + 1) * total][idx] for i in range(3))
            eps_s, eps_d = (z[3 * total + i * num_groups:][:num_groups][group_ids]
                            for i in range(2))
            s_j, s_next, x_j = sig[j], sig[j + 1], traj[j]

            # ---- 2a: fake score at tau above s_{j+1}
            x0 = lax.stop_gradient(_apply(gen_fn, gen, x_j, s_j, cond))
            x_n = x0 + (s_next / s_j) * (x_j - x0)
            tau = sigma_at(u[0], s_next)
            x_tau = x_n + jnp.sqrt(tau ** 2 - s_next ** 2) * eps_f
            (_, m_f), grad = jax.value_and_grad(fake_score_loss, has_aux=True)(
                fake, teacher, x_tau, tau, x0, cond, score_fn=score_fn, reg=hp.fake_reg,
                sigma_data=sigma_data, axis_name=axis_name)
            fake, f_opt = _step(fake, grad, f_opt, hp.lr_fake, fake_b1, hp.weight_decay)

            # ---- 2b: surrogate at a boundary k ~ P(k) (inverse CDF), group-shared noise
            kb = jnp.sum(u[1] >= k_cdf).astype(jnp.int32)
            s_n, x_nk = sig[kb + 1], traj[kb + 1]
            tau_s = sigma_at(u[2], jnp.maximum(s_n, hp.sur_sigma_floor))
            x_tau_s, target = forward_kernel(x_nk, s_n, tau_s, eps_s)
            w_t = hp.time_weight * (kb + 1).astype(dtype) / num_steps + (1.0 - hp.time_weight)
            (_, m_s), grad = jax.value_and_grad(surrogate_loss, has_aux=True)(
                sur, old, teacher, x_tau_s, tau_s, target, adv, group_ids, cond,
                time_weight=w_t, beta=hp.beta, clip=hp.clip,
                anchor_threshold=hp.anchor_threshold, anchor_weight=hp.anchor_weight,
                score_fn=score_fn, num_groups=num_groups, sigma_data=sigma_data,
                axis_name=axis_name)
            sur, s_opt = _step(sur, grad, s_opt, hp.lr_sur, sur_b1, hp.weight_decay)
            old = _tree_mix(old, sur, 1.0 - old_decay)

            # ---- 2c: generator
            tau_d = sigma_at(u[3], jnp.maximum(s_next, hp.gen_sigma_floor))
            (_, m_g), grad = jax.value_and_grad(generator_loss, has_aux=True)(
                gen, fake, sur, teacher, x_j, s_j, s_next, tau, eps_g, tau_d, eps_d,
                traj[-1], eps_w, adv, cond, reward_weight=hp.reward_weight, lam_r=hp.lam_r,
                rwr=hp.rwr, gen_fn=gen_fn, score_fn=score_fn, axis_name=axis_name)
            gen, g_opt = _step(gen, grad, g_opt, hp.lr_gen, gen_b1, hp.weight_decay)
            metrics = {**m_f, **m_s, **m_g, "tau": tau, "tau_s": tau_s, "tau_d": tau_d,
                       "surrogate_boundary": kb.astype(dtype)}
            return (gen, fake, sur, old, g_opt, f_opt, s_opt), metrics

        js = jnp.argsort(u_perm)[:num_boundaries]  # M boundaries without replacement
        carry = (state.gen, state.fake, state.surrogate, state.surrogate_old, state.gen_opt,
                 state.fake_opt, state.sur_opt)
        carry, ms = lax.scan(body, carry, (js, per_step, u_body))
        gen, fake, sur, old, g_opt, f_opt, s_opt = carry
        decay = jnp.minimum((1.0 + n) / (10.0 + n), hp.ema_max)
        ema = _tree_mix(state.gen_ema, gen, 1.0 - decay)
        new = TDMR1State(gen=gen, fake=fake, surrogate=sur, surrogate_old=old, gen_ema=ema,
                         gen_opt=g_opt, fake_opt=f_opt, sur_opt=s_opt, step=state.step + 1)
        metrics = {k: jnp.mean(v) for k, v in ms.items()}
        metrics["reward"] = _mean(rewards, axis_name)
        metrics["reward_nonfinite"] = _psum(jnp.sum(~jnp.isfinite(rewards)).astype(dtype),
                                            axis_name)
        metrics["adv_abs"] = _mean(jnp.abs(adv), axis_name)
        return new, metrics

    jitted = jax.jit(_update)

    def update(state: TDMR1State, teacher_params, key: jax.Array, cond, group_ids,
               hparams: TDMR1Params):
        """One TDM-R1 iteration on a batch of B = num_groups x G samples (see make_tdm_r1).

        Args:
          state: from ``init`` / a previous ``update``.
          teacher_params: T's parameters (constant).
          key: typed key, consumed.
          cond: [B, ...] conditioning of each sample (pytree with leading B).
          group_ids: [B] int in ``[0, num_groups)`` (global ids under ``axis_name``).
          hparams: :class:`TDMR1Params` (traced).

        Returns:
          ``(state, metrics)``.
        """
        checks.check_key("key", key)
        if not isinstance(hparams, TDMR1Params):
            raise ValueError(f"hparams must be TDMR1Params (see tdm_r1_params), got "
                             f"{type(hparams).__name__}")
        _check_group_args("group_ids", group_ids, group_ids, num_groups)
        b = np.shape(group_ids)[0]
        for leaf in jax.tree.leaves(cond):
            if np.shape(leaf)[:1] != (b,):
                raise ValueError(f"cond leaves must have the leading batch axis B={b} of "
                                 f"group_ids, got shape {tuple(np.shape(leaf))}")
        return jitted(state, teacher_params, key, cond, jnp.asarray(group_ids), hparams)

    update.jitted = jitted
    return TDMR1(init=init, update=update)
