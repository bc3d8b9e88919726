"""SuperMeshNet reproduction: complementary vs supervised mesh super-resolution on plate data.

1. Data (:mod:`jaxpapers.core.fem`, scikit-fem meshes, cached): per dataset ``num_samples``
   LR / HR pairs of the release's plate (six holes): ``angle`` (elasticity, one mesh, the traction
   angle varies, target von Mises) and ``laplace`` (Laplace with +-1 holes, elliptic hole shapes
   vary, target |grad u|). Split by index: test, validation, ``num_paired`` paired training
   samples, ``num_lr_only`` LR-only ones (their HR fields are never built for the
   complementary models; ``sup_all`` trains on all of them as pairs).
2. Models (:mod:`jaxpapers.graph.supermeshnet`): ``knn`` (interpolation only), ``sup_all`` (all
   pairs, biases off, kNN residual kept), ``sup_few`` (the few pairs, off), ``sup_few_ib`` (on),
   ``comp`` (few pairs + LR-only, complementary loss, biases on), ``comp_noib`` (off). The same
   number of optimizer steps and samples per step for every model; all seeds (and the models that
   share a configuration) train stacked in one compiled step through
   :func:`jaxpapers.core.train.fit`.
3. Metric: RMSE in the release's normalised units (fields scaled by the LR field's min and range):
   ``sqrt(mean over test samples of the per-sample MSE)``; reported at the evaluation with the
   best validation RMSE (the release early-stops on the test loss; we select on validation) and,
   beside it, the release's "mean over the last evaluations".
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments.supermeshnet.config import Config
from jaxpapers.core import fem, plotting, registry
from jaxpapers.core import train as core_train
from jaxpapers.core.report import claim, markdown_table
from jaxpapers.core.timing import Stopwatch
from jaxpapers.graph import supermeshnet as smn

says = functools.partial(registry.paper_says, "supermeshnet")

# trained models -> (loss kind, inductive biases on, which pairs)
TRAINED = {"sup_all": ("supervised", False, "all"), "sup_few": ("supervised", False, "few"),
           "sup_few_ib": ("supervised", True, "few"), "comp": ("complementary", True, "few"),
           "comp_noib": ("complementary", False, "few")}
FEM_KIND = {"angle": "angle", "laplace": "poisson", "geometry": "geometry"}


# ----------------------------------------------------------------------------- data

def _sizes(config: Config) -> tuple[fem.MeshSize, fem.MeshSize]:
    return (fem.MeshSize(config.lr_size / 1000, config.lr_hole / 1000),
            fem.MeshSize(config.hr_size / 1000, config.hr_hole / 1000))


def load_data(config: Config) -> dict[str, Any]:
    """Per dataset: the FEM samples and their padded :class:`MeshSample` batches by split.

    Every dataset is padded to the same node and edge slots, so one compiled step serves all.
    """
    lr, hr = _sizes(config)
    raw = {d: fem.plate_dataset(FEM_KIND[d], config.num_samples, seed=config.data_seed,
                                lr=lr, hr=hr) for d in config.datasets}
    slots = {"max_lr_nodes": 0, "max_lr_edges": 0, "max_hr_nodes": 0, "max_hr_edges": 0}
    for ds in raw.values():
        for a, b in zip(ds.lr, ds.hr):
            slots["max_lr_nodes"] = max(slots["max_lr_nodes"], len(a.points))
            slots["max_lr_edges"] = max(slots["max_lr_edges"], 6 * len(a.triangles))
            slots["max_hr_nodes"] = max(slots["max_hr_nodes"], len(b.points))
            slots["max_hr_edges"] = max(slots["max_hr_edges"], 6 * len(b.triangles))
    nt, nv, npair = config.num_test, config.num_val, config.num_paired
    out = {}
    for d, ds in raw.items():
        def build(idx, with_hr=True, ds=ds):
            return smn.stack_samples([
                smn.mesh_sample(ds.lr[i].points, ds.lr[i].triangles, ds.lr[i].field,
                                ds.hr[i].points, ds.hr[i].triangles,
                                ds.hr[i].field if with_hr else None, **slots) for i in idx])

        train = range(nt + nv, config.num_samples)
        out[d] = {"raw": ds,
                  "test": build(range(nt)), "val": build(range(nt, nt + nv)),
                  "train": build(train),  # pairs, all (sup_all); the first num_paired: few
                  "lr_only": build(range(nt + nv + npair, config.num_samples), with_hr=False),
                  "nodes": (float(np.mean([len(a.points) for a in ds.lr])),
                            float(np.mean([len(b.points) for b in ds.hr])))}
    return out


# ----------------------------------------------------------------------------- training

@dataclasses.dataclass(frozen=True)
class _Batches:
    """``batch_fn(step, data)``: per stacked model, ``batch`` pairs or triplets from its pools.

    Model v draws its pairs uniformly from the first ``n_pairs[v]`` training samples (two
    distinct ones per triplet) and its LR-only sample uniformly from ``lr_only``, from
    ``fold_in(key_v, step)``.
    """

    kind: str
    batch: int

    def __call__(self, step, data):
        def one(key_data, n_pairs):
            key = jax.random.fold_in(jax.random.wrap_key_data(key_data), step)
            take = lambda tree, idx: jax.tree.map(lambda a: a[idx], tree)  # noqa: E731
            if self.kind == "supervised":
                return take(data["train"], smn.draw_indices(key, self.batch, n_pairs))
            i1, i2, i3 = smn.draw_indices(key, self.batch, n_pairs,
                                          jax.tree.leaves(data["lr_only"])[0].shape[0])
            return take(data["train"], i1), take(data["train"], i2), take(data["lr_only"], i3)

        return jax.vmap(one)(data["keys"], data["n_pairs"])


@dataclasses.dataclass(frozen=True)
class _Flat:
    """The parameters of ``V`` stacked models as one [V, P] array, and back (hashable, static).

    Adam is elementwise, so one Adam over the flat array is each leaf's own Adam, and the
    compiled step updates one array instead of every Dense kernel and bias (~50 leaves: a
    quarter of the step's program and of its compile time was per-leaf Adam). Not bit for bit:
    XLA rewrites the one bias-correction division into a reciprocal multiply, which moves last
    bits (~1e-7 relative on the tiny run's RMSEs).

    Attributes:
      treedef: of the stacked :class:`~jaxpapers.graph.supermeshnet.SuperMeshNetParams` (with
        its static configuration).
      shapes: every leaf's shape without the leading model axis V, in tree order.
    """

    treedef: Any
    shapes: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, stacked) -> "_Flat":
        leaves, treedef = jax.tree.flatten(stacked)
        return cls(treedef, tuple(tuple(x.shape[1:]) for x in leaves))

    def ravel(self, stacked) -> np.ndarray:
        """Host-side: [V, P] (leaves flattened per model and concatenated in tree order)."""
        leaves = [np.asarray(x) for x in jax.tree.leaves(stacked)]
        return np.concatenate([x.reshape(x.shape[0], -1) for x in leaves], axis=1)

    def unravel(self, flat):
        """The stacked tree of a [V, P] array (jax: traceable, its gradient a concatenation;
        numpy: on the host)."""
        split = jnp.split if isinstance(flat, jax.Array) else np.split
        cuts = np.cumsum([int(np.prod(s)) for s in self.shapes])[:-1].tolist()
        parts = split(flat, cuts, axis=1)
        return jax.tree.unflatten(self.treedef, [x.reshape((flat.shape[0],) + s)
                                                 for x, s in zip(parts, self.shapes)])


def _stacked_loss(kind: str, flat: _Flat | None = None):
    """Sum over stacked models of each one's batch-mean loss (Adam is elementwise, so one Adam
    over the stack is each model's own Adam). With ``flat``, the parameters come as its [V, P]
    array."""
    def loss_fn(params, batch, key):
        del key
        if flat is not None:
            params = flat.unravel(params)
        losses, _ = jax.vmap(lambda p, b: smn.batch_loss(p, b, kind=kind))(params, batch)
        return jnp.sum(losses), {f"model{i}": losses[i] for i in range(losses.shape[0])}
    return loss_fn


@functools.partial(jax.jit, static_argnums=(2, 3))
def _evaluate(flat_params, samples, flat: _Flat, example: int):
    """[V, B] MSE of each stacked model on each sample of a batch, and [V, N_H] every model's
    prediction of sample ``example`` (for the plots: no separate compiled forward pass)."""
    params = flat.unravel(flat_params)
    pred = jax.vmap(lambda p: jax.vmap(lambda s: smn.predict(p, s))(samples))(params)
    # supervised_loss's own MSE of the same predictions (the same numbers, one forward pass)
    mse = jax.vmap(jax.vmap(smn._masked_mse, in_axes=(0, 0, 0)), in_axes=(0, None, None))(
        pred, samples.hr_y, samples.hr_mask)
    return mse, pred[:, example]


@functools.lru_cache(maxsize=None)
def _step_fn(kind: str, learning_rate: float, flat: _Flat | None = None):
    return core_train.make_train_step(_stacked_loss(kind, flat), optax.adam(learning_rate),
                                      has_aux=True)


def train_group(config: Config, data: dict, key, *, kind: str, ib: bool, n_pairs: list[int],
                desc: str) -> dict[str, np.ndarray]:
    """Train ``len(n_pairs)`` stacked models (one per entry) of one configuration.

    Returns per model: ``val`` and ``test`` RMSE at every evaluation [V, num_evals], the
    training loss [V, steps], the final ``params`` (stacked, numpy) and ``example``, the final
    prediction of test sample 0 [V, N_H].
    """
    v = len(n_pairs)
    k_init, k_draw, k_state = jax.random.split(key, 3)
    # host-side glue (numpy, device_put): eager jnp indexing, stacking or jnp.asarray would
    # compile one program per shape
    one = jax.tree.map(lambda a: np.asarray(a)[0], data["train"])
    init_keys = np.asarray(jax.random.key_data(jax.random.split(k_init, v)))
    params = [smn.init(jax.random.wrap_key_data(k), one, hidden=config.hidden,
                       depth=config.depth, ib_n=ib, ib_e=ib, residual=True) for k in init_keys]
    params = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *params)
    flat = _Flat.of(params)
    step_fn = _step_fn(kind, config.learning_rate, flat)
    state = core_train.init_train_state(jax.device_put(flat.ravel(params)),
                                        optax.adam(config.learning_rate), k_state)
    feed = {"train": data["train"], "lr_only": data["lr_only"],
            "keys": jax.random.key_data(jax.random.split(k_draw, v)),
            "n_pairs": np.asarray(n_pairs, np.int32)}
    batch_fn = _Batches(kind, config.batch)
    # validation and test samples in one batch: one compiled evaluation
    evalset = jax.tree.map(lambda a, b: jax.device_put(np.concatenate([np.asarray(a),
                                                                       np.asarray(b)])),
                           data["val"], data["test"])
    n_val = jax.tree.leaves(data["val"])[0].shape[0]
    vals, tests, losses = [], [], []
    for stop in range(config.eval_every, config.steps + 1, config.eval_every):
        state, hist = core_train.fit(step_fn, state, batch_fn, num_steps=stop,
                                     chunk_size=config.eval_every, data=feed, desc=desc,
                                     progress=False)
        losses.append(np.stack([hist[f"model{i}"] for i in range(v)], 1))
        mse, example = _evaluate(state.params, evalset, flat, n_val)
        mse = np.asarray(mse, np.float64)  # [V, val + test]
        vals.append(np.sqrt(mse[:, :n_val].mean(1)))
        tests.append(np.sqrt(mse[:, n_val:].mean(1)))
    return {"val": np.stack(vals, 1), "test": np.stack(tests, 1),
            "loss": np.concatenate(losses, 0).T,
            "params": flat.unravel(np.asarray(state.params)), "example": np.asarray(example)}


@functools.partial(jax.jit, static_argnums=1)
def _knn_rmses(samples, sizes: tuple[int, ...]):
    """kNN baseline RMSE of each run of consecutive samples of the given sizes (one compiled
    call for several splits; eagerly, every op of the search compiled on its own)."""
    mse = jax.vmap(lambda s: smn.knn_rmse(s) ** 2)(samples)
    cuts = np.cumsum((0,) + sizes)
    return [jnp.sqrt(jnp.mean(mse[a:b])) for a, b in zip(cuts[:-1], cuts[1:])]


def knn_rmse(samples) -> float:
    return float(_knn_rmses(samples, (jax.tree.leaves(samples)[0].shape[0],))[0])


# ----------------------------------------------------------------------------- run

def run(config: Config, key) -> dict[str, Any]:
    """Everything random derives from ``key`` (initialisations, batch draws); the FEM data from
    ``config.data_seed`` (cached)."""
    sw = Stopwatch()
    with sw("data"):
        data = load_data(config)
    s = config.num_seeds
    trained = [m for m in config.models if m in TRAINED]
    # one stacked run per (loss kind, biases): its models x seeds
    groups: dict[tuple[str, bool], list[str]] = {}
    for m in trained:
        groups.setdefault(TRAINED[m][:2], []).append(m)
    metrics: dict[str, float] = {}
    curves: dict[str, dict] = {}
    examples = {}
    for di, (d, dd) in enumerate(data.items()):
        n_train = config.num_paired + config.num_lr_only
        # validation and test in one compiled call
        n_val = jax.tree.leaves(dd["val"])[0].shape[0]
        both = jax.tree.map(lambda a, b: np.concatenate([np.asarray(a), np.asarray(b)]),
                            dd["val"], dd["test"])
        n_test = jax.tree.leaves(dd["test"])[0].shape[0]
        knn_val, knn_test = _knn_rmses(both, (n_val, n_test))
        metrics[f"rmse/{d}/knn"] = float(knn_test)
        metrics[f"rmse_val/{d}/knn"] = float(knn_val)
        metrics[f"nodes/{d}/lr"], metrics[f"nodes/{d}/hr"] = dd["nodes"]
        for gi, ((kind, ib), models) in enumerate(sorted(groups.items())):
            n_pairs = [n_train if TRAINED[m][2] == "all" else config.num_paired
                       for m in models for _ in range(s)]
            gkey = jax.random.fold_in(jax.random.fold_in(key, di), gi)
            with sw(f"train/{d}/{kind}{'_ib' if ib else ''}"):
                out = train_group(config, dd, gkey, kind=kind, ib=ib, n_pairs=n_pairs,
                                  desc=f"{d} {kind} ib={ib}")
            for mi, m in enumerate(models):
                rows = slice(mi * s, (mi + 1) * s)
                val, test = out["val"][rows], out["test"][rows]  # [S, E]
                best = np.argmax(-val, axis=1)  # first best validation evaluation
                at_best = test[np.arange(s), best]
                last = test[:, -config.last_evals:].mean(1)
                metrics[f"rmse/{d}/{m}"] = float(at_best.mean())
                metrics[f"rmse_sd/{d}/{m}"] = float(at_best.std(ddof=1)) if s > 1 else 0.0
                metrics[f"rmse_last/{d}/{m}"] = float(last.mean())
                metrics[f"best_eval/{d}/{m}"] = float(best.mean())
                curves.setdefault(d, {})[m] = {"val": val.mean(0).tolist(),
                                               "test": test.mean(0).tolist(),
                                               "per_seed": at_best.tolist()}
                if m in ("sup_all", "comp"):
                    examples.setdefault(d, {})[m] = out["example"][mi * s]
        examples.setdefault(d, {})["sample"] = jax.tree.map(lambda a: np.asarray(a)[0],
                                                            dd["test"])
    claims = _claims(metrics, config)
    table_rows = []
    for m in ("knn",) + tuple(trained):
        if m not in config.models:
            continue
        row = [m]
        for d in config.datasets:
            row += [metrics[f"rmse/{d}/{m}"], metrics.get(f"rmse_sd/{d}/{m}", 0.0),
                    metrics.get(f"rmse_last/{d}/{m}", metrics[f"rmse/{d}/{m}"])]
        table_rows.append(row)
    header = ["model"]
    for d in config.datasets:
        header += [f"{d}: test RMSE at best val ({s} seeds)", "sd", "mean of last evals"]
    table = markdown_table(header, table_rows)
    mesh_table = markdown_table(("dataset", "LR nodes (mean)", "HR nodes (mean)"),
                                [(d, metrics[f"nodes/{d}/lr"], metrics[f"nodes/{d}/hr"])
                                 for d in config.datasets])
    return {"metrics": metrics, "claims": claims, "tables": [table, mesh_table],
            "data": {"curves": curves, "eval_every": config.eval_every,
                     "examples": _examples_json(examples, data)},
            "timings": sw.seconds}


def _examples_json(examples, data) -> dict:
    """Test sample 0 of each dataset: HR mesh, LR mesh, fields, predictions (for the plots)."""
    out = {}
    for d, ex in examples.items():
        raw = data[d]["raw"]
        lr, hr = raw.lr[0], raw.hr[0]
        smp = ex["sample"]
        n_h, n_l = len(hr.points), len(lr.points)
        out[d] = {"hr_points": hr.points.tolist(), "hr_triangles": hr.triangles.tolist(),
                  "lr_points": lr.points.tolist(), "lr_triangles": lr.triangles.tolist(),
                  "lr_y": smp.lr_y[:n_l].tolist(), "hr_y": smp.hr_y[:n_h].tolist(),
                  **{m: ex[m][:n_h].tolist() for m in ("sup_all", "comp") if m in ex}}
    return out


def _claims(m: dict[str, float], config: Config) -> list[dict]:
    out = []
    for d in config.datasets:
        have = lambda *names: all(f"rmse/{d}/{n}" in m for n in names)  # noqa: E731
        r = lambda n: m[f"rmse/{d}/{n}"]  # noqa: E731
        if have("comp", "sup_all"):
            out.append(claim(
                f"rmse/{d}/comp", r("comp"), paper=says("rmse_vs_fully_supervised"),
                criterion=f"{d}: complementary (10% of the training samples paired, biases on) "
                          "RMSE <= 1.1 x the fully supervised model's (all pairs, biases off), "
                          f"seed means, same step budget",
                passed=r("comp") <= 1.1 * r("sup_all"),
                baselines={"sup_all": r("sup_all"), "knn": r("knn")}))
        if have("comp", "sup_few"):
            out.append(claim(
                f"rmse/{d}/comp_vs_few", r("comp"), paper=says("complementary_learning"),
                criterion=f"{d}: complementary RMSE < supervised on the same few pairs alone "
                          "(sup_few)",
                passed=r("comp") < r("sup_few"),
                baselines={"sup_few": r("sup_few"), "sup_few_ib": m.get(f"rmse/{d}/sup_few_ib")}))
        if have("sup_few_ib", "sup_few") and have("comp", "comp_noib"):
            out.append(claim(
                f"rmse/{d}/sup_few_ib", r("sup_few_ib"), paper=says("inductive_biases"),
                criterion=f"{d}: the biases lower the RMSE both for supervised-few (sup_few_ib < "
                          "sup_few) and for complementary (comp < comp_noib)",
                passed=r("sup_few_ib") < r("sup_few") and r("comp") < r("comp_noib"),
                baselines={"sup_few": r("sup_few"), "comp": r("comp"),
                           "comp_noib": r("comp_noib")}))
        if have("sup_all", "knn"):
            out.append(claim(
                f"rmse/{d}/sup_all", r("sup_all"), paper=says("rmse_vs_fully_supervised"),
                criterion=f"{d}: sanity: the fully supervised MPNN beats kNN interpolation",
                passed=r("sup_all") < r("knn"), baselines={"knn": r("knn")}))
    return out


# ----------------------------------------------------------------------------- plots

def plot(result: dict[str, Any], out_dir) -> list[pathlib.Path]:
    plt = plotting.pyplot()
    paths = []
    curves, every = result["data"]["curves"], result["data"]["eval_every"]
    m = result["metrics"]
    datasets = list(curves)
    fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 3.6), squeeze=False)
    for ax, d in zip(axes[0], datasets):
        for name, c in curves[d].items():
            x = every * (1 + np.arange(len(c["test"])))
            ax.plot(x, c["test"], label=name)
        ax.axhline(m[f"rmse/{d}/knn"], color="gray", ls="--", label="knn")
        ax.set_title(d)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("test RMSE (normalised, seed mean)")
        ax.legend(fontsize=7)
    paths.append(plotting.save(fig, out_dir, "rmse_curves"))
    for d, ex in result["data"]["examples"].items():
        panels = [("LR input", "lr", ex["lr_y"]), ("HR truth", "hr", ex["hr_y"])]
        for name in ("sup_all", "comp"):
            if name in ex:
                panels.append((f"{name} prediction", "hr", ex[name]))
        if "comp" in ex:
            panels.append(("comp error", "hr", (np.asarray(ex["comp"]) -
                                                np.asarray(ex["hr_y"])).tolist()))
        fig, axes = plt.subplots(1, len(panels), figsize=(2.6 * len(panels), 4.4),
                                 squeeze=False)
        for ax, (title, side, vals) in zip(axes[0], panels):
            pts = np.asarray(ex[f"{side}_points"])
            tri = np.asarray(ex[f"{side}_triangles"])
            im = ax.tripcolor(pts[:, 0], pts[:, 1], tri, np.asarray(vals), shading="gouraud",
                              cmap="RdBu_r" if "error" in title else "viridis")
            ax.set_aspect("equal")
            ax.set_title(title, fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
            fig.colorbar(im, ax=ax, fraction=0.05)
        paths.append(plotting.save(fig, out_dir, f"fields_{d}"))
    return paths
