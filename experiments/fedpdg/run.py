"""FedPDG reproduction (reconstructed; no official code): discrepancy-guided synthetic digits.

1. Data: digits in [-1, 1]. A class-balanced public share, each image shifted by one pixel, is
   the generator's pretraining set (a stand-in for a foundation model trained elsewhere). The
   other rows are subsampled to a long-tailed global distribution ``n_c ∝ 10^(-rank/9)`` (class
   order shuffled), split into train and test alike; the training rows go to 10 clients by a
   label Dirichlet split (alpha 0.1).
2. Warm-up FedAvg gives the global classifier ``w_g``; client ``k``'s local model is ``w_g``
   fine-tuned on its own rows.
3. Diffusion-DPO: per class, candidates from the pretrained EDM generator are scored by
   ``s(x, c) = log p_{w_g}(c | x)``; top-third winners are paired with bottom-third losers and the
   generator is tuned against its frozen copy.
4. The server samples a pool per class; each method picks ``r |D_k|`` samples per client:
   FedPDG keeps the candidates of largest ``max(0, p_g(c|x) - p_k(c|x))``; balanced fills the
   client's classes toward uniform; unguided takes a random subset; FedPDG without DPO selects
   from the pretrained generator's pool. FedAvg then resumes on local + synthetic data (FedAvg
   and FedProx baselines resume on local data only). All methods of a seed are one vmapped call.
"""

from __future__ import annotations

import functools
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments.common import digits
from experiments.fedpdg.config import Config
from jaxpapers import diffusion as dfn
from jaxpapers import federated as fed
from jaxpapers.core import plotting, registry, rng
from jaxpapers.core.report import claim, markdown_table
from jaxpapers.core.timing import Stopwatch

says = functools.partial(registry.paper_says, "fedpdg")
NUM_CLASSES, DIM = 10, 64
METHODS = ("fedavg", "fedprox", "balanced", "unguided", "fedpdg_nodpo", "fedpdg")
SIGMA_MIN, SIGMA_MAX, RHO = 0.002, 80.0, 7.0


# ----------------------------------------------------------------------------- data

def shift_one_pixel(x: np.ndarray, r: np.random.Generator) -> np.ndarray:
    """Each [64] image moved by one pixel up / down / left / right (edge-padded)."""
    img = x.reshape(-1, 8, 8)
    out = np.empty_like(img)
    pad = np.pad(img, ((0, 0), (1, 1), (1, 1)), mode="edge")
    moves = r.integers(0, 4, len(img))
    offsets = {0: (0, 1), 1: (2, 1), 2: (1, 0), 3: (1, 2)}  # (row, col) start in the padding
    for m, (dr, dc) in offsets.items():
        sel = moves == m
        out[sel] = pad[sel, dr:dr + 8, dc:dc + 8]
    return out.reshape(-1, 64)


def split_data(config: Config, key) -> dict[str, np.ndarray]:
    """Public (shifted, balanced) / long-tailed train / long-tailed test rows of the digits."""
    from sklearn import datasets as skd

    x, y = skd.load_digits(return_X_y=True)
    x = (np.asarray(x, np.float32) / 8.0 - 1.0)
    y = np.asarray(y, np.int32)
    r = rng.numpy_rng(key)
    per_class_public = int(round(config.public_fraction * len(x) / NUM_CLASSES))
    pub, rest = [], []
    for c in range(NUM_CLASSES):
        idx = r.permutation(np.flatnonzero(y == c))
        pub.append(idx[:per_class_public])
        rest.append(idx[per_class_public:])
    order = r.permutation(NUM_CLASSES)  # rank of each class in the long tail
    n_max = min(len(v) for v in rest)
    train, test = [], []
    for rank, c in enumerate(order):
        n_c = max(4, int(round(n_max * config.tail_ratio ** (-rank / 9.0))))
        keep = rest[c][:n_c]
        n_test = max(1, int(round(config.test_fraction * n_c)))
        test.append(keep[:n_test])
        train.append(keep[n_test:])
    pub = np.concatenate(pub)
    train, test = np.concatenate(train), np.concatenate(test)
    return {"x_pub": shift_one_pixel(x[pub], r), "y_pub": y[pub],
            "x_train": x[train], "y_train": y[train], "x_test": x[test], "y_test": y[test],
            "class_order": order}


