"""REL offline: shortcuts, the RC sweep (bounded solvers and a small transformer), biology and
chemistry checks; an LLM's accuracy vs RC only when a model server is configured.

``run(config, key)``:

1. Shortcut table: official-style A1-A4 items (float distractors), ours (distractors from the
   answer's distribution) and the RC family, each scored by copy / integer / extrapolation /
   rank heuristics.
2. RC sweep on a 2 x 8 grid over Z_10: bounded solvers (budget b) for k = 1..7; a 2-layer
   transformer per k (all trained in one program); control: k = 1, 2 on 2 x 4 / 8 / 16 grids.
3. Biology: JC69 p-distance against theory; our detector's accuracy vs RC.
4. Chemistry: alkane counts C1..C10, C1 / C3 reference solvers.
5. LLM (only when ``JAXPAPERS_LLM_BASE_URL`` and ``JAXPAPERS_LLM_MODEL`` are set; otherwise no
   socket is opened): accuracy vs RC per family (RC family with and without in-context
   examples, B1, C1, C3) through ``jaxpapers.benchmarks.rel.llm.evaluate``.
"""

from __future__ import annotations

import math
import pathlib
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments.rel.config import Config
from jaxpapers.benchmarks.rel import algebra as A
from jaxpapers.benchmarks.rel import bio, chem, llm
from jaxpapers.benchmarks.rel import model as M
from jaxpapers.agents import OpenAICompatClient
from jaxpapers.core import plotting, registry as papers
from jaxpapers.core.report import claim, markdown_table
from jaxpapers.core.rng import numpy_seed

ALKANES = (1, 1, 1, 2, 3, 5, 9, 18, 35, 75)


def _ops(cols: int, ks) -> np.ndarray:
    ops = np.zeros((len(ks), cols - 1), bool)
    for i, k in enumerate(ks):
        ops[i, :k] = True
    return ops


