"""Golden values: one small fixed-key computation per capability, through the public API.

Run ``python -m tests.golden.regenerate`` (or ``python tests/golden/regenerate.py``) from the
repository root to rewrite ``tests/golden/values.json`` (``... regenerate pinn lm`` rewrites only
the named cases); ``tests/test_golden.py`` recomputes every case and compares. This pins determinism across processes and commits (mctx's golden-tree
pattern), not just two calls in one process: a change of key consumption, sampler, search rule or
numerics changes these numbers.

Regenerate only when a change of the numbers is intended (and say so in the commit). The values
hold for the recorded platform only: the test skips when the backend, the CPU architecture or the
jax/jaxlib version differ from the ones recorded here.

Each case returns a dict of named arrays; :func:`summarize` keeps shape, dtype and, for small
arrays, every entry, for larger ones the first and last 8 entries plus float64 aggregates (sum,
sum of magnitudes, a position-weighted sum that changes when entries are permuted).
"""

from __future__ import annotations

import functools
import json
import pathlib
import platform
import sys
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

if __package__ in (None, ""):  # run as a script: make ``jaxpapers`` importable from the checkout
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

VALUES_PATH = pathlib.Path(__file__).with_name("values.json")
NUM_CPU_DEVICES = 8  # as tests/conftest.py, so both see the same CPU client configuration
SMALL_INT, SMALL_FLOAT, EDGE = 64, 16, 8  # stored in full up to these sizes; else 8 + 8 entries

Outputs = dict[str, jax.typing.ArrayLike]


# Every case jits its whole computation, keys and data passed as arguments: one compilation per
# case instead of one per eager op (the runtime of tests/test_golden.py is mostly compilation), and
# no closed-over data for XLA to constant-fold. Each case imports its capability itself, so that
# one broken package fails its own case only. Inputs that no library function draws (points,
# scores, weights, the noise x_T) come from numpy's legacy RandomState, whose streams numpy keeps
# frozen across versions (Generator's may change), and keys from jax.random.key(seed): every
# jax.random draw compiled inside a case costs about half a second on 2 CPU cores, and the keys
# the public functions consume are what these cases pin.


def _rng(seed: int) -> np.random.RandomState:
    return np.random.RandomState(seed)


# ----------------------------------------------------------------------------------- diffusion
_DIFF_D = 6


def _denoise(p, x, level):
    """A tiny deterministic "network": out = c * tanh(x W + b log1p(noise level))."""
    return p["c"] * jnp.tanh(x @ p["w"] + p["b"] * jnp.log1p(level))


@jax.jit
def _diffusion(keys, p, x_T):
    from jaxpapers import diffusion

    edm = diffusion.EDMSchedule(jnp.float32(0.002), jnp.float32(80.0), jnp.float32(7.0))
    vp = diffusion.VPSchedule(diffusion.ddpm_alphas_cumprod(), jnp.float32(1.0))
    return {sampler: diffusion.sample(_denoise, p, keys[sampler], x_T, schedule=schedule,
                                      sampler=sampler, steps=4)
            for sampler, schedule in (("euler", edm), ("euler_ancestral", edm), ("tcd", vp))}


def case_diffusion() -> Outputs:
    """``diffusion.sample``: Euler (deterministic), Euler-ancestral and TCD (stochastic)."""
    rng = _rng(0)
    p = {"w": rng.normal(size=(_DIFF_D, _DIFF_D)) / np.sqrt(_DIFF_D),
         "b": rng.normal(size=_DIFF_D), "c": 0.5 + rng.uniform(size=_DIFF_D)}
    p = {k: v.astype(np.float32) for k, v in p.items()}
    x_T = rng.normal(size=(4, _DIFF_D)).astype(np.float32)
    keys = {"euler": jax.random.key(0), "euler_ancestral": jax.random.key(1),
            "tcd": jax.random.key(2)}
    return _diffusion(keys, p, x_T)


# -------------------------------------------------------------------------------------- search
_SEARCH_STATES, _SEARCH_ACTIONS, _SEARCH_BATCH = 12, 4, 3


