"""VT-Bench data offline: vt-digits, VT-Bench's table preprocessing, and two loaders.

VT-Bench (LAMDA-NeSy/VT-Bench) pairs each image with a table row and prepares the table the same
way for every dataset: drop rows without a label or an image; split; impute numeric columns with
the training mean and categorical ones with the category ``"MISSING"``; one-hot encode the
categoricals; standardise the numerics with the training mean and standard deviation.
:func:`preprocess_table` is that recipe, fitted on the training split only.

* :func:`vt_digits`: the offline twin of the benchmark. scikit-learn's bundled 8 x 8 digits (no
  download), each image joined with several generated table rows, with tasks that need the image,
  the table, or both (``"mod"``: y = (digit + shift) mod 10 is an interaction no additive
  image-term + table-term head can fit).
* :func:`load_image_table_folder`: a folder of images and a CSV, VT-Bench's own layout.
* :func:`from_tfds`: a tensorflow-datasets set already prepared on disk (optional extra).

Everything returns a :class:`VTData` of numpy arrays. Nothing here downloads anything.
"""

from __future__ import annotations

import csv as _csv
import dataclasses
import functools
import math
import numbers
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["VTData", "MISSING", "VT_DIGITS_TASKS", "vt_digits", "preprocess_table",
           "load_image_table_folder", "from_tfds"]

MISSING = "MISSING"  # the category that imputes a missing categorical value (as in VT-Bench)
VT_DIGITS_TASKS = ("mod", "pair", "tabdom", "regression")
_NUM_CLASSES = {"mod": 10, "pair": 20, "tabdom": 10, "regression": 0}
_NOISE = ("n0", "n1", "n2", "n3")


@dataclasses.dataclass(frozen=True, eq=False)
class VTData:
    """An image-disjoint (vt-digits) or row-wise (loaders) train/test split of image + table data.

    Letters: N_train, N_test samples; H, W, C image height, width, channels; D table width.
    Equality is object identity (arrays are compared with numpy, field by field).

    Attributes:
      image_train: [N_train, H, W, C] float32 in [0, 1].
      table_train: [N_train, D] float32, preprocessed (:func:`preprocess_table`).
      y_train: [N_train] int32 class in 0..num_classes-1, or float32 for regression.
      image_test, table_test, y_test: the same for the test split.
      digit_train, digit_test: [N] int32 true digit of the image (-1 where the source has none:
        the folder and tfds loaders).
      image_id_train, image_id_test: [N] int32 index of the image in its source (vt-digits:
        ``load_digits()``; folder: the CSV data row, 0-based; tfds: the split's record).
      feature_names: D names of the table columns, ``"col"`` or ``"col=level"`` (one-hot).
      task: the task name (vt-digits) or ``"classification"`` / ``"regression"``.
      num_classes: number of classes, 0 for regression.
      num_dropped: rows dropped for a missing label or image (folder loader).
      class_names: the class of each label id (folder loader; labels sorted as strings).
      raw_train, raw_test: the table before preprocessing, column name -> [N] numpy array.
        vt-digits: ``shift`` int32 (-1 = missing), ``flag`` int32, ``u`` float64,
        ``n0``..``n3`` float64 (NaN = missing), ``colour_noise`` int32. Folder loader: numeric
        columns float64 (NaN = missing), categorical ones object (None = missing). tfds: the
        ``table_keys`` as float64, flattened.
    """

    image_train: np.ndarray  # [N_train, H, W, C]
    table_train: np.ndarray  # [N_train, D]
    y_train: np.ndarray  # [N_train]
    image_test: np.ndarray  # [N_test, H, W, C]
    table_test: np.ndarray  # [N_test, D]
    y_test: np.ndarray  # [N_test]
    digit_train: np.ndarray  # [N_train]
    digit_test: np.ndarray  # [N_test]
    image_id_train: np.ndarray  # [N_train]
    image_id_test: np.ndarray  # [N_test]
    feature_names: tuple[str, ...]
    task: str
    num_classes: int
    num_dropped: int = 0
    class_names: tuple[str, ...] = ()
    raw_train: Mapping[str, np.ndarray] | None = None  # column -> [N_train]
    raw_test: Mapping[str, np.ndarray] | None = None  # column -> [N_test]


