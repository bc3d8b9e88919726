"""vt-digits, VT-Bench's table preprocessing, the folder loader and the tfds adapter.

Statistical margins: a vt-digits test split holds 449 images x 3 rows = 1347 samples; the shift,
flag and noise of every row are independent draws, so the margins below are binomial standard
deviations of those draws (worked out next to each assertion), never tuned on a run.
"""

import csv
import math

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression

from jaxpapers.benchmarks.vtbench import data as vt

NUMERIC = ("flag", "u", "n0", "n1", "n2", "n3")
ARRAY_FIELDS = ("image_train", "table_train", "y_train", "image_test", "table_test", "y_test",
                "digit_train", "digit_test", "image_id_train", "image_id_test")


def _majority_accuracy(key_train, y_train, key_test, y_test):
    """Accuracy on test of the majority training label of each key value (a lookup table)."""
    table = {k: np.bincount(y_train[key_train == k]).argmax() for k in np.unique(key_train)}
    pred = np.array([table.get(k, -1) for k in key_test])
    return float(np.mean(pred == y_test))


def _col(d, name):
    return d.feature_names.index(name)


# ----------------------------------------------------------------------------- vt-digits


def test_vt_digits_is_deterministic_in_the_seed():
    a, b, c = vt.vt_digits("mod", seed=3), vt.vt_digits("mod", seed=3), vt.vt_digits("mod", seed=4)
    for f in ARRAY_FIELDS:
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    for col in a.raw_train:
        np.testing.assert_array_equal(a.raw_train[col], b.raw_train[col])
    assert a.feature_names == b.feature_names
    assert not np.array_equal(a.image_id_test, c.image_id_test)
    assert not np.array_equal(a.table_train, c.table_train)
    # the task does not change the draws: same split and same numeric table in every task
    p = vt.vt_digits("pair", seed=3)
    np.testing.assert_array_equal(a.image_id_test, p.image_id_test)
    np.testing.assert_array_equal(a.raw_test["u"], p.raw_test["u"])


@pytest.mark.parametrize("task,rows,width", [("mod", 3, 20), ("pair", 1, 20), ("tabdom", 2, 21),
                                             ("regression", 3, 20)])
def test_vt_digits_shapes_dtypes_and_image_disjoint_split(task, rows, width):
    d = vt.vt_digits(task, seed=0, rows_per_image=rows)
    digits = load_digits()
    n_test_images = round(0.25 * 1797)
    n_tr, n_te = rows * (1797 - n_test_images), rows * n_test_images
    assert d.image_train.shape == (n_tr, 8, 8, 1) and d.image_test.shape == (n_te, 8, 8, 1)
    assert d.table_train.shape == (n_tr, width) and d.table_test.shape == (n_te, width)
    assert len(d.feature_names) == width and d.task == task
    for arr, dtype in ((d.image_train, np.float32), (d.table_train, np.float32),
                       (d.digit_test, np.int32), (d.image_id_train, np.int32),
                       (d.y_train, np.float32 if task == "regression" else np.int32)):
        assert arr.dtype == dtype
    assert d.num_classes == {"mod": 10, "pair": 20, "tabdom": 10, "regression": 0}[task]
    # image-disjoint, every image used, rows_per_image rows per image
    ids_tr, ids_te = set(d.image_id_train.tolist()), set(d.image_id_test.tolist())
    assert not ids_tr & ids_te and len(ids_tr | ids_te) == 1797 and len(ids_te) == n_test_images
    for ids in (d.image_id_train, d.image_id_test):
        assert set(np.bincount(ids, minlength=1797)[list(set(ids.tolist()))].tolist()) == {rows}
    # images are the digits' pixels / 16 and digit is the true digit of that image
    np.testing.assert_array_equal(d.image_test[..., 0],
                                  (digits.images[d.image_id_test] / 16).astype(np.float32))
    np.testing.assert_array_equal(d.digit_train, digits.target[d.image_id_train])
    assert d.image_train.min() == 0.0 and d.image_train.max() == 1.0


