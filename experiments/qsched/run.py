"""Q-Sched on sklearn digits: few-step sampling of a quantized class-conditional diffusion model.

Pipeline (everything offline; ``scorers.py`` holds data and scorers, ``model.py`` the denoiser
and quantized weights, ``claims.py`` the derived metrics and claims):

1. Data: sklearn's 8x8 digits scaled to [-1, 1]; the class label is the "prompt". A split seeded
   from the run's key: the training rows train the diffusion model, the alignment classifier and
   the quality Gaussian; the held-out rows train the independent FID classifier only.
2. Model: a class-conditional EDM denoiser (MLP, Karras preconditioning), optionally distilled
   into a consistency student. Sampled with few steps (4, 8) on a Karras grid.
3. Quantization: weights-only RTN, symmetric, group-wise (``jaxpapers.quant``), W8 / W4 / W3;
   one float checkpoint quantized to every bit width.
4. Scorers: alignment (tempered classifier log-probability), reference-free quality (a
   Gaussian on image statistics that penalises blur), FID in an independent classifier's
   features (see :mod:`experiments.qsched.scorers`).
5. Q-Sched: per (steps, precision), the ramp ``(m0, s0)`` is chosen by a grid over
   ``box^2`` maximising JAQ = alignment + k quality on 2 prompts per class with fixed noise
   (one vmapped compiled call); FP + Q-Sched is the control.
6. Report: FID mean +- sd over evaluation seeds (fresh noise; the same noise for plain and
   Q-Sched), JAQ, model bytes, calibration time; Spearman(JAQ, FID) over the calibration grid
   (4 steps, W4); ablations (wider box, projected-gradient ramp, unconstrained per-step
   gradient) with a "gamed" flag: JAQ up while FID gets worse.

Every random draw comes from the run's key (data split, FID classifier seed, model init,
calibration noise, evaluation noise, the noisy-image check and the sample grids).
"""

from __future__ import annotations

import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments.qsched import claims as claims_lib
from experiments.common.digits import trained_denoisers
from experiments.qsched.config import Config
from experiments.qsched.model import (DIM, NUM_CLASSES, make_model, packed_model_bytes,
                                      quantize_weights)
from experiments.qsched.scorers import (blur, feature_stats, fit_alignment, fit_fid_features,
                                        fit_quality, frechet, load_digits)
from jaxpapers import diffusion as dfn
from jaxpapers import quant
from jaxpapers.core import plotting, rng
from jaxpapers.core.report import markdown_table
from jaxpapers.core.timing import Stopwatch


