"""Tests of jaxpapers.evolve.prompts: rendering, SEARCH/REPLACE edits, and the prompt database's
rules (fitness = best child score, a meta step every 2 samples, parents after 5 samples,
exploration 0.2 else softmax at T = 1, at most 50 prompts) against hand computations."""

from __future__ import annotations

import math
import zlib

import jax
import numpy as np
import pytest

from jaxpapers.evolve import prompts as P

TASK = "y = relu(x @ w) with x [M, K] bf16 and w [K, N] bf16"


def _keys(name: str, n: int) -> list:
    return list(jax.random.split(jax.random.key(zlib.crc32(name.encode())), n))


def _prompt(tag: str) -> P.Prompt:
    regions = {n: f"{n} text {tag}" for n in P.REGIONS}
    return P.Prompt(regions, f"id-{tag}")


# ------------------------------------------------------------------------------ prompts


def test_prompt_freezes_regions_in_order_and_validates():
    p = P.Prompt({n: n.upper() for n in reversed(P.REGIONS)}, "x")
    assert [n for n, _ in p.regions] == list(P.REGIONS)
    assert p.region("common_pitfalls") == "COMMON_PITFALLS"
    with pytest.raises(ValueError, match="regions must name exactly"):
        P.Prompt({"optimization_philosophy": "a"}, "x")
    with pytest.raises(TypeError, match=r"regions\['common_pitfalls'\]"):
        P.Prompt({**dict(p.regions), "common_pitfalls": 3}, "x")
    with pytest.raises(ValueError, match="id"):
        P.Prompt(p.regions, "")
    with pytest.raises(ValueError, match="region must be one of"):
        p.region("tips")


def test_default_prompt_names_the_task_and_ids_follow_content():
    a, b = P.default_prompt(TASK), P.default_prompt(TASK)
    assert a == b and a.parent_id is None
    assert TASK in a.region("optimization_philosophy")
    assert all(len(text) > 40 for _, text in a.regions)
    assert P.default_prompt("z = x + y").id != a.id
    with pytest.raises(ValueError, match="task_description"):
        P.default_prompt("  ")


def test_render_shows_task_seen_shapes_sources_and_asks_for_one_block():
    p = _prompt("r")
    task = P.TaskText(TASK, "small: x (128, 256), w (256, 512)")
    parent = "def kernel(x, w, *, interpret, platform, bm=64):\n    return x @ w\n"
    msgs = P.render(p, task=task, parent_source=parent, inspirations=["INSP_ONE", "INSP_TWO"],
                    feedback="score 4.0: wrong values on small")
    assert [m["role"] for m in msgs] == ["system", "user"]
    system, user = msgs[0]["content"], msgs[1]["content"]
    assert p.region("optimization_philosophy") in system
    for needle in (TASK, "small: x (128, 256)", "```python\n" + parent + "```", "INSP_ONE",
                   "INSP_TWO", "score 4.0: wrong values", "kernel(*inputs, interpret, platform, "
                   "**params)", "one ```python block"):
        assert needle in user, needle
    for name in P.REGIONS[1:]:
        assert p.region(name) in user
    # order: task, shapes, parent, inspirations, then the regions
    order = [user.index(s) for s in (TASK, "small:", parent, "INSP_ONE", "INSP_TWO",
                                      p.region("optimization_strategies"))]
    assert order == sorted(order)
    first = P.render(p, task=TASK, parent_source=None)[1]["content"]
    assert "None yet" in first and "Shapes" not in first and "Inspiration" not in first
    with pytest.raises(TypeError, match="inspirations"):
        P.render(p, task=TASK, parent_source=None, inspirations="abc")
    with pytest.raises(TypeError, match="prompt"):
        P.render(dict(p.regions), task=TASK, parent_source=None)


# ------------------------------------------------------------------- SEARCH / REPLACE edits

DIFF = """Here are my edits.

```
<<<<<<< SEARCH [common_pitfalls]
pitfall one
=======
pitfall one, sharper
>>>>>>> REPLACE
```
Some prose in between.
<<<<<<< SEARCH
    indented line
  second
=======
    new indented
>>>>>>> REPLACE
<<<<<<< SEARCH [analysis_guidance]
think
=======
>>>>>>> REPLACE
"""