# ----------------------------------------------------------------------------- preprocessing


def _is_missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _numeric_column(values: Sequence[Any], name: str) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as e:
        raise ValueError(f"numeric column {name!r} has a value that is not a number "
                         f"(use None or NaN for missing): {e}") from e


def _category_strings(values: Sequence[Any]) -> list[str]:
    return [MISSING if _is_missing(v) else str(v) for v in values]


def preprocess_table(train: Mapping[str, Sequence[Any]], test: Mapping[str, Sequence[Any]], *,
                     numeric: Sequence[str] = (), categorical: Sequence[str] = (),
                     categories: Mapping[str, Sequence[Any]] | None = None
                     ) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """VT-Bench's table preprocessing, fitted on the training split only.

    Numeric columns: a missing value (None or NaN) becomes the training mean of the column (0 if
    the column has no training value); then the column is standardised with the mean and the
    standard deviation (ddof 0, 1 where it is 0) of the imputed training column, so that the
    training column has mean 0 and standard deviation 1, and a missing value becomes exactly 0.

    Categorical columns: values are compared as ``str(value)``; a missing value (None or NaN)
    becomes the category :data:`MISSING`. The levels are ``categories[col]`` when given (a fixed
    list: a training value outside it is an error), else the sorted distinct training values,
    with :data:`MISSING` last if a training value was missing. Each level is one one-hot column.
    A test value that is not a level (an unseen category, or a missing value when ``MISSING`` is
    not a level) is encoded as all zeros: it matches no training category.

    Output columns follow the key order of ``train``; numeric ones are named ``col``, one-hot
    ones ``col=level``. Columns named in neither list are ignored.

    Args:
      train: column name -> [N_train] raw values (numbers, strings, None, NaN).
      test: column name -> [N_test] raw values; must hold every named column.
      numeric: names of the numeric columns.
      categorical: names of the categorical columns.
      categories: optional fixed levels of some categorical columns (so that D does not depend
        on which values the training split happens to hold).

    Returns:
      ``(x_train, x_test, feature_names)``: [N_train, D] and [N_test, D] float32 arrays and the D
      column names.

    >>> xtr, xte, names = preprocess_table({"a": [1.0, None, 3.0], "c": ["x", "y", None]},
    ...                                    {"a": [None, 5.0], "c": ["z", "x"]},
    ...                                    numeric=["a"], categorical=["c"])
    >>> names
    ('a', 'c=x', 'c=y', 'c=MISSING')
    >>> xte.astype(float).round(3).tolist()
    [[0.0, 0.0, 0.0, 0.0], [3.674, 1.0, 0.0, 0.0]]
    """
    numeric, categorical = tuple(numeric), tuple(categorical)
    categories = dict(categories or {})
    both = set(numeric) & set(categorical)
    if both:
        raise ValueError(f"columns {sorted(both)} are named both numeric and categorical")
    if len(set(numeric)) != len(numeric) or len(set(categorical)) != len(categorical):
        raise ValueError("a column is named twice in numeric or categorical")
    named = numeric + categorical
    if not named:
        raise ValueError("preprocess_table needs at least one numeric or categorical column")
    for col in named:
        for split, cols in (("train", train), ("test", test)):
            if col not in cols:
                raise ValueError(f"column {col!r} is missing from the {split} columns")
    for col in categories:
        if col not in categorical:
            raise ValueError(f"categories given for {col!r}, which is not a categorical column")
    lengths = {split: {len(cols[c]) for c in named} for split, cols in (("train", train),
                                                                        ("test", test))}
    for split, ls in lengths.items():
        if len(ls) != 1:
            raise ValueError(f"{split} columns have different lengths {sorted(ls)}")
    n_train, n_test = lengths["train"].pop(), lengths["test"].pop()
    if n_train < 1:
        raise ValueError("the training split has no rows")

    blocks_train, blocks_test, names = [], [], []
    for col in [c for c in train if c in named]:
        if col in numeric:
            tr, te = _numeric_column(train[col], col), _numeric_column(test[col], col)
            seen = tr[~np.isnan(tr)]
            fill = float(seen.mean()) if seen.size else 0.0
            tr, te = np.where(np.isnan(tr), fill, tr), np.where(np.isnan(te), fill, te)
            # the imputed column's mean is `fill`; centring on it exactly maps an imputed value
            # to exactly 0 (tr.mean() would differ from it by rounding)
            sd = float(np.sqrt(np.mean((tr - fill) ** 2)))
            sd = sd if sd > 0 else 1.0
            blocks_train.append(((tr - fill) / sd)[:, None])
            blocks_test.append(((te - fill) / sd)[:, None])
            names.append(col)
            continue
        tr, te = _category_strings(train[col]), _category_strings(test[col])
        if col in categories:
            levels = list(dict.fromkeys(str(c) for c in categories[col]))
            outside = sorted(set(tr) - set(levels))
            if outside:
                raise ValueError(f"column {col!r} has training values {outside} outside its "
                                 f"categories {levels}")
        else:
            levels = sorted(set(tr) - {MISSING}) + ([MISSING] if MISSING in tr else [])
        index = {lv: i for i, lv in enumerate(levels)}
        for vals, blocks, n in ((tr, blocks_train, n_train), (te, blocks_test, n_test)):
            hot = np.zeros((n, len(levels)), np.float64)
            pos = np.array([index.get(v, -1) for v in vals], np.int64)
            rows = np.nonzero(pos >= 0)[0]
            hot[rows, pos[rows]] = 1.0
            blocks.append(hot)
        names.extend(f"{col}={lv}" for lv in levels)
    x_train = np.concatenate(blocks_train, axis=1).astype(np.float32)
    x_test = np.concatenate(blocks_test, axis=1).astype(np.float32)
    return x_train, x_test, tuple(names)


