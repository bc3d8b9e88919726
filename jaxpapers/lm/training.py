"""Training the byte-level LM on the standard library's source, presets, and a checkpoint cache.

:func:`train` runs :func:`jaxpapers.core.train.fit` (jitted ``lax.scan`` chunks, progress bar)
on random windows of the training files. :func:`load_or_train` trains once and caches the result
as an orbax checkpoint in a folder named by a hash of the configurations and the key; later calls
load it. The folder is written under a temporary name and renamed when complete, and its stored
configurations and parameter shapes are checked before loading.

>>> import jax
>>> cfg, tcfg = tiny()
>>> cfg.n_layers, tcfg.seq_len <= cfg.max_len
(2, True)
>>> params = init_like(cfg)                   # shapes only, e.g. for a restore target
>>> params["layers"]["wq"].shape
(2, 32, 32)
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import pathlib
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.core import cache, checks
from jaxpapers.lm import model
from jaxpapers.lm._types import LMConfig, TrainConfig
from jaxpapers.lm.evaluate import _bits, unigram_bits_per_byte

__all__ = ["Preset", "tiny", "small", "corpus_tokens", "make_optimizer", "loss_fn", "train",
           "heldout_windows", "heldout_bits_per_byte", "load_or_train", "checkpoint_dir",
           "checkpoint_info", "init_like", "DEFAULT_CACHE_DIR"]

DEFAULT_CACHE_DIR = pathlib.Path("~/.cache/jaxpapers/lm")
_FORMAT = 1  # bump when the parameter layout or the training recipe changes


class Preset(NamedTuple):
    """A model shape and its training recipe: ``load_or_train(*preset, key=...)``."""

    config: LMConfig
    train_config: TrainConfig


def tiny() -> Preset:
    """A 2-layer GQA model that trains in seconds on 2 CPU cores (for unit tests); max_len 128.

    Trained 120 steps on 16 x 64-byte windows of the first 60 stdlib files.
    """
    return Preset(LMConfig(d_model=32, n_layers=2, n_q_heads=2, n_kv_heads=1, head_dim=16,
                           d_ff=64, max_len=128),
                  TrainConfig(seq_len=64, batch_size=16, num_steps=120, learning_rate=1e-2,
                              warmup_steps=10, max_files=60, chunk_size=60))


def small() -> Preset:
    """A 4-layer GQA model (Hq=4, Hk=2, D=64), max_len 2048, for contexts of 1-2K bytes.

    Trained 250 steps on 16 x 256-byte windows, then 50 steps on 4 x 1024-byte windows (about
    1.2M bytes); used by the sparse-attention experiments.
    """
    return Preset(LMConfig(d_model=128, n_layers=4, n_q_heads=4, n_kv_heads=2, head_dim=64,
                           d_ff=384, max_len=2048, rope_base=10_000.0),
                  TrainConfig(seq_len=256, batch_size=16, num_steps=250, learning_rate=3e-3,
                              warmup_steps=30, chunk_size=25, extra_stages=((1024, 4, 50),)))


def init_like(config: LMConfig) -> Any:
    """The parameter pytree's shapes and dtypes (``jax.ShapeDtypeStruct`` leaves), no compute."""
    model._check_config(config)
    return jax.eval_shape(functools.partial(model.init, config), jax.random.key(0))


