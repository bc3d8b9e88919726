"""CodeTracer (reconstruction): a small policy beside the frozen byte LM chooses where and which
green bytes to promote, trained with GRPO on execution/validity and watermark rewards.

The official code (github.com/TimeLovercc/CodeTracer) could not be read; every choice below is a
reconstruction from the paper's summary (see ``experiments/codetracer/README.md``):

* **Policy** (:class:`Policy`, Flax MLP) reads, per step, the LM's 256 next-byte log-probs, their
  entropy and the current context's green mask, and outputs a gate logit and 256 byte scores.
* **Scores** are a residual on the LM's log-probs (``CodeTracer.prior``): a fresh policy
  promotes green bytes the LM is likely to emit (sampling them without replacement in proportion
  to the LM's probabilities), which is where a bias changes the text at all.
* **Action**: gate ``g_t ~ Bernoulli(sigmoid(gate))`` (straight-through); promoted set ``S_t`` =
  Gumbel top-k of the scores over green printable bytes (:func:`gumbel_topk`, exactly k-hot);
  logits += ``delta g_t 1[v in S_t]``.
* **Outcome reward** ``r = validity + lambda clip(z_dedup / 4, 0, 1)`` per sample; GRPO advantages
  ``(r - mean_group) / (std_group + eps)`` over the samples of one prompt, applied to the log
  probability of the discrete choices (Bernoulli gate + Plackett-Luce ordered top-k).
* **Process term** (differentiable, through the straight-through gate and the relaxed top-k):
  green mass of the biased distribution minus ``beta KL(biased || LM)`` per step.
* Detection needs no LM: the deduplicated KGW z of the text.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxpapers.watermark import bias as _bias
from jaxpapers.watermark.gumbel import gumbel_topk

__all__ = ["Policy", "CodeTracer", "policy_init", "GRPOConfig", "group_advantages",
           "grpo_surrogate", "grpo_loss", "train_codetracer", "completion_validity"]


LOGP_FLOOR = 16.0


class Policy(nn.Module):
    """MLP: [probabilities (V), log-probs clipped at -16 and scaled to [-1, 0] (V), entropy /
    log V (1), green mask (V)] -> (gate logit [], byte scores [V])."""

    hidden: int = 64
    vocab: int = 256

    @nn.compact
    def __call__(self, logp, ent, green):
        # bounded features: the raw log-probs of unlikely bytes reach -30 or below, which made
        # the first layer's activations (and so every Adam step on the gate) huge
        x = jnp.concatenate([jnp.exp(logp), jnp.clip(logp, -LOGP_FLOOR, 0.0) / LOGP_FLOOR,
                             ent[..., None] / jnp.log(self.vocab), green.astype(logp.dtype)],
                            axis=-1)
        x = nn.relu(nn.Dense(self.hidden)(x))
        x = nn.relu(nn.Dense(self.hidden)(x))
        out = nn.Dense(self.vocab + 1, kernel_init=nn.initializers.zeros)(x)
        return out[..., 0], out[..., 1:]


def policy_init(key: jax.Array, *, hidden: int = 64, gate_bias: float = 0.0) -> Any:
    """Policy parameters (``key`` consumed); the last layer starts at zero (uniform scores) with
    the gate's bias at ``gate_bias`` (sigmoid(0) = a coin flip)."""
    pol = Policy(hidden=hidden)
    v = 256
    params = pol.init(key, jnp.zeros((1, v)), jnp.zeros((1,)), jnp.zeros((1, v), bool))
    dense = params["params"]["Dense_2"]
    dense["bias"] = dense["bias"].at[0].set(gate_bias)
    return params


def _entropy(logits):
    logp = jax.nn.log_softmax(logits, axis=-1)
    return logp, -jnp.sum(jnp.exp(logp) * logp, axis=-1)


