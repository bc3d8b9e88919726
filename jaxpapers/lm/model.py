"""A small decoder-only transformer over bytes: RoPE, grouped-query attention, KV cache.

Pure functions over a parameter pytree. Per-layer weights are stacked on a leading layer axis so
that the blocks run under one ``lax.scan`` (one compiled block whatever the depth)::

    {"embed": [V, d], "final_norm": [d], "unembed": [d, V],
     "layers": {"attn_norm": [N, d], "wq": [N, d, Hq*D], "wk": [N, d, Hk*D], "wv": [N, d, Hk*D],
                "wo": [N, Hq*D, d], "mlp_norm": [N, d], "w_gate": [N, d, F], "w_up": [N, d, F],
                "w_down": [N, F, d]}}

Optional biases ``bq bk bv bo b_gate b_up b_down`` ([N, out]) may sit in ``params["layers"]``; an
absent bias is zero (``bq``/``bk`` are added before RoPE).

Blocks are pre-norm (RMSNorm) with a SwiGLU feed-forward layer. Query head ``j`` attends with
key/value head ``j // (Hq // Hk)`` (grouped-query attention). Keys in the cache and in
:func:`collect_qkv` are post-RoPE; queries are post-RoPE and not scaled by ``1/sqrt(D)``.

**Activation sparsity** (TEAL / CATS / SPON, :mod:`jaxpapers.sparsity`): :func:`forward`,
:func:`prefill` and :func:`decode_step` take ``sparsity=None`` or a dict
``{"threshold": {site: [N]}, "shift": {site: [N, width]}}``. At a site the activation becomes
``where(|x| > tau, x, 0) + s`` (SPON's eq. ``x~ = sparsify(x) + s``); a missing entry means dense
and no shift. The sites (:data:`SITES`) are ``attn_in`` (attn_norm output, d), ``attn_out`` (the
heads concatenated before ``wo``, Hq*D), ``mlp_in`` (mlp_norm output, d), ``mlp_gate``
(``silu(h w_gate)``, F; CATS, no shift) and ``mlp_hidden`` (``silu(h w_gate) * (h w_up)`` before
``w_down``, F). Thresholds and shifts are traced: new values reuse the compilation, a new set of
sites compiles once. ``sparsity=None`` runs exactly the dense program. Every path also runs in
float64 (cast the parameters; needs ``jax_enable_x64``).

Letters: ``N`` layers, ``B`` batch, ``T`` tokens, ``S`` cache slots, ``Hq``/``Hk`` query and
key/value heads, ``D`` head dimension, ``F`` feed-forward width, ``V`` vocabulary.

>>> import jax, jax.numpy as jnp
>>> cfg = LMConfig(d_model=32, n_layers=2, n_q_heads=4, n_kv_heads=2, head_dim=8, d_ff=64,
...                max_len=16)
>>> params = init(cfg, jax.random.key(0))
>>> tokens = jnp.array([[104, 105, 33, 10]], jnp.int32)
>>> logits, cache = prefill(params, tokens[:, :3], config=cfg, max_len=8)
>>> step_logits, cache = decode_step(params, cache, tokens[:, 3], config=cfg)
>>> full = forward(params, tokens, config=cfg)
>>> bool(jnp.allclose(step_logits, full[:, 3], atol=1e-5)), cache.length.tolist()
(True, [4])
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxpapers.core import checks
from jaxpapers.lm._types import AttnFn, KVCache, LMConfig

__all__ = ["init", "forward", "prefill", "decode_step", "collect_qkv", "dense_attention",
           "rope", "param_count", "SITES", "SHIFT_SITES", "site_width", "check_sparsity"]

_EPS = 1e-5
_MATRICES = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")
BIASES = {"wq": "bq", "wk": "bk", "wv": "bv", "wo": "bo", "w_gate": "b_gate", "w_up": "b_up",
          "w_down": "b_down"}
#: activation sites that can be sparsified (the inputs of the block's linear layers, and CATS's gate)
SITES = ("attn_in", "attn_out", "mlp_in", "mlp_gate", "mlp_hidden")
#: sites that accept a shift ``s`` (``mlp_gate`` is CATS's threshold only)
SHIFT_SITES = ("attn_in", "attn_out", "mlp_in", "mlp_hidden")


# ----------------------------------------------------------------------------- validation

def _check_config(config: Any) -> None:
    if not isinstance(config, LMConfig):
        raise TypeError(f"config must be an LMConfig, got {type(config).__name__}")


def _check_tokens(tokens: Any, name: str, config: LMConfig, ndim: int) -> jax.Array:
    """Integer dtype, rank, and (when concrete) values in [0, vocab)."""
    dtype = getattr(tokens, "dtype", None)
    if dtype is None:
        tokens = np.asarray(tokens)
        dtype = tokens.dtype
    if not jnp.issubdtype(dtype, jnp.integer):
        raise TypeError(f"{name} must hold integer token ids, got dtype {dtype}")
    if jnp.ndim(tokens) != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions "
                         f"({'[B, T]' if ndim == 2 else '[B]'}), got shape {jnp.shape(tokens)}")
    host = checks.concrete(tokens)
    if host is not None and host.size:
        lo, hi = int(host.min()), int(host.max())
        if lo < 0 or hi >= config.vocab:
            raise ValueError(f"{name} must be token ids in [0, {config.vocab}), "
                             f"got values in [{lo}, {hi}]")
    return jnp.asarray(tokens).astype(jnp.int32)


def _check_params(params: Any, config: LMConfig) -> None:
    try:
        wq = params["layers"]["wq"]
        embed = params["embed"]
    except (KeyError, TypeError) as e:
        raise TypeError("params must be the pytree returned by jaxpapers.lm.init") from e
    want = (config.n_layers, config.d_model, config.n_q_heads * config.head_dim)
    if tuple(wq.shape) != want or tuple(embed.shape) != (config.vocab, config.d_model):
        raise ValueError(f"params do not match config: layers.wq has shape {tuple(wq.shape)} "
                         f"(expected {want}), embed {tuple(embed.shape)}")
    layers = params["layers"]
    for w, b in BIASES.items():
        if b in layers:
            want = (config.n_layers, layers[w].shape[-1])
            if tuple(jnp.shape(layers[b])) != want:
                raise ValueError(f"params['layers']['{b}'] must have shape {want} ([N, out] of "
                                 f"{w}), got {tuple(jnp.shape(layers[b]))}")


def site_width(config: LMConfig, site: str) -> int:
    """Width of an activation site: d for ``attn_in``/``mlp_in``, Hq*D for ``attn_out``, F for
    ``mlp_gate``/``mlp_hidden``."""
    checks.check_choice("site", site, SITES)
    return {"attn_in": config.d_model, "mlp_in": config.d_model,
            "attn_out": config.n_q_heads * config.head_dim,
            "mlp_gate": config.d_ff, "mlp_hidden": config.d_ff}[site]


def check_sparsity(sparsity: Any, config: LMConfig) -> dict | None:
    """Validate a ``sparsity`` argument; returns ``{"threshold": {...}, "shift": {...}}`` (both
    keys present, arrays) or None.

    Raises:
      TypeError: not a dict, or non-float values.
      ValueError: an unknown key or site, a shift at ``mlp_gate``, a wrong shape, or (when
        concrete) a NaN or negative threshold; the message names the entry.
    """
    if sparsity is None:
        return None
    if not isinstance(sparsity, dict):
        raise TypeError(f"sparsity must be None or a dict with keys 'threshold' and 'shift', got "
                        f"{type(sparsity).__name__}")
    unknown = set(sparsity) - {"threshold", "shift"}
    if unknown:
        raise ValueError(f"sparsity has unknown keys {sorted(unknown)}; expected 'threshold' "
                         f"and/or 'shift'")
    out = {}
    for part, allowed in (("threshold", SITES), ("shift", SHIFT_SITES)):
        entries = sparsity.get(part) or {}
        if not isinstance(entries, dict):
            raise TypeError(f"sparsity['{part}'] must be a dict {{site: array}}, got "
                            f"{type(entries).__name__}")
        checked = {}
        for site, value in entries.items():
            name = f"sparsity['{part}']['{site}']"
            if site not in allowed:
                hint = (" (mlp_gate takes a threshold only)" if site == "mlp_gate" else "")
                raise ValueError(f"{name}: unknown site {site!r}; expected one of "
                                 f"{list(allowed)}{hint}")
            value = jnp.asarray(value)
            if not jnp.issubdtype(value.dtype, jnp.floating):
                raise TypeError(f"{name} must be floating point, got dtype {value.dtype}")
            want = ((config.n_layers,) if part == "threshold"
                    else (config.n_layers, site_width(config, site)))
            if value.shape != want:
                raise ValueError(f"{name} must have shape {want}, got {value.shape}")
            host = checks.concrete(value)
            if host is not None:
                if np.isnan(host).any():
                    raise ValueError(f"{name} holds NaN")
                if part == "threshold" and (host < 0).any():
                    raise ValueError(f"{name} must be >= 0, got min {host.min()}")
            checked[site] = value
        out[part] = checked
    return out


def _apply_sparsity(name: str, x: jax.Array, sp: dict | None) -> jax.Array:
    """``where(|x| > tau, x, 0) + s`` at site ``name`` with this layer's entries of ``sp``."""
    if sp is None:
        return x
    tau = sp["threshold"].get(name)
    if tau is not None:
        x = jnp.where(jnp.abs(x) > tau, x, jnp.zeros((), x.dtype))
    shift = sp["shift"].get(name)
    if shift is not None:
        x = x + shift.astype(x.dtype)
    return x


