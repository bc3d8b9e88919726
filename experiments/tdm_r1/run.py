"""TDM-R1 on sklearn digits: RL for a 4-step generator from a non-differentiable reward (issue 24).

1. Models (shared with qsched, cached): the class-conditional EDM teacher T and its consistency
   student trained by qsched's recipe on qsched's split (``experiments.common.digits``). The
   student rolled out deterministically (``euler`` on ``karras_sigmas(K, sigma_min,
   sigma_max)``) is the ``student`` model.
2. A TDM stage: ``make_tdm_r1``'s update with the ``tdm_only`` switches (the generator's
   distribution-matching loss, no reward term), ``tdm_iters`` iterations from the student,
   cached; its EMA is the ``start`` model, as the paper starts from TDM.
3. Reward (never differentiated): 1 iff a reward classifier (sklearn MLP on the training rows)
   says the prompted digit AND the ink count (pixels > 0 in [-1, 1]) reaches that class's
   ``ink_percentile``-th percentile on real training digits: "the right digit, drawn bold".
   It is a jnp rule (the classifier's weights exported as arrays). Judge (out of domain): the
   same rule with the FID classifier, trained on the held-out rows.
4. RL: every variant of ``config.variants`` x ``num_seeds`` seeds from the start model, 10
   prompts x G samples per iteration, all in one compiled ``vmap(update)`` scanned over
   ``rl_iters`` iterations.
5. Evaluation on the same noise for every model (``eval_draws`` x ``n_eval`` samples, classes
   ``i % 10``; the EMA of G, as the release evaluates): reward, judge, Frechet distance in the
   FID classifier's features against the training rows (``fid/real_floor``: half the training
   rows against the other half, as qsched).

Keys: ``jax.random.split(key, 9)`` gives qsched's ``_Ctx`` keys (model, distillation, ..., data
split, FID classifier at positions 0, 1, 5, 6), so the run's models, split and FID features
are qsched's at the same seed; the experiment's own keys (reward classifier, TDM stage, RL
runs, evaluation noise) come from ``split(fold_in(key, 24), 4)``.
"""

from __future__ import annotations

import functools
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from experiments.common import digits
from experiments.tdm_r1.config import Config
from jaxpapers import diffusion as dfn
from jaxpapers.core import cache as core_cache
from jaxpapers.core import plotting, registry, rng
from jaxpapers.core.report import claim, markdown_table
from jaxpapers.core.timing import Stopwatch

says = functools.partial(registry.paper_says, "tdm_r1")
NUM_CLASSES, DIM = digits.NUM_CLASSES, digits.DIM
BASE_MODELS = ("student", "start")


# ----------------------------------------------------------------------------- reward

def ink_count(images: jax.Array) -> jax.Array:
    """[..., 64] images in [-1, 1] -> [...] number of inked pixels (value > 0)."""
    return jnp.sum(images > 0.0, axis=-1)


def ink_thresholds(x: jax.typing.ArrayLike, y: jax.typing.ArrayLike, percentile: float,
                   num_classes: int = NUM_CLASSES) -> jax.Array:
    """[num_classes] per-class ``percentile`` of the ink counts of real images ``x [N, 64]``
    with labels ``y [N]`` (linear interpolation, as ``np.percentile``)."""
    ink = ink_count(jnp.asarray(x)).astype(jnp.float32)
    y = jnp.asarray(y)
    per_class = lambda c: jnp.nanpercentile(jnp.where(y == c, ink, jnp.nan), percentile)  # noqa
    return jax.vmap(per_class)(jnp.arange(num_classes))


def mlp_logits_fn(clf):
    """A fitted sklearn ``MLPClassifier`` (relu) -> pure ``logits(images [B, 64]) -> [B, C]``."""
    if getattr(clf, "activation", "relu") != "relu":
        raise ValueError(f"only relu MLPs are exported, got {clf.activation!r}")
    ws = [jnp.asarray(w, jnp.float32) for w in clf.coefs_]
    bs = [jnp.asarray(b, jnp.float32) for b in clf.intercepts_]

    def logits(images):
        h = images
        for i, (w, b) in enumerate(zip(ws, bs)):
            h = h @ w + b
            if i < len(ws) - 1:
                h = jax.nn.relu(h)
        return h

    return logits


