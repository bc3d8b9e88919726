import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxpapers.core import train

D, B, N_DATA = 5, 16, 256


def _problem(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N_DATA, D)).astype(np.float32)
    w_true = rng.normal(size=(D,)).astype(np.float32)
    y = x @ w_true + 0.1 * rng.normal(size=(N_DATA,)).astype(np.float32)
    xs, ys = jnp.asarray(x), jnp.asarray(y)

    def batch_fn(step):  # deterministic minibatch of step t
        idx = (step * B + jnp.arange(B)) % N_DATA
        return {"x": xs[idx], "y": ys[idx]}

    def loss_fn(params, batch, key):  # noisy (dropout-like) loss: exercises the step key
        mask = jax.random.bernoulli(key, 0.9, (D,)).astype(jnp.float32)
        pred = batch["x"] @ (params["w"] * mask) + params["b"]
        return jnp.mean((pred - batch["y"]) ** 2)

    params = {"w": jnp.zeros((D,)), "b": jnp.zeros(())}
    return params, batch_fn, loss_fn, w_true


def test_fit_converges(key):
    params, batch_fn, loss_fn, w_true = _problem()
    opt = optax.adam(0.05)
    state = train.init_train_state(params, opt, key)
    state, hist = train.fit(train.make_train_step(loss_fn, opt), state, batch_fn,
                            num_steps=300, chunk_size=64, progress=False)
    assert int(state.step) == 300 and hist["loss"].shape == (300,)
    assert hist["loss"][-20:].mean() < 0.2 * hist["loss"][:20].mean()
    assert np.all(np.isfinite(hist["grad_norm"]))


def test_resume_is_bit_identical(tmp_path, key):
    params, batch_fn, loss_fn, _ = _problem()
    opt = optax.adam(0.05)
    step_fn = train.make_train_step(loss_fn, opt)
    n = 40
    fresh = train.init_train_state(params, opt, key)
    straight, hist_straight = train.fit(step_fn, fresh, batch_fn, num_steps=2 * n, chunk_size=16,
                                        checkpoint_dir=tmp_path / "a", checkpoint_every=n,
                                        progress=False)
    # run N steps and stop (as if the job was killed after the checkpoint) ...
    first, _ = train.fit(step_fn, fresh, batch_fn, num_steps=n, chunk_size=16,
                         checkpoint_dir=tmp_path / "b", checkpoint_every=n, progress=False)
    assert train.latest_checkpoint_step(tmp_path / "b") == n
    # ... then a new process resumes from the checkpoint with a *fresh* state object.
    resumed, hist_resumed = train.fit(step_fn, fresh, batch_fn, num_steps=2 * n, chunk_size=16,
                                      checkpoint_dir=tmp_path / "b", checkpoint_every=n,
                                      progress=False)
    assert int(resumed.step) == 2 * n
    chex.assert_trees_all_equal(straight, resumed)
    np.testing.assert_array_equal(hist_straight["loss"], hist_resumed["loss"])
    # and the run really changed the parameters (a resume that skipped training would fail here)
    assert not np.allclose(np.asarray(first.params["w"]), np.asarray(resumed.params["w"]))


def test_restore_rejects_mismatched_structure(tmp_path, key):
    params, batch_fn, loss_fn, _ = _problem()
    opt = optax.sgd(0.1)
    state = train.init_train_state(params, opt, key)
    train.fit(train.make_train_step(loss_fn, opt), state, batch_fn, num_steps=4, chunk_size=4,
              checkpoint_dir=tmp_path, checkpoint_every=4, progress=False)
    other = train.init_train_state({"w": jnp.zeros((D + 1,)), "b": jnp.zeros(())}, opt, key)
    with pytest.raises(ValueError, match="does not match"):
        train.restore_checkpoint(tmp_path, other)


def _traced_once(monkeypatch):
    """Make ``train.run_chunk`` fail on a second trace (same static arguments as the real one)."""
    chex.clear_trace_counter()
    monkeypatch.setattr(train, "run_chunk", jax.jit(chex.assert_max_traces(train._chunk, n=1),
                                                    static_argnums=(0, 1, 3)))


def test_no_recompilation_across_chunks(key, monkeypatch):
    params, batch_fn, loss_fn, _ = _problem()
    opt = optax.sgd(0.01)
    step_fn = train.make_train_step(loss_fn, opt)
    state = train.init_train_state(params, opt, key)
    _traced_once(monkeypatch)
    s = state
    for _ in range(4):
        s, _ = train.run_chunk(step_fn, batch_fn, s, 8)
    # fit with chunks of the same length reuses it too
    train.fit(step_fn, s, batch_fn, num_steps=int(s.step) + 16, chunk_size=8, progress=False)


