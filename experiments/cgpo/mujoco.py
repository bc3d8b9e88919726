"""CGPO and baselines on gymnasium MuJoCo (host loop, jitted agent), resumable (issue 25).

    python -m experiments.cgpo.mujoco --env HalfCheetah-v5 --steps 30000 --seeds 3

(``--methods cgpo,qvpo --out A`` and ``--methods qgrad,sac --out B`` in two processes, then
``--merge A B``, use both cores.)

One environment per run; for ``warmup`` steps uniform random actions, then the plain policy; one
agent update every ``update_every`` env steps once ``warmup`` steps are stored (reward scale 0.2
as QVPO / DACER). Every ``eval_every`` env steps the plain policy runs ``eval_episodes`` full
episodes on a separate environment (seeded ``seed + 10_000``); their mean return is the curve.

Resume: after every evaluation the run's agent state, replay buffer, key, step and curve are
written atomically to ``<out>/checkpoints/<env>/<method>_seed<k>.msgpack``; a restarted command
continues each unfinished run from its last checkpoint (both environments and the warm-up draws
restart from a seed of (seed, step), so a resumed run is not bit-identical to an uninterrupted
one) and skips runs already in the results file; other settings into the same ``--out`` are
refused. Results: ``<out>/mujoco_results.json``
(``{"env", "env_steps", "methods": {m: {"returns": [[curve per seed]]}}}``), a curve PNG and
``<out>/mujoco_table.md`` (final return, mean +- sd over seeds).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import time
from typing import Any

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers import rl
from jaxpapers.core import checks
from jaxpapers.core.report import atomic_write_text

HERE = pathlib.Path(__file__).parent
METHODS = ("cgpo", "qvpo", "qgrad", "sac")


@dataclasses.dataclass(frozen=True)
class GymRunConfig:
    """One MuJoCo run's settings (defaults: the issue's CPU command).

    Attributes:
      env: gymnasium id; steps: env steps; warmup: uniform-action steps before updates;
      update_every: env steps per agent update; batch: rows per update; num_steps: T;
      guidance_steps, guidance_scale, beta, alpha_ent: CGPO's L, lam, beta, entropy weight;
      hidden: MLP sizes; lr: Adam rate; reward_scale: reward multiplier in the buffer;
      eval_every, eval_episodes: the curve's grid and episodes per point.
    """

    env: str = "HalfCheetah-v5"
    steps: int = 30000
    warmup: int = 5000
    update_every: int = 1
    batch: int = 256
    num_steps: int = 10
    guidance_steps: int = 2
    guidance_scale: float = 0.02
    beta: float = 1.0
    alpha_ent: float = 0.02
    hidden: tuple[int, ...] = (256, 256)
    lr: float = 3e-4
    reward_scale: float = 0.2
    eval_every: int = 5000
    eval_episodes: int = 1

    def __post_init__(self):
        for name in ("steps", "update_every", "batch", "num_steps", "eval_every",
                     "eval_episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")
        if self.steps % self.eval_every:
            raise ValueError(f"eval_every={self.eval_every} must divide steps={self.steps}")


def _agent(cfg: GymRunConfig, method: str, obs_dim: int, act_dim: int):
    acfg = rl.AgentConfig(method=method, num_steps=cfg.num_steps,
                          guidance_steps=cfg.guidance_steps, hidden=tuple(cfg.hidden),
                          lr_actor=cfg.lr, lr_critic=cfg.lr, lr_value=cfg.lr, gamma=0.99,
                          drop_per_net=2)
    hp = rl.CGPOParams.make(guidance_scale=cfg.guidance_scale, beta=cfg.beta,
                            alpha_ent=cfg.alpha_ent)
    return rl.make_agent(acfg, obs_dim, act_dim), hp


def _evaluate(env, act, state, key, episodes: int) -> float:
    """Mean undiscounted return of ``episodes`` full episodes of the plain policy."""
    obs = env.reset()
    env.completed_returns()
    done_returns: list[float] = []
    while len(done_returns) < episodes:
        key, k = jax.random.split(key)
        *_, obs = env.step(np.asarray(act(state, k, jnp.asarray(obs))))
        done_returns += env.completed_returns()
    return float(np.mean(done_returns[:episodes]))


def _save(tree, path: pathlib.Path) -> None:
    """The leaves of ``tree`` as msgpack, written atomically (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    leaves = [np.asarray(x) for x in jax.tree.leaves(tree)]
    tmp.write_bytes(flax.serialization.msgpack_serialize(leaves))
    os.replace(tmp, path)


def _restore(like, path: pathlib.Path):
    """``like``'s structure with the leaves stored at ``path`` (shapes and dtypes checked)."""
    leaves, treedef = jax.tree.flatten(like)
    stored = flax.serialization.msgpack_restore(path.read_bytes())
    stored = [stored[str(i)] for i in range(len(stored))] if isinstance(stored, dict) else stored
    if len(stored) != len(leaves) or any(
            np.shape(a) != np.shape(b) or np.asarray(a).dtype != np.asarray(b).dtype
            for a, b in zip(stored, leaves)):
        raise ValueError(f"checkpoint {path} does not match this run's configuration; move it "
                         f"aside to start over")
    return jax.tree.unflatten(treedef, [np.asarray(x) if isinstance(t, np.ndarray | np.generic)
                                        else jnp.asarray(x) for x, t in zip(stored, leaves)])


def train_gym(cfg: GymRunConfig, method: str, seed: int, *, checkpoint: pathlib.Path | None
              = None, progress: bool = False, evaluate: bool = True) -> dict[str, Any]:
    """Train ``method`` for ``cfg.steps`` env steps; returns ``{"env_steps", "returns",
    "updates", "critic_loss", "train_returns", "seconds"}`` (curve at every ``eval_every``)."""
    from jaxpapers.rl.gym import GymVecEnv

    t0 = time.perf_counter()
    env = GymVecEnv(cfg.env, 1, seed)
    eval_env = GymVecEnv(cfg.env, 1, seed + 10_000) if evaluate else None
    ag, hp = _agent(cfg, method, env.obs_dim, env.act_dim)
    act = jax.jit(ag.act)

    @jax.jit
    def learn(state, buffer, key):
        k_b, k_u = jax.random.split(key)
        return ag.update(state, hp, k_u, rl.replay_sample(buffer, k_b, cfg.batch))

    add = jax.jit(rl.replay_add)
    key = jax.random.key(seed)
    key, k_init = jax.random.split(key)
    example = rl.Transition(jnp.zeros(env.obs_dim), jnp.zeros(env.act_dim), jnp.zeros(()),
                            jnp.zeros(env.obs_dim), jnp.zeros(()))
    run = {"state": ag.init(k_init), "buffer": rl.replay_init(example, cfg.steps),
           "key": jax.random.key_data(key), "step": np.int64(0),
           "curve": np.full(cfg.steps // cfg.eval_every, np.nan), "updates": np.int64(0)}
    if checkpoint is not None and checkpoint.exists():
        run = _restore(run, checkpoint)
    state, buffer = run["state"], run["buffer"]
    key = jax.random.wrap_key_data(jnp.asarray(run["key"]))
    step, updates = int(run["step"]), int(run["updates"])
    curve = np.array(run["curve"], dtype=np.float64)  # a writable copy (restored arrays are not)
    if step:  # resumed: fresh episodes and warm-up draws, not a replay of step 0's
        seed_now = int(np.random.SeedSequence([seed, step]).generate_state(1)[0] % 2 ** 30)
        env.close()
        env = GymVecEnv(cfg.env, 1, seed_now)
        if eval_env is not None:
            eval_env.close()
            eval_env = GymVecEnv(cfg.env, 1, seed_now + 10_000)
    else:
        seed_now = seed
    rng = np.random.default_rng(seed_now)
    obs = env.reset()
    met, train_returns = None, []
    while step < cfg.steps:
        key, k_act, k_learn, k_eval = jax.random.split(key, 4)
        if step < cfg.warmup:
            a = rng.uniform(-1.0, 1.0, (1, env.act_dim)).astype(np.float32)
        else:
            a = np.asarray(act(state, k_act, jnp.asarray(obs)))
        next_obs, r, term, _, new_obs = env.step(a)
        checks.check_finite("reward", r)  # on the host: the jitted add cannot check
        checks.check_finite("next_obs", next_obs)
        tr = rl.Transition(jnp.asarray(obs), jnp.asarray(a), jnp.asarray(r * cfg.reward_scale),
                           jnp.asarray(next_obs), jnp.asarray(term, jnp.float32))
        buffer = add(buffer, tr)
        obs = new_obs
        step += 1
        train_returns += env.completed_returns()
        if step >= cfg.warmup and step % cfg.update_every == 0:
            state, met = learn(state, buffer, k_learn)
            updates += 1
        if evaluate and step % cfg.eval_every == 0:
            curve[step // cfg.eval_every - 1] = _evaluate(eval_env, act, state, k_eval,
                                                         cfg.eval_episodes)
            if progress:
                print(f"[{method} seed {seed}] step {step}: eval return "
                      f"{curve[step // cfg.eval_every - 1]:.1f} ({updates} updates, "
                      f"{time.perf_counter() - t0:.0f} s)", flush=True)
            if checkpoint is not None:
                snap = {"state": state, "buffer": buffer, "key": jax.random.key_data(key),
                        "step": np.int64(step), "curve": curve, "updates": np.int64(updates)}
                _save(snap, checkpoint)
    env.close()
    if eval_env is not None:
        eval_env.close()
    critic_loss = float("nan") if met is None else float(met["critic_loss"])  # the last update
    return {"env_steps": [(i + 1) * cfg.eval_every for i in range(len(curve))],
            "returns": curve.tolist(), "updates": updates, "critic_loss": critic_loss,
            "train_returns": train_returns, "seconds": time.perf_counter() - t0}


def smoke(cfg, key) -> dict[str, Any]:
    """The small config's smoke run: cgpo for ``cfg.mujoco_steps`` steps of
    ``cfg.mujoco_env`` (no evaluation episodes; training returns only)."""
    seed = int(jax.random.randint(key, (), 0, 2 ** 30))
    g = GymRunConfig(env=cfg.mujoco_env, steps=cfg.mujoco_steps, warmup=cfg.mujoco_warmup,
                     update_every=cfg.mujoco_update_every, batch=64,
                     num_steps=cfg.mujoco_num_steps, guidance_steps=min(
                         1, cfg.mujoco_num_steps), hidden=tuple(cfg.hidden),
                     eval_every=cfg.mujoco_steps)
    out = train_gym(dataclasses.replace(g, eval_episodes=1), "cgpo", seed, evaluate=False)
    return {"env_steps": cfg.mujoco_steps, "updates": out["updates"],
            "episodes": len(out["train_returns"]), "returns": out["train_returns"],
            "critic_loss": out["critic_loss"], "finite": bool(np.isfinite(out["critic_loss"])),
            "seconds": out["seconds"]}


def _load(path: pathlib.Path) -> dict[str, Any]:
    if path.exists():
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not valid JSON ({e}); move it aside to start over")
    return {}


def write_outputs(results: dict[str, Any], out_dir: pathlib.Path) -> None:
    """The results JSON, the curve PNG and the markdown table (mean +- sd of the last point)."""
    atomic_write_text(out_dir / "mujoco_results.json", json.dumps(results, indent=1))
    rows = ["| method | seeds | final return (mean +- sd) | per seed |", "|---|---|---|---|"]
    for m, r in results["methods"].items():
        last = [c[-1] for c in r["returns"]]
        sd = float(np.std(last, ddof=1)) if len(last) > 1 else float("nan")
        rows.append(f"| {m} | {len(last)} | {np.mean(last):.1f} +- {sd:.1f} | "
                    f"{', '.join(f'{x:.1f}' for x in last)} |")
    atomic_write_text(out_dir / "mujoco_table.md",
                      f"{results['env']}, {results['env_steps'][-1]} env steps\n\n"
                      + "\n".join(rows) + "\n")
    from jaxpapers.core import plotting
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    x = np.asarray(results["env_steps"])
    for m, r in results["methods"].items():
        c = np.asarray(r["returns"], float)
        mu = c.mean(axis=0)
        ax.plot(x, mu, "o-", ms=3, label=m)
        if len(c) > 1:
            sd = c.std(axis=0, ddof=1)
            ax.fill_between(x, mu - sd, mu + sd, alpha=0.2)
    ax.set_xlabel("env steps")
    ax.set_ylabel("eval return (mean +- sd over seeds)")
    ax.set_title(results["env"], fontsize=9)
    ax.legend(fontsize=8)
    plotting.save(fig, out_dir, "mujoco_curves")


def merge(out_dir: pathlib.Path, sources: list[pathlib.Path]) -> dict[str, Any]:
    """Join the results of runs made in separate ``--out`` directories (e.g. one process per
    core, each with its own ``--methods``) into ``out_dir``; the runs must share env and grid."""
    merged: dict[str, Any] = {}
    for src in sources:
        r = _load(src / "mujoco_results.json")
        if not r:
            raise ValueError(f"{src} holds no mujoco_results.json")
        if not merged:
            merged = {k: v for k, v in r.items() if k != "methods"} | {"methods": {}}
        elif (r["env"], r["env_steps"], r.get("config")) != (
                merged["env"], merged["env_steps"], merged.get("config")):
            raise ValueError(f"{src} was run with another env, grid or config than "
                             f"{sources[0]}")
        for m, v in r["methods"].items():
            if m in merged["methods"]:
                raise ValueError(f"method {m!r} appears in more than one source")
            merged["methods"][m] = v
    out_dir.mkdir(parents=True, exist_ok=True)
    write_outputs(merged, out_dir)
    return merged


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--steps", type=int, default=30000)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--warmup", type=int, default=5000)
    p.add_argument("--eval-every", type=int, default=5000)
    p.add_argument("--num-steps", type=int, default=10, help="T of the diffusion policy")
    p.add_argument("--hidden", default="256,256", help="MLP sizes, comma-separated")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--update-every", type=int, default=1, help="env steps per update")
    p.add_argument("--out", default=str(HERE))
    p.add_argument("--merge", nargs="+", metavar="DIR",
                   help="only join the results in these --out directories into --out")
    args = p.parse_args(argv)
    if args.merge:
        merge(pathlib.Path(args.out), [pathlib.Path(d) for d in args.merge])
        print((pathlib.Path(args.out) / "mujoco_table.md").read_text())
        return
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise SystemExit(f"--methods: unknown {bad}; choose from {METHODS}")
    cfg = GymRunConfig(env=args.env, steps=args.steps, warmup=min(args.warmup, args.steps),
                       eval_every=args.eval_every, num_steps=args.num_steps,
                       guidance_steps=min(2, args.num_steps), batch=args.batch,
                       update_every=args.update_every,
                       hidden=tuple(int(h) for h in args.hidden.split(",") if h.strip()))
    out = pathlib.Path(args.out)
    path = out / "mujoco_results.json"
    results = _load(path)
    grid = [(i + 1) * cfg.eval_every for i in range(cfg.steps // cfg.eval_every)]
    cfg_json = json.loads(json.dumps(dataclasses.asdict(cfg)))
    if results and (results.get("env") != cfg.env or results.get("env_steps") != grid
                    or results.get("config") != cfg_json):
        raise SystemExit(f"{path} holds a run with other settings ({results.get('env')}, "
                         f"{len(results.get('env_steps', []))} points, config "
                         f"{results.get('config')}); use another --out")
    results = results or {"env": cfg.env, "env_steps": grid, "config": cfg_json, "methods": {}}
    for m in methods:
        done = results["methods"].setdefault(m, {"returns": [], "seeds": []})
        for seed in range(args.seeds):
            if seed in done["seeds"]:
                continue
            ckpt = out / "checkpoints" / cfg.env / f"{m}_seed{seed}.msgpack"
            r = train_gym(cfg, m, seed, checkpoint=ckpt, progress=True)
            done["returns"].append(r["returns"])
            done["seeds"].append(seed)
            write_outputs(results, out)
    write_outputs(results, out)
    print((out / "mujoco_table.md").read_text())


if __name__ == "__main__":
    main()