# ----------------------------------------------------------------------------- experiment
class _Ctx:
    """Everything a cell needs (built once per run)."""

    def __init__(self, cfg: Config, key, sw: Stopwatch):
        self.cfg = cfg
        # the first five keys as before the data keys were added (split is prefix-stable)
        (k_model, k_dist, self.k_calib, self.k_eval, self.k_grid, k_data, k_fid, self.k_check,
         self.k_show) = jax.random.split(key, 9)
        with sw("scorers"):
            x_tr, y_tr, x_ho, y_ho = load_digits(cfg.test_fraction, rng.numpy_seed(k_data))
            self.x_train, self.y_train = x_tr, y_tr
            self.align, self.align_acc = fit_alignment(x_tr, y_tr, cfg.temperature)
            self.quality = fit_quality(x_tr)
            self.features, fid_clf = fit_fid_features(x_ho, y_ho, rng.numpy_seed(k_fid),
                                                      max_iter=cfg.fid_iters)
            self.fid_acc_on_train = float(fid_clf.score(x_tr, y_tr))
            self.ref_stats = feature_stats(self.features(jnp.asarray(x_tr)))
            half = len(x_tr) // 2
            self.fid_floor = frechet(self.features(jnp.asarray(x_tr[:half])),
                                     feature_stats(self.features(jnp.asarray(x_tr[half:]))))
        with sw("train"):
            self._train(cfg, k_model, k_dist, x_tr, y_tr)
        self.den, self.schedule, self.sampler = make_model(cfg)
        self._gen = {}

    def _train(self, cfg, k_model, k_dist, x_tr, y_tr):
        student = cfg.model == "student"
        out = trained_denoisers(k_model, x_tr, y_tr, hidden=cfg.hidden, depth=cfg.depth,
                                train_steps=cfg.train_steps, batch_size=cfg.batch_size,
                                learning_rate=cfg.learning_rate, sigma_data=cfg.sigma_data,
                                key_distill=k_dist if student else None,
                                distill_steps=cfg.distill_steps if student else 0,
                                sigma_min=cfg.sigma_min, sigma_max=cfg.sigma_max, rho=cfg.rho)
        self.models_cached = out["cached"]
        self.train_loss = np.asarray(out["train_loss"])
        if student:
            self.distill_loss = np.asarray(out["distill_loss"])
        self.params = out["student"] if student else out["teacher"]

    def problem(self, steps: int) -> dfn.CalibrationProblem:
        cfg = self.cfg
        prompts = jnp.repeat(jnp.arange(NUM_CLASSES), cfg.calib_per_class)
        kn, ks = jax.random.split(self.k_calib)
        noise = jax.random.normal(kn, (prompts.shape[0], DIM))
        return dfn.CalibrationProblem(
            prompts=prompts, noise=noise, key=ks, k=jnp.float32(cfg.k), schedule=self.schedule,
            denoise_fn=self.den, align_fn=self._align_clipped, quality_fn=self._quality_clipped,
            sampler=self.sampler, steps=steps)

    # the scorers see images as the FID does: clipped to the valid range [-1, 1]
    def _align_clipped(self, images, labels):
        return self.align(jnp.clip(images, -1.0, 1.0), labels)

    def _quality_clipped(self, images):
        return self.quality(jnp.clip(images, -1.0, 1.0))

    def generator(self, steps: int):
        """jitted ``gen(weights, key, labels [B], coeffs) -> images [B, 64]`` clipped to [-1, 1]."""
        if steps not in self._gen:
            den, sch, smp = self.den, self.schedule, self.sampler

            def gen(w, key, labels, coeffs):
                kx, ks = jax.random.split(key)
                x_T = jax.random.normal(kx, (labels.shape[0], DIM))
                x = dfn.sample(lambda p, x, t: den(p[0], x, t, p[1]), (w, labels), ks, x_T,
                               schedule=sch, sampler=smp, steps=steps, coeffs=coeffs)
                return jnp.clip(x, -1.0, 1.0)

            self._gen[steps] = jax.jit(gen)
        return self._gen[steps]

    def fid(self, weights, steps, coeffs, seed) -> float:
        cfg = self.cfg
        labels = jnp.arange(cfg.n_eval) % NUM_CLASSES
        imgs = self.generator(steps)(weights, jax.random.fold_in(self.k_eval, seed), labels,
                                     coeffs)
        return frechet(self.features(imgs), self.ref_stats)

    def fids(self, weights, steps, coeffs):
        return [self.fid(weights, steps, coeffs, s) for s in range(self.cfg.seeds)]

    def grid_fids(self, weights, steps, m0, s0) -> np.ndarray:
        """FID of every ramp on a grid ([G]) with ``spearman_samples`` samples each."""
        cfg = self.cfg
        labels = jnp.arange(cfg.spearman_samples) % NUM_CLASSES
        gen = self.generator(steps)
        feats_fn = self.features

        @jax.jit
        def feats(w, ms):
            return jax.lax.map(lambda v: feats_fn(gen(w, self.k_grid, labels,
                                                      dfn.ramp_coeffs(v[0], v[1], steps))),
                               ms, batch_size=16)

        f = np.asarray(feats(weights, jnp.stack([m0, s0], 1)))
        return np.array([frechet(fi, self.ref_stats) for fi in f])


