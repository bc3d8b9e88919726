"""Calibration of magnitude thresholds (TEAL, CATS) and training-free mean compensation.

Every function here runs the model once over a batch of calibration windows with a *hook* at each
activation site (:data:`jaxpapers.lm.SITES`) and returns per-layer statistics [N].

* :func:`calibrate` - **sequential** calibration: each site's threshold is the quantile of its
  activations with every earlier site (earlier in the block and in earlier layers) already
  sparse and shifted, so that the sparsity achieved by the sparse model equals the target.
* :func:`calibrate_dense` - TEAL's protocol: thresholds from the *dense* model's activations
  (exact ``|x|`` quantiles; TEAL itself approximates them with a histogram). The sparse model then
  runs sparser than nominal at later sites (its activations have drifted).
* :func:`mean_compensation` - the training-free shift ``s = E[x - sparsify(x)]`` per channel.
* :func:`achieved_sparsity`, :func:`weight_reads_skipped`, :func:`hidden_state_error` - what a
  sparsity dict does on held-out data.

``sparsity`` arguments are a level in [0, 1) applied at ``sites`` or a dict ``{site: level}``.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import checks
from jaxpapers.lm import model
from jaxpapers.lm._types import LMConfig
from jaxpapers.sparsity import threshold as _thr

__all__ = ["TEAL_SITES", "CATS_SITES", "calibrate", "calibrate_dense", "mean_compensation",
           "achieved_sparsity", "weight_reads_skipped", "hidden_state_error", "site_levels",
           "site_activations"]

#: TEAL's four linear-layer inputs
TEAL_SITES = ("attn_in", "attn_out", "mlp_in", "mlp_hidden")
#: CATS: the MLP gate activation only
CATS_SITES = ("mlp_gate",)


def site_levels(sparsity: Any, sites: Any = TEAL_SITES) -> dict[str, float]:
    """``{site: level}`` from a level (applied at every site of ``sites``) or a dict."""
    if isinstance(sparsity, dict):
        levels = dict(sparsity)
    else:
        if isinstance(sites, str):
            sites = (sites,)
        levels = {s: sparsity for s in sites}
    if not levels:
        raise ValueError("sparsity names no site")
    out = {}
    for site, level in levels.items():
        if site not in model.SITES:
            raise ValueError(f"sparsity: unknown site {site!r}; expected one of {list(model.SITES)}")
        if checks.concrete(level) is None:
            raise TypeError(f"sparsity[{site!r}] must be a concrete level (calibration runs once "
                            f"per level; vmap the sparse model, not its calibration)")
        _thr._check_level(level, f"sparsity[{site!r}]")
        out[site] = float(np.asarray(level))
    return out


def _check_inputs(params, tokens, config):
    model._check_config(config)
    tokens = model._check_tokens(tokens, "tokens", config, 2)
    model._check_length(tokens.shape[1], config)
    model._check_params(params, config)
    return tokens


def _order_stats(levels: dict[str, float], tokens: jax.Array, config: LMConfig) -> dict:
    """Per site ``(i, g)`` of the quantile over the site's ``B * T * width`` entries (host f64)."""
    n_tok = int(np.prod(tokens.shape))
    out = {}
    for site, level in levels.items():
        i, g = _thr.quantile_index(n_tok * model.site_width(config, site), level)
        out[site] = (jnp.int32(i), jnp.float64(g) if jax.config.jax_enable_x64 else
                     jnp.float32(g))
    return out


@functools.partial(jax.jit, static_argnames=("config", "dense", "mean_shift"))
def _calibrate(params, tokens, order, shift, config, dense, mean_shift):
    def hook(name, x, sp):
        if name not in order:
            return (x if dense else model._apply_sparsity(name, x, sp)), None
        tau = _thr._threshold_at(x, *order[name])
        kept = jnp.where(jnp.abs(x) > tau, x, jnp.zeros((), x.dtype))
        stats = {"threshold": tau}
        s = None
        if mean_shift and name in model.SHIFT_SITES:
            s = jnp.mean((x - kept).reshape(-1, x.shape[-1]), axis=0)
            stats["shift"] = s
        elif sp is not None and name in sp["shift"]:
            s = sp["shift"][name].astype(x.dtype)
        if dense:
            return x, stats
        return (kept if s is None else kept + s), stats

    sp = {"threshold": {}, "shift": shift}
    _, stacked = model._trunk(params, tokens, config, ("sites",), sp, hook)
    return stacked["sites"]


