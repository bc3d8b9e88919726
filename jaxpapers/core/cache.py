"""Train once, then load: a content-addressed orbax cache for parameter pytrees.

:func:`load_or_compute` keys a folder by a JSON *fingerprint* (every setting, data hash and key
that determined the result). A new entry is written to a temporary folder and renamed into place
when complete, so a crash never leaves a half-written entry under the final name, and two
processes racing to fill the same entry keep one complete copy. An entry that cannot be read
back (truncated files) is moved aside with a warning and recomputed; one whose stored
fingerprint or parameter shapes differ from the request raises ``ValueError``.

Used by :func:`jaxpapers.lm.load_or_train` and the experiments' trained digits models.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

__all__ = ["cache_root", "fingerprint_of", "entry_path", "load_or_compute", "read_meta",
           "array_digest", "Unreadable"]


def cache_root(namespace: str) -> pathlib.Path:
    """``$JAXPAPERS_CACHE/<namespace>`` (default ``~/.cache/jaxpapers/<namespace>``)."""
    if not namespace or "/" in namespace or namespace.startswith("."):
        raise ValueError(f"namespace must be a plain folder name, got {namespace!r}")
    base = os.environ.get("JAXPAPERS_CACHE") or (pathlib.Path.home() / ".cache" / "jaxpapers")
    return pathlib.Path(base).expanduser() / namespace


def array_digest(*arrays: Any) -> str:
    """sha256 of arrays' dtypes, shapes and bytes (for putting a dataset in a fingerprint)."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a))
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def fingerprint_of(obj: Any) -> Any:
    """``obj`` as it reads back from JSON (sorted keys); JAX keys become their key data.

    Raises:
      TypeError: something JSON cannot hold (pass arrays through :func:`array_digest`).
    """
    def default(x):
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return np.asarray(jax.random.key_data(x)).tolist()
        if isinstance(x, (np.integer, np.floating, np.bool_)):
            return x.item()
        if isinstance(x, (tuple, set, frozenset)):
            return list(x)
        raise TypeError(f"fingerprint entries must be JSON data or JAX keys, got {type(x)}; "
                        "hash arrays with array_digest")

    return json.loads(json.dumps(obj, sort_keys=True, default=default))


def entry_path(root: str | os.PathLike, fingerprint: Any) -> pathlib.Path:
    """``root / <first 16 hex digits of sha256(fingerprint as sorted JSON)>``."""
    blob = json.dumps(fingerprint_of(fingerprint), sort_keys=True).encode()
    return pathlib.Path(root).expanduser().resolve() / hashlib.sha256(blob).hexdigest()[:16]


def spec(tree: Any) -> list[list[str]]:
    """[path, shape, dtype] of every leaf (what a cached entry must match)."""
    return [[jax.tree_util.keystr(p), str(tuple(x.shape)), str(x.dtype)]
            for p, x in jax.tree_util.tree_leaves_with_path(tree)]


class Unreadable(Exception):
    """A cached entry that cannot be read back (missing or truncated files)."""


def read_meta(path: str | os.PathLike) -> dict:
    """The metadata stored with a cached entry (fingerprint, spec, what ``compute`` added)."""
    return json.loads((pathlib.Path(path) / "meta.json").read_text())


def _load(path: pathlib.Path, like: Any, fingerprint: Any) -> Any:
    import orbax.checkpoint as ocp

    try:
        meta = read_meta(path)
    except (OSError, ValueError) as e:
        raise Unreadable(f"meta.json: {type(e).__name__}: {e}") from e
    if meta.get("fingerprint") != fingerprint:
        raise ValueError(f"cached entry at {path} was made with other settings (stored "
                         f"{meta.get('fingerprint')}, asked {fingerprint}); delete the folder "
                         "or use another cache root")
    if meta.get("spec") != spec(like):
        raise ValueError(f"cached entry at {path} has parameter shapes {meta.get('spec')}, "
                         f"expected {spec(like)}")
    try:
        with ocp.StandardCheckpointer() as ckpt:
            out = ckpt.restore(path / "params", jax.tree.map(
                lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), like))
    except Exception as e:  # orbax raises several types for missing/truncated files
        raise Unreadable(f"params: {type(e).__name__}: {e}") from e
    if spec(out) != spec(like):
        raise ValueError(f"cached entry at {path} restored with wrong shapes")
    return out


def _save(path: pathlib.Path, tree: Any, meta: dict) -> None:
    import orbax.checkpoint as ocp

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        with ocp.StandardCheckpointer() as ckpt:
            ckpt.save(tmp / "params", tree)
            ckpt.wait_until_finished()
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            os.rename(tmp, path)
        except OSError:
            if not path.exists():  # another process may have won the race; keep its copy
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def load_or_compute(root: str | os.PathLike, fingerprint: Any,
                    compute: Callable[[], tuple[Any, dict]], *, like: Any
                    ) -> tuple[Any, dict]:
    """Load the entry for ``fingerprint`` under ``root``, or ``compute()`` it and store it.

    Args:
      root: the cache folder (e.g. :func:`cache_root` of a namespace).
      fingerprint: JSON data (and JAX keys) naming everything the result depends on.
      compute: ``() -> (tree, info)``: the pytree of arrays to cache and a JSON dict stored
        beside it (training time, final loss, ...).
      like: a pytree with the result's structure, shapes and dtypes (e.g. the initial
        parameters); a stored entry must match it.

    Returns:
      ``(tree, meta)``: the arrays (as loaded from disk when cached, so a first run and a rerun
      see identical values) and the stored metadata with ``"cached"`` (whether it was loaded).
    """
    fp = fingerprint_of(fingerprint)
    path = entry_path(root, fp)
    if path.exists():
        try:
            return _load(path, like, fp), {**read_meta(path), "cached": True}
        except Unreadable as e:  # keep it for inspection, then recompute
            aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
            warnings.warn(f"cached entry at {path} is unreadable ({e}); moved to {aside} and "
                          "recomputing", stacklevel=2)
            path.rename(aside)
    tree, info = compute()
    tree = jax.device_get(tree)
    if spec(tree) != spec(like):
        raise ValueError(f"compute() returned shapes {spec(tree)}, expected {spec(like)}")
    meta = {**fingerprint_of(info), "fingerprint": fp, "spec": spec(like)}
    _save(path, tree, meta)
    return _load(path, like, fp), {**meta, "cached": False}