def make_reward(logits_fn, thresholds: jax.Array):
    """``reward(images [B, 64], labels [B]) -> [B] float32``: 1 iff the classifier's argmax is the
    label and the ink count reaches the label's threshold (images clipped to [-1, 1] first)."""
    thresholds = jnp.asarray(thresholds, jnp.float32)

    def reward(images, labels):
        x = jnp.clip(images, -1.0, 1.0)
        right = jnp.argmax(logits_fn(x), axis=-1) == labels
        bold = ink_count(x).astype(jnp.float32) >= thresholds[labels]
        return (right & bold).astype(jnp.float32)

    return reward


def fit_reward_classifier(x: np.ndarray, y: np.ndarray, *, hidden: tuple[int, ...],
                          max_iter: int, seed: int):
    """The reward classifier: sklearn MLP on the training rows (not the FID classifier)."""
    return digits.fit_mlp_classifier(x, y, hidden=hidden, max_iter=max_iter, seed=seed)


# ----------------------------------------------------------------------------- models

def denoisers(cfg: Config):
    """(G's unbatched consistency denoiser, T's unbatched EDM denoiser), both x_0-outputs."""
    gen_fn = functools.partial(dfn.consistency_denoiser, sigma_data=cfg.sigma_data,
                               sigma_min=cfg.sigma_min)
    score_fn = functools.partial(dfn.edm_denoiser, sigma_data=cfg.sigma_data)
    return gen_fn, score_fn


def rollout_sigmas(cfg: Config) -> jax.Array:
    return dfn.karras_sigmas(cfg.steps, cfg.sigma_min, cfg.sigma_max, cfg.rho)


def make_scorer(cfg: Config, reward_fn, judge_fn, features):
    """jitted ``score(params, x_eval [D, N, 64], labels [N]) -> (images [D, N, 64], reward [D],
    judge [D], features [D, N, F])``: Euler rollouts of G (clipped to [-1, 1]) and their scores."""
    gen_fn, _ = denoisers(cfg)
    schedule = dfn.SigmaSchedule(rollout_sigmas(cfg), prediction="sample")

    def one(params, x_T, labels):
        den = lambda p, x, s: jax.vmap(gen_fn, (None, 0, None, 0))(p, x, s, labels)  # noqa
        x = dfn.sample(den, params, jax.random.key(0), x_T, schedule=schedule,  # key unused
                       sampler="euler", steps=cfg.steps)
        x = jnp.clip(x, -1.0, 1.0)
        return (x, jnp.mean(reward_fn(x, labels)), jnp.mean(judge_fn(x, labels)),
                features(x))

    return jax.jit(jax.vmap(one, in_axes=(None, 0, None)))


def make_trainer(cfg: Config, reward_fn):
    """``(tdm, single, batched)``: the trainer and two jitted ``train(state, teacher, keys, hp)
    -> (state, metrics)``, each a ``lax.scan`` of the update over the T rows of ``keys``:
    ``single`` for one run (keys [T]; metrics [T]), ``batched`` vmapped over R runs (state,
    keys [T, R] and hp with a leading R; metrics [T, R])."""
    gen_fn, score_fn = denoisers(cfg)
    tdm = dfn.make_tdm_r1(gen_fn, score_fn, reward_fn, sigmas=rollout_sigmas(cfg),
                          num_groups=NUM_CLASSES, sample_shape=(DIM,),
                          num_boundaries=cfg.num_boundaries, sigma_data=cfg.sigma_data)
    cond, ids = dfn.group_batch(jnp.arange(NUM_CLASSES), cfg.group_size)
    keep = ("reward", "adv_abs", "tdm_loss", "reward_loss", "sur_loss", "anchor", "clip_ratio")

    def scanned(update):
        def train(state, teacher, keys, hp):
            def step(s, k):
                s, m = update(s, teacher, k, cond, ids, hp)
                return s, {n: m[n] for n in keep}
            return lax.scan(step, state, keys)
        return jax.jit(train)

    single = scanned(tdm.update.jitted)
    batched = scanned(jax.vmap(tdm.update.jitted, in_axes=(0, None, 0, None, None, 0)))
    return tdm, single, batched


