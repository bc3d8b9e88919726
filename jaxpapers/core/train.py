"""A training loop on optax: jitted step, ``lax.scan`` over chunks, progress, checkpoints, resume.

The loop is deterministic: the batch for step ``t`` comes from a pure ``batch_fn(t)`` and the
step's random key is ``fold_in(key, t)``, so a run that stops at a checkpoint and resumes continues
bit for bit like a run that never stopped (on the same platform). Checkpoints are written by orbax,
which commits through a temporary folder and a rename, so a crash mid-write leaves the previous
checkpoint intact.

Several processes (:mod:`jaxpapers.core.distributed`): every process calls :func:`fit` with the
same arguments, its state placed on a mesh over all processes (``sharding.replicate``) and its
data global (``sharding.shard_batch``); every process steps, only the primary shows progress, and
checkpoints are written by all processes together (orbax's multi-host path: each process writes
its shards, the primary the metadata). A checkpoint restores into the sharding of the state given
to :func:`fit`, so a run may resume with another number of processes (same global batch). A state
left on each process's own device (no ``replicate``) trains one independent copy per process;
it is refused with checkpoints.

>>> import jax, jax.numpy as jnp, optax
>>> loss = lambda p, batch, key: jnp.mean((batch["x"] * p["w"] - batch["y"]) ** 2)
>>> opt = optax.sgd(0.1)
>>> state = init_train_state({"w": jnp.zeros(())}, opt, jax.random.key(0))
>>> batch_fn = lambda t: {"x": jnp.ones(4), "y": 2.0 * jnp.ones(4)}
>>> state, hist = fit(make_train_step(loss, opt), state, batch_fn, num_steps=50, progress=False)
>>> round(float(state.params["w"]), 3), hist["loss"].shape
(2.0, (50,))
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.core import checks, pytree

__all__ = ["TrainState", "init_train_state", "make_train_step", "run_chunk", "fit",
           "save_checkpoint", "restore_checkpoint", "latest_checkpoint_step"]

LossFn = Callable[[Any, Any, jax.Array], Any]  # (params, batch, key) -> loss | (loss, aux)
StepFn = Callable[["TrainState", Any], tuple["TrainState", dict[str, jax.Array]]]


@pytree.dataclass
class TrainState:
    """Training state carried through the loop.

    Attributes:
      step: [] int32, number of steps taken.
      params: parameter pytree.
      opt_state: optax state for ``params``.
      key_data: [K] uint32, raw data of the run's base key (``jax.random.key_data``); the key of
        step ``t`` is ``fold_in(wrap_key_data(key_data), t)``. Raw data so it checkpoints as an
        ordinary array.
    """

    step: jax.Array
    params: Any
    opt_state: Any
    key_data: jax.Array

    @property
    def key(self) -> jax.Array:
        return jax.random.wrap_key_data(self.key_data)


def init_train_state(params: Any, optimizer: optax.GradientTransformation,
                     key: jax.Array) -> TrainState:
    """A fresh :class:`TrainState` at step 0 (``key`` is consumed as the run's base key)."""
    checks.check_key("key", key)
    return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                      opt_state=optimizer.init(params), key_data=jax.random.key_data(key))


def make_train_step(loss_fn: LossFn, optimizer: optax.GradientTransformation, *,
                    has_aux: bool = False) -> StepFn:
    """One optimisation step ``(state, batch) -> (state, metrics)`` (not jitted; :func:`fit` is).

    Args:
      loss_fn: ``loss_fn(params, batch, key) -> loss`` (a scalar), or ``-> (loss, aux)`` with
        ``aux`` a dict of scalar metrics when ``has_aux``. ``key`` is this step's key.
      optimizer: any optax transformation.
      has_aux: whether ``loss_fn`` returns ``(loss, aux)``.

    Returns:
      ``step(state, batch)``; metrics contain ``"loss"`` and ``"grad_norm"`` (plus ``aux``).
    """

    def step(state: TrainState, batch: Any):
        key = jax.random.fold_in(state.key, state.step)
        grad_fn = jax.value_and_grad(loss_fn, has_aux=has_aux)
        if has_aux:
            (loss, aux), grads = grad_fn(state.params, batch, key)
        else:
            loss, grads = grad_fn(state.params, batch, key)
            aux = {}
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), **aux}
        new = TrainState(step=state.step + 1, params=params, opt_state=opt_state,
                         key_data=state.key_data)
        return new, metrics

    return step


