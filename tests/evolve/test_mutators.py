"""Tests of jaxpapers.evolve.mutators: scripted variants (reproducible, all before repeats),
templates (no repeat until the grid is exhausted), variant loading, and the LLM mutator over a
fake chat server (pytest-httpserver): what the requests hold (never the held-out shapes or the
API key), how replies are parsed, and retries through the shared client."""

from __future__ import annotations

import itertools
import json
import math
import pathlib
import sys
import zlib

import jax
import numpy as np
import pytest

from jaxpapers.agents import LLMError, OpenAICompatClient
from jaxpapers.core.rng import numpy_seed
from jaxpapers.evolve import mutators as M
from jaxpapers.evolve import prompts as P

PATH = "/v1/chat/completions"
TASK = "y = relu(x @ w); x [M, K], w [K, N], bf16"
SEEN = "seen_square: x (256, 256), w (256, 256)"
HELD_OUT = "heldout_tall_skinny"  # a held-out shape name: must never reach the server
API_KEY = "sk-test-SECRET-4711"
PARENT = M.Candidate("def kernel(x, w, *, interpret, platform, bm=64):\n"
                     "    bm = 64\n    return x @ w\n", {"bm": 64}, "scripted:base")


def _keys(name: str, n: int) -> list:
    return list(jax.random.split(jax.random.key(zlib.crc32(name.encode())), n))


def _run(mutator, keys):
    """Proposes once per key, updating the mutator's state after each proposal."""
    out = []
    for k in keys:
        c = mutator.propose(k, PARENT)
        mutator = mutator.update(c)
        out.append(c)
    return out, mutator


def test_candidate_freezes_params():
    c = M.Candidate("src", {"bm": 64, "bn": 128}, "template")
    assert c.params == (("bm", 64), ("bn", 128)) and dict(c.params) == {"bm": 64, "bn": 128}
    assert c == M.Candidate("src", [("bm", 64), ("bn", 128)], "template")
    with pytest.raises(TypeError, match="source"):
        M.Candidate(b"src")
    with pytest.raises(TypeError, match="params"):
        M.Candidate("src", 3)


# ----------------------------------------------------------------------- scripted variants

VARIANTS = {f"v{i}": f"SOURCE_{i} = {i}\n" for i in range(5)}


def test_scripted_covers_every_variant_before_repeating_and_is_reproducible():
    for name in ("a", "b", "c", "d"):
        keys = _keys(name, 12)
        first, state = _run(M.ScriptedMutator(VARIANTS), keys)
        names = [c.origin.removeprefix("scripted:") for c in first]
        assert sorted(names[:5]) == sorted(VARIANTS)  # all five, no repeat
        assert all(n in VARIANTS for n in names[5:])
        assert [c.source for c in first] == [VARIANTS[n] for n in names]
        assert state.proposed == tuple(names)
        again, _ = _run(M.ScriptedMutator(VARIANTS), keys)
        assert again == first  # same keys, same proposals
    # the choice depends on the key and the state only: a fresh key for the same state
    m = M.ScriptedMutator(VARIANTS, proposed=("v0", "v3"))
    picks = {m.propose(k).origin for k in _keys("state", 30)}
    assert picks == {"scripted:v1", "scripted:v2", "scripted:v4"}


def test_scripted_first_pick_is_uniform():
    n = 1000
    firsts = [M.ScriptedMutator(VARIANTS).propose(k).origin for k in _keys("uniform", n)]
    counts = np.array([firsts.count(f"scripted:{v}") for v in VARIANTS])
    p = 1 / len(VARIANTS)
    assert np.all(np.abs(counts / n - p) < 4.5 * math.sqrt(p * (1 - p) / n)), counts


def test_scripted_cycle_and_validation():
    out, _ = _run(M.ScriptedMutator(VARIANTS, order="cycle"), _keys("cycle", 12))
    assert [c.origin for c in out] == [f"scripted:v{i % 5}" for i in range(12)]
    m = M.ScriptedMutator(VARIANTS)
    assert m.update(M.Candidate("x", (), "llm:code")) is m  # not ours: no change
    with pytest.raises(ValueError, match="order"):
        M.ScriptedMutator(VARIANTS, order="sorted")
    with pytest.raises(ValueError, match="variants"):
        M.ScriptedMutator({})
    with pytest.raises(ValueError, match="proposed"):
        M.ScriptedMutator(VARIANTS, proposed=("zz",))
    with pytest.raises(ValueError, match="key"):
        m.propose(123)