def test_parse_multiple_blocks_verbatim():
    assert P.parse_search_replace(DIFF) == [
        ("common_pitfalls", "pitfall one", "pitfall one, sharper"),
        (None, "    indented line\n  second", "    new indented"),
        ("analysis_guidance", "think", "")]
    assert P.parse_search_replace("no edits here\n```python\nx = 1\n```") == []


@pytest.mark.parametrize("text, what", [
    ("<<<<<<< SEARCH [x]\na\n>>>>>>> REPLACE\n", "======="),
    ("<<<<<<< SEARCH\na\n<<<<<<< SEARCH\nb\n=======\nc\n>>>>>>> REPLACE", "======="),
    ("<<<<<<< SEARCH\na\n", "======="),
    ("<<<<<<< SEARCH\na\n=======\nb\n", "REPLACE"),
    ("<<<<<<< SEARCH\na\n=======\nb\n<<<<<<< SEARCH\nc\n=======\nd\n>>>>>>> REPLACE", "REPLACE"),
    ("<<<<<<< SEARCH [x]\n\n=======\nb\n>>>>>>> REPLACE", "empty search"),
])
def test_parse_malformed_blocks_raise(text, what):
    with pytest.raises(ValueError, match=what):
        P.parse_search_replace(text)


def test_parse_names_the_block_number():
    good = "<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n"
    with pytest.raises(ValueError, match="block 2 has no '======='"):
        P.parse_search_replace(good + "<<<<<<< SEARCH\nc\n")


def test_apply_edits_regions_order_and_errors():
    regions = {"optimization_philosophy": "be fast. be fast.",
               "optimization_strategies": "tile things",
               "common_pitfalls": "pitfall one\npitfall two",
               "analysis_guidance": "think first"}
    p = P.Prompt(regions, "parent")
    child = P.apply_search_replace(p, [
        ("common_pitfalls", "pitfall one", "pitfall one, sharper"),
        ("common_pitfalls", "one, sharper", "ONE"),  # sees the first edit's result
        ("optimization_philosophy", "be fast.", "be correct."),  # first occurrence only
        (None, "tile", "block")])  # no region: the first region containing the text
    assert dict(child.regions) == {**regions, "common_pitfalls": "pitfall ONE\npitfall two",
                                   "optimization_philosophy": "be correct. be fast.",
                                   "optimization_strategies": "block things"}
    assert child.parent_id == "parent" and child.id != p.id
    assert dict(p.regions) == regions  # the parent is unchanged
    assert P.apply_search_replace(p, [(None, "tile", "block")]).id == P.apply_search_replace(
        p, [("optimization_strategies", "tile", "block")]).id  # ids follow content
    # the text exists, but in another region
    with pytest.raises(ValueError, match="not found in region 'analysis_guidance'"):
        P.apply_search_replace(p, [("analysis_guidance", "tile", "x")])
    with pytest.raises(ValueError, match="unknown region 'tips'"):
        P.apply_search_replace(p, [("tips", "tile", "x")])
    with pytest.raises(ValueError, match="edit 2: SEARCH text not found in any region"):
        P.apply_search_replace(p, [(None, "tile", "x"), (None, "nowhere", "y")])
    with pytest.raises(TypeError, match="edits"):
        P.apply_search_replace(p, "<<<<<<< SEARCH")
    # parse + apply of a whole reply
    text = DIFF.replace("think", "think first")
    p2 = P.Prompt({**regions, "optimization_strategies": "    indented line\n  second"}, "p2")
    out = P.apply_search_replace(p2, P.parse_search_replace(text))
    assert out.region("analysis_guidance") == "" and out.region(
        "optimization_strategies") == "    new indented"