def run(config: Config, key) -> dict[str, Any]:
    cfg = config
    keys = jax.random.split(key, 8)
    m: dict[str, Any] = {}
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    # 1. shortcuts
    for task in A.TASKS:
        for tag, make in (("official", A.official_items), ("ours", A.our_items)):
            items = make(jax.random.fold_in(keys[0], A.TASKS.index(task)), task, cfg.panel_items)
            sc = A.panel_shortcuts(items)
            for name in A.SHORTCUTS:
                acc = float(np.mean(sc[name] == items["target"]))
                m[f"algebra/shortcut{'_official' if tag == 'official' else ''}/{task}/{name}"] = acc
            if tag == "ours":  # the rule itself: copy (A1, A3, A4), progression (A2)
                rule = sc["extrap"] if task == "a2" else sc["copy"]
                m[f"reference_acc/{task}"] = float(np.mean(rule == items["target"]))
    ks = list(range(1, cfg.cols))
    rc_batches = {k: A.generate_rc(jax.random.fold_in(keys[1], k), cfg.rc_test, k=k,
                                   rows=cfg.rows, cols=cfg.cols, modulus=cfg.modulus,
                                   operands=_ops(cfg.cols, [k])[0]) for k in ks}
    rc3 = rc_batches[3]
    for name, pick in A.shortcut_answers(rc3, modulus=cfg.modulus).items():
        m[f"algebra/shortcut/rc/{name}"] = float(np.mean(np.asarray(pick) == rc3["target"]))
    m["reference_acc/rc"] = float(np.mean([np.mean(np.asarray(A.reference_solver(
        d, modulus=cfg.modulus)) == np.asarray(d["target"])) for d in rc_batches.values()]))
    for k, d in rc_batches.items():
        for b in range(cfg.cols):
            m[f"algebra/bounded_acc/k{k}/b{b}"] = float(np.mean(np.asarray(A.bounded_solver(
                d, budget=b, modulus=cfg.modulus)) == np.asarray(d["target"])))
    timings["algebra_s"] = time.perf_counter() - t0
    # 2. transformers
    t1 = time.perf_counter()
    tkw = dict(steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, d_model=cfg.d_model,
               n_layers=cfg.n_layers, modulus=cfg.modulus)
    curves = {}
    for cols in sorted(set(cfg.control_cols) | {cfg.cols}):
        these = ks if cols == cfg.cols else [1, 2]
        ops = np.repeat(_ops(cols, these), cfg.num_seeds, axis=0)
        params, hist = M.train_rc_models(jax.random.fold_in(keys[2], cols), ops, rows=cfg.rows,
                                         cols=cols, **tkw)
        acc = M.accuracy(params, jax.random.fold_in(keys[3], cols), ops, rows=cfg.rows,
                         cols=cols, num=cfg.rc_test, modulus=cfg.modulus, d_model=cfg.d_model,
                         n_layers=cfg.n_layers).reshape(len(these), cfg.num_seeds).mean(1)
        loss = hist["loss_per_model"].reshape(cfg.steps, len(these), cfg.num_seeds).mean(2)
        for i, k in enumerate(these):
            if cols == cfg.cols:
                m[f"algebra/transformer_acc/k{k}"] = float(acc[i])
            if k in (1, 2):
                m[f"algebra/control_acc/cols{cols}/k{k}"] = float(acc[i])
            curves[f"cols{cols}/k{k}"] = loss[:, i].tolist()
    timings["transformer_s"] = time.perf_counter() - t1
    # 3. biology
    t2 = time.perf_counter()
    errs = []
    with jax.enable_x64(True):
        for d in (0.1, 0.5, 1.0):
            aln = bio.simulate_alignment(jax.random.fold_in(keys[4], int(d * 10)),
                                         jnp.array([-1, 0]), jnp.array([0.0, d]),
                                         num_sites=cfg.jc_sites)
            p = float(np.mean(np.asarray(aln[0]) != np.asarray(aln[1])))
            errs.append(abs(p - float(bio.jc_pdistance_theory(d))))
    m["bio/jc_pdist_max_abs_err"] = max(errs)
    for rc in cfg.bio_rcs:
        ok = []
        for i in range(cfg.bio_items):
            item = bio.generate_b1(jax.random.fold_in(keys[5], rc * 1000 + i),
                                   num_leaves=cfg.bio_leaves, rc=rc,
                                   num_sites=cfg.bio_sites, yes=i % 2 == 0)
            answer, _ = bio.detect_convergence(item["alignment"], item["tree"])
            ok.append(answer == item["answer"])
        m[f"bio/detector_acc/rc{rc}"] = float(np.mean(ok))
    m["reference_acc/b1"] = 1.0  # the generator's own label (no solver needed: planted)
    timings["bio_s"] = time.perf_counter() - t2
    # 4. chemistry
    t3 = time.perf_counter()
    counts = [chem.count_isomers(f"C{n}H{2 * n + 2}") for n in range(1, 11)]
    m["chem/alkane_counts_match"] = float(tuple(counts) == ALKANES)
    seed = numpy_seed(keys[6])
    c1 = [chem.generate_c1(seed + i, n=5) for i in range(cfg.chem_items)]
    m["reference_acc/c1"] = float(np.mean([chem.solve_c1(x) == x["answer"] for x in c1]))
    c3 = [chem.generate_c3(seed + i, formula="C5H12O", num_given=7)
          for i in range(cfg.chem_items)]
    m["reference_acc/c3"] = float(np.mean([chem.solve_c3(x) == x["answer"] for x in c3]))
    timings["chem_s"] = time.perf_counter() - t3
    # 5. LLM (off unless configured)
    t4 = time.perf_counter()
    result = llm_stage(cfg, keys[7])
    m["llm/enabled"] = float(result is not None)
    if result is not None:
        for fam, by_rc in result["accuracy"].items():
            for rc, a in by_rc.items():
                m[f"llm/acc/{fam}/rc{rc}"] = a
        m["llm/num_errors"] = float(result["num_errors"])
        timings["llm_s"] = time.perf_counter() - t4
    return _summarise(cfg, m, curves, timings)