# ----------------------------------------------------------------------------- checks, splits


def _check_fraction(test_fraction: Any) -> None:
    if not isinstance(test_fraction, numbers.Real) or not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")


def _check_seed(seed: Any) -> None:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"seed must be an int, got {seed!r}")


def _num_test(test_fraction: float, n: int) -> int:
    """round(test_fraction * n), kept in [1, n - 1] so that both splits are non-empty."""
    return min(n - 1, max(1, int(round(test_fraction * n))))


def _split_rows(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if n < 2:
        raise ValueError(f"need at least 2 rows to split, got {n}")
    perm = np.random.default_rng(seed).permutation(n)
    k = _num_test(test_fraction, n)
    return perm[k:], perm[:k]


def _empty_table(n_train: int, n_test: int) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    return np.zeros((n_train, 0), np.float32), np.zeros((n_test, 0), np.float32), ()


# ----------------------------------------------------------------------------- vt-digits


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    images = (np.asarray(d.images, np.float32) / np.float32(16.0))[..., None]
    images.setflags(write=False)
    target = np.asarray(d.target, np.int32)
    target.setflags(write=False)
    return images, target


def vt_digits(task: str = "mod", *, seed: int = 0, rows_per_image: int = 3,
              test_fraction: float = 0.25, missing_rate: float = 0.1) -> VTData:
    """vt-digits: sklearn's 8 x 8 digits, each joined with generated table rows.

    Every image of ``load_digits()`` (1797, pixels 0..16) gets ``rows_per_image`` table rows; each
    row is one sample (the same image, its own row and label). Raw columns, drawn independently
    per row: ``shift`` uniform in 0..9 (categorical), ``flag`` in {0, 1} (numeric), ``u`` ~
    U(0, 1), ``n0``..``n3`` ~ N(0, 1), each missing (NaN) with probability ``missing_rate``, and
    ``colour_noise`` uniform in 0..3 (categorical, a nuisance). Tasks:

    * ``"mod"``: y = (digit + shift) mod 10, 10 classes; neither modality alone beats 1/10.
    * ``"pair"``: y = digit + 10 flag, 20 classes; additive in the two modalities.
    * ``"tabdom"``: y = shift, or the digit where shift is missing (probability
      ``missing_rate``, category :data:`MISSING`; only in this task); 10 classes.
    * ``"regression"``: y = digit + 2 u, float32.

    The split is image-disjoint: ``round(test_fraction * 1797)`` images, chosen by the seed, give
    all their rows to the test split. Images come in that random order, the rows of an image
    contiguous. The table goes through :func:`preprocess_table` with training statistics and
    fixed levels (``shift`` 0..9, plus MISSING in ``"tabdom"``; ``colour_noise`` 0..3), so D is
    20 (21 for ``"tabdom"``) whatever the seed. The raw columns are ``raw_train``/``raw_test``.
    All draws come from ``np.random.default_rng(seed)`` in a fixed order that does not depend on
    the task, so one seed gives the same split and raw table in every task (except the shifts
    that ``"tabdom"`` makes missing).

    Args:
      task: one of :data:`VT_DIGITS_TASKS`.
      seed: int seed of the split and the table.
      rows_per_image: table rows (samples) per image, >= 1.
      test_fraction: fraction of the images in the test split, in (0, 1).
      missing_rate: probability that a noise value (and, in ``"tabdom"``, a shift) is missing,
        in [0, 1).

    Returns:
      a :class:`VTData` with images [N, 8, 8, 1] (pixels / 16) and N = rows_per_image * images.

    >>> d = vt_digits("mod", seed=0)
    >>> d.image_train.shape[1:], d.table_train.shape[1], d.num_classes
    ((8, 8, 1), 20, 10)
    >>> len(d.y_train) + len(d.y_test), len(set(d.image_id_test))
    (5391, 449)
    >>> bool(np.all(d.y_test == (d.digit_test + d.raw_test["shift"]) % 10))
    True
    """
    if task not in VT_DIGITS_TASKS:
        raise ValueError(f"task must be one of {VT_DIGITS_TASKS}, got {task!r}")
    _check_seed(seed)
    if (isinstance(rows_per_image, bool) or not isinstance(rows_per_image, numbers.Integral)
            or rows_per_image < 1):
        raise ValueError(f"rows_per_image must be an int >= 1, got {rows_per_image!r}")
    _check_fraction(test_fraction)
    if not isinstance(missing_rate, numbers.Real) or not 0.0 <= missing_rate < 1.0:
        raise ValueError(f"missing_rate must be in [0, 1), got {missing_rate!r}")

    images, target = _digits()
    n_img, r = len(images), int(rows_per_image)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n_img)
    k = _num_test(test_fraction, n_img)
    # sample order within a split: images in permutation order, an image's rows contiguous
    ids_test, ids_train = np.repeat(perm[:k], r), np.repeat(perm[k:], r)
    row_test = (perm[:k, None] * r + np.arange(r)).reshape(-1)
    row_train = (perm[k:, None] * r + np.arange(r)).reshape(-1)

    # raw table, one row per (image, row) in image order: the draw order never changes
    n = n_img * r
    shift = rng.integers(0, 10, n).astype(np.int32)
    flag = rng.integers(0, 2, n).astype(np.int32)
    u = rng.random(n)
    noise = rng.standard_normal((n, len(_NOISE)))
    noise[rng.random((n, len(_NOISE))) < missing_rate] = np.nan
    colour = rng.integers(0, 4, n).astype(np.int32)
    shift_missing = rng.random(n) < missing_rate
    if task == "tabdom":
        shift = np.where(shift_missing, -1, shift).astype(np.int32)
    raw = {"shift": shift, "flag": flag, "u": u,
           **{name: noise[:, j] for j, name in enumerate(_NOISE)}, "colour_noise": colour}

    digit = np.repeat(target, r)
    if task == "mod":
        y = ((digit + shift) % 10).astype(np.int32)
    elif task == "pair":
        y = (digit + 10 * flag).astype(np.int32)
    elif task == "tabdom":
        y = np.where(shift < 0, digit, shift).astype(np.int32)
    else:
        y = (digit + 2.0 * u).astype(np.float32)

    def table(rows):
        cols = {c: v[rows] for c, v in raw.items()}
        cols["shift"] = [None if s < 0 else int(s) for s in cols["shift"]]
        return cols

    shift_levels = list(range(10)) + ([MISSING] if task == "tabdom" else [])
    x_train, x_test, names = preprocess_table(
        table(row_train), table(row_test), numeric=("flag", "u", *_NOISE),
        categorical=("shift", "colour_noise"),
        categories={"shift": shift_levels, "colour_noise": range(4)})
    return VTData(
        image_train=images[ids_train], table_train=x_train, y_train=y[row_train],
        image_test=images[ids_test], table_test=x_test, y_test=y[row_test],
        digit_train=digit[row_train], digit_test=digit[row_test],
        image_id_train=ids_train.astype(np.int32), image_id_test=ids_test.astype(np.int32),
        feature_names=names, task=task, num_classes=_NUM_CLASSES[task],
        raw_train={c: v[row_train] for c, v in raw.items()},
        raw_test={c: v[row_test] for c, v in raw.items()})


