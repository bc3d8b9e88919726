"""DIVE offline: synthesis diversity, then diversity vs quantity for a next-tool policy.

``run(config, key)``:

1. Synthesis of ``n_synth`` tasks over all 178 tools; replay and solver verification (the raw
   pass rates), the diversity table beside DIVE's and a fixed-toolset baseline (one toolset
   per domain).
2. Diversity vs quantity: 20% of each domain's tools held out (new verb / object pairs of seen
   words). Narrow arm: one fixed toolset per domain of training tools covering every verb and
   object word of the held-out tools; diverse arm: varied toolsets over all training tools.
   Each arm trains ``num_seeds`` policies on the first N/8, N/4, N/2, N of its verified tasks
   (all in one jitted program); success = a greedy rollout reproduces the answer, on
   ``n_eval`` held-out-tool tasks and ``n_eval`` in-distribution (narrow-toolset) tasks; a
   random policy is the floor.
"""

from __future__ import annotations

import math
import pathlib
import random
import time
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from experiments.dive.config import Config
from jaxpapers.benchmarks.dive import policy as pol
from jaxpapers.benchmarks.dive.splits import heldout_split, narrow_toolsets
from jaxpapers.benchmarks.dive.stats import diversity
from jaxpapers.benchmarks.dive.synth import question_leaks, synthesize
from jaxpapers.benchmarks.dive.verify import replay, solver_verified
from jaxpapers.benchmarks.dive.worlds import DOMAINS, domain_tools, registry
from jaxpapers.core import plotting, registry as papers
from jaxpapers.core.report import claim, markdown_table
from jaxpapers.core.rng import numpy_seed

PAPER_TABLE = {"tools": 373, "unique_toolsets": 46398, "unique_call_sequences": 25084,
               "unique_call_graphs": 39810, "topologies": 153}
BASELINE_TABLE = {"tools": 2, "unique_toolsets": 1, "unique_call_sequences": 1231,
                  "unique_call_graphs": 19442, "topologies": 65}


def _verified(task: dict) -> bool:
    return replay(task) and solver_verified(task)