def llm_items(cfg: Config, key) -> list[dict]:
    """The LLM stage's items: the RC family (k = 1..cols-1 on llm_rows x cols, unique rule, with
    each of llm_shots in-context examples), B1 at each bio RC (half yes), C1 (n = 5, 10) and C3
    (C4H10O, C5H12O: RC 7, 14)."""
    keys = jax.random.split(key, 4)
    items = []
    for k in range(1, cfg.cols):
        kk = jax.random.fold_in(keys[0], k)
        ops = _ops(cfg.cols, [k])[0]
        batch = A.generate_rc(kk, cfg.llm_items, k=k, rows=cfg.llm_rows, cols=cfg.cols,
                              modulus=cfg.modulus, operands=ops)
        for shots in cfg.llm_shots:
            examples = None if shots == 0 else A.generate_rc(
                jax.random.fold_in(kk, 1000 + shots), shots, k=k, rows=cfg.llm_rows,
                cols=cfg.cols, modulus=cfg.modulus, operands=ops)
            items += llm.rc_items(batch, modulus=cfg.modulus, examples=examples)
    b1 = [bio.generate_b1(jax.random.fold_in(keys[1], rc * 1000 + i),
                          num_leaves=max(cfg.llm_bio_leaves, 2 * rc + 2), rc=rc,
                          num_sites=cfg.bio_sites, yes=i % 2 == 0)
          for rc in cfg.bio_rcs for i in range(cfg.llm_items)]
    items += llm.biology_items(b1)
    seed = numpy_seed(keys[2])
    items += llm.chemistry_items([chem.generate_c1(seed + i, n=n) for n in (5, 10)
                                  for i in range(cfg.llm_items)])
    items += llm.chemistry_items([chem.generate_c3(seed + i, formula=f, num_given=3)
                                  for f in ("C4H10O", "C5H12O") for i in range(cfg.llm_items)])
    return items


def llm_stage(cfg: Config, key, client=None) -> dict[str, Any] | None:
    """Run the LLM stage with ``client`` (default: ``OpenAICompatClient.from_env()``); None,
    without building items or opening a socket, when no LLM is configured."""
    client = OpenAICompatClient.from_env() if client is None else client
    if client is None:
        return None
    return llm.evaluate(client, llm_items(cfg, key), cache=cfg.llm_cache or None,
                        max_tokens=cfg.llm_max_tokens, progress=True)