# ----------------------------------------------------------------------------- folder loader


def _parse_size(size: Any) -> tuple[int, int]:
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        hw = (int(size), int(size))
    elif (isinstance(size, Sequence) and len(size) == 2
          and all(isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in size)):
        hw = (int(size[0]), int(size[1]))
    else:
        raise ValueError(f"size must be an int or a (height, width) pair of ints, got {size!r}")
    if min(hw) < 1:
        raise ValueError(f"size must be positive, got {size!r}")
    return hw


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_image_table_folder(root: str | pathlib.Path, *, csv: str, image_col: str,
                            target_col: str, size: int | tuple[int, int],
                            test_fraction: float = 0.25, seed: int = 0,
                            task: str = "classification") -> VTData:
    """A folder of images with a CSV of table rows, prepared as VT-Bench does.

    ``root/csv`` is read with the standard ``csv`` module (a header row, then one row per
    sample). ``image_col`` holds an image path relative to ``root``; the image is loaded with
    Pillow, converted to RGB, resized to ``size`` (bilinear) and divided by 255. Rows with an
    empty target or whose image file is absent are dropped (counted in ``num_dropped``). Every
    other column is a feature: numeric if each non-empty value of the kept rows parses as a float
    (a schema decision, taken on all kept rows), else categorical; empty cells are missing. The
    rows are split at random (seeded), then the table goes through :func:`preprocess_table`
    with training statistics. Classification targets become 0..C-1 in sorted order of their
    strings (``class_names``, over all kept rows); regression targets are float32.

    Args:
      root: the folder.
      csv: the CSV file name, relative to ``root``.
      image_col: the column with the image paths.
      target_col: the column with the targets.
      size: H (square) or (H, W) of the resized images.
      test_fraction: fraction of the kept rows in the test split, in (0, 1).
      seed: seed of the row permutation.
      task: ``"classification"`` or ``"regression"``.

    Returns:
      a :class:`VTData` with images [N, H, W, 3]; ``digit_*`` are -1 and ``image_id_*`` the CSV
      data row (0-based, counting dropped rows).
    """
    from PIL import Image

    hw = _parse_size(size)
    _check_fraction(test_fraction)
    _check_seed(seed)
    if task not in ("classification", "regression"):
        raise ValueError(f"task must be 'classification' or 'regression', got {task!r}")
    base = pathlib.Path(root)
    path = base / csv
    if not path.is_file():
        raise FileNotFoundError(f"csv file {str(path)!r} not found")
    with open(path, newline="", encoding="utf-8") as f:
        reader = _csv.DictReader(f)
        header = list(reader.fieldnames or [])
        rows = list(reader)
    for arg, col in (("image_col", image_col), ("target_col", target_col)):
        if col not in header:
            raise ValueError(f"{arg} {col!r} is not a column of {str(path)!r} (columns: "
                             f"{header})")
    features = [c for c in header if c not in (image_col, target_col)]

    kept, files = [], []
    for i, row in enumerate(rows):
        target = (row.get(target_col) or "").strip()
        name = (row.get(image_col) or "").strip()
        if not target or not name or not (base / name).is_file():
            continue
        kept.append(i)
        files.append(base / name)
    dropped = len(rows) - len(kept)
    targets = [rows[i][target_col].strip() for i in kept]
    if task == "classification":
        class_names = tuple(sorted(set(targets)))
        index = {c: j for j, c in enumerate(class_names)}
        y = np.array([index[t] for t in targets], np.int32)
    else:
        class_names = ()
        bad = [t for t in targets if not _is_float(t)]
        if bad:
            raise ValueError(f"regression target_col {target_col!r} has non-numeric values, "
                             f"e.g. {bad[0]!r}")
        y = np.array([float(t) for t in targets], np.float32)

    cells = {c: [(rows[i].get(c) or "").strip() for i in kept] for c in features}
    numeric = [c for c in features if all(_is_float(v) for v in cells[c] if v)]
    raw = {c: (np.array([float(v) if v else np.nan for v in vals], np.float64) if c in numeric
               else np.array([v if v else None for v in vals], object))
           for c, vals in cells.items()}

    tr, te = _split_rows(len(kept), test_fraction, seed)
    if features:
        x_train, x_test, names = preprocess_table(
            {c: v[tr] for c, v in raw.items()}, {c: v[te] for c, v in raw.items()},
            numeric=numeric, categorical=[c for c in features if c not in numeric])
    else:
        x_train, x_test, names = _empty_table(len(tr), len(te))

    def load(p):
        with Image.open(p) as im:
            im = im.convert("RGB").resize((hw[1], hw[0]), Image.Resampling.BILINEAR)
            return np.asarray(im, np.float32) / np.float32(255.0)

    images = np.stack([load(p) for p in files]).astype(np.float32)
    ids = np.array(kept, np.int32)
    return VTData(
        image_train=images[tr], table_train=x_train, y_train=y[tr],
        image_test=images[te], table_test=x_test, y_test=y[te],
        digit_train=np.full(len(tr), -1, np.int32), digit_test=np.full(len(te), -1, np.int32),
        image_id_train=ids[tr], image_id_test=ids[te], feature_names=names, task=task,
        num_classes=len(class_names), num_dropped=dropped, class_names=class_names,
        raw_train={c: v[tr] for c, v in raw.items()}, raw_test={c: v[te] for c, v in raw.items()})


