"""BinaryPC vs hashing and sparse baselines on a small byte-level code LM.

1. Selection quality (held-out code): each method's state is built on the post-RoPE keys of
   the first ``context`` positions; the queries of the next ``n_queries`` positions select
   ``budget`` keys per kv head among them. Recall of each query head's exact top-k, captured
   softmax mass and relative attention-output error, all over the hashed prefix; averaged over
   the sparse layers (layers >= ``dense_layers``), sequences and queries.
2. Bits/byte: a dense prefill of ``bpb_context - bpb_decode`` bytes, then ``bpb_decode`` bytes
   decoded with sparse attention in the sparse layers (states built once after the prefill;
   decoded tokens force-selected, as in the official code).
3. Needle / copy retrieval: a line ``SECRET_<i> = "<random value>"`` is planted early in a
   held-out haystack and asked for at the end (``SECRET_<i> = "``); we score the value's bytes.
   Two protocols: "question dense" (the question is in the dense prefill, the hash is built
   after it, only the answer is decoded sparsely) and "question sparse" (the hash is built on
   the haystack; question and answer are decoded sparsely).
"""

from __future__ import annotations

import functools
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments.binarypc.config import CONTRACT_METHODS, Config
from jaxpapers import attention as attn
from jaxpapers import lm
from jaxpapers.core import plotting, registry, rng
from jaxpapers.core.report import claim, markdown_table
from jaxpapers.core.timing import Stopwatch

says = functools.partial(registry.paper_says, "binarypc")


# ----------------------------------------------------------------------------- model and data
def _lm(cfg: Config):
    """(model config, training recipe, params): trained on first use, then cached by lm."""
    if cfg.lm_preset not in ("tiny", "small"):
        raise ValueError(f"lm_preset must be 'tiny' or 'small', got {cfg.lm_preset!r}")
    preset = getattr(lm, cfg.lm_preset)()
    params = lm.load_or_train(preset.config, preset.train_config,
                              key=jax.random.key(cfg.lm_seed), progress=False)
    return preset.config, preset.train_config, params


def _windows(train_config, seq_len: int, n: int) -> np.ndarray:
    w = lm.heldout_windows(train_config, seq_len=seq_len, num_windows=n)
    if w.shape[0] < n:
        raise ValueError(f"the held-out text gives only {w.shape[0]} windows of {seq_len} bytes")
    return w


def _k(fraction: float, context: int) -> int:
    return max(1, min(context, round(fraction * context)))


def _options(cfg: Config) -> dict[str, Any]:
    return dict(err_fraction=cfg.err_fraction, probe_bits=cfg.probe_bits,
                page_size=cfg.page_size, table_bits=cfg.table_bits, num_tables=cfg.num_tables)


# ----------------------------------------------------------------------------- 1. selection
@functools.partial(jax.jit, static_argnames=("method", "budgets", "context", "options"))
def _quality(keys, values, queries, key, *, method, budgets, context, options):
    """keys, values [Hk, S, D]; queries [Q, Hq, D] -> {budget: mean recall / mass / out_err}.

    One state per method (BinaryPC's forced list is built for the largest budget; a smaller
    budget uses its leading, largest-error entries, as a build for that budget would).
    """
    opts = dict(options)
    st = attn.build_state(method, keys, context, key, budget=max(budgets), **opts)
    hk = keys.shape[0]
    out = {}
    for budget in budgets:
        forced = attn.forced_slots(st, hk)[:, :attn.num_forced_for(budget, opts["err_fraction"])]

        def one(q, budget=budget, forced=forced):
            sc = attn.token_scores(st, q, keys)
            idx, valid = attn.select(sc, forced, context, context, budget=budget)
            return attn.selection_quality(q, keys, values, context, idx, valid, k_ref=budget)

        out[budget] = jax.tree.map(jnp.mean, jax.vmap(one)(queries))
    return out


def selection_study(params, lm_config, train_config, cfg: Config, key) -> dict:
    """{method: {budget name: {"recall", "mass", "out_err"}}}."""
    t = cfg.context + cfg.n_queries
    toks = jnp.asarray(_windows(train_config, t, cfg.n_seqs))
    q, k, v = lm.collect_qkv(params, toks, config=lm_config)  # [N, B, H, T, D]
    first = cfg.dense_layers if cfg.dense_layers < lm_config.n_layers else 0
    q, k, v = q[first:], k[first:], v[first:]
    n, b = k.shape[:2]
    keys = k.reshape((n * b,) + k.shape[2:])
    values = v.reshape((n * b,) + v.shape[2:])
    queries = jnp.swapaxes(q[..., cfg.context:, :], -2, -3).reshape(
        (n * b, cfg.n_queries) + (q.shape[2], q.shape[-1]))
    opts = tuple(sorted(_options(cfg).items()))
    sizes = {name: _k(frac, cfg.context) for name, frac in cfg.budgets}
    out: dict[str, dict] = {}
    for mi, method in enumerate(cfg.methods):
        ks = jax.random.split(jax.random.fold_in(key, mi), n * b)
        f = jax.vmap(functools.partial(_quality, method=method,
                                       budgets=tuple(sorted(set(sizes.values()))),
                                       context=cfg.context, options=opts))
        res = jax.device_get(f(keys, values, queries, ks))
        out[method] = {name: {m: float(np.mean(x)) for m, x in res[size].items()}
                       for name, size in sizes.items()}
    return out


