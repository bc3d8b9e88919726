import jax
import numpy as np
import pytest

from jaxpapers.core import data


@pytest.mark.parametrize("name", data.SKLEARN_DATASETS)
def test_sklearn_split_is_seeded_and_standardized(name):
    a = data.load_sklearn(name, seed=1)
    b = data.load_sklearn(name, seed=1)
    c = data.load_sklearn(name, seed=2)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert not np.array_equal(a.y_test, c.y_test) or not np.array_equal(a.x_test, c.x_test)
    n = len(a.x_train) + len(a.x_test)
    assert abs(len(a.x_test) - 0.25 * n) <= 1
    np.testing.assert_allclose(a.x_train.mean(0), 0.0, atol=1e-5)
    if name != "diabetes":
        assert a.num_classes == len(np.unique(np.concatenate([a.y_train, a.y_test])))


def test_sklearn_bad_input():
    with pytest.raises(ValueError, match="name"):
        data.load_sklearn("mnist")
    with pytest.raises(ValueError, match="test_fraction"):
        data.load_sklearn("iris", test_fraction=1.0)


def test_stdlib_corpus_is_deterministic_and_split_is_stable():
    small = data.stdlib_corpus(max_files=60, heldout_fraction=0.2)
    again = data.stdlib_corpus(max_files=60, heldout_fraction=0.2)
    assert small == again
    assert small.train_files and small.heldout_files
    assert not set(small.train_files) & set(small.heldout_files)
    assert list(small.train_files) == sorted(small.train_files)
    # adding files (a larger cap) never moves a file to the other side of the split
    bigger = data.stdlib_corpus(max_files=120, heldout_fraction=0.2)
    assert set(small.heldout_files) <= set(bigger.heldout_files)
    assert set(small.train_files) <= set(bigger.train_files)
    assert "def " in small.train_text and "# <file: " in small.heldout_text
    assert not any("site-packages" in f or "/test/" in f for f in bigger.train_files)


def test_byte_codec_and_windows(key):
    text = "def f(x):\n    return x + 1  # é\n" * 4
    toks = data.encode_bytes(text)
    assert data.decode_bytes(toks) == text
    inp, tgt = jax.jit(lambda k: data.sample_windows(k, toks, batch_size=3, seq_len=8))(key)
    assert inp.shape == tgt.shape == (3, 8)
    np.testing.assert_array_equal(np.asarray(inp)[:, 1:], np.asarray(tgt)[:, :-1])
    with pytest.raises(ValueError, match="seq_len"):
        data.sample_windows(key, toks[:5], batch_size=1, seq_len=8)


def test_tfds_adapter_with_mock_data():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=10, policy=tfds.testing.MockPolicy.USE_CODE):
        batches = list(data.tfds_batches("mnist", split="train", batch_size=4, keys=["image",
                                                                                      "label"]))
    assert len(batches) == 2  # 10 rows, remainder dropped
    assert batches[0]["image"].shape == (4, 28, 28, 1)
    assert batches[0]["label"].shape == (4,)
