"""TDM-R1: advantages and the DGPO loss vs numpy, the forward kernel's target by Monte Carlo,
trust-region masks, the trainer (no recompilation, vmap == loop, sharded == unsharded,
pure_callback reward == jnp reward), a learning check on a 2-D toy, and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jaxpapers import diffusion as dfn


# ----------------------------------------------------------------------------- numpy references
def _np_advantages(r, g, num_groups, clip, global_std):
    r = np.asarray(r, np.float64)
    mean = np.array([r[g == k].mean() if np.any(g == k) else 0.0 for k in range(num_groups)])
    c = r - mean[g]
    if global_std:
        std = np.full_like(r, r.std())  # population std (ddof 0)
    else:
        std = np.array([r[g == k].std() if np.any(g == k) else 0.0
                        for k in range(num_groups)])[g]
    return np.clip(c / (std + 1e-4), -clip, clip), c / (std + 1e-4)


def _rewards(key, b=24, num_groups=5):
    k1, k2 = jax.random.split(key)
    r = jax.random.uniform(k1, (b,), jnp.float64)
    g = jax.random.randint(k2, (b,), 0, num_groups - 1)  # the last group stays empty
    return r, g


@pytest.mark.parametrize("global_std", [True, False])
def test_group_advantages_match_numpy_float64(x64, key, global_std):
    r, g = _rewards(key)
    got = dfn.group_advantages(r, g, num_groups=5, global_std=global_std)
    want, _ = _np_advantages(np.asarray(r), np.asarray(g), 5, 5.0, global_std)
    assert got.dtype == jnp.float64 and np.abs(want).max() > 0.5
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
    jitted = jax.jit(dfn.group_advantages, static_argnames=("num_groups", "global_std"))
    np.testing.assert_allclose(np.asarray(jitted(r, g, num_groups=5, global_std=global_std)),
                               want, rtol=1e-12, atol=1e-12)


def test_group_advantages_constant_groups_are_exactly_zero_and_clip_works(key):
    # float32 rewards whose group sums are inexact (0.1 * 3 != 0.3): still exact zeros
    r = jnp.array([0.1, 0.1, 0.1, 0.7, 0.7, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0], jnp.float32)
    g = jnp.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2])
    adv = jax.jit(dfn.group_advantages, static_argnames=("num_groups", "global_std"))
    a = np.asarray(adv(r, g, num_groups=3, clip=2.0))
    assert np.all(a[:5] == 0.0)
    _, raw = _np_advantages(np.asarray(r), np.asarray(g), 3, 2.0, True)
    assert raw[12] > 2.0 and a[12] == pytest.approx(2.0, abs=0)  # the outlier is clipped
    np.testing.assert_allclose(a[5:12], raw[5:12], rtol=1e-5)  # the others are not
    assert np.all(np.asarray(adv(jnp.ones(6), jnp.zeros(6, int), num_groups=1,
                                 global_std=False)) == 0.0)


def test_group_advantages_vmap_equals_loop(key):
    r = jax.random.uniform(key, (3, 16))
    g = jnp.arange(16) % 4
    f = jax.jit(lambda x: dfn.group_advantages(x, g, num_groups=4))
    batched = jax.jit(jax.vmap(f))(r)
    for i in range(3):
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(f(r[i])), rtol=1e-6)


def _np_z(loss, ref, a, g, num_groups, beta):
    z = np.zeros(num_groups)
    for k in range(num_groups):
        m = g == k
        if m.any():
            z[k] = beta * np.sum(a[m] * (loss[m] - ref[m])) / m.sum()
    return z


def test_group_preference_loss_value_and_gradient(x64, key):
    k1, k2, k3 = jax.random.split(key, 3)
    b, num_groups, beta = 20, 4, 3.0
    loss = jax.random.uniform(k1, (b,), jnp.float64)
    ref = jax.random.uniform(k2, (b,), jnp.float64)
    g = jnp.arange(b) % num_groups
    a = dfn.group_advantages(jax.random.uniform(k3, (b,), jnp.float64), g,
                             num_groups=num_groups)
    ln, rn, an, gn = (np.asarray(v) for v in (loss, ref, a, g))
    sig = 1.0 / (1.0 + np.exp(-_np_z(ln, rn, an, gn, num_groups, beta)))[gn]
    assert np.ptp(sig) > 0.05  # the groups' weights differ: a non-trivial case
    f = lambda l, r_, a_, b_: dfn.group_preference_loss(l, r_, a_, g,  # noqa: E731
                                                         num_groups=num_groups, beta=b_)
    val = dfn.group_preference_loss(loss, ref, a, g, num_groups=num_groups, beta=beta)  # eager
    assert float(val) == pytest.approx(np.mean(sig * an * ln), rel=1e-12)
    g_loss, g_ref, g_adv = jax.jit(jax.grad(f, argnums=(0, 1, 2)))(loss, ref, a, beta)
    # d/d loss_i = sigmoid(Z_g(i)) A_i / B: Z is held constant
    np.testing.assert_allclose(np.asarray(g_loss), sig * an / b, rtol=1e-12, atol=1e-15)
    assert np.all(np.asarray(g_ref) == 0.0) and np.all(np.asarray(g_adv) == 0.0)
    # beta = 0: Z = 0 and every weight is 1/2
    half = jax.jit(f)(loss, ref, a, 0.0)
    assert float(half) == pytest.approx(0.5 * np.mean(an * ln), rel=1e-12)


# ----------------------------------------------------------------------------- forward kernel
@pytest.mark.parametrize("s_n,tau", [(0.6, 1.3), (0.0, 0.8)])
def test_forward_kernel_target_regresses_to_the_exact_denoiser(x64, key, s_n, tau):
    """x_0 ~ N(m, v0), x_n = x_0 + s_n z: E[x* | x_tau] = (v0 x_tau + tau^2 m) / (v0 + tau^2)."""
    m, v0, n, d = 0.7, 0.25, 100_000, 4
    k1, k2, k3 = jax.random.split(key, 3)
    x_n = (m + np.sqrt(v0) * jax.random.normal(k1, (n, d), jnp.float64)
           + s_n * jax.random.normal(k2, (n, d), jnp.float64))
    eps = jax.random.normal(k3, (n, d), jnp.float64)
    x_tau, target = dfn.forward_kernel(x_n, s_n, tau, eps)
    b = np.sqrt(tau ** 2 - s_n ** 2)
    np.testing.assert_allclose(np.asarray(x_tau), np.asarray(x_n + b * eps), rtol=1e-14)
    np.testing.assert_allclose(np.asarray(target), np.asarray(x_tau - tau ** 2 * eps / b),
                               rtol=1e-12, atol=1e-12)
    if s_n == 0.0:
        np.testing.assert_array_equal(np.asarray(target), np.asarray(x_n))
    # least squares of target on [1, x_tau] (pooled over dims: N = n d samples)
    x, y = np.asarray(x_tau).ravel(), np.asarray(target).ravel()
    slope, intercept = np.polyfit(x, y, 1)
    var_tau = v0 + tau ** 2
    want_slope, want_icpt = v0 / var_tau, m * tau ** 2 / var_tau
    # residual variance Var(x*) - Cov(x*, x_tau)^2 / Var(x_tau), Var(x*) = v0 + s^2 + s^4 / b^2
    resid = v0 + s_n ** 2 + s_n ** 4 / b ** 2 - v0 ** 2 / var_tau
    se_slope = np.sqrt(resid / (x.size * var_tau))
    se_icpt = np.sqrt(resid / x.size * (1.0 + m ** 2 / var_tau))
    assert abs(slope - want_slope) < 5 * se_slope
    assert abs(intercept - want_icpt) < 5 * se_icpt
    # and the non-trivial alternative E[x_n | x_tau] is rejected when s_n > 0
    if s_n > 0:
        assert abs(slope - (v0 + s_n ** 2) / var_tau) > 20 * se_slope


def test_forward_kernel_s_zero_has_no_nan_gradient():
    g = jax.jit(jax.grad(
        lambda s: jnp.sum(dfn.forward_kernel(jnp.ones(3), s, 1.0, jnp.ones(3))[1])))(0.0)
    assert np.isfinite(float(g))


# ----------------------------------------------------------------------------- trust regions
@pytest.mark.parametrize("case", [
    # (loss, old, ref, A, anchor) -> (ppo, ref-clip)
    ((1.0, 1.1, 2.0, 1.0, 0.0), (True, False)),    # A > 0, ratio e^0.1 > 1 + c
    ((1.0, 1.0005, 2.0, 1.0, 0.0), (False, False)),  # A > 0, ratio within 1 + c
    ((1.0, 0.9, 0.5, -1.0, 0.0), (True, False)),   # A < 0, ratio e^-0.1 < 1 - c
    ((1.0, 1.1, 0.5, -1.0, 0.0), (False, False)),  # A < 0 but ratio > 1: passes
    ((1.0, 0.9, 0.5, 1.0, 0.0), (False, False)),   # A > 0, ratio < 1: passes
    ((1.0, 1.0, 2.0, 1.0, 0.06), (False, True)),   # anchor far, A > 0 beats T: stopped
    ((1.0, 1.0, 2.0, 1.0, 0.04), (False, False)),  # same, anchor near: passes
    ((1.0, 1.0, 0.5, 1.0, 0.06), (False, False)),  # anchor far, A > 0 but trails T: passes
    ((1.0, 1.0, 0.5, -1.0, 0.06), (False, True)),  # anchor far, A < 0 trails T: stopped
    ((1.0, 1.0, 2.0, -1.0, 0.06), (False, False)),  # anchor far, A < 0 beats T: passes
    ((1.0, 2.0, 9.0, 0.0, 0.06), (False, False)),  # A = 0: never stopped
])
def test_trust_region_mask_hand_cases(case):
    (loss, old, ref, a, anchor), want = case
    ppo, ref_clip = dfn.trust_region_mask(jnp.array([loss]), jnp.array([old]), jnp.array([ref]),
                                          jnp.array([a]), anchor, clip=1e-3,
                                          anchor_threshold=0.05)
    assert (bool(ppo[0]), bool(ref_clip[0])) == want


def test_surrogate_loss_stops_gradient_of_masked_samples(key):
    """The surrogate's gradient is that of the kept samples only (one masked by PPO)."""
    den = lambda p, x, s, c: p["w"] * x / (1.0 + s ** 2)  # noqa: E731
    x = jax.random.normal(key, (4, 3))
    target = jnp.zeros((4, 3))
    adv = jnp.array([1.0, -1.0, 1.0, -1.0])
    ids = jnp.array([0, 0, 1, 1])
    kw = dict(time_weight=1.0, beta=10.0, clip=1e-3, anchor_threshold=0.05, anchor_weight=0.0,
              score_fn=den, num_groups=2)
    sur, old, teacher = {"w": jnp.float32(1.0)}, {"w": jnp.float32(1.3)}, {"w": jnp.float32(1.0)}
    # S- has a larger loss on every sample: ratio > 1 + c, so the A > 0 samples are stopped
    grad_fn = jax.jit(jax.grad(lambda *a: dfn.surrogate_loss(*a, **kw), has_aux=True))
    grad, aux = grad_fn(sur, old, teacher, x, jnp.float32(1.0), target, adv, ids,
                        jnp.zeros(4, int))
    assert float(aux["clip_ratio"]) == 0.5
    keep = jnp.array([False, True, False, True])

    def manual(p):
        l_s = dfn.edm_weight(1.0) * jnp.mean((p["w"] * x / 2.0) ** 2, axis=1)
        l_s = jnp.where(keep, l_s, jax.lax.stop_gradient(l_s))
        l_ref = dfn.edm_weight(1.0) * jnp.mean((x / 2.0) ** 2, axis=1)
        return dfn.group_preference_loss(l_s, l_ref, adv, ids, num_groups=2, beta=10.0)

    np.testing.assert_allclose(float(grad["w"]), float(jax.jit(jax.grad(manual))(sur)["w"]),
                               rtol=1e-6)