@dataclasses.dataclass(frozen=True)
class CodeTracer:
    """CodeTracer's logits processor (static, hashable): pass the policy's parameters as
    ``processor_params`` of :func:`jaxpapers.watermark.generate`.

    Attributes:
      delta: bias added to promoted bytes when the gate is on.
      k: bytes promoted per gated step (Gumbel top-k over green printable bytes).
      hidden: MLP width.
      tau: relaxation temperature of the top-k's gradient.
      beta: weight of ``KL(biased || LM)`` in the process term.
      prior: weight of the LM's (clipped) log-probs added to the policy's byte scores, so that a
        fresh policy's Gumbel top-k draws the promoted bytes in proportion to the LM's
        probabilities (at 1) instead of uniformly among the ~48 green printable bytes (at 0);
        the MLP learns a residual. A reconstruction choice (see the module docstring).

    Per-step ``aux``: ``logp`` (log-probability of the sampled gate and ordered top-k), ``gate``
    (0/1), ``process`` (green mass after the bias minus ``beta`` KL; differentiable).
    """

    delta: float = 2.0
    k: int = 16
    hidden: int = 64
    tau: float = 1.0
    beta: float = 0.1
    prior: float = 1.0

    def __call__(self, params, logits, green, key):
        """``params``: the policy's variables, or ``(variables, delta)`` with a traced delta."""
        delta = self.delta
        if isinstance(params, tuple):
            params, delta = params
        logp_lm, ent = _entropy(logits)
        gate_logit, scores = Policy(hidden=self.hidden).apply(params, logp_lm, ent, green)
        if self.prior:
            scores = scores + self.prior * jnp.clip(logp_lm, -LOGP_FLOOR, 0.0)
        b, v = logits.shape
        k_gate, k_top = jax.random.split(key)
        p_gate = jax.nn.sigmoid(gate_logit)
        u = jax.random.uniform(k_gate, (b,))
        hard = (u < p_gate).astype(logits.dtype)
        gate = hard + p_gate - jax.lax.stop_gradient(p_gate)  # straight-through
        allowed = green & _bias.printable_mask()[None, :]
        top_keys = jax.random.split(k_top, b)
        chosen = jax.vmap(lambda kk, s, m: gumbel_topk(kk, s, k=self.k, tau=self.tau, mask=m))(
            top_keys, scores, allowed)
        bias = jnp.asarray(delta, logits.dtype) * gate[:, None] * chosen
        # log-probability of the discrete choices (score-function / GRPO term)
        log_gate = hard * jax.nn.log_sigmoid(gate_logit) + (1 - hard) * jax.nn.log_sigmoid(
            -gate_logit)
        log_set = jax.vmap(self._ordered_logp)(top_keys, scores, allowed)
        logp = log_gate + hard * log_set
        # process term: green mass after the bias minus beta KL(biased || LM)
        biased = jax.nn.log_softmax(logits + bias, axis=-1)
        green_mass = jnp.sum(jnp.exp(biased) * green, axis=-1)
        kl = jnp.sum(jnp.exp(biased) * (biased - logp_lm), axis=-1)
        return bias, {"logp": logp, "gate": hard, "process": green_mass - self.beta * kl}

    def _ordered_logp(self, key, scores, allowed):
        """Plackett-Luce log-probability of the order in which the Gumbel top-k picked its k
        bytes (the same noise as :func:`gumbel_topk`'s forward pass)."""
        g = jax.random.gumbel(key, scores.shape, scores.dtype)
        neg = jnp.where(allowed, 0.0, -jnp.inf).astype(scores.dtype)
        _, order = jax.lax.top_k(jax.lax.stop_gradient(scores) + g + neg, self.k)

        def step(avail_neg, idx):
            lse = jax.nn.logsumexp(scores + avail_neg)
            return avail_neg.at[idx].set(-jnp.inf), scores[idx] - lse

        _, terms = jax.lax.scan(step, neg, order)
        return jnp.sum(terms)


# ----------------------------------------------------------------------------- GRPO training

def completion_validity(tokens: Any) -> Any:
    """Host-side share of complete non-blank lines that parse, per row of ``tokens`` [B, N]
    (0 when a row has no complete line). Parsing only (:func:`line_validity`)."""
    import numpy as np

    from jaxpapers.watermark.validity import line_validity

    rows = np.asarray(tokens).astype(np.uint8)
    out = np.zeros(rows.shape[0], np.float32)
    for i, row in enumerate(rows):
        ok, total = line_validity(row.tobytes())
        out[i] = ok / total if total else 0.0
    return out


