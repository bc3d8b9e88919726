"""REL's LLM path: prompts carry what the task needs, ``evaluate`` over a local fake chat server
(pytest-httpserver) scores and groups by RC, retries 429/5xx, resumes from its cache, and the
experiment's LLM stage opens no socket when no LLM is configured."""

from __future__ import annotations

import itertools
import json
import re
import socket

import jax
import numpy as np
import pytest

from jaxpapers.agents import LLMError, OpenAICompatClient
from jaxpapers.benchmarks.rel import algebra as A
from jaxpapers.benchmarks.rel import bio, chem, llm

PATH = "/v1/chat/completions"


def _reply(content):
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}]}


def _client(httpserver, sleeps=None, **kwargs):
    return OpenAICompatClient(httpserver.url_for("/v1"), "toy", backoff_s=0.5,
                              sleep=(sleeps if sleeps is not None else []).append, **kwargs)


def _solve_rc_prompt(prompt: str, k: int, modulus: int = 10) -> int:
    """Answer an RC prompt from its text alone: the k-subset of columns that fits every complete
    row, applied to the query row; returns the 0-based candidate."""
    puzzle = prompt.split("Puzzle:\n")[1].split("\n\nCandidates:")[0]
    rows = [r.split() for r in puzzle.splitlines()]
    cands = [int(v) for v in re.findall(r"^Answer \d+: (\d+)$", prompt, re.M)]
    full = np.array([[int(v) for v in r] for r in rows[:-1]])
    fits = [s for s in itertools.combinations(range(full.shape[1] - 1), k)
            if np.all(full[:, list(s)].sum(1) % modulus == full[:, -1])]
    assert len(fits) == 1, fits  # unique=True: the rule can be read off the complete rows
    value = sum(int(rows[-1][c]) for c in fits[0]) % modulus
    return cands.index(value)


def _rc(key, k, num=20):
    """``num`` RC instances on 4 x 8 grids (drawn 20 at a time: one compiled program)."""
    d = A.generate_rc(key, 20, k=k, rows=4, cols=8)
    return {n: (v if n == "operands" else v[:num]) for n, v in d.items()}


def _items(key=0):
    keys = jax.random.split(jax.random.key(key), 4)
    items = []
    for k in (1, 3):
        batch = _rc(jax.random.fold_in(keys[0], k), k, num=3)
        items += llm.rc_items(batch)
    items += llm.biology_items([bio.generate_b1(jax.random.fold_in(keys[1], i), num_leaves=8,
                                                rc=2, num_sites=30, yes=i == 0)
                                for i in range(2)])
    items += llm.chemistry_items([chem.generate_c1(1, n=5),
                                  chem.generate_c3(2, formula="C4H10O", num_given=3)])
    return items


def _gold_text(item) -> str:
    """A reply a correct model could give (in our accepted formats)."""
    a = item["answer"]
    if item["task"] == "algebra":
        return f"The rule gives it. Answer {a + 1}"
    if item["task"] == "biology":
        return "No." if a["label"] == "No" else "Yes: " + ", ".join(f"taxon_{t}" for t in a["taxa"])
    if item["task"] == "chem_c1":
        return f"<{a}>"
    return ", ".join(a)


