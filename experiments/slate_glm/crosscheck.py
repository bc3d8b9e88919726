"""Cross-check of our Slate-GLM-OFU against the authors' numpy implementation, side by side.

``python -m experiments.slate_glm.crosscheck --authors-dir /path/to/Logistic_Slate_Bandits
[--rounds T --seeds S]``

Their code (github.com/tanmaygoyal258/Logistic_Slate_Bandits: ``Slate_GLM_OFU.py`` with its
``optimization.py`` and ``utils.py``; needs numpy and scipy) is never copied into this project:
it is imported at run time from the directory given on the command line, and nothing is fetched.
Without ``--authors-dir``, or when their class cannot be imported, this prints why and exits 2.

Identical problems for both sides, seed by seed (seed s uses ``fold_in(key, s)``):
- theta* from our :func:`make_slate_env` ("fresh" contexts; theta* uniform in [-1, 1]^{Nd}
  rescaled to ``--theta-norm``), the same as the experiment's first setting;
- per-round item contexts [T, N, K, d] pre-drawn with our :func:`env_contexts` (items uniform in
  [-1, 1]^d rescaled to norm 1/sqrt(N), as their ``GLMEnv.generate_slot_arms``);
- per-round uniforms u_t; whichever slate x_t a side plays, its reward is
  1[u_t < mu(<x_t, theta*>)] computed by one shared jitted function (our ``env_mean_reward``).
Their ``GLMEnv`` (own numpy generators, the contexts of all T rounds built in Python, an
enumeration of the K^N slates each round for the regret) is not used: we drive their
``Slate_GLM_OFU`` object ourselves, calling ``pull(arm_set)`` with the round's contexts (as float64
copies of the same float32 numbers, in their list-of-slots layout) and
``update_parameters(slate, reward)`` with the reward computed above, as ``GLMEnv.play_algorithm``
does. Their parameters: ``param_norm_ub`` = int(||theta*||) + 1, delta = 0.05, lambda = 5 (their
fixed value), the same values our experiment passes to ours. Their only other randomness, the
``np.random.randint`` tie-break when all of a slot's scores are exactly equal, is seeded per seed
(the global numpy state is restored afterwards); ours draws its ties from pre-split jax keys.

The regret of both is computed afterwards by the same function (ours: expected reward of the
per-slot oracle slate minus that of the played slate) from the items each side played.
Ours runs in its default dtype (float32) under ``jit``/``vmap``, theirs in float64 numpy.
If their ECOLog "sensitivity" check raises ``ValueError`` in some round, that seed is reported as
failed (with the round) and left out of the comparison; nothing is retried or altered.

Defaults (N = 3, K = 5, d = 5, ||theta*|| = 2, logistic: the experiment's first setting;
T = 4000, 8 seeds, plus the lockstep diagnostic on 1000 rounds of 2 seeds): their loop costs
about 4-5 ms per round here, so about 3 minutes on 2 shared CPU cores.

What it found (key 0, their commit f0ea542; numbers in the issue-7 report):
- mean R_T ours / theirs = 0.958 with the defaults (8 seeds), 1.073 with 16 seeds (paired
  difference +7.3 +- 5.3 s.e.): within 10% both times. Per seed the ratio ranges 0.66-1.43: the
  two trajectories differ from round 0 (all items of a slot have the same norm, so at theta = 0
  every score ties; they take the float-rounding argmax, we break ties at random), after which
  they share only the problem, not the path, so per-seed regret differs by path noise.
- lockstep (one shared trajectory): the estimates agree to a relative 6e-5 (median) to 2e-3
  (max, first rounds), i.e. our exact ECOLog step and ball projection vs their projected
  gradient and ellipsoid projection do not matter here. Ours proposes their slate in ~96% of
  rounds; the rest comes from the confidence radius: theirs subtracts 0.5 ||theta - theta_bar||
  _V~ (a norm, ``weighted_norm``) in ``cum_loss``, ours 0.5 ||theta - theta_bar||^2_V~ (squared),
  so our r_t is ~11% larger at t = 1000 (14.0 vs 12.6). This difference is not in the README's
  list; with the norm instead of its square (a scratch check, not in this file) the radii agree
  to 3 decimals and the proposals in 99.6-100% of rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import importlib
import json
import math
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.bandits import (env_contexts, env_mean_reward, get_link, make_slate_env,
                               make_slate_glm_ofu, oracle_slate, slate_features)
from jaxpapers.bandits.slate_glm_ofu import ofu_radius

__all__ = ["load_authors_ofu", "make_problems", "run_ours", "run_theirs", "regret_of",
           "lockstep", "crosscheck", "main"]

# Their modules have generic top-level names; they are imported in isolation (see below).
_THEIR_MODULES = ("Slate_GLM_OFU", "optimization", "utils")
_FILES = ("Slate_GLM_OFU.py", "optimization.py", "utils.py")


class AuthorsUnavailable(RuntimeError):
    """The authors' code cannot be imported from the given directory (the message says why)."""