def run(config: Config, key) -> dict[str, Any]:
    cfg = config
    k_seed, k_train = jax.random.split(key)
    seed = numpy_seed(k_seed)
    timings: dict[str, float] = {}
    # 1. synthesis and its diversity
    t0 = time.perf_counter()
    raw = synthesize(cfg.n_synth, seed=seed)
    timings["synth_s"] = time.perf_counter() - t0
    replay_ok = [replay(t) for t in raw]
    solver_ok = [solver_verified(t) for t in raw]
    emitted = [t for t, a, b in zip(raw, replay_ok, solver_ok) if a and b]
    div = diversity(emitted)
    frng = random.Random(seed)
    fixed = {d: sorted(frng.sample(sorted(domain_tools(d)), 15)) for d in DOMAINS}
    fixed_tasks = synthesize(cfg.n_synth, seed=seed + 1, fixed_toolsets=fixed)
    fixed_div = diversity(fixed_tasks)
    m: dict[str, Any] = {
        "tools/total": len(registry()), "tools/domains": len(DOMAINS),
        "synth/tasks": len(emitted),
        "synth/unique_toolsets": div["unique_toolsets"],
        "synth/unique_used_toolsets": div["unique_used_toolsets"],
        "synth/unique_call_sequences": div["unique_call_sequences"],
        "synth/unique_call_graphs": div["unique_call_graphs"],
        "synth/unique_topologies": div["unique_topologies"],
        "synth/tools_covered_frac": div["tools_covered_frac"],
        "synth/groups_per_task": div["groups_per_task"],
        "synth/replay_verified_frac": sum(replay_ok) / len(raw),
        "synth/solver_verified_frac": sum(solver_ok) / len(raw),
        "synth/answer_leaks": sum(question_leaks(t["question"], t["answer"]) for t in emitted),
        "fixed/unique_call_graphs": fixed_div["unique_call_graphs"],
        "fixed/unique_call_sequences": fixed_div["unique_call_sequences"],
        "fixed/tools_covered_frac": fixed_div["tools_covered_frac"],
    }
    # wall-clock: metrics.json's "timings" (the core keeps times out of "metrics")
    timings["synth/seconds_per_1000"] = 1000 * timings["synth_s"] / cfg.n_synth
    # 2. diversity vs quantity
    train_tools, held = heldout_split(cfg.heldout_fraction, seed=seed)
    narrow = narrow_toolsets(train_tools, held, seed=seed)
    held_set, pool = set(held), set(train_tools)
    t1 = time.perf_counter()
    arms = {
        "diverse": synthesize(cfg.n_train, seed=seed + 2, tool_pool=pool, keep=_verified),
        "narrow": synthesize(cfg.n_train, seed=seed + 3, tool_pool=pool,
                             fixed_toolsets=narrow, keep=_verified),
    }
    evals = {
        "heldout": synthesize(cfg.n_eval, seed=seed + 4, keep=lambda t: _verified(t) and any(
            c["tool"] in held_set for c in t["program"])),
        "indist": synthesize(cfg.n_eval, seed=seed + 5, fixed_toolsets=narrow,
                             keep=_verified),
    }
    timings["split_synth_s"] = time.perf_counter() - t1
    chunks, ranges, labels, start = [], [], [], 0
    for arm, tasks in arms.items():
        per_task = [len(t["program"]) + 1 for t in tasks]
        cum = np.cumsum([0] + per_task)
        data = pol.decisions(tasks)
        chunks.append(data)
        for frac in cfg.sizes:
            n_tasks = max(1, int(round(frac * cfg.n_train)))
            ranges.append((start, int(cum[n_tasks])))
            labels.append((arm, frac))
        start += int(cum[-1])
    data = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
    t2 = time.perf_counter()
    params, hist = pol.train_policy(data, k_train, ranges=ranges, num_seeds=cfg.num_seeds,
                                    steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr,
                                    hidden=cfg.hidden)
    timings["train_s"] = time.perf_counter() - t2
    t3 = time.perf_counter()
    per_model = {split: np.stack([pol.rollout_many(params, t, sandboxed=cfg.sandboxed_rollouts)
                                  for t in tqdm(tasks, desc=f"dive rollouts ({split})",
                                                leave=False)], axis=1)
                 for split, tasks in evals.items()}  # [M, tasks]
    success = {}  # (arm, frac, split) -> [S]
    for g, (arm, frac) in enumerate(labels):
        for split in evals:
            rows = per_model[split][g * cfg.num_seeds:(g + 1) * cfg.num_seeds]
            success[(arm, frac, split)] = rows.mean(axis=1)
    for split, tasks in evals.items():
        success[("random", 0.0, split)] = np.asarray([
            np.mean([pol.random_rollout(t, random.Random(seed * 31 + s * 7 + i))
                     for i, t in enumerate(tasks)]) for s in range(cfg.num_seeds)])
    timings["eval_s"] = time.perf_counter() - t3
    m.update(_failing_steps(params, labels, cfg.num_seeds, evals["heldout"], held_set))
    names = {"diverse_quarter": ("diverse", 0.25), "narrow_full": ("narrow", 1.0),
             "diverse_full": ("diverse", 1.0), "random": ("random", 0.0)}
    for name, (arm, frac) in names.items():
        for split in evals:
            m[f"gen/{name}/{split}"] = float(np.mean(success[(arm, frac, split)]))
    diff = success[("diverse", 0.25, "heldout")] - success[("narrow", 1.0, "heldout")]
    m["gen/diff_quarter_vs_narrow"] = float(np.mean(diff))
    m["gen/diff_se"] = float(np.std(diff, ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 \
        else float("nan")
    for arm in ("diverse", "narrow"):
        for frac in cfg.sizes:
            for split in evals:
                m[f"gen_curve/{arm}/{frac:g}/{split}"] = float(np.mean(success[(arm, frac,
                                                                                  split)]))
    m["gen/final_train_acc"] = float(hist["acc"][-1])
    m["split/heldout_tools"] = len(held)
    return _summarise(cfg, m, div, fixed_div, success, timings)


def _failing_steps(params, labels, num_seeds, tasks, held_set) -> dict[str, float]:
    """Teacher-forced decisions on the held-out-tool tasks: accuracy at steps whose tool is
    held out, at steps whose tool was a training tool, at STOP, and the error kinds
    (:data:`~jaxpapers.benchmarks.dive.policy.ERROR_KINDS`) as fractions of all decisions,
    for the diverse arm at N/4 and the narrow arm at N (mean over seeds)."""
    data = pol.decisions(tasks)
    choices = pol.predict(params, data)
    out: dict[str, float] = {}
    for name, want in (("diverse_quarter", ("diverse", 0.25)), ("narrow_full", ("narrow", 1.0))):
        g = labels.index(want)
        per_seed = []
        for s in range(num_seeds):
            rows = pol.error_kinds(tasks, choices[g * num_seeds + s])
            held = [r["kind"] == "correct" for r in rows if r["gold"] in held_set]
            seen = [r["kind"] == "correct" for r in rows
                    if r["gold"] != "STOP" and r["gold"] not in held_set]
            stop = [r["kind"] == "correct" for r in rows if r["gold"] == "STOP"]
            kinds = [sum(r["kind"] == k for r in rows) / len(rows) for k in pol.ERROR_KINDS]
            per_seed.append([np.mean(held), np.mean(seen), np.mean(stop), *kinds])
        mean = np.mean(per_seed, axis=0)
        for key, v in zip(["heldout_step_acc", "seen_step_acc", "stop_acc",
                           *pol.ERROR_KINDS], mean):
            out[f"fail/{name}/{key}"] = float(v)
    return out


def _summarise(cfg, m, div, fixed_div, success, timings) -> dict[str, Any]:
    pid = "dive"
    table = markdown_table(
        ["", "ours (DIVE-style)", "ours: fixed toolset per domain", "DIVE (paper)",
         "deep-research baseline (paper)"],
        [["tools", m["tools/total"], m["tools/total"], PAPER_TABLE["tools"],
          BASELINE_TABLE["tools"]],
         ["tasks", m["synth/tasks"], len(range(cfg.n_synth)), "48k", "-"],
         ["unique toolsets (offered)", div["unique_toolsets"], fixed_div["unique_toolsets"],
          PAPER_TABLE["unique_toolsets"], BASELINE_TABLE["unique_toolsets"]],
         ["unique call sequences", div["unique_call_sequences"],
          fixed_div["unique_call_sequences"], PAPER_TABLE["unique_call_sequences"],
          BASELINE_TABLE["unique_call_sequences"]],
         ["unique call graphs", div["unique_call_graphs"], fixed_div["unique_call_graphs"],
          PAPER_TABLE["unique_call_graphs"], BASELINE_TABLE["unique_call_graphs"]],
         ["R/P topologies", div["unique_topologies"], fixed_div["unique_topologies"],
          PAPER_TABLE["topologies"], BASELINE_TABLE["topologies"]],
         ["tools used", f"{div['tools_covered_frac']:.1%}",
          f"{fixed_div['tools_covered_frac']:.1%}", "-", "-"]])
    gen_rows = []
    for arm in ("diverse", "narrow"):
        for frac in cfg.sizes:
            h = success[(arm, frac, "heldout")]
            i = success[(arm, frac, "indist")]
            gen_rows.append([arm, f"N x {frac:g} = {int(round(frac * cfg.n_train))}",
                             f"{h.mean():.3f} +- {h.std(ddof=1) / math.sqrt(len(h)):.3f}"
                             if len(h) > 1 else f"{h.mean():.3f}",
                             f"{i.mean():.3f}"])
    gen_rows.append(["random", "-", f"{success[('random', 0.0, 'heldout')].mean():.3f}",
                     f"{success[('random', 0.0, 'indist')].mean():.3f}"])
    tables = ["Synthesis diversity (1000 tasks at small)\n\n" + table,
              "Success (rollout reproduces the answer), mean over seeds (+- SE)\n\n"
              + markdown_table(["arm", "training tasks", "held-out tools", "in-distribution"],
                               gen_rows)]
    kinds = ["heldout_step_acc", "seen_step_acc", "stop_acc", *pol.ERROR_KINDS[1:]]
    tables.append(
        "Failing steps on the held-out-tool tasks (teacher-forced decisions, mean over seeds): "
        "accuracy where the gold tool is held out / a training tool / STOP, then each error "
        "kind as a fraction of all decisions\n\n"
        + markdown_table(["arm", *kinds],
                         [[name, *(f"{m[f'fail/{name}/{k}']:.3f}" for k in kinds)]
                          for name in ("diverse_quarter", "narrow_full")]))
    ok_synth = (m["tools/total"] >= 100 and div["unique_toolsets"] >= 0.99 * m["synth/tasks"]
                and div["unique_call_graphs"] >= 0.4 * m["synth/tasks"]
                and div["unique_call_graphs"] > fixed_div["unique_call_graphs"]
                and div["tools_covered_frac"] >= 0.9 and m["synth/answer_leaks"] == 0)
    d, se = m["gen/diff_quarter_vs_narrow"], m["gen/diff_se"]
    indist_ok = min(m["gen/narrow_full/indist"], m["gen/diverse_full/indist"]) \
        >= m["gen/random/indist"] + 0.2
    claims = [
        claim("grounding_by_construction", m["synth/replay_verified_frac"],
              paper=papers.paper_says(pid, "grounding_by_construction"),
              criterion="every synthesised task replays (fresh world, same outputs and answer) "
              "and the solver, reading only the question, specs and lexicon, reproduces its "
              "answer; raw pass rates reported",
              passed=m["synth/replay_verified_frac"] == 1.0
              and m["synth/solver_verified_frac"] == 1.0,
              note=f"solver {m['synth/solver_verified_frac']:.3f}"),
        claim("unique_tool_call_graphs", div["unique_call_graphs"],
              paper=papers.paper_says(pid, "unique_tool_call_graphs"),
              criterion=">= 100 tools in 5 domains; per 1000 tasks >= 99% unique toolsets, "
              ">= 40% unique call graphs and more than the fixed-toolset baseline, >= 90% of "
              "tools used, 0 leaks (the issue's bars; scale not comparable)",
              passed=ok_synth, baselines={"fixed toolset": fixed_div["unique_call_graphs"]},
              note=f"tools used {div['tools_covered_frac']:.1%}"),
        claim("diversity_vs_quantity_data_factor", d,
              paper=papers.paper_says(pid, "diversity_vs_quantity_data_factor"),
              criterion="held-out-tool success of the diverse arm at N/4 minus the narrow arm at "
              "N, paired over seeds: > 0 by more than 2 SE",
              passed=bool(d - 2 * se > 0) if math.isfinite(se) else None,
              baselines={"diverse N/4": m["gen/diverse_quarter/heldout"],
                         "narrow N": m["gen/narrow_full/heldout"],
                         "random": m["gen/random/heldout"]},
              note=f"difference {d:+.3f} +- {se:.3f} (SE over {cfg.num_seeds} seeds)"),
        claim("ood_avg_gain_points", m["gen/diverse_full/heldout"],
              paper=papers.paper_says(pid, "ood_avg_gain_points"),
              criterion="not comparable: an MLP next-tool policy on generated tasks, not "
              "Qwen3-8B on 9 OOD benchmarks; in-distribution both arms at N >= random + 0.2",
              passed=None, baselines={"narrow N in-dist": m["gen/narrow_full/indist"],
                                      "diverse N in-dist": m["gen/diverse_full/indist"],
                                      "random in-dist": m["gen/random/indist"]},
              note="in-distribution floor " + ("held" if indist_ok else "NOT held")),
    ]
    data = {"curve": {f"{a}/{f:g}/{s}": success[(a, f, s)].tolist()
                      for a in ("diverse", "narrow") for f in cfg.sizes
                      for s in ("heldout", "indist")},
            "random": {s: success[("random", 0.0, s)].tolist() for s in ("heldout", "indist")},
            "sizes": list(cfg.sizes), "n_train": cfg.n_train}
    return {"metrics": m, "claims": claims, "tables": tables, "data": data,
            "timings": timings}


def plot(result: dict[str, Any], out_dir) -> list[pathlib.Path]:
    plt = plotting.pyplot()
    data = result["data"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    xs = [f * data["n_train"] for f in data["sizes"]]
    for ax, split in zip(axes, ("heldout", "indist")):
        for arm, style in (("diverse", "o-"), ("narrow", "s--")):
            ys = [np.mean(data["curve"][f"{arm}/{f:g}/{split}"]) for f in data["sizes"]]
            es = [np.std(data["curve"][f"{arm}/{f:g}/{split}"], ddof=1)
                  / math.sqrt(max(len(data["curve"][f"{arm}/{f:g}/{split}"]), 1))
                  if len(data["curve"][f"{arm}/{f:g}/{split}"]) > 1 else 0 for f in
                  data["sizes"]]
            ax.errorbar(xs, ys, yerr=es, fmt=style, label=arm, capsize=3)
        ax.axhline(np.mean(data["random"][split]), color="gray", ls=":", label="random")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training tasks")
        ax.set_title({"heldout": "held-out tools", "indist": "in-distribution"}[split])
    axes[0].set_ylabel("success (answer reproduced)")
    axes[0].legend()
    fig.suptitle("Diversity vs quantity (mean +- SE over seeds)")
    return [plotting.save(fig, out_dir, "diversity_vs_quantity")]
