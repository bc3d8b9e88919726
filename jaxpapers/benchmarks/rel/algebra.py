"""REL's algebra tasks: the official-style A1-A4 items, ours, and the relational-complexity (RC)
family with exact and bounded solvers and shortcut baselines.

REL defines the relational complexity (RC) of an item as the minimum number of operands that must
be bound at once to apply its relation. The released algebra items (A1 constant, A2 progression,
A3 distribute-three, A4 arithmetic: 8 context panels of n x n numbers and 8 candidates) draw their
7 distractors as uniform random *floats*, so "the only integer-valued candidate" answers A2-A4
without the context, and the panels are built so that copying the last panel (A1, A3, A4) or
extrapolating ``2 P7 - P6`` (all four) is the rule itself.

:func:`official_items` rebuilds those items; :func:`our_items` draws the distractors from the
answer's own distribution (fresh items of the same task), which removes the integer shortcut; the
copy and extrapolation "shortcuts" remain wherever they *are* the rule.

:func:`generate_rc` is the family with a controlled RC (contract): a ``rows x cols`` grid over
``Z_P``; the last column of every row is the sum mod ``P`` of ``k`` operand columns (the same
``k`` columns for every instance of a call), the other columns are distractors; the last cell of
the last row is the query. Operands are uniform, so the answer is uniform given any ``k - 1``
cells of the query row: RC = ``k`` exactly, while the number of entities (``rows x cols``) stays
fixed. :func:`bounded_solver` binds at most ``budget`` cells of the query row: it is exact for
``budget >= k`` and at chance (1 / ``num_choices``) below.

Shapes: N instances, R rows, C columns, M candidates, K context panels of n x n.
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["generate_rc", "sample_rc", "reference_solver", "bounded_solver", "shortcut_answers",
           "official_items", "our_items", "panel_shortcuts", "TASKS", "SHORTCUTS"]

TASKS = ("a1", "a2", "a3", "a4")
SHORTCUTS = ("copy", "integer", "extrap", "rank")


# --------------------------------------------------------------------------------- RC family
def _check_int(name, v, lo):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")


def _subsets(n: int, k: int) -> np.ndarray:
    """All k-subsets of n columns as a bool mask [S, n] (lexicographic)."""
    combos = list(itertools.combinations(range(n), k))
    mask = np.zeros((len(combos), n), bool)
    for i, c in enumerate(combos):
        mask[i, list(c)] = True
    return mask


def _pass_rate(rows: int, subsets: int, modulus: int) -> float:
    """Chance that none of ``subsets - 1`` other subsets fits the R - 1 complete rows."""
    return (1.0 - float(modulus) ** -(rows - 1)) ** max(subsets - 1, 0)


_POOL_ELEMENTS = 50_000_000  # pool x subsets kept below this (memory of one rejection round)


def _plan(num: int, k: int, rows: int, cols: int, modulus: int) -> tuple[int, int]:
    """``(pool, width)`` of the rejection rounds: sized for the worst k of the grid, so one
    compiled program serves every k, unless that is too large; then sized for this k."""
    width_k = math.comb(cols - 1, k)
    worst = max(range(1, cols), key=lambda j: math.comb(cols - 1, j))
    width_w = math.comb(cols - 1, worst)
    pool_w = int(1.3 * num / max(_pass_rate(rows, width_w, modulus), 1e-9) + 64)
    if pool_w * width_w <= _POOL_ELEMENTS:
        return pool_w, width_w
    pool_k = int(1.3 * num / _pass_rate(rows, width_k, modulus) + 64)
    return pool_k, width_k


@functools.partial(jax.jit, static_argnames=("num", "rows", "cols", "modulus", "num_choices",
                                             "unique", "pool"))
def _generate(key, operands, others, *, num, rows, cols, modulus, num_choices, unique, pool):
    k_grid, k_query, k_choice, k_perm = jax.random.split(key, 4)
    w = operands.astype(jnp.float32)                                  # [C - 1]
    # others: bool [S, C - 1], the k-subsets padded with empty rows (one shape for every k)
    others = (others & ~jnp.all(others == operands[None], axis=1, keepdims=True))
    live = jnp.any(others, axis=1)                                    # [S] the other subsets
    others = others.astype(jnp.float32)

    def ambiguous(body):
        """Another k-subset fits every row of ``body`` [..., R - 1, C - 1] -> [...] bool."""
        x = body.astype(jnp.float32)                                  # sums < 2^24: exact
        last = jnp.mod(x @ w, modulus)                                # [..., R - 1]
        sums = jnp.mod(jnp.einsum("...rc,sc->...sr", x, others), modulus)
        fits = jnp.all(sums == last[..., None, :], axis=-1) & live
        return jnp.any(fits, axis=-1)

    shape = (num, rows - 1, cols - 1)
    if unique and rows > 1:
        # rejection sampling from a pool (_plan): the i-th instance still without rows
        # takes the i-th valid candidate of the round
        def cond(c):
            return ~jnp.all(c[2]) & (c[3] < 1000)

        def step(c):
            kk, chosen, ok, it = c
            kk, sub = jax.random.split(kk)
            cand = jax.random.randint(sub, (pool,) + shape[1:], 0, modulus, jnp.int32)
            valid = ~ambiguous(cand)                                  # [pool]
            where = jnp.nonzero(valid, size=pool, fill_value=0)[0]
            rank = jnp.cumsum(~ok) - 1                                # among the unserved
            take = ~ok & (rank < jnp.sum(valid))
            pick = cand[where[jnp.clip(rank, 0, pool - 1)]]
            return kk, jnp.where(take[:, None, None], pick, chosen), ok | take, it + 1

        init = (k_grid, jnp.zeros(shape, jnp.int32), jnp.zeros(num, bool), jnp.int32(0))
        _, complete, ok, _ = jax.lax.while_loop(cond, step, init)
        bad = ~ok
    else:
        complete = jax.random.randint(k_grid, shape, 0, modulus, jnp.int32)
        bad = jnp.zeros(num, bool)
    query = jax.random.randint(k_query, (num, 1, cols - 1), 0, modulus, jnp.int32)
    body = jnp.concatenate([complete, query], axis=1)                # [N, R, C - 1]
    last = jnp.mod(body @ operands.astype(jnp.int32), modulus)       # [N, R]
    grid = jnp.concatenate([body, last[..., None]], axis=-1)         # [N, R, C]
    answer = last[:, -1]
    grid = grid.at[:, -1, -1].set(-1)
    # candidates: the answer and num_choices - 1 distinct other residues, shuffled
    # (random permutations as argsorts of uniform keys: one batched sort each, fast to compile)
    offs = jnp.argsort(jax.random.uniform(k_choice, (num, modulus - 1)), axis=1)[
        :, :num_choices - 1] + 1                                      # [N, M - 1] in 1..P-1
    cands = jnp.concatenate([answer[:, None], jnp.mod(answer[:, None] + offs, modulus)], 1)
    perm = jnp.argsort(jax.random.uniform(k_perm, (num, num_choices)), axis=1)   # [N, M]
    choices = jnp.take_along_axis(cands, perm, axis=1)
    target = jnp.argmin(perm, axis=1).astype(jnp.int32)              # where slot 0 went
    return grid, choices.astype(jnp.int32), target, answer, bad


def generate_rc(key, num: int, *, k: int, rows: int, cols: int, modulus: int = 10,
                num_choices: int = 8, operands=None, unique: bool = True) -> dict:
    """``num`` instances of the RC family with RC = ``k`` (contract).

    Args:
      key: a ``jax.random`` key (consumed).
      num: instances N.
      k: operands of the relation (1 <= k <= cols - 1): the RC.
      rows, cols: grid shape R x C (the entity count is fixed by it, not by k).
      modulus: P, values in 0..P-1 (>= 2).
      num_choices: candidates M (2 <= M <= P): the answer and M - 1 distinct other residues.
      operands: optional bool [C - 1] with exactly k True (which columns are summed); default
        drawn from ``key`` (one operand set for the whole call).
      unique: resample an instance while another k-subset of the first C - 1 columns also fits
        every complete row (rows 0..R-2), so the rule can be inferred from one instance. With
        R = 2 only one row constrains it: about (1 - 1/P)^(C(C-1, k) - 1) of draws pass.

    Returns:
      dict: ``grid`` int32 [N, R, C] (query cell, the last of the last row, = -1), ``choices``
      int32 [N, M], ``target`` int32 [N] (index of the answer in ``choices``), ``operands``
      bool [C - 1], ``answer`` int32 [N] (its value), ``unique`` bool [N] (False only where
      10^4 resamples were not enough).

    >>> d = generate_rc(jax.random.key(0), 4, k=2, rows=2, cols=5)
    >>> d["grid"].shape, d["choices"].shape, int(d["operands"].sum())
    ((4, 2, 5), (4, 8), 2)
    """
    _check_int("num", num, 1)
    _check_int("rows", rows, 1)
    _check_int("cols", cols, 2)
    _check_int("modulus", modulus, 2)
    _check_int("num_choices", num_choices, 2)
    _check_int("k", k, 1)
    if k > cols - 1:
        raise ValueError(f"k must be <= cols - 1 = {cols - 1} (operand columns), got {k}")
    if num_choices > modulus:
        raise ValueError(f"num_choices ({num_choices}) must be <= modulus ({modulus}): the "
                         "candidates are distinct residues")
    k_ops, k_gen = jax.random.split(key)
    if operands is None:
        idx = jax.random.permutation(k_ops, cols - 1)[:k]
        operands = jnp.zeros(cols - 1, bool).at[idx].set(True)
    else:
        operands = jnp.asarray(operands)
        if operands.shape != (cols - 1,) or operands.dtype != jnp.bool_:
            raise ValueError(f"operands must be bool [{cols - 1}], got {operands.dtype} "
                             f"{operands.shape}")
        if int(operands.sum()) != k:
            raise ValueError(f"operands must have exactly k = {k} True entries, got "
                             f"{int(operands.sum())}")
    if unique and rows > 1:
        rate = _pass_rate(rows, math.comb(cols - 1, k), modulus)
        pool, width = _plan(int(num), int(k), int(rows), int(cols), int(modulus))
        if rate < 1e-3 or pool * width > _POOL_ELEMENTS:
            raise ValueError(
                f"unique=True is impractical for k={k} on a {rows} x {cols} grid over Z_{modulus}"
                f": only {rate:.1e} of draws have no other fitting {k}-subset; use more rows "
                "or unique=False")
        others = np.zeros((width, cols - 1), bool)
        others[:math.comb(cols - 1, k)] = _subsets(cols - 1, k)
    else:
        pool, others = 1, np.zeros((1, cols - 1), bool)
    grid, choices, target, answer, bad = _generate(
        k_gen, operands, jnp.asarray(others), num=int(num), rows=int(rows), cols=int(cols),
        modulus=int(modulus), num_choices=int(num_choices), unique=bool(unique), pool=pool)
    return {"grid": grid, "choices": choices, "target": target, "operands": operands,
            "answer": answer, "unique": ~bad}


def sample_rc(key, operands, *, num: int, rows: int, cols: int, modulus: int = 10,
              num_choices: int = 8) -> dict:
    """Training draws of the RC family without uniqueness resampling, traceable in
    ``operands`` (bool [C - 1]; it may differ across a vmap): ``grid``, ``choices``,
    ``target``, ``answer`` as in :func:`generate_rc`. No validation (callers check shapes)."""
    others = jnp.zeros((1, cols - 1), bool)
    grid, choices, target, answer, _ = _generate(
        key, jnp.asarray(operands, bool), others, num=num, rows=rows, cols=cols,
        modulus=modulus, num_choices=num_choices, unique=False, pool=1)
    return {"grid": grid, "choices": choices, "target": target, "answer": answer}


def bounded_solver(batch: dict, *, budget: int, modulus: int = 10) -> jax.Array:
    """A solver that knows the rule but binds at most ``budget`` cells of the query row.

    It reads the operand cells of the query row in column order, at most ``budget`` of them.
    With all k bound it computes the answer and picks its candidate; with fewer, the answer is
    uniform over Z_P given what it read (operands are uniform), every candidate is equally
    likely, and it takes the lowest index (accuracy 1 / M in expectation: the target is
    shuffled). ``budget >= cols - 1`` is the reference solver.

    Args:
      batch: :func:`generate_rc`'s dict (``grid`` [N, R, C], ``choices`` [N, M], ``operands``).
      budget: cells bound at once (>= 0).
      modulus: P of the batch.

    Returns:
      int32 [N]: chosen candidate indices.
    """
    _check_int("budget", budget, 0)
    ops = jnp.asarray(batch["operands"])
    k = int(ops.sum())
    query = batch["grid"][:, -1, :-1]                                 # [N, C - 1]
    value = jnp.mod(query @ ops.astype(jnp.int32), modulus)           # [N]
    hit = batch["choices"] == value[:, None]
    exact = jnp.argmax(hit, axis=1).astype(jnp.int32)
    if budget >= k:
        return exact
    return jnp.zeros(query.shape[0], jnp.int32)


def reference_solver(batch: dict, *, modulus: int = 10) -> jax.Array:
    """The exact solver (every operand bound): int32 [N] candidate indices."""
    return bounded_solver(batch, budget=int(jnp.asarray(batch["operands"]).shape[0]),
                          modulus=modulus)


def _pick_value(choices, value):
    """Index of the candidate equal to ``value`` (lowest index on ties), else 0."""
    hit = choices == value[:, None]
    return jnp.where(jnp.any(hit, 1), jnp.argmax(hit, 1), 0).astype(jnp.int32)


def shortcut_answers(batch: dict, *, modulus: int = 10) -> dict[str, jax.Array]:
    """Context-light guesses on an RC batch: int32 [N] choices each.

    ``copy``: the candidate equal to the last column of the row above the query (the cell a
    copy-last-panel heuristic would take); ``integer``: the first integer-valued candidate (all
    are integers here: the lowest index); ``extrap``: ``2 x[R-2] - x[R-3]`` mod P of the last
    column (the copy when R < 3); ``rank``: the candidate of median value (a guess from the
    candidates alone).
    """
    grid, choices = batch["grid"], batch["choices"]
    rows = grid.shape[1]
    if rows < 2:
        prev = jnp.zeros(grid.shape[0], jnp.int32)
    else:
        prev = grid[:, -2, -1]
    extrap = jnp.mod(2 * grid[:, -2, -1] - grid[:, -3, -1], modulus) if rows >= 3 else prev
    order = jnp.argsort(choices, axis=1, stable=True)
    return {"copy": _pick_value(choices, prev),
            "integer": jnp.zeros(choices.shape[0], jnp.int32),
            "extrap": _pick_value(choices, extrap),
            "rank": order[:, choices.shape[1] // 2].astype(jnp.int32)}


# ------------------------------------------------------------------------- A1-A4 (panels)
def _answer_panels(rng: np.random.Generator, task: str, n: int, num_panels: int,
                   max_value: int) -> np.ndarray:
    """One item's context panels and its answer: [K + 1, n, n] float64 (integer values except
    A1's uniform floats)."""
    if task == "a1":  # constant: every panel is the same random (float) matrix; the release's
        m = rng.uniform(0, max_value, (n, n))  # integer shortcut solves A2-A4 only
        return np.broadcast_to(m, (num_panels + 1, n, n)).astype(np.float64)
    if task == "a2":  # progression: M_k[r][c] = base[r] + (k n + c) delta
        base = rng.integers(0, max_value // 2, n)
        delta = rng.choice(np.array([-2, -1, 1, 2]))
        k = np.arange(num_panels + 1)[:, None, None]
        c = np.arange(n)[None, None, :]
        return (base[None, :, None] + (k * n + c) * delta).astype(np.float64)
    if task == "a3":  # distribute-three: rows are cyclic rolls of n distinct integers
        vals = rng.choice(max_value, n, replace=False)
        m = np.stack([np.roll(vals, r) for r in range(n)])
        return np.broadcast_to(m, (num_panels + 1, n, n)).astype(np.float64)
    if task == "a4":  # arithmetic: rows (a, b, a + b, random fill ...)
        a = rng.integers(0, max_value // 2, n)
        b = rng.integers(0, max_value // 2, n)
        m = np.zeros((n, n), np.int64)
        m[:, 0], m[:, 1 % n] = a, b
        if n >= 3:
            m[:, 2] = a + b
            m[:, 3:] = rng.integers(0, max_value, (n, max(n - 3, 0)))
        return np.broadcast_to(m, (num_panels + 1, n, n)).astype(np.float64)
    raise ValueError(f"task must be one of {TASKS}, got {task!r}")


def _items(key, task: str, num: int, *, n: int, num_panels: int, num_choices: int,
           max_value: int, official: bool) -> dict:
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    _check_int("num", num, 1)
    _check_int("n", n, 2)
    _check_int("num_panels", num_panels, 2)
    _check_int("num_choices", num_choices, 2)
    seed = int(jax.random.randint(key, (), 0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    ctx = np.zeros((num, num_panels, n, n))
    choices = np.zeros((num, num_choices, n, n))
    target = rng.integers(0, num_choices, num)
    for i in range(num):
        panels = _answer_panels(rng, task, n, num_panels, max_value)
        ctx[i], answer = panels[:num_panels], panels[num_panels]
        for j in range(num_choices):
            if j == target[i]:
                choices[i, j] = answer
            elif official:  # the release: uniform random floats
                choices[i, j] = rng.uniform(0, max_value, (n, n))
            else:  # ours: another item's answer of the same task (same distribution)
                choices[i, j] = _answer_panels(rng, task, n, num_panels, max_value)[-1]
    return {"context": ctx, "choices": choices, "target": target.astype(np.int32)}


def official_items(key, task: str, num: int, *, n: int = 3, num_panels: int = 8,
                   num_choices: int = 8, max_value: int = 1000) -> dict:
    """Items like the released A1-A4: ``context`` [N, K, n, n], ``choices`` [N, M, n, n] (the
    7 distractors uniform random floats in [0, max_value)), ``target`` int32 [N]."""
    return _items(key, task, num, n=n, num_panels=num_panels, num_choices=num_choices,
                  max_value=max_value, official=True)


def our_items(key, task: str, num: int, *, n: int = 3, num_panels: int = 8,
              num_choices: int = 8, max_value: int = 1000) -> dict:
    """A1-A4 with the distractors drawn as answers of fresh items of the same task (integer,
    same distribution as the answer); same shapes as :func:`official_items`."""
    return _items(key, task, num, n=n, num_panels=num_panels, num_choices=num_choices,
                  max_value=max_value, official=False)


def panel_shortcuts(items: dict) -> dict[str, np.ndarray]:
    """The measured shortcuts on A1-A4 items: int32 [N] choices each.

    ``copy``: the candidate nearest (L1) the last context panel; ``integer``: the first
    integer-valued candidate (0 if none); ``extrap``: the candidate nearest ``2 P_K - P_{K-1}``;
    ``rank``: the candidate whose entry sum is the median (from the candidates alone).
    """
    ctx, ch = np.asarray(items["context"]), np.asarray(items["choices"])

    def nearest(p):
        return np.argmin(np.abs(ch - p[:, None]).sum(axis=(2, 3)), axis=1)

    is_int = np.all(ch == np.round(ch), axis=(2, 3))
    sums = ch.sum(axis=(2, 3))
    order = np.argsort(sums, axis=1, kind="stable")
    return {"copy": nearest(ctx[:, -1]).astype(np.int32),
            "integer": np.where(is_int.any(1), np.argmax(is_int, 1), 0).astype(np.int32),
            "extrap": nearest(2 * ctx[:, -1] - ctx[:, -2]).astype(np.int32),
            "rank": order[:, ch.shape[1] // 2].astype(np.int32)}