# ----------------------------------------------------------------------------- 2. bits/byte
def _bits(logits, targets):
    """Bits of each target byte: [..., V] logits, [...] ids -> [...]."""
    lp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(lp, targets[..., None], axis=-1)[..., 0] / jnp.log(2.0)


@functools.partial(jax.jit, static_argnames=("lm_config", "attn_fn", "state_fn"))
def _decode_bits(params, cache, inputs, targets, *, lm_config, attn_fn, state_fn):
    """Teacher-forced decoding after a dense prefill: [B, n] inputs -> [B, n] bits.

    ``state_fn(cache)`` builds every layer's selection state once, after the prefill.
    """
    state = None if state_fn is None else state_fn(cache)

    def step(c, xs):
        tok, tgt = xs
        logits, c = lm.decode_step(params, c, tok, config=lm_config, attn_fn=attn_fn,
                                   attn_state=state)
        return c, _bits(logits, tgt)

    _, bits = jax.lax.scan(step, cache, (inputs.T, targets.T))
    return bits.T


def _method_bits(params, lm_config, chunks, method, budget, new_window, cfg, key):
    """[B, T - P] bits of every chunk's predicted bytes under one method (None: dense).

    The first predicted byte comes from the dense prefill for every method; the attention
    closures are made once so that every chunk reuses one compilation.
    """
    attn_fn = state_fn = None
    if method is not None:
        attn_fn = attn.make_attn_fn(budget=budget, new_window=new_window,
                                    dense_layers=cfg.dense_layers)
        state_fn = attn.make_attn_state_fn(method, key, budget=budget,
                                           dense_layers=cfg.dense_layers, **_options(cfg))
    out = []
    for first, cache, inputs, targets in chunks:
        rest = _decode_bits(params, cache, inputs, targets, lm_config=lm_config,
                            attn_fn=attn_fn, state_fn=state_fn)
        out.append(np.concatenate([np.asarray(first)[:, None], np.asarray(rest)], axis=1))
    return np.concatenate(out)


def _prefill_chunks(params, lm_config, toks, prefix, batch):
    """Dense prefill of each chunk of sequences: (first-byte bits, cache, inputs, targets)."""
    chunks = []
    for i in range(0, toks.shape[0], batch):
        x = jnp.asarray(toks[i:i + batch])
        logits, cache = lm.prefill(params, x[:, :prefix], config=lm_config,
                                   max_len=x.shape[1] - 1)
        chunks.append((_bits(logits[:, -1], x[:, prefix]), cache, x[:, prefix:-1],
                       x[:, prefix + 1:]))
    return chunks


_ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", np.uint8)


def needle_tokens(haystacks: np.ndarray, prefix_len: int, value_len: int, seed: int):
    """Two sequences per haystack, same length T and prefix P as the bits/byte batch.

    A line ``SECRET_<i> = "<value>"`` is planted 20% into the haystack; the question
    ``SECRET_<i> = "`` is asked near P and the answer ``<value>"`` follows it; the rest of the
    haystack fills the tail (decoded, not scored).

    * question dense: the question ends at position P (its last byte is the first decoded
      token), so the hash covers it and every answer byte is predicted by a sparse step;
    * question sparse: the question starts at position P (all its tokens decoded sparsely).

    Returns:
      ``(tokens [2 n, T] int32 (dense-protocol rows first), answer start [2 n], answer len)``.
    """
    rng = np.random.default_rng(seed)
    n, t = haystacks.shape
    values = [bytes(rng.choice(_ALPHABET, value_len)) for _ in range(n)]
    rows, starts = [], []
    for proto in ("dense", "sparse"):
        for i, (h, value) in enumerate(zip(haystacks, values)):
            question = np.frombuffer(f'\nSECRET_{i} = "'.encode(), np.uint8)
            answer = np.frombuffer(value + b'"', np.uint8)
            needle = np.frombuffer(f'\nSECRET_{i} = "'.encode() + value + b'"\n', np.uint8)
            q0 = prefix_len - question.size + 1 if proto == "dense" else prefix_len
            head = q0 - needle.size
            at = head // 5
            seq = np.concatenate([h[:at], needle, h[at:head], question, answer])
            seq = np.concatenate([seq, h[head:head + t - seq.size]])
            rows.append(seq[:t].astype(np.int32))
            starts.append(q0 + question.size)
    return np.stack(rows), np.array(starts), value_len + 1