def _ms(v):
    v = np.asarray(v, np.float64)
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def _spearman(a, b) -> float:
    from scipy.stats import spearmanr

    ok = np.isfinite(a) & np.isfinite(b)
    return float(spearmanr(a[ok], b[ok]).statistic)


def run(config: Config, key) -> dict[str, Any]:
    """Train, quantize, calibrate, evaluate; return metrics, claims, data and tables."""
    cfg = config
    sw = Stopwatch()
    ctx = _Ctx(cfg, key, sw)
    metrics: dict[str, float] = {}
    data: dict[str, Any] = {"cells": {}, "samples": {}}
    metrics["scorers/alignment_train_accuracy"] = ctx.align_acc
    metrics["scorers/fid_classifier_accuracy_on_train_rows"] = ctx.fid_acc_on_train
    metrics["fid/real_floor"] = ctx.fid_floor

    # the quality score must not reward blur (nor noise)
    xr = jnp.asarray(ctx.x_train)
    noisy = jnp.clip(xr + 0.3 * jax.random.normal(ctx.k_check, xr.shape), -1, 1)
    metrics["quality/real"] = float(jnp.mean(ctx.quality(xr)))
    metrics["alignment/real"] = float(jnp.mean(ctx.align(xr, jnp.asarray(ctx.y_train))))
    metrics["quality/blurred"] = float(jnp.mean(ctx.quality(blur(xr))))
    metrics["quality/blurred_twice"] = float(jnp.mean(ctx.quality(blur(blur(xr)))))
    metrics["quality/noisy"] = float(jnp.mean(ctx.quality(noisy)))

    weights = {p: quantize_weights(ctx.params, p, cfg.group_size) for p in cfg.precisions}
    for p, w in weights.items():
        metrics[f"model_bytes/{p}"] = packed_model_bytes(w)
        metrics[f"model_bytes_stored/{p}"] = quant.tree_nbytes(w)

    box_vals = jnp.linspace(cfg.box[0], cfg.box[1], cfg.grid_size)
    main_cell = (min(cfg.steps), "w4" if "w4" in cfg.precisions else cfg.precisions[-1])
    grids = {}
    for steps in cfg.steps:
        prob = ctx.problem(steps)
        jaq_fn = jax.jit(dfn.jaq_objective)
        for prec in cfg.precisions:
            w = weights[prec]
            cell = f"{steps}step/{prec}"
            with sw(f"calibration/{cell}"):
                cal = dfn.calibrate_grid(w, prob, m_values=box_vals, s_values=box_vals,
                                         allow_float=(prec == "fp"))
                jax.block_until_ready(cal.jaq)
            grids[(steps, prec)] = cal
            best = cal.best
            plain = dfn.ones_coeffs(steps)
            with sw(f"fid/{cell}"):
                f_plain = ctx.fids(w, steps, plain)
                f_q = ctx.fids(w, steps, best)
            for name, f, c in (("plain", f_plain, plain), ("qsched", f_q, best)):
                mean, sd = _ms(f)
                metrics[f"fid/{cell}/{name}"] = mean
                metrics[f"fid_sd/{cell}/{name}"] = sd
                j, a, q = jaq_fn(w, c, prob)
                metrics[f"jaq/{cell}/{name}"] = float(j)
                metrics[f"alignment/{cell}/{name}"] = float(a)
                metrics[f"quality/{cell}/{name}"] = float(q)
            i = int(cal.best_index)
            metrics[f"coeff_m0/{cell}"] = float(cal.m0[i])
            metrics[f"coeff_s0/{cell}"] = float(cal.s0[i])
            data["cells"][cell] = {"fid_plain": f_plain, "fid_qsched": f_q,
                                   "m0": float(cal.m0[i]), "s0": float(cal.s0[i])}
            show = jnp.repeat(jnp.arange(NUM_CLASSES), 6)
            for name, c in (("plain", plain), ("qsched", best)):
                data["samples"][f"{cell}/{name}"] = np.asarray(ctx.generator(steps)(
                    w, ctx.k_show, show, c)).tolist()

    # Spearman(JAQ, FID) over the calibration grid of the main cell
    steps0, prec0 = main_cell
    cal0 = grids[main_cell]
    with sw("spearman_grid"):
        gf = ctx.grid_fids(weights[prec0], steps0, cal0.m0, cal0.s0)
    jq = np.asarray(cal0.jaq, np.float64)
    metrics["spearman_jaq_fid"] = _spearman(jq, gf)
    metrics["spearman_alignment_fid"] = _spearman(np.asarray(cal0.alignment, np.float64), gf)
    metrics["spearman_quality_fid"] = _spearman(np.asarray(cal0.quality, np.float64), gf)
    data["grid"] = {"m0": np.asarray(cal0.m0).tolist(), "s0": np.asarray(cal0.s0).tolist(),
                    "jaq": jq.tolist(), "fid": gf.tolist(), "cell": f"{steps0}step/{prec0}"}
    metrics["fid_grid_best_possible"] = float(np.min(gf))
    metrics["fid_grid_at_jaq_argmax"] = float(gf[int(cal0.best_index)])
    # the ceiling of the ramp family in the box: the grid point with the lowest grid FID (an
    # oracle that looks at FID, so not a calibration method), re-evaluated like every row
    io = int(np.argmin(gf))
    oracle = dfn.ramp_coeffs(cal0.m0[io], cal0.s0[io], steps0)
    mean, sd = _ms(ctx.fids(weights[prec0], steps0, oracle))
    metrics[f"fid_oracle/{steps0}step/{prec0}"] = mean
    metrics[f"fid_oracle_sd/{steps0}step/{prec0}"] = sd
    metrics[f"coeff_oracle_m0/{steps0}step/{prec0}"] = float(cal0.m0[io])
    metrics[f"coeff_oracle_s0/{steps0}step/{prec0}"] = float(cal0.s0[io])
    metrics[f"alignment_oracle/{steps0}step/{prec0}"] = float(cal0.alignment[io])
    metrics[f"quality_oracle/{steps0}step/{prec0}"] = float(cal0.quality[io])

    tables = [claims_lib.fid_table(cfg, metrics)]
    if cfg.ablations:  # on the main cell
        with sw("ablations"):
            abl, table = _ablations(cfg, ctx, weights[prec0], steps0, prec0, metrics, sw)
        metrics.update(abl)
        tables.append(table)
    metrics.update(claims_lib.derived_metrics(cfg, metrics))
    return {"metrics": metrics, "claims": claims_lib.claims(cfg, metrics), "data": data,
            "tables": tables, "timings": sw.seconds}


