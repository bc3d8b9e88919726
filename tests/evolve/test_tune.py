"""Tests of jaxpapers.evolve.tune: exhaustive and budgeted template tuning on roofline models.

The acceptance bar (issue): the tuner hits the exhaustive optimum with 25% of the grid in >= 90%
of (task, shape, seed) runs on ordinary shapes; the M = 1 (decode) shapes, whose landscapes are
mostly plateaus and invalid points, are reported and held only to the random-search baseline.
"""

from __future__ import annotations

import itertools
import math

import jax
import numpy as np
import pytest

from jaxpapers.evolve.tune import TuneResult, grid_size, random_search, tune_template

# ------------------------------------------------------------------ synthetic roofline models
# H200-like numbers (kernelfoundry.md "Our design"): 4.8 TB/s, 132 SMs, ~990 TFLOP/s bf16 dense.
BW = 4.8e12  # bytes / s
PEAK = 990e12  # flop / s
SMS = 132
LAUNCH = 3e-6  # s per pallas_call
SMEM = 228 * 1024  # bytes of shared memory per SM
REGS = 255  # 32-bit registers per thread
IN_FLIGHT = 48 * 1024  # bytes one SM must have in flight to reach its share of BW (~1.3 us)
STEP = 40e-9  # s of loop / sync overhead per k step of one program
STAGES = 2  # software pipelining depth (double-buffered tiles)
BF16 = 2


def _waves(p: int) -> float:
    """ceil(P / SMs) * SMs / P >= 1: the under-filled last wave (and P < SMs) wastes SMs."""
    return math.ceil(p / SMS) * SMS / p


def _mma_eff(rows: int, cols: int, warps: int) -> float:
    """Fraction of tensor-core peak: warps to hide latency and per-warp tiles big enough."""
    return min(1.0, warps / 4) * min(1.0, rows * cols / (warps * 1024))