# ----------------------------------------------------------------------------- trainer toy
C, DIM, NP, GS = 2, 2, 2, 16  # mixture components, dimension, prompts, group size
TRACES = {"n": 0}


def _mix_den(p, x, sigma, cond):
    """Exact x_0-denoiser of sum_c pi_c N(mu_c, s_c^2 I), pi = softmax(logits[cond])."""
    TRACES["n"] += 1  # runs at trace time only: counts compilations of the trainer
    s2 = jnp.exp(2.0 * p["log_s"])
    v = s2 + sigma ** 2
    logw = (p["logits"][cond] - jnp.sum((x - p["mu"]) ** 2, -1) / (2.0 * v)
            - 0.5 * DIM * jnp.log(v))
    post = (s2[:, None] * x + sigma ** 2 * p["mu"]) / v[:, None]
    return jax.nn.softmax(logw) @ post


TEACHER = {"logits": jnp.zeros((NP, C)), "mu": jnp.array([[-1.5, 0.0], [1.5, 0.0]]),
           "log_s": jnp.full((C,), float(np.log(0.25)), jnp.float32)}
SIGMAS = dfn.karras_sigmas(4, 0.002, 20.0)


def _reward(x, cond):
    """1 if the sample lies on the prompt's side: x[0] < 0 for prompt 0, > 0 for prompt 1."""
    return (x[:, 0] * (2 * cond - 1) > 0).astype(jnp.float32)


