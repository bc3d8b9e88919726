"""VT-Bench's modality diagnostics: ablation contribution (MCR) and integrated-gradient shares.

VT-Bench (``prediction/MCR_calculate.py`` of the release) asks how much an image-table model
uses each modality, on the embeddings ``z_img`` and ``z_tab`` that enter the fusion head
``predict(z_img, z_tab)``. Both diagnostics use the training-set mean of each embedding as the
"absent" value (DAFT's table: zeros, which the caller passes as ``mean_tab``).

* Ablation (:func:`mcr`): D_img = score(full) - score(image embedding replaced by its mean),
  D_tab likewise, and MCR_m = 100 D_m / (|D_img| + |D_tab| + eps), the sign kept (a modality
  whose removal helps gets a negative share). The score is accuracy; for regression D_m is the
  MAE increase, MAE(m ablated) - MAE(full), so positive still means "the modality helps".
* Integrated gradients (:func:`integrated_gradients`, Sundararajan et al. 2017) on the pair
  (z_img, z_tab) of one test sample from the mean baselines, the target being the true class'
  logit (regression: the prediction); the image share of a sample is
  100 L1(attr_img) / (L1(attr_img) + L1(attr_tab) + 1e-10) (:func:`ig_shares`), averaged over
  test samples with a 95% interval 1.96 std / sqrt(n) (:func:`ig_modality_shares`).

IG of a scalar function f at x from the baseline x' is, per coordinate,
``(x - x') * integral_0^1 grad f(x' + a (x - x')) da``; the integral is replaced by a quadrature
rule on ``steps`` nodes (``method``):

* ``"trapezoid"``: nodes ``k / (steps - 1)``, k = 0..steps-1, half weight at both ends; error
  O(1/steps^2), exact for integrands linear in a (f quadratic along the path);
* ``"gauss_legendre"``: Gauss-Legendre nodes mapped to [0, 1]; exact for integrands that are
  polynomials of degree <= 2 steps - 1 in a. captum's ``IntegratedGradients`` default
  (``"gausslegendre"``), hence what VT-Bench's 100-step IG used;
* ``"riemann_right"``: nodes ``k / steps``, k = 1..steps, equal weights; error O(1/steps).

Every rule's weights sum to 1, so a linear f gets exactly ``w * (x - x')`` and completeness
(``sum(attr) = f(x) - f(x')``) holds up to the rule's error.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["integrated_gradients", "integrated_gradients_batch", "ig_shares",
           "ig_modality_shares", "mcr", "METHODS", "TASKS"]

METHODS = ("trapezoid", "gauss_legendre", "riemann_right")
TASKS = ("classification", "regression")
# fewest nodes each rule is defined for (a trapezoid needs both ends; one Gauss node = midpoint)
_MIN_STEPS = {"trapezoid": 2, "gauss_legendre": 1, "riemann_right": 1}
# the release's denominators: 1e-10 for accuracy differences, 1e-9 for MAE differences
_MCR_EPS = {"classification": 1e-10, "regression": 1e-9}
_SHARE_EPS = 1e-10  # the release's epsilon in L1(img) / (L1(img) + L1(tab) + eps)

PyTree = Any


def _check_rule(steps: Any, method: Any) -> None:
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)):
        raise ValueError(f"steps must be a Python int (static), got {steps!r} "
                         f"of type {type(steps).__name__}")
    if steps < _MIN_STEPS[method]:
        raise ValueError(f"steps must be >= {_MIN_STEPS[method]} for method={method!r}, "
                         f"got {steps}")


@functools.lru_cache(maxsize=64)
def _rule(steps: int, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights (float64, [S] each) of a rule on [0, 1]; the weights sum to 1."""
    if method == "trapezoid":
        nodes = np.linspace(0.0, 1.0, steps)
        weights = np.full(steps, 1.0 / (steps - 1))
        weights[[0, -1]] *= 0.5
    elif method == "gauss_legendre":
        t, w = np.polynomial.legendre.leggauss(steps)  # on [-1, 1], weights sum to 2
        nodes, weights = 0.5 * (t + 1.0), 0.5 * w
    else:  # riemann_right
        nodes = np.arange(1, steps + 1, dtype=np.float64) / steps
        weights = np.full(steps, 1.0 / steps)
    nodes.setflags(write=False)
    weights.setflags(write=False)
    return nodes, weights


