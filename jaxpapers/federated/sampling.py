"""Client sampling per round and the label-Dirichlet non-IID data split.

>>> import jax
>>> sample_clients(jax.random.key(0), 10, 3).shape
(3,)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxpapers.core.checks import check_int, check_key, check_range, is_tracer
from jaxpapers.core.rng import numpy_rng

__all__ = ["sample_clients", "dirichlet_partition"]


def sample_clients(key: jax.Array, num_clients: int, num_sampled: int) -> jax.Array:
    """Draw ``S = num_sampled`` distinct clients out of ``num_clients``, sorted ascending.

    FedAvg's ``S_t <- random set of max(C K, 1) clients`` (McMahan et al. 2017, Alg. 1). Jittable
    (the counts are static) and vmappable over keys.

    Args:
      key: a typed key (consumed).
      num_clients: ``N >= 1`` (static).
      num_sampled: ``S`` in ``[1, N]`` (static).

    Returns:
      ``[S]`` int32 client ids in ``[0, N)``, distinct and sorted.

    Raises:
      TypeError: ``key`` is not a typed key; a count is not an int.
      ValueError: ``num_clients < 1`` or ``num_sampled`` outside ``[1, num_clients]``.

    >>> import jax
    >>> ids = sample_clients(jax.random.key(1), 5, 5)
    >>> ids.tolist(), ids.dtype.name
    ([0, 1, 2, 3, 4], 'int32')
    """
    check_key("key", key)
    n = check_int("num_clients", num_clients, minimum=1)
    s = check_int("num_sampled", num_sampled, minimum=1, maximum=n)
    ids = jax.random.choice(key, n, (s,), replace=False)
    return jnp.sort(ids).astype(jnp.int32)


def dirichlet_partition(key: jax.Array, labels: ArrayLike, *, num_clients: int, alpha: float,
                        min_size: int = 1, max_tries: int = 1000
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Label-Dirichlet non-IID split of ``N`` samples over ``num_clients`` clients.

    The common recipe (Hsu et al. 2019): for each class ``y``, draw proportions
    ``p ~ Dir(alpha 1_C)`` over the clients and cut the class's shuffled indices at
    ``cumsum(p) * n_y``; redraw everything until every client holds at least ``min_size``
    samples (at most ``max_tries`` draws). Smaller ``alpha`` means more skew; as
    ``alpha -> inf`` every client's label distribution tends to the global one.

    Host-side NumPy (not jittable): the generator is seeded from ``key``
    (:func:`jaxpapers.core.rng.numpy_rng`), so the split is a deterministic function of the key.

    Args:
      key: a typed key (consumed).
      labels: ``[N]`` integer class labels (concrete).
      num_clients: ``C >= 1``.
      alpha: Dirichlet concentration ``> 0``.
      min_size: every client gets at least this many samples (``0 <= min_size``,
        ``min_size * C <= N``).
      max_tries: how many full draws to attempt before giving up.

    Returns:
      ``(indices, mask)``: ``[C, M]`` int32 sample indices of each client (ascending, padded
      with 0) and ``[C, M]`` bool (True for real entries), ``M`` the largest client's size;
      every sample is in exactly one client.

    Raises:
      ValueError: ``labels`` not 1-D / not integer / traced; ``alpha <= 0``; ``num_clients < 1``;
        ``min_size * num_clients > N``; no draw in ``max_tries`` met ``min_size`` (raise
        ``alpha`` or lower ``min_size``).

    >>> import jax, numpy as np
    >>> y = np.repeat(np.arange(3), 20)                       # N = 60, 3 classes
    >>> idx, mask = dirichlet_partition(jax.random.key(0), y, num_clients=4, alpha=0.5,
    ...                                 min_size=5)
    >>> int(mask.sum()), bool(mask.sum(1).min() >= 5), sorted(idx[mask].tolist()) == list(range(60))
    (60, True, True)
    """
    check_key("key", key)
    if is_tracer(labels):
        raise ValueError("labels must be concrete (dirichlet_partition runs on the host), got "
                         "a tracer")
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValueError(f"labels must have shape [N] (1 axis), got shape {y.shape}")
    if y.dtype.kind not in "iub":
        raise ValueError(f"labels must hold integers, got dtype {y.dtype}")
    c = check_int("num_clients", num_clients, minimum=1)
    check_range("alpha", alpha, low=0.0, low_open=True, scalar=True)
    m = check_int("min_size", min_size, minimum=0)
    tries = check_int("max_tries", max_tries, minimum=1)
    n = y.shape[0]
    if m * c > n:
        raise ValueError(f"min_size * num_clients must be <= N = {n}, got {m} * {c} = {m * c}")
    rng = numpy_rng(key)
    classes = np.unique(y)
    for _ in range(tries):
        buckets: list[list[np.ndarray]] = [[] for _ in range(c)]
        for cls in classes:
            idx = np.flatnonzero(y == cls)
            rng.shuffle(idx)
            p = np.nan_to_num(rng.dirichlet(np.full(c, float(alpha))))  # tiny alpha: 0 / NaN
            p = p / p.sum() if p.sum() > 0 else np.full(c, 1.0 / c)
            cuts = np.round(np.cumsum(p) * len(idx)).astype(np.int64)[:-1]
            for j, part in enumerate(np.split(idx, cuts)):
                buckets[j].append(part)
        sizes = np.array([sum(len(b) for b in bs) for bs in buckets])
        if sizes.min() >= m:
            width = max(int(sizes.max()), 1)
            indices = np.zeros((c, width), np.int32)
            mask = np.zeros((c, width), bool)
            for j in range(c):
                got = np.sort(np.concatenate(buckets[j])) if buckets[j] else np.empty(0, int)
                indices[j, :got.size] = got
                mask[j, :got.size] = True
            return indices, mask
    raise ValueError(f"no Dirichlet draw in max_tries={tries} gave every one of the {c} clients "
                     f"min_size={m} samples; raise alpha={alpha} or lower min_size")