def test_load_variants_reads_package_data(tmp_path, monkeypatch):
    pkg = "kf_variants_fixture"
    root = tmp_path / pkg
    (root / "matmul").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "__init__.py").write_text("")
    (root / "matmul" / "__init__.py").write_text("IGNORED = 1\n")
    (root / "matmul" / "_helpers.py").write_text("IGNORED = 2\n")
    (root / "matmul" / "notes.txt").write_text("not a variant")
    (root / "matmul" / "MANIFEST.toml").write_text("[tiled]\nlevel = 5\n")
    (root / "matmul" / "tiled.pysrc").write_text("def kernel():\n    return 'tiled'\n")
    (root / "matmul" / "naive.py").write_text("def kernel():\n    return 'naive'\n")
    (root / "dup").mkdir()
    (root / "dup" / "a.py").write_text("A = 1\n")
    (root / "dup" / "a.pysrc").write_text("A = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        got = M.load_variants("matmul", package=pkg)
        assert got == {"naive": "def kernel():\n    return 'naive'\n",
                       "tiled": "def kernel():\n    return 'tiled'\n"}
        assert list(got) == ["naive", "tiled"]
        c = M.ScriptedMutator(got, order="cycle").propose(jax.random.key(0))
        assert c.source == got["naive"]
        with pytest.raises(ValueError, match="'softmax'"):
            M.load_variants("softmax", package=pkg)
        with pytest.raises(ValueError, match="'empty'.*no .pysrc file"):
            M.load_variants("empty", package=pkg)
        with pytest.raises(ValueError, match="'a' exists as .py and .pysrc"):
            M.load_variants("dup", package=pkg)
    finally:
        sys.modules.pop(pkg, None)
    with pytest.raises(ValueError, match="'matmul'.*not found"):
        M.load_variants("matmul", package="kf_no_such_package")
    with pytest.raises(ValueError, match="task"):
        M.load_variants("../etc")


def test_load_variants_of_the_package():
    """The package's own variant folders (written elsewhere) load: every .pysrc, by stem."""
    root = pathlib.Path(M.__file__).parent / "variants"
    tasks = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if not tasks:
        pytest.skip("no variants in jaxpapers/evolve/variants yet")
    for task in tasks:
        files = {p.stem: p.read_text() for p in (root / task).glob("*.pysrc")}
        assert M.load_variants(task) == dict(sorted(files.items())), task


# ---------------------------------------------------------------------------- templates

TEMPLATE = """CONFIG = {"bm": {bm}, "bn": {bn}}

def kernel(x, *, interpret, platform, dtype="{dtype}"):
    name = f"{x}"  # braces that are not placeholders stay
    return {bm} * {bn}
"""
SPACE = {"bm": [32, 64, 128], "bn": [64, 128], "dtype": ["f32", "bf16"]}


def test_template_fills_only_placeholders():
    t = M.TemplateMutator(TEMPLATE, SPACE)
    src = t.fill({"bm": 64, "bn": 128, "dtype": "bf16"})
    assert src == (TEMPLATE.replace("{bm}", "64").replace("{bn}", "128")
                   .replace("{dtype}", "bf16"))
    assert 'f"{x}"' in src and "{bm}" not in src
    assert t.size == 12


def test_template_never_repeats_until_exhausted():
    grid = {tuple(p) for p in itertools.product(*SPACE.values())}
    for name in ("t1", "t2", "t3"):
        keys = _keys(name, 20)
        out, state = _run(M.TemplateMutator(TEMPLATE, SPACE), keys)
        points = [tuple(dict(c.params)[n] for n in SPACE) for c in out]
        assert set(points[:12]) == grid and len(set(points[:12])) == 12
        assert all(p in grid for p in points[12:])
        assert all(c.origin == "template" and c.source == state.fill(dict(c.params))
                   for c in out)
        assert len(state.seen) == 12
        assert _run(M.TemplateMutator(TEMPLATE, SPACE), keys)[0] == out  # reproducible
    # the first point is uniform over the grid
    n = 1200
    firsts = [M.TemplateMutator(TEMPLATE, SPACE).propose(k).params for k in _keys("tu", n)]
    counts = np.array([firsts.count(tuple(zip(SPACE, p))) for p in sorted(grid)])
    p = 1 / 12
    assert np.all(np.abs(counts / n - p) < 4.5 * math.sqrt(p * (1 - p) / n)), counts


def test_template_validation():
    with pytest.raises(ValueError, match=r"placeholder \{bk\}"):
        M.TemplateMutator(TEMPLATE, {**SPACE, "bk": [16]})
    with pytest.raises(ValueError, match=r"space\['bm'\] must hold distinct"):
        M.TemplateMutator(TEMPLATE, {**SPACE, "bm": [32, 32]})
    with pytest.raises(ValueError, match="space"):
        M.TemplateMutator(TEMPLATE, {})
    t = M.TemplateMutator(TEMPLATE, SPACE)
    assert t.update(M.Candidate("x", {"bm": 999, "bn": 64, "dtype": "f32"}, "template")) is t


# ---------------------------------------------------------------------- the LLM mutator


def _reply(content):
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}]}