def _as_float_tree(tree: PyTree, name: str) -> PyTree:
    tree = jax.tree.map(jnp.asarray, tree)
    for leaf in jax.tree.leaves(tree):
        if not jnp.issubdtype(leaf.dtype, jnp.floating):
            raise ValueError(f"{name} must hold floating arrays (IG differentiates them), "
                             f"got dtype {leaf.dtype}")
    return tree


def integrated_gradients(f: Callable[[PyTree], jax.Array], x: PyTree, baseline: PyTree, *,
                         steps: int = 100, method: str = "trapezoid") -> PyTree:
    """Integrated gradients of a scalar function of one unbatched input.

    attr = (x - x') * sum_k w_k grad f(x' + a_k (x - x')), the quadrature (nodes a_k, weights
    w_k, see the module docstring) standing for integral_0^1 grad f(x' + a (x - x')) da. The
    gradients at the ``steps`` path points are one ``jax.vmap`` of ``jax.grad(f)``, so memory
    grows with ``steps`` times the size of x (and of f's activations).

    Works under ``jax.jit`` (``f``, ``steps`` and ``method`` static) and ``jax.vmap`` over
    samples (or use :func:`integrated_gradients_batch`).

    Args:
      f: ``f(x) -> scalar``; unbatched. For VT-Bench, ``x = (z_img, z_tab)`` and f is the true
        class' logit of the fusion head (close over the label).
      x: an array of any shape, or a pytree of floating arrays (e.g. the tuple (z_img, z_tab)).
      baseline: x', same structure and shapes as x (VT-Bench: the training-set mean embeddings).
      steps: number of quadrature nodes (static; >= 2 for "trapezoid", >= 1 otherwise).
      method: "trapezoid" | "gauss_legendre" | "riemann_right" (static).

    Returns:
      Attributions with the structure, shapes and dtypes of ``x - baseline``; they sum to
      about f(x) - f(x') (completeness).

    >>> f = lambda x: jnp.sum(x ** 2)
    >>> print(integrated_gradients(f, jnp.array([1.0, 2.0]), jnp.zeros(2), steps=2))
    [1. 4.]
    """
    _check_rule(steps, method)
    x = _as_float_tree(x, "x")
    baseline = _as_float_tree(baseline, "baseline")
    x_def, b_def = jax.tree.structure(x), jax.tree.structure(baseline)
    if x_def != b_def:
        raise ValueError(f"baseline must have the pytree structure of x: x is {x_def}, "
                         f"baseline is {b_def}")
    for xl, bl in zip(jax.tree.leaves(x), jax.tree.leaves(baseline)):
        if xl.shape != bl.shape:
            raise ValueError(f"baseline leaves must have the shapes of x's leaves: "
                             f"x {xl.shape} vs baseline {bl.shape}")

    def scalar_f(z):
        out = f(z)
        if jnp.shape(out) != ():
            raise ValueError(f"f must return a scalar, got shape {jnp.shape(out)}")
        return out

    nodes, weights = _rule(int(steps), method)
    real = jnp.result_type(float)  # float32, or float64 under x64
    diff = jax.tree.map(jnp.subtract, x, baseline)

    def grad_at(a):
        point = jax.tree.map(lambda b, d: b + a.astype(d.dtype) * d, baseline, diff)
        return jax.grad(scalar_f)(point)

    grads = jax.vmap(grad_at)(jnp.asarray(nodes, real))  # each leaf [S, *leaf shape]
    w = jnp.asarray(weights, real)
    mean_grad = jax.tree.map(lambda g: jnp.tensordot(w.astype(g.dtype), g, axes=1), grads)
    return jax.tree.map(jnp.multiply, diff, mean_grad)