def _ablations(cfg, ctx, w, steps0, prec0, metrics, sw) -> tuple[dict, str]:
    """Wider box grid, projected-gradient ramp and unconstrained per-step gradient on the main
    cell; a calibration is "gamed" when its JAQ beats the box grid's but its FID is worse."""
    out: dict[str, float] = {}
    prob = ctx.problem(steps0)
    cell = f"{steps0}step/{prec0}"
    base_j = metrics[f"jaq/{cell}/qsched"]
    base_f = metrics[f"fid/{cell}/qsched"]
    jaq_fn = jax.jit(dfn.jaq_objective)
    wide = jnp.linspace(cfg.wide_box[0], cfg.wide_box[1], cfg.grid_size)
    calw = dfn.calibrate_grid(w, prob, m_values=wide, s_values=wide)
    gfw = ctx.grid_fids(w, steps0, calw.m0, calw.s0)
    out["spearman_jaq_fid/wide_box"] = _spearman(np.asarray(calw.jaq, np.float64), gfw)
    runs = {"wide_box_grid": calw.best}
    with sw("calibration/gradient_ramp_box"):
        runs["gradient_ramp_box"] = dfn.calibrate_gradient(
            w, prob, optimizer=optax.adam(cfg.grad_lr), num_iters=cfg.grad_iters,
            per_step=False, box=cfg.box).coeffs
    runs["gradient_per_step_unconstrained"] = dfn.calibrate_gradient(
        w, prob, optimizer=optax.adam(cfg.grad_lr), num_iters=cfg.grad_iters,
        per_step=True, box=None).coeffs
    rows = []
    for name, c in runs.items():
        j, _, _ = jaq_fn(w, c, prob)
        mean, sd = _ms(ctx.fids(w, steps0, c))
        gamed = bool(float(j) > base_j and mean > base_f)
        out[f"ablation/{name}/jaq"] = float(j)
        out[f"ablation/{name}/fid"] = mean
        out[f"ablation/{name}/fid_sd"] = sd
        out[f"ablation/{name}/gamed"] = int(gamed)
        rows.append((name, f"{float(j):.3f}", f"{mean:.2f} +- {sd:.2f}",
                     "[" + ", ".join(f"{v:.2f}" for v in np.asarray(c.m)) + "]",
                     "[" + ", ".join(f"{v:.2f}" for v in np.asarray(c.s)) + "]",
                     "yes" if gamed else "no"))
    table = markdown_table(("calibration", "JAQ", "FID (mean +- sd)", "m", "s", "gamed"), rows,
                           title=(f"**Ablations** (cell {cell}; baseline: box grid, JAQ "
                                  f"{base_j:.3f}, FID {base_f:.2f})"))
    return out, table