def load_authors_ofu(authors_dir: str | None):
    """Import the authors' ``Slate_GLM_OFU`` class from ``authors_dir`` (never from the network).

    Their modules are named ``utils`` / ``optimization``, so any modules of those names already
    imported are set aside during the import and put back afterwards (their class keeps
    references to its own functions), and ``authors_dir`` is removed from ``sys.path`` again.

    Returns:
      (the class, {file name: sha256 prefix}) for the report.
    Raises:
      AuthorsUnavailable: no directory given, files missing, or the import failed.
    """
    if not authors_dir:
        raise AuthorsUnavailable(
            "no --authors-dir given: pass a local checkout of "
            "github.com/tanmaygoyal258/Logistic_Slate_Bandits (this script fetches nothing)")
    path = os.path.abspath(os.path.expanduser(authors_dir))
    if not os.path.isdir(path):
        raise AuthorsUnavailable(f"--authors-dir {path!r} is not a directory")
    missing = [f for f in _FILES if not os.path.isfile(os.path.join(path, f))]
    if missing:
        raise AuthorsUnavailable(f"--authors-dir {path!r} lacks {', '.join(missing)} (expected "
                                 "the Logistic_Slate_Bandits repository root)")
    digests = {}
    for f in _FILES:
        with open(os.path.join(path, f), "rb") as fh:
            digests[f] = hashlib.sha256(fh.read()).hexdigest()[:12]
    saved = {m: sys.modules.pop(m) for m in _THEIR_MODULES if m in sys.modules}
    sys.path.insert(0, path)
    try:
        mod = importlib.import_module("Slate_GLM_OFU")
        cls = mod.Slate_GLM_OFU
    except Exception as e:  # ImportError (e.g. no scipy), SyntaxError, AttributeError, ...
        raise AuthorsUnavailable(f"importing Slate_GLM_OFU from {path!r} failed: "
                                 f"{type(e).__name__}: {e}") from e
    finally:
        sys.path.remove(path)
        for m in _THEIR_MODULES:
            sys.modules.pop(m, None)
        sys.modules.update(saved)
    return cls, digests


def make_problems(key: jax.Array, *, num_seeds: int, num_rounds: int, num_slots: int,
                  num_items: int, dim: int, theta_norm: float, link: str = "logistic"):
    """Per seed: our environment (theta*), pre-drawn contexts, reward uniforms and tie-break keys.

    Returns:
      (envs with a leading seed axis, contexts [S, T, N, K, d], u [S, T], select keys [S, T]).
    """
    def one(k):
        k_env, k_ctx, k_u, k_sel = jax.random.split(k, 4)
        env = make_slate_env(k_env, num_slots=num_slots, num_items=num_items, dim=dim,
                             theta_norm=theta_norm, link=link, mode="fresh")
        ts = jnp.arange(num_rounds)
        ctx = jax.vmap(functools.partial(env_contexts, env))(jax.random.split(k_ctx, num_rounds),
                                                               ts)
        u = jax.random.uniform(k_u, (num_rounds,))
        return env, ctx, u, jax.random.split(k_sel, num_rounds)

    keys = jnp.stack([jax.random.fold_in(key, s) for s in range(num_seeds)])
    return jax.vmap(one)(keys)


