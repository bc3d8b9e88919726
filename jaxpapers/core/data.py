"""Offline data sources: scikit-learn's bundled sets, networkx's classic small graphs, the Python
standard library as a code corpus, and an adapter for tensorflow-datasets data the user already has
on disk.

Nothing here downloads anything. Splits are deterministic: the same seed gives the same split on
every machine, and the code corpus splits files by a hash of their relative path, so adding a file
never moves another file between train and held-out.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sysconfig
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

__all__ = ["ArrayDataset", "SKLEARN_DATASETS", "load_sklearn", "NETWORKX_GRAPHS", "networkx_graph",
           "CodeCorpus", "stdlib_corpus", "encode_bytes", "decode_bytes", "sample_windows",
           "tfds_batches"]

SKLEARN_DATASETS = ("iris", "digits", "wine", "breast_cancer", "diabetes")
_REGRESSION = {"diabetes"}


@dataclasses.dataclass(frozen=True)
class ArrayDataset:
    """A train/test split of a tabular dataset (numpy arrays).

    Attributes:
      x_train: [N_train, D] float32 features. y_train: [N_train] int32 labels (float32 for
      regression). x_test, y_test: the same for the test split. name: dataset name.
      num_classes: number of classes (0 for regression).
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int


def load_sklearn(name: str, *, test_fraction: float = 0.25, seed: int = 0,
                 standardize: bool = True) -> ArrayDataset:
    """Load one of scikit-learn's bundled datasets (no network) with a seeded split.

    Args:
      name: one of :data:`SKLEARN_DATASETS`.
      test_fraction: fraction of rows in the test split, in (0, 1).
      seed: seed of the row permutation.
      standardize: z-score features with the *training* split's mean and std.
    """
    from sklearn import datasets as skd

    if name not in SKLEARN_DATASETS:
        raise ValueError(f"name must be one of {SKLEARN_DATASETS}, got {name!r}")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    x, y = getattr(skd, f"load_{name}")(return_X_y=True)
    x = np.asarray(x, np.float64)
    perm = np.random.default_rng(seed).permutation(len(x))
    n_test = max(1, int(round(test_fraction * len(x))))
    te, tr = perm[:n_test], perm[n_test:]
    if standardize:
        mu, sd = x[tr].mean(0), x[tr].std(0)
        x = (x - mu) / np.where(sd > 0, sd, 1.0)
    regression = name in _REGRESSION
    y = np.asarray(y, np.float32 if regression else np.int32)
    return ArrayDataset(name, x[tr].astype(np.float32), y[tr], x[te].astype(np.float32), y[te],
                        0 if regression else int(y.max()) + 1)


NETWORKX_GRAPHS = ("karate_club", "les_miserables", "florentine_families", "davis_southern_women")
# integer node attributes returned with each graph: name -> {attribute: sorted category values}
_NETWORKX_ATTRS = {"karate_club": {"club": ("Mr. Hi", "Officer")},
                   "davis_southern_women": {"bipartite": (0, 1)}}


def networkx_graph(name: str) -> tuple[np.ndarray, np.ndarray, int, dict[str, np.ndarray]]:
    """One of networkx's bundled classic graphs as a symmetric edge list (no network).

    Nodes are relabelled ``0 .. N-1`` in the sorted order of their networkx labels (ints for the
    karate club, names for the others). Every undirected edge appears in both directions, sorted
    by (sender, receiver); edge weights (Les Miserables' co-occurrence counts) are dropped. Feed
    the result to ``jaxpapers.graph.from_edges(senders, receivers, num_nodes=num_nodes)``.

    Graphs (N nodes, undirected edges): ``"karate_club"`` (34, 78; Zachary 1977),
    ``"les_miserables"`` (77, 254), ``"florentine_families"`` (15, 20),
    ``"davis_southern_women"`` (32 = 18 women + 14 events, 89; bipartite).

    Args:
      name: one of :data:`NETWORKX_GRAPHS`.

    Returns:
      ``(senders, receivers, num_nodes, attrs)``: [2M] int32 arrays, N, and a dict of [N] int32
      node attributes: ``"club"`` for the karate club (0 = "Mr. Hi", 1 = "Officer"),
      ``"bipartite"`` for Davis (0 = woman, 1 = event), empty for the others.

    >>> s, r, n, attrs = networkx_graph("karate_club")
    >>> n, len(s), sorted(attrs), np.bincount(attrs["club"]).tolist()
    (34, 156, ['club'], [17, 17])
    """
    if name not in NETWORKX_GRAPHS:
        raise ValueError(f"name must be one of {NETWORKX_GRAPHS}, got {name!r}")
    import networkx as nx

    g = getattr(nx, f"{name}_graph")()
    nodes = sorted(g.nodes())
    index = {v: i for i, v in enumerate(nodes)}
    pairs = set()
    for u, v in g.edges():
        a, b = index[u], index[v]
        pairs.update(((a, b), (b, a)))
    edges = np.array(sorted(pairs), np.int32).reshape(-1, 2)
    attrs = {att: np.array([values.index(g.nodes[v][att]) for v in nodes], np.int32)
             for att, values in _NETWORKX_ATTRS.get(name, {}).items()}
    return edges[:, 0].copy(), edges[:, 1].copy(), len(nodes), attrs


@dataclasses.dataclass(frozen=True)
class CodeCorpus:
    """Python source files split into train and held-out sets.

    Attributes:
      root: the folder the files were read from.
      train_files, heldout_files: relative paths, sorted.
      train_text, heldout_text: the files' contents joined with a separator line
        ``# <file: path>`` before each file.
    """

    root: pathlib.Path
    train_files: tuple[str, ...]
    heldout_files: tuple[str, ...]
    train_text: str
    heldout_text: str