def decode_study(params, lm_config, train_config, cfg: Config, key) -> tuple[dict, dict]:
    """Bits/byte and needle retrieval, one compiled decode per method for both.

    Returns:
      ``(bpb {"dense": bpb, method: bpb, "budget_tokens": k},
         needle {protocol: {method: {"bits", "acc"}}})``.
    """
    t = cfg.bpb_context + 1
    prefix = t - cfg.bpb_decode
    windows = _windows(train_config, t, cfg.bpb_seqs + cfg.needle_seqs)
    # the needles' seed: a stream of its own (the methods' keys below are fold_in(key, 0..M))
    needle, starts, alen = needle_tokens(windows[cfg.bpb_seqs:], prefix, cfg.needle_value_len,
                                         seed=rng.numpy_seed(jax.random.fold_in(key, 1_000_003)))
    if starts.max() + alen > t:
        raise ValueError("bpb_decode is too short for the needle's question and answer")
    toks = np.concatenate([windows[:cfg.bpb_seqs], needle])
    cols = (starts[:, None] + np.arange(alen)[None, :]) - prefix  # answer columns of the bits
    budget = _k(dict(cfg.budgets)[cfg.bpb_budget], prefix)
    bpb: dict[str, Any] = {"budget_tokens": budget}
    res: dict[str, dict] = {"question_dense": {}, "question_sparse": {}}
    chunks = _prefill_chunks(params, lm_config, toks, prefix, cfg.bpb_batch)
    for mi, method in enumerate((None,) + tuple(cfg.decode_methods)):
        bits = _method_bits(params, lm_config, chunks, method, budget, cfg.bpb_decode, cfg,
                            jax.random.fold_in(key, mi))
        name = method or "dense"
        bpb[name] = float(bits[:cfg.bpb_seqs].mean())
        ans = np.take_along_axis(bits[cfg.bpb_seqs:], cols, axis=1)
        half = cfg.needle_seqs
        for proto, part in (("question_dense", ans[:half]), ("question_sparse", ans[half:])):
            res[proto][name] = {"bits": float(part.mean()), "acc": float(np.mean(part < 1))}
    return bpb, res


# ----------------------------------------------------------------------------- driver
def _tables(sel, bpb, needle, cfg) -> list[str]:
    names = [n for n, _ in cfg.budgets]
    header = (["method"] + [f"recall {n}" for n in names] + [f"mass {n}" for n in names]
              + [f"out err {n}" for n in names] + [f"bpb {cfg.bpb_budget}"])
    rows = [[m] + [f"{sel[m][n][x]:.3f}" for x in ("recall", "mass", "out_err") for n in names]
            + [f"{bpb[m]:.4f}" if m in bpb else "-"] for m in cfg.methods]
    tables = [markdown_table(header, rows, title=(
        f"**Selection quality** (sparse layers, held-out code; bpb: dense {bpb['dense']:.4f})"))]
    rows = [(m, f"{a['bits']:.3f}", f"{a['acc']:.2f}", f"{b['bits']:.3f}", f"{b['acc']:.2f}")
            for m, a, b in ((m, needle["question_dense"][m], needle["question_sparse"][m])
                            for m in needle["question_dense"])]
    tables.append(markdown_table(
        ("method", "question dense: bits", "acc", "question sparse: bits", "acc"), rows,
        title="**Needle retrieval** (answer bytes: mean bits, share with p > 1/2)"))
    return tables