def _data_batch(step, data):  # module level: a static batch_fn that stays the same object
    xs, ys = data
    idx = (step * B + jnp.arange(B)) % xs.shape[0]
    return {"x": xs[idx], "y": ys[idx]}


def test_data_argument_is_traced_not_constant(key, monkeypatch):
    """``data`` reaches batch_fn as an argument: same result as closing over it, new data of the
    same shape reuses the compilation, and the data is not a constant of the program."""
    params, batch_fn, loss_fn, _ = _problem()
    rng = np.random.default_rng(1)
    xs = jnp.asarray(rng.normal(size=(N_DATA, D)), jnp.float32)
    ys = jnp.asarray(rng.normal(size=(N_DATA,)), jnp.float32)
    opt = optax.sgd(0.01)
    step_fn = train.make_train_step(loss_fn, opt)
    state = train.init_train_state(params, opt, key)
    closed = lambda t: _data_batch(t, (xs, ys))
    want, _ = train.fit(step_fn, state, closed, num_steps=8, chunk_size=8, progress=False)
    text = train.run_chunk.lower(step_fn, _data_batch, state, 8, (xs, ys)).as_text()
    assert len(text) < len(train.run_chunk.lower(step_fn, closed, state, 8).as_text()) - 4 * xs.size
    _traced_once(monkeypatch)
    got, _ = train.fit(step_fn, state, _data_batch, num_steps=8, chunk_size=8, progress=False,
                       data=(xs, ys))
    chex.assert_trees_all_equal(got, want)
    train.fit(step_fn, state, _data_batch, num_steps=8, chunk_size=8, progress=False,
              data=(xs + 1.0, ys))  # new values: no retrace


def test_bad_arguments(key):
    params, batch_fn, loss_fn, _ = _problem()
    opt = optax.sgd(0.01)
    state = train.init_train_state(params, opt, key)
    step_fn = train.make_train_step(loss_fn, opt)
    with pytest.raises(ValueError, match="chunk_size"):
        train.fit(step_fn, state, batch_fn, num_steps=4, chunk_size=0)
    with pytest.raises(TypeError, match="num_steps"):
        train.fit(step_fn, state, batch_fn, num_steps=True)
    with pytest.raises(ValueError, match="checkpoint_every"):
        train.fit(step_fn, state, batch_fn, num_steps=4, checkpoint_dir="/tmp/x")
    with pytest.raises(TypeError, match="key"):
        train.init_train_state(params, opt, jnp.zeros(2, jnp.uint32))


def test_save_removes_unfinished_checkpoint_folders(tmp_path, key):
    """A write that crashed leaves orbax's "<step>.orbax-checkpoint-tmp-*" folder; the next save
    removes it, and resuming ignores it."""
    params, batch_fn, loss_fn, _ = _problem()
    opt = optax.sgd(0.1)
    step_fn = train.make_train_step(loss_fn, opt)
    state = train.init_train_state(params, opt, key)
    train.fit(step_fn, state, batch_fn, num_steps=4, chunk_size=4, checkpoint_dir=tmp_path,
              checkpoint_every=4, progress=False)
    partial = tmp_path / "8.orbax-checkpoint-tmp-1234567890"
    (partial / "state").mkdir(parents=True)
    assert train.latest_checkpoint_step(tmp_path) == 4  # the partial write is not a checkpoint
    resumed, hist = train.fit(step_fn, state, batch_fn, num_steps=8, chunk_size=4,
                              checkpoint_dir=tmp_path, checkpoint_every=4, progress=False)
    assert int(resumed.step) == 8 and hist["loss"].shape == (8,)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["4", "8"]


def test_fit_on_a_mesh_resumes_with_the_mesh_sharding(tmp_path, key, num_devices):
    """State replicated on a 2-device mesh: a checkpoint restores onto the mesh (the path a run
    with another process count takes) and continues bit for bit."""
    from jaxpapers.core import sharding

    params, batch_fn, loss_fn, _ = _problem()
    opt = optax.adam(0.05)
    step_fn = train.make_train_step(loss_fn, opt)
    mesh = sharding.data_parallel_mesh(2)
    state = sharding.replicate(train.init_train_state(params, opt, key), mesh)
    straight, _ = train.fit(step_fn, state, batch_fn, num_steps=8, chunk_size=4,
                            checkpoint_dir=tmp_path / "a", checkpoint_every=4, progress=False)
    train.fit(step_fn, state, batch_fn, num_steps=4, chunk_size=4, checkpoint_dir=tmp_path / "b",
              checkpoint_every=4, progress=False)
    resumed, _ = train.fit(step_fn, state, batch_fn, num_steps=8, chunk_size=4,
                           checkpoint_dir=tmp_path / "b", checkpoint_every=4, progress=False)
    chex.assert_trees_all_equal(straight, resumed)
    assert resumed.params["w"].sharding == state.params["w"].sharding