# ----------------------------------------------------------------------------- building blocks

def param_count(params: Any) -> int:
    """Number of scalars in a parameter pytree."""
    return int(sum(np.size(x) for x in jax.tree.leaves(params)))


def init(config: LMConfig, key: jax.Array) -> dict:
    """Random parameters for ``config`` (float32), per-layer weights stacked on axis 0.

    Args:
      config: the model shape.
      key: a ``jax.random.key``; consumed.

    Returns:
      the parameter pytree described in the module docstring.
    """
    _check_config(config)
    checks.check_key("key", key)
    c = config
    n, d, f = c.n_layers, c.d_model, c.d_ff
    dq, dk = c.n_q_heads * c.head_dim, c.n_kv_heads * c.head_dim
    keys = jax.random.split(key, 9)

    def normal(k, shape, fan_in, scale=1.0):
        return (scale / math.sqrt(fan_in)) * jax.random.normal(k, shape, jnp.float32)

    out_scale = 1.0 / math.sqrt(2 * n)  # residual branches sum over 2N blocks
    layers = {
        "attn_norm": jnp.ones((n, d), jnp.float32),
        "wq": normal(keys[0], (n, d, dq), d),
        "wk": normal(keys[1], (n, d, dk), d),
        "wv": normal(keys[2], (n, d, dk), d),
        "wo": normal(keys[3], (n, dq, d), dq, out_scale),
        "mlp_norm": jnp.ones((n, d), jnp.float32),
        "w_gate": normal(keys[4], (n, d, f), d),
        "w_up": normal(keys[5], (n, d, f), d),
        "w_down": normal(keys[6], (n, f, d), f, out_scale),
    }
    return {"embed": jax.random.normal(keys[7], (c.vocab, d), jnp.float32),
            "layers": layers,
            "final_norm": jnp.ones((d,), jnp.float32),
            "unembed": normal(keys[8], (d, c.vocab), d)}