def _chunk(step_fn: StepFn, batch_fn: Callable[..., Any], state: TrainState, length: int,
           data: Any = None):
    def body(s, _):
        batch = batch_fn(s.step) if data is None else batch_fn(s.step, data)
        return step_fn(s, batch)

    return jax.lax.scan(body, state, None, length=length)


run_chunk = jax.jit(_chunk, static_argnums=(0, 1, 3))
run_chunk.__doc__ = """``length`` steps of ``step_fn`` in one ``lax.scan``; returns (state, stacked metrics).

``run_chunk(step_fn, batch_fn, state, length, data=None)``. ``step_fn`` and ``batch_fn`` are
static (hashable callables): build them once and reuse them (or make them compare equal by value,
e.g. frozen dataclasses), or every call recompiles. ``data`` is a traced pytree handed to
``batch_fn(step, data)`` (when not None): arrays the batches are drawn from travel as arguments
instead of being baked into the compiled program as constants."""


def _to_host(tree: Any) -> Any:
    """Numpy copies of a pytree of (possibly multi-process) arrays; every process gets all of it.

    A replicated global array is read from a local copy; one sharded over several processes is
    gathered (a collective: every process calls this in the same order).
    """
    def get(x):
        if not isinstance(x, jax.Array) or x.is_fully_addressable or x.is_fully_replicated:
            return np.asarray(x)
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    return jax.tree.map(get, tree)


def _check_spans_processes(state: Any) -> None:
    """With several processes and checkpoints, every state leaf must be on every process.

    orbax writes a checkpoint collectively from global arrays, and restores into the shardings
    of the given state: a process-local state would come back process-local.
    """
    count = jax.process_count()
    if count == 1:
        return
    for path, x in jax.tree_util.tree_leaves_with_path(state):
        procs = ({d.process_index for d in x.sharding.device_set}
                 if isinstance(x, jax.Array) else set())
        if len(procs) != count:
            raise ValueError(
                f"state leaf {jax.tree_util.keystr(path)} is on the devices of processes "
                f"{sorted(procs)}, but this run has {count} processes and checkpoints: place "
                "the state on a mesh over all of them first "
                "(sharding.replicate(state, data_parallel_mesh()))")


def latest_checkpoint_step(directory: str | os.PathLike) -> int | None:
    """The newest committed checkpoint step in ``directory``, or None."""
    import orbax.checkpoint as ocp

    directory = pathlib.Path(directory).resolve()
    if not directory.exists():
        return None
    with ocp.CheckpointManager(directory) as mngr:
        return mngr.latest_step()


def _spec(tree: Any) -> list[list[str]]:
    """[path, shape, dtype] of every leaf: checked before restoring, so a mismatch fails early."""
    return [[jax.tree_util.keystr(path), str(tuple(jnp.shape(x))), str(jnp.result_type(x))]
            for path, x in jax.tree_util.tree_leaves_with_path(tree)]


def save_checkpoint(directory: str | os.PathLike, state: TrainState,
                    history: dict[str, list[float]], *, max_to_keep: int = 2) -> int:
    """Write ``state`` and the metric history as checkpoint ``int(state.step)`` (atomic).

    Unfinished folders left by a crashed write are removed first. With several processes every
    process calls it (orbax writes collectively: each process its shards, the primary the
    metadata and the history, then one commit).
    """
    import orbax.checkpoint as ocp

    step = int(state.step)
    # cleanup_tmp_directories: the unfinished folder of a write that crashed (orbax names it
    # "<step>.orbax-checkpoint-tmp-*") is removed by the next save
    opts = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                        cleanup_tmp_directories=True)
    with ocp.CheckpointManager(pathlib.Path(directory).resolve(), options=opts) as mngr:
        mngr.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            spec=ocp.args.JsonSave(_spec(state)),
            history=ocp.args.JsonSave({k: list(map(float, v)) for k, v in history.items()})),
            force=True)
        mngr.wait_until_finished()
    return step


def restore_checkpoint(directory: str | os.PathLike, like: TrainState,
                       step: int | None = None) -> tuple[TrainState, dict[str, list[float]]]:
    """Restore checkpoint ``step`` (default: latest) into the structure of ``like``.

    Arrays come back with the shardings of ``like``'s leaves, whatever the number of processes
    or devices that wrote the checkpoint.

    Raises:
      FileNotFoundError: no checkpoint. ValueError: it does not match ``like``'s structure.
    """
    import orbax.checkpoint as ocp

    directory = pathlib.Path(directory).resolve()
    with ocp.CheckpointManager(directory) as mngr:
        step = mngr.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {directory}")
        saved = mngr.restore(step, args=ocp.args.Composite(spec=ocp.args.JsonRestore())).spec
        want = _spec(like)
        if saved != want:
            diff = next((f"{a} != {b}" for a, b in zip(saved, want) if a != b),
                        f"{len(saved)} leaves saved, {len(want)} expected")
            raise ValueError(f"checkpoint {directory}/{step} does not match the given state "
                             f"(saved vs expected leaf: {diff})")
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
        got = mngr.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract), history=ocp.args.JsonRestore()))
    return got.state, dict(got.history or {})