def integrated_gradients_batch(f: Callable[..., jax.Array], xs: PyTree, baselines: PyTree,
                               aux: PyTree = None, *, steps: int = 100,
                               method: str = "trapezoid",
                               batch_size: int | None = None) -> PyTree:
    """:func:`integrated_gradients` for N samples (a vmap, or ``lax.map`` in chunks).

    Args:
      f: ``f(x)`` or, when ``aux`` is given, ``f(x, aux_i)`` -> scalar; unbatched (aux_i is
        one sample's slice of ``aux``, e.g. its label, not differentiated).
      xs: the inputs, each leaf [N, ...].
      baselines: per leaf either one baseline shared by all samples (the leaf's shape without
        N, as VT-Bench's training mean) or one per sample ([N, ...]).
      aux: optional pytree of [N, ...] arrays handed to f per sample.
      steps, method: as in :func:`integrated_gradients` (static).
      batch_size: None vmaps over all N samples at once (memory ~ N * steps * input size);
        an int runs ``jax.lax.map`` over chunks of that many samples (static).

    Returns:
      Attributions shaped like ``xs``.
    """
    _check_rule(steps, method)
    xs = _as_float_tree(xs, "xs")
    baselines = _as_float_tree(baselines, "baselines")
    x_def, b_def = jax.tree.structure(xs), jax.tree.structure(baselines)
    if x_def != b_def:
        raise ValueError(f"baselines must have the pytree structure of xs: xs is {x_def}, "
                         f"baselines is {b_def}")
    x_leaves = jax.tree.leaves(xs)
    if not x_leaves or any(leaf.ndim == 0 for leaf in x_leaves):
        raise ValueError("xs leaves must have a leading sample axis [N, ...]")
    n = x_leaves[0].shape[0]
    if any(leaf.shape[0] != n for leaf in x_leaves):
        raise ValueError(f"xs leaves must share the sample count N: got leading sizes "
                         f"{[leaf.shape[0] for leaf in x_leaves]}")
    full = []
    for xl, bl in zip(x_leaves, jax.tree.leaves(baselines)):
        if bl.shape == xl.shape[1:]:
            bl = jnp.broadcast_to(bl, xl.shape)  # one baseline shared by every sample
        elif bl.shape != xl.shape:
            raise ValueError(f"baselines leaf must be shaped {xl.shape[1:]} (shared) or "
                             f"{xl.shape} (per sample), got {bl.shape}")
        full.append(bl)
    baselines = jax.tree.unflatten(x_def, full)
    aux = jax.tree.map(jnp.asarray, aux)
    for leaf in jax.tree.leaves(aux):
        if leaf.ndim == 0 or leaf.shape[0] != n:
            raise ValueError(f"aux leaves must be shaped [N={n}, ...], got {leaf.shape}")
    if batch_size is not None and (isinstance(batch_size, bool) or
                                   not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be None or a positive int, got {batch_size!r}")

    def one(args):
        x, b, a = args
        g = f if aux is None else (lambda z: f(z, a))
        return integrated_gradients(g, x, b, steps=steps, method=method)

    if batch_size is None:
        return jax.vmap(one)((xs, baselines, aux))
    return jax.lax.map(one, (xs, baselines, aux), batch_size=batch_size)


def ig_shares(attr_img: jax.Array, attr_tab: jax.Array) -> jax.Array:
    """Image share of the L1 attribution mass per sample, in percent.

    share_i = 100 L1(attr_img_i) / (L1(attr_img_i) + L1(attr_tab_i) + 1e-10) (the release's
    epsilon: a sample with no attribution mass at all gets 0). The table share is 100 - share
    up to that epsilon.

    Args:
      attr_img: [N, ...] image-embedding attributions.
      attr_tab: [N, ...] table-embedding attributions.

    Returns:
      [N] image shares in percent.

    >>> print(ig_shares(jnp.array([[1.0, -3.0]]), jnp.array([[-4.0]])))
    [50.]
    """
    attr_img, attr_tab = jnp.asarray(attr_img), jnp.asarray(attr_tab)
    if attr_img.ndim == 0 or attr_tab.ndim == 0 or attr_img.shape[0] != attr_tab.shape[0]:
        raise ValueError(f"attr_tab and attr_img must be [N, ...] with the same N, got "
                         f"{attr_img.shape} and {attr_tab.shape}")
    l1_img = jnp.sum(jnp.abs(attr_img.reshape(attr_img.shape[0], -1)), axis=1)
    l1_tab = jnp.sum(jnp.abs(attr_tab.reshape(attr_tab.shape[0], -1)), axis=1)
    return 100.0 * l1_img / (l1_img + l1_tab + _SHARE_EPS)


def _check_pair(z_img, z_tab, y, mean_img, mean_tab, task):
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    z_img, z_tab, y = jnp.asarray(z_img), jnp.asarray(z_tab), jnp.asarray(y)
    mean_img, mean_tab = jnp.asarray(mean_img), jnp.asarray(mean_tab)
    if z_img.ndim < 2:
        raise ValueError(f"z_img must be [N, Di, ...], got shape {z_img.shape}")
    n = z_img.shape[0]
    if z_tab.ndim < 2 or z_tab.shape[0] != n:
        raise ValueError(f"z_tab must be [N={n}, Dt, ...] (rows of z_img), got {z_tab.shape}")
    if y.shape != (n,):
        raise ValueError(f"y must be [N={n}] (rows of z_img), got shape {y.shape}")
    if task == "classification" and not jnp.issubdtype(y.dtype, jnp.integer):
        raise ValueError(f"y must hold integer class labels for classification, got {y.dtype}")
    if mean_img.shape != z_img.shape[1:]:
        raise ValueError(f"mean_img must be shaped {z_img.shape[1:]} (z_img without N), "
                         f"got {mean_img.shape}")
    if mean_tab.shape != z_tab.shape[1:]:
        raise ValueError(f"mean_tab must be shaped {z_tab.shape[1:]} (z_tab without N), "
                         f"got {mean_tab.shape}")
    return z_img, z_tab, y, mean_img.astype(z_img.dtype), mean_tab.astype(z_tab.dtype)


def _regression_out(out: jax.Array, n: int) -> jax.Array:
    if out.shape not in ((n,), (n, 1)):
        raise ValueError(f"predict must return [N={n}] or [N, 1] values for regression, "
                         f"got {out.shape}")
    return out.reshape(n)


def mcr(predict: Callable[[jax.Array, jax.Array], jax.Array], z_img: jax.Array,
        z_tab: jax.Array, y: jax.Array, mean_img: jax.Array, mean_tab: jax.Array, *,
        task: str = "classification") -> dict[str, jax.Array]:
    """Modality contribution ratio by mean-embedding ablation (VT-Bench's MCR).

    D_img = acc(full) - acc(z_img rows replaced by mean_img), D_tab likewise, and
    MCR_m = 100 D_m / (|D_img| + |D_tab| + 1e-10), the sign kept. Regression uses the MAE
    increase D_m = MAE(m ablated) - MAE(full) (positive: the modality helps) and eps 1e-9, as
    the release does. Shares of two helpful modalities sum to 100; a harmful one is negative.

    Jittable with ``predict`` closed over and ``task`` static, e.g.
    ``jax.jit(functools.partial(mcr, predict, task="classification"))``.

    Args:
      predict: the fusion head, ``predict(z_img [N, ...], z_tab [N, ...])`` -> logits [N, C]
        (classification) or values [N] or [N, 1] (regression); batched.
      z_img: [N, Di, ...] image embeddings of the test set.
      z_tab: [N, Dt, ...] table embeddings of the same rows.
      y: [N] integer labels (classification) or float targets (regression).
      mean_img: [Di, ...] training-set mean of z_img, broadcast over the rows when ablating.
      mean_tab: [Dt, ...] training-set mean of z_tab (DAFT: zeros).
      task: "classification" or "regression" (static).

    Returns:
      A dict of 0-d jnp arrays (``float(...)`` them outside jit): "img", "tab" (MCR in
      percent), "d_img", "d_tab", and the scores "acc", "acc_no_img", "acc_no_tab"
      (classification) or "mae", "mae_no_img", "mae_no_tab" (regression); "no_img" means
      the image embedding was replaced by its mean.

    >>> predict = lambda zi, zt: jnp.stack([zi[:, 0], zt[:, 0]], axis=1)
    >>> zi, zt = jnp.array([[1.0], [0.0]]), jnp.array([[0.0], [1.0]])
    >>> out = mcr(predict, zi, zt, jnp.array([0, 1]), jnp.zeros(1), jnp.zeros(1))
    >>> print(float(out["acc"]), float(out["acc_no_tab"]), float(out["img"]), float(out["tab"]))
    1.0 0.5 0.0 100.0
    """
    z_img, z_tab, y, mean_img, mean_tab = _check_pair(z_img, z_tab, y, mean_img, mean_tab,
                                                      task)
    n = z_img.shape[0]
    ablated_img = jnp.broadcast_to(mean_img, z_img.shape)
    ablated_tab = jnp.broadcast_to(mean_tab, z_tab.shape)
    outs = (predict(z_img, z_tab), predict(ablated_img, z_tab), predict(z_img, ablated_tab))
    real = jnp.result_type(float)
    if task == "classification":
        for out in outs:
            if out.ndim != 2 or out.shape[0] != n:
                raise ValueError(f"predict must return logits [N={n}, C] for classification, "
                                 f"got {out.shape}")
        full, no_img, no_tab = (jnp.mean((jnp.argmax(o, axis=-1) == y).astype(real))
                                for o in outs)
        d_img, d_tab = full - no_img, full - no_tab
        names = ("acc", "acc_no_img", "acc_no_tab")
    else:
        full, no_img, no_tab = (jnp.mean(jnp.abs(_regression_out(o, n) - y)) for o in outs)
        d_img, d_tab = no_img - full, no_tab - full
        names = ("mae", "mae_no_img", "mae_no_tab")
    denom = jnp.abs(d_img) + jnp.abs(d_tab) + _MCR_EPS[task]
    result = {"img": 100.0 * d_img / denom, "tab": 100.0 * d_tab / denom,
              "d_img": d_img, "d_tab": d_tab}
    result.update(zip(names, (full, no_img, no_tab)))
    return result


def ig_modality_shares(predict: Callable[[jax.Array, jax.Array], jax.Array],
                       z_img: jax.Array, z_tab: jax.Array, y: jax.Array,
                       mean_img: jax.Array, mean_tab: jax.Array, *, steps: int = 100,
                       method: str = "trapezoid", task: str = "classification",
                       batch_size: int | None = None) -> dict[str, jax.Array]:
    """VT-Bench's IG diagnostic: per-sample image/table L1 shares and their mean with a 95% CI.

    For each test row i, IG of f(z_img_i, z_tab_i) = predict(z_img_i[None], z_tab_i[None])[0,
    y_i] (the true class' logit; regression: the prediction) from the baseline
    (mean_img, mean_tab), then :func:`ig_shares`. The summary follows the release:
    nanmean over rows and the half-width 1.96 nanstd / sqrt(N) (population std, ddof 0).
    VT-Bench ran captum's default rule with 100 steps: ``method="gauss_legendre"``.

    Args:
      predict: the fusion head as in :func:`mcr` (called here on batches of one row).
      z_img, z_tab, y, mean_img, mean_tab, task: as in :func:`mcr`.
      steps, method: the IG rule (static), see :func:`integrated_gradients`.
      batch_size: rows per ``lax.map`` chunk; None vmaps over all rows (static).

    Returns:
      A dict: "img", "tab" [N] per-row shares in percent; "img_mean", "tab_mean",
      "img_ci95", "tab_ci95" (0-d); "attr_img" [N, Di, ...], "attr_tab" [N, Dt, ...].
    """
    z_img, z_tab, y, mean_img, mean_tab = _check_pair(z_img, z_tab, y, mean_img, mean_tab,
                                                      task)

    def target(z, label):
        out = predict(z[0][None], z[1][None])
        if task == "classification":
            if out.ndim != 2 or out.shape[0] != 1:
                raise ValueError(f"predict must return logits [N, C], got {out.shape}")
            return out[0, label]
        return _regression_out(out, 1)[0]

    attr_img, attr_tab = integrated_gradients_batch(
        target, (z_img, z_tab), (mean_img, mean_tab), y, steps=steps, method=method,
        batch_size=batch_size)
    img = ig_shares(attr_img, attr_tab)
    tab = ig_shares(attr_tab, attr_img)
    half = 1.96 / jnp.sqrt(img.shape[0])
    return {"img": img, "tab": tab, "img_mean": jnp.nanmean(img), "tab_mean": jnp.nanmean(tab),
            "img_ci95": half * jnp.nanstd(img), "tab_ci95": half * jnp.nanstd(tab),
            "attr_img": attr_img, "attr_tab": attr_tab}
