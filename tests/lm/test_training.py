"""Training on the stdlib source beats the unigram baseline; the checkpoint cache round-trips."""

from __future__ import annotations

import shutil

import chex
import jax
import numpy as np
import pytest

from jaxpapers import lm
from jaxpapers.lm import training


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm-cache")
    cfg, tcfg = lm.tiny()
    params = lm.load_or_train(cfg, tcfg, cache_dir=root, key=jax.random.key(0), progress=False)
    return root, params


def test_tiny_training_beats_unigram(trained):
    root, params = trained
    cfg, tcfg = lm.tiny()
    scores = lm.heldout_bits_per_byte(params, cfg, tcfg)
    untrained = lm.heldout_bits_per_byte(lm.init(cfg, jax.random.key(1)), cfg, tcfg)
    # the unigram model of code costs ~4.4 bits/byte; a random network ~8 (uniform) or more.
    # 120 steps learn at least bigram statistics (~3.5 bits/byte): demand a 0.5-bit margin.
    assert untrained["model"] > untrained["unigram"] + 1.0
    assert scores["model"] < scores["unigram"] - 0.5, scores
    info = lm.checkpoint_info(lm.checkpoint_dir(cfg, tcfg, key=jax.random.key(0), cache_dir=root))
    np.testing.assert_allclose(info["heldout_bpb"], scores["model"], rtol=1e-5)
    assert info["final_train_bpb"] < info["unigram_bpb"]


def test_load_or_train_round_trip(trained, monkeypatch):
    root, params = trained
    cfg, tcfg = lm.tiny()

    def fail(*args, **kwargs):
        raise AssertionError("load_or_train retrained a cached model")

    monkeypatch.setattr(training, "_train", fail)
    again = lm.load_or_train(cfg, tcfg, cache_dir=root, key=jax.random.key(0))
    chex.assert_trees_all_equal(again, params)
    assert jax.tree.structure(again) == jax.tree.structure(lm.init(cfg, jax.random.key(0)))
    assert not list(root.glob(".*tmp-*"))  # the temporary folder was renamed away


def test_mismatched_cache_raises(trained):
    root, _ = trained
    cfg, tcfg = lm.tiny()
    src = lm.checkpoint_dir(cfg, tcfg, key=jax.random.key(0), cache_dir=root)
    other = lm.LMConfig(**{**cfg.__dict__, "d_model": 48})
    dst = lm.checkpoint_dir(other, tcfg, key=jax.random.key(0), cache_dir=root)
    assert dst != src
    shutil.copytree(src, dst)  # another model's checkpoint under this model's name
    with pytest.raises(ValueError, match="other settings"):
        lm.load_or_train(other, tcfg, cache_dir=root, key=jax.random.key(0))


def test_corrupt_cache_is_retrained(tmp_path, monkeypatch):
    cfg, tcfg = lm.tiny()
    calls = []

    def fake_train(config, train_config, key, *, progress):  # skip the cost of training
        calls.append(1)
        return lm.init(config, key), {"bpb": np.full(3, 5.0)}

    monkeypatch.setattr(training, "_train", fake_train)
    first = lm.load_or_train(cfg, tcfg, cache_dir=tmp_path, key=jax.random.key(3))
    path = lm.checkpoint_dir(cfg, tcfg, key=jax.random.key(3), cache_dir=tmp_path)
    shutil.rmtree(path / "params")
    with pytest.warns(UserWarning, match="unreadable"):
        second = lm.load_or_train(cfg, tcfg, cache_dir=tmp_path, key=jax.random.key(3))
    assert len(calls) == 2 and list(tmp_path.glob("*.corrupt-*"))
    chex.assert_trees_all_equal(first, second)


def test_second_train_call_reuses_the_compilation(monkeypatch):
    """Same settings: the same static step and batch functions, the corpus and key traced; so a
    second call (or another key) does not retrace the core loop, and the result is identical."""
    from jaxpapers.core import train as core_train

    cfg = lm.LMConfig(d_model=16, n_layers=1, n_q_heads=2, n_kv_heads=1, head_dim=8, d_ff=32,
                      max_len=32)
    tc = lm.TrainConfig(seq_len=16, batch_size=2, num_steps=4, warmup_steps=1, max_files=5,
                        chunk_size=4)
    chex.clear_trace_counter()
    monkeypatch.setattr(core_train, "run_chunk", jax.jit(
        chex.assert_max_traces(core_train._chunk, n=1), static_argnums=(0, 1, 3)))
    first = lm.train(cfg, tc, jax.random.key(0), progress=False)
    chex.assert_trees_all_equal(first, lm.train(cfg, tc, jax.random.key(0), progress=False))
    other = lm.train(cfg, tc, jax.random.key(1), progress=False)
    assert not np.array_equal(np.asarray(other["embed"]), np.asarray(first["embed"]))


def test_bad_configs():
    cfg, tcfg = lm.tiny()
    with pytest.raises(ValueError, match="seq_len"):
        lm.train(cfg, lm.TrainConfig(seq_len=cfg.max_len + 1), jax.random.key(0))
    with pytest.raises(ValueError, match="extra_stages"):
        lm.TrainConfig(extra_stages=((64, 2),))
    with pytest.raises(ValueError, match="heldout_fraction"):
        lm.TrainConfig(heldout_fraction=0.0)
    with pytest.raises(TypeError, match="train_config"):
        lm.load_or_train(cfg, None, key=jax.random.key(0))
    with pytest.raises(TypeError, match="key"):
        lm.load_or_train(cfg, tcfg, key=0)
    small_cfg, small_tcfg = lm.small()
    assert small_tcfg.max_seq_len >= 1024 and small_cfg.n_q_heads > small_cfg.n_kv_heads
