"""Benchmark (not a test): Slate-GLM-OFU rounds per second, JAX (16 seeds vmapped, one compiled
scan) vs a per-round numpy loop written here in the authors' structure (one seed at a time,
Python loops over slots and items, Sherman-Morrison updates, ECOLog step solved like ours).

``python -m experiments.slate_glm.bench``
"""

from __future__ import annotations

import functools
import math
import time

import jax
import numpy as np

from jaxpapers.bandits import make_slate_env, make_slate_glm_ofu, run_bandit_seeds


def _sig(z):
    return 1.0 / (1.0 + math.exp(-z))


class NumpyOFU:
    """Per-round numpy Slate-GLM-OFU (mimics Slate_GLM_OFU.py's control flow)."""

    def __init__(self, n, k, d, s_ub, lam=5.0, delta=0.05):
        self.n, self.k, self.d, self.s, self.lam, self.delta = n, k, d, s_ub, lam, delta
        D = n * d
        self.vt = lam * np.eye(D)
        self.vt_inv = np.eye(D) / lam
        self.v_inv = [np.eye(d) / lam for _ in range(n)]
        self.theta = np.zeros(D)
        self.cum_loss = 0.0
        self.ctr = 1

    def _step(self, theta, x, target, scale):
        vx = self.vt_inv @ x
        s = x @ vx
        z0 = x @ theta
        c = 0.0
        for _ in range(12):
            z = z0 - c * s
            m = _sig(z)
            c -= (c - scale * (m - target)) / (1 + scale * m * (1 - m) * s)
        new = theta - c * vx
        nrm = np.linalg.norm(new)
        return new * (self.s / nrm) if nrm > self.s else new

    def pull(self, arm_set):
        g = math.sqrt(self.lam) / 2 + 2 * math.log(
            2 * math.sqrt(1 + self.ctr / (4 * self.lam)) / self.delta) / math.sqrt(self.lam)
        r = math.sqrt(max(0.0, 2 * self.lam * self.s ** 2 + (1 + self.s) ** 2 * g + self.cum_loss))
        picks = []
        for i in range(self.n):
            th = self.theta[i * self.d:(i + 1) * self.d]
            vals = [th @ a + r * math.sqrt(a @ self.v_inv[i] @ a) for a in arm_set[i]]
            picks.append(int(np.argmax(vals)))
        return picks

    def update(self, x, reward):
        th = self._step(self.theta, x, reward, 1.0)
        thb = self._step(th, x, 0.5, 2.0)
        disc = (th - thb) @ self.vt @ (th - thb)
        sens = _sig(x @ th) * (1 - _sig(x @ th))
        self.vt += sens * np.outer(x, x)
        vx = self.vt_inv @ x
        self.vt_inv -= sens * np.outer(vx, vx) / (1 + sens * x @ vx)
        lt = -reward * math.log(_sig(x @ th)) - (1 - reward) * math.log(1 - _sig(x @ th))
        lb = -reward * math.log(_sig(x @ thb)) - (1 - reward) * math.log(1 - _sig(x @ thb))
        self.cum_loss += 2 * (1 + self.s) * (lb - lt) - 0.5 * disc
        self.theta = th
        for i in range(self.n):
            a = x[i * self.d:(i + 1) * self.d]
            va = self.v_inv[i] @ a
            self.v_inv[i] = self.v_inv[i] - sens * np.outer(va, va) / (1 + sens * a @ va)
        self.ctr += 1


def bench(num_rounds=2000, num_seeds=16, n=3, k=5, d=5, norm=2.0, numpy_rounds=1000):
    rng = np.random.default_rng(0)
    theta = rng.uniform(-1, 1, n * d)
    theta *= norm / np.linalg.norm(theta)
    alg = NumpyOFU(n, k, d, float(int(norm) + 1))
    t0 = time.perf_counter()
    for _ in range(numpy_rounds):
        arms = rng.uniform(-1, 1, (n, k, d))
        arms /= np.linalg.norm(arms, axis=-1, keepdims=True) * math.sqrt(n)
        picks = alg.pull(arms)
        x = np.concatenate([arms[i, picks[i]] for i in range(n)])
        r = float(rng.random() < _sig(x @ theta))
        alg.update(x, r)
    np_rps = numpy_rounds / (time.perf_counter() - t0)

    envs = jax.vmap(functools.partial(make_slate_env, num_slots=n, num_items=k, dim=d,
                                      theta_norm=norm))(jax.random.split(jax.random.key(0),
                                                                         num_seeds))
    algo = make_slate_glm_ofu(num_slots=n, num_items=k, dim=d, param_norm_ub=float(int(norm) + 1))
    keys = jax.random.split(jax.random.key(1), num_seeds)
    jax.block_until_ready(run_bandit_seeds(algo, envs, keys, num_rounds=num_rounds))  # compile
    t0 = time.perf_counter()
    jax.block_until_ready(run_bandit_seeds(algo, envs, jax.random.split(jax.random.key(2),
                                                                        num_seeds),
                                           num_rounds=num_rounds))
    jax_rps = num_seeds * num_rounds / (time.perf_counter() - t0)
    return {"numpy_rounds_per_s": np_rps, "jax_rounds_per_s_16_seeds": jax_rps,
            "ratio": jax_rps / np_rps}


if __name__ == "__main__":
    print(bench())
