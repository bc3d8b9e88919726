"""Few-step diffusion: schedules, scanned samplers, Q-Sched calibration, small-model training.

``sample(denoise_fn, params, key, x_T, *, schedule, sampler, steps, coeffs=None)`` runs DDIM,
Euler, Euler-ancestral, LCM / consistency multistep, TCD (PCM) or flow-match Euler as one
``lax.scan``; Q-Sched's per-step coefficients ``{m: [N], s: [N]}`` scale the model output and the
sample inside each step (all ones: the plain sampler). ``train_dpo`` fine-tunes the EDM denoiser
with Diffusion-DPO against a frozen reference (:mod:`jaxpapers.diffusion.preference`).
"""

from jaxpapers.diffusion._types import DenoiseFn, QSchedCoeffs, ScoreFn
from jaxpapers.diffusion.preference import diffusion_dpo_loss, diffusion_dpo_terms, train_dpo
from jaxpapers.diffusion.qsched import (CalibrationProblem, GradientCalibration,
                                        GridCalibration, calibrate_gradient, calibrate_grid,
                                        jaq_objective, jaq_score, ones_coeffs, ramp_coeffs)
from jaxpapers.diffusion.samplers import SAMPLERS, STOCHASTIC, check_coeffs, sample
from jaxpapers.diffusion.schedules import (PREDICTIONS, EDMSchedule, FlowSchedule, Grid,
                                           SigmaSchedule, VPSchedule,
                                           consistency_preconditioning, ddpm_alphas_cumprod,
                                           discretize, edm_preconditioning, init_noise_sigma,
                                           karras_sigmas, validate_schedule)
from jaxpapers.diffusion.training import (consistency_denoiser, distill_consistency,
                                          edm_denoiser, edm_loss, init_mlp, mlp_apply, train_edm)

__all__ = [
    # types
    "DenoiseFn", "ScoreFn", "QSchedCoeffs",
    # schedules
    "PREDICTIONS", "VPSchedule", "EDMSchedule", "SigmaSchedule", "FlowSchedule", "Grid",
    "ddpm_alphas_cumprod", "karras_sigmas", "edm_preconditioning", "consistency_preconditioning",
    "discretize", "init_noise_sigma", "validate_schedule",
    # samplers
    "sample", "SAMPLERS", "STOCHASTIC", "check_coeffs",
    # Q-Sched
    "ones_coeffs", "ramp_coeffs", "jaq_score", "CalibrationProblem", "jaq_objective",
    "GridCalibration", "calibrate_grid", "GradientCalibration", "calibrate_gradient",
    # training
    "init_mlp", "mlp_apply", "edm_denoiser", "consistency_denoiser", "edm_loss", "train_edm",
    "distill_consistency",
    # preference optimisation (Diffusion-DPO)
    "diffusion_dpo_loss", "diffusion_dpo_terms", "train_dpo",
]