def run(config: Config, key) -> dict[str, Any]:
    """Run the three studies; return metrics, claims, data and tables."""
    k_sel, k_bpb = jax.random.split(key)
    sw = Stopwatch()
    with sw("seconds/lm"):
        lm_config, train_config, params = _lm(config)
    with sw("seconds/selection"):
        sel = selection_study(params, lm_config, train_config, config, k_sel)
    with sw("seconds/decode"):
        bpb, needle = decode_study(params, lm_config, train_config, config, k_bpb)

    metrics: dict[str, float] = {}
    for m, row in sel.items():
        for b, r in row.items():
            metrics[f"recall/{m}/{b}"] = r["recall"]
            metrics[f"mass/{m}/{b}"] = r["mass"]
            metrics[f"out_err/{m}/{b}"] = r["out_err"]
    metrics["bpb/dense"] = bpb["dense"]
    for m in config.decode_methods:
        metrics[f"bpb/{m}/{config.bpb_budget}"] = bpb[m]
    for proto, res in needle.items():
        for m, r in res.items():
            metrics[f"needle/{proto}/{m}/bits"] = r["bits"]
            metrics[f"needle/{proto}/{m}/acc"] = r["acc"]

    claims = []
    lo, hi = config.budgets[0][0], config.budgets[-1][0]
    for bits in (64, 32):
        ours_m, sims = f"binarypc{bits}", [f"simhash{bits}", f"simhash{bits}_hamming"]
        sims = [s for s in sims if s in sel]
        if ours_m in sel and sims:
            best = max(sims, key=lambda s: sel[s][lo]["recall"])
            ratio = sel[ours_m][lo]["recall"] / max(sel[best][lo]["recall"], 1e-12)
            metrics[f"recall_ratio/{ours_m}_over_simhash{bits}/{lo}"] = ratio
            claims.append(claim(
                f"recall_ratio/{ours_m}_over_simhash{bits}/{lo}", ratio,
                paper=says("binary_codes_preserve_structure"),
                criterion=(f"BinaryPC's recall of the exact top-k at the {lo} budget >= 1.5x "
                           f"SimHash's (the stronger of its scorings) at {bits} bits"),
                passed=ratio >= 1.5,
                baselines={s: sel[s][lo]["recall"] for s in sims} | {
                    ours_m: sel[ours_m][lo]["recall"]},
                note=f"against the stronger SimHash scoring ({best})"))
    if "binarypc64" in sel and "oracle" in sel:
        ratio = sel["binarypc64"][hi]["mass"] / sel["oracle"][hi]["mass"]
        metrics[f"mass_ratio/binarypc64_over_oracle/{hi}"] = ratio
        claims.append(claim(
            f"mass_ratio/binarypc64_over_oracle/{hi}", ratio,
            paper=says("accuracy_vs_full_attention"),
            criterion=(f"softmax mass captured by BinaryPC-64's selection at the {hi} budget "
                       ">= 0.85x the oracle top-k's"),
            passed=ratio >= 0.85,
            baselines={"binarypc64": sel["binarypc64"][hi]["mass"],
                       "oracle": sel["oracle"][hi]["mass"]}))
    if "binarypc64" in bpb:
        rel = bpb["binarypc64"] / bpb["dense"] - 1.0
        metrics[f"bpb_rel/binarypc64/{config.bpb_budget}"] = rel
        claims.append(claim(
            f"bpb_rel/binarypc64/{config.bpb_budget}", rel,
            paper=says("accuracy_vs_full_attention"),
            criterion=(f"bits/byte with BinaryPC-64 sparse decoding at the {config.bpb_budget} "
                       "budget within 3% of dense attention's (relative increase <= 0.03)"),
            passed=rel <= 0.03,
            baselines={m: bpb[m] for m in config.decode_methods} | {"dense": bpb["dense"]},
            note=(f"top-k {bpb['budget_tokens']} of a "
                  f"{config.bpb_context - config.bpb_decode + 1}-byte prefix "
                  f"plus the <= {config.bpb_decode} decoded tokens "
                  "(force-selected, as in the official code), layers >= "
                  f"{config.dense_layers} sparse")))
    missing = [m for m in CONTRACT_METHODS if m not in sel]
    data = {"selection": sel, "bpb": bpb, "needle": needle,
            "budgets": [list(b) for b in config.budgets], "missing_methods": missing}
    return {"metrics": metrics, "claims": claims, "data": data, "timings": sw.seconds,
            "tables": _tables(sel, bpb, needle, config)}


def plot(result: dict, out_dir) -> list[pathlib.Path]:
    """Recall, captured mass and output error vs budget for every method."""
    plt = plotting.pyplot()
    sel = result["data"]["selection"]
    budgets = result["data"]["budgets"]
    xs = [100 * float(f) for _, f in budgets]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    colors = plt.cm.tab20(np.linspace(0, 1, max(len(sel), 2)))
    for c, m in zip(colors, sorted(sel)):
        style = dict(lw=2.2, color=c) if m.startswith("binarypc") else dict(lw=1, ls="--",
                                                                              color=c)
        for ax, what in zip(axes, ("recall", "mass", "out_err")):
            ax.plot(xs, [sel[m][n][what] for n, _ in budgets], marker="o", ms=3, label=m,
                    **style)
    for ax, title in zip(axes, ("recall of the exact top-k", "captured softmax mass",
                                "relative attention-output error")):
        ax.set_xlabel("budget (% of context)")
        ax.set_title(title, fontsize=9)
        ax.set_xscale("log")
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.minorticks_off()
    axes[2].set_yscale("log")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return [plotting.save(fig, out_dir, "binarypc_selection", tight=False)]