def client_arrays(x, y, indices, mask) -> dict:
    """Padded per-client rows ``{x [C, M, 64], y [C, M], w [C, M]}`` from a partition."""
    idx = np.where(mask, indices, 0)
    return {"x": jnp.asarray(x[idx]), "y": jnp.asarray(y[idx]),
            "w": jnp.asarray(mask.astype(np.float32))}


# ----------------------------------------------------------------------------- classifier

def init_classifier(key, hidden: int) -> dict:
    k1, k2 = jax.random.split(key)
    def dense(k, n_in, n_out):
        return {"w": jax.random.normal(k, (n_in, n_out)) * jnp.sqrt(2.0 / n_in),
                "b": jnp.zeros(n_out)}
    return {"h": dense(k1, DIM, hidden), "o": dense(k2, hidden, NUM_CLASSES)}


def logits_fn(params, x):
    h = jax.nn.relu(x @ params["h"]["w"] + params["h"]["b"])
    return h @ params["o"]["w"] + params["o"]["b"]


def _loss(params, data, key):
    del key
    logp = jax.nn.log_softmax(logits_fn(params, data["x"]))
    ce = -jnp.take_along_axis(logp, data["y"][:, None], axis=1)[:, 0]
    return jnp.sum(ce * data["w"]) / jnp.maximum(jnp.sum(data["w"]), 1.0)


def _make_eval(x_test, y_test):
    def evaluate(params, data):
        del data
        pred = jnp.argmax(logits_fn(params, x_test), axis=-1)
        return {"acc": jnp.mean(pred == y_test)}
    return evaluate


# ----------------------------------------------------------------------------- generator

def _schedule():
    return dfn.EDMSchedule(jnp.float32(SIGMA_MIN), jnp.float32(SIGMA_MAX), jnp.float32(RHO),
                           prediction="epsilon")


def _eps_fn(params, x, sigma, labels):
    d = jax.vmap(lambda xi, yi: dfn.edm_denoiser(params, xi, sigma, yi))(x, labels)
    return (x - d) / sigma


@functools.partial(jax.jit, static_argnames=("steps",))
def generate(params, key, labels, *, steps):
    """[B] labels -> [B, 64] samples (Euler on the EDM sigmas), clipped to [-1, 1]."""
    k_noise, k_sample = jax.random.split(key)
    noise = jax.random.normal(k_noise, (labels.shape[0], DIM))
    x = dfn.sample(lambda p, xx, s: _eps_fn(p, xx, s, labels), params, k_sample, noise,
                   schedule=_schedule(), sampler="euler", steps=steps)
    return jnp.clip(x, -1.0, 1.0)


def pretrained_generator(config: Config, data: dict, key) -> tuple[dict, dict]:
    """The EDM generator trained on the public set (cached: ``experiments.common.digits``)."""
    out = digits.trained_denoisers(key, data["x_pub"], data["y_pub"], hidden=config.gen_hidden,
                            depth=config.gen_depth, train_steps=config.gen_steps,
                            batch_size=config.gen_batch, learning_rate=config.gen_lr)
    return out["teacher"], {"cached": out["cached"],
                            "final_loss": float(np.mean(np.asarray(out["train_loss"])[-50:]))}


def class_scores(params, x, labels):
    """``s(x, c) = log p_w(c | x)`` for [B, 64] samples and their classes."""
    logp = jax.nn.log_softmax(logits_fn(params, x))
    return jnp.take_along_axis(logp, labels[:, None], axis=1)[:, 0]


# ----------------------------------------------------------------------------- selection

