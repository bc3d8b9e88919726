"""Slate GLM bandits with limited adaptivity: regret curves, switches, time per round, ICL.

``run(config, key)`` returns the result dict; ``plot(result, out_dir)`` writes PNGs;
``jaxpapers reproduce slate_glm --scale tiny|small|full`` runs it and writes the report.
"""

from __future__ import annotations

import functools
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from experiments.slate_glm.config import Config
from jaxpapers.core import plotting, registry
from jaxpapers.core.report import claim, markdown_table
from jaxpapers.core.timing import Stopwatch, time_fn
from jaxpapers.bandits import (batch_bound, flatten_slates, get_link, make_b_slateglincb,
                               make_random,
                               make_rs_slateglincb, make_slate_env, make_slate_glm_ofu,
                               make_slate_glm_ts, rs_switch_bound, rs_warmup_threshold,
                               run_bandit_seeds)

says = functools.partial(registry.paper_says, "slate_glm")

ALGOS = ("b_slateglincb", "b_slateglincb_plus", "rs_slateglincb", "slate_glm_ofu",
         "slate_glm_ts", "random")


def _theory_beta(d, t, failure_level=0.05):
    """RS-GLinCB's (and our B-SlateGLinCB's) default exploration multiplier."""
    return 4.0 * math.sqrt(d * math.log(max(t, 2) / failure_level))


def _make_algos(n, k, d, t, norm, link, beta_scales=(), flat_max_arms=0):
    lk = get_link(link)
    s_ub = float(int(norm) + 1)          # the authors' S = int(||theta*||) + 1
    kappa = float(1.0 / lk.dmean(norm))  # 1/mu'(||theta*||) bounds 1/mu' over unit slates
    common = dict(num_slots=n, num_items=k, dim=d, param_norm_ub=s_ub, link=lk)
    algos = {
        "b_slateglincb": make_b_slateglincb(num_rounds=t, **common),
        "b_slateglincb_plus": make_b_slateglincb(num_rounds=t, plus=True, **common),
        "rs_slateglincb": make_rs_slateglincb(num_rounds=t, kappa=kappa, **common),
        "slate_glm_ofu": make_slate_glm_ofu(**common),
        "slate_glm_ts": make_slate_glm_ts(**common),
        "random": make_random(num_slots=n, num_items=k),
    }
    if k ** n <= flat_max_arms:  # the single-action parents on the K^N flattened slates
        flat = dict(num_slots=1, num_items=k ** n, dim=n * d, param_norm_ub=s_ub, link=lk)
        algos["rs_glincb_flat"] = flatten_slates(
            make_rs_slateglincb(num_rounds=t, kappa=kappa, **flat), num_slots=n, num_items=k)
        algos["b_glincb_flat"] = flatten_slates(
            make_b_slateglincb(num_rounds=t, **flat), num_slots=n, num_items=k)
    if beta_scales:  # the RS-GLinCB code's UCB centre (theta_w + theta_tau) / 2
        algos["rs_slateglincb@code_centre"] = make_rs_slateglincb(
            num_rounds=t, kappa=kappa, mix_warmup=True, **common)
    for sc in beta_scales:  # sensitivity to the exploration constant (not a paper setting)
        beta = sc * _theory_beta(d, t)
        algos[f"rs_slateglincb@beta_x{sc:g}"] = make_rs_slateglincb(
            num_rounds=t, kappa=kappa, beta=beta, **common)
        algos[f"b_slateglincb_plus@beta_x{sc:g}"] = make_b_slateglincb(
            num_rounds=t, plus=True, beta=beta, **common)
    tau = rs_warmup_threshold(kappa=kappa, param_norm_ub=s_ub, dim=d)
    wb, db = rs_switch_bound(num_rounds=t, num_slots=n, dim=d, tau=tau, max_dmean=lk.max_dmean)
    bounds = {"rs_slateglincb": wb + db, "rs_slateglincb_det": db, "rs_slateglincb_warm": wb,
              "b_slateglincb": float(batch_bound(t)), "b_slateglincb_plus": float(batch_bound(t))}
    return algos, bounds, kappa


@functools.partial(jax.jit, static_argnums=tuple(range(1, 8)))
def _envs_and_keys(key, s, n, k, d, norm, link, mode):
    """S environments and S run keys from ``key`` (one compiled call instead of an eager
    op-by-op vmap)."""
    k_env, k_run = jax.random.split(key)
    envs = jax.vmap(functools.partial(make_slate_env, num_slots=n, num_items=k, dim=d,
                                      theta_norm=norm, link=link, mode=mode))(
        jax.random.split(k_env, s))
    return envs, jax.random.split(k_run, s)


