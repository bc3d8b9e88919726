"""Benchmark: our scalar search and CVaR search vs mctx (batch 64, 32 simulations).

All policies share one random ``recurrent_fn`` (a tanh recurrence of width 8 with 5 actions, the
one of the parity tests) so the tree work dominates. Measured: jitted call, ``block_until_ready``,
median of interleaved repeats after a compile call, in one process (compare ratios, not seconds). The CVaR
search draws 256 return samples per expansion from 32 quantiles; its tree is the same size.

Run: ``python -m experiments.riskzero.bench`` (``--repeats N``). mctx must be installed (it is in
the ``test`` extra); without it only our timings are printed and the output says so.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxpapers.search as js

B, A, D, S, Q, M = 64, 5, 8, 32, 32, 256


def _problem(key, out_cls, root_cls):
    kw, ke, kl, kv = jax.random.split(key, 4)
    params = {"W": jax.random.normal(kw, (A, D, D)) / np.sqrt(D),
              "P": jax.random.normal(kl, (D, A)), "v": jax.random.normal(kv, (D,))}

    def rec(params, key, action, emb):
        new = jnp.tanh(jnp.einsum("bij,bj->bi", params["W"][action], emb) + 0.1)
        out = out_cls(reward=jnp.sin(3 * new[:, 0]), discount=jnp.full(action.shape, 0.9),
                      prior_logits=new @ params["P"], value=new @ params["v"])
        return out, new

    emb = jax.random.normal(ke, (B, D))
    root = root_cls(prior_logits=emb @ params["P"], value=emb @ params["v"], embedding=emb)
    return params, root, rec


def _risk_problem(params, root, rec):
    """The same recurrence with quantile rewards/values (location + fixed spread)."""
    spread = jnp.linspace(-1.0, 1.0, Q)

    def rrec(params, key, action, emb):
        out, new = rec(params, key, action, emb)
        return js.RiskRecurrentFnOutput(reward=out.reward[:, None] + 0.1 * spread,
                                        discount=out.discount, prior_logits=out.prior_logits,
                                        value=out.value[:, None] + spread), new

    rroot = js.RiskRootFnOutput(prior_logits=root.prior_logits,
                                value=root.value[:, None] + spread, embedding=root.embedding,
                                return_history=jnp.zeros((B, Q)), root_discount=jnp.ones(B))
    return rroot, rrec


def _time_all(fns: dict, key, repeats: int) -> dict:
    """Median seconds per call of each jitted ``fn(key)``; the repeats are interleaved across the
    functions (round robin, a fresh key each round), so a drift in machine load hits every policy
    alike and the ratios stay meaningful on a shared CPU."""
    for f in fns.values():
        jax.block_until_ready(f(key))  # compile
    ts = {name: [] for name in fns}
    for i in range(repeats):
        k = jax.random.fold_in(key, i)
        for name, f in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(f(k))
            ts[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) for name, v in ts.items()}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    key = jax.random.key(0)
    kp, kt = jax.random.split(key)
    p, root, rec = _problem(kp, js.RecurrentFnOutput, js.RootFnOutput)
    rroot, rrec = _risk_problem(p, root, rec)
    cvar = js.risk.make_utility("cvar", 0.25)
    fns = {
        "ours muzero_policy": jax.jit(lambda k: js.muzero_policy(p, k, root, rec, S).action_weights),
        "ours gumbel_muzero_policy": jax.jit(
            lambda k: js.gumbel_muzero_policy(p, k, root, rec, S).action_weights),
        f"ours CVaR gumbel search (M={M})": jax.jit(lambda k: js.risk_gumbel_muzero_policy(
            p, k, rroot, rrec, S, utility_fn=cvar, num_samples=M).action_weights),
        f"ours CVaR muzero (PUCT) search (M={M})": jax.jit(lambda k: js.risk_muzero_policy(
            p, k, rroot, rrec, S, utility_fn=cvar, num_samples=M).action_weights),
    }
    try:
        import mctx
    except ImportError:
        mctx = None
    if mctx is not None:
        p2, root2, rec2 = _problem(kp, mctx.RecurrentFnOutput, mctx.RootFnOutput)
        fns["mctx muzero_policy"] = jax.jit(
            lambda k: mctx.muzero_policy(p2, k, root2, rec2, S).action_weights)
        fns["mctx gumbel_muzero_policy"] = jax.jit(
            lambda k: mctx.gumbel_muzero_policy(p2, k, root2, rec2, S).action_weights)
    times = _time_all(fns, kt, args.repeats)
    print(f"backend {jax.default_backend()}, {jax.devices()[0].device_kind}; batch {B}, "
          f"{S} simulations, {A} actions; median of {args.repeats}")
    print("| policy | median ms | ratio to mctx |")
    print("|---|---|---|")
    ref = {"muzero_policy": "mctx muzero_policy", "gumbel_muzero_policy": "mctx gumbel_muzero_policy"}
    for name, t in times.items():
        base = None
        if mctx is not None and name.startswith("ours"):
            # each search against mctx's search with the same selection rule
            base = ref["gumbel_muzero_policy" if "gumbel" in name else "muzero_policy"]
        ratio = f"{t / times[base]:.2f}x" if base else "-"
        print(f"| {name} | {1e3 * t:.2f} | {ratio} |")
    if mctx is None:
        print("mctx is not installed: no ratios (pip install mctx)")
    return times


if __name__ == "__main__":
    main()