def select(method: str, pool_x, pool_y, budgets, client_counts, p_global, p_local, r):
    """Per client the chosen pool rows: [C, B_max] indices and mask."""
    c = len(budgets)
    b_max = int(max(budgets.max(), 1))
    idx = np.zeros((c, b_max), np.int64)
    mask = np.zeros((c, b_max), bool)
    for k in range(c):
        b = int(budgets[k])
        if b == 0:
            continue
        if b > len(pool_y):
            raise ValueError(f"budget {b} of client {k} exceeds the pool ({len(pool_y)} samples)")
        if method.startswith("fedpdg"):
            delta = np.asarray(fed.prediction_discrepancy(p_global, p_local[k],
                                                          jnp.asarray(pool_y)))
            # ties (e.g. delta = 0) broken at random, not by pool order (which is by class)
            perm = r.permutation(len(pool_y))
            top = np.asarray(fed.select_top(jnp.asarray(delta[perm]), b))
            chosen = np.sort(perm[top])
        elif method == "unguided":
            chosen = r.choice(len(pool_y), b, replace=False)
        elif method == "balanced":
            alloc = np.asarray(fed.balanced_allocation(jnp.asarray(client_counts[k]), b))
            have = np.bincount(pool_y, minlength=NUM_CLASSES)
            if np.any(alloc > have):
                raise ValueError(f"balanced allocation {alloc.tolist()} of client {k} exceeds "
                                 f"the pool's per-class counts {have.tolist()}")
            chosen = np.concatenate([r.permutation(np.flatnonzero(pool_y == cl))[:alloc[cl]]
                                     for cl in range(NUM_CLASSES)])
        else:
            raise ValueError(method)
        if len(chosen) != b:
            raise ValueError(f"{method} chose {len(chosen)} samples for client {k}, budget {b}")
        idx[k, :len(chosen)] = chosen
        mask[k, :len(chosen)] = True
    return idx, mask


def tv_to_global(client_y, client_w, syn_y, syn_mask, global_p) -> float:
    """Mean over clients of TV(augmented label distribution, global distribution)."""
    tv = []
    for k in range(client_y.shape[0]):
        counts = np.bincount(client_y[k][client_w[k] > 0], minlength=NUM_CLASSES).astype(float)
        if syn_y is not None:
            counts += np.bincount(syn_y[k][syn_mask[k]], minlength=NUM_CLASSES)
        tv.append(0.5 * np.abs(counts / counts.sum() - global_p).sum())
    return float(np.mean(tv))


# ----------------------------------------------------------------------------- run