def _run(params, tokens, config, sparsity, sites, shift, dense, mean_shift):
    tokens = _check_inputs(params, tokens, config)
    levels = site_levels(sparsity, sites)
    shift = model.check_sparsity({"shift": shift or {}}, config)["shift"]
    stats = _calibrate(params, tokens, _order_stats(levels, tokens, config), shift, config,
                       dense, mean_shift)
    out = {"threshold": {s: stats[s]["threshold"] for s in levels}, "shift": dict(shift)}
    if mean_shift:
        out["shift"] = {s: stats[s]["shift"] for s in levels if s in model.SHIFT_SITES}
    return out


def calibrate(params: dict, tokens: jax.Array, *, config: LMConfig, sparsity: Any,
              shift: dict | None = None, sites: Any = TEAL_SITES) -> dict:
    """Sequential per-layer, per-site thresholds in one forward pass.

    At each calibrated site of layer ``l`` (in the order ``attn_in, attn_out, mlp_in, mlp_gate,
    mlp_hidden``, layer by layer) ``tau = quantile(|x|, level)`` over all ``B * T * width``
    entries of the calibration batch, where ``x`` already reflects every earlier site's
    sparsification and shift; then ``x <- where(|x| > tau, x, 0) + s``.

    Args:
      params: the language model (:func:`jaxpapers.lm.init` layout; float32 or float64).
      tokens: [B, T] calibration windows (integer byte ids).
      config: the model shape.
      sparsity: a level in [0, 1) used at every site of ``sites``, or ``{site: level}``.
      shift: optional ``{site: [N, width]}`` shifts applied while calibrating (SPON's
        recalibration with its learned vectors); they are returned unchanged.
      sites: the sites a scalar ``sparsity`` applies to (default TEAL's four linear inputs).

    Returns:
      ``{"threshold": {site: [N]}, "shift": shift or {}}``: a ``sparsity`` dict for
      :func:`jaxpapers.lm.forward`.

    Raises:
      ValueError / TypeError: a level outside [0, 1), an unknown site, bad shapes.
    """
    return _run(params, tokens, config, sparsity, sites, shift, dense=False, mean_shift=False)


def calibrate_dense(params: dict, tokens: jax.Array, *, config: LMConfig, sparsity: Any,
                    sites: Any = TEAL_SITES) -> dict:
    """TEAL's calibration: every threshold from the dense model's activations.

    Same arguments and result as :func:`calibrate` (no shift); exact ``|x|`` quantiles where TEAL
    uses a 10,000-bin histogram of the signed values with a symmetric ``icdf(0.5 + s/2)``.
    """
    return _run(params, tokens, config, sparsity, sites, None, dense=True, mean_shift=False)


def mean_compensation(params: dict, tokens: jax.Array, *, config: LMConfig, sparsity: Any,
                      sites: Any = TEAL_SITES, calibration: str = "sequential") -> dict:
    """Thresholds plus the training-free shift ``s = E[x - where(|x| > tau, x, 0)]``.

    The shift restores each channel's mean over the calibration tokens: the baseline a learned
    shift (SPON) must beat. ``mlp_gate`` takes no shift.

    Args:
      calibration: ``"sequential"`` (thresholds and means with earlier sites sparse and
        shifted, as :func:`calibrate`) or ``"dense"`` (both from dense activations).
      Other arguments: as :func:`calibrate`.

    Returns:
      ``{"threshold": {site: [N]}, "shift": {site: [N, width]}}``.
    """
    checks.check_choice("calibration", calibration, ("sequential", "dense"))
    return _run(params, tokens, config, sparsity, sites, None, dense=calibration == "dense",
                mean_shift=True)


@functools.partial(jax.jit, static_argnames=("config",))
def _zero_fractions(params, tokens, sparsity, config):
    def hook(name, x, sp):
        tau = sp["threshold"].get(name)
        stats = None
        if tau is not None:
            stats = jnp.mean((jnp.abs(x) <= tau).astype(jnp.float32))
        return model._apply_sparsity(name, x, sp), stats

    _, stacked = model._trunk(params, tokens, config, ("sites",), sparsity, hook)
    return stacked["sites"]


def achieved_sparsity(params: dict, tokens: jax.Array, *, config: LMConfig,
                      sparsity: dict) -> dict[str, jax.Array]:
    """Fraction of zeroed entries (``|x| <= tau``, before the shift) per thresholded site and
    layer, on ``tokens`` run through the sparse model.

    Returns:
      ``{site: [N] float32}``.
    """
    tokens = _check_inputs(params, tokens, config)
    sparsity = model.check_sparsity(sparsity, config)
    if sparsity is None or not sparsity["threshold"]:
        raise ValueError("sparsity must hold at least one threshold")
    return dict(_zero_fractions(params, tokens, sparsity, config))


