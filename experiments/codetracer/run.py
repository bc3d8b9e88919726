"""CodeTracer reproduction: watermarking the byte LM's code completions.

1. Prompts: the ``prompt_len`` held-out bytes ending right after a ``def ...:`` line.
2. Generation: ``num_bytes`` bytes at ``temperature`` with the same sampling keys for every scheme
   (paired): ``none``, ``kgw``, ``sweet``, ``ewd`` (MarkLLM's defaults) and ``codetracer`` (the
   reconstructed policy, trained once by GRPO on training-file prompts) at each delta.
3. Detection (all z-scores deduplicated over (context, byte) pairs; SWEET and EWD recompute the
   LM's entropies by teacher forcing, as their detectors do): AUROC against the unwatermarked
   generations at several lengths, TPR at z > 4.
4. Quality: line validity (share of complete lines that parse; paired bootstrap of the drop),
   bits/byte under the plain LM, and the share of prompt + completion that runs cleanly in the
   sandbox (:mod:`jaxpapers.core.sandbox`).
5. Null: held-out human code windows scored with many keys: false-positive rates at z > 4 of
   plain and deduplicated KGW, SWEET and EWD.
"""

from __future__ import annotations

import functools
import pathlib
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments.codetracer.config import Config
from jaxpapers import lm
from jaxpapers import watermark as wm
from jaxpapers.core import plotting, registry, rng
from jaxpapers.core.report import claim, markdown_table
from jaxpapers.core.timing import Stopwatch
from jaxpapers.watermark import codetracer as ct

says = functools.partial(registry.paper_says, "codetracer")
_DEF_LINE = re.compile(rb"(?m)^[ \t]*def [^\n]*:[ \t]*\n")


def _def_prompts(text: np.ndarray, n: int, plen: int, r: np.random.Generator) -> np.ndarray:
    """[n, plen] int32: the ``plen`` bytes ending right after ``def ...:`` lines of ``text``."""
    data = np.asarray(text, np.uint8).tobytes()
    ends = np.array([m.end() for m in _DEF_LINE.finditer(data) if m.end() >= plen])
    if ends.size < n:
        raise ValueError(f"only {ends.size} def lines in the text, {n} prompts asked")
    pick = np.sort(r.choice(ends.size, n, replace=False))
    return np.stack([np.frombuffer(data[e - plen:e], np.uint8) for e in ends[pick]]).astype(
        np.int32)


