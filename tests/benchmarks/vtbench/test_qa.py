"""Tests of the DVM-Car QA twin on digits: generation rules, answers, scoring, solvers, and the
chat-model path against a fake OpenAI-compatible server (pytest-httpserver).

Statistical checks use binomial margins of 5 standard deviations (two-sided false-alarm rate
below 1e-6 per check) around the expectation derived in each test.
"""

from __future__ import annotations

import base64
import io
import json
import math

import numpy as np
import pytest
from PIL import Image
from werkzeug import Response

from jaxpapers.agents import OpenAICompatClient
from jaxpapers.benchmarks.vtbench import qa

PATH = "/v1/chat/completions"


@pytest.fixture(scope="module")
def samples():
    """Every mode, the default sizes and tasks, 25 base samples each (900 samples)."""
    return {m: qa.generate_qa(7, mode=m, num_samples=25) for m in qa.MODES}


def _by_base(mode_samples):
    """{base: {num_rows: table}} (the table is the same for every task)."""
    out: dict[int, dict[int, list]] = {}
    for s in mode_samples:
        out.setdefault(s["base"], {})[s["num_rows"]] = s["table"]
    return out


def _key(row):
    return tuple(row[c] for c in qa.COLUMNS)


def test_tables_are_nested_with_the_same_target_and_image(samples):
    positions = []
    for mode_samples in samples.values():
        positions += [[r["Row ID"] for r in s["table"]].index(s["target_row_id"])
                      for s in mode_samples]
        by_base = _by_base(mode_samples)
        for b, tables in by_base.items():
            keys = {n: [_key(r) for r in t] for n, t in tables.items()}
            assert sorted(keys) == [10, 20, 50] and all(len(keys[n]) == n for n in keys)
            for small, large in ((10, 20), (20, 50), (10, 50)):
                assert set(keys[small]) <= set(keys[large])
                # same relative (display) order
                assert [k for k in keys[large] if k in set(keys[small])] == keys[small]
            base = [s for s in mode_samples if s["base"] == b]
            assert len({s["target_row_id"] for s in base}) == 1
            assert all(s["image"] is base[0]["image"] for s in base)
            for t in tables.values():  # Row IDs are distinct 3-digit integers
                ids = [r["Row ID"] for r in t]
                assert len(set(ids)) == len(ids) and 100 <= min(ids) and max(ids) <= 999
    assert len(set(positions)) > 20  # the target is shown anywhere in the table


def test_exactly_one_row_matches_the_target_and_the_image_shows_it(samples):
    images, labels = qa._digits()
    for mode_samples in samples.values():
        for s in mode_samples:
            match = [r for r in s["table"]
                     if (r["digit"], r["colour"]) == (s["target_digit"], s["target_colour"])]
            assert len(match) == 1 and match[0]["Row ID"] == s["target_row_id"]
            c = qa.COLOURS.index(s["target_colour"])
            assert s["image"].shape == (8, 8, 3) and s["image"].dtype == np.float32
            np.testing.assert_array_equal(s["image"][:, :, c], images[s["image_index"]])
            assert not np.delete(s["image"], c, axis=2).any()
            assert labels[s["image_index"]] == s["target_digit"]


def _kind_counts(s):
    """(same digit other colour, same colour other digit, both differ) among distractors."""
    counts = [0, 0, 0]
    for r in s["table"]:
        if r["Row ID"] == s["target_row_id"]:
            continue
        same_d, same_c = r["digit"] == s["target_digit"], r["colour"] == s["target_colour"]
        assert not (same_d and same_c)
        counts[0 if same_d else 1 if same_c else 2] += 1
    return counts


@pytest.mark.parametrize("mode", qa.MODES)
def test_distractor_rules_per_mode(mode):
    sizes = (2, 3, 4, 5, 10, 20, 50)  # every remainder of (n - 1) % 3
    for s in qa.generate_qa(3, mode=mode, num_samples=10, sizes=sizes, tasks=("loc",)):
        d = s["num_rows"] - 1
        if mode == "digit":
            expected = [0, d, 0]
        elif mode == "colour":
            expected = [d, 0, 0]
        else:  # thirds; the remainder goes to kinds 0, then 1
            q, r = divmod(d, 3)
            expected = [q + (r > 0), q + (r > 1), q]
        assert _kind_counts(s) == expected


