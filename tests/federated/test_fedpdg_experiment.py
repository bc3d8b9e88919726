"""Pieces of experiments/fedpdg the report rests on: the data split, shifts, selection, TV."""

import jax
import numpy as np
import pytest

from experiments.fedpdg import config as pc
from experiments.fedpdg import run as pr


def test_split_is_long_tailed_disjoint_and_public_is_balanced_and_shifted():
    cfg = pc.small()
    d = pr.split_data(cfg, jax.random.key(0))
    counts = np.bincount(d["y_train"], minlength=10) + np.bincount(d["y_test"], minlength=10)
    ranked = counts[d["class_order"]]
    assert np.all(np.diff(ranked) <= 0)  # most frequent first
    assert ranked[0] / ranked[-1] == pytest.approx(cfg.tail_ratio, rel=0.15)
    pub = np.bincount(d["y_pub"], minlength=10)
    assert pub.min() == pub.max()  # class-balanced
    # test rows follow the same distribution as the training rows (within rounding)
    tr = np.bincount(d["y_train"], minlength=10) / len(d["y_train"])
    te = np.bincount(d["y_test"], minlength=10) / len(d["y_test"])
    assert 0.5 * np.abs(tr - te).sum() < 0.05
    # no training or test image is a public image
    pub_set = {row.tobytes() for row in d["x_pub"]}
    assert not any(row.tobytes() in pub_set for row in d["x_train"][:50])


def test_shift_one_pixel_moves_each_image_by_one_pixel():
    r = np.random.default_rng(0)
    img = np.zeros((1, 8, 8), np.float32)
    img[0, 3, 4] = 1.0
    out = pr.shift_one_pixel(np.repeat(img.reshape(1, 64), 40, 0), r).reshape(-1, 8, 8)
    pos = {tuple(np.argwhere(o == 1.0)[0]) for o in out}
    assert pos == {(2, 4), (4, 4), (3, 3), (3, 5)}


def test_tv_to_global_and_selection_budgets():
    y = np.array([[0, 0, 1, 0], [2, 2, 2, 2]])
    w = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], float)
    glob = np.zeros(10)
    glob[:3] = [0.5, 0.25, 0.25]
    # client 0: (2/3, 1/3, 0) -> TV 0.25; client 1: (0, 0, 1) -> TV 0.75
    assert pr.tv_to_global(y, w, None, None, glob) == pytest.approx(0.5)
    pool_y = np.repeat(np.arange(10), 5)
    r = np.random.default_rng(0)
    budgets = np.array([3, 0, 7])
    idx, mask = pr.select("unguided", None, pool_y, budgets, None, None, None, r)
    assert mask.sum(1).tolist() == [3, 0, 7]
    counts = np.zeros((3, 10), int)
    counts[:, 0] = 10
    idx, mask = pr.select("balanced", None, pool_y, budgets, counts, None, None, r)
    assert mask.sum(1).tolist() == [3, 0, 7]
    assert 0 not in set(pool_y[idx[2][mask[2]]].tolist())  # the full class gets nothing