def _client(httpserver, sleeps=None, **kwargs):
    return OpenAICompatClient(httpserver.url_for("/v1"), "toy", backoff_s=0.5,
                              sleep=(sleeps if sleeps is not None else []).append, **kwargs)


def _bodies(httpserver):
    return [request.get_data(as_text=True) for request, _ in httpserver.log]


CODE = "def kernel(x, w, *, interpret, platform, bm=128):\n    return x @ w\n"


def test_requests_hold_seen_shapes_only_and_never_the_key(httpserver):
    httpserver.expect_request(PATH, method="POST").respond_with_json(
        _reply(f"Analysis.\n```python\n{CODE}```\nDone."))
    mutator = M.LLMMutator(_client(httpserver, api_key=API_KEY), task_description=TASK,
                           seen_shapes_text=SEEN, model="kernel-model", temperature=0.3,
                           forbidden=(HELD_OUT, API_KEY), params={"max_tokens": 900})
    insp = M.Candidate("INSPIRATION_SOURCE = 1\n", (), "scripted:x")
    prompt = P.apply_search_replace(P.default_prompt(TASK), [
        ("common_pitfalls", "mask or pad", "MASK or pad")])
    key = jax.random.key(5)
    c = mutator.propose(key, PARENT, [insp], prompt, feedback="score 4.2 on seen_square")
    assert c == M.Candidate(CODE, (), "llm:code")
    mutator.propose(jax.random.key(6), None)  # the first generation: no parent
    (r1, _), (r2, _) = httpserver.log
    raw = _bodies(httpserver)
    for text in raw:
        assert HELD_OUT not in text and API_KEY not in text
    assert r1.headers["Authorization"] == f"Bearer {API_KEY}"  # the key is only a header
    body = json.loads(raw[0])
    assert body["model"] == "kernel-model" and body["temperature"] == 0.3
    assert body["max_tokens"] == 900 and body["seed"] == numpy_seed(key)
    user = body["messages"][1]["content"]
    for needle in (TASK, SEEN, PARENT.source, "INSPIRATION_SOURCE", "score 4.2", "MASK or pad"):
        assert needle in user, needle
    assert "None yet" in json.loads(raw[1])["messages"][1]["content"]
    # a held-out name that slips into the feedback is refused before anything is sent
    with pytest.raises(ValueError, match=r"forbidden\[0\]"):
        mutator.propose(key, PARENT, feedback=f"slow on {HELD_OUT}")
    assert len(httpserver.log) == 2
    assert API_KEY not in repr(mutator)


DIFF_REPLY = """I will widen the block.
```diff
<<<<<<< SEARCH
    bm = 64
=======
    bm = 128
>>>>>>> REPLACE
```
"""