def _search_table():
    """A fixed random MDP: next state, reward, prior logits and value per (state, action)."""
    rng = _rng(1)
    s, a = _SEARCH_STATES, _SEARCH_ACTIONS
    return {"next": rng.randint(0, s, (s, a)).astype(np.int32),
            "reward": rng.normal(size=(s, a)).astype(np.float32),
            "logits": rng.normal(size=(s, a)).astype(np.float32),
            "value": rng.normal(size=s).astype(np.float32)}


def _recurrent(params, key, action, state):
    from jaxpapers import search

    del key
    nxt = params["next"][state, action]
    out = search.RecurrentFnOutput(reward=params["reward"][state, action],
                                   discount=jnp.full(action.shape, 0.9, jnp.float32),
                                   prior_logits=params["logits"][nxt], value=params["value"][nxt])
    return out, nxt


@jax.jit
def _search(k_mz, k_gz, table):
    from jaxpapers import search

    state = jnp.arange(_SEARCH_BATCH, dtype=jnp.int32)
    root = search.RootFnOutput(prior_logits=table["logits"][state], value=table["value"][state],
                               embedding=state)
    # positional (params, key, root, recurrent_fn, num_simulations): stable across renames
    mz = search.muzero_policy(table, k_mz, root, _recurrent, 24)  # Dirichlet root noise: default
    gz = search.gumbel_muzero_policy(table, k_gz, root, _recurrent, 16)
    return {"muzero.action": mz.action, "muzero.action_weights": mz.action_weights,
            "gumbel.action": gz.action, "gumbel.action_weights": gz.action_weights}


def case_search() -> Outputs:
    """``muzero_policy`` (Dirichlet noise, sampled action) and ``gumbel_muzero_policy``."""
    return _search(jax.random.key(20), jax.random.key(21), _search_table())


# --------------------------------------------------------------------------------- linear_nets
@jax.jit
def _linear_nets(k_gd, k_sur, eta1, eta2):
    from jaxpapers import linear_nets

    gd = linear_nets.mc_test_loss(k_gd, eta1, eta2, 4, layers=2, steps=3, method="gd",
                                  num_draws=8)
    sur = linear_nets.mc_test_loss(k_sur, eta1, eta2, 4, layers=3, steps=2, method="surrogate",
                                   num_draws=8)
    return {"gd2.mean": gd.mean, "gd2.se": gd.se, "surrogate3.mean": sur.mean,
            "surrogate3.se": sur.se}


def case_linear_nets() -> Outputs:
    """``mc_test_loss``: full-GD test loss over Haar draws (2 layers) and surrogate (3 layers)."""
    return _linear_nets(jax.random.key(30), jax.random.key(31), np.float32([0.1, 0.4]),
                        np.float32([0.3, 0.2]))


# ------------------------------------------------------------------------------------- bandits
_BANDIT_N, _BANDIT_K, _BANDIT_D, _BANDIT_T, _BANDIT_S = 2, 4, 3, 40, 2


@jax.jit
def _bandits(k_env, k_run):
    from jaxpapers import bandits

    algo = bandits.make_rs_slateglincb(num_slots=_BANDIT_N, num_items=_BANDIT_K, dim=_BANDIT_D,
                                       num_rounds=_BANDIT_T, param_norm_ub=3.0, kappa=10.0)
    envs = jax.vmap(functools.partial(bandits.make_slate_env, num_slots=_BANDIT_N,
                                      num_items=_BANDIT_K, dim=_BANDIT_D, theta_norm=2.0))(
        jax.random.split(k_env, _BANDIT_S))
    res = bandits.run_bandit_seeds(algo, envs, jax.random.split(k_run, _BANDIT_S),
                                   num_rounds=_BANDIT_T)
    return {"regret": res.regret, "reward": res.reward, "switches": res.switches}


def case_bandits() -> Outputs:
    """``run_bandit_seeds`` with RS-SlateGLinCB (refits: warm-up and determinant switches)."""
    return _bandits(jax.random.key(40), jax.random.key(41))


# ----------------------------------------------------------------------------------- conformal
@jax.jit
def _conformal(cal, ref, test):
    from jaxpapers import conformal

    state = conformal.rsacp_calibrate(cal, ref, alpha=0.1, beta=0.4)
    return {"q_by_k": state.q_by_k, "z_sorted": state.z_sorted,
            "half_width": conformal.rsacp_half_width(state),
            "include": conformal.rsacp_include(state, test)}