def test_apply_diff_to_source():
    src = "def kernel(x):\n    bm = 64\n    return x * 2\n"
    edits = P.parse_search_replace("<<<<<<< SEARCH\n    bm = 64\n=======\n    bm = 128\n"
                                   ">>>>>>> REPLACE")
    assert P.apply_diff(src, edits) == src.replace("64", "128")
    with pytest.raises(ValueError, match="edit 1: SEARCH text not found in the source"):
        P.apply_diff(src, [(None, "bm = 32", "")])


# ------------------------------------------------------------------------- the database


def test_fitness_is_max_child_score_and_due_every_two_samples():
    a, b = _prompt("a"), _prompt("b")
    db = P.add(P.prompt_database(a), b)
    rng = np.random.default_rng(zlib.crc32(b"scores"))
    best = {a.id: 0.0, b.id: 0.0}
    count = {a.id: 0, b.id: 0}
    dues, since = [], 0
    for t in range(1, 21):
        pid = (a.id, b.id)[int(rng.integers(2))]
        score = float(rng.normal(1.0, 2.0))  # some negative: fitness never drops below 0
        db = P.record(db, pid, score)
        best[pid], count[pid], since = max(best[pid], score), count[pid] + 1, since + 1
        assert db.fitness == (best[a.id], best[b.id]) and db.samples == (count[a.id],
                                                                          count[b.id])
        dues.append(P.due(db))
        assert P.due(db) == (since >= 2)
        if P.due(db):
            _, db = P.meta_step(db, jax.random.key(t))
            since = 0
            assert db.since_meta == 0 and not P.due(db)
    assert dues == [t % 2 == 0 for t in range(1, 21)]


def test_meta_parents_only_after_five_samples():
    a, b = _prompt("a"), _prompt("b")
    db = P.add(P.prompt_database(a), b)
    for _ in range(4):
        db = P.record(db, a.id, 1.0)
        db = P.record(db, b.id, 9.0)
        parents, _ = P.meta_step(db, jax.random.key(0))
        assert parents == ()  # nobody has 5 samples yet
    db = P.record(db, a.id, 0.5)  # a: 5 samples (fitness 1), b: 4 samples (fitness 9)
    for k in _keys("eligible", 20):
        parents, after = P.meta_step(db, k)
        assert parents == (a, a)  # batch 2, only a is eligible
        assert after.samples == db.samples and after.since_meta == 0
    db = P.record(db, b.id, 0.0)  # now both; b is much fitter
    seen = [p.id for k in _keys("both", 100) for p in P.meta_step(db, k)[0]]
    # P(a) per draw = 0.2 / 2 + 0.8 * softmax([1, 9])[0] = 0.10027
    pa = 0.1 + 0.8 / (1 + math.exp(8.0))
    assert abs(seen.count(a.id) / 200 - pa) < 4.5 * math.sqrt(pa * (1 - pa) / 200)


def test_probabilities_match_hand_computation_and_select_frequencies():
    prompts = [_prompt(str(i)) for i in range(4)]
    db = P.prompt_database(prompts[0], exploration=0.3, temperature=0.5)
    for p in prompts[1:]:
        db = P.add(db, p)
    for p, s in zip(prompts, (0.0, 0.5, 1.0, 1.5)):
        db = P.record(db, p.id, s)
    f = np.array([0.0, 0.5, 1.0, 1.5]) / 0.5
    expected = 0.3 / 4 + 0.7 * np.exp(f) / np.exp(f).sum()
    np.testing.assert_allclose(P.probabilities(db), expected, rtol=1e-12)
    n = 2000
    picks = [P.select(db, k).id for k in _keys("select", n)]
    freq = np.array([picks.count(p.id) for p in prompts]) / n
    sigma = np.sqrt(expected * (1 - expected) / n)
    assert np.all(np.abs(freq - expected) < 4.5 * sigma), (freq, expected)
    k = jax.random.key(7)
    assert P.select(db, k) == P.select(db, k)  # same key, same draw