@pytest.mark.parametrize("task", vt.VT_DIGITS_TASKS)
def test_vt_digits_labels_follow_the_task_formula(task):
    d = vt.vt_digits(task, seed=1)
    for digit, raw, y in ((d.digit_train, d.raw_train, d.y_train),
                          (d.digit_test, d.raw_test, d.y_test)):
        shift, flag, u = raw["shift"], raw["flag"], raw["u"]
        assert set(np.unique(flag).tolist()) == {0, 1} and 0 <= u.min() and u.max() < 1
        assert set(np.unique(raw["colour_noise"]).tolist()) == {0, 1, 2, 3}
        if task == "mod":
            np.testing.assert_array_equal(y, (digit + shift) % 10)
        elif task == "pair":
            np.testing.assert_array_equal(y, digit + 10 * flag)
        elif task == "tabdom":
            np.testing.assert_array_equal(y, np.where(shift < 0, digit, shift))
        else:
            np.testing.assert_array_equal(y, (digit + 2.0 * u).astype(np.float32))
        if task != "tabdom":
            assert shift.min() == 0 and shift.max() == 9  # shift is only missing in tabdom


def test_mod_needs_both_modalities():
    d = vt.vt_digits("mod", seed=0)
    # digit alone: a test row is right iff its own shift (independent of everything learned on
    # train) hits one value, p = 0.1 exactly; SD = sqrt(0.09 / 1347) = 0.008, so 0.2 is 12 SD.
    acc_digit = _majority_accuracy(d.digit_train, d.y_train, d.digit_test, d.y_test)
    # table alone: right iff the digit (independent of the table) hits one value, p <= the top
    # digit frequency 0.102; 3 rows share an image, SD <= sqrt(3 * 0.09 / 1347) = 0.014: 7 SD.
    acc_shift = _majority_accuracy(d.raw_train["shift"], d.y_train, d.raw_test["shift"],
                                   d.y_test)
    clf = LogisticRegression(max_iter=300).fit(d.table_train, d.y_train)
    acc_table = float(np.mean(clf.predict(d.table_test) == d.y_test))
    assert max(acc_digit, acc_shift, acc_table) <= 0.2, (acc_digit, acc_shift, acc_table)
    # both together determine y: the (digit, shift) lookup table is exact
    key_tr, key_te = 10 * d.digit_train + d.raw_train["shift"], 10 * d.digit_test + d.raw_test[
        "shift"]
    assert _majority_accuracy(key_tr, d.y_train, key_te, d.y_test) == 1.0


def test_pair_digit_alone_gets_about_half():
    d = vt.vt_digits("pair", seed=0)
    # right iff the row's own flag equals the chosen one: p = 0.5, SD = sqrt(0.25 / 1347) =
    # 0.0136; 5 SD = 0.068
    acc = _majority_accuracy(d.digit_train, d.y_train, d.digit_test, d.y_test)
    assert abs(acc - 0.5) < 5 * math.sqrt(0.25 / len(d.y_test)), acc


def test_vt_digits_table_uses_training_statistics_only():
    d = vt.vt_digits("mod", seed=2, missing_rate=0.2)
    for name in NUMERIC:
        j = _col(d, name)
        col = d.table_train[:, j].astype(np.float64)
        assert abs(col.mean()) < 1e-5 and abs(col.std() - 1.0) < 1e-5, name
        # test column = (test value imputed with the training mean - train mu) / train sd
        raw_tr, raw_te = d.raw_train[name].astype(np.float64), d.raw_test[name].astype(np.float64)
        fill = np.nanmean(raw_tr)
        imp_tr = np.where(np.isnan(raw_tr), fill, raw_tr)
        imp_te = np.where(np.isnan(raw_te), fill, raw_te)
        np.testing.assert_allclose(d.table_test[:, j], (imp_te - imp_tr.mean()) / imp_tr.std(),
                                   rtol=1e-5, atol=1e-5)
        assert np.all(d.table_test[np.isnan(raw_te), j] == 0.0)  # mean-imputed -> exactly 0
    # one-hot blocks: exactly one level per row, at the raw value
    for prefix, raw in (("shift=", "shift"), ("colour_noise=", "colour_noise")):
        cols = [j for j, n in enumerate(d.feature_names) if n.startswith(prefix)]
        block = d.table_test[:, cols]
        np.testing.assert_array_equal(block.sum(1), 1.0)
        np.testing.assert_array_equal(block.argmax(1), d.raw_test[raw])
    # noise missingness: 4 * 5391 Bernoulli(0.2) draws, SD = sqrt(0.16 / 21564) = 0.0027
    noise = np.concatenate([np.concatenate([d.raw_train[c], d.raw_test[c]])
                            for c in ("n0", "n1", "n2", "n3")])
    assert abs(np.isnan(noise).mean() - 0.2) < 5 * math.sqrt(0.16 / noise.size)