# ----------------------------------------------------------------------------- plots
def plot(result: dict, out_dir) -> list[pathlib.Path]:
    """One PNG sample grid per (steps, precision, sampler) row, the FID bars, JAQ vs FID."""
    plt = plotting.pyplot()
    paths = []
    for row, imgs in result["data"]["samples"].items():
        a = np.asarray(imgs, np.float64).reshape(NUM_CLASSES, -1, 8, 8)
        a = np.pad(a, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-1.0)  # 1-px gaps
        tile = a.transpose(1, 2, 0, 3).reshape(a.shape[1] * 10, NUM_CLASSES * 10)
        fig, ax = plt.subplots(figsize=(4, 2.6))
        ax.imshow(tile, cmap="gray_r", vmin=-1, vmax=1)
        ax.set_axis_off()
        ax.set_title(row.replace("/", " ") + " (columns: classes 0-9)", fontsize=8)
        paths.append(plotting.save(fig, out_dir, f"samples_{row.replace('/', '_')}", dpi=100))
    m = result["metrics"]
    cells = sorted({k.split("/")[1] + "/" + k.split("/")[2] for k in m
                    if k.startswith("fid/") and k.count("/") == 3})
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    xs = np.arange(len(cells))
    for j, name in enumerate(("plain", "qsched")):
        axes[0].bar(xs + 0.4 * j, [m[f"fid/{c}/{name}"] for c in cells], 0.4,
                    yerr=[m[f"fid_sd/{c}/{name}"] for c in cells], label=name)
    axes[0].set_xticks(xs + 0.2, cells, rotation=45, fontsize=7)
    axes[0].set_ylabel("FID")
    axes[0].legend()
    g = result["data"]["grid"]
    axes[1].scatter(g["jaq"], g["fid"], s=8)
    axes[1].set_xlabel("JAQ (calibration set)")
    axes[1].set_ylabel(f"FID ({g['cell']})")
    axes[1].set_title(f"Spearman {m['spearman_jaq_fid']:.2f}", fontsize=9)
    fig.tight_layout()
    paths.append(plotting.save(fig, out_dir, "fid_and_jaq", dpi=100, tight=False))
    return paths