def _reference(s):
    """The gold answer recomputed from the table alone, with numpy masks."""
    t = s["table"]
    ids = np.array([r["Row ID"] for r in t])
    target = int(np.flatnonzero(ids == s["target_row_id"])[0])
    if s["task"] == "loc":
        return int(ids[target])
    values = np.array([r[s["attr"]] for r in t])
    if s["task"] == "attr":
        return int(values[target])
    digit = np.array([r["digit"] for r in t]) == t[target]["digit"]
    colour = np.array([r["colour"] for r in t]) == t[target]["colour"]
    mask = (digit | colour) & (values > values[target])
    if s["task"] == "count":
        return int(mask.sum())
    return float(np.round(values[mask].mean(), 4)) if mask.any() else 0.0


def test_answers_match_an_independent_reference_and_mean_columns_are_nonempty(samples):
    for mode_samples in samples.values():
        for s in mode_samples:
            assert s["answer"] == {"answer": [_reference(s)]}
            assert (s["attr"] is None) == (s["task"] == "loc")
            if s["task"] == "mean":  # drawn among columns with a non-empty set at 10 rows
                assert s["answer"]["answer"][0] > 0
    # the numbers are not degenerate: counts vary and some are 0
    counts = [s["answer"]["answer"][0] for s in samples["digit_colour"] if s["task"] == "count"]
    assert 0 in counts and len(set(counts)) > 5


def test_oracle_scores_every_task_mode_and_size(samples):
    for mode, mode_samples in samples.items():
        accuracy = qa.evaluate(qa.oracle, mode_samples)
        assert accuracy == {(mode, t, n): 1.0 for t in qa.TASKS for n in qa.SIZES}


def _truth(samples_list):
    """A perfect classifier: image bytes -> (digit, colour)."""
    lookup = {s["image"].tobytes(): (s["target_digit"], s["target_colour"])
              for s in samples_list}
    return lambda image: lookup[image.tobytes()]


def test_tool_solver_with_a_perfect_classifier_scores_everything(samples):
    for mode, mode_samples in samples.items():
        accuracy = qa.evaluate(qa.tool_solver(_truth(mode_samples)), mode_samples)
        assert set(accuracy.values()) == {1.0}


def test_tool_solver_takes_the_first_match_else_the_first_row():
    s = qa.make_sample(6, mode="colour", num_rows=50, task="loc")
    other = next(c for c in qa.COLOURS if c != s["target_colour"])
    rows = [r for r in s["table"] if r["colour"] == other]  # all have the target's digit
    assert len(rows) > 1
    solve = qa.tool_solver(lambda image: (s["target_digit"], other))
    assert json.loads(solve(s)) == {"answer": [rows[0]["Row ID"]]}
    absent = (s["target_digit"] + 1) % 10  # colour mode: no row has another digit
    solve = qa.tool_solver(lambda image: (absent, qa.COLOURS.index(other)))
    assert json.loads(solve(s)) == {"answer": [s["table"][0]["Row ID"]]}


def test_tool_solver_with_a_noisy_classifier_tracks_its_accuracy():
    p, num_rows, n = 0.6, 10, 1000
    data = qa.generate_qa(11, mode="digit_colour", num_samples=n, sizes=(num_rows,),
                          tasks=("loc",))
    truth, rng, right = _truth(data), np.random.default_rng(0), []
    pairs = [(d, c) for d in range(10) for c in qa.COLOURS]

    def noisy(image):
        true = truth(image)
        right.append(bool(rng.random() < p))
        if right[-1]:
            return true
        wrong = [q for q in pairs if q != true]
        return wrong[rng.integers(len(wrong))]

    solve = qa.tool_solver(noisy)
    correct = np.array([qa.score(s, solve(s)) for s in data])
    right = np.array(right)
    assert correct[right].all()  # a right prediction always finds the target row
    # a wrong one is correct only when it matches no row and the target is shown first:
    # probability <= 1 / num_rows (the display order is independent of the rows' content)
    assert correct[~right].mean() <= 1 / num_rows + 5 * math.sqrt(0.1 * 0.9 / (~right).sum())
    low, high = p, p + (1 - p) / num_rows
    assert low - 5 * math.sqrt(low * (1 - low) / n) <= correct.mean()
    assert correct.mean() <= high + 5 * math.sqrt(high * (1 - high) / n)


def test_blind_loc_accuracy_is_chance():
    n = 800
    data = qa.generate_qa(5, mode="digit", num_samples=n, tasks=("loc",))
    accuracy = qa.evaluate(qa.blind(0), data)
    for num_rows in qa.SIZES:
        chance = 1 / num_rows
        margin = 5 * math.sqrt(chance * (1 - chance) / n)
        assert abs(accuracy[("digit", "loc", num_rows)] - chance) <= margin
    assert qa.evaluate(qa.blind(3), data[:30]) == qa.evaluate(qa.blind(3), data[:30])


