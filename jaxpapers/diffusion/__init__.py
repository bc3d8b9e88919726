"""Few-step diffusion: schedules, scanned samplers, Q-Sched calibration, small-model training.

``sample(denoise_fn, params, key, x_T, *, schedule, sampler, steps, coeffs=None)`` runs DDIM,
Euler, Euler-ancestral, LCM / consistency multistep, TCD (PCM) or flow-match Euler as one
``lax.scan``; Q-Sched's per-step coefficients ``{m: [N], s: [N]}`` scale the model output and the
sample inside each step (all ones: the plain sampler). ``train_dpo`` fine-tunes the EDM denoiser
with Diffusion-DPO against a frozen reference (:mod:`jaxpapers.diffusion.preference`).
``sample_trajectory`` (same arguments as ``sample``) returns every boundary of the path.

TDM-R1 (issue 24): RL for a few-step generator from a non-differentiable reward through a
surrogate denoiser trained with group DPO. :mod:`jaxpapers.diffusion.tdm_r1` holds the pure
pieces (``group_advantages``, ``group_preference_loss``, ``forward_kernel``,
``trust_region_mask`` and the fake-score / surrogate / generator losses);
:mod:`jaxpapers.diffusion.tdm_r1_train` the trainer ``make_tdm_r1 -> (init, update)`` with its
``TDMR1State`` and traced ``TDMR1Params`` (variants: ``TDM_R1_VARIANTS``), and
``host_reward`` to wrap a host-side reward with ``jax.pure_callback``.
"""

from jaxpapers.diffusion._types import DenoiseFn, QSchedCoeffs, ScoreFn
from jaxpapers.diffusion.preference import diffusion_dpo_loss, diffusion_dpo_terms, train_dpo
from jaxpapers.diffusion.qsched import (CalibrationProblem, GradientCalibration,
                                        GridCalibration, calibrate_gradient, calibrate_grid,
                                        jaq_objective, jaq_score, ones_coeffs, ramp_coeffs)
from jaxpapers.diffusion.samplers import (DDPM_CLIP_SAMPLE, SAMPLERS, STOCHASTIC, check_coeffs,
                                          sample, sample_trajectory)
from jaxpapers.diffusion.schedules import (PREDICTIONS, EDMSchedule, FlowSchedule, Grid,
                                           SigmaSchedule, VPSchedule,
                                           consistency_preconditioning, ddpm_alphas_cumprod,
                                           discretize, edm_preconditioning, init_noise_sigma,
                                           karras_sigmas, validate_schedule,
                                           vp_sde_alphas_cumprod)
from jaxpapers.diffusion.tdm_r1 import (edm_weight, fake_score_loss, forward_kernel,
                                        generator_loss, group_advantages,
                                        group_preference_loss, group_preference_terms,
                                        shifted_sigma, surrogate_loss, trust_region_mask)
from jaxpapers.diffusion.tdm_r1_train import (TDM_R1_DEFAULTS, TDM_R1_VARIANTS, TDMR1,
                                              TDMR1Params, TDMR1State, group_batch,
                                              host_reward, make_tdm_r1, stack_params,
                                              tdm_r1_params)
from jaxpapers.diffusion.training import (consistency_denoiser, distill_consistency,
                                          edm_denoiser, edm_loss, init_mlp, mlp_apply, train_edm)

__all__ = [
    # types
    "DenoiseFn", "ScoreFn", "QSchedCoeffs",
    # schedules
    "PREDICTIONS", "VPSchedule", "EDMSchedule", "SigmaSchedule", "FlowSchedule", "Grid",
    "ddpm_alphas_cumprod", "vp_sde_alphas_cumprod", "karras_sigmas", "edm_preconditioning",
    "consistency_preconditioning",
    "discretize", "init_noise_sigma", "validate_schedule",
    # samplers
    "sample", "sample_trajectory", "SAMPLERS", "STOCHASTIC", "DDPM_CLIP_SAMPLE", "check_coeffs",
    # Q-Sched
    "ones_coeffs", "ramp_coeffs", "jaq_score", "CalibrationProblem", "jaq_objective",
    "GridCalibration", "calibrate_grid", "GradientCalibration", "calibrate_gradient",
    # training
    "init_mlp", "mlp_apply", "edm_denoiser", "consistency_denoiser", "edm_loss", "train_edm",
    "distill_consistency",
    # preference optimisation (Diffusion-DPO)
    "diffusion_dpo_loss", "diffusion_dpo_terms", "train_dpo",
    # TDM-R1
    "group_advantages", "group_preference_loss", "group_preference_terms", "forward_kernel",
    "trust_region_mask", "edm_weight", "shifted_sigma", "fake_score_loss", "surrogate_loss",
    "generator_loss", "TDMR1State", "TDMR1Params", "TDMR1", "TDM_R1_DEFAULTS",
    "TDM_R1_VARIANTS", "tdm_r1_params", "stack_params", "group_batch", "host_reward",
    "make_tdm_r1",
]