def _regret_setting(cfg: Config, setting, key, sw: Stopwatch, beta_scales=()):
    name, n, k, d, norm, link = setting
    t, s = cfg.num_rounds, cfg.num_seeds
    envs, run_keys = _envs_and_keys(key, s, n, k, d, norm, link, cfg.context_mode)
    algos, bounds, kappa = _make_algos(n, k, d, t, norm, link, beta_scales, cfg.flat_max_arms)
    out = {"kappa": kappa, "bounds": bounds, "algos": {}}
    grid = np.unique(np.linspace(1, t, 100).astype(int))
    for a_name, algo in algos.items():
        with sw(f"regret/{name}/{a_name}"):
            res = run_bandit_seeds(algo, envs, run_keys, num_rounds=t)
            cum = np.cumsum(np.asarray(res.regret, np.float64), axis=1)  # [S, T]
        mean = cum.mean(0)
        half = 1.96 * cum.std(0, ddof=1) / math.sqrt(s)  # normal 95% band of the mean
        out["algos"][a_name] = {
            "R_T": float(mean[-1]), "R_T4": float(mean[t // 4 - 1]),
            "R_T_seeds": cum[:, -1].tolist(),
            "switches": float(np.asarray(res.switches)[:, -1].mean()),
            "switches_max": int(np.asarray(res.switches)[:, -1].max()),
            "curve_t": grid.tolist(), "curve_mean": mean[grid - 1].tolist(),
            "curve_lo": (mean - half)[grid - 1].tolist(), "curve_hi": (mean + half)[grid - 1].tolist()}
    return name, out


def _flops(jitted, args) -> float:
    """XLA's flop count of one compiled call (deterministic, unlike wall time)."""
    cost = jitted.lower(*args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float(cost.get("flops", float("nan")))


def _timing(cfg: Config, key):
    """Median wall time of one jitted ``select`` (slate algorithms, O(N K d^2)) and of an
    enumeration UCB over all K^N flattened slates (what a non-slate GLM bandit must do)."""
    k_, d = cfg.timing_items, cfg.timing_dim
    names = ("slate_glm_ofu", "rs_slateglincb", "b_slateglincb_plus")
    rows = []
    for n in cfg.timing_slots:
        algos = _make_algos(n, k_, d, 1000, 2.0, "logistic")[0]

        @jax.jit
        def inputs(key):
            # the contexts and every algorithm's initial state in one compiled call (eagerly,
            # each op of the inits compiles on its own, per N)
            kc, key = jax.random.split(key)
            ctx = jax.random.uniform(kc, (n, k_, d), minval=-1, maxval=1) / math.sqrt(n)
            k_init, k_sel = jax.random.split(jax.random.fold_in(key, n))
            return key, ctx, k_sel, {a: algos[a].init(k_init) for a in names}

        key, ctx, k_sel, states = inputs(key)
        row = {"N": n}
        for a_name in names:
            st = states[a_name]
            sel = jax.jit(algos[a_name].select)
            row[a_name] = time_fn(sel, st, k_sel, ctx, repeats=cfg.timing_repeats)
            row[f"flops_{a_name}"] = _flops(sel, (st, k_sel, ctx))
        if n <= cfg.enum_max_slots:
            v_inv = jax.device_put(np.eye(n * d, dtype=np.float32) / np.float32(5.0))
            theta = jax.device_put(np.zeros(n * d, np.float32))

            @jax.jit
            def enum_select(ctx, theta, v_inv):
                idx = jnp.stack(jnp.meshgrid(*[jnp.arange(k_)] * n, indexing="ij"), -1)
                idx = idx.reshape(-1, n)  # [K^N, N]
                slates = ctx[jnp.arange(n)[None, :], idx].reshape(idx.shape[0], -1)  # [K^N, Nd]
                ucb = slates @ theta + jnp.sqrt(jnp.einsum("sd,de,se->s", slates, v_inv, slates))
                return jnp.argmax(ucb)

            row["enumeration"] = time_fn(enum_select, ctx, theta, v_inv,
                                         repeats=max(3, cfg.timing_repeats // 4))
            row["flops_enumeration"] = _flops(enum_select, (ctx, theta, v_inv))
        rows.append(row)
    return rows


def _icl(cfg: Config, key):
    """Offline in-context example selection stand-in (see README): sklearn digits, PCA
    embedding; N slots each offering K pool examples; a fixed kernel-vote predictor over the
    chosen examples; reward 1 if it predicts the query's label."""
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA

    x, y = load_digits(return_X_y=True)
    emb = PCA(cfg.icl_dim).fit_transform(x / 16.0)  # the default solver here is exact: no draws
    emb = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    n, k, d, t = cfg.icl_slots, cfg.icl_pool, cfg.icl_dim, cfg.icl_rounds
    num = emb.shape[0]
    # host-side index glue in numpy, then one transfer per array (eager jnp ops, jnp.asarray
    # included, would compile one small program each)
    slot_of = np.arange(num) % n  # per-slot pools: example i belongs to pool i mod N
    pools = [np.nonzero(slot_of == i)[0] for i in range(n)]
    pool_size = min(int(p.shape[0]) for p in pools)
    pools = jax.device_put(np.stack([p[:pool_size] for p in pools]).astype(np.int32))  # [N, P]
    emb = jax.device_put(np.asarray(emb, np.float32))
    y = jax.device_put(np.asarray(y, np.int32))

    def round_data(key):
        kq, kc = jax.random.split(key)
        q = jax.random.randint(kq, (), 0, num)
        cand = pools[jnp.arange(n)[:, None],
                     jax.random.randint(kc, (n, k), 0, pool_size)]  # [N, K] example ids
        feats = emb[cand] * emb[q][None, None, :]  # [N, K, d] elementwise query-example product
        feats = feats / math.sqrt(n)  # ||feats|| <= 1/sqrt(N) as in the synthetic setting
        return q, cand, feats

    def predict(q, chosen):
        sims = emb[chosen] @ emb[q]  # [N]
        w = jnp.exp(sims / 0.1)
        votes = jnp.zeros(10).at[y[chosen]].add(w)
        return (jnp.argmax(votes) == y[q]).astype(jnp.float32)

    def run_one(algo, key):
        k0, kr = jax.random.split(key)

        def step(state, tt):
            kd, ks = jax.random.split(jax.random.fold_in(kr, tt))
            q, cand, feats = round_data(kd)
            items, state = algo.select(state, ks, feats)
            chosen = cand[jnp.arange(n), items]
            r = predict(q, chosen)
            return algo.update(state, feats, items, r), r

        _, rewards = jax.lax.scan(step, algo.init(k0), jnp.arange(t))
        return rewards

    out = {}
    keys = jax.random.split(key, cfg.icl_seeds)
    for a_name, algo in (("bandit", make_slate_glm_ofu(num_slots=n, num_items=k, dim=d,
                                                        param_norm_ub=float(math.sqrt(d)) + 1)),
                         ("random", make_random(num_slots=n, num_items=k))):
        rew = np.asarray(jax.jit(jax.vmap(functools.partial(run_one, algo)))(keys))
        out[a_name] = _mean01(rew)
        out[a_name + "_last_half"] = _mean01(rew[:, t // 2:])
    # the best fixed per-slot choice (most similar example per slot), as a ceiling
    def oracle(key):
        def one(tt):
            q, cand, feats = round_data(jax.random.fold_in(key, tt))
            best = jnp.argmax(jnp.sum(feats, -1), axis=1)
            return predict(q, cand[jnp.arange(n), best])
        return jax.vmap(one)(jnp.arange(t))
    out["most_similar"] = _mean01(np.asarray(jax.jit(jax.vmap(oracle))(keys)))
    return out


def _mean01(x: np.ndarray) -> float:
    """jnp.mean of a float32 array of 0/1 values, on the host: the float32 sum is exact (an
    integer), then one float32 division, as jnp.mean does (an eager jnp.mean would compile a
    program per shape)."""
    return float(np.float32(np.sum(x, dtype=np.float64)) / np.float32(x.size))


def run(config: Config, key: jax.Array) -> dict:
    """Run all parts; deterministic given ``key``."""
    k_reg, k_time, k_icl = jax.random.split(key, 3)
    sw = Stopwatch()
    settings = {}
    for i, setting in enumerate(config.settings):
        name, out = _regret_setting(config, setting, jax.random.fold_in(k_reg, i), sw,
                                    config.beta_scales if i == 0 else ())
        settings[name] = out
    with sw("timing_study"):
        timing = _timing(config, k_time)
    with sw("icl"):
        icl = _icl(config, k_icl)
    first = settings[config.settings[0][0]]
    a = first["algos"]
    metrics = {}
    for name in ALGOS:
        metrics[f"regret/{name}"] = a[name]["R_T"]
        metrics[f"switches/{name}"] = a[name]["switches"]
    for name in ("b_slateglincb", "rs_slateglincb"):
        metrics[f"switch_bound/{name}"] = first["bounds"][name]
    metrics["switch_bound/b_slateglincb_plus"] = first["bounds"]["b_slateglincb_plus"]
    metrics["icl_accuracy/bandit"] = icl["bandit"]
    metrics["icl_accuracy/random"] = icl["random"]
    ofu, rs, rnd = a["slate_glm_ofu"]["R_T"], a["rs_slateglincb"]["R_T"], a["random"]["R_T"]
    metrics["ratio/rs_over_ofu"] = rs / ofu
    metrics["ratio/b_plus_over_ofu"] = a["b_slateglincb_plus"]["R_T"] / ofu
    metrics["ratio/b_over_ofu"] = a["b_slateglincb"]["R_T"] / ofu
    metrics["ratio/rs_over_random"] = rs / rnd
    metrics["ratio/ofu_over_random"] = ofu / rnd
    for name in ("rs_slateglincb", "slate_glm_ofu", "b_slateglincb_plus"):
        metrics[f"growth/{name}"] = a[name]["R_T"] / a[name]["R_T4"]
    for sname, out in settings.items():
        for name in ALGOS:
            metrics[f"regret_{sname}/{name}"] = out["algos"][name]["R_T"]
    for sname, out in settings.items():
        for nm in ("rs_glincb_flat", "b_glincb_flat"):
            if nm in out["algos"]:
                metrics[f"regret_{sname}/{nm}"] = out["algos"][nm]["R_T"]
                metrics[f"switches_{sname}/{nm}"] = out["algos"][nm]["switches"]
    if "rs_slateglincb@code_centre" in a:
        metrics["regret_code_centre/rs_slateglincb"] = a["rs_slateglincb@code_centre"]["R_T"]
        metrics["ratio_code_centre/rs_slateglincb_over_ofu"] = (
            a["rs_slateglincb@code_centre"]["R_T"] / ofu)
    sens = []
    for sc in config.beta_scales:
        for base in ("rs_slateglincb", "b_slateglincb_plus"):
            r = a[f"{base}@beta_x{sc:g}"]
            metrics[f"regret_beta_x{sc:g}/{base}"] = r["R_T"]
            metrics[f"ratio_beta_x{sc:g}/{base}_over_ofu"] = r["R_T"] / ofu
            metrics[f"growth_beta_x{sc:g}/{base}"] = r["R_T"] / r["R_T4"]
            sens.append((sc, base, r))
    t3 = {r["N"]: r for r in timing}
    n_lo, n_hi = min(t3), min(max(t3), 6)
    timings = dict(sw.seconds)  # wall-clock numbers: they vary between runs
    timings["time_ratio/rs_select_N%d_over_N%d" % (n_hi, n_lo)] = (
        t3[n_hi]["rs_slateglincb"] / t3[n_lo]["rs_slateglincb"])
    timings["time_ratio/ofu_select_N%d_over_N%d" % (n_hi, n_lo)] = (
        t3[n_hi]["slate_glm_ofu"] / t3[n_lo]["slate_glm_ofu"])
    en = [r for r in timing if "enumeration" in r]
    e_lo, e_hi = en[0]["N"], en[-1]["N"]
    timings["time_ratio/enumeration_N%d_over_N%d" % (e_hi, e_lo)] = (
        en[-1]["enumeration"] / en[0]["enumeration"])
    for r in timing:
        for nm in ("slate_glm_ofu", "rs_slateglincb", "b_slateglincb_plus", "enumeration"):
            if nm in r:
                timings[f"select_seconds/{nm}/N{r['N']}"] = r[nm]
    flops_enum = "flops_ratio/enumeration_N%d_over_N%d" % (e_hi, e_lo)
    flops_rs = "flops_ratio/rs_select_N%d_over_N%d" % (e_hi, e_lo)
    metrics[flops_enum] = en[-1]["flops_enumeration"] / en[0]["flops_enumeration"]
    metrics[flops_rs] = t3[e_hi]["flops_rs_slateglincb"] / t3[e_lo]["flops_rs_slateglincb"]

    all_sw_ok = all(o["algos"][nm]["switches_max"] <= o["bounds"][nm]
                    for o in settings.values() for nm in ("rs_slateglincb", "b_slateglincb",
                                                          "b_slateglincb_plus"))
    setting0 = (f"T = {config.num_rounds}, {config.num_seeds} seeds, setting "
                f"{config.settings[0][0]}")
    claims = [
        claim("switches/b_slateglincb", a["b_slateglincb"]["switches"],
              paper=says("batched_num_batches"),
              criterion=("in every seed and setting, B-SlateGLinCB and B-SlateGLinCB+ use at "
                         "most 2 + ceil(ln ln T) + 1 batches, and RS-SlateGLinCB stays within "
                         "its switch bound"),
              passed=all_sw_ok,
              baselines={"bound 2+ceil(ln ln T)+1": first["bounds"]["b_slateglincb"]},
              note="batches used (max over seeds and settings within the bound: %s)" % all_sw_ok),
        claim("switches/rs_slateglincb", a["rs_slateglincb"]["switches"],
              paper=says("rs_num_parameter_updates"),
              criterion=("in every seed and setting, RS-SlateGLinCB's parameter updates stay "
                         "within the warm-up + determinant bound (and the batched algorithms "
                         "within theirs)"),
              passed=all_sw_ok,
              baselines={"bound (warm-up + det)": first["bounds"]["rs_slateglincb"],
                         "det-part bound": first["bounds"]["rs_slateglincb_det"],
                         "slate_glm_ofu": a["slate_glm_ofu"]["switches"]},
              note="warm-up + determinant refits; the warm-up part of the bound scales with "
                   "kappa (RS-GLinCB's threshold), so only the determinant part is O(N d log T)"),
        claim("ratio/rs_over_ofu", rs / ofu, paper=says("simulation_vs_baselines"),
              criterion="RS-SlateGLinCB's mean regret <= 1.5x Slate-GLM-OFU's (" + setting0 + ")",
              passed=rs / ofu <= 1.5,
              baselines={"slate_glm_ofu": ofu, "rs_slateglincb": rs, "random": rnd},
              note="mean cumulative regret at T=%d over %d seeds, setting %s" % (
                  config.num_rounds, config.num_seeds, config.settings[0][0])),
        claim("ratio/b_plus_over_ofu", metrics["ratio/b_plus_over_ofu"],
              paper=says("modified_b_matches_ofu"),
              criterion="B-SlateGLinCB+'s mean regret <= 1.2x Slate-GLM-OFU's (" + setting0 + ")",
              passed=metrics["ratio/b_plus_over_ofu"] <= 1.2,
              baselines={"b_slateglincb": a["b_slateglincb"]["R_T"]}),
        claim("ratio/rs_over_random", rs / rnd, paper=says("simulation_vs_baselines"),
              criterion="RS-SlateGLinCB's mean regret <= 0.3x the random policy's",
              passed=rs / rnd <= 0.3),
        claim("growth/rs_slateglincb", metrics["growth/rs_slateglincb"],
              paper=says("rs_slateglincb_regret_bound"),
              criterion="R_T / R_{T/4} <= 2.6 for RS-SlateGLinCB (2 for exact sqrt(T) growth, "
                        "4 for linear)",
              passed=metrics["growth/rs_slateglincb"] <= 2.6,
              baselines={"slate_glm_ofu": metrics["growth/slate_glm_ofu"]}),
        claim(flops_rs, metrics[flops_rs], paper=says("per_round_compute"),
              criterion=(f"XLA's flop count of one RS-SlateGLinCB select grows <= 3x from "
                         f"N = {e_lo} to N = {e_hi} slots at K = {config.timing_items} "
                         "(flops, not wall time: deterministic; the wall-clock ratios are in "
                         "the timings)"),
              passed=metrics[flops_rs] <= 3,
              baselines={"enumeration of K^N slates": metrics[flops_enum]}),
        claim("icl_accuracy/bandit", icl["bandit"], paper=says("icl_example_selection"),
              criterion="not tested: SST-2 with an LLM needs hub weights; an offline stand-in "
                        "(digits + PCA + kernel vote) is reported instead",
              passed=None, baselines={"random": icl["random"],
                                      "most_similar": icl["most_similar"]},
              note="offline stand-in (digits + PCA + kernel vote), not SST-2/RoBERTa"),
    ]
    for sc in config.beta_scales:
        rr = metrics[f"ratio_beta_x{sc:g}/rs_slateglincb_over_ofu"]
        claims.append(claim(
            f"ratio_beta_x{sc:g}/rs_slateglincb_over_ofu", rr,
            paper=says("simulation_vs_baselines"),
            criterion=f"sensitivity: with beta x{sc:g}, RS-SlateGLinCB <= 1.5x Slate-GLM-OFU",
            passed=rr <= 1.5,
            baselines={"theory beta": rs / ofu,
                       "b_slateglincb_plus":
                           metrics[f"ratio_beta_x{sc:g}/b_slateglincb_plus_over_ofu"]},
            note=(f"sensitivity only: UCB multiplier beta = {sc:g} x the theory value "
                  f"{_theory_beta(config.settings[0][3], config.num_rounds):.1f}; a scale "
                  "fixed before the run, not a paper setting (the paper's constants are not "
                  "published); the contract metrics use the theory value")))
    tables = []
    for sname, out in settings.items():
        rows = []
        for nm in [*ALGOS, *(x for x in out["algos"] if x not in ALGOS)]:
            r = out["algos"][nm]
            b = out["bounds"].get(nm, "-")
            rows.append((nm, f"{r['R_T']:.1f}", f"{r['R_T4']:.1f}",
                         f"{r['R_T'] / max(r['R_T4'], 1e-12):.2f}",
                         f"{r['switches']:.1f} / {r['switches_max']}",
                         f"{b:.0f}" if isinstance(b, float) else b))
        tables.append(markdown_table(
            ("algorithm", "R_T mean", "R_T/4 mean", "R_T / R_T/4", "switches (mean / max)",
             "bound"), rows,
            title=(f"### Setting {sname} (kappa = {out['kappa']:.1f}, T = {config.num_rounds}, "
                   f"{config.num_seeds} seeds)")))
    ms = lambda r, nm: f"{1e3 * r[nm]:.3f}" if nm in r else "-"  # noqa: E731
    tables.append(markdown_table(
        ("N", "Slate-GLM-OFU", "RS-SlateGLinCB", "B-SlateGLinCB+", "enumeration of K^N"),
        [(r["N"], ms(r, "slate_glm_ofu"), ms(r, "rs_slateglincb"), ms(r, "b_slateglincb_plus"),
          ms(r, "enumeration")) for r in timing],
        title="### Time per select call (ms, median; wall clock, varies between runs)"))
    tables.append(markdown_table(("policy", "accuracy"), list(icl.items()),
                                 title="### In-context example selection stand-in"))
    return {"metrics": metrics, "claims": claims, "timings": timings,
            "data": {"settings": settings, "timing": timing, "icl": icl}, "tables": tables}


def plot(result: dict, out_dir) -> list[pathlib.Path]:
    """Regret curves (mean and 95% band) per setting, and time per round vs N."""
    plt = plotting.pyplot()
    paths = []
    settings = result["data"]["settings"]
    fig, axes = plt.subplots(1, len(settings), figsize=(6 * len(settings), 4), squeeze=False)
    for ax, (sname, out) in zip(axes[0], settings.items()):
        for nm, r in out["algos"].items():
            ax.plot(r["curve_t"], r["curve_mean"], label=nm)
            ax.fill_between(r["curve_t"], r["curve_lo"], r["curve_hi"], alpha=0.2)
        ax.set_title(f"{sname} (kappa={out['kappa']:.1f})")
        ax.set_xlabel("round t")
        ax.set_ylabel("cumulative regret")
        ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(plotting.save(fig, out_dir, "regret_curves", dpi=120, tight=False))
    timing = result["data"]["timing"]
    fig, ax = plt.subplots(figsize=(5, 4))
    ns = [r["N"] for r in timing]
    for nm in ("slate_glm_ofu", "rs_slateglincb", "b_slateglincb_plus"):
        ax.plot(ns, [1e3 * r[nm] for r in timing], "o-", label=nm)
    en = [r for r in timing if "enumeration" in r]
    ax.plot([r["N"] for r in en], [1e3 * r["enumeration"] for r in en], "s--", label="enumeration")
    ax.set_yscale("log")
    ax.set_xlabel("N (slots), K = 7")
    ax.set_ylabel("ms per select")
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(plotting.save(fig, out_dir, "time_vs_N", dpi=120, tight=False))
    return paths