def test_exploration_frequency_is_point_two():
    prompts = [_prompt(str(i)) for i in range(5)]
    db = P.prompt_database(prompts[0])
    for p in prompts[1:]:
        db = P.add(db, p)
    db = P.record(db, prompts[0].id, 60.0)  # softmax puts all its mass on prompt 0
    n = 3000
    other = sum(P.select(db, k).id != prompts[0].id for k in _keys("explore", n)) / n
    # only exploration (0.2) picks another prompt, uniformly: 0.2 * 4 / 5
    assert abs(other / 0.8 - 0.2) < 4.5 * math.sqrt(0.16 * 0.84 / n) / 0.8


def test_capacity_evicts_lowest_fitness_oldest_first():
    rng = np.random.default_rng(zlib.crc32(b"cap"))
    db = P.prompt_database(_prompt("seed"))
    ref = [("id-seed", 0.0)]  # a plain list model of the rule
    for i in range(70):
        p = _prompt(f"n{i}")
        db = P.add(db, p)
        if len(ref) >= 50:
            worst = min(range(len(ref)), key=lambda j: (ref[j][1], j))
            del ref[worst]
        ref.append((p.id, 0.0))
        score = float(rng.integers(0, 5))  # many ties
        db = P.record(db, p.id, score)
        ref[-1] = (p.id, max(0.0, score))
        assert len(db.prompts) == len(ref) <= 50
        assert [q.id for q in db.prompts] == [r[0] for r in ref]
        assert db.fitness == tuple(r[1] for r in ref)
    # duplicates (same id, or same texts) are not added
    assert P.add(db, db.prompts[3]) is db
    assert P.add(db, P.Prompt(db.prompts[3].regions, "other-id")) is db
    small = P.add(P.add(P.prompt_database(_prompt("a"), capacity=2), _prompt("b")), _prompt("c"))
    assert [p.id for p in small.prompts] == ["id-b", "id-c"]


def test_database_bad_input():
    db = P.prompt_database(_prompt("a"))
    with pytest.raises(ValueError, match="prompt_id 'nope'"):
        P.record(db, "nope", 1.0)
    with pytest.raises(ValueError, match="child_score"):
        P.record(db, "id-a", float("nan"))
    with pytest.raises(ValueError, match="key"):
        P.select(db, 0)
    with pytest.raises(ValueError, match="key"):
        P.meta_step(db, jax.random.split(jax.random.key(0), 2))
    with pytest.raises(ValueError, match="exploration"):
        P.prompt_database(_prompt("a"), exploration=1.5)
    with pytest.raises(ValueError, match="capacity"):
        P.prompt_database(_prompt("a"), capacity=0)
    with pytest.raises(ValueError, match="temperature"):
        P.prompt_database(_prompt("a"), temperature=0.0)
    with pytest.raises(TypeError, match="db"):
        P.due({"since_meta": 3})
    with pytest.raises(TypeError, match="prompt"):
        P.add(db, "text")


def test_meta_messages_show_regions_results_and_roundtrip():
    p = P.default_prompt(TASK)
    history = [(0.0, "SYNTAX ERROR SOURCE"), (5.8, "BEST KERNEL SOURCE"), (4.0, "wrong values")]
    system, user = (m["content"] for m in P.meta_messages(p, history))
    assert "<<<<<<< SEARCH [region_name]" in system and ">>>>>>> REPLACE" in system
    assert all(n in system for n in P.REGIONS)
    for name, text in p.regions:
        assert f"[{name}]\n{text}" in user
    assert "BEST KERNEL SOURCE" in user and "SYNTAX ERROR SOURCE" not in user
    assert "0, 5.8, 4" in user and "3 kernels" in user
    # a reply in the requested format applies to the prompt
    line = p.region("common_pitfalls").splitlines()[1]
    reply = f"<<<<<<< SEARCH [common_pitfalls]\n{line}\n=======\n{line} Always.\n>>>>>>> REPLACE"
    child = P.apply_search_replace(p, P.parse_search_replace(reply))
    assert child.region("common_pitfalls") == p.region("common_pitfalls").replace(
        line, line + " Always.")
    assert "No kernels" in P.meta_messages(p, [])[1]["content"]
    with pytest.raises(TypeError, match=r"history\[0\]"):
        P.meta_messages(p, [("x", 1.0)])
