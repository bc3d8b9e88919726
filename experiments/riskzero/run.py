"""RiskZero on GridRisk: risk-neutral vs CVaR search with the true model, and learning curves.

``run(config, key) -> result`` (see jaxpapers.core.report); ``plot(result, out_dir)``.
"""

from __future__ import annotations

import functools
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from jaxpapers.core import plotting, registry
from jaxpapers.core.report import claim, markdown_table
from jaxpapers.core.timing import Stopwatch
from jaxpapers.search import envs, planning, risk, risk_gumbel_muzero_policy, riskzero

says = functools.partial(registry.paper_says, "riskzero")

PATH_NAMES = {0: "D", 1: "R"}
# learner name -> (AgentConfig variant, risk level) given the experiment's alpha
LEARNERS = {"riskzero": lambda a: ("riskzero", a), "risk_alphazero": lambda a: ("risk_alphazero", a),
            "muzero": lambda a: ("muzero", a),
            "alphazero_neutral": lambda a: ("risk_alphazero", 1.0)}  # CVaR_1 = mean, true model


# Monte Carlo CVaR of a few episode returns as one compiled program: run eagerly, risk.cvar's radix
# select dispatched (and compiled) ~20 single-op programs per input shape. The returns are sums of
# integer rewards, so the jitted sums are exact and the value is the eager one.
_mc_cvar = jax.jit(risk.cvar, static_argnums=1)


def _path_str(actions) -> str:
    return "".join(PATH_NAMES[int(a)] for a in actions)


def _policy_distribution(env, acts) -> tuple[np.ndarray, np.ndarray]:
    """Exact return distribution of the mixture of the planned paths (each weighted by how often
    the planner took it); valid when the path choice is independent of the reward draws."""
    dist: dict[float, float] = {}
    paths, counts = np.unique(acts, axis=0, return_counts=True)
    term = np.asarray(env.terminal)
    ns = np.asarray(env.next_state)
    for path, c in zip(paths, counts):
        s, moves = int(env.start), []
        for a in path:
            if term[s]:
                break
            moves.append(int(a))
            s = int(ns[s, a])
        z, pr = envs.path_distribution(env, moves)
        for zi, pi in zip(z, pr):
            dist[float(zi)] = dist.get(float(zi), 0.0) + pi * c / len(acts)
    z = np.array(sorted(dist))
    return z, np.array([dist[x] for x in z])


def _plan(cfg, env, key, leaf_value: str, utility_name: str) -> dict:
    model = planning.make_true_model(
        env, cfg.num_quantiles, leaf_value=leaf_value,
        objective="mean" if utility_name == "neutral" else "cvar", alpha=cfg.alpha)
    util = (risk.mean_utility if utility_name == "neutral"
            else risk.make_utility("cvar", cfg.alpha))

    def search_fn(k, root, inv):
        return risk_gumbel_muzero_policy(model, k, root, planning.true_recurrent_fn,
                                         cfg.plan_simulations, invalid_actions=inv,
                                         utility_fn=util, num_samples=cfg.plan_samples,
                                         gumbel_scale=0.0).action

    out = jax.jit(lambda k: planning.evaluate_planner(
        env, model, search_fn, k, num_episodes=cfg.plan_episodes, history=cfg.plan_history))(key)
    r = np.asarray(out["returns"], np.float64)
    acts = np.asarray(out["actions"]).T
    paths, counts = np.unique(acts, axis=0, return_counts=True)
    top = paths[int(np.argmax(counts))]
    res = {"mc_mean": float(r.mean()), "mc_cvar25": float(_mc_cvar(jnp.asarray(r), cfg.alpha)),
           "top_path": _path_str(top), "top_path_frac": float(counts.max() / len(r)),
           "num_paths": int(len(paths))}
    if cfg.plan_history == "path":
        # with a path history the search never sees the reward draws, so the policy is a
        # distribution over paths: evaluate it exactly (no Monte Carlo error in the CVaR)
        z, pr = _policy_distribution(env, acts)
        res["mean"] = float(np.sum(z * pr))
        res["cvar25"] = float(risk.exact_cvar_discrete(z, pr, cfg.alpha))
    else:
        res["mean"], res["cvar25"] = res["mc_mean"], res["mc_cvar25"]
    return res


