"""jaxpapers.core.cache: content-addressed orbax entries that survive crashes and races."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.core import cache


def _tree(v=1.0):
    return {"w": jnp.full((2, 3), v, jnp.float32), "b": jnp.arange(4, dtype=jnp.int32)}


def test_compute_once_then_load_identical(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return _tree(0.25), {"seconds": 1.5}

    fp = {"lr": 0.1, "key": jax.random.key(3), "data": cache.array_digest(np.ones(3))}
    a, meta_a = cache.load_or_compute(tmp_path, fp, compute, like=_tree())
    b, meta_b = cache.load_or_compute(tmp_path, fp, compute, like=_tree())
    assert len(calls) == 1 and not meta_a["cached"] and meta_b["cached"]
    assert meta_b["seconds"] == 1.5
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(b["w"], np.full((2, 3), 0.25, np.float32))
    # another key, another setting or other data: another entry
    for other in ({**fp, "key": jax.random.key(4)}, {**fp, "lr": 0.2},
                  {**fp, "data": cache.array_digest(np.zeros(3))}):
        assert cache.entry_path(tmp_path, other) != cache.entry_path(tmp_path, fp)


def test_corrupt_entry_is_recomputed_and_kept_aside(tmp_path):
    fp = {"n": 1}
    cache.load_or_compute(tmp_path, fp, lambda: (_tree(2.0), {}), like=_tree())
    path = cache.entry_path(tmp_path, fp)
    (path / "meta.json").write_text("{not json")
    with pytest.warns(UserWarning, match="unreadable"):
        out, meta = cache.load_or_compute(tmp_path, fp, lambda: (_tree(3.0), {}), like=_tree())
    assert not meta["cached"] and float(out["w"][0, 0]) == 3.0
    assert any(p.name.startswith(path.name + ".corrupt-") for p in tmp_path.iterdir())


def test_mismatches_raise(tmp_path):
    fp = {"n": 2}
    cache.load_or_compute(tmp_path, fp, lambda: (_tree(), {}), like=_tree())
    wrong = {"w": jnp.zeros((3, 3), jnp.float32), "b": jnp.arange(4, dtype=jnp.int32)}
    with pytest.raises(ValueError, match="shapes"):
        cache.load_or_compute(tmp_path, fp, lambda: (wrong, {}), like=wrong)
    # an entry whose stored fingerprint differs from its name's (e.g. edited by hand)
    path = cache.entry_path(tmp_path, fp)
    meta = json.loads((path / "meta.json").read_text())
    meta["fingerprint"] = {"n": 99}
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="other settings"):
        cache.load_or_compute(tmp_path, fp, lambda: (_tree(), {}), like=_tree())
    with pytest.raises(ValueError, match="expected"):  # compute() disagrees with like
        cache.load_or_compute(tmp_path, {"n": 3}, lambda: (wrong, {}), like=_tree())
    with pytest.raises(TypeError, match="array_digest"):
        cache.fingerprint_of({"x": np.ones(3)})
    with pytest.raises(ValueError, match="namespace"):
        cache.cache_root("../etc")


def test_cache_root_reads_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("JAXPAPERS_CACHE", str(tmp_path))
    assert cache.cache_root("digits") == tmp_path / "digits"