def _validity_callback(tokens):
    spec = jax.ShapeDtypeStruct(tokens.shape[:1], jnp.float32)
    return jax.pure_callback(completion_validity, spec, tokens, vmap_method="sequential")


@dataclasses.dataclass(frozen=True)
class _Prompts:
    """``batch_fn(step, data)``: a random batch of prompts, each repeated ``group`` times."""

    per_step: int
    group: int

    def __call__(self, step, data):
        data_key, prompts, lm_params = data
        idx = jax.random.choice(jax.random.fold_in(data_key, step), prompts.shape[0],
                                (self.per_step,), replace=False)
        return {"prompts": jnp.repeat(prompts[idx], self.group, axis=0), "lm": lm_params}


@dataclasses.dataclass(frozen=True)
class GRPOConfig:
    """GRPO settings of :func:`train_codetracer` (static).

    Attributes:
      prompts_per_step, group: prompts per step and samples per prompt (advantages are
        normalised within each group).
      num_bytes: bytes generated per sample. temperature: sampling temperature.
      lam: weight of the watermark reward ``clip(z_dedup / 4, 0, 1)`` (validity has weight 1).
      process_weight: weight of the differentiable process term (mean per step).
      learning_rate: Adam step size. gamma, wm_key: the green lists.
      gate_init: initial gate logit bias of a fresh policy (0: gate on half the time).
    """

    prompts_per_step: int = 4
    group: int = 8
    num_bytes: int = 64
    temperature: float = 0.6
    lam: float = 1.0
    process_weight: float = 0.1
    learning_rate: float = 1e-3
    gamma: float = 0.5
    wm_key: int = 15485863
    gate_init: float = 0.0


def group_advantages(reward: jax.Array, *, group: int) -> jax.Array:
    """GRPO advantages: ``(r - mean_g) / (std_g + 1e-6)`` within consecutive groups of
    ``group`` samples of one prompt; ``reward`` [B] with ``B % group == 0`` -> [B] (no gradient).
    """
    if isinstance(group, bool) or not isinstance(group, int) or group < 1:
        raise ValueError(f"group must be an int >= 1, got {group!r}")
    if reward.ndim != 1 or reward.shape[0] % group:
        raise ValueError(f"reward must be [B] with B a multiple of group={group}, got "
                         f"{reward.shape}")
    r = reward.reshape(-1, group)
    adv = (r - r.mean(axis=1, keepdims=True)) / (r.std(axis=1, keepdims=True) + 1e-6)
    return jax.lax.stop_gradient(adv.reshape(-1))


def grpo_surrogate(reward: jax.Array, logp: jax.Array, process: jax.Array, *, group: int,
                   process_weight: float) -> jax.Array:
    """The loss whose gradient is GRPO's policy gradient plus the process term's.

    ``-mean_b(A_b sum_t logp_bt) - process_weight mean_bt(process_bt)`` with ``A`` from
    :func:`group_advantages`; ``reward`` [B], ``logp`` and ``process`` [B, N] (the processor's
    per-step ``aux``).
    """
    adv = group_advantages(reward, group=group)
    return -jnp.mean(adv * jnp.sum(logp, axis=1)) - process_weight * jnp.mean(process)


def grpo_loss(policy_params, batch, key, *, config, lm_config, tracer: CodeTracer):
    """GRPO surrogate on one batch of grouped prompts (see the module docstring).

    Returns ``(loss, aux)`` with the mean reward, validity, dedup z and gate rate.
    """
    from jaxpapers.watermark import detect, hashing
    from jaxpapers.watermark import sampling as gen

    prompts = batch["prompts"]
    out = gen._generate_impl(batch["lm"], prompts, key, hashing.as_key(config.wm_key),
                             jnp.float32(config.temperature), policy_params, config=lm_config,
                             num_bytes=config.num_bytes, processor=tracer,
                             gamma=config.gamma, width=1)
    toks = jax.lax.stop_gradient(out.tokens)
    seq = jnp.concatenate([prompts[:, -1:], toks], axis=1)
    z = jax.vmap(lambda s: detect.kgw_z(s, key=config.wm_key, gamma=config.gamma,
                                        dedup=True))(seq)
    validity = _validity_callback(toks)
    reward = validity + config.lam * jnp.clip(z / 4.0, 0.0, 1.0)
    loss = grpo_surrogate(reward, out.aux["logp"], out.aux["process"], group=config.group,
                          process_weight=config.process_weight)
    return loss, {"reward": jnp.mean(reward), "validity": jnp.mean(validity),
                  "z_dedup": jnp.mean(z), "gate": jnp.mean(out.aux["gate"])}


