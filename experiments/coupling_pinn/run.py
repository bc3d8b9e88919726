"""Coupling-PINN reproduction: relative L2 vs depth per architecture on the paper's
gradient-fitting task, input-derivative norms at initialisation vs depth, and a time-dependent
benchmark (Burgers / Allen-Cahn) with causal weighting.
"""

from __future__ import annotations

import functools
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers import pinn
from jaxpapers.core import plotting, registry
from jaxpapers.core.report import claim, markdown_table
from jaxpapers.core.timing import Stopwatch

says = functools.partial(registry.paper_says, "coupling_pinn")


def _optimizer(cfg, steps):
    return optax.adam(optax.cosine_decay_schedule(cfg.learning_rate, steps, alpha=0.01))


def _net(cfg, arch, depth, width):
    return pinn.make_network(arch, depth=depth, width=width, weight_fact=cfg.weight_fact,
                             fourier_scale=cfg.fourier_scale)


def _deriv_norms(cfg, key):
    pts = jax.random.uniform(key, (cfg.deriv_points, 2), minval=-1.0, maxval=1.0)
    out = {}
    for arch in cfg.archs:
        for depth in cfg.deriv_depths:
            net = _net(cfg, arch, depth, cfg.deriv_width)
            params = jax.jit(net.init)(jax.random.fold_in(key, depth), jnp.zeros(2))
            norms = jax.jit(lambda p, x: pinn.input_derivative_norms(net, p, x))(params, pts)
            layers, spectra = [], None
            if depth == max(cfg.deriv_depths):  # per-layer picture for the deepest net only
                layers = np.asarray(jax.jit(lambda p, x: pinn.hidden_differential_norms(
                    net, p, x))(params, pts[:16])).tolist()
                # singular values of every block Jacobian dh_l/dh_{l-1}, at spectra_points points
                sv = np.asarray(jax.jit(jax.vmap(
                    lambda x, p=params, net=net: pinn.block_jacobian_singular_values(net, p, x)))(
                    pts[:cfg.spectra_points]))  # [P, depth, W]
                spectra = {"sigma_max": sv[:, :, 0].mean(0).tolist(),
                           "sigma_min": sv[:, :, -1].mean(0).tolist(),
                           "log10_prod_sigma_max": float(np.log10(sv[:, :, 0]).sum(1).mean()),
                           "log10_prod_sigma_min": float(np.log10(
                               np.maximum(sv[:, :, -1], 1e-300)).sum(1).mean())}
            out[(arch, depth)] = ({k: float(v) for k, v in norms.items()}, layers, spectra)
    return out