def matmul_time(shape, p) -> float:
    """Roofline time (s) of a tiled bf16 matmul ``[M, K] @ [K, N]`` with blocks ``p``.

    Programs P = ceil(M/bm) ceil(N/bn), each looping over K/bk steps; every program re-reads
    its A row-panel and B column-panel, so bytes = 2 (M K ceil(N/bn) + K N ceil(M/bm) + M N);
    padded tiles compute on zeros. Invalid (inf): a block larger than its dimension (blocks
    below 16 are padded, so 16 is always allowed), bk not dividing K, tiles over shared memory,
    an accumulator over the register file.
    """
    m, n, k = shape
    bm, bn, bk, nw = p["block_m"], p["block_n"], p["block_k"], p["num_warps"]
    if bm > max(m, 16) or bn > max(n, 16) or bk > max(k, 16) or k % bk:
        return math.inf
    tile = (bm * bk + bk * bn) * BF16
    if STAGES * tile > SMEM or bm * bn > REGS * 32 * nw:
        return math.inf
    gm, gn = math.ceil(m / bm), math.ceil(n / bn)
    progs = gm * gn
    nbytes = BF16 * (m * k * gn + k * n * gm + m * n)
    flops = 2.0 * gm * bm * gn * bn * k
    bw = BW * min(1.0, STAGES * tile / IN_FLIGHT)
    peak = PEAK * _mma_eff(bm, bn, nw)
    steps = math.ceil(progs / SMS) * (k // bk) * STEP
    return LAUNCH + max(nbytes / bw, flops / peak) * _waves(progs) + steps


def attention_time(shape, p) -> float:
    """Roofline time (s) of flash-attention forward over ``[BH, Lq, D] x [BH, Lk, D]``, bf16.

    One program per (head, q block, kv split); each streams Lk / splits keys in blocks of bkv.
    Splits > 1 write fp32 partial outputs that a second pass combines. Invalid (inf): bq larger
    than Lq (16 always allowed), bkv not dividing the split length, tiles over shared memory,
    accumulator + score tile over the register file.
    """
    bh, lq, lk, d = shape
    bq, bkv, nw, ns = p["block_q"], p["block_kv"], p["num_warps"], p["num_splits"]
    if bq > max(lq, 16) or lk % ns or (lk // ns) % bkv:
        return math.inf
    tile = 2 * bkv * d * BF16
    if STAGES * tile + bq * d * BF16 > SMEM or bq * (d + bkv) > REGS * 32 * nw:
        return math.inf
    gq = math.ceil(lq / bq)
    progs = bh * gq * ns
    nbytes = BF16 * bh * (2 * lq * d + gq * 2 * lk * d)
    flops = 4.0 * bh * gq * bq * lk * d
    bw = BW * min(1.0, STAGES * tile / IN_FLIGHT)
    peak = PEAK * _mma_eff(bq, bkv, nw) * min(1.0, bkv / 32)
    steps = math.ceil(progs / SMS) * (lk // ns // bkv) * STEP
    t = LAUNCH + max(nbytes / bw, flops / peak) * _waves(progs) + steps
    if ns > 1:  # fp32 partials written and read back by a combine kernel
        t += LAUNCH + 2 * 4 * bh * lq * d * ns / BW
    return t


def roofline_time(shape, p) -> float:
    """The bare roofline of the issue: launch + max(bytes / BW, flops / PEAK) x waves.

    Same tiling, re-reads and validity as :func:`matmul_time` but no efficiency terms, so
    ``block_k`` and ``num_warps`` (and, at M = 1, everything but ``block_n``) never change the
    time: plateau-heavy, the hardest landscape for a local search.
    """
    m, n, k = shape
    bm, bn, bk = p["block_m"], p["block_n"], p["block_k"]
    if bm > max(m, 16) or bn > max(n, 16) or bk > max(k, 16) or k % bk:
        return math.inf
    if STAGES * (bm * bk + bk * bn) * BF16 > SMEM:
        return math.inf
    gm, gn = math.ceil(m / bm), math.ceil(n / bn)
    nbytes = BF16 * (m * k * gn + k * n * gm + m * n)
    flops = 2.0 * gm * bm * gn * bn * k
    return LAUNCH + max(nbytes / BW, flops / PEAK) * _waves(gm * gn)


POW2 = [16, 32, 64, 128, 256]
MATMUL_SPACE = {"block_m": POW2, "block_n": POW2, "block_k": POW2, "num_warps": [1, 2, 4, 8]}
ATTENTION_SPACE = {"block_q": [16, 32, 64, 128], "block_kv": POW2, "num_warps": [1, 2, 4, 8],
                   "num_splits": [1, 2, 4, 8]}

# (task, shape); "decode" marks the M = 1 / Lq = 1 shapes
TASKS = {
    "matmul": (matmul_time, MATMUL_SPACE),
    "attention": (attention_time, ATTENTION_SPACE),
    "matmul_roofline": (roofline_time, MATMUL_SPACE),
}
SHAPES = [
    ("matmul", (4096, 4096, 4096), "regular"),
    ("matmul", (1024, 4096, 1024), "regular"),
    ("matmul", (2048, 512, 8192), "regular"),
    ("matmul", (384, 11008, 4096), "regular"),
    ("attention", (128, 2048, 2048, 128), "regular"),
    ("attention", (32, 4096, 4096, 64), "regular"),
    ("matmul", (1, 4096, 4096), "decode"),
    ("matmul", (1, 14336, 4096), "decode"),
    ("attention", (256, 1, 8192, 128), "decode"),
    ("attention", (32, 1, 32768, 128), "decode"),
    # the bare roofline's regular shapes are left out: only ~16 distinct values, 12-40 of the
    # 500 points tie at the optimum and random search nearly always hits it (padding only)
    ("matmul_roofline", (1, 4096, 4096), "decode"),
    ("matmul_roofline", (1, 14336, 4096), "decode"),
]
SEEDS = 10
BUDGET_FRACTION = 0.25  # the budget: a quarter of the grid
BAR = 0.9  # the bar on regular shapes


def _grid_values(fn, shape, space) -> dict:
    return {c: fn(shape, dict(zip(space, c))) for c in itertools.product(*space.values())}


class Counting:
    """Wraps an objective; records every call's point as a tuple of its values."""

    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def __call__(self, point):
        self.calls.append(tuple(point.values()))
        return self.fn(point)


# ------------------------------------------------------------------ exhaustive


@pytest.mark.parametrize("extra", [0, 7])
def test_exhaustive_when_budget_covers_grid(extra):
    task, shape, _ = SHAPES[3]
    fn, space = TASKS[task]
    values = _grid_values(fn, shape, space)
    size = grid_size(space)
    assert size == len(values) == 500
    obj = Counting(lambda p: fn(shape, p))
    res = tune_template(obj, space, budget=size + extra, key=jax.random.key(0))
    assert res.evaluations == size == len(obj.calls) == len(set(obj.calls))
    assert obj.calls == list(values)  # itertools.product order, each once
    best = min(values.values())
    argmin = next(c for c, v in values.items() if v == best)  # first in product order
    assert res.best == dict(zip(space, argmin)) and res.best_value == best
    assert [v for _, v in res.history] == list(values.values())


# ------------------------------------------------------------------ budget and determinism


@pytest.mark.parametrize("search", [tune_template, random_search])
@pytest.mark.parametrize("case", [0, 7, 11])
def test_budget_respected_and_no_point_twice(search, case):
    task, shape, _ = SHAPES[case]
    fn, space = TASKS[task]
    for seed, budget in [(0, 1), (1, 5), (2, 60), (3, 200)]:
        obj = Counting(lambda p: fn(shape, p))
        res = search(obj, space, budget=budget, key=jax.random.key(seed))
        assert len(obj.calls) == budget == res.evaluations == len(res.history)
        assert len(set(obj.calls)) == len(obj.calls)
        assert [tuple(p.values()) for p, _ in res.history] == obj.calls
        assert all(v == fn(shape, p) for p, v in res.history)
        vals = [v for _, v in res.history]
        assert res.best_value == min(vals)
        assert res.best == res.history[vals.index(min(vals))][0]  # ties: first found


@pytest.mark.parametrize("search", [tune_template, random_search])
def test_deterministic_in_key(search):
    fn, space = TASKS["attention"]
    shape = SHAPES[4][1]
    runs = [search(lambda p: fn(shape, p), space, budget=40, key=jax.random.key(s)).history
            for s in (0, 0, 1, 2, 3)]
    assert runs[0] == runs[1]
    assert any(r != runs[0] for r in runs[2:])
    legacy = search(lambda p: fn(shape, p), space, budget=40, key=jax.random.PRNGKey(0))
    assert legacy.evaluations == 40


def test_invalid_and_nan_points():
    space = {"a": list(range(6)), "b": list(range(5))}
    res = tune_template(lambda p: math.inf, space, budget=10, key=jax.random.key(0))
    assert res.best_value == math.inf and res.evaluations == 10
    assert res.best == res.history[0][0]

    def obj(p):  # NaN off the diagonal band; minimum at (4, 1)
        if abs(p["a"] - p["b"]) > 3:
            return float("nan")
        return np.float32((p["a"] - 4) ** 2 + (p["b"] - 1) ** 2)

    res = tune_template(obj, space, budget=15, key=jax.random.key(1))
    assert not any(math.isnan(v) for _, v in res.history)
    assert all(v == math.inf for p, v in res.history if abs(p["a"] - p["b"]) > 3)
    assert res.best == {"a": 4, "b": 1} and res.best_value == 0.0
    assert isinstance(res.best_value, float) and res["best"] is res.best
    res = tune_template(lambda p: jax.numpy.asarray(p["a"] * 1.5), space, budget=8,
                        key=jax.random.key(2))
    assert res.best_value == 1.5 * res.best["a"]


def test_tuple_values_and_single_point():
    space = {"shape": [(8, 8), (16, 8)], "impl": ["xla"]}
    res = tune_template(lambda p: p["shape"][0], space, budget=1, key=jax.random.key(0))
    assert res.evaluations == 1 and res.best["impl"] == "xla"
    assert grid_size(space) == 2 and grid_size({"x": [1]}) == 1


# ------------------------------------------------------------------ acceptance bar


def _hit_fractions():
    """Per (task, shape): hits of the exhaustive optimum, tuner vs random, over SEEDS."""
    rows = []
    for task, shape, group in SHAPES:
        fn, space = TASKS[task]
        best = min(_grid_values(fn, shape, space).values())
        budget = int(BUDGET_FRACTION * grid_size(space))
        obj = lambda p, fn=fn, shape=shape: fn(shape, p)  # noqa: E731
        tuner = rand = 0
        for key in jax.random.split(jax.random.key(123), SEEDS):
            k1, k2 = jax.random.split(key)
            tuner += tune_template(obj, space, budget=budget, key=k1).best_value == best
            rand += random_search(obj, space, budget=budget, key=k2).best_value == best
        rows.append((task, shape, group, tuner, rand))
    return rows


def test_tuner_hits_exhaustive_optimum_with_quarter_of_grid():
    """The issue's bar, with the per-shape hit counts printed (``pytest -s``).

    Measured when written: tuner 60/60 regular (random 22/60), 60/60 M = 1 (random 52/60).
    Plain best-first (no plateau prediction) also had 60/60 regular but 7/10 on the bare
    roofline at (1, 14336, 4096), where random search had 10/10.
    """
    rows = _hit_fractions()
    print(f"\n{'task':16s} {'shape':22s} {'group':8s} tuner random  (of {SEEDS} seeds, "
          f"budget {BUDGET_FRACTION:.0%} of the grid)")
    for task, shape, group, tuner, rand in rows:
        print(f"{task:16s} {str(shape):22s} {group:8s} {tuner:5d} {rand:6d}")
    frac = {}
    for g in ("regular", "decode"):
        sel = [r for r in rows if r[2] == g]
        n = SEEDS * len(sel)
        frac[g] = (sum(r[3] for r in sel) / n, sum(r[4] for r in sel) / n)
        print(f"{g}: tuner {frac[g][0]:.2f}, random {frac[g][1]:.2f} over {n} runs")
    assert frac["regular"][0] >= BAR
    # M = 1: reported; held to the baseline only (the issue: plateaus are the hardest case)
    assert frac["decode"][0] >= frac["decode"][1]
    assert sum(r[3] for r in rows) >= sum(r[4] for r in rows)


# ------------------------------------------------------------------ bad inputs


def _obj(p):
    return float(sum(p.values()))


@pytest.mark.parametrize("search", [tune_template, random_search])
def test_bad_inputs(search):
    space = {"a": [1, 2, 3], "b": [4, 5]}
    key = jax.random.key(0)
    for bad in [0, 1, np.uint32([0, 0]), jax.random.split(key, 2), "key", None]:
        with pytest.raises(ValueError, match="key"):
            search(_obj, space, budget=3, key=bad)
    for bad in [0, -2, 2.5, True, "3", None]:
        with pytest.raises(ValueError, match="budget"):
            search(_obj, space, budget=bad, key=key)
    for bad in [{}, [("a", [1])], None]:
        with pytest.raises(ValueError, match="space"):
            search(_obj, bad, budget=3, key=key)
    for bad, name in [({"a": [1], "b": []}, "b"), ({"a": "xyz"}, "a"), ({"a": 3}, "a"),
                      ({"c": [1, 2], "d": [8, 16, 8]}, "d")]:
        with pytest.raises(ValueError, match=rf"space\['{name}'\]"):
            search(_obj, bad, budget=3, key=key)
    for ret in ["1.0", None, [1.0, 2.0], True, np.ones(3)]:
        with pytest.raises(TypeError, match="objective"):
            search(lambda p, ret=ret: ret, space, budget=3, key=key)
    with pytest.raises(TypeError, match="objective"):
        search("not callable", space, budget=3, key=key)
    with pytest.raises(ValueError, match="space"):
        grid_size({"a": []})


def test_result_container():
    res = tune_template(_obj, {"a": [3, 1, 2]}, budget=2, key=jax.random.key(0))
    assert isinstance(res, TuneResult)
    assert (res["best"], res["best_value"], res["evaluations"]) == \
        (res.best, res.best_value, res.evaluations)
    with pytest.raises(KeyError):
        res["nope"]
    with pytest.raises(AttributeError):
        res.best_value = 0.0  # frozen