@functools.lru_cache(maxsize=4)
def _corpus(max_files: int | None, heldout_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    from jaxpapers.core import data

    corpus = data.stdlib_corpus(heldout_fraction=heldout_fraction, max_files=max_files)
    return data.encode_bytes(corpus.train_text), data.encode_bytes(corpus.heldout_text)


def corpus_tokens(train_config: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """Training and held-out bytes of the stdlib corpus (split by file), as uint8 arrays."""
    if not isinstance(train_config, TrainConfig):
        raise TypeError(f"train_config must be a TrainConfig, got {type(train_config).__name__}")
    train_tokens, heldout = _corpus(train_config.max_files, train_config.heldout_fraction)
    return train_tokens.copy(), heldout.copy()


def make_optimizer(train_config: TrainConfig) -> optax.GradientTransformation:
    """AdamW with linear warm-up and cosine decay to 10%; decay on weight matrices only."""
    tc = train_config
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, tc.learning_rate, max(tc.warmup_steps, 1), max(tc.total_steps, tc.warmup_steps + 1),
        end_value=0.1 * tc.learning_rate)

    def decay_mask(params):
        def is_matrix(path, _):
            return getattr(path[-1], "key", None) in model._MATRICES + ("unembed",)
        return jax.tree_util.tree_map_with_path(is_matrix, params)

    return optax.chain(optax.clip_by_global_norm(tc.grad_clip),
                       optax.adamw(schedule, b2=0.98, weight_decay=tc.weight_decay,
                                   mask=decay_mask))


def loss_fn(params: dict, batch: tuple[jax.Array, jax.Array], key: jax.Array, *,
            config: LMConfig) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Mean next-byte cross-entropy in nats; ``aux["bpb"]`` is the same in bits.

    Args:
      params: from :func:`jaxpapers.lm.init`.
      batch: ``(inputs [B, L], targets [B, L])`` int32.
      key: unused (deterministic model); part of the training-loop signature.
      config: the model shape.
    """
    del key
    inputs, targets = batch
    logits = model._forward_impl(params, inputs, config)
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))
    return nll, {"bpb": nll / math.log(2.0)}


def _check_pair(config: Any, train_config: Any) -> None:
    model._check_config(config)
    if not isinstance(train_config, TrainConfig):
        raise TypeError(f"train_config must be a TrainConfig, got {type(train_config).__name__}")
    if train_config.max_seq_len > config.max_len:
        raise ValueError(f"train_config.seq_len={train_config.max_seq_len} exceeds "
                         f"config.max_len={config.max_len}")


def train(config: LMConfig, train_config: TrainConfig, key: jax.Array, *,
          progress: bool = True) -> dict:
    """Train a model on random windows of the stdlib training files; returns the parameters.

    Args:
      config: the model shape.
      train_config: the recipe.
      key: a ``jax.random.key``; consumed (initialisation, window sampling).
      progress: show a progress bar.

    Returns:
      the trained parameter pytree.
    """
    params, _ = _train(config, train_config, key, progress=progress)
    return params


@dataclasses.dataclass(frozen=True)
class _Windows:
    """``batch_fn(step, (data_key, tokens))`` of a training stage: random windows of the corpus.

    A hashable value (a static argument of the core loop) that receives the corpus as traced
    data, so the bytes are never baked into the compiled program.
    """

    batch_size: int
    seq_len: int

    def __call__(self, step, data):
        from jaxpapers.core import data as core_data

        data_key, tokens = data
        return core_data.sample_windows(jax.random.fold_in(data_key, step), tokens,
                                        batch_size=self.batch_size, seq_len=self.seq_len)


@functools.lru_cache(maxsize=8)
def _optimizer_and_step(config: LMConfig, train_config: TrainConfig):
    """One optimizer and step function per (config, recipe): a second :func:`train` call with
    the same settings hands the core loop the same static ``step_fn`` and reuses its compilation."""
    from jaxpapers.core import train as core_train

    optimizer = make_optimizer(train_config)
    step_fn = core_train.make_train_step(functools.partial(loss_fn, config=config), optimizer,
                                         has_aux=True)
    return optimizer, step_fn


def _train(config, train_config, key, *, progress):
    from jaxpapers.core import train as core_train

    _check_pair(config, train_config)
    checks.check_key("key", key)
    tc = train_config
    train_tokens, _ = corpus_tokens(tc)
    if train_tokens.size <= tc.max_seq_len + 1:
        raise ValueError(f"the training corpus has {train_tokens.size} bytes, too few for "
                         f"seq_len={tc.max_seq_len}")
    init_key, data_key, run_key = jax.random.split(key, 3)
    params = model.init(config, init_key)
    optimizer, step_fn = _optimizer_and_step(config, tc)
    tokens = jnp.asarray(train_tokens)
    state = core_train.init_train_state(params, optimizer, run_key)
    history: dict[str, list] = {}
    done = 0
    for seq_len, batch_size, num_steps in tc.stages:
        done += num_steps
        state, hist = core_train.fit(step_fn, state, _Windows(batch_size, seq_len),
                                     num_steps=done, chunk_size=tc.chunk_size,
                                     progress=progress, desc=f"lm T={seq_len}",
                                     data=(data_key, tokens))
        for k, v in hist.items():
            history.setdefault(k, []).extend(np.asarray(v).tolist())
    return state.params, {k: np.asarray(v) for k, v in history.items()}


def heldout_windows(train_config: TrainConfig, *, seq_len: int | None = None,
                    num_windows: int = 16) -> np.ndarray:
    """Evenly spaced, non-overlapping windows of the held-out files' bytes.

    Args:
      train_config: selects the corpus (``max_files``, ``heldout_fraction``).
      seq_len: bytes per window (default ``train_config.max_seq_len + 1``).
      num_windows: number of windows (fewer if the held-out text is short).

    Returns:
      [num_windows, seq_len] int32.
    """
    _, heldout = corpus_tokens(train_config)
    seq_len = train_config.max_seq_len + 1 if seq_len is None else seq_len
    if seq_len < 2 or num_windows < 1:
        raise ValueError(f"seq_len must be >= 2 and num_windows >= 1, got {seq_len}, "
                         f"{num_windows}")
    n = min(num_windows, heldout.size // seq_len)
    if n < 1:
        raise ValueError(f"held-out text ({heldout.size} bytes) is shorter than seq_len={seq_len}")
    starts = np.linspace(0, heldout.size - seq_len, n).astype(np.int64)
    return np.stack([heldout[s:s + seq_len] for s in starts]).astype(np.int32)


def heldout_bits_per_byte(params: dict, config: LMConfig, train_config: TrainConfig, *,
                          num_windows: int = 16, batch_size: int = 4) -> dict[str, float]:
    """Held-out bits/byte of the model and of the training set's unigram byte model.

    Returns:
      ``{"model": bpb, "unigram": bpb}`` on :func:`heldout_windows`' windows (all positions).
    """
    _check_pair(config, train_config)
    windows = heldout_windows(train_config, num_windows=num_windows)
    bits = [np.asarray(jax.device_get(
        _window_bits(params, jnp.asarray(windows[i:i + batch_size]), config)))
        for i in range(0, len(windows), batch_size)]
    train_tokens, _ = corpus_tokens(train_config)
    return {"model": float(np.concatenate(bits).mean()),
            "unigram": unigram_bits_per_byte(train_tokens, windows[:, 1:])}


@functools.partial(jax.jit, static_argnames=("config",))
def _window_bits(params, windows, config):
    return _bits(model._forward_impl(params, windows[:, :-1], config), windows[:, 1:])


# ----------------------------------------------------------------------------- checkpoint cache

def _fingerprint(config: LMConfig, train_config: TrainConfig, key: jax.Array) -> dict:
    """The settings a cached model was trained with, as they read back from JSON."""
    fp = {"format": _FORMAT, "config": dataclasses.asdict(config),
          "train_config": dataclasses.asdict(train_config),
          "key_data": np.asarray(jax.random.key_data(key)).tolist()}
    return json.loads(json.dumps(fp, sort_keys=True))


def checkpoint_dir(config: LMConfig, train_config: TrainConfig, *, key: jax.Array,
                   cache_dir: str | os.PathLike | None = None) -> pathlib.Path:
    """The folder :func:`load_or_train` uses: ``cache_dir / <hash of configs and key>``."""
    _check_pair(config, train_config)
    checks.check_key("key", key)
    return cache.entry_path(DEFAULT_CACHE_DIR if cache_dir is None else cache_dir,
                            _fingerprint(config, train_config, key))


def checkpoint_info(path: str | os.PathLike) -> dict:
    """The metadata stored with a cached model (configs, held-out bits/byte, training time)."""
    return cache.read_meta(path)


def load_or_train(config: LMConfig, train_config: TrainConfig, *,
                  cache_dir: str | os.PathLike | None = None, key: jax.Array,
                  progress: bool = True) -> dict:
    """Load the cached trained model, or train it and cache it (orbax) on first use.

    The folder is :func:`checkpoint_dir` (default root ``~/.cache/jaxpapers/lm``). A new cache is
    written to a temporary folder and renamed into place when complete. A cached folder whose
    stored settings or parameter shapes differ from the request raises ``ValueError``; one that
    cannot be read (e.g. a truncated write) is moved aside with a warning and retrained.

    Args:
      config: the model shape.
      train_config: the recipe.
      cache_dir: root folder of the cache (None: ``~/.cache/jaxpapers/lm``).
      key: a ``jax.random.key``; part of the cache's name (not consumed when loading).
      progress: show a progress bar when training.

    Returns:
      the trained parameter pytree.
    """
    checks.check_key("key", key)
    _check_pair(config, train_config)
    root = DEFAULT_CACHE_DIR if cache_dir is None else cache_dir

    def compute():
        start, cpu_start = time.perf_counter(), time.process_time()
        params, history = _train(config, train_config, key, progress=progress)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        scores = heldout_bits_per_byte(params, config, train_config)
        return params, {"train_seconds": seconds, "train_cpu_seconds": cpu_seconds,
                        "heldout_bpb": scores["model"], "unigram_bpb": scores["unigram"],
                        "final_train_bpb": float(np.mean(history["bpb"][-20:]))}

    params, _ = cache.load_or_compute(root, _fingerprint(config, train_config, key), compute,
                                      like=init_like(config))
    return params


# ------------------------------------------------------ command line (one or several processes)

@dataclasses.dataclass(frozen=True)
class _ShardedWindows:
    """:class:`_Windows` whose batch is split over the mesh's data axis (static, hashable).

    The windows come from ``fold_in(data_key, step)`` inside the compiled step, so the global
    batch is the same whatever the number of processes; the sharding constraint makes each
    device sample and process only its rows.
    """

    windows: _Windows
    mesh: Any
    axis: str

    def __call__(self, step, data):
        from jax.sharding import NamedSharding, PartitionSpec

        batch = self.windows(step, data)
        return jax.lax.with_sharding_constraint(
            batch, NamedSharding(self.mesh, PartitionSpec(self.axis)))


def main(argv: list[str] | None = None) -> int:
    """Train a preset from the command line, data-parallel over every process and device.

    ``python -m jaxpapers.lm --steps 200`` trains on one process;
    ``jaxpapers launch -n 2 -- python -m jaxpapers.lm --steps 200`` on two (on a
    cluster: one process per host started by the scheduler). Only the primary process prints.
    Prints the training bits/byte along the way, the held-out bits/byte and the wall time.
    """
    import argparse
    import sys

    p = argparse.ArgumentParser(
        prog="python -m jaxpapers.lm",
        description="Train the byte-level LM on the stdlib source (data-parallel over all "
                    "processes and devices; run it under 'jaxpapers launch -n N --' or one "
                    "process per host for several processes).")
    p.add_argument("--preset", choices=("tiny", "small"), default="tiny",
                   help="model shape and recipe (default: tiny)")
    p.add_argument("--steps", type=int, default=None,
                   help="optimisation steps (default: the preset's first stage)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="global batch (windows per step; default: the preset's); a multiple of "
                        "the number of devices")
    p.add_argument("--seed", type=int, default=0, help="integer seed (default: 0)")
    p.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                   help="orbax checkpoints (resumed from if present, by any process count)")
    p.add_argument("--checkpoint-every", type=int, default=100, metavar="K",
                   help="checkpoint period in steps (default: 100)")
    p.add_argument("--metrics-json", default=None, metavar="PATH",
                   help="write the loss history and held-out bits/byte here (primary only)")
    args = p.parse_args(argv)

    from jaxpapers.core import distributed

    info = distributed.initialize()  # before any computation
    from jaxpapers.core import sharding
    from jaxpapers.core import train as core_train

    config, tc = {"tiny": tiny, "small": small}[args.preset]()
    try:
        tc = dataclasses.replace(tc, extra_stages=(),
                                 num_steps=tc.num_steps if args.steps is None else args.steps,
                                 batch_size=args.batch_size or tc.batch_size)
    except (TypeError, ValueError) as e:
        p.error(str(e))
    mesh = sharding.data_parallel_mesh()
    if tc.batch_size % mesh.size:
        p.error(f"--batch-size {tc.batch_size} is not a multiple of the {mesh.size} devices")
    primary = distributed.is_primary()
    start = time.perf_counter()
    train_tokens, _ = corpus_tokens(tc)
    init_key, data_key, run_key = jax.random.split(jax.random.key(args.seed), 3)
    optimizer, step_fn = _optimizer_and_step(config, tc)
    state = sharding.replicate(
        core_train.init_train_state(model.init(config, init_key), optimizer, run_key), mesh)
    data = sharding.replicate((data_key, jnp.asarray(train_tokens)), mesh)
    batch_fn = _ShardedWindows(_Windows(tc.batch_size, tc.seq_len), mesh, mesh.axis_names[0])
    state, history = core_train.fit(
        step_fn, state, batch_fn, num_steps=tc.num_steps, chunk_size=tc.chunk_size,
        checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every,
        desc=f"lm x{info.num_processes}", data=data)
    seconds = time.perf_counter() - start
    scores = heldout_bits_per_byte(state.params, config, tc)  # every process computes
    bpb = np.asarray(history["bpb"])
    if primary:
        every = max(1, tc.num_steps // 5)
        for s in range(every, tc.num_steps + 1, every):
            print(f"step {s:>5}: train bits/byte {bpb[max(0, s - every):s].mean():.3f}")
        print(f"{info.num_processes} process(es), {mesh.size} device(s), global batch "
              f"{tc.batch_size} x {tc.seq_len} bytes: {tc.num_steps} steps in {seconds:.1f} s; "
              f"held-out bits/byte {scores['model']:.3f} (unigram {scores['unigram']:.3f})")
        if args.metrics_json:
            pathlib.Path(args.metrics_json).write_text(json.dumps(
                {"loss": np.asarray(history["loss"]).tolist(), "heldout_bpb": scores["model"],
                 "num_processes": info.num_processes, "devices": mesh.size,
                 "train_seconds": seconds}))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    import sys

    # run the copy imported as jaxpapers.lm.training (``python -m`` executes a second one as
    # __main__; the static batch functions and caches must be the package's)
    from jaxpapers.lm import training as _training

    sys.exit(_training.main())