_TDM_FORMAT = 1  # bump when the TDM stage's recipe changes


def tdm_stage(cfg: Config, tdm, train, student, teacher, key, *, cache: bool = True):
    """The start model: ``tdm_iters`` TDM-only updates from the student, EMA of G (cached)."""
    hp = dfn.tdm_r1_params("tdm_only", lr_gen=cfg.lr_gen, lr_fake=cfg.lr_fake,
                           lr_sur=cfg.lr_sur)

    def compute():
        state = tdm.init(student, teacher)
        state, m = train(state, teacher, jax.random.split(key, cfg.tdm_iters), hp)
        return jax.block_until_ready({"gen": state.gen_ema, "tdm_loss": m["tdm_loss"]}), {}

    if not cache:
        return {**compute()[0], "cached": False}
    like = {"gen": jax.eval_shape(lambda: student),
            "tdm_loss": jax.ShapeDtypeStruct((cfg.tdm_iters,), jnp.float32)}
    fp = {"format": _TDM_FORMAT, "models": core_cache.array_digest(
              *jax.tree.leaves(student), *jax.tree.leaves(teacher)),
          "key": key, "iters": cfg.tdm_iters, "group_size": cfg.group_size,
          "steps": cfg.steps, "num_boundaries": cfg.num_boundaries,
          "sigmas": [cfg.sigma_min, cfg.sigma_max, cfg.rho, cfg.sigma_data],
          "lr": [cfg.lr_gen, cfg.lr_fake, cfg.lr_sur], "defaults": dfn.TDM_R1_DEFAULTS}
    tree, meta = core_cache.load_or_compute(core_cache.cache_root("tdm_r1"), fp, compute,
                                            like=like)
    return {**jax.tree.map(jnp.asarray, tree), "cached": meta["cached"]}


def variant_inputs(cfg: Config, tdm, start, teacher, key):
    """``(names [R], hparams [R], keys [T, R], initial state [R])`` of every variant x seed run
    (variant-major, seed-minor)."""
    names = [v for v in cfg.variants for _ in range(cfg.num_seeds)]
    hps = dfn.stack_params([dfn.tdm_r1_params(v, lr_gen=cfg.lr_gen, lr_fake=cfg.lr_fake,
                                              lr_sur=cfg.lr_sur, lam_r=cfg.lam_r)
                            for v in names])
    # seed s of every variant uses the same keys: paired comparisons across variants
    seed_keys = jax.random.split(key, cfg.num_seeds)
    keys = jax.vmap(lambda k: jax.random.split(k, cfg.rl_iters))(seed_keys)  # [S, T]
    keys = jnp.tile(keys, (len(cfg.variants), 1)).T  # [T, R]
    state = tdm.init(start, teacher)
    state = jax.tree.map(lambda a: jnp.broadcast_to(a, (len(names),) + a.shape), state)
    return names, hps, keys, state