def auroc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Area under the ROC curve: P(score_pos > score_neg) + P(tie) / 2 (Mann-Whitney)."""
    pos, neg = np.asarray(pos, np.float64), np.asarray(neg, np.float64)
    allv = np.concatenate([pos, neg])
    order = np.argsort(allv, kind="mergesort")
    ranks = np.empty(allv.size)
    sorted_v = allv[order]
    i = 0
    while i < allv.size:  # average ranks over ties
        j = i
        while j + 1 < allv.size and sorted_v[j + 1] == sorted_v[i]:
            j += 1
        ranks[order[i:j + 1]] = 0.5 * (i + j) + 1
        i = j + 1
    r_pos = ranks[:pos.size].sum()
    return float((r_pos - pos.size * (pos.size + 1) / 2) / (pos.size * neg.size))


@functools.partial(jax.jit, static_argnames=("config",))
def _lm_view(params, seq, config, gamma, delta):
    """Teacher-forced LM view of ``seq`` [B, T]: per position t >= 1 the entropy, spike entropy
    and bits of the distribution that predicted ``seq[:, t]`` (position 0: zeros)."""
    logits = lm.model._forward_impl(params, seq[:, :-1], config)
    ent = wm.entropy(logits)
    se = wm.spike_entropy(logits, gamma=gamma, delta=delta)
    logp = jax.nn.log_softmax(logits, axis=-1)
    bits = -jnp.take_along_axis(logp, seq[:, 1:, None], axis=-1)[..., 0] / jnp.log(2.0)
    pad = lambda a: jnp.pad(a, ((0, 0), (1, 0)))  # noqa: E731
    return pad(ent), pad(se), pad(bits)


@functools.partial(jax.jit, static_argnames=("kind", "dedup"))
def _scores(seq, ent, se, key, gamma, length, kind, dedup):
    """z of every row of ``seq`` [B, T] (first byte = context) with one detector."""
    def one(s, e, p):
        if kind == "sweet":
            w = wm.sweet_weights(e)
        elif kind == "ewd":
            w = wm.ewd_weights(p, length=length)
        else:
            w = None
        return wm.kgw_z(s, key=key, gamma=gamma, weights=w, dedup=dedup, length=length)
    return jax.vmap(one)(seq, ent, se)


def _detector(scheme: str) -> str:
    return {"sweet": "sweet", "ewd": "ewd"}.get(scheme, "kgw")


def _validity(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ok = np.zeros(len(tokens))
    tot = np.zeros(len(tokens))
    for i, row in enumerate(np.asarray(tokens, np.uint8)):
        ok[i], tot[i] = wm.line_validity(row.tobytes())
    return ok, tot


def _exec_share(prompts, tokens, n, timeout_s=2.0) -> float | None:
    from jaxpapers.core import sandbox

    if not sandbox.available():
        return None
    ok = 0
    for p, t in zip(np.asarray(prompts[:n], np.uint8), np.asarray(tokens[:n], np.uint8)):
        text = (p.tobytes() + t.tobytes()).decode("utf-8", "replace")
        text = text[text.find("\n") + 1:]  # drop the prompt's partial first line
        text = text[:text.rfind("\n") + 1]  # cut at the last full line
        res = sandbox.run_python(text, timeout_s=timeout_s, memory_mb=256)
        ok += res.status == "ok"
    return ok / n


def _detection_speed(runs, prompts, config: Config, loop_rows: int = 16) -> dict[str, float]:
    """Sequences per second of the jitted vmap detector vs a position-by-position Python loop
    (MarkLLM's way; :mod:`experiments.codetracer.loop_detector`) on the KGW-watermarked texts at
    the headline length; also the largest |z| difference between the two (a cross-check)."""
    import time

    from experiments.codetracer.loop_detector import kgw_z_loop

    out = runs[("kgw", config.headline_delta)]
    seq = jnp.concatenate([jnp.asarray(prompts[:, -1:]), out.tokens], axis=1)
    zeros = jnp.zeros(seq.shape, jnp.float32)
    length = config.headline_length + 1
    args = (seq, zeros, zeros, np.uint32(config.wm_key), config.gamma, length)
    z = np.asarray(_scores(*args, kind="kgw", dedup=True))  # compiled already: warm
    reps = 5
    t0 = time.perf_counter()
    for _ in range(reps):
        jax.block_until_ready(_scores(*args, kind="kgw", dedup=True))
    jax_rate = reps * seq.shape[0] / (time.perf_counter() - t0)
    rows = np.asarray(seq[:loop_rows])
    t0 = time.perf_counter()
    z_loop = np.array([kgw_z_loop(r, key=config.wm_key, gamma=config.gamma, length=length)
                       for r in rows])
    loop_rate = len(rows) / (time.perf_counter() - t0)
    return {"speed/jax_seqs_per_s": jax_rate, "speed/loop_seqs_per_s": loop_rate,
            "speed/ratio": jax_rate / loop_rate,
            "speed/max_abs_z_diff": float(np.max(np.abs(z_loop - z[:len(rows)])))}


def run(config: Config, key) -> dict[str, Any]:
    """Everything random derives from ``key``: prompt choice, sampling, GRPO, null keys."""
    sw = Stopwatch()
    k_prompts, k_gen, k_grpo, k_null, k_boot = jax.random.split(key, 5)
    preset = {"tiny": lm.tiny, "small": lm.small}[config.lm_preset]()
    cfg, tc = preset
    with sw("load_lm"):
        params = lm.load_or_train(cfg, tc, key=jax.random.key(config.lm_seed))
    train_text, held_text = lm.corpus_tokens(tc)
    r = rng.numpy_rng(k_prompts)
    prompts = _def_prompts(held_text, config.num_prompts, config.prompt_len, r)
    train_prompts = _def_prompts(train_text, max(64, config.grpo_prompts * 4),
                                 config.prompt_len, r)

    with sw("grpo"):
        tracer0 = ct.CodeTracer(delta=config.headline_delta, k=config.topk)
        grpo = ct.GRPOConfig(prompts_per_step=config.grpo_prompts, group=config.grpo_group,
                             num_bytes=config.grpo_bytes, temperature=config.temperature,
                             lam=config.grpo_lam, process_weight=config.grpo_process,
                             learning_rate=config.grpo_lr, gamma=config.gamma,
                             wm_key=config.wm_key, gate_init=config.grpo_gate_init)
        policy, history = ct.train_codetracer(params, train_prompts, lm_config=cfg,
                                              key=k_grpo, num_steps=config.grpo_steps,
                                              tracer=tracer0, config=grpo)

    runs: dict[tuple[str, float], Any] = {}
    with sw("generate"):
        gen = functools.partial(wm.generate, params, jnp.asarray(prompts), config=cfg,
                                key=k_gen, num_bytes=config.num_bytes,
                                temperature=config.temperature, wm_key=config.wm_key,
                                gamma=config.gamma)
        runs[("none", 0.0)] = gen(processor=wm.Scheme("none"))
        tracer = ct.CodeTracer(delta=config.headline_delta, k=config.topk)
        for d in config.deltas:  # delta is traced: one compile per scheme
            for s in ("kgw", "sweet", "ewd"):
                runs[(s, d)] = gen(processor=wm.Scheme(s), processor_params=jnp.float32(d))
            runs[("codetracer", d)] = gen(processor=tracer,
                                          processor_params=(policy, jnp.float32(d)))

    metrics: dict[str, float] = {}
    scores: dict[tuple[str, float, str, int], np.ndarray] = {}
    quality = {}
    with sw("detect"):
        for (s, d), out in runs.items():
            seq = jnp.concatenate([jnp.asarray(prompts[:, -1:]), out.tokens], axis=1)
            full = jnp.concatenate([jnp.asarray(prompts), out.tokens], axis=1)
            ent, se, bits = _lm_view(params, full, cfg, config.gamma,
                                     config.headline_delta)
            p = config.prompt_len - 1  # seq[:, j] = full[:, p + j]
            ent, se, bits = ent[:, p:], se[:, p:], bits[:, p + 1:]
            quality[(s, d)] = {"bits": float(jnp.mean(bits)),
                               "valid": _validity(np.asarray(out.tokens))}
            kinds = ("kgw", "sweet", "ewd") if s == "none" else (_detector(s),)
            for kind in kinds:
                for length in config.lengths:
                    z = _scores(seq, ent, se, np.uint32(config.wm_key), config.gamma, length + 1,
                                kind=kind, dedup=True)
                    scores[(s, d, kind, length)] = np.asarray(z)
        for (s, d) in runs:
            if s == "none":
                continue
            kind = _detector(s)
            for length in config.lengths:
                a = auroc(scores[(s, d, kind, length)], scores[("none", 0.0, kind, length)])
                metrics[f"auroc/{s}/d{d:g}/{length}"] = a
                metrics[f"tpr4/{s}/d{d:g}/{length}"] = float(np.mean(
                    scores[(s, d, kind, length)] > config.z_threshold))
            metrics[f"fpr_gen/{s}/d{d:g}"] = float(np.mean(
                scores[("none", 0.0, kind, config.headline_length)] > config.z_threshold))
    with sw("speed"):  # rates vary between runs: kept out of the metrics (determinism test)
        speed = _detection_speed(runs, prompts, config)
    metrics["speed/loop_agrees"] = float(speed["speed/max_abs_z_diff"] < 1e-4)
    hd, hl = config.headline_delta, config.headline_length
    for s in ("kgw", "sweet", "ewd", "codetracer"):
        metrics[f"auroc/{s}"] = metrics[f"auroc/{s}/d{hd:g}/{hl}"]
        metrics[f"tpr4/{s}"] = metrics[f"tpr4/{s}/d{hd:g}/{hl}"]

    # validity (pooled share of complete lines that parse) with a paired bootstrap of the drop
    br = rng.numpy_rng(k_boot)
    ok0, tot0 = quality[("none", 0.0)]["valid"]
    idx = br.integers(0, len(ok0), (config.bootstrap, len(ok0)))
    metrics["validity/none"] = float(ok0.sum() / max(tot0.sum(), 1))
    metrics["bpb/none"] = quality[("none", 0.0)]["bits"]
    for (s, d), q in quality.items():
        if s == "none":
            continue
        ok, tot = q["valid"]
        v = float(ok.sum() / max(tot.sum(), 1))
        drops = (ok0[idx].sum(1) / np.maximum(tot0[idx].sum(1), 1)
                 - ok[idx].sum(1) / np.maximum(tot[idx].sum(1), 1))
        metrics[f"validity/{s}/d{d:g}"] = v
        metrics[f"validity_drop/{s}/d{d:g}"] = metrics["validity/none"] - v
        metrics[f"validity_drop_lo/{s}/d{d:g}"] = float(np.percentile(drops, 2.5))
        metrics[f"validity_drop_hi/{s}/d{d:g}"] = float(np.percentile(drops, 97.5))
        metrics[f"bpb/{s}/d{d:g}"] = q["bits"]
        if d == hd:
            metrics[f"validity/{s}"] = v
    metrics["validity/lines_per_scheme"] = float(tot0.sum())

    notes = []
    with sw("sandbox"):
        for s in ("none", "kgw", "sweet", "ewd", "codetracer") if config.exec_per_scheme else ():
            out = runs[(s, 0.0 if s == "none" else hd)]
            share = _exec_share(prompts, np.asarray(out.tokens), config.exec_per_scheme)
            if share is None:
                notes.append("sandbox unavailable (no bubblewrap): exec/* not measured")
                break
            metrics[f"exec/{s}"] = share

    with sw("null"):
        windows = lm.heldout_windows(tc, seq_len=config.null_len,
                                     num_windows=config.null_windows)
        ent, se, _ = _lm_view(params, jnp.asarray(windows), cfg, config.gamma, hd)
        keys = rng.numpy_rng(k_null).integers(0, 2 ** 32, config.null_keys, dtype=np.uint64)
        w = jnp.asarray(windows)
        fpr = {}
        for name, kind, dedup in (("kgw_plain", "kgw", False), ("kgw_dedup", "kgw", True),
                                  ("sweet", "sweet", True), ("ewd", "ewd", True)):
            zs = np.stack([np.asarray(_scores(w, ent, se, np.uint32(int(k)), config.gamma,
                                              config.null_len, kind=kind, dedup=dedup))
                           for k in keys])
            fpr[name] = zs
            metrics[f"fpr_null/{name}"] = float(np.mean(zs > config.z_threshold))
            metrics[f"null_z_sd/{name}"] = float(np.std(zs))

    metrics["grpo/reward_first"] = float(np.mean(history["reward"][:max(1, len(
        history["reward"]) // 5)])) if config.grpo_steps else 0.0
    metrics["grpo/reward_last"] = float(np.mean(history["reward"][-max(1, len(
        history["reward"]) // 5):])) if config.grpo_steps else 0.0
    metrics["codetracer/gate_rate"] = float(np.mean(np.asarray(
        runs[("codetracer", hd)].aux["gate"])))

    claims = _claims(metrics, config)
    rows = []
    for s in ("kgw", "sweet", "ewd", "codetracer"):
        for d in config.deltas:
            rows.append((s, d, *[metrics[f"auroc/{s}/d{d:g}/{n}"] for n in config.lengths],
                         metrics[f"tpr4/{s}/d{d:g}/{hl}"], metrics[f"validity/{s}/d{d:g}"],
                         f"[{metrics[f'validity_drop_lo/{s}/d{d:g}']:.3f}, "
                         f"{metrics[f'validity_drop_hi/{s}/d{d:g}']:.3f}]",
                         metrics[f"bpb/{s}/d{d:g}"]))
    table = markdown_table(("scheme", "delta", *[f"AUROC {n} B" for n in config.lengths],
                            f"TPR z>4 ({hl} B)", "validity", "validity drop 95% CI",
                            "bits/byte (plain LM)"), rows)
    null_table = markdown_table(("detector", "FPR z>4 (human code)", "sd of z"),
                                [(n, metrics[f"fpr_null/{n}"], metrics[f"null_z_sd/{n}"])
                                 for n in fpr])
    head = (f"unwatermarked: validity {metrics['validity/none']:.3f} over "
            f"{int(tot0.sum())} lines, bits/byte {metrics['bpb/none']:.3f}. Detection speed "
            f"({hl} bytes, dedup KGW): jitted vmap {speed['speed/jax_seqs_per_s']:.0f} seq/s, "
            f"a position-by-position Python loop (MarkLLM's way) "
            f"{speed['speed/loop_seqs_per_s']:.0f} seq/s ({speed['speed/ratio']:.0f}x; "
            f"max |z| difference {speed['speed/max_abs_z_diff']:.1e}). CodeTracer's gate was on "
            f"at {metrics['codetracer/gate_rate']:.2f} of its steps; GRPO reward "
            f"{metrics['grpo/reward_first']:.3f} -> {metrics['grpo/reward_last']:.3f}")
    return {"metrics": metrics, "claims": claims,
            "tables": [head, table, null_table] + [f"Note: {n}" for n in notes],
            "data": {"history": {k: np.asarray(v).tolist() for k, v in history.items()},
                     "lengths": list(config.lengths), "deltas": list(config.deltas),
                     "speed": speed},
            "timings": sw.seconds}


def _claims(m: dict[str, float], config: Config) -> list[dict]:
    hd, hl = config.headline_delta, config.headline_length
    sweet_a, ct_a = m["auroc/sweet"], m["auroc/codetracer"]
    drop = {s: m[f"validity_drop/{s}/d{hd:g}"] for s in ("kgw", "sweet", "ewd", "codetracer")}
    return [
        claim("auroc/codetracer", ct_a, paper=says("watermark_detectability_vs_sota"),
              criterion=f"CodeTracer's AUROC (dedup z, no LM) >= SWEET's - 0.01 at delta {hd:g}, "
                        f"{hl} bytes, against unwatermarked generations with the same sampling "
                        "keys (the issue's bar, fixed before the run)",
              passed=ct_a >= sweet_a - 0.01,
              baselines={"kgw": m["auroc/kgw"], "sweet": sweet_a, "ewd": m["auroc/ewd"]}),
        claim(f"validity_drop/codetracer/d{hd:g}", drop["codetracer"],
              paper=says("code_functionality_vs_sota"),
              criterion="CodeTracer's drop in line validity (unwatermarked minus watermarked, "
                        "paired prompts and keys) <= SWEET's drop + 0.02",
              passed=drop["codetracer"] <= drop["sweet"] + 0.02, baselines=drop),
        claim("auroc/sweet", sweet_a, paper=says("statistically_detectable"),
              criterion=f"the SWEET baseline reaches AUROC >= 0.93 at delta {hd:g}, {hl} bytes "
                        "(the issue's sanity bar for the baselines at this scale)",
              passed=sweet_a >= 0.93, baselines={"kgw": m["auroc/kgw"], "ewd": m["auroc/ewd"]}),
        claim("fpr_null/kgw_dedup", m["fpr_null/kgw_dedup"], paper=says("statistically_detectable"),
              criterion="on human held-out code (many keys) the deduplicated KGW, SWEET and EWD "
                        "tests keep FPR(z > 4) <= 0.01 (plain KGW beside: repeated byte pairs "
                        "break its null)",
              passed=max(m["fpr_null/kgw_dedup"], m["fpr_null/sweet"], m["fpr_null/ewd"]) <= 0.01,
              baselines={"kgw_plain": m["fpr_null/kgw_plain"], "sweet": m["fpr_null/sweet"],
                         "ewd": m["fpr_null/ewd"]}),
    ]


def plot(result: dict[str, Any], out_dir) -> list[pathlib.Path]:
    plt = plotting.pyplot()
    m = result["metrics"]
    lengths, deltas = result["data"]["lengths"], result["data"]["deltas"]
    paths = []
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for s, mk in (("kgw", "o"), ("sweet", "s"), ("ewd", "^"), ("codetracer", "D")):
        xs = [m[f"validity_drop/{s}/d{d:g}"] for d in deltas]
        ys = [m[f"auroc/{s}/d{d:g}/{lengths[-1] if len(lengths) < 2 else lengths[1]}"]
              for d in deltas]
        ax.plot(xs, ys, mk + "-", label=s)
        for d, x, y in zip(deltas, xs, ys):
            ax.annotate(f"{d:g}", (x, y), fontsize=7)
    ax.set_xlabel("line-validity drop vs unwatermarked")
    ax.set_ylabel("AUROC")
    ax.legend()
    paths.append(plotting.save(fig, out_dir, "auroc_vs_validity_drop"))
    fig, ax = plt.subplots(figsize=(5.5, 4))
    d = max(deltas)
    for s in ("kgw", "sweet", "ewd", "codetracer"):
        ax.plot(lengths, [m[f"auroc/{s}/d{d:g}/{n}"] for n in lengths], "o-", label=s)
    ax.set_xlabel("bytes scored")
    ax.set_ylabel(f"AUROC (delta {d:g})")
    ax.legend()
    paths.append(plotting.save(fig, out_dir, "auroc_vs_length"))
    hist = result["data"]["history"]
    if hist.get("reward"):
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.plot(hist["reward"], label="reward")
        ax.plot(hist["validity"], label="validity")
        ax.set_xlabel("GRPO step")
        ax.legend()
        paths.append(plotting.save(fig, out_dir, "grpo"))
    return paths