def test_tabdom_missing_shift_falls_back_to_the_digit():
    rate = 0.1
    d = vt.vt_digits("tabdom", seed=5, missing_rate=rate)
    shift = np.concatenate([d.raw_train["shift"], d.raw_test["shift"]])
    # 5391 Bernoulli(0.1) draws: SD = sqrt(0.09 / 5391) = 0.0041, margin 5 SD
    assert abs(np.mean(shift < 0) - rate) < 5 * math.sqrt(rate * (1 - rate) / shift.size)
    for digit, raw, y, table in ((d.digit_train, d.raw_train, d.y_train, d.table_train),
                                 (d.digit_test, d.raw_test, d.y_test, d.table_test)):
        miss = raw["shift"] < 0
        np.testing.assert_array_equal(y[miss], digit[miss])
        np.testing.assert_array_equal(y[~miss], raw["shift"][~miss])
        np.testing.assert_array_equal(table[:, _col(d, "shift=MISSING")], miss.astype(np.float32))


@pytest.mark.parametrize("kwargs,arg", [
    (dict(task="xor"), "task"), (dict(test_fraction=0.0), "test_fraction"),
    (dict(test_fraction=1.0), "test_fraction"), (dict(rows_per_image=0), "rows_per_image"),
    (dict(rows_per_image=1.5), "rows_per_image"), (dict(missing_rate=1.0), "missing_rate"),
    (dict(missing_rate=-0.1), "missing_rate"), (dict(seed=1.5), "seed"), (dict(seed="0"), "seed"),
])
def test_vt_digits_bad_input(kwargs, arg):
    with pytest.raises(ValueError, match=arg) as err:
        vt.vt_digits(**kwargs)
    if arg == "task":
        assert all(t in str(err.value) for t in vt.VT_DIGITS_TASKS)


# ----------------------------------------------------------------------------- preprocess_table


def test_preprocess_table_hand_computed_example():
    train = {"a": [1.0, None, 3.0], "skip": [0, 0, 0], "c": ["x", "y", None]}
    test = {"a": [float("nan"), 5.0], "c": ["z", "x"]}
    xtr, xte, names = vt.preprocess_table(train, test, numeric=["a"], categorical=["c"])
    assert names == ("a", "c=x", "c=y", "c=MISSING")
    # a: training mean 2 imputes the gap -> [1, 2, 3]: mean 2, sd sqrt(2/3)
    sd = math.sqrt(2 / 3)
    expected_tr = [[-1 / sd, 1, 0, 0], [0, 0, 1, 0], [1 / sd, 0, 0, 1]]
    # test: NaN -> 2 -> 0; 5 -> 3 / sd; unseen "z" -> all-zero one-hot
    expected_te = [[0, 0, 0, 0], [3 / sd, 1, 0, 0]]
    np.testing.assert_allclose(xtr, expected_tr, rtol=1e-6)
    np.testing.assert_allclose(xte, expected_te, rtol=1e-6)
    assert xtr.dtype == xte.dtype == np.float32


