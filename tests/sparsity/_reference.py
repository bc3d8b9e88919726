"""A float64 NumPy transformer written independently of jaxpapers.lm, with activation sparsity.

Used to check site placement, biases, shifts and calibration statistics; ``record`` receives each
site's activation *before* its threshold and shift.
"""

from __future__ import annotations

import numpy as np

EPS = 1e-5


def _rms(x, scale):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * scale


def _rope(x, base):  # x [B, H, T, D]
    d = x.shape[-1]
    half = d // 2
    inv = base ** (-np.arange(half) * 2.0 / d)
    ang = np.arange(x.shape[2])[:, None] * inv[None, :]  # [T, D/2]
    c, s = np.cos(ang), np.sin(ang)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def forward(params, tokens, cfg, sparsity=None, record=None):
    p = {k: np.asarray(v, np.float64) for k, v in params.items() if k != "layers"}
    layers = {k: np.asarray(v, np.float64) for k, v in params["layers"].items()}
    thr = {k: np.asarray(v, np.float64) for k, v in (sparsity or {}).get("threshold", {}).items()}
    shf = {k: np.asarray(v, np.float64) for k, v in (sparsity or {}).get("shift", {}).items()}
    tokens = np.asarray(tokens)
    b, t = tokens.shape
    hq, hk, dh = cfg.n_q_heads, cfg.n_kv_heads, cfg.head_dim
    x = p["embed"][tokens]
    for layer in range(cfg.n_layers):
        lp = {k: v[layer] for k, v in layers.items()}

        def lin(a, w):
            bias = {"wq": "bq", "wk": "bk", "wv": "bv", "wo": "bo", "w_gate": "b_gate",
                    "w_up": "b_up", "w_down": "b_down"}[w]
            return a @ lp[w] + (lp[bias] if bias in lp else 0.0)

        def site(name, a, layer=layer):
            if record is not None:
                record[(layer, name)] = a.copy()
            if name in thr:
                a = np.where(np.abs(a) > thr[name][layer], a, 0.0)
            if name in shf:
                a = a + shf[name][layer]
            return a

        h = site("attn_in", _rms(x, lp["attn_norm"]))

        def heads(a, n):
            return a.reshape(b, t, n, dh).transpose(0, 2, 1, 3)

        q = _rope(heads(lin(h, "wq"), hq), cfg.rope_base)
        k = _rope(heads(lin(h, "wk"), hk), cfg.rope_base)
        v = heads(lin(h, "wv"), hk)
        out = np.zeros((b, hq, t, dh))
        mask = np.tril(np.ones((t, t), bool))
        for j in range(hq):
            kv = j // (hq // hk)
            s = q[:, j] @ k[:, kv].transpose(0, 2, 1) / np.sqrt(dh)
            s = np.where(mask, s, -np.inf)
            s = np.exp(s - s.max(-1, keepdims=True))
            out[:, j] = (s / s.sum(-1, keepdims=True)) @ v[:, kv]
        o = out.transpose(0, 2, 1, 3).reshape(b, t, hq * dh)
        x = x + lin(site("attn_out", o), "wo")
        h = site("mlp_in", _rms(x, lp["mlp_norm"]))
        gate = lin(h, "w_gate")
        g = site("mlp_gate", gate / (1.0 + np.exp(-gate)))
        a = site("mlp_hidden", g * lin(h, "w_up"))
        x = x + lin(a, "w_down")
    return _rms(x, p["final_norm"]) @ p["unembed"]