def _stdlib_root() -> pathlib.Path:
    return pathlib.Path(sysconfig.get_paths()["stdlib"])


def stdlib_corpus(*, heldout_fraction: float = 0.1, max_files: int | None = None,
                  include_tests: bool = False, root: str | pathlib.Path | None = None,
                  max_file_bytes: int = 200_000) -> CodeCorpus:
    """The Python standard library's own ``.py`` source as a text corpus.

    Files are taken in sorted order of relative path; ``site-packages`` is excluded (and test
    suites unless ``include_tests``). A file is held out when ``crc32(path) mod 10_000 <
    heldout_fraction * 10_000``: deterministic and stable under adding files. ``max_files`` keeps
    the first files of the sorted list (before the split).

    Args:
      heldout_fraction: fraction of files held out, in [0, 1).
      max_files: optional cap on the number of files read.
      include_tests: include ``test/`` and ``tests/`` folders.
      root: read from this folder instead of the running interpreter's stdlib.
      max_file_bytes: skip files larger than this (generated tables).
    """
    if not 0.0 <= heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must be in [0, 1), got {heldout_fraction!r}")
    if max_files is not None and max_files < 1:
        raise ValueError(f"max_files must be positive, got {max_files!r}")
    base = pathlib.Path(root) if root is not None else _stdlib_root()
    if not base.is_dir():
        raise ValueError(f"root {str(base)!r} is not a folder")
    skip = {"site-packages", "__pycache__"} | (set() if include_tests else {"test", "tests",
                                                                          "idle_test"})
    files = []
    for p in sorted(base.rglob("*.py")):
        rel = p.relative_to(base)
        if skip.intersection(rel.parts[:-1]) or p.stat().st_size > max_file_bytes:
            continue
        files.append(rel.as_posix())
        if max_files is not None and len(files) >= max_files:
            break
    cut = heldout_fraction * 10_000
    held = tuple(f for f in files if zlib.crc32(f.encode()) % 10_000 < cut)
    train = tuple(f for f in files if zlib.crc32(f.encode()) % 10_000 >= cut)

    def join(paths: Sequence[str]) -> str:
        parts = []
        for f in paths:
            text = (base / f).read_text(encoding="utf-8", errors="replace")
            parts.append(f"# <file: {f}>\n{text}")
        return "\n".join(parts)

    return CodeCorpus(base, train, held, join(train), join(held))


def encode_bytes(text: str) -> np.ndarray:
    """UTF-8 bytes of ``text`` as a [T] uint8 array (a byte-level vocabulary of 256)."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()


def decode_bytes(tokens: np.ndarray) -> str:
    """Inverse of :func:`encode_bytes` (invalid sequences replaced)."""
    return np.asarray(tokens, np.uint8).tobytes().decode("utf-8", errors="replace")


def sample_windows(key, tokens, *, batch_size: int, seq_len: int):
    """Random contiguous windows for next-token training; jittable in ``key``.

    Args:
      key: a ``jax.random.key``; consumed.
      tokens: [T] integer array, T > seq_len.
      batch_size: B. seq_len: L.

    Returns:
      ``(inputs, targets)``, each [B, L] int32; ``targets`` is ``inputs`` shifted by one.
    """
    import jax
    import jax.numpy as jnp

    tokens = jnp.asarray(tokens)
    if tokens.ndim != 1 or tokens.shape[0] <= seq_len:
        raise ValueError(f"tokens must be 1-D and longer than seq_len={seq_len}, "
                         f"got shape {tokens.shape}")
    starts = jax.random.randint(key, (batch_size,), 0, tokens.shape[0] - seq_len)
    idx = starts[:, None] + jnp.arange(seq_len + 1)[None, :]
    win = tokens[idx].astype(jnp.int32)
    return win[:, :-1], win[:, 1:]


def tfds_batches(name: str, *, split: str, batch_size: int, data_dir: str | None = None,
                 keys: Sequence[str] | None = None, shuffle_seed: int | None = 0,
                 drop_remainder: bool = True, num_epochs: int = 1) -> Iterator[dict[str, Any]]:
    """Numpy batches from a tensorflow-datasets dataset prepared locally (no download).

    Uses ``tfds.data_source`` (random access; no TensorFlow needed). Needs the ``[data]`` extra.

    Args:
      name: tfds dataset name, e.g. ``"mnist"``.
      split: split name, e.g. ``"train"``.
      batch_size: rows per batch.
      data_dir: where the prepared dataset lives (tfds default if None).
      keys: feature keys to keep (all if None).
      shuffle_seed: seed of the per-epoch permutation; None keeps file order.
      drop_remainder: drop a last partial batch.
      num_epochs: passes over the data.

    Yields:
      dicts of stacked numpy arrays, each with leading dimension ``batch_size``.
    """
    try:
        import tensorflow_datasets as tfds
    except ImportError as e:  # pragma: no cover - depends on the extra
        raise ImportError("tfds_batches needs tensorflow-datasets: pip install "
                          "'jaxpapers[data]'") from e
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size!r}")
    source = tfds.data_source(name, split=split, data_dir=data_dir, download=False)
    n = len(source)
    rng = np.random.default_rng(shuffle_seed)
    for _ in range(num_epochs):
        order = rng.permutation(n) if shuffle_seed is not None else np.arange(n)
        stop = n - n % batch_size if drop_remainder else n
        for s in range(0, stop, batch_size):
            rows = [source[int(i)] for i in order[s:s + batch_size]]
            ks = keys if keys is not None else rows[0].keys()
            yield {k: np.stack([np.asarray(r[k]) for r in rows]) for k in ks}