def case_conformal() -> Outputs:
    """``rsacp_calibrate`` on seeded log-normal scores; thresholds, half-width, inclusion."""
    rng = _rng(5)
    return _conformal(rng.lognormal(size=30).astype(np.float32),
                      rng.lognormal(sigma=0.8, size=400).astype(np.float32),
                      rng.lognormal(size=40).astype(np.float32))


# ---------------------------------------------------------------------------------- core.train
def _train_loss(p, batch, key):
    """Tiny MLP regression with input noise drawn from the step key (checks key handling)."""
    x = batch["x"] + 0.1 * jax.random.normal(key, batch["x"].shape)
    return jnp.mean((jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] - batch["y"]) ** 2)


_TRAIN_X = _rng(6).normal(size=(6, 8, 3)).astype(np.float32)  # [steps, batch, features]


def _train_batch(step):
    x = jnp.asarray(_TRAIN_X)[step]
    return {"x": x, "y": jnp.sum(jnp.sin(x), axis=-1, keepdims=True)}


def case_train() -> Outputs:
    """``core.train.fit``: 6 Adam steps in two scanned chunks of 3 (fit itself is a Python loop)."""
    import optax

    from jaxpapers.core import train

    rng = _rng(7)
    params = {"w1": rng.normal(size=(3, 8)) / np.sqrt(3.0), "b1": np.zeros(8),
              "w2": rng.normal(size=(8, 1)) / np.sqrt(8.0)}
    params = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
    opt = optax.adam(1e-2)
    state = train.init_train_state(params, opt, jax.random.key(60))
    state, hist = train.fit(train.make_train_step(_train_loss, opt), state, _train_batch,
                            num_steps=6, chunk_size=3, progress=False)
    return {"step": state.step, **{f"params.{k}": v for k, v in state.params.items()},
            "loss": hist["loss"], "grad_norm": hist["grad_norm"]}


# ------------------------------------------------------------------------------------------ lm
_LM_TEXT = b"def golden(x):\n    return x + 1\n"


@jax.jit
def _lm(key, tokens):
    from jaxpapers import lm

    cfg = lm.tiny().config
    params = lm.init(cfg, key)
    logits = lm.forward(params, tokens, config=cfg)
    return {"embed": params["embed"], "logits": logits, "argmax": jnp.argmax(logits, axis=-1)}


def case_lm() -> Outputs:
    """``lm.init`` + ``lm.forward`` of the tiny config on a short byte string."""
    return _lm(jax.random.key(70), np.frombuffer(_LM_TEXT, np.uint8).astype(np.int32)[None])


# ---------------------------------------------------------------------------------------- pinn
@jax.jit
def _pinn(key, x):
    from jaxpapers import pinn

    net = pinn.make_network("coupled", depth=1, width=8)  # one block: split, scale, shift, norm
    params = net.init(key, jnp.zeros(2))
    return {"u": jax.vmap(net.apply, (None, 0))(params, x),
            "laplacian": pinn.laplacian(functools.partial(net.apply, params), x)}


def case_pinn() -> Outputs:
    """The coupling network (the paper's): init, forward and Laplacian at seeded points."""
    return _pinn(jax.random.key(80), _rng(8).uniform(-1.0, 1.0, size=(6, 2)).astype(np.float32))


# --------------------------------------------------------------------------------------- quant
@jax.jit
def _quant(w, x):
    from jaxpapers import quant

    q4 = quant.quantize(w, bits=4, group_size=32)
    q8a = quant.quantize(w, bits=8, group_size=None, symmetric=False)
    q8 = quant.quantize(w, bits=8, group_size=16)
    return {"q4.data": q4.data, "q4.scales": q4.scales, "q8a.data": q8a.data,
            "q8a.zeros": q8a.zeros, "q8a.scales": q8a.scales,
            "qdot.w4": quant.qdot(x, q4), "qdot.w8asym": quant.qdot(x, q8a),
            "qdot.w8a8": quant.qdot(x, q8, activation_bits=8)}


def case_quant() -> Outputs:
    """``quantize`` (int4 grouped, int8 asymmetric per-channel, int8 grouped) and ``qdot``."""
    rng = _rng(9)
    return _quant(rng.normal(size=(64, 16)).astype(np.float32),
                  rng.normal(size=(3, 64)).astype(np.float32))