def _reward_np(x, cond):
    return (x[:, 0] * (2 * np.asarray(cond) - 1) > 0).astype(np.float32)


def _make(reward=_reward, **kw):
    return dfn.make_tdm_r1(_mix_den, _mix_den, reward, sigmas=SIGMAS, num_groups=NP,
                           sample_shape=(DIM,), **kw)


# learning rates of the release scaled up 33x (G : f : S = 1 : 4 : 4 kept): the toy's few
# parameters must move by O(1) in 300 updates, not a LoRA's by O(1e-2) in thousands
TOY_LR = dict(lr_gen=2.5e-3, lr_fake=1e-2, lr_sur=1e-2)
VARIANTS = ("tdm_r1", "tdm_only")
SEEDS = (0, 1)


@pytest.fixture(scope="module")
def toy():
    tdm = _make()
    cond, ids = dfn.group_batch(jnp.arange(NP), GS)
    state = tdm.init(TEACHER, TEACHER)
    hps = [dfn.tdm_r1_params(v, **TOY_LR) for v in VARIANTS for _ in SEEDS]
    keys = jnp.stack([jax.random.key(s) for _ in VARIANTS for s in SEEDS])
    v = len(hps)
    batched = jax.tree.map(lambda a: jnp.broadcast_to(a, (v,) + a.shape), state)
    vupdate = jax.jit(jax.vmap(tdm.update, in_axes=(0, None, 0, None, None, 0)))
    return dict(tdm=tdm, cond=cond, ids=ids, state=state, hps=hps, keys=keys,
                batched=batched, vupdate=vupdate, stacked=dfn.stack_params(hps))


