"""Online reinforcement learning with diffusion policies (CGPO, issue 25), pure JAX.

Agents are optax-style pure functions (:func:`make_agent` -> ``init`` / ``act`` / ``update``)
over one state type; environments are pure JAX (:mod:`jaxpapers.rl.envs`) so that whole training
runs are one ``lax.scan`` vmapped over seeds (:func:`make_trainer`); MuJoCo runs on the host
through gymnasium (:class:`jaxpapers.rl.gym.GymVecEnv`, imported lazily).
"""

from jaxpapers.rl import envs
from jaxpapers.rl.cgpo import (DIFFUSION_METHODS, METHODS, Agent, AgentConfig, AgentState,
                               CGPOParams, cgpo_weights, fit_uniform, make_agent)
from jaxpapers.rl.critics import (q_value, quantile_huber_loss, quantile_levels,
                                  truncated_quantile_target)
from jaxpapers.rl.diffusion_policy import (clip_norm, denoising_errors, guided_gain,
                                           policy_schedule, sample_actions,
                                           weighted_denoising_loss)
from jaxpapers.rl.replay import (ReplayBuffer, Transition, replay_add, replay_init,
                                 replay_sample)
from jaxpapers.rl.train import Trainer, TrainerState, evaluate, make_trainer

__all__ = [
    "envs",
    # agents
    "AgentConfig", "CGPOParams", "AgentState", "Agent", "make_agent", "METHODS",
    "DIFFUSION_METHODS", "cgpo_weights", "fit_uniform",
    # diffusion policy
    "sample_actions", "guided_gain", "policy_schedule", "clip_norm", "denoising_errors",
    "weighted_denoising_loss",
    # critics
    "truncated_quantile_target", "quantile_huber_loss", "q_value", "quantile_levels",
    # training on JAX environments
    "Trainer", "TrainerState", "make_trainer", "evaluate",
    # replay
    "Transition", "ReplayBuffer", "replay_init", "replay_add", "replay_sample",
]