def test_preprocess_table_fixed_categories_and_errors():
    xtr, xte, names = vt.preprocess_table({"k": [2, 0]}, {"k": [None, 1]}, categorical=["k"],
                                          categories={"k": [0, 1, 2]})
    assert names == ("k=0", "k=1", "k=2")  # given order, MISSING not a level
    np.testing.assert_array_equal(xtr, [[0, 0, 1], [1, 0, 0]])
    np.testing.assert_array_equal(xte, [[0, 0, 0], [0, 1, 0]])  # missing, not a level -> zeros
    # a constant column keeps sd 1 instead of dividing by 0
    xtr, _, _ = vt.preprocess_table({"c": [4.0, 4.0]}, {"c": [5.0]}, numeric=["c"])
    np.testing.assert_array_equal(xtr, [[0.0], [0.0]])
    with pytest.raises(ValueError, match="'k'"):
        vt.preprocess_table({"k": [3]}, {"k": [1]}, categorical=["k"], categories={"k": [0, 1]})
    with pytest.raises(ValueError, match="'b'"):
        vt.preprocess_table({"a": [1.0]}, {"a": [1.0]}, numeric=["a", "b"])
    with pytest.raises(ValueError, match="'a'"):
        vt.preprocess_table({"a": ["x"]}, {"a": ["y"]}, numeric=["a"])
    with pytest.raises(ValueError, match="lengths"):
        vt.preprocess_table({"a": [1.0], "b": [1, 2]}, {"a": [1.0], "b": [1]}, numeric=["a", "b"])


# ----------------------------------------------------------------------------- folder loader

COLOURS = {"img0.png": (255, 0, 0), "img1.png": (0, 255, 0), "img2.png": (128, 128, 128),
           "img3.png": (9, 9, 9), "img4.png": (0, 0, 255), "img5.png": (10, 20, 30),
           "img6.png": (200, 100, 50)}
ROWS = [  # image, label, age, colour, code
    ("img0.png", "cat", "3.5", "red", "1"),
    ("img1.png", "dog", "", "blue", "2"),
    ("img2.png", "bird", "7", "red", "x"),
    ("img3.png", "", "4", "blue", "3"),  # no label: dropped
    ("absent.png", "cat", "5", "green", "4"),  # image missing: dropped
    ("img4.png", "dog", "1", "green", "5"),
    ("img5.png", "cat", "2", "red", "6"),
    ("img6.png", "bird", "8", "blue", "7"),
]