def _rms_norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    var = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
    return x * lax.rsqrt(var + _EPS) * scale


def rope(x: jax.Array, positions: jax.Array, *, base: float) -> jax.Array:
    """Rotary position embedding (rotate-half convention), in ``x``'s dtype.

    Dimension pairs ``(i, i + D/2)`` are rotated by the angle ``p * base**(-2i/D)``, so that
    ``rope(q, m) . rope(k, n)`` depends on the positions only through ``m - n``.

    Args:
      x: [..., T, D] queries or keys, D even.
      positions: [..., T] integer positions, broadcastable against ``x[..., 0]``.
      base: the frequency base.

    Returns:
      [..., T, D], rotated.

    >>> import jax.numpy as jnp
    >>> q = jnp.array([[1.0, 0.0, 0.0, 0.0]])
    >>> rope(q, jnp.array([0]), base=10_000.0).tolist()
    [[1.0, 0.0, 0.0, 0.0]]
    """
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"x's last dimension must be even, got {d}")
    half = d // 2
    inv_freq = base ** (-jnp.arange(half, dtype=x.dtype) * (2.0 / d))
    angle = jnp.asarray(positions, x.dtype)[..., None] * inv_freq  # [..., T, D/2]
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def _linear(x: jax.Array, lp: dict, name: str) -> jax.Array:
    """``x @ W (+ b)`` for the matrix ``name`` of one layer (no bias entry: no addition)."""
    y = x @ lp[name]
    bias = lp.get(BIASES[name])
    return y if bias is None else y + bias