@jax.jit
def _reward(env, contexts, items, u):
    """The shared reward: 1[u < mu(<slate, theta*>)] for items [N] in contexts [N, K, d]."""
    mu = env_mean_reward(env, slate_features(contexts, items))
    return (u < mu).astype(contexts.dtype)


@jax.jit
def regret_of(env, contexts, items):
    """Per-round regret [T] of played items [T, N] (one env; contexts [T, N, K, d])."""
    def one(ctx, it):
        best = slate_features(ctx, oracle_slate(env, ctx))
        return env_mean_reward(env, best) - env_mean_reward(env, slate_features(ctx, it))

    return jax.vmap(one)(contexts, items)


def run_ours(algo, envs, contexts, u, sel_keys) -> np.ndarray:
    """Our Slate-GLM-OFU on the pre-drawn problems (one compiled scan, vmapped over seeds).

    Returns: played items [S, T, N] (int).
    """
    @jax.jit
    def run(envs, contexts, u, sel_keys):
        def one(env, ctx_all, u_all, k_all):
            def step(state, inp):
                ctx, ut, k = inp
                items, state = algo.select(state, k, ctx)
                reward = (ut < env_mean_reward(env, slate_features(ctx, items))).astype(ctx.dtype)
                return algo.update(state, ctx, items, reward), items

            _, items = jax.lax.scan(step, algo.init(jax.random.key(0)), (ctx_all, u_all, k_all))
            return items

        return jax.vmap(one)(envs, contexts, u, sel_keys)

    return np.asarray(run(envs, contexts, u, sel_keys))


@contextlib.contextmanager
def _numpy_global_seed(seed: int):
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def run_theirs(cls, env, contexts, u, *, param_norm_ub: int, link: str = "logistic",
               failure_level: float = 0.05, np_seed: int = 0):
    """The authors' ``Slate_GLM_OFU`` driven round by round on one seed's problem.

    Returns:
      (played items [T', N] int, error message or None); T' < T if their code raised.
    """
    num_rounds, n, k, d = contexts.shape
    params = {"reward_type": link, "item_count": k, "slot_count": n, "horizon": num_rounds,
              "arm_dim": d, "failure_level": failure_level, "param_norm_ub": param_norm_ub}
    ctx64 = np.asarray(contexts, dtype=np.float64)
    ctx_dev = jnp.asarray(contexts)
    played = []
    with _numpy_global_seed(np_seed):
        alg = cls(params)
        for t in range(num_rounds):
            arm_set = [[ctx64[t, i, j] for j in range(k)] for i in range(n)]
            try:
                picks = [int(p) for p in alg.pull(arm_set)]
                slate = np.hstack([ctx64[t, i, picks[i]] for i in range(n)])
                reward = float(_reward(env, ctx_dev[t], jnp.asarray(picks, jnp.int32), u[t]))
                alg.update_parameters(slate, reward)
            except ValueError as e:  # their ECOLog sensitivity check
                return np.asarray(played, np.int32).reshape(-1, n), f"round {t}: {e}"
            played.append(picks)
    return np.asarray(played, np.int32), None