def run(config: Config, key) -> dict[str, Any]:
    """Everything random derives from ``key`` (the generator's pretraining too, then cached)."""
    sw = Stopwatch()
    k_data, k_gen, k_fid, k_seeds = jax.random.split(key, 4)
    with sw("data"):
        data = split_data(config, k_data)
    with sw("pretrain_generator"):
        gen0, gen_info = pretrained_generator(config, data, k_gen)
    x_tr, y_tr = data["x_train"], data["y_train"]
    x_te, y_te = jnp.asarray(data["x_test"]), jnp.asarray(data["y_test"])
    global_p = np.bincount(y_tr, minlength=NUM_CLASSES) / len(y_tr)
    evaluate = _make_eval(x_te, y_te)
    common = dict(loss_fn=_loss, eval_fn=evaluate, local_steps=config.local_steps)

    def fedavg_phase(init, cdata, k, mu, num_rounds):
        weights = jnp.sum(cdata["w"], axis=1)
        p, hist = fed.grouped_rounds(jax.tree.map(lambda a: a[None], init), cdata, k,
                                     config.learning_rate, 0.0, mu,
                                     jnp.zeros(cdata["w"].shape[0], jnp.int32), weights,
                                     num_rounds=num_rounds, **common)
        return jax.tree.map(lambda a: a[0], p), hist["acc"][:, 0]

    warmup = jax.jit(functools.partial(fedavg_phase, num_rounds=config.warmup_rounds))
    phase2 = jax.jit(jax.vmap(functools.partial(fedavg_phase, num_rounds=config.rounds),
                              in_axes=(None, 0, None, 0)))
    finetune = jax.jit(jax.vmap(lambda p, d, k: fed.local_train(
        p, d, k, config.learning_rate, loss_fn=_loss, num_steps=config.finetune_steps)[0],
        in_axes=(None, 0, 0)))

    per_seed = []
    fid_feats, _ = digits.fit_fid_features(np.asarray(x_tr), np.asarray(y_tr),
                                           seed=rng.numpy_seed(k_fid))
    ref_stats = digits.feature_stats(np.asarray(fid_feats(x_te)))
    for s, sk in enumerate(jax.random.split(k_seeds, config.num_seeds)):
        k_part, k_init, k_warm, k_ft, k_cand, k_dpo, k_pool, k_sel, k_fed = jax.random.split(sk, 9)
        with sw("clients"):
            indices, mask = fed.dirichlet_partition(k_part, jnp.asarray(y_tr),
                                                    num_clients=config.num_clients,
                                                    alpha=config.dirichlet_alpha,
                                                    min_size=config.min_size)
            indices, mask = np.asarray(indices), np.asarray(mask)
            cdata = client_arrays(x_tr, y_tr, indices, mask)
        with sw("warmup"):
            w0 = init_classifier(k_init, config.hidden)
            w_g, acc_warm = warmup(w0, cdata, k_warm, jnp.float32(0.0))
            w_loc = finetune(w_g, cdata, jax.random.split(k_ft, config.num_clients))
        with sw("dpo"):
            cand_y = jnp.repeat(jnp.arange(NUM_CLASSES), config.dpo_candidates)
            cand_x = generate(gen0, k_cand, cand_y, steps=config.sample_steps)
            score = class_scores(w_g, cand_x, cand_y)
            win, lose, pmask = fed.preference_pairs(score, cand_y, num_classes=NUM_CLASSES)
            win, lose = np.asarray(win)[np.asarray(pmask)], np.asarray(lose)[np.asarray(pmask)]
            gen1, dpo_hist = dfn.train_dpo(gen0, gen0, k_dpo, cand_x[win], cand_x[lose],
                                           cand_y[win], num_steps=config.dpo_steps,
                                           batch_size=config.dpo_batch,
                                           learning_rate=config.dpo_lr, beta=config.dpo_beta)
        with sw("pools"):
            pool_y = jnp.repeat(jnp.arange(NUM_CLASSES), config.pool_per_class)
            pools = {"pre": generate(gen0, k_pool, pool_y, steps=config.sample_steps),
                     "dpo": generate(gen1, k_pool, pool_y, steps=config.sample_steps)}
            score_before = float(jnp.mean(class_scores(w_g, pools["pre"], pool_y)))
            score_after = float(jnp.mean(class_scores(w_g, pools["dpo"], pool_y)))
            fid = {n: digits.frechet(np.asarray(fid_feats(v)), ref_stats)
                   for n, v in pools.items()}
        with sw("select"):
            budgets = np.floor(config.budget_ratio * mask.sum(1) + 0.5).astype(int)
            counts = np.stack([np.bincount(y_tr[indices[k][mask[k]]], minlength=NUM_CLASSES)
                               for k in range(config.num_clients)])
            p_g = jax.nn.softmax(logits_fn(w_g, pools["dpo"]))
            p_g0 = jax.nn.softmax(logits_fn(w_g, pools["pre"]))
            p_l = jax.vmap(lambda p: jax.nn.softmax(logits_fn(p, pools["dpo"])))(w_loc)
            p_l0 = jax.vmap(lambda p: jax.nn.softmax(logits_fn(p, pools["pre"])))(w_loc)
            r = rng.numpy_rng(k_sel)
            chosen = {
                "balanced": ("dpo", *select("balanced", None, np.asarray(pool_y), budgets,
                                            counts, None, None, r)),
                "unguided": ("dpo", *select("unguided", None, np.asarray(pool_y), budgets,
                                            counts, None, None, r)),
                "fedpdg_nodpo": ("pre", *select("fedpdg", None, np.asarray(pool_y), budgets,
                                                counts, p_g0, p_l0, r)),
                "fedpdg": ("dpo", *select("fedpdg", None, np.asarray(pool_y), budgets, counts,
                                          p_g, p_l, r)),
            }
            for ratio in config.budget_sweep:  # the same selections at other budgets
                b_r = np.floor(ratio * mask.sum(1) + 0.5).astype(int)
                chosen[f"balanced_r{ratio:g}"] = ("dpo", *select(
                    "balanced", None, np.asarray(pool_y), b_r, counts, None, None, r))
                chosen[f"fedpdg_r{ratio:g}"] = ("dpo", *select(
                    "fedpdg", None, np.asarray(pool_y), b_r, counts, p_g, p_l, r))
            names = all_methods(config)
            b_max = max(v[1].shape[1] for v in chosen.values())
            m_local = cdata["x"].shape[1]
            batch = []
            tv, tv_syn = {}, {}
            for m in names:
                xs = np.zeros((config.num_clients, m_local + b_max, DIM), np.float32)
                ys = np.zeros((config.num_clients, m_local + b_max), np.int32)
                ws = np.zeros((config.num_clients, m_local + b_max), np.float32)
                xs[:, :m_local], ys[:, :m_local] = np.asarray(cdata["x"]), np.asarray(cdata["y"])
                ws[:, :m_local] = np.asarray(cdata["w"])
                if m in chosen:
                    src, idx, sel = chosen[m]
                    px, py = np.asarray(pools[src]), np.asarray(pool_y)
                    width = idx.shape[1]
                    xs[:, m_local:m_local + width] = px[idx]
                    ys[:, m_local:m_local + width] = py[idx]
                    ws[:, m_local:m_local + width] = sel
                    tv[m] = tv_to_global(np.asarray(cdata["y"]), np.asarray(cdata["w"]),
                                         py[idx], sel, global_p)
                    syn = np.bincount(py[idx][sel], minlength=NUM_CLASSES)
                    tv_syn[m] = float(0.5 * np.abs(syn / max(syn.sum(), 1) - global_p).sum())
                    top3 = np.argsort(-global_p)[:3]
                    tv_syn[m + "/top3"] = float(syn[top3].sum() / max(syn.sum(), 1))
                batch.append({"x": xs, "y": ys, "w": ws})
            tv["local"] = tv_to_global(np.asarray(cdata["y"]), np.asarray(cdata["w"]), None,
                                       None, global_p)
            stacked = jax.tree.map(lambda *a: jnp.asarray(np.stack(a)), *batch)
            mus = jnp.asarray([config.fedprox_mu if m == "fedprox" else 0.0 for m in names],
                              jnp.float32)
        with sw("federated"):
            w_final, acc_curve = phase2(w_g, stacked, k_fed, mus)
            per_class = []
            for i in range(len(names)):
                pred = np.asarray(jnp.argmax(logits_fn(jax.tree.map(lambda a: a[i], w_final),
                                                       x_te), -1))
                per_class.append([float(np.mean(pred[np.asarray(y_te) == c] == c))
                                  for c in range(NUM_CLASSES)])
        per_seed.append({"acc": np.asarray(acc_curve)[:, -1], "curve": np.asarray(acc_curve),
                         "warm": np.asarray(acc_warm), "per_class": np.array(per_class),
                         "tv": tv, "tv_syn": tv_syn, "score_before": score_before, "score_after": score_after,
                         "fid": fid, "dpo_acc": float(np.mean(np.asarray(
                             dpo_hist["implicit_accuracy"])[-20:])),
                         "pairs": int(len(win)),
                         "examples": {n: np.asarray(v).reshape(
                             NUM_CLASSES, config.pool_per_class, DIM)[:, :2].tolist()
                             for n, v in pools.items()} if s == 0 else None})

    return _summarise(config, per_seed, data, gen_info, sw)