def fit(step_fn: StepFn, state: TrainState, batch_fn: Callable[..., Any], *,
        num_steps: int, chunk_size: int = 100, checkpoint_dir: str | os.PathLike | None = None,
        checkpoint_every: int | None = None, max_to_keep: int = 2, progress: bool = True,
        desc: str = "train", data: Any = None) -> tuple[TrainState, dict[str, np.ndarray]]:
    """Train until ``state.step == num_steps``; resume from ``checkpoint_dir`` if it has one.

    Steps run in jitted ``lax.scan`` chunks of at most ``chunk_size`` steps, cut so that every
    ``checkpoint_every``-th step ends a chunk; a progress bar advances between chunks.

    Args:
      step_fn: from :func:`make_train_step` (build it once; it is a static argument).
      state: the initial state (used only for its structure when resuming).
      batch_fn: pure ``batch_fn(step) -> batch`` (``step`` is a traced int32 scalar), e.g. an
        index into arrays it closes over, or data drawn from ``fold_in(key, step)``; with
        ``data``, ``batch_fn(step, data) -> batch``. Static, like ``step_fn``.
      num_steps: total number of steps of the run (including those before a resume).
      chunk_size: steps per compiled chunk.
      checkpoint_dir: folder for orbax checkpoints; None disables checkpointing.
      checkpoint_every: checkpoint period in steps (required with ``checkpoint_dir``).
      max_to_keep: checkpoints kept.
      progress: show a tqdm progress bar.
      desc: progress bar label.
      data: optional pytree of arrays passed to ``batch_fn`` as a traced argument (a dataset, a
        data key): not a constant of the compiled program, so new data of the same shapes
        reuses the compilation.

    Returns:
      ``(state, history)`` where ``history[name]`` is a float array [num_steps] of each metric
      (the same on every process).

    Raises:
      ValueError: a bad argument; or, with several processes and ``checkpoint_dir``, a
        ``state`` leaf that is not on a mesh over all of them (use
        :func:`jaxpapers.core.sharding.replicate`).
    """
    num_steps = checks.check_int("num_steps", num_steps, minimum=0)
    chunk_size = checks.check_int("chunk_size", chunk_size, minimum=1)
    if checkpoint_dir is not None:
        if checkpoint_every is None:
            raise ValueError("checkpoint_every must be a positive int when checkpoint_dir is set, "
                             "got None")
        checkpoint_every = checks.check_int("checkpoint_every", checkpoint_every, minimum=1)
        _check_spans_processes(state)
    history: dict[str, list[float]] = {}
    if checkpoint_dir is not None and latest_checkpoint_step(checkpoint_dir) is not None:
        state, history = restore_checkpoint(checkpoint_dir, state)
    start = int(state.step)
    if start > num_steps:
        raise ValueError(f"state is at step {start}, beyond num_steps={num_steps}")
    from tqdm.auto import tqdm

    show = progress and jax.process_index() == 0  # only the primary process shows progress
    bar = tqdm(total=num_steps, initial=start, desc=desc, unit="step",
               disable=None if show else True)
    step = start
    while step < num_steps:
        n = min(chunk_size, num_steps - step)
        if checkpoint_dir is not None:
            n = min(n, checkpoint_every - step % checkpoint_every)
        extra = () if data is None else (data,)  # the same call signature as run_chunk(...)
        state, metrics = run_chunk(step_fn, batch_fn, state, n, *extra)
        for k, v in _to_host(metrics).items():
            history.setdefault(k, []).extend(np.asarray(v, np.float64).reshape(n).tolist())
        step += n
        bar.update(n)
        if "loss" in history:
            bar.set_postfix(loss=f"{history['loss'][-1]:.4g}")
        if checkpoint_dir is not None and (step % checkpoint_every == 0 or step == num_steps):
            save_checkpoint(checkpoint_dir, state, history, max_to_keep=max_to_keep)
    bar.close()
    return state, {k: np.asarray(v) for k, v in history.items()}