# ----------------------------------------------------------------------------- tfds


def from_tfds(name: str, *, split: str, image_key: str = "image", label_key: str = "label",
              table_keys: Sequence[str] = (), data_dir: str | None = None,
              test_fraction: float = 0.25, seed: int = 0,
              max_examples: int | None = None) -> VTData:
    """A tensorflow-datasets split prepared on disk as image + table data (no download).

    Reads ``split`` in file order with :func:`jaxpapers.core.data.tfds_batches` (needs the
    ``[data]`` extra), keeps the first ``max_examples`` records, and splits them by row (seeded).
    Integer images are divided by 255 (float ones kept), a 2-D image gets a channel axis. The
    table is the numeric features ``table_keys`` (a vector feature gives columns ``key[i]``),
    preprocessed with training statistics; with no keys it is [N, 0]. An integer label gives a
    classification task with ``num_classes = max label + 1`` (over the records read); a float one
    a regression task.

    Args:
      name: tfds dataset name, e.g. ``"mnist"``.
      split: tfds split to read, e.g. ``"train"``.
      image_key, label_key: feature keys of the image and the label.
      table_keys: numeric feature keys that form the table.
      data_dir: where the prepared dataset lives (tfds default if None).
      test_fraction: fraction of the records in the test split, in (0, 1).
      seed: seed of the row permutation.
      max_examples: read at most this many records (all if None).

    Returns:
      a :class:`VTData`; ``digit_*`` are -1 and ``image_id_*`` the record index in ``split``.
    """
    from jaxpapers.core import data as core_data

    _check_fraction(test_fraction)
    _check_seed(seed)
    if max_examples is not None and (not isinstance(max_examples, numbers.Integral)
                                     or max_examples < 2):
        raise ValueError(f"max_examples must be an int >= 2 or None, got {max_examples!r}")
    table_keys = tuple(table_keys)
    if len(set(table_keys)) != len(table_keys):
        raise ValueError(f"table_keys must be distinct, got {table_keys}")
    # a table key may repeat the label (an oracle column, for diagnostics): fetch it once
    keys = list(dict.fromkeys([image_key, label_key, *table_keys]))
    batch = 256 if max_examples is None else min(256, int(max_examples))
    parts: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    count = 0
    try:
        for b in core_data.tfds_batches(name, split=split, batch_size=batch, data_dir=data_dir,
                                        keys=keys, shuffle_seed=None, drop_remainder=False):
            for k in keys:
                parts[k].append(b[k])
            count += len(b[image_key])
            if max_examples is not None and count >= max_examples:
                break
    except KeyError as e:
        raise ValueError(f"feature {e.args[0]!r} is not in tfds dataset {name!r}") from e
    if not count:
        raise ValueError(f"tfds dataset {name!r} split {split!r} has no records")
    cols = {k: np.concatenate(v)[:max_examples] for k, v in parts.items()}

    images = cols[image_key]
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4:
        raise ValueError(f"image_key {image_key!r} must give [H, W] or [H, W, C] images, got "
                         f"shape {images.shape[1:]}")
    if np.issubdtype(images.dtype, np.integer) or images.dtype == np.bool_:
        images = images.astype(np.float32) / np.float32(255.0)
    images = images.astype(np.float32)
    labels = cols[label_key]
    if labels.ndim != 1:
        raise ValueError(f"label_key {label_key!r} must be a scalar per record, got shape "
                         f"{labels.shape[1:]}")
    regression = np.issubdtype(labels.dtype, np.floating)
    y = labels.astype(np.float32 if regression else np.int32)

    n = len(images)
    raw: dict[str, np.ndarray] = {}
    for k in table_keys:
        v = cols[k].reshape(n, -1).astype(np.float64)
        if v.shape[1] == 1:
            raw[k] = v[:, 0]
        else:
            raw.update({f"{k}[{j}]": v[:, j] for j in range(v.shape[1])})
    tr, te = _split_rows(n, test_fraction, seed)
    if raw:
        x_train, x_test, names = preprocess_table(
            {c: v[tr] for c, v in raw.items()}, {c: v[te] for c, v in raw.items()},
            numeric=list(raw))
    else:
        x_train, x_test, names = _empty_table(len(tr), len(te))
    ids = np.arange(n, dtype=np.int32)
    return VTData(
        image_train=images[tr], table_train=x_train, y_train=y[tr],
        image_test=images[te], table_test=x_test, y_test=y[te],
        digit_train=np.full(len(tr), -1, np.int32), digit_test=np.full(len(te), -1, np.int32),
        image_id_train=ids[tr], image_id_test=ids[te], feature_names=names,
        task="regression" if regression else "classification",
        num_classes=0 if regression else int(y.max()) + 1,
        raw_train={c: v[tr] for c, v in raw.items()}, raw_test={c: v[te] for c, v in raw.items()})