def _leaf_note(cfg, metrics, c_o) -> str:
    """What the other leaf-value choices gave (the search is only as good as its leaves)."""
    parts = []
    for lv in cfg.plan_leaf_values[1:]:
        v = metrics.get(f"planning_{lv}_leaf/cvar/cvar25")
        if v is not None:
            parts.append(f"{lv} leaves: CVaR {v:.2f} ({v / c_o:.2f}x)")
    if not parts:
        return ""
    return ("With uninformed leaves it fails (" + "; ".join(parts) + "): utilities of "
            "partial paths are averaged up the tree and CVaR is not additive, so the diversified "
            "Y path only pays off once fully evaluated.")


def _learner(cfg, env, name):
    """A learner's ``AgentConfig`` and its jitted trainer vmapped over seed keys."""
    variant, level = LEARNERS[name](cfg.alpha)
    acfg = riskzero.AgentConfig(
        variant=variant, risk_level=level, num_quantiles=cfg.num_quantiles,
        num_samples=cfg.learn_samples, num_simulations=cfg.learn_simulations,
        num_envs=cfg.learn_envs, updates_per_iter=cfg.learn_updates_per_iter,
        batch_size=cfg.learn_batch_size, learning_rate=cfg.learning_rate)
    fn = jax.jit(jax.vmap(lambda k: riskzero.train_agent(
        acfg, env, k, num_evals=cfg.learn_evals, iters_per_eval=cfg.learn_iters_per_eval,
        eval_episodes=cfg.learn_eval_episodes)))
    return acfg, fn


def _learned_paths(acfg, env, params, key, num_episodes, alpha) -> list[dict]:
    """Per seed: the final agent's most frequent greedy path, its share of ``num_episodes``, and the
    exact mean / CVaR_alpha of the agent's greedy policy (the mixture of the paths it took).

    Also the Monte Carlo mean / CVaR_alpha of those episodes. The exact values are exact
    because the agent observes states, not rewards: its path choice does not depend on the
    reward draws (as for the planner); this removes the Monte Carlo error of the empirical CVaR.
    """
    n_seeds = jax.tree.leaves(params)[0].shape[0]
    play = jax.jit(lambda p, k: riskzero.self_play(acfg, env, p, k, num_envs=num_episodes,
                                                   gumbel_scale=0.0))
    params = jax.tree.map(np.asarray, params)  # per-seed slices in numpy (no eager slice programs)
    out = []
    for i in range(n_seeds):
        traj = play(jax.tree.map(lambda x: x[i], params), jax.random.fold_in(key, i))
        acts, ret = np.asarray(traj["action"]), np.asarray(traj["returns"], np.float64)
        paths, counts = np.unique(acts, axis=0, return_counts=True)
        z, pr = _policy_distribution(env, acts)
        out.append({"path": _path_str(paths[int(np.argmax(counts))]),
                    "share": float(counts.max() / len(acts)),
                    "exact_mean": float(np.sum(z * pr)),
                    "exact_cvar": risk.exact_cvar_discrete(z, pr, alpha),
                    "mc_mean": float(ret.mean()),
                    "mc_cvar": float(_mc_cvar(jnp.asarray(ret), alpha))})
    return out


def _paths_cell(paths) -> str:
    return ", ".join(f"{q['path']} ({100 * q['share']:.0f}%)" for q in paths)