def test_prompts_carry_what_each_task_needs():
    batch = _rc(jax.random.key(3), 3)
    items = llm.rc_items(batch)
    assert [it["rc"] for it in items] == [3] * 20 and len({it["id"] for it in items}) == 20
    assert all(it["prompt"].split("Puzzle:")[1].count("?") == 1 and "modulo 10" in it["prompt"]
               for it in items)
    # the grid and the candidates in the text are enough to solve every item
    assert [_solve_rc_prompt(it["prompt"], 3) for it in items] == np.asarray(
        batch["target"]).tolist()
    # in-context examples: solved grids with the same rule, the query filled in
    examples = A.generate_rc(jax.random.key(4), 20, k=3, rows=4, cols=8,
                             operands=batch["operands"])
    examples = {n: (v if n == "operands" else v[:2]) for n, v in examples.items()}
    shot = llm.rc_items(batch, examples=examples)[0]
    assert shot["shots"] == 2 and shot["prompt"].count("Solved example") == 2
    assert shot["prompt"].split("Solved example 1:")[1].count("?") == 1  # the query only
    assert shot["id"] != items[0]["id"]
    other = _rc(jax.random.key(4), 3, num=2)
    if not np.array_equal(other["operands"], batch["operands"]):
        with pytest.raises(ValueError, match="examples must use the batch's operands"):
            llm.rc_items(batch, examples=other)
    b1 = bio.generate_b1(jax.random.key(5), num_leaves=8, rc=2, num_sites=30)
    (item,) = llm.biology_items([b1])
    for name, seq in b1["alignment"].items():
        assert f">taxon_{name}\n{seq}\n" in item["prompt"] + "\n"
    assert b1["newick"] in item["prompt"] and item["answer"]["taxa"] == b1["taxa"]
    c1 = chem.generate_c1(7, n=5)
    (item,) = llm.chemistry_items([c1])
    assert chem.solve_c1({"molecules": item["prompt"].split("\n\n")[1].split("\n")}) \
        == item["answer"] == c1["answer"]
    panels = llm.panel_items(A.our_items(jax.random.key(0), "a2", 2), "a2")
    assert panels[0]["prompt"].count("Panel ") == 8 and panels[0]["family"] == "a2"


def test_evaluate_scores_and_groups_by_rc(httpserver):
    items = _items()
    # the fake model answers correctly except on the RC family at k = 3 (it always says 1)
    replies = {it["prompt"]: ("Answer 1" if it["family"] == "rc" and it["rc"] == 3
                              else _gold_text(it)) for it in items}

    def handler(request):
        from werkzeug import Response
        body = json.loads(request.get_data())
        assert body["messages"][0]["role"] == "system" and body["temperature"] == 0.0
        return Response(json.dumps(_reply(replies[body["messages"][1]["content"]])),
                        content_type="application/json")

    httpserver.expect_request(PATH, method="POST").respond_with_handler(handler)
    out = llm.evaluate(_client(httpserver), items, max_tokens=64)
    assert len(httpserver.log) == len(items) and out["num_errors"] == 0
    k3 = [it for it in items if it["family"] == "rc" and it["rc"] == 3]
    assert out["accuracy"]["rc"] == {1: 1.0, 3: np.mean([it["answer"] == 0 for it in k3])}
    assert out["accuracy"]["b1"] == {2: 1.0}
    assert out["accuracy"]["c1"] == {2: 1.0} and out["accuracy"]["c3"] == {7: 1.0}
    assert json.loads(httpserver.log[0][0].get_data())["max_tokens"] == 64
    # the released semantics on the same replies: "No." has no integer, so it still scores
    official = llm.evaluate(_client(httpserver), items, official=True)
    assert official["accuracy"]["c1"] == {2: 1.0}


def test_retries_then_records_or_raises(httpserver):
    (item,) = _items()[:1]
    httpserver.expect_ordered_request(PATH).respond_with_data("busy", status=503)
    httpserver.expect_ordered_request(PATH).respond_with_data(
        "slow down", status=429, headers={"Retry-After": "2"})
    httpserver.expect_ordered_request(PATH).respond_with_json(_reply(_gold_text(item)))
    sleeps = []
    out = llm.evaluate(_client(httpserver, sleeps), [item])
    assert sleeps == [0.5, 2.0] and out["records"][0]["correct"] and out["num_errors"] == 0
    httpserver.clear()
    httpserver.expect_request(PATH).respond_with_data("down", status=500)
    out = llm.evaluate(_client(httpserver, max_retries=1), [item, item])
    assert out["num_errors"] == 2 and not any(r["correct"] for r in out["records"])
    assert out["records"][0]["error"].startswith("LLMError") and len(httpserver.log) == 4
    with pytest.raises(LLMError, match="HTTP 500"):
        llm.evaluate(_client(httpserver, max_retries=0), [item], on_error="raise")