def test_scoring_reads_the_first_number():
    s = qa.make_sample(1, mode="digit", num_rows=20, task="loc")
    gold = s["answer"]["answer"][0]
    assert qa.score(s, json.dumps(s["answer"])) and qa.score(s, f"The Row ID is {gold}.")
    assert qa.score(s, f"{gold}.0") and qa.score(s, f'{{"answer": [{gold}, 3]}}')
    assert not qa.score(s, f"Row 3 has Row ID {gold}")  # the official parse: first number
    assert not qa.score(s, f"-{gold}") and not qa.score(s, str(gold + 1))
    assert not qa.score(s, "I do not know") and not qa.score(s, "") and not qa.score(s, None)
    assert qa.first_number("a 12,345 b") == 12.0 and qa.first_number("x -0.5") == -0.5


def test_mean_relative_tolerance_and_exact_count():
    s = next(x for x in qa.generate_qa(2, mode="digit_colour", num_samples=5)
             if x["task"] == "mean" and x["answer"]["answer"][0] % 1)
    gold = s["answer"]["answer"][0]
    for rel in (0.0, 0.99e-4, -0.99e-4):
        assert qa.score(s, json.dumps({"answer": [gold * (1 + rel)]}))
    for rel in (1e-3, -1e-3, 2e-4):
        assert not qa.score(s, json.dumps({"answer": [gold * (1 + rel)]}))
    assert qa.score(s, f"{gold:.4f}") and qa.score(s, f"{gold:.2f}")  # 1e-4 relative
    zero = dict(s, answer={"answer": [0.0]})  # a gold mean of 0 needs an exact 0
    assert qa.score(zero, "0.0000") and not qa.score(zero, "0.00001")
    count = dict(s, task="count", answer={"answer": [4]})
    assert qa.score(count, "4") and not qa.score(count, "4.0001")


def test_generation_is_deterministic_and_extends():
    def flat(data):
        return [(s["image"].tobytes(), s["table"], s["answer"], s["attr"], s["question"])
                for s in data]

    a = qa.generate_qa(4, mode="digit_colour", num_samples=3, images=[5, 9, 100])
    assert flat(a) == flat(qa.generate_qa(4, mode="digit_colour", num_samples=3,
                                          images=[5, 9, 100]))
    assert flat(a) != flat(qa.generate_qa(5, mode="digit_colour", num_samples=3,
                                          images=[5, 9, 100]))
    assert {s["image_index"] for s in a} <= {5, 9, 100}
    # a run with fewer bases or tasks is part of a longer one
    assert flat(qa.generate_qa(4, mode="digit_colour", num_samples=1, images=[5, 9, 100])) \
        == flat(a[:12])
    sub = qa.generate_qa(4, mode="digit_colour", num_samples=3, tasks=("mean",),
                         images=[5, 9, 100])
    assert flat(sub) == flat([s for s in a if s["task"] == "mean"])
    one = qa.make_sample(4, mode="digit_colour", num_rows=20, task="attr", images=[5, 9, 100])
    assert flat([one]) == flat([a[5]])


def test_markdown_prompt_and_image_url():
    s = qa.make_sample(0, mode="colour", num_rows=10, task="count")
    lines = qa.table_markdown(s["table"]).splitlines()
    assert len(lines) == 12 and lines[1].count("---") == len(qa.COLUMNS)
    assert [c.strip() for c in lines[0].strip("|").split("|")] == list(qa.COLUMNS)
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    assert [int(c[0]) for c in cells] == [r["Row ID"] for r in s["table"]]
    assert [float(c[-1]) for c in cells] == [r["engine_l"] for r in s["table"]]
    text = qa.prompt(s)
    assert text.startswith(s["question"]) and "\n".join(lines) in text
    assert text.endswith('{"answer": [<number>]}, with no other text.')
    url = qa.image_data_url(s["image"], scale=8)
    png = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert png.size == (64, 64) and png.mode == "RGB"
    pixels = np.asarray(png).astype(np.float32) / 255
    np.testing.assert_allclose(pixels[::8, ::8], s["image"], atol=0.5 / 255)
    np.testing.assert_array_equal(pixels[3::8, 5::8], pixels[::8, ::8])


def _gold_server(httpserver, data):
    """Answers each request with the gold reply of the sample whose prompt it carries."""
    gold = {qa.prompt(s): json.dumps(s["answer"]) for s in data}

    def handler(request):
        content = json.loads(request.get_data())["messages"][0]["content"]
        text = content if isinstance(content, str) else content[0]["text"]
        body = {"choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": gold[text]}}]}
        return Response(json.dumps(body), status=200, content_type="application/json")

    return handler


def _client(httpserver, sleeps, **kwargs):
    return OpenAICompatClient(httpserver.url_for("/v1"), "toy-vlm", sleep=sleeps.append,
                              **kwargs)