def _learning_claim(cfg, metrics, curves, exact) -> dict:
    """RiskZero vs risk-neutral MuZero on the exact CVaR of each seed's greedy policy.

    Verdict rule (fixed before the 150-iteration runs): "clearly above" = every RiskZero seed
    strictly above every MuZero seed. The note adds the mean gap and Welch's t statistic.
    """
    rz = np.array([q["exact_cvar"] for q in curves["riskzero"]["paths"]])
    mz = np.array([q["exact_cvar"] for q in curves["muzero"]["paths"]])
    clear = bool(rz.min() > mz.max())
    if min(len(rz), len(mz)) < 2:  # no spread estimate from one seed
        t = float("nan")
    else:
        se = float(np.sqrt(rz.var(ddof=1) / len(rz) + mz.var(ddof=1) / len(mz)))
        t = (rz.mean() - mz.mean()) / se if se > 0 else float("inf")
    n_opt, c_opt = _path_str(exact["neutral"]["path"]), _path_str(exact["cvar_opt"]["path"])
    mz_paths = [q["path"] for q in curves["muzero"]["paths"]]
    return claim(
        "learning/riskzero/exact_cvar25", float(rz.mean()),
        paper=says("vs_risk_sensitive_baselines"),
        criterion=("every RiskZero seed's exact CVaR_alpha (greedy policy after training) is "
                   "strictly above every risk-neutral MuZero seed's (rule fixed before the "
                   "150-iteration runs)"),
        passed=clear,
        baselines={n: metrics[f"learning/{n}/exact_cvar25"] for n in curves if n != "riskzero"},
        note=(f"rule: every RiskZero seed above every MuZero seed ({'met' if clear else 'not met'}). "
              f"Gap to MuZero {rz.mean() - mz.mean():+.2f} (Welch t = {t:.1f}) over "
              f"{len(rz)} seeds each after {cfg.learn_evals * cfg.learn_iters_per_eval} "
              f"iterations; exact CVaR of each seed's greedy policy: RiskZero "
              f"{np.round(rz, 3).tolist()} vs MuZero {np.round(mz, 3).tolist()}. MuZero seeds "
              f"on the mean-optimal path {n_opt}: {mz_paths.count(n_opt)}/{len(mz)}, on the "
              f"CVaR-optimal path {c_opt}: {mz_paths.count(c_opt)}/{len(mz)}; RiskZero on "
              f"{c_opt}: {[q['path'] for q in curves['riskzero']['paths']].count(c_opt)}/"
              f"{len(rz)}. Monte Carlo CVaRs (128 greedy episodes) are in the table."))