def _project_qkv(lp: dict, h: jax.Array, positions: jax.Array, c: LMConfig):
    """h [B, T, d] -> post-RoPE q [B, Hq, T, D], k [B, Hk, T, D] and v [B, Hk, T, D]."""
    b, t, _ = h.shape

    def heads(w, n):
        return _linear(h, lp, w).reshape(b, t, n, c.head_dim).transpose(0, 2, 1, 3)

    q = rope(heads("wq", c.n_q_heads), positions, base=c.rope_base)
    k = rope(heads("wk", c.n_kv_heads), positions, base=c.rope_base)
    return q, k, heads("wv", c.n_kv_heads)


def _causal_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """Dense causal GQA attention: q [B, Hq, T, D], k/v [B, Hk, T, D] -> [B, Hq, T, D]."""
    b, hq, t, d = q.shape
    hk = k.shape[1]
    qg = q.reshape(b, hk, hq // hk, t, d)
    s = jnp.einsum("bhgtd,bhsd->bhgts", qg, k) / math.sqrt(d)
    causal = jnp.tril(jnp.ones((t, t), bool))
    s = jnp.where(causal, s, jnp.finfo(s.dtype).min)
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("bhgts,bhsd->bhgtd", p, v).reshape(b, hq, t, d)


def _mlp(lp: dict, x: jax.Array, site: Any) -> jax.Array:
    h = site("mlp_in", _rms_norm(x, lp["mlp_norm"]))
    g = site("mlp_gate", jax.nn.silu(_linear(h, lp, "w_gate")))
    return _linear(site("mlp_hidden", g * _linear(h, lp, "w_up")), lp, "w_down")


def _site_fn(hook: Any, sp: Any, aux: dict) -> Any:
    """The per-layer ``site(name, x) -> x`` of a block: ``hook(name, x, sp) -> (x, stats)``
    (stats stored in ``aux[name]``) or, without a hook, :func:`_apply_sparsity`."""
    def site(name, x):
        if hook is None:
            return _apply_sparsity(name, x, sp)
        x, stats = hook(name, x, sp)
        if stats is not None:
            aux[name] = stats
        return x
    return site


def _trunk(params: dict, tokens: jax.Array, c: LMConfig, collect: tuple[str, ...],
           sparsity: dict | None = None, hook: Any = None):
    """Embedding, N blocks under ``lax.scan``, final norm and unembedding.

    ``sparsity``: a checked sparsity dict (its leaves sliced per layer by the scan) or None.
    ``hook(name, x, layer_sparsity) -> (x, stats or None)`` replaces the sparsification at every
    site (calibration, statistics); its stats come back stacked under ``"sites"``.

    Returns ``(logits [B, T, V], {name: [N, ...] for name in collect})``; ``collect`` may name
    ``q k v`` and ``"hidden"`` (the residual stream after the block, [N, B, T, d]).
    """
    b, t = tokens.shape
    positions = jnp.arange(t, dtype=jnp.int32)
    x = params["embed"][tokens]

    def block(x, xs):
        lp, sp = xs
        aux: dict = {}
        site = _site_fn(hook, sp, aux)
        h = site("attn_in", _rms_norm(x, lp["attn_norm"]))
        q, k, v = _project_qkv(lp, h, positions, c)
        o = _causal_attention(q, k, v)  # [B, Hq, T, D]
        x = x + _linear(site("attn_out", o.transpose(0, 2, 1, 3).reshape(b, t, -1)), lp, "wo")
        x = x + _mlp(lp, x, site)
        found = {"q": q, "k": k, "v": v, "hidden": x, "sites": aux}
        return x, {name: found[name] for name in collect}

    x, stacked = lax.scan(block, x, (params["layers"], sparsity))
    logits = _rms_norm(x, params["final_norm"]) @ params["unembed"]
    return logits, stacked


def _check_length(t: int, c: LMConfig, name: str = "tokens") -> None:
    if t < 1:
        raise ValueError(f"{name} must hold at least one token per sequence, got T={t}")
    if t > c.max_len:
        raise ValueError(f"{name} has T={t} tokens, more than config.max_len={c.max_len}")


# ----------------------------------------------------------------------------- public API

def _forward_impl(params, tokens, config, sparsity=None):
    return _trunk(params, tokens, config, (), sparsity)[0]


_forward = jax.jit(_forward_impl, static_argnames=("config",))


def forward(params: dict, tokens: jax.Array, *, config: LMConfig,
            sparsity: dict | None = None) -> jax.Array:
    """Next-byte logits of a batch of sequences (dense causal attention).

    Args:
      params: from :func:`init` (float32, or cast to float64).
      tokens: [B, T] integer byte ids in [0, V), T <= ``config.max_len``.
      config: the model shape (static).
      sparsity: None (dense) or ``{"threshold": {site: [N]}, "shift": {site: [N, width]}}``:
        every position's activation at each listed site becomes ``where(|x| > tau, x, 0) + s``
        (see the module docstring; traced, one compilation per set of sites).

    Returns:
      [B, T, V] logits in the parameters' dtype; ``logits[:, t]`` predicts ``tokens[:, t + 1]``.
    """
    _check_config(config)
    tokens = _check_tokens(tokens, "tokens", config, 2)
    _check_length(tokens.shape[1], config)
    _check_params(params, config)
    sparsity = check_sparsity(sparsity, config)
    return _forward(params, tokens, config, sparsity)


@functools.partial(jax.jit, static_argnames=("config",))
def _collect(params, tokens, config):
    stacked = _trunk(params, tokens, config, ("q", "k", "v"))[1]
    return stacked["q"], stacked["k"], stacked["v"]


def collect_qkv(params: dict, tokens: jax.Array, *, config: LMConfig):
    """Every layer's post-RoPE queries, keys and values on ``tokens`` (for analysis).

    Args:
      params: from :func:`init`.
      tokens: [B, T] integer byte ids.
      config: the model shape (static).

    Returns:
      ``(q [N, B, Hq, T, D], k [N, B, Hk, T, D], v [N, B, Hk, T, D])``; ``q`` is not scaled.

    >>> import jax, jax.numpy as jnp
    >>> cfg = LMConfig(d_model=16, n_layers=2, n_q_heads=2, n_kv_heads=1, head_dim=8, d_ff=32,
    ...                max_len=8)
    >>> q, k, v = collect_qkv(init(cfg, jax.random.key(0)), jnp.zeros((3, 5), jnp.int32),
    ...                       config=cfg)
    >>> q.shape, k.shape
    ((2, 3, 2, 5, 8), (2, 3, 1, 5, 8))
    """
    _check_config(config)
    tokens = _check_tokens(tokens, "tokens", config, 2)
    _check_length(tokens.shape[1], config)
    _check_params(params, config)
    return _collect(params, tokens, config)


def _prefill_impl(params, tokens, config, max_len, sparsity=None):
    logits, kv = _trunk(params, tokens, config, ("k", "v"), sparsity)
    b, t = tokens.shape
    pad = [(0, 0), (0, 0), (0, 0), (0, max_len - t), (0, 0)]
    cache = KVCache(k=jnp.pad(kv["k"], pad), v=jnp.pad(kv["v"], pad),
                    length=jnp.full((b,), t, jnp.int32))
    return logits, cache


_prefill = jax.jit(_prefill_impl, static_argnames=("config", "max_len"))


def prefill(params: dict, tokens: jax.Array, *, config: LMConfig,
            max_len: int, sparsity: dict | None = None) -> tuple[jax.Array, KVCache]:
    """Dense forward pass over a prompt that also fills a KV cache with ``max_len`` slots.

    Args:
      params: from :func:`init`.
      tokens: [B, T] integer byte ids, 1 <= T <= ``max_len``.
      config: the model shape (static).
      max_len: S, slots of the returned cache (static), T <= S <= ``config.max_len``.
      sparsity: as in :func:`forward` (every prompt position sparse).

    Returns:
      ``(logits [B, T, V], cache)`` with ``cache.length == T`` for every sequence; the logits
      equal :func:`forward`'s.
    """
    _check_config(config)
    tokens = _check_tokens(tokens, "tokens", config, 2)
    _check_length(tokens.shape[1], config)
    _check_params(params, config)
    max_len = checks.check_int("max_len", max_len)
    if not tokens.shape[1] <= max_len <= config.max_len:
        raise ValueError(f"max_len must be in [T={tokens.shape[1]}, config.max_len="
                         f"{config.max_len}], got {max_len}")
    sparsity = check_sparsity(sparsity, config)
    return _prefill(params, tokens, config, max_len, sparsity)


def dense_attention(q: jax.Array, k: jax.Array, v: jax.Array, length: jax.Array,
                    layer_state: Any = None, layer: Any = 0) -> jax.Array:
    """Exact single-query attention over the valid cache slots (the default ``attn_fn``).

    Query head ``j`` uses key/value head ``j // (Hq // Hk)``; slots ``s >= length[b]`` are masked.

    Args:
      q: [B, Hq, D] post-RoPE queries, not pre-scaled (scaled here by ``1/sqrt(D)``).
      k: [B, Hk, S, D] post-RoPE keys.
      v: [B, Hk, S, D] values.
      length: [B] int32 valid slots per sequence (>= 1).
      layer_state: ignored (part of the ``attn_fn`` signature).
      layer: ignored (part of the ``attn_fn`` signature).

    Returns:
      [B, Hq, D] attention outputs, float32 softmax (float64 for float64 inputs).

    >>> import jax.numpy as jnp
    >>> k = jnp.eye(2)[None, None]                      # [1, 1, 2, 2]: two keys
    >>> v = jnp.array([[[[1.0, 0.0], [0.0, 1.0]]]])
    >>> out = dense_attention(jnp.ones((1, 1, 2)), k, v, jnp.array([1]))
    >>> out.tolist()                                    # only slot 0 is valid
    [[[1.0, 0.0]]]
    """
    del layer_state, layer
    b, hq, d = q.shape
    hk, s = k.shape[1], k.shape[2]
    if k.shape != (b, hk, s, d) or v.shape != k.shape or hq % hk:
        raise ValueError(f"expected q [B, Hq, D], k and v [B, Hk, S, D] with Hq % Hk == 0; got "
                         f"q {q.shape}, k {k.shape}, v {v.shape}")
    qg = q.reshape(b, hk, hq // hk, d)
    acc = jnp.promote_types(q.dtype, jnp.float32)  # float32 softmax, float64 for float64 inputs
    scores = jnp.einsum("bhgd,bhsd->bhgs", qg, k).astype(acc) / math.sqrt(d)
    valid = jnp.arange(s)[None, :] < jnp.asarray(length)[:, None]  # [B, S]
    scores = jnp.where(valid[:, None, None, :], scores, -jnp.inf)
    p = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bhgs,bhsd->bhgd", p, v).reshape(b, hq, d)


def _decode(params, cache, token, attn_state, config, attn_fn, sparsity=None):
    c = config
    b = token.shape[0]
    pos = cache.length  # [B], the position of ``token``
    x = params["embed"][token]  # [B, d]
    attend = dense_attention if attn_fn is None else attn_fn

    bidx = jnp.arange(b)

    def write(slots, layer, new):  # slots [N, B, Hk, S, D], new [B, Hk, D]: set slot pos[b]
        # an in-place scatter into the carried cache (a scan over layers with the cache as
        # input and output would rewrite the whole cache at every step)
        return slots.at[layer, bidx, :, pos].set(new.astype(slots.dtype))

    def block(carry, xs):
        x, ck, cv = carry
        lp, state_l, layer, sp = xs
        site = _site_fn(None, sp, {})
        h = site("attn_in", _rms_norm(x, lp["attn_norm"]))[:, None, :]  # [B, 1, d]
        q, k_new, v_new = _project_qkv(lp, h, pos[:, None, None], c)  # [B, H, 1, D]
        ck = write(ck, layer, k_new[:, :, 0])
        cv = write(cv, layer, v_new[:, :, 0])
        k_l = lax.dynamic_index_in_dim(ck, layer, keepdims=False)
        v_l = lax.dynamic_index_in_dim(cv, layer, keepdims=False)
        o = attend(q[:, :, 0], k_l, v_l, pos + 1, state_l, layer)  # [B, Hq, D]
        x = x + _linear(site("attn_out", o.reshape(b, -1)), lp, "wo")
        x = x + _mlp(lp, x, site)
        return (x, ck, cv), None

    layers = jnp.arange(c.n_layers, dtype=jnp.int32)
    (x, k, v), _ = lax.scan(block, (x, cache.k, cache.v),
                            (params["layers"], attn_state, layers, sparsity))
    logits = _rms_norm(x, params["final_norm"]) @ params["unembed"]
    return logits, KVCache(k=k, v=v, length=pos + 1)


_decode_jit = jax.jit(_decode, static_argnames=("config", "attn_fn"))


def _check_cache(cache: Any, config: LMConfig, batch: int | None = None) -> None:
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a KVCache, got {type(cache).__name__}")
    n, b, hk, s, d = cache.k.shape
    if (n, hk, d) != (config.n_layers, config.n_kv_heads, config.head_dim) \
            or cache.v.shape != cache.k.shape or cache.length.shape != (b,):
        raise ValueError(f"cache does not match config: k {cache.k.shape}, v {cache.v.shape}, "
                         f"length {cache.length.shape}; expected k and v [N={config.n_layers}, B, "
                         f"Hk={config.n_kv_heads}, S, D={config.head_dim}] and length [B]")
    if batch is not None and b != batch:
        raise ValueError(f"token has batch {batch} but the cache holds {b} sequences")
    if not jnp.issubdtype(cache.length.dtype, jnp.integer):
        raise TypeError(f"cache.length must be int32, got {cache.length.dtype}")
    if checks.is_concrete(cache.length):
        full = int(np.max(np.asarray(cache.length), initial=0))
        if full >= s:
            raise ValueError(f"cache overflow: cache.length reaches {full} but the cache has "
                             f"only {s} slots (make it larger with prefill(..., max_len=))")


def _check_attn_state(attn_state: Any, config: LMConfig) -> None:
    for path, leaf in jax.tree_util.tree_leaves_with_path(attn_state):
        if not jnp.ndim(leaf) or jnp.shape(leaf)[0] != config.n_layers:
            raise ValueError(f"attn_state leaves need a leading n_layers={config.n_layers} axis; "
                             f"leaf {jax.tree_util.keystr(path)} has shape {jnp.shape(leaf)}")


def decode_step(params: dict, cache: KVCache, token: jax.Array, *, config: LMConfig,
                attn_fn: AttnFn | None = None, attn_state: Any = None,
                sparsity: dict | None = None) -> tuple[jax.Array, KVCache]:
    """Append one token per sequence to the cache and return the next-byte logits.

    The blocks run under ``lax.scan``. In block ``l`` the new token's key and value are written to
    slot ``cache.length`` first, then ``attn_fn(q, k, v, length + 1, attn_state[l], l)`` is called
    with ``q`` [B, Hq, D] post-RoPE and unscaled, ``k``/``v`` [B, Hk, S, D] this layer's cache,
    ``layer_state`` the slice ``attn_state[l]`` (leaf-wise) and ``l`` an int32 scalar; it returns
    [B, Hq, D]. ``attn_fn=None`` is :func:`dense_attention`. Jitted with ``config`` and
    ``attn_fn`` static (pass the same function object to avoid recompiling).

    Called eagerly, a full cache raises; under an outer ``jit`` the length cannot be checked and
    writing past the last slot overwrites it (clamped update).

    Args:
      params: from :func:`init`.
      cache: a :class:`KVCache` from :func:`prefill` or an earlier step, with room for one more.
      token: [B] integer byte ids (the tokens at positions ``cache.length``).
      config: the model shape (static).
      attn_fn: attention over the cache, or None for dense attention (static).
      attn_state: None or a pytree whose leaves have a leading ``n_layers`` axis.
      sparsity: as in :func:`forward`; a sparse :func:`prefill` followed by sparse decode steps
        gives the logits of a sparse :func:`forward`.

    Returns:
      ``(logits [B, V], cache)`` with ``length`` increased by one.
    """
    _check_config(config)
    token = _check_tokens(token, "token", config, 1)
    _check_params(params, config)
    _check_cache(cache, config, token.shape[0])
    _check_attn_state(attn_state, config)
    if attn_fn is not None and not callable(attn_fn):
        raise TypeError(f"attn_fn must be callable or None, got {type(attn_fn).__name__}")
    sparsity = check_sparsity(sparsity, config)
    return _decode_jit(params, cache, token, attn_state, config, attn_fn, sparsity)