def run_variants(cfg: Config, tdm, train, start, teacher, key):
    """Every variant x seed from ``start``, vmapped, in chunks of ``eval_every`` iterations.

    Returns:
      ``(checkpoints, curves, names)``: ``[(iteration, EMAs of G [R, ...])]`` after every
      chunk (the last one is the final model), ``{metric: [T, R]}`` per-iteration trainer
      metrics, and the variant of each run r.
    """
    names, hps, keys, state = variant_inputs(cfg, tdm, start, teacher, key)
    checkpoints, chunks, e = [], [], cfg.eval_every
    for c in range(cfg.rl_iters // e):  # the same compiled scan for every chunk
        state, m = train(state, teacher, keys[c * e:(c + 1) * e], hps)
        checkpoints.append(((c + 1) * e, state.gen_ema))
        chunks.append(jax.device_get(m))
    curves = {n: np.concatenate([m[n] for m in chunks]) for n in chunks[0]}
    return checkpoints, curves, names


# ----------------------------------------------------------------------------- evaluation

def evaluate(score, params, x_eval, labels, ref_stats) -> dict[str, np.ndarray]:
    """Per eval draw: reward, judge, FID ([D] each); and the first draw's images."""
    imgs, reward, judge, feats = jax.device_get(score(params, x_eval, labels))
    return {"reward": reward, "judge": judge, "images": imgs[0],
            "fid": np.array([digits.frechet(f, ref_stats) for f in feats])}


def run(config: Config, key) -> dict[str, Any]:
    """Models, reward, TDM stage, RL of every variant x seed, evaluation; see the docstring."""
    from threadpoolctl import threadpool_limits

    # one BLAS thread for sklearn / scipy: with 2 threads on 2 busy cores OpenBLAS spins, and
    # the FID classifier's fit takes ~18 s instead of ~0.6 s (XLA's own threads are unaffected)
    with threadpool_limits(limits=1, user_api="blas"):
        return _run(config, key)


def _run(cfg: Config, key) -> dict[str, Any]:
    sw = Stopwatch()
    k_model, k_dist, _, _, _, k_data, k_fid, _, _ = jax.random.split(key, 9)  # qsched's
    k_reward, k_tdm, k_rl, k_eval = jax.random.split(jax.random.fold_in(key, 24), 4)
    metrics: dict[str, float] = {}
    with sw("data_and_classifiers"):
        x_tr, y_tr, x_ho, y_ho = digits.load_digits(cfg.test_fraction, rng.numpy_seed(k_data))
        features, fid_clf = digits.fit_fid_features(x_ho, y_ho, rng.numpy_seed(k_fid),
                                                    max_iter=cfg.fid_iters)
        f_tr = np.asarray(features(jnp.asarray(x_tr)))
        ref_stats = digits.feature_stats(f_tr)
        half = len(x_tr) // 2
        metrics["fid/real_floor"] = digits.frechet(f_tr[:half], digits.feature_stats(f_tr[half:]))
        rew_clf = fit_reward_classifier(x_tr, y_tr, hidden=cfg.reward_hidden,
                                        max_iter=cfg.reward_iters, seed=rng.numpy_seed(k_reward))
        thresholds = ink_thresholds(x_tr, y_tr, cfg.ink_percentile)
        reward_fn = make_reward(mlp_logits_fn(rew_clf), thresholds)
        judge_fn = make_reward(mlp_logits_fn(fid_clf), thresholds)
        xr, yr, xh, yh = (jnp.asarray(a) for a in (x_tr, y_tr, x_ho, y_ho))
        metrics["classifier/reward_acc_heldout"] = float(rew_clf.score(x_ho, y_ho))
        metrics["classifier/judge_acc_train"] = float(fid_clf.score(x_tr, y_tr))
        metrics["reward/real_heldout"] = float(jnp.mean(reward_fn(xh, yh)))
        metrics["judge/real_train"] = float(jnp.mean(judge_fn(xr, yr)))
        # what a generator of real rewarded digits would score: reward is reachable at low FID
        rewarded = np.asarray(reward_fn(xr, yr)) > 0
        metrics["fid/real_rewarded"] = digits.frechet(f_tr[rewarded], ref_stats)
    with sw("models"):
        out = digits.trained_denoisers(
            k_model, x_tr, y_tr, hidden=cfg.hidden, depth=cfg.depth,
            train_steps=cfg.train_steps, batch_size=cfg.batch_size,
            learning_rate=cfg.learning_rate, sigma_data=cfg.sigma_data, key_distill=k_dist,
            distill_steps=cfg.distill_steps, sigma_min=cfg.sigma_min,
            sigma_max=cfg.sigma_max, rho=cfg.rho)
        teacher, student = out["teacher"], out["student"]
    tdm, train_one, train_many = make_trainer(cfg, reward_fn)
    with sw("tdm_stage"):
        stage = tdm_stage(cfg, tdm, train_one, student, teacher, k_tdm)
    with sw("rl"):
        checkpoints, curves, names = run_variants(cfg, tdm, train_many, stage["gen"], teacher,
                                                  k_rl)
    with sw("evaluate"):
        score = make_scorer(cfg, reward_fn, judge_fn, features)
        x_eval = jax.random.normal(k_eval, (cfg.eval_draws, cfg.n_eval, DIM))
        labels = jnp.arange(cfg.n_eval) % NUM_CLASSES
        evals = {"student": evaluate(score, student, x_eval, labels, ref_stats),
                 "start": evaluate(score, stage["gen"], x_eval, labels, ref_stats)}
        # trajectory[variant]: [checkpoints, seeds, (reward, judge, fid)]
        traj = {v: np.zeros((len(checkpoints), cfg.num_seeds, 3)) for v in cfg.variants}
        for c, (_, ema) in enumerate(checkpoints):
            for i, n in enumerate(names):  # one run at a time (the same compiled scorer)
                ev = evaluate(score, jax.tree.map(lambda a: a[i], ema), x_eval, labels,
                              ref_stats)
                traj[n][c, i % cfg.num_seeds] = [ev[k].mean() for k in ("reward", "judge",
                                                                         "fid")]
                if c == len(checkpoints) - 1:
                    evals.setdefault(n, []).append(ev)
    info = {"models_cached": out["cached"], "tdm_cached": stage["cached"],
            "tdm_loss": np.asarray(stage["tdm_loss"]),
            "iterations": [it for it, _ in checkpoints], "trajectory": traj}
    return _summarise(cfg, metrics, evals, curves, names, info, sw)


# ----------------------------------------------------------------------------- report

def _summarise(cfg, metrics, evals, curves, names, info, sw):
    per_seed: dict[str, dict[str, list[float]]] = {}
    for m, ev in evals.items():
        runs = ev if isinstance(ev, list) else [ev]
        per_seed[m] = {k: [float(r[k].mean()) for r in runs] for k in ("reward", "judge", "fid")}
        for k, v in per_seed[m].items():
            metrics[f"{k}/{m}"] = float(np.mean(v))
            if len(v) > 1:
                metrics[f"{k}_sd/{m}"] = float(np.std(v, ddof=1))
    variants = list(cfg.variants)
    for v in variants:
        for k in ("reward", "judge"):
            metrics[f"{k}_gain/{v}"] = metrics[f"{k}/{v}"] - metrics[f"{k}/start"]
    m = metrics
    d = {v: m["reward/tdm_r1"] - m[f"reward/{v}"] for v in variants if v != "tdm_r1"}
    seeds_txt = lambda mod, k: ", ".join(f"{x:.3f}" for x in per_seed[mod][k])  # noqa: E731
    claims = [
        claim("reward/tdm_r1", m["reward/tdm_r1"], paper=says("non_differentiable_rewards"),
              criterion="reward(tdm_r1) - reward(start) >= 0.20 (binary reward: right digit AND "
                        f"bold; mean of {cfg.num_seeds} seeds, {cfg.eval_draws} x {cfg.n_eval} "
                        "fixed eval samples)",
              passed=m["reward_gain/tdm_r1"] >= 0.20,
              baselines={"start": m["reward/start"], "student": m["reward/student"]},
              note=f"per seed: {seeds_txt('tdm_r1', 'reward')}"),
        claim("judge/tdm_r1", m["judge/tdm_r1"],
              paper=says("rl_performance_in_and_out_of_domain"),
              criterion="out of domain: the same rule scored by the held-out FID classifier "
                        "rises by >= 0.15 over the start model",
              passed=m["judge_gain/tdm_r1"] >= 0.15,
              baselines={"start": m["judge/start"]},
              note=f"per seed: {seeds_txt('tdm_r1', 'judge')}"),
        claim("fid/tdm_r1", m["fid/tdm_r1"], paper=says("rl_performance_in_and_out_of_domain"),
              criterion="sample quality kept: FID(tdm_r1) <= 1.5 x FID(start)",
              passed=m["fid/tdm_r1"] <= 1.5 * m["fid/start"],
              baselines={"start": m["fid/start"], "student": m["fid/student"],
                         "real floor": m["fid/real_floor"]},
              note=f"per seed: {seeds_txt('tdm_r1', 'fid')}"),
    ]
    if "rwr" in d:
        claims.append(claim(
            "reward/tdm_r1", m["reward/tdm_r1"], paper=says("rl_performance_in_and_out_of_domain"),
            criterion="beats reward-weighted denoising on its own rollouts (same TDM term, "
                      "weights max(A, 0)): reward(tdm_r1) >= reward(rwr) + 0.10",
            passed=d["rwr"] >= 0.10, baselines={"rwr": m["reward/rwr"]},
            note=f"rwr per seed: {seeds_txt('rwr', 'reward')}"))
    if "tdm_only" in d:
        claims.append(claim(
            "reward/tdm_r1", m["reward/tdm_r1"], paper=says("decoupled_surrogate"),
            criterion="the learned surrogate is what moves the reward: reward(tdm_r1) >= "
                      "reward(tdm_only) + 0.15 (tdm_only: the same trainer, reward term off)",
            passed=d["tdm_only"] >= 0.15, baselines={"tdm_only": m["reward/tdm_only"]},
            note=f"tdm_only per seed: {seeds_txt('tdm_only', 'reward')}"))
    for v, what in (("no_per_step", "the surrogate trained on the final samples x_K only"),
                    ("no_tweight", "the surrogate's time weight w_t = 1")):
        if v in d:
            claims.append(claim(
                f"reward/{v}", m[f"reward/{v}"], paper=says("per_step_rewards"),
                criterion=f"ablation ({what}); reported either way: the full method's reward "
                          f"exceeds it by >= 0.05",
                passed=d[v] >= 0.05,
                baselines={"tdm_r1": m["reward/tdm_r1"], "FID": m[f"fid/{v}"]},
                note=f"per seed: {seeds_txt(v, 'reward')}"))
    rows = [(mod, m[f"reward/{mod}"], m[f"judge/{mod}"], m[f"fid/{mod}"],
             ", ".join(f"{x:.2f}" for x in per_seed[mod]["reward"]))
            for mod in BASE_MODELS + tuple(variants)]
    table = markdown_table(("model", "reward", "judge (FID classifier)", "FID",
                            "reward per seed"), rows)
    traj = {v: a.mean(1) for v, a in info["trajectory"].items()}  # [C, 3] seed means
    its = info["iterations"]
    traj_table = markdown_table(
        ("RL iteration",) + tuple(f"{v}: reward / judge / FID" for v in variants),
        [(it,) + tuple("{:.3f} / {:.3f} / {:.2f}".format(*traj[v][c]) for v in variants)
         for c, it in enumerate(its)],
        title=f"Trajectory (EMA of G, mean of {cfg.num_seeds} seeds; start: reward "
              f"{m['reward/start']:.3f}, FID {m['fid/start']:.2f})")
    ok = [c for c in range(len(its)) if traj["tdm_r1"][c, 2] <= 1.5 * m["fid/start"]]
    if ok:
        c = max(ok, key=lambda i: traj["tdm_r1"][i, 0])
        within = (f"within FID <= 1.5 x start the best checkpoint is iteration {its[c]}: "
                  f"reward {traj['tdm_r1'][c, 0]:.3f}, FID {traj['tdm_r1'][c, 2]:.2f}")
    else:
        within = "no checkpoint keeps FID <= 1.5 x start"
    claims[2]["note"] += (f"; {within}; real rewarded digits vs all: "
                          f"{m['fid/real_rewarded']:.2f}")
    idx = {v: [i for i, n in enumerate(names) if n == v] for v in variants}
    curve_mean = {v: np.asarray(curves["reward"])[:, idx[v]].mean(1).tolist() for v in variants}
    notes = (f"Models {'cached' if info['models_cached'] else 'trained now'}; TDM stage "
             f"{'cached' if info['tdm_cached'] else 'run now'} ({cfg.tdm_iters} iterations). "
             f"fid/real_floor {m['fid/real_floor']:.3f}; FID of the real training digits with "
             f"reward 1 against all {m['fid/real_rewarded']:.3f}; reward on real held-out "
             f"digits {m['reward/real_heldout']:.3f}, judge on real training digits "
             f"{m['judge/real_train']:.3f}.")
    show = 4
    samples = {mod: _grid(evals[mod] if mod in BASE_MODELS else evals[mod][0], show)
               for mod in ("start", "tdm_r1")}
    return {"metrics": metrics, "claims": claims, "tables": [table, traj_table, notes],
            "data": {"curves": curve_mean, "samples": samples, "iterations": its,
                     "trajectory": {v: a.tolist() for v, a in traj.items()},
                     "tdm_loss": info["tdm_loss"].tolist()},
            "timings": sw.seconds}


def _grid(ev, show):
    """[10 classes, show, 64] eval images of the first draw (labels are i % 10)."""
    imgs = ev["images"]
    return [[imgs[c + NUM_CLASSES * k].tolist() for k in range(show)]
            for c in range(NUM_CLASSES)]


def plot(result: dict[str, Any], out_dir) -> list[pathlib.Path]:
    plt = plotting.pyplot()
    d = result["data"]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for v, c in d["curves"].items():
        c = np.asarray(c)
        w = max(1, len(c) // 30)  # moving average over ~1/30 of the run
        ax.plot(np.arange(w, len(c) + 1), np.convolve(c, np.ones(w) / w, mode="valid"),
                label=v)
    ax.axhline(result["metrics"]["reward/start"], color="k", ls=":", lw=1, label="start (eval)")
    ax.set_xlabel("RL iteration")
    ax.set_ylabel("rollout reward (mean over seeds, moving average)")
    ax.legend(fontsize=8)
    paths = [plotting.save(fig, out_dir, "reward_vs_iteration")]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    m = result["metrics"]
    ax.plot([m["reward/start"]], [m["fid/start"]], "ko", label="start")
    for v, tr in d["trajectory"].items():
        tr = np.asarray(tr)
        ax.plot(tr[:, 0], tr[:, 2], "o-", ms=3, label=v)
    ax.axhline(1.5 * m["fid/start"], color="k", ls=":", lw=1, label="1.5 x FID(start)")
    ax.set_xlabel("eval reward")
    ax.set_ylabel("FID (classifier features)")
    ax.set_title(f"checkpoints every {d['iterations'][0]} RL iterations", fontsize=9)
    ax.legend(fontsize=8)
    paths.append(plotting.save(fig, out_dir, "fid_vs_reward"))
    show = len(d["samples"]["start"][0])
    fig, axes = plt.subplots(2 * show, NUM_CLASSES, figsize=(8, 1.7 * show))
    for half, mod in enumerate(("start", "tdm_r1")):
        for k in range(show):
            for c in range(NUM_CLASSES):
                ax = axes[half * show + k, c]
                ax.imshow(np.asarray(d["samples"][mod][c][k]).reshape(8, 8), cmap="gray_r",
                          vmin=-1, vmax=1)
                ax.set_xticks([])
                ax.set_yticks([])
                if c == 0 and k == 0:
                    ax.set_ylabel(mod, fontsize=7)
                if half == 0 and k == 0:
                    ax.set_title(str(c), fontsize=8)
    fig.suptitle("eval samples per prompt (same noise): start (top) vs TDM-R1 seed 0 (bottom)",
                 fontsize=9)
    paths.append(plotting.save(fig, out_dir, "samples_start_vs_tdm_r1"))
    return paths
