"""Determinism across processes and commits: every capability against committed golden values.

The cases are defined once, in ``tests/golden/regenerate.py`` (which also writes
``tests/golden/values.json``); this file recomputes each case and compares its summaries.

Comparison rules:
  * shapes, dtypes and integer/bool outputs (actions, switch counts, quantized levels, argmax,
    inclusion flags): exactly;
  * float entries: ``|now - golden| <= ATOL + RTOL * |golden|``; float aggregates (sum, sum of
    magnitudes, weighted sum, all over float64): ``<= ATOL + RTOL * sum|golden|``, the most the
    aggregate can move when each entry moves by RTOL of its magnitude.
Why not bit-exact: on the machine that recorded them the values do reproduce bit for bit (same
seed, inputs and platform: same bits). But the skip rule below keys the platform on backend, CPU
architecture and jax/jaxlib versions, not on the CPU model, and XLA:CPU compiles for the host's
instruction set (AVX2 vs AVX-512 vector widths change how matmuls and reductions associate, FMA
contraction changes rounding), so another x86-64 machine may differ in the last float32 bits.
RTOL = 1e-6 (about 8 float32 ulps) admits that and nothing an algorithmic change would produce.
A discrete decision taken at a near tie (argmax, a bandit's slate, a search action) could still
flip on another CPU; the failure then names the entry, and values must be regenerated there.

Skips: when the backend, CPU architecture, jax or jaxlib version differ from the recorded ones
(golden values are per platform). The recorded ``jax_enable_x64`` state is applied while a case
runs, so a float64 test session does not invalidate them.
"""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from tests.golden import regenerate as golden

RTOL = 1e-6
ATOL = 1e-6
_AGGREGATES = ("sum", "abs_sum", "wsum")
_ENTRIES = ("values", "head", "tail")

HOW_TO_REGENERATE = (
    "If this change is intended (an algorithm, its key consumption or its numerics changed on "
    "purpose), regenerate with `python -m tests.golden.regenerate` from the repository root, "
    "review the diff of tests/golden/values.json and commit it with the change, saying why. "
    "Regenerating only to make an unexplained difference pass defeats this test.")


def _load():
    if not golden.VALUES_PATH.exists():
        return None
    return json.loads(golden.VALUES_PATH.read_text())


GOLDEN = _load()


@pytest.fixture(scope="module")
def recorded():
    if GOLDEN is None:
        pytest.fail(f"{golden.VALUES_PATH} is missing; create it with "
                    f"`python -m tests.golden.regenerate`")
    here, then = golden.platform_info(), GOLDEN["platform"]
    diffs = [f"{k}: recorded {then.get(k)!r}, here {here[k]!r}" for k in golden.SKIP_KEYS
             if then.get(k) != here[k]]
    if diffs:
        pytest.skip("golden values are per platform and were recorded elsewhere ("
                    + "; ".join(diffs) + "); regenerate on this platform to check it")
    return GOLDEN


def _entry_mismatch(path, now, want, int_like, agg_tol=None):
    """First position where ``now`` differs from ``want`` beyond tolerance, as a message."""
    now_a = np.atleast_1d(np.asarray(now, np.float64 if not int_like else np.int64))
    want_a = np.atleast_1d(np.asarray(want, now_a.dtype))
    if now_a.shape != want_a.shape:
        return f"{path}: {now_a.size} entries now, {want_a.size} golden"
    if int_like:
        bad = np.flatnonzero(now_a != want_a)
        tol = np.zeros_like(now_a)
    else:
        tol = ATOL + RTOL * np.abs(want_a) if agg_tol is None else np.full(want_a.shape, agg_tol)
        both_nan = np.isnan(now_a) & np.isnan(want_a)
        bad = np.flatnonzero(~both_nan & ~(np.abs(now_a - want_a) <= tol))
    if bad.size == 0:
        return None
    i = int(bad[0])
    where = f"{path}[{i}]" if np.ndim(want) else path
    diff = "" if int_like else f" (|diff| {abs(now_a[i] - want_a[i]):.3g} > tol {tol[i]:.3g})"
    return f"{where} = {now_a[i].item()!r} now, {want_a[i].item()!r} golden{diff}"


def first_mismatch(want: dict, now: dict) -> str | None:
    """The first difference between two ``{output: summary}`` dicts of one case, or None."""
    if set(want) != set(now):
        return f"outputs are now {sorted(now)}, golden {sorted(want)}"
    for out in sorted(want):
        w, n = want[out], now[out]
        for field in ("shape", "dtype"):
            if w[field] != n[field]:
                return f"{out}.{field} = {n[field]} now, {w[field]} golden"
        if set(w) != set(n):
            return f"{out}: summary fields are now {sorted(n)}, golden {sorted(w)}"
        int_like = not np.issubdtype(np.dtype(w["dtype"]), np.floating)
        for field in _ENTRIES:
            if field in w:
                msg = _entry_mismatch(f"{out}.{field}", n[field], w[field], int_like)
                if msg:
                    return msg
        for field in _AGGREGATES:
            if field in w:
                agg_tol = None if int_like else ATOL + RTOL * w["abs_sum"]
                msg = _entry_mismatch(f"{out}.{field}", n[field], w[field], int_like, agg_tol)
                if msg:
                    return msg
    return None


def test_golden_file_has_every_case(recorded):
    assert set(recorded["cases"]) == set(golden.CASES), (
        f"tests/golden/values.json holds cases {sorted(recorded['cases'])} but regenerate.py "
        f"defines {sorted(golden.CASES)}. {HOW_TO_REGENERATE}")


@pytest.mark.parametrize("name", list(golden.CASES))
def test_golden(recorded, name):
    if name not in recorded["cases"]:
        pytest.fail(f"golden case {name!r} is not in tests/golden/values.json. {HOW_TO_REGENERATE}")
    with jax.enable_x64(recorded["platform"]["jax_enable_x64"]):
        now = golden.compute(name)
    msg = first_mismatch(recorded["cases"][name], now)
    if msg:
        pytest.fail(f"golden case {name!r} differs from tests/golden/values.json; first mismatch: "
                    f"{msg}.\n{HOW_TO_REGENERATE}", pytrace=False)


def test_first_mismatch_reports_entry_and_respects_tolerance():
    """The comparison itself: exact integers, RTOL floats, aggregates scaled by sum |x|."""
    want = {"a": golden.summarize(np.arange(40, dtype=np.float32) / 7),
            "i": golden.summarize(np.arange(100, dtype=np.int32))}
    now = json.loads(json.dumps(want))
    assert first_mismatch(want, now) is None
    now["a"]["head"][3] *= 1 + 0.5 * RTOL  # within tolerance
    assert first_mismatch(want, now) is None
    now["a"]["tail"][2] += 1e-3
    assert first_mismatch(want, now).startswith("a.tail[2] =")
    now = json.loads(json.dumps(want))
    now["i"]["wsum"] += 1  # integers: exact
    assert first_mismatch(want, now).startswith("i.wsum =")
    now = json.loads(json.dumps(want))
    now["a"]["dtype"] = "float64"
    assert "a.dtype" in first_mismatch(want, now)