@pytest.fixture
def folder(tmp_path):
    from PIL import Image

    for name, rgb in COLOURS.items():
        if name == "img2.png":  # a grey-level image: converted to RGB
            Image.new("L", (10, 6), rgb[0]).save(tmp_path / name)
        else:
            Image.new("RGB", (10, 6), rgb).save(tmp_path / name)
    with open(tmp_path / "table.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["image", "label", "age", "colour", "code"])
        w.writerows(ROWS)
    return tmp_path


def test_folder_loader_drops_maps_classes_and_resizes(folder):
    d = vt.load_image_table_folder(folder, csv="table.csv", image_col="image",
                                   target_col="label", size=(4, 5), test_fraction=0.34, seed=0)
    assert d.num_dropped == 2
    assert d.class_names == ("bird", "cat", "dog") and d.num_classes == 3
    assert len(d.y_test) == 2 and len(d.y_train) == 4  # round(0.34 * 6) = 2
    assert sorted(d.image_id_train.tolist() + d.image_id_test.tolist()) == [0, 1, 2, 5, 6, 7]
    assert d.image_train.shape == (4, 4, 5, 3) and d.image_train.dtype == np.float32
    for ids, y, img in ((d.image_id_train, d.y_train, d.image_train),
                        (d.image_id_test, d.y_test, d.image_test)):
        for i, label, im in zip(ids, y, img):
            name, target = ROWS[i][0], ROWS[i][1]
            assert d.class_names[label] == target
            np.testing.assert_allclose(im, np.broadcast_to(np.array(COLOURS[name]) / 255,
                                                           im.shape), atol=1e-6)
    # age is numeric (one missing cell), colour and code ("x" is not a number) categorical
    assert "age" in d.feature_names
    assert any(n.startswith("colour=") for n in d.feature_names)
    assert any(n.startswith("code=") for n in d.feature_names)
    age = d.table_train[:, d.feature_names.index("age")].astype(np.float64)
    assert abs(age.mean()) < 1e-6 and abs(age.std() - 1) < 1e-5
    assert d.digit_train.tolist() == [-1] * 4
    again = vt.load_image_table_folder(folder, csv="table.csv", image_col="image",
                                       target_col="label", size=(4, 5), test_fraction=0.34)
    for f in ARRAY_FIELDS:
        np.testing.assert_array_equal(getattr(d, f), getattr(again, f))


def test_folder_loader_regression_and_errors(folder):
    d = vt.load_image_table_folder(folder, csv="table.csv", image_col="image", target_col="age",
                                   size=3, task="regression")
    assert d.task == "regression" and d.num_classes == 0 and d.y_train.dtype == np.float32
    assert d.num_dropped == 2  # the empty age (img1) and absent.png; img3 (no label) is kept
    assert d.image_test.shape[1:] == (3, 3, 3)
    for ids, y in ((d.image_id_train, d.y_train), (d.image_id_test, d.y_test)):
        np.testing.assert_array_equal(y, [float(ROWS[i][2]) for i in ids])
    # label strings are now a categorical feature
    assert "label=cat" in d.feature_names
    kw = dict(csv="table.csv", image_col="image", target_col="label", size=4)
    with pytest.raises(ValueError, match="'photo'"):
        vt.load_image_table_folder(folder, **{**kw, "image_col": "photo"})
    with pytest.raises(ValueError, match="'y'"):
        vt.load_image_table_folder(folder, **{**kw, "target_col": "y"})
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        vt.load_image_table_folder(folder, **{**kw, "csv": "nope.csv"})
    for size in (0, (4,), "4", (4, 0)):
        with pytest.raises(ValueError, match="size"):
            vt.load_image_table_folder(folder, **{**kw, "size": size})
    with pytest.raises(ValueError, match="task"):
        vt.load_image_table_folder(folder, **{**kw, "task": "ranking"})


# ----------------------------------------------------------------------------- tfds


def test_from_tfds_with_mock_data():
    tfds = pytest.importorskip("tensorflow_datasets")
    from jaxpapers.core import data as core_data

    with tfds.testing.mock_data(num_examples=12, policy=tfds.testing.MockPolicy.USE_CODE):
        d = vt.from_tfds("mnist", split="train", seed=1)
        again = vt.from_tfds("mnist", split="train", seed=1)
        (raw,) = list(core_data.tfds_batches("mnist", split="train", batch_size=12,
                                             shuffle_seed=None))
        t = vt.from_tfds("mnist", split="train", table_keys=("label",), max_examples=8)
        with pytest.raises(ValueError, match="'nope'"):
            vt.from_tfds("mnist", split="train", table_keys=("nope",))
    assert d.image_train.shape == (9, 28, 28, 1) and d.image_test.shape == (3, 28, 28, 1)
    assert d.image_train.dtype == np.float32 and d.table_train.shape == (9, 0)
    assert d.task == "classification" and d.y_train.dtype == np.int32
    np.testing.assert_array_equal(d.image_test, raw["image"][d.image_id_test] / np.float32(255))
    np.testing.assert_array_equal(d.y_train, raw["label"][d.image_id_train])
    assert d.num_classes == int(raw["label"].max()) + 1
    for f in ARRAY_FIELDS:
        np.testing.assert_array_equal(getattr(d, f), getattr(again, f))
    assert len(t.y_train) + len(t.y_test) == 8 and t.feature_names == ("label",)
    col = t.raw_train["label"]
    np.testing.assert_allclose(t.table_train[:, 0], (col - col.mean()) / (col.std() or 1.0),
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="test_fraction"):
        vt.from_tfds("mnist", split="train", test_fraction=1.5)