@functools.partial(jax.jit, static_argnames=("config",))
def _site_acts(params, tokens, sparsity, config):
    def hook(name, x, sp):
        tau = sp["threshold"].get(name)
        stats = None
        if tau is not None:
            mask = jnp.abs(x) > tau
            stats = {"kept": jnp.where(mask, x, jnp.zeros((), x.dtype)), "mask": mask}
        return model._apply_sparsity(name, x, sp), stats

    _, stacked = model._trunk(params, tokens, config, ("sites",), sparsity, hook)
    return stacked["sites"]


def site_activations(params: dict, tokens: jax.Array, *, config: LMConfig,
                     sparsity: dict) -> dict[str, dict[str, jax.Array]]:
    """Each thresholded site's sparsified input ``x~ = where(|x| > tau, x, 0)`` (before its
    shift) and mask, recorded while ``tokens`` run through the sparse model.

    For checking bias absorption layer by layer with the masks held fixed, and for counting
    mask flips between two numerically different runs.

    Returns:
      ``{site: {"kept": [N, B, T, width], "mask": [N, B, T, width] bool}}``.
    """
    tokens = _check_inputs(params, tokens, config)
    sparsity = model.check_sparsity(sparsity, config)
    if sparsity is None or not sparsity["threshold"]:
        raise ValueError("sparsity must hold at least one threshold")
    return dict(_site_acts(params, tokens, sparsity, config))


def weight_reads_skipped(config: LMConfig, achieved: dict[str, Any]) -> float:
    """Fraction of the blocks' linear-weight entries a batch-1 decoder need not read.

    A zero input entry skips its weight row: ``attn_in`` rows of ``wq, wk, wv``, ``attn_out`` rows
    of ``wo``, ``mlp_in`` rows of ``w_gate, w_up``, ``mlp_hidden`` rows of ``w_down``. A zero
    ``mlp_gate`` neuron (CATS) skips its column of ``w_up`` and, unless ``mlp_hidden`` is
    thresholded (its zeros include the gate's), its row of ``w_down``; ``w_gate`` is always read.
    Rows and columns of ``w_up`` skipped by ``mlp_in`` and ``mlp_gate`` together are combined as if
    independent. Embedding and unembedding are not counted.

    Args:
      config: the model shape.
      achieved: ``{site: [N]}`` zero fractions (:func:`achieved_sparsity`).

    Returns:
      a float in [0, 1].
    """
    c = config
    z = {s: float(np.mean(np.asarray(v))) for s, v in achieved.items()}
    for s in z:
        if s not in model.SITES:
            raise ValueError(f"achieved: unknown site {s!r}")
    d, f = c.d_model, c.d_ff
    dq, dk = c.n_q_heads * c.head_dim, c.n_kv_heads * c.head_dim
    zi = z.get("attn_in", 0.0)
    zo = z.get("attn_out", 0.0)
    zm = z.get("mlp_in", 0.0)
    zg = z.get("mlp_gate", 0.0)
    zh = z.get("mlp_hidden", zg)
    skipped = (zi * d * (dq + 2 * dk) + zo * dq * d + zm * d * f  # wq wk wv, wo, w_gate
               + (1 - (1 - zm) * (1 - zg)) * d * f  # w_up rows and columns
               + zh * f * d)  # w_down
    total = d * (dq + 2 * dk) + dq * d + 3 * d * f
    return skipped / total


@functools.partial(jax.jit, static_argnames=("config",))
def _hidden(params, tokens, sparsity, config):
    return model._trunk(params, tokens, config, ("hidden",), sparsity)[1]["hidden"]


def hidden_state_error(params: dict, tokens: jax.Array, *, config: LMConfig,
                       sparsity: dict, dense_params: dict | None = None) -> jax.Array:
    """Relative error of each block's output (the residual stream) to the dense model's.

    ``||h_l^sparse - h_l^dense||_F / ||h_l^dense||_F`` over every token; the drift SPON's
    shifts are meant to reduce.

    Args:
      params: the sparse model's parameters (e.g. with absorbed biases).
      tokens: [B, T] windows.
      config: the model shape.
      sparsity: the sparsity dict.
      dense_params: the dense reference (default ``params``).

    Returns:
      [N] float.
    """
    tokens = _check_inputs(params, tokens, config)
    sparsity = model.check_sparsity(sparsity, config)
    dense_params = params if dense_params is None else dense_params
    model._check_params(dense_params, config)
    hs = _hidden(params, tokens, sparsity, config)
    hd = _hidden(dense_params, tokens, None, config)
    axes = tuple(range(1, hd.ndim))
    return jnp.sqrt(jnp.sum((hs - hd) ** 2, axis=axes) / jnp.sum(hd ** 2, axis=axes))