def _sweep(cfg, key, sw: Stopwatch):
    prob = pinn.make_problem("gradient_fit", omega=cfg.omega, eval_n=cfg.eval_n)
    res = {}
    for arch in cfg.archs:
        for depth in cfg.depths:
            net = _net(cfg, arch, depth, cfg.width)
            with sw(f"train/{arch}/depth{depth}"):
                state, hist = pinn.train(prob, net, key, num_steps=cfg.steps,
                                         batch_size=cfg.batch_size,
                                         optimizer=_optimizer(cfg, cfg.steps),
                                         chunk_size=min(cfg.steps, 250), desc=f"{arch}-{depth}")
                err = float(pinn.relative_l2(net, state.params["net"], prob))
            res[(arch, depth)] = {"rel_l2": err,
                                  "loss": hist["loss"][:: max(1, cfg.steps // 100)].tolist()}
    return res


def _time_benchmark(cfg, key):
    prob = pinn.make_problem(cfg.time_problem)
    out = {}
    for arch in cfg.time_archs:
        net = _net(cfg, arch, cfg.time_depth, cfg.width)
        state, hist = pinn.train(prob, net, key, num_steps=cfg.time_steps,
                                 batch_size=cfg.time_batch,
                                 optimizer=_optimizer(cfg, cfg.time_steps),
                                 chunk_size=min(cfg.time_steps, 250), causal_tol=cfg.causal_tol,
                                 num_chunks=16 if cfg.time_batch % 16 == 0 else 1,
                                 desc=f"{cfg.time_problem}-{arch}")
        out[arch] = float(pinn.relative_l2(net, state.params["net"], prob))
    return out


def run(config, key: jax.Array) -> dict[str, Any]:
    """Run the experiment (deterministic given ``key``); float32 like the release."""
    cfg = config
    k_deriv, k_sweep, k_time = jax.random.split(key, 3)
    metrics: dict[str, float] = {}
    deriv = _deriv_norms(cfg, k_deriv)
    for (arch, depth), (norms, _, spec) in deriv.items():
        metrics[f"deriv_norm_init/{arch}/depth{depth}"] = norms["grad"]
        metrics[f"lap_norm_init/{arch}/depth{depth}"] = norms["laplacian"]
        if spec is not None:
            metrics[f"jac_sigma_max_mean/{arch}/depth{depth}"] = float(np.mean(spec["sigma_max"]))
            metrics[f"jac_sigma_min_mean/{arch}/depth{depth}"] = float(np.mean(spec["sigma_min"]))
            metrics[f"jac_log10_prod_sigma_max/{arch}/depth{depth}"] = spec["log10_prod_sigma_max"]
    sw = Stopwatch()
    sweep = _sweep(cfg, k_sweep, sw)
    for (arch, depth), r in sweep.items():
        metrics[f"rel_l2/{arch}/depth{depth}"] = r["rel_l2"]
    timed = _time_benchmark(cfg, k_time)
    for arch, err in timed.items():
        metrics[f"rel_l2_{cfg.time_problem}/{arch}/depth{cfg.time_depth}"] = err

    lo, hi = min(cfg.depths), max(cfg.depths)
    err = lambda a, d: sweep[(a, d)]["rel_l2"] if (a, d) in sweep else float("nan")
    claims = []
    c_hi, m_hi = err("coupled", hi), err("mlp", hi)
    others = {f"{a}/depth{hi}": err(a, hi) for a in cfg.archs if a != "coupled"}
    others.update({f"{a}/depth{lo}": err(a, lo) for a in cfg.archs if a != "coupled" and lo != hi})
    best_other = min(others.values()) if others else float("nan")
    metrics["coupled_best_other_ratio"] = c_hi / best_other
    finite = bool(np.isfinite(c_hi) and np.isfinite(best_other))
    claims.append(claim(
        f"rel_l2/coupled/depth{hi}", c_hi, paper=says("vs_shallow_and_deep_pinns"),
        criterion=(f"the coupled net at depth {hi} has a lower relative L2 than every other "
                   f"architecture at depths {lo} and {hi} (gradient-fitting task, w = "
                   f"{cfg.omega:g}, width {cfg.width}, {cfg.steps} steps)"),
        passed=(c_hi < best_other) if finite else None, baselines=others,
        note=f"gradient-fitting task w={cfg.omega}, width {cfg.width}, {cfg.steps} steps; "
             "the paper's numbers are for w=30, width 128, 50k steps (not comparable)"))
    metrics["coupled_deep_over_shallow"] = c_hi / err("coupled", lo)
    metrics["mlp_deep_over_shallow"] = m_hi / err("mlp", lo)
    holds = metrics["coupled_deep_over_shallow"] <= 1.5 and m_hi >= 0.3
    claims.append(claim(
        "coupled_deep_over_shallow", metrics["coupled_deep_over_shallow"],
        paper=says("deep_training_stability"),
        criterion=(f"coupled error at depth {hi} <= 1.5x its error at depth {lo}, while the "
                   f"plain MLP at depth {hi} fails (relative L2 >= 0.3)"),
        passed=None if lo == hi or not np.isfinite(c_hi) else holds,
        baselines={"mlp_deep_over_shallow": metrics["mlp_deep_over_shallow"],
                   f"rel_l2/mlp/depth{hi}": m_hi}))
    if 24 in cfg.depths and cfg.width == 32:
        c24, m24 = err("coupled", 24), err("mlp", 24)
        claims.append(claim(
            "rel_l2/coupled/depth24", c24, paper=says("deep_training_stability"),
            criterion="at depth 24, width 32: coupled relative L2 <= 3e-2 and tanh MLP >= 0.3 "
                      "(thresholds fixed from an exploration run: 1.0e-2 vs 0.65, 1000 steps)",
            passed=c24 <= 3e-2 and m24 >= 0.3, baselines={"rel_l2/mlp/depth24": m24}))
    l2_table = markdown_table(["arch"] + [f"depth {d}" for d in cfg.depths],
                              [[a] + [err(a, d) for d in cfg.depths] for a in cfg.archs],
                              title="Relative L2 (gradient-fitting task)")
    deriv_table = markdown_table(
        ["arch"] + [f"depth {d}" for d in cfg.deriv_depths],
        [[a] + [deriv[(a, d)][0]["grad"] for d in cfg.deriv_depths] for a in cfg.archs],
        title="RMS ||grad_x u|| at initialisation")
    data = {"depths": list(cfg.depths), "deriv_depths": list(cfg.deriv_depths),
            "archs": list(cfg.archs),
            "rel_l2": {a: [err(a, d) for d in cfg.depths] for a in cfg.archs},
            "loss_curves": {f"{a}/depth{d}": sweep[(a, d)]["loss"] for a, d in sweep},
            "deriv_norm_init": {a: [deriv[(a, d)][0]["grad"] for d in cfg.deriv_depths]
                                for a in cfg.archs},
            "layer_differentials": {f"{a}/depth{d}": deriv[(a, d)][1] for a, d in deriv
                                    if deriv[(a, d)][1]},
            "jacobian_spectra": {f"{a}/depth{d}": deriv[(a, d)][2] for a, d in deriv
                                 if deriv[(a, d)][2] is not None},
            "time_benchmark": timed}
    dmax = max(cfg.deriv_depths)
    srows = []
    for a in cfg.archs:
        sp = deriv[(a, dmax)][2]
        srows.append((a, np.mean(sp["sigma_max"]), np.max(sp["sigma_max"]),
                      np.mean(sp["sigma_min"]), np.min(sp["sigma_min"]),
                      sp["log10_prod_sigma_max"], sp["log10_prod_sigma_min"]))
    spectra_table = markdown_table(
        ("arch", "mean sigma_max", "max sigma_max", "mean sigma_min", "min sigma_min",
         "log10 prod sigma_max", "log10 prod sigma_min"), srows,
        title=(f"Block-Jacobian spectra dh_l/dh_(l-1) at initialisation (depth {dmax}, width "
               f"{cfg.deriv_width}; singular values averaged over {cfg.spectra_points} points; "
               "per block, then over blocks)"))
    return {"metrics": metrics, "claims": claims, "data": data, "timings": sw.seconds,
            "tables": [l2_table, deriv_table, spectra_table]}


def plot(result: dict[str, Any], out_dir) -> list[pathlib.Path]:
    """Error vs depth, derivative norms at init vs depth, per-layer differentials."""
    plt = plotting.pyplot()
    d = result["data"]
    fig, axes = plt.subplots(1, 4, figsize=(20, 4))
    for a in d["archs"]:
        axes[0].semilogy(d["depths"], d["rel_l2"][a], "o-", label=a)
        axes[1].semilogy(d["deriv_depths"], d["deriv_norm_init"][a], "o-", label=a)
        key = f"{a}/depth{max(d['deriv_depths'])}"
        axes[2].semilogy(d["layer_differentials"][key], label=a)
    axes[0].set(xlabel="depth", ylabel="relative L2", title="error vs depth")
    axes[1].set(xlabel="depth", ylabel="RMS |grad_x u| at init", title="differentials at init")
    axes[2].set(xlabel="layer", ylabel="RMS ||dh_l/dx||_F",
                title=f"per-layer differentials (depth {max(d['deriv_depths'])})")
    for i, a in enumerate(d["archs"]):
        sp = d.get("jacobian_spectra", {}).get(f"{a}/depth{max(d['deriv_depths'])}")
        if sp:
            line, = axes[3].semilogy(sp["sigma_max"], label=f"{a} max")
            axes[3].semilogy(sp["sigma_min"], "--", color=line.get_color(), label=f"{a} min")
    axes[3].set(xlabel="block", ylabel="singular value of dh_l/dh_(l-1)",
                title="block-Jacobian spectra at init")
    for ax in axes:
        ax.legend()
    fig.tight_layout()
    return [plotting.save(fig, out_dir, "coupling_pinn", dpi=100, tight=False)]