def train_codetracer(lm_params: dict, prompts: Any, *, lm_config, key: jax.Array,
                     num_steps: int, tracer: CodeTracer = CodeTracer(),
                     config: GRPOConfig = GRPOConfig(), policy_params: Any = None,
                     progress: bool = True, checkpoint_dir: Any = None,
                     checkpoint_every: int | None = None):
    """Train CodeTracer's policy with GRPO beside the frozen LM (on :func:`core.train.fit`).

    Args:
      lm_params: the frozen byte LM.
      prompts: [M, P] int32 prompts (M >= ``config.prompts_per_step``).
      lm_config: the LM's shape.
      key: a ``jax.random.key``; consumed (initialisation, prompt batches, sampling).
      num_steps: optimisation steps.
      tracer: the processor (delta, k, tau, beta, width).
      config: :class:`GRPOConfig`.
      policy_params: starting parameters (default :func:`policy_init`).
      progress, checkpoint_dir, checkpoint_every: as :func:`jaxpapers.core.train.fit`.

    Returns:
      ``(policy_params, history)``; ``history`` has ``loss``, ``reward``, ``validity``,
      ``z_dedup``, ``gate`` per step.
    """
    import numpy as np
    import optax

    from jaxpapers.core import checks
    from jaxpapers.core import train as core_train
    from jaxpapers.lm import model as lm_model

    lm_model._check_config(lm_config)
    lm_model._check_params(lm_params, lm_config)
    checks.check_key("key", key)
    num_steps = checks.check_int("num_steps", num_steps, minimum=0)
    prompts = np.asarray(prompts)
    if prompts.ndim != 2 or not np.issubdtype(prompts.dtype, np.integer):
        raise ValueError(f"prompts must be [M, P] integer byte ids, got {prompts.dtype} "
                         f"{prompts.shape}")
    if prompts.shape[0] < config.prompts_per_step:
        raise ValueError(f"prompts has {prompts.shape[0]} rows, fewer than "
                         f"prompts_per_step={config.prompts_per_step}")
    if prompts.shape[1] + config.num_bytes > lm_config.max_len:
        raise ValueError("prompts + num_bytes exceed the LM's max_len")
    k_init, k_data, k_run = jax.random.split(key, 3)
    if policy_params is None:
        policy_params = policy_init(k_init, hidden=tracer.hidden, gate_bias=config.gate_init)
    optimizer = optax.adam(config.learning_rate)
    step_fn = _step_fn(tracer, config, lm_config, optimizer)
    state = core_train.init_train_state(policy_params, optimizer, k_run)
    data = (k_data, jnp.asarray(prompts, jnp.int32), lm_params)
    state, history = core_train.fit(step_fn, state, _Prompts(config.prompts_per_step,
                                                             config.group),
                                    num_steps=num_steps, chunk_size=max(1, min(num_steps, 10)),
                                    progress=progress, desc="codetracer grpo", data=data,
                                    checkpoint_dir=checkpoint_dir,
                                    checkpoint_every=checkpoint_every)
    return state.params, history


_STEP_CACHE: dict = {}


def _step_fn(tracer, config, lm_config, optimizer):
    """One step function per settings (a static argument of the core loop: reuse compiles)."""
    import functools

    from jaxpapers.core import train as core_train

    key = (tracer, config, lm_config)
    if key not in _STEP_CACHE:
        loss = functools.partial(grpo_loss, config=config, lm_config=lm_config, tracer=tracer)
        _STEP_CACHE[key] = core_train.make_train_step(loss, optimizer, has_aux=True)
    return _STEP_CACHE[key]