def test_evaluate_client_sends_the_image_and_scores(httpserver):
    data = qa.generate_qa(1, mode="digit_colour", num_samples=2, sizes=(10, 20))
    httpserver.expect_request(PATH, method="POST").respond_with_handler(
        _gold_server(httpserver, data))
    result = qa.evaluate_client(_client(httpserver, []), data, temperature=0.0)
    assert set(result["accuracy"].values()) == {1.0} and result["errors"] == {}
    assert all(result["correct"]) and len(httpserver.log) == len(data)
    body = json.loads(httpserver.log[0][0].get_data())
    assert body["model"] == "toy-vlm" and body["temperature"] == 0.0
    text, image = body["messages"][0]["content"]
    assert text == {"type": "text", "text": qa.prompt(data[0])}
    assert image == {"type": "image_url", "image_url": {"url": qa.image_data_url(data[0]["image"])}}
    # without the image: a plain string content
    httpserver.clear_log()
    result = qa.evaluate_client(_client(httpserver, []), data[:4], with_image=False)
    assert all(result["correct"])
    assert json.loads(httpserver.log[0][0].get_data())["messages"] == [
        {"role": "user", "content": qa.prompt(data[0])}]


def test_evaluate_client_retries_a_503_and_records_failures(httpserver):
    data = qa.generate_qa(2, mode="digit", num_samples=1, sizes=(10,), tasks=("attr", "loc"))
    httpserver.expect_ordered_request(PATH).respond_with_data("busy", status=503)
    httpserver.expect_ordered_request(PATH).respond_with_handler(_gold_server(httpserver, data))
    sleeps: list = []
    result = qa.evaluate_client(_client(httpserver, sleeps, max_retries=2), data[:1])
    httpserver.check_assertions()
    assert result["correct"] == [True] and result["errors"] == {} and len(sleeps) == 1
    httpserver.clear()
    httpserver.expect_request(PATH).respond_with_data("down", status=500)
    result = qa.evaluate_client(_client(httpserver, [], max_retries=1), data)
    assert result["correct"] == [False, False] and result["replies"] == [None, None]
    assert sorted(result["errors"]) == [0, 1] and "HTTP 500" in result["errors"][0]
    assert result["accuracy"] == {("digit", "attr", 10): 0.0, ("digit", "loc", 10): 0.0}


@pytest.mark.parametrize("kwargs, name", [
    (dict(mode="color"), "mode"), (dict(tasks=("sum",)), "tasks"), (dict(tasks="loc"), "tasks"),
    (dict(tasks=("loc", "loc")), "tasks"), (dict(sizes=(1, 10)), "sizes"),
    (dict(sizes=(10, 10)), "sizes"), (dict(sizes=()), "sizes"), (dict(sizes=(901,)), "sizes"),
    (dict(num_samples=0), "num_samples"), (dict(seed=-1), "seed"), (dict(seed=1.5), "seed"),
    (dict(images=[0, 1797]), "images"), (dict(images=[]), "images"),
    (dict(images=[0.5]), "images")])
def test_generate_qa_rejects_bad_input(kwargs, name):
    args = dict(seed=0, mode="digit", num_samples=1) | kwargs
    with pytest.raises(ValueError, match=name):
        qa.generate_qa(args.pop("seed"), **args)


def test_other_entry_points_reject_bad_input():
    with pytest.raises(ValueError, match="num_rows"):
        qa.make_sample(0, mode="digit", num_rows=15, task="loc")
    with pytest.raises(ValueError, match="num_rows"):
        qa.make_sample(0, mode="digit", num_rows=1, task="loc")
    with pytest.raises(ValueError, match="task"):
        qa.make_sample(0, mode="digit", num_rows=10, task="where")
    s = qa.make_sample(0, mode="digit", num_rows=10, task="loc")
    with pytest.raises(ValueError, match="classify"):
        qa.tool_solver("not callable")
    with pytest.raises(ValueError, match="digit"):
        qa.tool_solver(lambda image: (10, "red"))(s)
    with pytest.raises(ValueError, match="colour"):
        qa.tool_solver(lambda image: (1, "purple"))(s)
    with pytest.raises(ValueError, match="seed"):
        qa.blind(-2)
    with pytest.raises(ValueError, match="client"):
        qa.evaluate_client(object(), [s])
    with pytest.raises(ValueError, match="solver"):
        qa.evaluate(None, [s])
    with pytest.raises(ValueError, match="task"):
        qa.score(dict(s, task="sum"), "1")
    with pytest.raises(ValueError, match="image"):
        qa.image_data_url(np.zeros((8, 8)))
    with pytest.raises(ValueError, match="table"):
        qa.table_markdown([])