def test_cache_resumes_and_skips_failures_and_torn_lines(httpserver, tmp_path):
    items = _items()[:4]
    cache = tmp_path / "replies.jsonl"
    calls = []

    def handler(request):
        from werkzeug import Response
        body = json.loads(request.get_data())
        calls.append(body)
        if len(calls) == 2:  # the second item fails (not cached: asked again next run)
            return Response("boom", status=400)
        return Response(json.dumps(_reply("Answer 1")), content_type="application/json")

    httpserver.expect_request(PATH).respond_with_handler(handler)
    first = llm.evaluate(_client(httpserver), items, cache=cache)
    assert first["num_errors"] == 1 and len(calls) == 4
    with open(cache, "a") as f:
        f.write('{"key": "torn')  # a run killed mid-write
    second = llm.evaluate(_client(httpserver), items, cache=cache)
    assert len(calls) == 5 and second["num_cached"] == 3 and second["num_errors"] == 0
    assert [r["response"] for r in second["records"]] == ["Answer 1"] * 4
    # a different request (temperature) is not served from the cache
    llm.evaluate(_client(httpserver), items[:1], cache=cache, temperature=0.7)
    assert len(calls) == 6


def test_bad_input():
    items = _items()[:1]

    class NoChat:
        pass

    with pytest.raises(ValueError, match="client"):
        llm.evaluate(NoChat(), items)
    with pytest.raises(ValueError, match="on_error"):
        llm.evaluate(object.__new__(OpenAICompatClient), items, on_error="ignore")
    with pytest.raises(ValueError, match=r"items\[0\]\['family'\]"):
        llm.evaluate(object.__new__(OpenAICompatClient), [{**items[0], "family": "zz"}])
    with pytest.raises(ValueError, match=r"items\[0\] lacks 'prompt'"):
        llm.evaluate(object.__new__(OpenAICompatClient),
                     [{k: v for k, v in items[0].items() if k != "prompt"}])
    with pytest.raises(ValueError, match="task"):
        llm.panel_items(A.our_items(jax.random.key(0), "a2", 1), "a9")
    with pytest.raises(ValueError, match=r"items\[0\]\['task'\]"):
        llm.chemistry_items([{"task": "C2", "seed": 0}])


def test_experiment_llm_stage_is_off_without_a_socket(monkeypatch):
    from experiments.rel import config, run

    monkeypatch.delenv("JAXPAPERS_LLM_BASE_URL", raising=False)

    def no_socket(*args, **kwargs):
        raise AssertionError("a socket was opened with the LLM off")

    monkeypatch.setattr(socket.socket, "connect", no_socket)
    monkeypatch.setattr(socket, "create_connection", no_socket)
    assert run.llm_stage(config.tiny(), jax.random.key(0)) is None


def test_experiment_llm_stage_over_http(httpserver, monkeypatch):
    """With the environment set, the stage builds every family's items and asks the server."""
    from experiments.rel import config, run

    httpserver.expect_request(PATH).respond_with_json(_reply("Answer 2. <No>"))
    monkeypatch.setenv("JAXPAPERS_LLM_BASE_URL", httpserver.url_for("/v1"))
    monkeypatch.setenv("JAXPAPERS_LLM_MODEL", "toy")
    cfg = config.tiny()
    out = run.llm_stage(cfg, jax.random.key(0))
    fams = {"rc", "b1", "c1", "c3"}
    assert set(out["accuracy"]) == fams and out["num_errors"] == 0
    assert set(out["accuracy"]["rc"]) == set(range(1, cfg.cols))
    assert set(out["accuracy"]["b1"]) == set(cfg.bio_rcs)
    assert len(httpserver.log) == out["num_items"] == len(run.llm_items(cfg, jax.random.key(0)))