CASES: dict[str, Callable[[], Outputs]] = {
    "diffusion": case_diffusion,
    "search": case_search,
    "linear_nets": case_linear_nets,
    "bandits": case_bandits,
    "conformal": case_conformal,
    "train": case_train,
    "lm": case_lm,
    "pinn": case_pinn,
    "quant": case_quant,
}


# ----------------------------------------------------------------------------------- summaries
def _weights(n: int) -> np.ndarray:
    """Position weights in (0, 1] for the permutation-sensitive weighted sum."""
    return (np.arange(n) % 13 + 1) / 13.0


def summarize(x) -> dict:
    """A JSON-able summary of one array (see the module docstring)."""
    a = np.asarray(x)
    out = {"shape": list(a.shape), "dtype": str(a.dtype)}
    if a.dtype == bool or np.issubdtype(a.dtype, np.integer):
        v = a.reshape(-1).astype(np.int64)
        if v.size <= SMALL_INT:
            out["values"] = v.tolist()
        else:
            out.update(head=v[:EDGE].tolist(), tail=v[-EDGE:].tolist(), sum=int(v.sum()),
                       wsum=int(np.sum(v * (np.arange(v.size) % 13 + 1))))
        return out
    if not np.issubdtype(a.dtype, np.floating):
        raise TypeError(f"cannot summarize dtype {a.dtype}")
    v = a.reshape(-1).astype(np.float64)
    if v.size <= SMALL_FLOAT:
        out["values"] = v.tolist()
    else:
        out.update(head=v[:EDGE].tolist(), tail=v[-EDGE:].tolist(), sum=float(v.sum()),
                   abs_sum=float(np.abs(v).sum()), wsum=float(np.sum(v * _weights(v.size))))
    return out


def compute(name: str) -> dict[str, dict]:
    """Run case ``name`` and summarize each of its outputs."""
    return {k: summarize(v) for k, v in CASES[name]().items()}


def platform_info() -> dict:
    """What the golden values depend on (the test skips when one of the keyed entries differs)."""
    import jaxlib

    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__,
            "backend": jax.default_backend(), "machine": platform.machine(),
            "jax_enable_x64": bool(jax.config.jax_enable_x64),
            # informational only:
            "device_kind": jax.devices()[0].device_kind, "numpy": np.__version__,
            "python": platform.python_version()}


SKIP_KEYS = ("backend", "machine", "jax", "jaxlib")  # a difference in one of these: skip


def dumps(data: dict) -> str:
    """JSON with one line per output summary (readable diffs when values change)."""
    cases = ",\n".join(
        f"  {json.dumps(name)}: {{\n"
        + ",\n".join(f"   {json.dumps(out)}: {json.dumps(summary, sort_keys=True)}"
                      for out, summary in sorted(outputs.items()))
        + "\n  }"
        for name, outputs in data["cases"].items())
    return (f'{{\n "platform": {json.dumps(data["platform"], sort_keys=True)},\n'
            f' "cases": {{\n{cases}\n }}\n}}\n')


def main(argv: list[str] | None = None) -> int:
    """``regenerate [CASE ...]``: all cases, or only the named ones (the others are kept)."""
    names = list(argv or [])
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        print(f"unknown case(s) {unknown}; cases: {list(CASES)}", file=sys.stderr)
        return 2
    jax.config.update("jax_num_cpu_devices", NUM_CPU_DEVICES)
    info = platform_info()
    cases = {}
    if names:  # keep the other cases: only valid if they were recorded on this platform
        old = json.loads(VALUES_PATH.read_text())
        diffs = [k for k in SKIP_KEYS if old["platform"].get(k) != info[k]]
        if diffs or old["platform"].get("jax_enable_x64") != info["jax_enable_x64"]:
            print(f"values.json was recorded on another platform ({diffs or 'x64'}); "
                  f"regenerate every case", file=sys.stderr)
            return 2
        cases = {k: v for k, v in old["cases"].items() if k in CASES}
    for name in names or CASES:
        cases[name] = compute(name)
        print(f"{name}: {', '.join(cases[name])}")
    cases = {name: cases[name] for name in CASES}
    VALUES_PATH.write_text(dumps({"platform": info, "cases": cases}))
    print(f"wrote {VALUES_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
