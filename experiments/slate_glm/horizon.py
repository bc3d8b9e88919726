"""Regret of a few algorithms at a long horizon (default T = 10^5, the full config's settings).

The full experiment (`config.full()`) runs every algorithm and variant at T = 10^5, about an hour
on 2 CPU cores; this script runs only the named algorithms on the same two settings, 16 seeds
each, and prints the mean cumulative regret at T / 10, T / 4 and T with the ratio to
Slate-GLM-OFU. Environments and keys: `fold_in(key(seed), setting index)`, split into
environment and run keys as in `run._regret_setting`.

Run: ``python -m experiments.slate_glm.horizon [--rounds 100000] [--seeds 16] [--algos a,b,...]``.
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import numpy as np

from experiments.slate_glm import config as config_lib
from experiments.slate_glm import run as run_lib
from jaxpapers.bandits import make_slate_env, run_bandit_seeds

DEFAULT_ALGOS = ("slate_glm_ofu", "rs_slateglincb", "rs_slateglincb@beta_x0.1",
                 "b_slateglincb_plus", "random")


def setting_envs(num_seeds: int, seed: int = 0):
    """Yield ``(setting, envs, run_keys)`` for each setting of ``config.full()``: environments
    vmapped over ``num_seeds`` and one run key per seed, from ``fold_in(key(seed), setting
    index)`` split into environment and run keys as in ``run._regret_setting``."""
    cfg = config_lib.full()
    key = jax.random.key(seed)
    for si, setting in enumerate(cfg.settings):
        _, n, k, d, norm, link = setting
        k_env, k_run = jax.random.split(jax.random.fold_in(key, si))
        envs = jax.vmap(functools.partial(make_slate_env, num_slots=n, num_items=k, dim=d,
                                          theta_norm=norm, link=link, mode=cfg.context_mode))(
            jax.random.split(k_env, num_seeds))
        yield setting, envs, jax.random.split(k_run, num_seeds)


def horizon_table(num_rounds: int, num_seeds: int, algos, seed: int = 0) -> list[dict]:
    """Rows ``{setting, algo, R_T, R_T4, R_T10, ratio_to_ofu, switches, seconds}``."""
    if num_rounds < 40:
        raise ValueError(f"num_rounds must be >= 40, got {num_rounds}")
    if num_seeds < 2:
        raise ValueError(f"num_seeds must be >= 2, got {num_seeds}")
    rows = []
    for (name, n, k, d, norm, link), envs, run_keys in setting_envs(num_seeds, seed):
        scales = tuple(sorted({float(a.split("@beta_x")[1]) for a in algos if "@beta_x" in a}))
        made, _, _ = run_lib._make_algos(n, k, d, num_rounds, norm, link, scales, 0)
        unknown = [a for a in algos if a not in made]
        if unknown:
            raise ValueError(f"algos: unknown {unknown}; choose from {sorted(made)}")
        res_setting = {}
        for a in algos:
            t0 = time.perf_counter()
            res = run_bandit_seeds(made[a], envs, run_keys, num_rounds=num_rounds)
            cum = np.cumsum(np.asarray(res.regret, np.float64), axis=1).mean(0)
            res_setting[a] = {"setting": name, "algo": a, "R_T": float(cum[-1]),
                              "R_T4": float(cum[num_rounds // 4 - 1]),
                              "R_T10": float(cum[num_rounds // 10 - 1]),
                              "switches": float(np.asarray(res.switches)[:, -1].mean()),
                              "seconds": time.perf_counter() - t0}
        ofu = res_setting.get("slate_glm_ofu")
        for r in res_setting.values():
            r["ratio_to_ofu"] = r["R_T"] / ofu["R_T"] if ofu else float("nan")
            r["ratio_to_ofu_T10"] = r["R_T10"] / ofu["R_T10"] if ofu else float("nan")
            rows.append(r)
    return rows


def arg_parser(doc: str, *, rounds: int) -> argparse.ArgumentParser:
    """``--rounds`` (default ``rounds``), ``--seeds`` (16) and ``--seed`` (0)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def main(argv=None) -> list[dict]:
    ap = arg_parser(__doc__, rounds=100_000)
    ap.add_argument("--algos", default=",".join(DEFAULT_ALGOS))
    args = ap.parse_args(argv)
    rows = horizon_table(args.rounds, args.seeds, tuple(args.algos.split(",")), args.seed)
    t = args.rounds
    print(f"T = {t}, {args.seeds} seeds, key {args.seed}")
    print(f"| setting | algorithm | R_T/10 | R_T/4 | R_T | R_T / R_T/4 | /OFU at T/10 | /OFU at T "
          f"| switches | s |\n|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['setting']} | {r['algo']} | {r['R_T10']:.1f} | {r['R_T4']:.1f} | "
              f"{r['R_T']:.1f} | {r['R_T'] / r['R_T4']:.2f} | {r['ratio_to_ofu_T10']:.3f} | "
              f"{r['ratio_to_ofu']:.3f} | {r['switches']:.1f} | {r['seconds']:.0f} |")
    return rows


if __name__ == "__main__":
    main()
