"""CGPO on pure-JAX tasks: a four-peak bandit (modes) and the MultiGoal point mass (issue 25).

1. Bandit (``bandit2d``: four equal Gaussian peaks at (+-0.5, +-0.5), width 0.15, noise 0.1;
   one-step episodes, gamma 0). Per seed the policy first fits uniform actions
   (``fit_uniform``, the issue's "uniform start"; every diffusion run of a seed starts from the
   same weights and critics). Runs (``BANDIT_RUNS``): cgpo; its ablations as traced switches
   in the same compiled program (drift: lam = 0 and w = 1, plain self-regression; no guidance;
   no weights; no entropy term); guidance on all T steps; qgrad; qvpo. Every ``eval_every``
   iterations: mode masses of ``mode_samples`` plain policy samples (share within
   ``mode_radius`` of each peak), the noise-free reward of those samples, and
   ``dQ = mean Q(s, a_tilde) - Q(s, a_plain)`` over ``gain_states`` states (common noise).
2. Point mass (``point_goal``): cgpo, qgrad, qvpo, sac from random initialisation, ``point_envs``
   parallel episodes, evaluation every ``eval_every`` iterations on ``point_eval_episodes``
   plain-policy episodes: return, goals reached; at the end dQ over held-out states drawn from
   the final evaluation's visited states.
3. MuJoCo smoke (``mujoco_steps`` > 0): cgpo for ``mujoco_steps`` env steps of
   ``mujoco_env`` through gymnasium (``experiments.cgpo.mujoco``); the long MuJoCo comparison is
   the separate command ``python -m experiments.cgpo.mujoco``.

Every run of one method is one jitted program vmapped over seeds (and switches); the programs
of different methods are dispatched from threads so their compilations overlap.
Keys: ``split(key, 3)`` -> (bandit, point, mujoco); within each, ``split(., num_seeds)`` per
seed, shared by all methods of that seed.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import pathlib
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments.cgpo.config import BANDIT_RUNS, Config
from jaxpapers import rl
from jaxpapers.core import plotting, registry
from jaxpapers.core.report import claim, markdown_table
from jaxpapers.core.timing import Stopwatch
from jaxpapers.rl import envs

says = functools.partial(registry.paper_says, "cgpo")


def agent_config(cfg: Config, method: str, *, point: bool, guide_all: bool = False):
    steps = cfg.point_steps if point else cfg.num_steps
    guided = cfg.point_guidance_steps if point else cfg.guidance_steps
    return rl.AgentConfig(
        method=method, num_steps=steps, guidance_steps=steps if guide_all else guided,
        num_critics=cfg.num_critics, num_quantiles=cfg.num_quantiles,
        drop_per_net=cfg.drop_per_net, n_cand=cfg.n_cand, n_uniform=cfg.n_uniform,
        gamma=cfg.point_gamma if point else 0.0, lr_actor=cfg.lr, lr_critic=cfg.lr,
        lr_value=cfg.lr, hidden=tuple(cfg.hidden))


def hp_of(cfg: Config, overrides: dict, *, point: bool) -> rl.CGPOParams:
    base = {"guidance_scale": cfg.point_guidance_scale if point else cfg.guidance_scale,
            "beta": cfg.beta, "alpha_ent": cfg.alpha_ent}
    base.update(overrides)
    return rl.CGPOParams.make(**base)


def _jit(cfg: Config, fn):
    """``jax.jit`` with XLA's backend optimisations off when ``cfg.fast_compile`` (tiny: the
    run is compile-bound; results are still deterministic, only slower per step)."""
    if cfg.fast_compile:
        return jax.jit(fn, compiler_options={"xla_backend_optimization_level": 0,
                                             "xla_llvm_disable_expensive_passes": True})
    return jax.jit(fn)


_PROGRAM_SECONDS: dict[str, float] = {}


def _timed(name, fn, *args):
    """Run ``fn(*args)`` (compile + run + device_get) and record its wall seconds."""
    t0 = time.perf_counter()
    out = jax.device_get(fn(*args))
    _PROGRAM_SECONDS[name] = time.perf_counter() - t0
    return out


def _stack(trees):
    return jax.tree.map(lambda *x: jnp.stack(x), *trees)


# ----------------------------------------------------------------------------- bandit

def bandit_program(cfg: Config, method: str, guide_all: bool):
    """jitted ``run(actor0 [R], hp [R], keys [R]) -> (snapshots, final samples [R, K, 2])``;
    snapshots: ``masses [R, C, 4]``, ``reward``, ``delta_q``, ``critic_loss`` ``[R, C]``."""
    env = envs.bandit2d()
    ag = rl.make_agent(agent_config(cfg, method, point=False, guide_all=guide_all), 1, 2)
    tr = rl.make_trainer(ag, env, num_envs=cfg.bandit_envs, batch_size=cfg.bandit_batch,
                         capacity=(cfg.bandit_iters + cfg.bandit_warmup) * cfg.bandit_envs)
    chunks = cfg.bandit_iters // cfg.eval_every
    s_mode = jnp.zeros((cfg.mode_samples, 1))
    s_gain = jnp.zeros((cfg.gain_states, 1))

    def one(actor0, hp, key):
        k_init, k_warm, k_run = jax.random.split(key, 3)
        ts = tr.init(k_init)
        ts = ts.replace(agent=ts.agent.replace(actor=actor0))
        if cfg.bandit_warmup:  # the critics first learn the uniform start's rewards
            ts, _ = tr.run(ts, hp, k_warm, cfg.bandit_warmup, critic_only=True)

        def chunk(ts, k):
            k_run, k_act, k_gain = jax.random.split(k, 3)
            ts, met = tr.run(ts, hp, k_run, cfg.eval_every)
            a = ag.act(ts.agent, k_act, s_mode)
            snap = {"masses": envs.mode_masses(env, a, radius=cfg.mode_radius),
                    "reward": jnp.mean(envs.bandit_mean_reward(env, a)),
                    "delta_q": jnp.mean(ag.gain(ts.agent, hp, k_gain, s_gain)),
                    "critic_loss": jnp.mean(met["critic_loss"])}
            return ts, (snap, a)

        _, (snaps, samples) = jax.lax.scan(chunk, ts, jax.random.split(k_run, chunks))
        return snaps, samples[-1]

    return _jit(cfg, jax.vmap(one))


def bandit_warm_start(cfg: Config, seed_keys):
    """[S] uniform-start eps-model parameters (one per seed)."""
    ag = rl.make_agent(agent_config(cfg, "cgpo", point=False), 1, 2)

    def one(key):
        k_init, k_fit = jax.random.split(key)
        actor = ag.init(k_init).actor
        return rl.fit_uniform(ag, actor, k_fit, jnp.zeros((cfg.bandit_batch, 1)),
                              steps=cfg.warm_start, lr=cfg.lr)

    return _jit(cfg, jax.vmap(one))(seed_keys)


def submit_bandit(cfg: Config, key, pool):
    """Submit every bandit program to ``pool``; returns ``collect() -> {run: results}``."""
    seed_keys = jax.random.split(key, cfg.num_seeds)
    k_warm = jax.vmap(lambda k: jax.random.fold_in(k, 0))(seed_keys)
    k_train = jax.vmap(lambda k: jax.random.fold_in(k, 1))(seed_keys)
    actor0 = bandit_warm_start(cfg, k_warm)
    groups: dict[tuple[str, bool], list[str]] = {}
    for name in cfg.bandit_runs:
        method, guide_all, _ = BANDIT_RUNS[name]
        groups.setdefault((method, guide_all), []).append(name)
    futures = {}
    for (method, guide_all), names in groups.items():
        prog = bandit_program(cfg, method, guide_all)
        r = len(names)
        hps = _stack([hp_of(cfg, BANDIT_RUNS[n][2], point=False) for n in names
                      for _ in range(cfg.num_seeds)])
        a0 = jax.tree.map(lambda x: jnp.concatenate([x] * r), actor0)
        keys = jnp.concatenate([k_train] * r)
        futures[tuple(names)] = pool.submit(_timed, f"program/bandit/{'+'.join(names)}",
                                            prog, a0, hps, keys)
    return functools.partial(_collect_bandit, cfg, futures)


def _collect_bandit(cfg: Config, futures) -> dict[str, Any]:
    out = {}
    for names, fut in futures.items():
        snaps, samples = fut.result()  # snapshots [R, C, ...]
        s = cfg.num_seeds
        for i, n in enumerate(names):
            sl = slice(i * s, (i + 1) * s)
            out[n] = {k: np.swapaxes(v[sl], 0, 1) for k, v in snaps.items()}  # [C, S, ...]
            out[n]["samples"] = samples[sl]
    return {n: out[n] for n in cfg.bandit_runs}


# ----------------------------------------------------------------------------- point mass

def point_program(cfg: Config, method: str):
    """jitted ``run(hp [S], keys [S]) -> dict``: per-chunk eval returns ``[C, S]``, the final
    evaluation's goals ``[S, E]`` and returns ``[S, E]``, dQ ``[S]``, training curves."""
    env = envs.point_goal(num_goals=cfg.point_goals, horizon=cfg.point_horizon)
    ag = rl.make_agent(agent_config(cfg, method, point=True), env.obs_dim, env.act_dim)
    tr = rl.make_trainer(ag, env, num_envs=cfg.point_envs, batch_size=cfg.point_batch,
                         capacity=(cfg.point_iters + cfg.point_warmup) * cfg.point_envs,
                         reward_scale=cfg.point_reward_scale)
    chunks = cfg.point_iters // cfg.eval_every
    n_eval = cfg.point_eval_episodes

    def one(hp, key):
        k_init, k_warm, k_run, k_eval, k_gain = jax.random.split(key, 5)
        ts = tr.init(k_init)
        if cfg.point_warmup:  # uniform actions, critic-only updates
            ts, _ = tr.run(ts, hp, k_warm, cfg.point_warmup, critic_only=True)

        def chunk(ts, k):
            k_run, k_ev = jax.random.split(k)
            ts, met = tr.run(ts, hp, k_run, cfg.eval_every)
            ret, fin, _, _ = rl.evaluate(ag, env, ts.agent, k_ev, num_episodes=n_eval)
            goal = jax.vmap(envs.goal_reached, in_axes=(None, 0))(env, fin)
            snap = {"return": jnp.mean(ret), "reach": jnp.mean(goal >= 0),
                    "train_return": jnp.sum(met["return_sum"]) /
                    jnp.maximum(jnp.sum(met["episodes"]), 1),
                    "critic_loss": jnp.mean(met["critic_loss"])}
            if "weight_zero_share" in met:  # qvpo: share of states whose weight max(Q, 0) is 0
                snap["weight_zero_share"] = jnp.mean(met["weight_zero_share"])
            return ts, snap

        ts, snaps = jax.lax.scan(chunk, ts, jax.random.split(k_run, chunks))
        ret, fin, seen, alive = rl.evaluate(ag, env, ts.agent, k_eval, num_episodes=n_eval)
        goal = jax.vmap(envs.goal_reached, in_axes=(None, 0))(env, fin)
        k_pick, k_g = jax.random.split(k_gain)
        flat = seen.reshape(-1, env.obs_dim)
        p = alive.reshape(-1).astype(jnp.float32)
        idx = jax.random.choice(k_pick, flat.shape[0], (cfg.gain_states,), p=p / jnp.sum(p))
        dq = ag.gain(ts.agent, hp, k_g, flat[idx])
        return {"snaps": snaps, "final_return": ret, "final_goal": goal,
                "delta_q": jnp.mean(dq), "delta_q_pos_share": jnp.mean(dq > 0)}

    return _jit(cfg, jax.vmap(one))