@pytest.mark.parametrize("reply, parent, source, origin", [
    ("```python\nA = 1\n```\ntext\n```py\nB = 2\n```\n```json\n{}\n```", PARENT, "B = 2\n",
     "llm:code"),
    ("plain fence:\n```\nC = 3\n```", PARENT, "C = 3\n", "llm:code"),
    (DIFF_REPLY, PARENT, PARENT.source.replace("    bm = 64\n", "    bm = 128\n"), "llm:diff"),
    (DIFF_REPLY.replace("bm = 64", "bm = 32"), PARENT, None, "llm:unparsed (edit 1: SEARCH"),
    (DIFF_REPLY, None, None, "llm:unparsed (a diff but no parent"),
    ("I cannot do that.", PARENT, None, "llm:unparsed (no code block"),
    ("<<<<<<< SEARCH\nx\n", PARENT, None, "llm:unparsed (SEARCH block 1 has no"),
])
def test_reply_parsing(httpserver, reply, parent, source, origin):
    httpserver.expect_request(PATH, method="POST").respond_with_json(_reply(reply))
    mutator = M.LLMMutator(_client(httpserver), task_description=TASK, seen_shapes_text=SEEN)
    c = mutator.propose(jax.random.key(0), parent)
    assert c.origin.startswith(origin)
    assert c.source == (reply if source is None else source)  # unparsed: the raw reply
    assert mutator.update(c) is mutator


def test_extract_code_prefers_the_last_python_block():
    assert M.extract_code("```python\nA\n```\n```python\nB\n```") == "B\n"
    assert M.extract_code("```\nU\n```\n```python\nP\n```\n```\nV\n```") == "P\n"
    assert M.extract_code(DIFF_REPLY) is None and M.extract_code("no code") is None


def test_retries_through_the_shared_client(httpserver):
    httpserver.expect_ordered_request(PATH).respond_with_data("busy", status=503)
    httpserver.expect_ordered_request(PATH).respond_with_json(_reply(f"```python\n{CODE}```"))
    httpserver.expect_ordered_request(PATH).respond_with_data(
        "slow down", status=429, headers={"Retry-After": "2"})
    httpserver.expect_ordered_request(PATH).respond_with_json(_reply("```python\nX = 1\n```"))
    sleeps = []
    mutator = M.LLMMutator(_client(httpserver, sleeps), task_description=TASK)
    assert mutator.propose(jax.random.key(0), PARENT).source == CODE
    assert sleeps == [0.5]  # backoff_s * 2**0 after the 503
    assert mutator.propose(jax.random.key(1), PARENT).source == "X = 1\n"
    assert sleeps == [0.5, 2.0]  # Retry-After honoured
    httpserver.check_assertions()
    bodies = _bodies(httpserver)
    assert len(bodies) == 4 and bodies[0] == bodies[1]  # the retry resends the same request
    httpserver.clear()
    httpserver.expect_request(PATH).respond_with_data("down", status=500)
    failing = M.LLMMutator(_client(httpserver, max_retries=1), task_description=TASK)
    with pytest.raises(LLMError, match="HTTP 500"):
        failing.propose(jax.random.key(0), PARENT)
    assert len(httpserver.log) == 2


def test_from_env_is_off_by_default_and_guards_the_key(httpserver):
    assert M.LLMMutator.from_env({}, task_description=TASK) is None
    env = {"JAXPAPERS_LLM_BASE_URL": httpserver.url_for("/v1"), "JAXPAPERS_LLM_MODEL": "m",
           "JAXPAPERS_LLM_API_KEY": API_KEY}
    mutator = M.LLMMutator.from_env(env, task_description=TASK, seen_shapes_text=SEEN,
                                    forbidden=[HELD_OUT], client_kwargs={"max_retries": 0})
    assert mutator.forbidden == (HELD_OUT, API_KEY) and API_KEY not in repr(mutator)
    httpserver.expect_request(PATH).respond_with_json(_reply("```python\nY = 2\n```"))
    assert mutator.propose(jax.random.key(0), PARENT).source == "Y = 2\n"
    (request, _), = httpserver.log
    assert API_KEY not in request.get_data(as_text=True)
    with pytest.raises(ValueError, match=r"forbidden\[1\]"):
        mutator.propose(jax.random.key(0), M.Candidate(f"KEY = '{API_KEY}'"))
    with pytest.raises(ValueError, match="client"):
        M.LLMMutator(object(), task_description=TASK)
    with pytest.raises(ValueError, match="task_description"):
        M.LLMMutator(mutator.client, task_description=" ")