def _summarise(cfg, m, curves, timings) -> dict[str, Any]:
    pid = "rel"
    ks = list(range(1, cfg.cols))
    acc = [m[f"algebra/transformer_acc/k{k}"] for k in ks]
    rises = max(b - a for a, b in zip(acc, acc[1:]))
    ctrl = [m[f"algebra/control_acc/cols{c}/k{k}"] for c in cfg.control_cols for k in (1, 2)]
    ctrl_spread = max(max(m[f"algebra/control_acc/cols{c}/k{k}"] for c in cfg.control_cols)
                      - min(m[f"algebra/control_acc/cols{c}/k{k}"] for c in cfg.control_cols)
                      for k in (1, 2))
    bounded_ok = all(
        (m[f"algebra/bounded_acc/k{k}/b{b}"] == 1.0) if b >= k
        else abs(m[f"algebra/bounded_acc/k{k}/b{b}"] - 1 / 8) <= 0.03
        for k in ks for b in range(cfg.cols))
    claims = [
        claim("algebra/transformer_acc/k7", acc[-1],
              paper=papers.paper_says(pid, "accuracy_vs_relational_complexity"),
              criterion="a small transformer trained per k on the 2 x 8 RC family (fixed entity "
              "count): k = 1 >= 0.9, k = 7 <= 0.175, never up by more than 0.04 from k to k + 1 "
              "(ours is a trained model, not a frontier LLM)",
              passed=acc[0] >= 0.9 and acc[-1] <= 0.175 and rises <= 0.04,
              baselines={f"k{k}": a for k, a in zip(ks, acc)},
              note=f"largest rise {rises:+.3f}; control k = 1, 2 on 2 x {cfg.control_cols} "
              f"grids spread {ctrl_spread:.3f}"),
        claim("algebra/control_spread", ctrl_spread,
              paper=papers.paper_says(pid, "accuracy_vs_relational_complexity"),
              criterion="the entity count alone does not cause it: k = 1, 2 accuracy within "
              "0.05 across 2 x 4 / 8 / 16 grids",
              passed=ctrl_spread <= 0.05, baselines={"min": min(ctrl), "max": max(ctrl)}),
        claim("algebra/bounded_acc/k7/b6", m["algebra/bounded_acc/k7/b6"],
              paper=papers.paper_says(pid, "rc_definition"),
              criterion="a solver binding b cells: exact for b >= k, 1/8 +- 0.03 for b < k, "
              "k = 1..7 (RC = k by construction)",
              passed=bounded_ok),
        claim("num_domains", 3, paper=papers.paper_says(pid, "num_domains"),
              criterion="generators and reference solvers in algebra, biology, chemistry; "
              "reference accuracy 1 on each (B1 labels are planted)",
              passed=all(m[f"reference_acc/{t}"] == 1.0
                         for t in ("a1", "a2", "a3", "a4", "rc", "c1", "c3"))
              and m["chem/alkane_counts_match"] == 1.0),
    ]
    if m.get("llm/enabled"):
        fams = sorted({k.split("/")[2] for k in m if k.startswith("llm/acc/")})
        rc_acc = [m.get(f"llm/acc/rc/rc{k}") for k in ks]
        if all(a is not None for a in rc_acc):
            up = max(b - a for a, b in zip(rc_acc, rc_acc[1:]))
            claims.append(claim(
                "llm/acc/rc/rc7", rc_acc[-1],
                paper=papers.paper_says(pid, "accuracy_vs_relational_complexity"),
                criterion=f"the configured LLM on the {cfg.llm_rows} x {cfg.cols} RC family: "
                "accuracy at the largest k below k = 1, never up by more than 0.1 from k to "
                f"k + 1 ({cfg.llm_items} items per k: coarse)",
                passed=rc_acc[-1] < rc_acc[0] and up <= 0.1,
                baselines={f"k{k}": a for k, a in zip(ks, rc_acc)}))
    else:
        fams = []
    sc_rows = []
    for task in (*A.TASKS, "rc"):
        row = [task]
        for name in A.SHORTCUTS:
            ours = m[f"algebra/shortcut/{task}/{name}"]
            off = m.get(f"algebra/shortcut_official/{task}/{name}")
            row.append(f"{ours:.2f}" + (f" (official {off:.2f})" if off is not None else ""))
        sc_rows.append(row)
    tables = [
        "Shortcut accuracy (ours; official-style items in brackets; chance 0.125)\n\n"
        + markdown_table(["task", *A.SHORTCUTS], sc_rows),
        "RC sweep on 2 x 8 grids over Z_10 (transformer accuracy, bounded solver at b = k - 1)"
        "\n\n" + markdown_table(["k", "transformer", "bounded b = k - 1", "bounded b = k"],
                                [[k, f"{m[f'algebra/transformer_acc/k{k}']:.3f}",
                                  f"{m[f'algebra/bounded_acc/k{k}/b{k - 1}']:.3f}",
                                  f"{m[f'algebra/bounded_acc/k{k}/b{k}']:.3f}"] for k in ks]),
        "Biology detector (ours, not the paper's) accuracy vs RC\n\n"
        + markdown_table(["rc", "accuracy"], [[rc, f"{m[f'bio/detector_acc/rc{rc}']:.2f}"]
                                              for rc in cfg.bio_rcs]),
    ]
    if fams:
        rcs = sorted({int(k.rsplit("/rc", 1)[1]) for k in m if k.startswith("llm/acc/")})
        tables.append("LLM accuracy by family and RC (family@S: S in-context examples; "
                      f"{int(m['llm/num_errors'])} failed requests count as wrong)\n\n"
                      + markdown_table(["family", *[f"rc {r}" for r in rcs]], [
                          [f, *[(f"{m[f'llm/acc/{f}/rc{r}']:.2f}"
                                 if f"llm/acc/{f}/rc{r}" in m else "") for r in rcs]]
                          for f in fams]))
    data = {"curves": curves, "ks": ks, "acc": acc,
            "control": {f"{c}/{k}": m[f"algebra/control_acc/cols{c}/k{k}"]
                        for c in cfg.control_cols for k in (1, 2)}}
    return {"metrics": m, "claims": claims, "tables": tables, "data": data,
            "timings": timings}


def plot(result: dict[str, Any], out_dir) -> list[pathlib.Path]:
    plt = plotting.pyplot()
    data = result["data"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    axes[0].plot(data["ks"], data["acc"], "o-", label="transformer (2 x 8)")
    axes[0].axhline(1 / 8, color="gray", ls=":", label="chance")
    axes[0].set_xlabel("relational complexity k")
    axes[0].set_ylabel("accuracy")
    axes[0].legend()
    for name, curve in data["curves"].items():
        axes[1].plot(curve, label=name, lw=1)
    axes[1].axhline(math.log(8), color="gray", ls=":")
    axes[1].set_xlabel("step")
    axes[1].set_ylabel("training loss (log 8 = chance)")
    axes[1].legend(fontsize=6, ncol=2)
    fig.suptitle("REL RC family: accuracy vs k and loss curves")
    return [plotting.save(fig, out_dir, "rc_sweep")]