def submit_point(cfg: Config, key, pool):
    """Submit every point-mass program to ``pool``; returns ``collect() -> {method: results}``.
    """
    seed_keys = jax.random.split(key, cfg.num_seeds)
    futures = {}
    for m in cfg.point_methods:
        prog = point_program(cfg, m)
        hps = _stack([hp_of(cfg, {}, point=True)] * cfg.num_seeds)
        futures[m] = pool.submit(_timed, f"program/point/{m}", prog, hps, seed_keys)
    def collect():
        out = {m: f.result() for m, f in futures.items()}
        for r in out.values():  # snapshots [S, C] -> [C, S]
            r["snaps"] = {k: np.swapaxes(v, 0, 1) for k, v in r["snaps"].items()}
        return out

    return collect


# ----------------------------------------------------------------------------- run

def run(config: Config, key) -> dict[str, Any]:
    """Bandit, point mass and the MuJoCo smoke run; see the module docstring."""
    cfg = config
    sw = Stopwatch()
    k_bandit, k_point, k_mujoco = jax.random.split(key, 3)
    # one worker per usable CPU: more threads than cores thrash (8 workers pinned to one CPU
    # beside another job: tiny took > 10 min instead of ~1)
    workers = max(1, len(os.sched_getaffinity(0)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        with sw("bandit_and_point"):
            collect_point = submit_point(cfg, k_point, pool)
            collect_bandit = submit_bandit(cfg, k_bandit, pool)
            bandit, point = collect_bandit(), collect_point()
    smoke = None
    if cfg.mujoco_steps:  # host-bound: run alone (in a thread beside the programs it was
        from experiments.cgpo import mujoco  # starved of the GIL: 17 s -> 233 s measured)
        with sw("mujoco_smoke"):
            smoke = mujoco.smoke(cfg, k_mujoco)
    sw.seconds.update(_PROGRAM_SECONDS)
    _PROGRAM_SECONDS.clear()
    return _summarise(cfg, bandit, point, smoke, sw)


# ----------------------------------------------------------------------------- report

def _seeds(v, fmt="{:.2f}"):
    return ", ".join(fmt.format(x) for x in np.asarray(v).tolist())


def _summarise(cfg: Config, bandit, point, smoke, sw) -> dict[str, Any]:
    m: dict[str, float] = {}
    per_seed: dict[str, dict[str, np.ndarray]] = {}
    for n, r in bandit.items():
        masses = r["masses"][-1]  # [S, 4] at the end
        mode_max = masses.max(axis=1)
        modes_20 = (masses >= 0.2).sum(axis=1)
        per_seed[n] = {"mode_max": mode_max, "modes_20": modes_20, "reward": r["reward"][-1],
                       "delta_q": r["delta_q"][-1]}
        m[f"bandit/{n}/mode_max"] = float(mode_max.mean())
        m[f"bandit/{n}/modes_20"] = float(modes_20.mean())
        m[f"bandit/{n}/reward"] = float(r["reward"][-1].mean())
        m[f"bandit/{n}/reward_auc"] = float(r["reward"].mean())
        if BANDIT_RUNS[n][0] == "cgpo":
            m[f"bandit/{n}/delta_q"] = float(r["delta_q"][-1].mean())
    for meth, r in point.items():
        goals = r["final_goal"]  # [S, E]
        distinct = np.array([len(set(g.tolist()) - {-1}) for g in goals])
        m[f"point/{meth}/return"] = float(r["final_return"].mean())
        m[f"point/{meth}/goals_distinct"] = float(distinct.mean())
        m[f"point/{meth}/reach_rate"] = float((goals >= 0).mean())
        per_seed[f"point/{meth}"] = {"return": r["final_return"].mean(axis=1),
                                     "distinct": distinct, "delta_q": r["delta_q"]}
        if meth == "cgpo":
            m["point/cgpo/delta_q"] = float(r["delta_q"].mean())
        if "weight_zero_share" in r["snaps"]:
            m[f"point/{meth}/weight_zero_share"] = float(r["snaps"]["weight_zero_share"].mean())
    s = cfg.num_seeds
    need = max(1, int(np.ceil(2 * s / 3)))  # ">= 2 of 3 seeds"
    cg, qg = per_seed["cgpo"], per_seed["qgrad"]
    multi = int((cg["modes_20"] >= 2).sum())
    collapsed = int((qg["mode_max"] >= 0.9).sum())
    claims = [
        claim("bandit/cgpo/delta_q", m["bandit/cgpo/delta_q"],
              paper=says("guidance_toward_high_value"),
              criterion=f"guidance raises Q: mean over {cfg.gain_states} states of Q(s, a_tilde)"
                        f" - Q(s, a_plain) > 0 at the end for every seed (lam "
                        f"{cfg.guidance_scale}, L {cfg.guidance_steps} of T {cfg.num_steps})",
              passed=bool(np.all(cg["delta_q"] > 0)),
              note=f"per seed: {_seeds(cg['delta_q'], '{:.4f}')}"),
        claim("bandit/cgpo/modes_20", m["bandit/cgpo/modes_20"],
              paper=says("balance_exploration_exploitation"),
              criterion=f"cgpo keeps >= 2 modes holding >= 20% of {cfg.mode_samples} samples "
                        f"in >= {need} of {s} seeds after {cfg.bandit_iters} updates",
              passed=multi >= need,
              baselines={k: m[f"bandit/{k}/modes_20"] for k in ("qgrad", "qvpo", "drift")},
              note=f"cgpo mode_max per seed: {_seeds(cg['mode_max'])}; modes_20 per seed: "
                   f"{_seeds(cg['modes_20'], '{:d}')}"),
        claim("bandit/qgrad/mode_max", m["bandit/qgrad/mode_max"],
              paper=says("gradient_based_collapse"),
              criterion=f"qgrad (Q-gradient through the sampler) puts >= 90% on one mode in >= "
                        f"{need} of {s} seeds",
              passed=collapsed >= need,
              baselines={k: m[f"bandit/{k}/mode_max"] for k in ("cgpo", "qvpo", "drift")},
              note=f"qgrad mode_max per seed: {_seeds(qg['mode_max'])}; reward "
                   f"{_seeds(qg['reward'])}"),
        claim("bandit/qvpo/reward_auc", m["bandit/qvpo/reward_auc"],
              paper=says("sampling_based_slow"),
              criterion="the weighted (sampling-based) method improves more slowly: mean reward "
                        "over the snapshots of qvpo < that of cgpo",
              passed=m["bandit/qvpo/reward_auc"] < m["bandit/cgpo/reward_auc"],
              baselines={"cgpo": m["bandit/cgpo/reward_auc"]}),
        claim("point/cgpo/delta_q", m["point/cgpo/delta_q"],
              paper=says("guidance_toward_high_value"),
              criterion=f"point mass: mean dQ over {cfg.gain_states} held-out visited states > 0"
                        f" at the end for every seed (lam {cfg.point_guidance_scale}, L "
                        f"{cfg.point_guidance_steps} of T {cfg.point_steps})",
              passed=bool(np.all(per_seed["point/cgpo"]["delta_q"] > 0)),
              note=f"per seed: {_seeds(per_seed['point/cgpo']['delta_q'], '{:.4f}')}"),
    ]
    diff_base = [x for x in ("qgrad", "qvpo") if x in point]
    if diff_base:
        best = max(m[f"point/{x}/return"] for x in diff_base)
        claims.append(claim(
            "point/cgpo/return", m["point/cgpo/return"], paper=says("mujoco_vs_diffusion_rl"),
            criterion="stand-in for the MuJoCo table: on the point mass cgpo's final return "
                      "(mean over seeds) >= the best diffusion baseline's (qgrad, qvpo)",
            passed=m["point/cgpo/return"] >= best,
            baselines={x: m[f"point/{x}/return"] for x in point if x != "cgpo"},
            note=f"cgpo per seed: {_seeds(per_seed['point/cgpo']['return'], '{:.1f}')}"))
    rows = [(n, m[f"bandit/{n}/mode_max"], _seeds(per_seed[n]["mode_max"]),
             _seeds(per_seed[n]["modes_20"], "{:d}"), m[f"bandit/{n}/reward"],
             m.get(f"bandit/{n}/delta_q", float("nan")))
            for n in bandit]
    t_bandit = markdown_table(("run", "mode_max", "per seed", "modes >= 20% per seed",
                               "reward", "dQ"), rows,
                              title=f"Bandit after {cfg.bandit_iters} updates ({s} seeds)")
    snaps_its = [(c + 1) * cfg.eval_every for c in range(cfg.bandit_iters // cfg.eval_every)]
    t_traj = markdown_table(
        ("updates",) + tuple(bandit),
        [(it,) + tuple(f"{bandit[n]['masses'][c].max(axis=1).mean():.2f} / "
                       f"{bandit[n]['reward'][c].mean():.2f}" for n in bandit)
         for c, it in enumerate(snaps_its)],
        title="Bandit over training: mode_max / reward (means over seeds)")
    prow = [(x, m[f"point/{x}/return"], _seeds(per_seed[f"point/{x}"]["return"], "{:.0f}"),
             m[f"point/{x}/reach_rate"], _seeds(per_seed[f"point/{x}"]["distinct"], "{:d}"),
             m.get(f"point/{x}/delta_q", float("nan"))) for x in point]
    t_point = markdown_table(("method", "return", "per seed", "episodes reaching a goal",
                              "distinct goals per seed", "dQ"), prow,
                             title=f"Point mass ({cfg.point_goals} goals, horizon "
                                   f"{cfg.point_horizon}) after {cfg.point_iters} iterations x "
                                   f"{cfg.point_envs} envs; {cfg.point_eval_episodes} eval "
                                   "episodes per seed")
    tables = [t_bandit, t_traj, t_point]
    data = {"bandit": {n: {"mode_max": r["masses"].max(axis=2).mean(axis=1).tolist(),
                           "reward": r["reward"].mean(axis=1).tolist(),
                           "samples": r["samples"][0].tolist()} for n, r in bandit.items()},
            "bandit_iters": snaps_its,
            "point": {x: {"return": r["snaps"]["return"].mean(axis=1).tolist()}
                      for x, r in point.items()}}
    if smoke is not None:
        m["mujoco_smoke/updates"] = float(smoke["updates"])
        m["mujoco_smoke/critic_loss_finite"] = float(smoke["finite"])
        tables.append(f"MuJoCo smoke ({cfg.mujoco_env}, cgpo, T {cfg.mujoco_num_steps}): "
                      f"{smoke['env_steps']} env steps, {smoke['updates']} updates, "
                      f"{smoke['episodes']} finished episodes (returns "
                      f"{_seeds(smoke['returns'], '{:.1f}')}), last critic loss "
                      f"{smoke['critic_loss']:.4f}, {smoke['seconds']:.1f} s. The comparison "
                      f"itself is `python -m experiments.cgpo.mujoco` (see the README).")
    return {"metrics": m, "claims": claims, "tables": tables, "data": data,
            "timings": sw.seconds}


def plot(result: dict[str, Any], out_dir) -> list[pathlib.Path]:
    plt = plotting.pyplot()
    d = result["data"]
    its = d["bandit_iters"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for n, r in d["bandit"].items():
        axes[0].plot(its, r["mode_max"], "o-", ms=3, label=n)
        axes[1].plot(its, r["reward"], "o-", ms=3, label=n)
    axes[0].set_ylabel("largest mode's share (mean over seeds)")
    axes[1].set_ylabel("noise-free reward of policy samples")
    for ax in axes:
        ax.set_xlabel("updates")
    axes[0].legend(fontsize=7)
    paths = [plotting.save(fig, out_dir, "bandit_modes_and_reward")]
    names = list(d["bandit"])
    fig, axes = plt.subplots(1, len(names), figsize=(2.2 * len(names), 2.4))
    for ax, n in zip(np.atleast_1d(axes), names):
        a = np.asarray(d["bandit"][n]["samples"])
        ax.scatter(a[:, 0], a[:, 1], s=1, alpha=0.3)
        for cx in (-0.5, 0.5):
            for cy in (-0.5, 0.5):
                ax.add_patch(plt.Circle((cx, cy), 0.25, fill=False, color="r", lw=0.8))
        ax.set_xlim(-1, 1)
        ax.set_ylim(-1, 1)
        ax.set_aspect("equal")
        ax.set_title(n, fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle("final policy samples, seed 0 (circles: peaks +- mode radius)", fontsize=9)
    paths.append(plotting.save(fig, out_dir, "bandit_samples"))
    fig, ax = plt.subplots(figsize=(5.5, 4))
    p_its = [(c + 1) * (its[0]) for c in range(len(next(iter(d["point"].values()))["return"]))]
    for x, r in d["point"].items():
        ax.plot(p_its, r["return"], "o-", ms=3, label=x)
    ax.set_xlabel("iterations")
    ax.set_ylabel("eval return (mean over seeds)")
    ax.legend(fontsize=8)
    paths.append(plotting.save(fig, out_dir, "point_returns"))
    return paths