def all_methods(config: Config) -> list[str]:
    """The contract's methods, then the budget sweep's (balanced and FedPDG at other r)."""
    return list(METHODS) + [f"{k}_r{r:g}" for r in config.budget_sweep
                            for k in ("balanced", "fedpdg")]


def _paired(a, b):
    d = np.asarray(a) - np.asarray(b)
    se = d.std(ddof=1) / np.sqrt(d.size) if d.size > 1 else float("nan")
    return float(d.mean()), float(se), float(d.mean() / se) if se and se > 0 else float("nan")


def _summarise(config, per_seed, data, gen_info, sw):
    acc = np.stack([p["acc"] for p in per_seed])  # [S, M]
    names = all_methods(config)
    metrics: dict[str, float] = {}
    for i, m in enumerate(names):
        metrics[f"acc/{m}"] = float(acc[:, i].mean())
        metrics[f"acc_std/{m}"] = float(acc[:, i].std(ddof=1)) if len(acc) > 1 else 0.0
    for m in names[2:] + ["local"]:
        metrics[f"tv_to_global/{m}"] = float(np.mean([p["tv"][m] for p in per_seed]))
    for m in names[2:]:
        metrics[f"tv_synthetic/{m}"] = float(np.mean([p["tv_syn"][m] for p in per_seed]))
        metrics[f"synthetic_top3_share/{m}"] = float(np.mean([p["tv_syn"][m + "/top3"]
                                                              for p in per_seed]))
    metrics["global_top3_share"] = float(np.sort(np.bincount(
        data["y_train"], minlength=NUM_CLASSES))[::-1][:3].sum() / len(data["y_train"]))
    metrics["dpo/score_before"] = float(np.mean([p["score_before"] for p in per_seed]))
    metrics["dpo/score_after"] = float(np.mean([p["score_after"] for p in per_seed]))
    metrics["dpo/implicit_accuracy"] = float(np.mean([p["dpo_acc"] for p in per_seed]))
    metrics["dpo/pairs"] = float(np.mean([p["pairs"] for p in per_seed]))
    metrics["fid/pretrained"] = float(np.mean([p["fid"]["pre"] for p in per_seed]))
    metrics["fid/dpo"] = float(np.mean([p["fid"]["dpo"] for p in per_seed]))
    metrics["acc/warmup"] = float(np.mean([p["warm"][-1] for p in per_seed]))
    idx = {m: i for i, m in enumerate(METHODS)}
    pairs = {}
    for a, b in (("fedpdg", "fedavg"), ("fedpdg", "balanced"), ("fedpdg", "unguided"),
                 ("fedpdg", "fedpdg_nodpo"), ("balanced", "fedavg")):
        mean, se, t = _paired(acc[:, idx[a]], acc[:, idx[b]])
        pairs[(a, b)] = (mean, se, t)
        metrics[f"diff/{a}-{b}"] = mean
        metrics[f"diff_se/{a}-{b}"] = se
    d_score = [p["score_after"] - p["score_before"] for p in per_seed]
    claims = [
        claim("acc/fedpdg", metrics["acc/fedpdg"], paper=says("accuracy_gain"),
              criterion="FedPDG >= FedAvg + 1 pp (mean over seeds; same test set; the paired "
                        "difference and its t are in the baselines)",
              passed=metrics["diff/fedpdg-fedavg"] >= 0.01,
              baselines={"fedavg": metrics["acc/fedavg"],
                         "diff": pairs[("fedpdg", "fedavg")][0],
                         "t": pairs[("fedpdg", "fedavg")][2]}),
        claim("diff/fedpdg-balanced", metrics["diff/fedpdg-balanced"],
              paper=says("balance_augmentation_fails"),
              criterion="FedPDG >= balanced augmentation - 0.5 pp at the same synthetic budget "
                        "(paired over seeds)",
              passed=metrics["diff/fedpdg-balanced"] >= -0.005,
              baselines={"balanced": metrics["acc/balanced"],
                         "t": pairs[("fedpdg", "balanced")][2]}),
        claim("tv_to_global/fedpdg", metrics["tv_to_global/fedpdg"],
              paper=says("balance_augmentation_fails"),
              criterion="the augmented clients' label distributions are closer to the global "
                        "one under FedPDG than under balanced augmentation (mean TV)",
              passed=metrics["tv_to_global/fedpdg"] < metrics["tv_to_global/balanced"],
              baselines={"balanced": metrics["tv_to_global/balanced"],
                         "unguided": metrics["tv_to_global/unguided"],
                         "local only": metrics["tv_to_global/local"]}),
        claim("dpo/score_after", metrics["dpo/score_after"], paper=says("preference_alignment"),
              criterion="DPO raises the global model's mean log-probability of the intended "
                        "class on fresh samples (every seed)",
              passed=all(d > 0 for d in d_score),
              baselines={"before": metrics["dpo/score_before"]}),
    ]
    rows = [(m, metrics[f"acc/{m}"], metrics[f"acc_std/{m}"],
             metrics.get(f"tv_to_global/{m}", metrics["tv_to_global/local"]),
             metrics.get(f"tv_synthetic/{m}", float("nan")),
             metrics.get(f"synthetic_top3_share/{m}", float("nan"))) for m in names]
    table = markdown_table(("method", f"test acc ({config.num_seeds} seeds)", "sd",
                            "TV(augmented clients, global); FedAvg / FedProx: local data",
                            "TV(synthetic labels pooled, global)",
                            "share of synthetic in the 3 most frequent classes "
                            f"(global: {metrics['global_top3_share']:.2f})"), rows)
    diff_table = markdown_table(("paired difference", "mean", "se", "t"),
                                [(f"{a} - {b}", *v) for (a, b), v in pairs.items()])
    gen_table = markdown_table(
        ("generator", "mean log p_g(c|x) of fresh samples", "Frechet distance to test digits"),
        [("pretrained (shifted public digits)", metrics["dpo/score_before"],
          metrics["fid/pretrained"]),
         ("after Diffusion-DPO", metrics["dpo/score_after"], metrics["fid/dpo"])])
    per_class = np.mean([p["per_class"] for p in per_seed], axis=0)  # [M, 10]
    order = [int(c) for c in data["class_order"]]
    class_table = markdown_table(
        ("method",) + tuple(f"class {c} (rank {k})" for k, c in enumerate(order)),
        [(m,) + tuple(per_class[i, c] for c in order) for i, m in enumerate(names)])
    curves = np.mean([p["curve"] for p in per_seed], axis=0)  # [M, R]
    warm = np.mean([p["warm"] for p in per_seed], axis=0)
    return {"metrics": metrics, "claims": claims,
            "tables": [table, diff_table, gen_table,
                       "Per-class test accuracy (classes in long-tail order, most frequent "
                       "first):", class_table,
                       f"Generator: {'cached' if gen_info.get('cached') else 'trained now'}; "
                       f"train / test rows {len(data['y_train'])} / {len(data['y_test'])}; "
                       f"public rows {len(data['y_pub'])}"],
            "data": {"curves": curves.tolist(), "warmup": warm.tolist(),
                     "methods": names, "examples": per_seed[0]["examples"]},
            "timings": sw.seconds}