def _close(a, b, rtol, atol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def test_update_does_not_recompile_and_keeps_types(toy):
    tdm, state = toy["tdm"], toy["state"]
    hp = toy["hps"][0]
    s1, m1 = tdm.update(state, TEACHER, jax.random.key(3), toy["cond"], toy["ids"], hp)
    traces = TRACES["n"]
    s2, m2 = tdm.update(s1, TEACHER, jax.random.key(4), toy["cond"], toy["ids"],
                        dfn.tdm_r1_params("no_tweight", **TOY_LR))  # new traced values
    assert TRACES["n"] == traces and tdm.update.jitted._cache_size() == 1
    assert int(s2.step) == 2
    spec = lambda t: jax.tree.map(lambda a: (a.shape, a.dtype, a.weak_type), t)  # noqa: E731
    assert spec(state) == spec(s1) == spec(s2)
    assert set(m1) >= {"reward", "adv_abs", "fake_loss", "sur_loss", "gen_loss", "anchor",
                       "clip_ratio", "clip_ref_ratio", "tdm_loss", "reward_loss", "rwr_loss"}
    assert all(np.isfinite(float(v)) for v in m2.values())
    assert float(m1["reward_nonfinite"]) == 0.0
    # G moved; its EMA took the warm-up decay min((1 + 0) / (10 + 0), 0.9) = 0.1 at step 0
    assert not np.allclose(np.asarray(s1.gen["mu"]), np.asarray(TEACHER["mu"]))
    _close(s1.gen_ema, jax.tree.map(lambda a, b: 0.1 * a + 0.9 * b, state.gen, s1.gen),
           rtol=1e-6, atol=1e-7)
    # same seed, same inputs: bit for bit
    again, _ = tdm.update(state, TEACHER, jax.random.key(3), toy["cond"], toy["ids"], hp)
    _close(again, s1, 0, 0)


def test_vmap_over_seeds_and_variants_equals_loop(toy):
    out, metrics = toy["vupdate"](toy["batched"], TEACHER, toy["keys"], toy["cond"], toy["ids"],
                                  toy["stacked"])
    for i, hp in enumerate(toy["hps"]):
        s, m = toy["tdm"].update(toy["state"], TEACHER, toy["keys"][i], toy["cond"],
                                 toy["ids"], hp)
        # float32 throughout; batching may reorder a few reductions (ulp-level differences)
        _close(jax.tree.map(lambda a: a[i], out), s, rtol=1e-5, atol=1e-6)
        _close(jax.tree.map(lambda a: a[i], metrics), m, rtol=1e-4, atol=1e-6)


def test_host_reward_matches_jnp_reward_under_jit_and_vmap(key):
    x = jax.random.normal(key, (3, 8, DIM))
    c = jnp.arange(8) % NP
    host = dfn.host_reward(_reward_np)
    want = jax.vmap(_reward, in_axes=(0, None))(x, c)
    got = jax.jit(jax.vmap(host, in_axes=(0, None)))(x, c)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert got.dtype == jnp.float32 and 0 < float(want.mean()) < 1


def test_sharded_with_host_reward_equals_unsharded_with_jnp_reward(toy, num_devices):
    """One compiled program checks two equivalences (a compilation costs ~10 s on 2 cores):
    the batch split over devices (group statistics psum-ed), each device scoring its samples
    with a host NumPy reward through pure_callback, against the unsplit batch with the same
    reward written in jnp."""
    tdm_sh = _make(reward=dfn.host_reward(_reward_np), axis_name="batch")
    mesh = jax.make_mesh((num_devices,), ("batch",),
                         axis_types=(jax.sharding.AxisType.Auto,))
    if (NP * GS) % num_devices:
        pytest.skip(f"batch {NP * GS} does not split over {num_devices} devices")
    sharded = jax.jit(jax.shard_map(
        tdm_sh.update, mesh=mesh, in_specs=(P(), P(), P(), P("batch"), P("batch"), P()),
        out_specs=(P(), P())))
    hp = toy["hps"][0]
    key = jax.random.key(7)
    s_sh, m_sh = sharded(toy["state"], TEACHER, key, toy["cond"], toy["ids"], hp)
    s_un, m_un = toy["tdm"].update(toy["state"], TEACHER, key, toy["cond"], toy["ids"], hp)
    # the same random numbers (keyed by global sample / group index); sums in another order
    _close(s_sh, s_un, rtol=1e-5, atol=1e-6)
    _close(m_sh, m_un, rtol=1e-4, atol=1e-6)
    # the pure group statistics too, with the groups split over devices
    r = jax.random.uniform(key, (NP * GS,))
    adv = jax.jit(jax.shard_map(
        lambda x, g: dfn.group_advantages(x, g, num_groups=NP, axis_name="batch"), mesh=mesh,
        in_specs=(P("batch"), P("batch")), out_specs=P("batch")))(r, toy["ids"])
    np.testing.assert_allclose(np.asarray(adv),
                               np.asarray(dfn.group_advantages(r, toy["ids"], num_groups=NP)),
                               rtol=1e-5, atol=1e-6)


def test_tdm_r1_raises_the_reward_on_a_two_mode_toy(toy):
    """Teacher: two Gaussian modes at x[0] = -1.5, +1.5 (weights 1/2); reward: the prompt's side.

    The start samples either side with probability 1/2 by symmetry. TDM alone (the control) keeps
    the teacher's weights; TDM-R1 must move G towards the rewarded mode. Evaluated on 2000 fixed
    noises (binomial standard error <= 0.011), a gain of >= 0.2 is > 15 standard errors.
    """
    n = 2000
    c_eval = jnp.arange(n) % NP
    x_eval = jax.random.normal(jax.random.key(99), (n, DIM))

    @jax.jit
    @jax.vmap
    def evaluate(gen):
        den = lambda p, x, s: jax.vmap(_mix_den, (None, 0, None, 0))(p, x, s, c_eval)  # noqa
        x = dfn.sample(den, gen, jax.random.key(0), x_eval, sampler="euler", steps=4,
                       schedule=dfn.SigmaSchedule(SIGMAS, prediction="sample"))
        return jnp.mean(_reward(x, c_eval))

    state = toy["batched"]
    start = np.asarray(evaluate(state.gen))
    keys = jax.vmap(lambda k: jax.random.split(k, 300))(toy["keys"])  # [V, 300]
    for t in range(300):
        state, _ = toy["vupdate"](state, TEACHER, keys[:, t], toy["cond"], toy["ids"],
                                  toy["stacked"])
    end = np.asarray(evaluate(state.gen))
    end_ema = np.asarray(evaluate(state.gen_ema))
    ns = len(SEEDS)
    r1, only = end[:ns], end[ns:]
    assert np.all(np.abs(start - 0.5) < 0.05), start
    assert np.all(r1 - start[:ns] >= 0.2), (start, end)
    assert np.all(r1 - only >= 0.2), (r1, only)
    assert np.all(np.abs(only - 0.5) < 0.06), only  # no reward signal, no drift of the weights
    assert np.all(end_ema[:ns] - start[:ns] >= 0.2), end_ema


# ----------------------------------------------------------------------------- bad input
def test_bad_input_names_the_argument(toy):
    r, g = jnp.ones(4), jnp.array([0, 1, 0, 1])
    with pytest.raises(ValueError, match="group_ids"):
        dfn.group_advantages(r, jnp.array([0, 1, 2, 0]), num_groups=2)
    with pytest.raises(ValueError, match="group_ids"):
        dfn.group_advantages(r, jnp.array([0, -1, 0, 0]), num_groups=2)
    with pytest.raises(ValueError, match="rewards"):
        dfn.group_advantages(jnp.array([1.0, jnp.nan, 0.0, 1.0]), g, num_groups=2)
    with pytest.raises(ValueError, match="num_groups"):
        dfn.group_advantages(r, g, num_groups=0)
    with pytest.raises(ValueError, match="group_ids"):
        dfn.group_advantages(r, g[:3], num_groups=2)
    with pytest.raises(ValueError, match="beta"):
        dfn.group_preference_loss(r, r, r, g, num_groups=2, beta=-1.0)
    with pytest.raises(ValueError, match="group_ids"):
        dfn.group_preference_loss(r, r, r, jnp.array([0, 5, 0, 1]), num_groups=2, beta=1.0)
    with pytest.raises(ValueError, match="num_groups"):
        dfn.group_preference_loss(r, r, r, g, num_groups=0, beta=1.0)
    with pytest.raises(ValueError, match="tau"):
        dfn.forward_kernel(jnp.ones(2), 1.0, 0.5, jnp.ones(2))
    for bad in ([20.0, 5.0, 5.0, 0.0], [1.0, 2.0, 0.5, 0.0], [2.0, 1.0, -0.5], [3.0]):
        with pytest.raises(ValueError, match="sigmas"):
            dfn.make_tdm_r1(_mix_den, _mix_den, _reward, sigmas=jnp.array(bad),
                            num_groups=2, sample_shape=(DIM,))
    with pytest.raises(ValueError, match="num_groups"):
        dfn.make_tdm_r1(_mix_den, _mix_den, _reward, sigmas=SIGMAS, num_groups=0,
                        sample_shape=(DIM,))
    with pytest.raises(ValueError, match="num_boundaries"):
        dfn.make_tdm_r1(_mix_den, _mix_den, _reward, sigmas=SIGMAS, num_groups=2,
                        sample_shape=(DIM,), num_boundaries=5)
    tdm, state, hp = toy["tdm"], toy["state"], toy["hps"][0]
    ids = toy["ids"].at[3].set(NP)
    with pytest.raises(ValueError, match="group_ids"):
        tdm.update(state, TEACHER, jax.random.key(0), toy["cond"], ids, hp)
    with pytest.raises(ValueError, match="cond"):
        tdm.update(state, TEACHER, jax.random.key(0), toy["cond"][:5], toy["ids"], hp)
    with pytest.raises(ValueError, match="hparams"):
        tdm.update(state, TEACHER, jax.random.key(0), toy["cond"], toy["ids"], {"beta": 1.0})
    with pytest.raises(ValueError, match="variant"):
        dfn.tdm_r1_params("grpo")
