"""Benchmark: 2000 split-CP calibrations on diabetes (n_cal = 20), ours vs MAPIE.

Both sides use the same prefit Ridge model and the same 2000 random (calibration, test)
partitions of the held-out half. Ours: one jitted, vmapped call computing every split's
threshold and the test coverage/width (predictions of the prefit model computed once, since
they do not depend on the split). MAPIE: ``SplitConformalRegressor(prefit=True)`` with
``conformalize`` + ``predict_interval`` per split (its API recomputes predictions each time).
If MAPIE is not installed, a plain numpy loop (np.quantile with the finite-sample level) stands
in, and the output says so. Thresholds of the two are compared for equality.

Run: ``python -m experiments.rsa_cp.bench``.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers import conformal as cp
from jaxpapers.core.data import load_sklearn

N_SPLITS, N_CAL, ALPHA = 2000, 20, 0.1


def main() -> dict:
    from sklearn.linear_model import Ridge

    ds = load_sklearn("diabetes", test_fraction=0.5, seed=0)
    model = Ridge(alpha=1.0).fit(ds.x_train, ds.y_train)
    pool_x, pool_y = ds.x_test.astype(np.float64), ds.y_test.astype(np.float64)
    pool = len(pool_y)
    rng = np.random.default_rng(0)
    perms = np.stack([rng.permutation(pool) for _ in range(N_SPLITS)])

    # ---- ours
    @jax.jit
    def ours(pred, y, perms):
        res = jnp.abs(y - pred)

        def one(p):
            cal, test = res[p[:N_CAL]], res[p[N_CAL:]]
            q = cp.split_conformal_quantile(cal, ALPHA)
            return q, jnp.mean(test <= q)

        return jax.vmap(one)(perms)

    t0 = time.perf_counter()
    pred = model.predict(pool_x)
    q_ours, cov = jax.block_until_ready(ours(jnp.asarray(pred), jnp.asarray(pool_y),
                                             jnp.asarray(perms)))
    t_first = time.perf_counter() - t0
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        pred = model.predict(pool_x)
        jax.block_until_ready(ours(jnp.asarray(pred), jnp.asarray(pool_y), jnp.asarray(perms)))
        times.append(time.perf_counter() - t0)
    t_ours = float(np.median(times))

    # ---- baseline
    try:
        from mapie.regression import SplitConformalRegressor

        baseline = "MAPIE SplitConformalRegressor"
        t0 = time.perf_counter()
        q_base = np.empty(N_SPLITS)
        for i, p in enumerate(perms):
            scr = SplitConformalRegressor(model, confidence_level=1 - ALPHA, prefit=True)
            scr.conformalize(pool_x[p[:N_CAL]], pool_y[p[:N_CAL]])
            _, iv = scr.predict_interval(pool_x[p[N_CAL:]])
            q_base[i] = iv[0, 1, 0] - model.predict(pool_x[p[N_CAL:N_CAL + 1]])[0]
        t_base = time.perf_counter() - t0
    except ImportError:
        baseline = "numpy loop (mapie not installed)"
        t0 = time.perf_counter()
        q_base = np.empty(N_SPLITS)
        for i, p in enumerate(perms):
            r = np.abs(pool_y[p[:N_CAL]] - model.predict(pool_x[p[:N_CAL]]))
            lvl = min(1.0, np.ceil((N_CAL + 1) * (1 - ALPHA)) / N_CAL)
            q_base[i] = np.quantile(r, lvl, method="higher")
            model.predict(pool_x[p[N_CAL:]])
        t_base = time.perf_counter() - t0
    agree = float(np.mean(np.isclose(np.asarray(q_ours, np.float64), q_base, rtol=1e-4,
                                     atol=1e-3)))
    out = {"splits": N_SPLITS, "n_cal": N_CAL, "ours_s": t_ours, "ours_first_call_s": t_first,
           "baseline": baseline, "baseline_s": t_base, "speedup": t_base / t_ours,
           "threshold_agreement": agree, "mean_coverage_ours": float(np.mean(cov))}
    for k, v in out.items():
        print(f"{k}: {v}")
    return out


if __name__ == "__main__":
    main()
