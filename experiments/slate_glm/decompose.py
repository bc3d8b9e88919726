"""Where RS-SlateGLinCB's regret comes from: warm-up rounds vs the rest, beside Slate-GLM-OFU.

RS-SlateGLinCB plays a warm-up slate (largest ||x||_{V_i^-1} item per slot) whenever some item's
squared warm-up norm exceeds tau = 1 / (0.01 kappa R^4 S^2 d); those rounds explore blindly, and
their number grows with kappa. This script records the per-round warm-up flag
(``run_bandit_seeds(..., trace_fn=...)``) and splits the cumulative regret at T into warm-up and
UCB rounds, so that the gap to Slate-GLM-OFU can be attributed. Same settings and keys as
``horizon.py`` (``fold_in(key(seed), setting index)``).

Run: ``python -m experiments.slate_glm.decompose [--rounds 10000] [--seeds 16]`` (~1.5 min on idle cores).
"""

from __future__ import annotations

import numpy as np

from experiments.slate_glm import horizon
from experiments.slate_glm import run as run_lib
from jaxpapers.bandits import run_bandit_seeds

RS_ALGOS = ("rs_slateglincb", "rs_slateglincb@beta_x0.1")


def _warm_flag(state):
    return state.warm


def decompose(num_rounds: int, num_seeds: int, seed: int = 0) -> list[dict]:
    """Rows ``{setting, algo, R_T, warm_rounds, R_warm, R_ucb, ratio_to_ofu, ucb_ratio_to_ofu,
    late_slope_ratio}`` (means over seeds; ``late_slope_ratio`` = regret in the last quarter of
    rounds relative to OFU's)."""
    if num_rounds < 40:
        raise ValueError(f"num_rounds must be >= 40, got {num_rounds}")
    if num_seeds < 2:
        raise ValueError(f"num_seeds must be >= 2, got {num_seeds}")
    rows = []
    q = num_rounds - num_rounds // 4
    for (name, n, k, d, norm, link), envs, run_keys in horizon.setting_envs(num_seeds, seed):
        made, _, kappa = run_lib._make_algos(n, k, d, num_rounds, norm, link, (0.1,), 0)
        ofu = run_bandit_seeds(made["slate_glm_ofu"], envs, run_keys, num_rounds=num_rounds)
        r_ofu = np.asarray(ofu.regret, np.float64)
        ofu_t, ofu_late = r_ofu.sum(1).mean(), r_ofu[:, q:].sum(1).mean()
        rows.append({"setting": name, "kappa": kappa, "algo": "slate_glm_ofu", "R_T": ofu_t,
                     "warm_rounds": 0.0, "R_warm": 0.0, "R_ucb": ofu_t, "ratio_to_ofu": 1.0,
                     "ucb_ratio_to_ofu": 1.0, "late_slope_ratio": 1.0})
        for a in RS_ALGOS:
            res = run_bandit_seeds(made[a], envs, run_keys, num_rounds=num_rounds,
                                   trace_fn=_warm_flag)
            r = np.asarray(res.regret, np.float64)
            warm = np.asarray(res.trace, bool)
            r_t = r.sum(1).mean()
            r_warm = (r * warm).sum(1).mean()
            rows.append({"setting": name, "kappa": kappa, "algo": a, "R_T": r_t,
                         "warm_rounds": float(warm.sum(1).mean()), "R_warm": r_warm,
                         "R_ucb": r_t - r_warm, "ratio_to_ofu": r_t / ofu_t,
                         "ucb_ratio_to_ofu": (r_t - r_warm) / ofu_t,
                         "late_slope_ratio": r[:, q:].sum(1).mean() / ofu_late})
    return rows


def main(argv=None) -> list[dict]:
    args = horizon.arg_parser(__doc__, rounds=10_000).parse_args(argv)
    rows = decompose(args.rounds, args.seeds, args.seed)
    print(f"T = {args.rounds}, {args.seeds} seeds, key {args.seed}")
    print("| setting | algorithm | R_T | warm-up rounds | R in warm-up | R in UCB rounds | "
          "R_T / OFU | UCB-round R / OFU | last-quarter R / OFU's |\n"
          "|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['setting']} | {r['algo']} | {r['R_T']:.1f} | {r['warm_rounds']:.1f} | "
              f"{r['R_warm']:.1f} | {r['R_ucb']:.1f} | {r['ratio_to_ofu']:.3f} | "
              f"{r['ucb_ratio_to_ofu']:.3f} | {r['late_slope_ratio']:.3f} |")
    return rows


if __name__ == "__main__":
    main()