def run(config, key) -> dict:
    """Planning with the true GridRisk model and learning of the three agents; see README."""
    cfg = config
    env = envs.grid_risk(max_steps=8)
    k_plan, k_learn = jax.random.split(key)
    exact = envs.exact_path_objectives(env, cfg.alpha)
    dp = envs.exact_cvar_dp(env, cfg.alpha)
    metrics = {
        "exact/neutral/mean": exact["neutral"]["mean"], "exact/neutral/cvar25": exact["neutral"]["cvar"],
        "exact/cvar/mean": exact["cvar_opt"]["mean"], "exact/cvar/cvar25": exact["cvar_opt"]["cvar"],
        "exact/cvar_dp_history_dependent": dp,
    }
    sw = Stopwatch()
    plan_rows = []
    jobs = [(lv, u) for lv in cfg.plan_leaf_values for u in ("neutral", "cvar")]
    keys = jax.random.split(k_plan, len(jobs))
    plan = {}
    for (lv, u), k in tqdm(list(zip(jobs, keys)), desc="planning"):
        with sw(f"planning/{lv}/{u}"):
            res = _plan(cfg, env, k, lv, u)
        plan[(lv, u)] = res
        plan_rows.append((lv, u, f"{res['mean']:.3f}", f"{res['cvar25']:.3f}",
                          f"{res['mc_mean']:.3f}", f"{res['mc_cvar25']:.3f}",
                          f"{res['top_path']} ({100 * res['top_path_frac']:.0f}%, "
                          f"{res['num_paths']} paths)"))
        if lv == cfg.plan_leaf_values[0]:
            metrics[f"planning/{u}/mean"] = res["mean"]
            metrics[f"planning/{u}/cvar25"] = res["cvar25"]
        else:
            metrics[f"planning_{lv}_leaf/{u}/mean"] = res["mean"]
            metrics[f"planning_{lv}_leaf/{u}/cvar25"] = res["cvar25"]

    curves = {}
    unknown = [n for n in cfg.learn_variants if n not in LEARNERS]
    if unknown:
        raise ValueError(f"learn_variants: unknown {unknown}; choose from {sorted(LEARNERS)}")
    for name in tqdm(cfg.learn_variants, desc="learning"):
        acfg, fn = _learner(cfg, env, name)
        with sw(f"learning/{name}"):
            out = fn(jax.random.split(jax.random.fold_in(k_learn, len(curves)), cfg.learn_seeds))
            mean, cv = np.asarray(out["mean"]), np.asarray(out["cvar"])  # [seeds, evals]
        # in-training evaluations use the learner's own utility level ("cvar25" curves are
        # CVaR_level; level 1 = the mean for the neutral diagnostic)
        curves[name] = {"mean": mean.tolist(), "cvar25": cv.tolist(), "level": acfg.risk_level}
        paths = _learned_paths(acfg, env, out["params"], jax.random.fold_in(
            k_learn, 1000 + len(curves)), cfg.learn_eval_episodes, cfg.alpha)
        curves[name]["paths"] = paths
        # final Monte Carlo numbers: the greedy episodes of _learned_paths, CVaR at cfg.alpha
        mc_cv = np.array([q["mc_cvar"] for q in paths])
        metrics[f"learning/{name}/mean"] = float(np.mean([q["mc_mean"] for q in paths]))
        metrics[f"learning/{name}/cvar25"] = float(mc_cv.mean())
        metrics[f"learning/{name}/cvar25_seed_std"] = float(mc_cv.std())
        for obj, ex in (("neutral", exact["neutral"]), ("cvar", exact["cvar_opt"])):
            metrics[f"learning/{name}/seeds_on_{obj}_optimal_path"] = sum(
                q["path"] == _path_str(ex["path"]) for q in paths)
        metrics[f"learning/{name}/exact_mean"] = float(np.mean([q["exact_mean"] for q in paths]))
        metrics[f"learning/{name}/exact_cvar25"] = float(np.mean([q["exact_cvar"] for q in paths]))

    n_o, c_o = exact["neutral"]["mean"], exact["cvar_opt"]["cvar"]
    pn, pc = metrics["planning/neutral/mean"], metrics["planning/cvar/cvar25"]
    claims = [
        claim("planning/neutral/mean", pn, paper=says("risk_guided_search"),
              criterion=("control for the search machinery: the risk-neutral search with the "
                         "true model reaches >= 0.95x the exact mean optimum"),
              passed=pn >= 0.95 * n_o,
              baselines={"exact optimum": n_o, "CVaR search": metrics["planning/cvar/mean"]},
              note=f"ratio {pn / n_o:.3f}; optimal path {_path_str(exact['neutral']['path'])}"),
        claim("planning/cvar/cvar25", pc, paper=says("risk_guided_search"),
              criterion=("the CVaR search with the true model reaches >= 0.85x the exact "
                         "CVaR_alpha optimum (enumeration of all paths)"),
              passed=pc >= 0.85 * c_o,
              baselines={"exact optimum": c_o, "neutral search": metrics["planning/neutral/cvar25"],
                         "history-dependent DP": dp},
              note=(f"ratio {pc / c_o:.3f}; optimal path {_path_str(exact['cvar_opt']['path'])}; "
                    f"leaf values '{cfg.plan_leaf_values[0]}'. " + _leaf_note(cfg, metrics, c_o))),
    ]
    if "riskzero" in curves and "muzero" in curves:
        claims.append(_learning_claim(cfg, metrics, curves, exact))
    p_n, p_c = _path_str(exact["neutral"]["path"]), _path_str(exact["cvar_opt"]["path"])
    tables = [
        markdown_table(("objective", "path", "mean", "CVaR_0.25"), [
            ("mean", p_n, f"{n_o:.3f}", f"{exact['neutral']['cvar']:.3f}"),
            ("CVaR_0.25", p_c, f"{exact['cvar_opt']['mean']:.3f}", f"{c_o:.3f}"),
            ("CVaR_0.25 (DP, history-dependent)", "-", "-", f"{dp:.3f}")],
            title="### Exact optima (enumeration of all 70 paths; history-dependent CVaR DP)"),
        markdown_table(("leaf values", "search utility", "mean (exact)", "CVaR_0.25 (exact)",
                        "mean (MC)", "CVaR_0.25 (MC)", "most frequent path"), plan_rows,
                       title="### Planning with the true model"),
    ]
    if curves:
        rows = [(n, f"{metrics[f'learning/{n}/exact_mean']:.3f}",
                 f"{metrics[f'learning/{n}/exact_cvar25']:.3f}",
                 f"{metrics[f'learning/{n}/mean']:.3f}",
                 f"{metrics[f'learning/{n}/cvar25']:.3f} ± "
                 f"{metrics[f'learning/{n}/cvar25_seed_std']:.3f}",
                 _paths_cell(c["paths"])) for n, c in curves.items()]
        tables.append(markdown_table(
            ("agent", "mean (exact)", "CVaR_0.25 (exact)", "mean (MC)",
             "CVaR_0.25 (MC, ± seed std)", "greedy path per seed (share of episodes)"), rows,
            title="### Learning (final greedy policy per seed, mean over seeds; wall times in "
                  "the timings section)"))
    data = {"curves": curves, "iters_per_eval": cfg.learn_iters_per_eval, "alpha": cfg.alpha,
            "planning": {f"{lv}/{u}": v for (lv, u), v in plan.items()},
            "exact": {"neutral": exact["neutral"] | {"path": _path_str(exact["neutral"]["path"])},
                      "cvar": exact["cvar_opt"] | {"path": _path_str(exact["cvar_opt"]["path"])}}}
    return {"metrics": metrics, "claims": claims, "data": data, "tables": tables,
            "timings": sw.seconds}