def lockstep(cls, algo, env, contexts, u, sel_keys, *, param_norm_ub: int,
             link: str = "logistic", failure_level: float = 0.05, np_seed: int = 0) -> dict:
    """Diagnostic: both learners observe the slates *theirs* plays (one shared trajectory).

    Each round ours proposes its slate from its own state (not played), then both are updated
    with their slate and its reward. This separates differences in the updates from the
    divergence of two trajectories after a first different choice.

    Returns:
      agreement (fraction of rounds where ours proposes their slate, also from round 1 on),
      median / max relative gap ||theta_ours - theta_theirs|| / ||theta_theirs||, and the
      confidence radii r_t of both at the last round.
    """
    num_rounds, n, k, d = contexts.shape
    params = {"reward_type": link, "item_count": k, "slot_count": n, "horizon": num_rounds,
              "arm_dim": d, "failure_level": failure_level, "param_norm_ub": param_norm_ub}
    ctx64 = np.asarray(contexts, dtype=np.float64)
    ctx_dev = jnp.asarray(contexts)
    select, update = jax.jit(algo.select), jax.jit(algo.update)
    radius = jax.jit(lambda st: ofu_radius(st.t, st.cum_loss, l2reg=5.0,
                                           param_norm_ub=float(param_norm_ub),
                                           failure_level=failure_level))
    agree, gaps = [], []
    state = algo.init(jax.random.key(0))
    with _numpy_global_seed(np_seed):
        alg = cls(params)
        for t in range(num_rounds):
            picks = [int(p) for p in alg.pull([[ctx64[t, i, j] for j in range(k)]
                                               for i in range(n)])]
            r_theirs, r_ours = float(alg.conf_radius), float(radius(state))
            mine, _ = select(state, sel_keys[t], ctx_dev[t])
            agree.append(bool(np.all(np.asarray(mine) == picks)))
            items = jnp.asarray(picks, jnp.int32)
            reward = _reward(env, ctx_dev[t], items, u[t])
            alg.update_parameters(np.hstack([ctx64[t, i, picks[i]] for i in range(n)]),
                                  float(reward))
            state = update(state, ctx_dev[t], items, reward)
            th_ours = np.asarray(state.theta, np.float64).reshape(-1)
            th_theirs = np.asarray(alg.theta, np.float64)
            gaps.append(np.linalg.norm(th_ours - th_theirs)
                        / max(np.linalg.norm(th_theirs), 1e-12))
    agree, gaps = np.asarray(agree), np.asarray(gaps)
    return {"rounds": num_rounds, "agreement": float(agree.mean()),
            "agreement_from_round_1": float(agree[1:].mean()) if num_rounds > 1 else None,
            "theta_rel_gap_median": float(np.median(gaps)), "theta_rel_gap_max": float(gaps.max()),
            "radius_theirs_last": r_theirs, "radius_ours_last": r_ours}


