"""How much the learning results move under last-bit perturbations (issue #17).

Trains the learners of a config exactly as ``run.run`` does (same keys), optionally with the
learning rate moved by a number of float32 ulps, and prints each seed's exact CVaR of its final
greedy policy. Run the same command under other settings (``XLA_FLAGS``, ``taskset``) to compare:

    python -m experiments.riskzero.spread --learners riskzero,muzero
    python -m experiments.riskzero.spread --learners riskzero,muzero --lr-ulps 1
    XLA_FLAGS=--xla_cpu_multi_thread_eigen=false python -m experiments.riskzero.spread

About 5 minutes per learner at ``--scale small`` on 2 CPU cores. The measured table is in this
folder's README ("Reproducibility across installs").
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import jax
import numpy as np

from experiments.riskzero import config as config_lib
from experiments.riskzero import run as run_lib
from jaxpapers.search import envs


def perturb_learning_rate(cfg, ulps: int):
    """``cfg`` with its learning rate moved by ``ulps`` float32 ulps (0: unchanged)."""
    if ulps == 0:
        return cfg
    lr = np.float32(cfg.learning_rate)  # the value the optimizer computes with
    for _ in range(abs(ulps)):
        lr = np.nextafter(lr, np.float32(np.inf if ulps > 0 else -np.inf))
    return dataclasses.replace(cfg, learning_rate=float(lr))


def learn(cfg, key, learners) -> dict[str, dict]:
    """Per learner: per-seed exact CVaR and greedy path, keys derived as in ``run.run``."""
    env = envs.grid_risk(max_steps=8)
    _, k_learn = jax.random.split(key)
    out = {}
    for i, name in enumerate(cfg.learn_variants):
        if name not in learners:
            continue
        acfg, fn = run_lib._learner(cfg, env, name)
        res = fn(jax.random.split(jax.random.fold_in(k_learn, i), cfg.learn_seeds))
        paths = run_lib._learned_paths(acfg, env, res["params"],
                                       jax.random.fold_in(k_learn, 1000 + i + 1),
                                       cfg.learn_eval_episodes, cfg.alpha)
        out[name] = {"exact_cvar": [float(q["exact_cvar"]) for q in paths],
                     "paths": [f"{q['path']} ({100 * q['share']:.0f}%)" for q in paths]}
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="small", choices=("tiny", "small"))
    ap.add_argument("--learners", default="riskzero,muzero")
    ap.add_argument("--lr-ulps", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    cfg = perturb_learning_rate(getattr(config_lib, a.scale)(), a.lr_ulps)
    out = learn(cfg, jax.random.key(a.seed), a.learners.split(","))
    for name, r in out.items():
        v = np.asarray(r["exact_cvar"])
        print(f"{name}: mean {v.mean():.3f}; seeds {np.round(v, 3).tolist()}; {r['paths']}")
    print(json.dumps({"learning_rate": cfg.learning_rate, "results": out}))
    return out


if __name__ == "__main__":
    main()