def plot(result, out_dir) -> list[pathlib.Path]:
    """Planning bars (mean / CVaR vs exact) and learning curves."""
    plt = plotting.pyplot()
    m = result["metrics"]
    paths = []
    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = ["neutral search", "CVaR search", "exact mean-opt", "exact CVaR-opt"]
    means = [m["planning/neutral/mean"], m["planning/cvar/mean"], m["exact/neutral/mean"],
             m["exact/cvar/mean"]]
    cvars = [m["planning/neutral/cvar25"], m["planning/cvar/cvar25"], m["exact/neutral/cvar25"],
             m["exact/cvar/cvar25"]]
    x = np.arange(4)
    ax.bar(x - 0.2, means, 0.4, label="mean")
    ax.bar(x + 0.2, cvars, 0.4, label="CVaR_0.25")
    ax.set_xticks(x, labels, rotation=15)
    ax.axhline(0, color="k", lw=0.5)
    ax.legend()
    ax.set_title("GridRisk: planning with the true model")
    fig.tight_layout()
    paths.append(plotting.save(fig, out_dir, "planning", dpi=120, tight=False))
    curves = result.get("data", {}).get("curves", {})
    if curves:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
        step = result["data"]["iters_per_eval"]
        alpha = result["data"].get("alpha", 0.25)
        for name, c in curves.items():
            for ax, key in zip(axes, ("mean", "cvar25")):
                if key == "cvar25" and c.get("level", alpha) != alpha:
                    continue  # a learner trained for another level: its curve is not CVaR_alpha
                arr = np.asarray(c[key], float)
                it = step * (np.arange(arr.shape[1]) + 1)
                ax.plot(it, arr.mean(0), label=name)
                ax.fill_between(it, arr.min(0), arr.max(0), alpha=0.2)
        for ax, key in zip(axes, ("mean return", "CVaR_0.25")):
            ax.set_xlabel("iteration")
            ax.set_ylabel(key)
        axes[0].legend()
        fig.tight_layout()
        paths.append(plotting.save(fig, out_dir, "learning", dpi=120, tight=False))
    return paths