def crosscheck(authors_dir: str | None, *, num_rounds: int = 4000, num_seeds: int = 8,
               num_slots: int = 3, num_items: int = 5, dim: int = 5, theta_norm: float = 2.0,
               link: str = "logistic", seed: int = 0, tolerance: float = 0.10,
               lockstep_rounds: int = 0, lockstep_seeds: int = 2, log=print) -> dict:
    """Run both implementations on identical problems; returns a JSON-serialisable report.

    With ``lockstep_rounds`` > 0, also runs :func:`lockstep` on the first ``lockstep_rounds``
    rounds of the first ``lockstep_seeds`` seeds (reported under "lockstep").

    Raises:
      AuthorsUnavailable: their code cannot be imported (before any computation).
      ValueError: bad sizes.
    """
    for name, v in (("num_rounds", num_rounds), ("num_seeds", num_seeds)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    cls, digests = load_authors_ofu(authors_dir)
    s_ub = int(theta_norm) + 1  # their main.py: int(||theta*||) + 1
    envs, contexts, u, sel_keys = make_problems(
        jax.random.key(seed), num_seeds=num_seeds, num_rounds=num_rounds, num_slots=num_slots,
        num_items=num_items, dim=dim, theta_norm=theta_norm, link=link)
    algo = make_slate_glm_ofu(num_slots=num_slots, num_items=num_items, dim=dim,
                              param_norm_ub=float(s_ub), link=get_link(link))
    t0 = time.perf_counter()
    ours_items = run_ours(algo, envs, contexts, u, sel_keys)
    t_ours = time.perf_counter() - t0
    log(f"ours: {num_seeds} seeds x {num_rounds} rounds in {t_ours:.1f} s (compile included)")
    u_np = np.asarray(u)
    rows = []
    t_theirs = 0.0
    for s in range(num_seeds):
        env = jax.tree.map(lambda a: a[s], envs)
        t0 = time.perf_counter()
        their_items, err = run_theirs(cls, env, contexts[s], u_np[s], param_norm_ub=s_ub,
                                      link=link, np_seed=seed * 100_003 + s)
        dt = time.perf_counter() - t0
        t_theirs += dt
        reg_ours = np.asarray(regret_of(env, contexts[s], jnp.asarray(ours_items[s])))
        row = {"seed": s, "regret_ours": float(reg_ours.sum()),
               "regret_ours_at_T_4": float(reg_ours[: num_rounds // 4].sum()),
               "theirs_seconds": dt}
        if err is None:
            reg_th = np.asarray(regret_of(env, contexts[s], jnp.asarray(their_items)))
            same = np.all(their_items == ours_items[s], axis=1)
            row.update(regret_theirs=float(reg_th.sum()),
                       regret_theirs_at_T_4=float(reg_th[: num_rounds // 4].sum()),
                       ratio=float(reg_ours.sum() / reg_th.sum()),
                       same_slate_fraction=float(same.mean()),
                       first_divergence=int(np.argmin(same)) if not same.all() else None)
            log(f"seed {s}: ours {row['regret_ours']:8.2f}  theirs {row['regret_theirs']:8.2f}"
                f"  ratio {row['ratio']:.3f}  same slate {100 * row['same_slate_fraction']:.1f}%"
                f"  (theirs {dt:.0f} s)")
        else:
            row.update(regret_theirs=None, error=err, rounds_completed=int(len(their_items)))
            log(f"seed {s}: ours {row['regret_ours']:8.2f}  theirs FAILED at {err}")
        rows.append(row)
    ok = [r for r in rows if r["regret_theirs"] is not None]
    report = {
        "config": {"num_rounds": num_rounds, "num_seeds": num_seeds, "num_slots": num_slots,
                   "num_items": num_items, "dim": dim, "theta_norm": theta_norm, "link": link,
                   "param_norm_ub": s_ub, "seed": seed, "tolerance": tolerance,
                   "ours_dtype": str(np.asarray(contexts).dtype)},
        "authors_dir": os.path.abspath(authors_dir), "authors_sha256_12": digests,
        "seeds": rows, "seconds_ours": t_ours, "seconds_theirs": t_theirs,
        "failed_seeds": [r["seed"] for r in rows if r["regret_theirs"] is None],
    }
    if ok:
        mo = float(np.mean([r["regret_ours"] for r in ok]))
        mt = float(np.mean([r["regret_theirs"] for r in ok]))
        diff = np.array([r["regret_ours"] - r["regret_theirs"] for r in ok])
        report.update(
            mean_regret_ours=mo, mean_regret_theirs=mt, ratio_of_means=mo / mt,
            mean_regret_ours_at_T_4=float(np.mean([r["regret_ours_at_T_4"] for r in ok])),
            mean_regret_theirs_at_T_4=float(np.mean([r["regret_theirs_at_T_4"] for r in ok])),
            paired_diff_mean=float(diff.mean()),
            paired_diff_stderr=float(diff.std(ddof=1) / math.sqrt(len(diff)))
            if len(diff) > 1 else None,
            mean_same_slate_fraction=float(np.mean([r["same_slate_fraction"] for r in ok])),
            within_tolerance=bool(abs(mo / mt - 1.0) <= tolerance))
    else:
        report.update(within_tolerance=False)
    report["lockstep"] = []
    for s in range(min(lockstep_seeds, num_seeds) if lockstep_rounds > 0 else 0):
        env = jax.tree.map(lambda a: a[s], envs)
        m = min(lockstep_rounds, num_rounds)
        res = lockstep(cls, algo, env, contexts[s, :m], u_np[s, :m], sel_keys[s, :m],
                       param_norm_ub=s_ub, link=link, np_seed=seed * 100_003 + s)
        report["lockstep"].append({"seed": s, **res})
        log(f"lockstep seed {s} ({m} rounds, their slates played): ours proposes their slate "
            f"in {100 * res['agreement']:.1f}% of rounds; theta relative gap median "
            f"{res['theta_rel_gap_median']:.1e} (max {res['theta_rel_gap_max']:.1e}); radius "
            f"r_t at the last round theirs {res['radius_theirs_last']:.3f}, ours "
            f"{res['radius_ours_last']:.3f}")
    return report


def _print_summary(rep, log=print):
    c = rep["config"]
    log(f"setting: N={c['num_slots']} K={c['num_items']} d={c['dim']} ||theta*||="
        f"{c['theta_norm']} S={c['param_norm_ub']} {c['link']}, T={c['num_rounds']}, "
        f"{c['num_seeds']} seeds (key {c['seed']})")
    if "mean_regret_ours" in rep:
        se = rep["paired_diff_stderr"]
        log(f"mean cumulative regret at T: ours {rep['mean_regret_ours']:.2f}, theirs "
            f"{rep['mean_regret_theirs']:.2f}, ratio ours/theirs {rep['ratio_of_means']:.3f} "
            f"(paired difference {rep['paired_diff_mean']:+.2f}"
            + (f" +- {se:.2f} s.e." if se is not None else "") + ")")
        log(f"at T/4: ours {rep['mean_regret_ours_at_T_4']:.2f}, theirs "
            f"{rep['mean_regret_theirs_at_T_4']:.2f}; same slate played in "
            f"{100 * rep['mean_same_slate_fraction']:.1f}% of rounds")
    if rep["failed_seeds"]:
        log(f"their code raised on seeds {rep['failed_seeds']} (left out of the comparison)")
    log(f"within {100 * c['tolerance']:.0f}%: {'YES' if rep['within_tolerance'] else 'NO'}")


def main(argv=None) -> int:
    """CLI. Exit 0: within tolerance; 1: not within; 2: their code unavailable (reason printed)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--authors-dir", default=None,
                   help="local checkout of tanmaygoyal258/Logistic_Slate_Bandits")
    p.add_argument("--rounds", type=int, default=4000)
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--slots", type=int, default=3)
    p.add_argument("--items", type=int, default=5)
    p.add_argument("--dim", type=int, default=5)
    p.add_argument("--theta-norm", type=float, default=2.0)
    p.add_argument("--link", choices=("logistic", "probit"), default="logistic")
    p.add_argument("--key", type=int, default=0)
    p.add_argument("--tolerance", type=float, default=0.10)
    p.add_argument("--lockstep", type=int, default=1000, metavar="ROUNDS",
                   help="also run the lockstep diagnostic on this many rounds (0: off)")
    p.add_argument("--lockstep-seeds", type=int, default=2)
    p.add_argument("--json", default=None, help="write the report here")
    a = p.parse_args(argv)
    try:
        rep = crosscheck(a.authors_dir, num_rounds=a.rounds, num_seeds=a.seeds, num_slots=a.slots,
                         num_items=a.items, dim=a.dim, theta_norm=a.theta_norm, link=a.link,
                         seed=a.key, tolerance=a.tolerance, lockstep_rounds=a.lockstep,
                         lockstep_seeds=a.lockstep_seeds)
    except AuthorsUnavailable as e:
        print(f"cross-check not run: {e}", file=sys.stderr)
        return 2
    _print_summary(rep)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rep, fh, indent=1)
    return 0 if rep["within_tolerance"] else 1


if __name__ == "__main__":
    sys.exit(main())