def plot(result: dict[str, Any], out_dir) -> list[pathlib.Path]:
    plt = plotting.pyplot()
    d = result["data"]
    warm = d["warmup"]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.plot(range(1, len(warm) + 1), warm, "k-", label="warm-up FedAvg")
    for m, curve in zip(d["methods"], d["curves"]):
        ax.plot(range(len(warm) + 1, len(warm) + len(curve) + 1), curve, label=m)
    ax.set_xlabel("round")
    ax.set_ylabel("global test accuracy (mean over seeds)")
    ax.legend(fontsize=8)
    paths = [plotting.save(fig, out_dir, "accuracy_vs_round")]
    ex = d["examples"]
    fig, axes = plt.subplots(4, NUM_CLASSES, figsize=(10, 4.4))
    for row, (name, k) in enumerate((("pretrained", 0), ("pretrained", 1), ("after DPO", 0),
                                     ("after DPO", 1))):
        src = ex["pre"] if name == "pretrained" else ex["dpo"]
        for c in range(NUM_CLASSES):
            ax = axes[row, c]
            ax.imshow(np.asarray(src[c][k]).reshape(8, 8), cmap="gray_r", vmin=-1, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(name, fontsize=7)
            if row == 0:
                ax.set_title(str(c), fontsize=8)
    fig.suptitle("samples per class (same noise) before / after Diffusion-DPO", fontsize=9)
    paths.append(plotting.save(fig, out_dir, "samples_before_after_dpo"))
    return paths
