"""ExCyTIn judge: step-credit reward numbers, normalisation, matching rules, both judges."""

from __future__ import annotations

import json

import pytest

from jaxpapers.benchmarks.excytin.judge import (
    LLMJudge,
    answer_matches,
    judge,
    normalize_answer,
    split_items,
    step_credit_reward,
    step_iocs,
    step_is_correct,
)

T, F = True, False

QUESTION = (
    "A user on host vnevado-win10s clicked a malicious link from 254.241.243.229. "
    "Which IP address did the attacker sign in from afterwards?"
)
GOLD = "170.54.121.63"
SOLUTION = [
    "The user on host `vnevado-win10s` clicked a link hosted at `https://evil.example.com/`.",
    "The account `Nina Park` (Sid `S-1-5-21-1874151667-3554330288-105586563-1715`) was used.",
    "A hidden inbox rule was created for `raphaelt@vnevado.alpineskihouse.co`.",
    "A sign-in came from the malicious IP address `170.54.121.63`.",
]


# --- step_credit_reward -----------------------------------------------------------------------


def test_right_answer_earns_one():
    assert step_credit_reward(True, []) == 1.0
    assert step_credit_reward(True, [F, F, F]) == 1.0


@pytest.mark.parametrize(
    "steps, expected",
    [
        ([T, T, T, F], 0.4 + 0.16 + 0.064),
        ([F, F, T, F], 0.4),
        ([T, F, F, F], 0.064),
        ([T, T, T, T], 0.624),  # the answer step itself never counts
        ([], 0.0),
        ([T], 0.0),
        ([F], 0.0),
    ],
)
def test_step_credit_numbers(steps, expected):
    assert abs(step_credit_reward(False, steps) - expected) < 1e-12


def test_step_credit_issue_values_exact():
    assert abs(step_credit_reward(False, [T, T, T, F]) - 0.624) < 1e-12
    assert abs(step_credit_reward(False, (F, F, T, F), decay=0.4) - 0.4) < 1e-12


def test_step_credit_cap_and_other_decay():
    assert step_credit_reward(False, [T] * 8, decay=0.9) == 1.0  # 0.9 + 0.81 > 1
    assert step_credit_reward(False, [T, T, F], decay=1.0) == 1.0
    assert abs(step_credit_reward(False, [T, T, F], decay=0.5) - 0.75) < 1e-12
    assert abs(step_credit_reward(False, [T, F, F], decay=0.5) - 0.25) < 1e-12


@pytest.mark.parametrize("decay", [0, 0.0, -0.1, 1.5, float("nan"), float("inf"), True, "0.4"])
def test_bad_decay_rejected(decay):
    with pytest.raises(ValueError, match="decay"):
        step_credit_reward(False, [T, F], decay=decay)
    with pytest.raises(ValueError, match="decay"):
        judge(QUESTION, GOLD, SOLUTION, "x", decay=decay)
    with pytest.raises(ValueError, match="decay"):
        LLMJudge(FakeClient([]), decay=decay)


def test_string_verdicts_rejected():
    with pytest.raises(TypeError):
        step_credit_reward(False, ["True", "False"])


# --- normalisation and items ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("WS-01", "ws-01"),
        ("http://evil.com", "evil.com"),
        ("https://evil.com", "evil.com"),
        ("www.Evil.com", "evil.com"),
        ("https://www.evil.com/", "evil.com"),
        ("evil.com/path/", "evil.com/path"),
        ('  "`notepad.exe`."  ', "notepad.exe"),
        ("**10.0.0.5**", "10.0.0.5"),
        ("Nina   Park\n", "nina park"),
        ("see https://www.a.io/ and http://b.io/x/", "see a.io and b.io/x"),
    ],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_normalize_url_variants_match():
    gold = "http://ms175052280.orangecliff-f53f26fd.eastus.azurecontainerapps.io/"
    for sub in ("HTTPS://ms175052280.orangecliff-f53f26fd.eastus.azurecontainerapps.io",
                "the url was www.ms175052280.orangecliff-f53f26fd.eastus.azurecontainerapps.io/"):
        assert answer_matches(sub, gold)


def test_split_items():
    assert split_items("a, b; c\nd and e") == ["a", "b", "c", "d", "e"]
    assert split_items("* 1.2.3.4\n* 5.6.7.8\n3) 9.9.9.9") == ["1.2.3.4", "5.6.7.8", "9.9.9.9"]
    assert split_items("[1.1.1.1, 2.2.2.2, ....]") == ["1.1.1.1", "2.2.2.2"]
    assert split_items("  ") == []
    assert split_items("Brandon") == ["Brandon"]  # "and" only splits as a word


# --- answer_matches ---------------------------------------------------------------------------


def test_answer_token_boundaries():
    assert answer_matches("The host is WS-01.", "ws-01")
    assert answer_matches("10.0.0.5", "10.0.0.5")
    assert answer_matches("Attacker IP: 10.0.0.5:443", "10.0.0.5")
    assert not answer_matches("10.0.0.50", "10.0.0.5")
    assert not answer_matches("110.0.0.5", "10.0.0.5")
    assert not answer_matches("host ws-011", "ws-01")
    assert not answer_matches("host ws-01-backup", "ws-01")


def test_answer_hash_prefix():
    full = "d41d8cd98f00b204e9800998ecf8427e"
    assert answer_matches(f"SHA: {full.upper()}", full)
    assert not answer_matches(f"hash {full[:16]}", full)  # a prefix is not the hash
    assert not answer_matches(f"hash {full}", full[:16])  # nor the hash its prefix


def test_answer_official_examples():
    # official prompt, example 1 and 2
    assert answer_matches("notepad is running", "notepad.exe")
    assert not answer_matches("notepad.bat is running", "notepad.exe")
    sub = ("The hostnames of the target devices are: 'vnevado-win10s', 'vnevado-win10r', "
           "'vnevado-win11t', and 'vnevado-win11u'.")
    assert answer_matches(sub, "vnevado-win11u")
    assert answer_matches("Nina Park", "nina park")
    assert not answer_matches("Nina Parker", "Nina Park")


def test_answer_timestamps():
    gold = "2024-07-17 11:34:48.803827+00:00"
    assert answer_matches("It happened at 2024-07-17T11:34:48Z.", gold)
    assert answer_matches("2024-07-17 13:35:10+02:00", gold)  # same instant, other zone, +22 s
    assert not answer_matches("2024-07-17 12:34:48", gold)


def test_answer_list_rule():
    ips = [f"10.1.{i}.{i}" for i in range(1, 20)]
    gold = ips[3]
    assert answer_matches(", ".join(ips[:9]), gold)  # 9 items: right
    assert not answer_matches(", ".join(ips[:12]), gold)  # 12: in the 10-15 band, wrong
    assert not answer_matches(", ".join(ips[:10]), gold)
    assert answer_matches(", ".join(ips[:12]), gold, max_list=16)  # lenient reading
    assert not answer_matches(", ".join(ips[:16]), gold, max_list=16)  # > 15 always wrong
    hosts = [f"host-{c}" for c in "abcdefghijkl"]
    assert answer_matches("\n".join(f"- {h}" for h in hosts[:9]), "host-c")
    assert not answer_matches("\n".join(f"- {h}" for h in hosts[:12]), "host-c")


def test_answer_list_size_counts_indicators_not_commas():
    prose = ("After reviewing the logs, the alerts, the sign-ins, the mail flow, the rules, "
             "the processes, the files, the URLs, the devices, and the accounts, "
             "the attacker signed in from 170.54.121.63.")
    assert len(split_items(prose)) >= 10
    assert answer_matches(prose, GOLD)


def test_answer_bad_inputs():
    with pytest.raises(ValueError, match="gold"):
        answer_matches("x", "")
    with pytest.raises(ValueError, match="gold"):
        answer_matches("x", " `` ")
    with pytest.raises(ValueError, match="max_list"):
        answer_matches("x", "x", max_list=0)
    assert not answer_matches("", "x")
    assert not answer_matches(None, "x")


# --- steps ------------------------------------------------------------------------------------


def test_step_iocs():
    assert step_iocs(SOLUTION[1]) == ["Nina Park", "S-1-5-21-1874151667-3554330288-105586563-1715"]
    assert step_iocs("no indicator here") == []
    assert step_iocs("official form <10.0.0.5> here") == ["10.0.0.5"]
    step = "Step 1 - Malicious URL click (Field: Url, Value: http://a.io/). A user clicked."
    assert step_iocs(step) == ["http://a.io/"]


def test_step_is_correct():
    assert step_is_correct(SOLUTION[2], "RaphaelT@vnevado.alpineskihouse.co", QUESTION)
    assert step_is_correct(SOLUTION[0], "clicked www.evil.example.com", QUESTION)
    assert not step_is_correct(SOLUTION[2], "raphael", QUESTION)
    assert not step_is_correct("no indicator", "anything", QUESTION)
    assert not step_is_correct(SOLUTION[3], "170.54.121.6", QUESTION)


def test_step_ioc_in_question_gives_no_credit():
    # vnevado-win10s is in the question: naming it earns nothing, the URL of the same step does
    assert not step_is_correct(SOLUTION[0], "host vnevado-win10s", QUESTION)
    assert step_is_correct(SOLUTION[0], "host vnevado-win10s, url evil.example.com", QUESTION)
    step = "Mail from `254.241.243.229` was delivered."
    assert not step_is_correct(step, "254.241.243.229", QUESTION)
    assert step_is_correct(step, "254.241.243.229", "some other question")


# --- judge ------------------------------------------------------------------------------------


def test_judge_right_answer():
    out = judge(QUESTION, GOLD, SOLUTION, "The attacker used 170.54.121.63.")
    assert out == {"reward": 1.0, "answer_correct": True, "step_correct": []}


def test_judge_partial_credit():
    sub = "The attacker used Nina Park's account and raphaelt@vnevado.alpineskihouse.co; IP unknown"
    out = judge(QUESTION, GOLD, SOLUTION, sub)
    assert out["answer_correct"] is False
    assert out["step_correct"] == [F, T, T, F]
    assert abs(out["reward"] - (0.4 + 0.16)) < 1e-12
    out = judge(QUESTION, GOLD, SOLUTION, "evil.example.com", decay=0.5)
    assert out["step_correct"] == [T, F, F, F]
    assert abs(out["reward"] - 0.125) < 1e-12


@pytest.mark.parametrize("sub", [None, "", "   ", " `` "])
def test_judge_empty_submission(sub):
    out = judge(QUESTION, GOLD, SOLUTION, sub)
    assert out == {"reward": 0.0, "answer_correct": False, "step_correct": [F, F, F, F]}


def test_judge_bad_inputs():
    with pytest.raises(ValueError, match="gold"):
        judge(QUESTION, "", SOLUTION, "x")
    with pytest.raises(TypeError):
        judge(QUESTION, GOLD, "one string", "x")
    assert judge(QUESTION, GOLD, [], "wrong") == {
        "reward": 0.0, "answer_correct": False, "step_correct": []}


# --- LLMJudge ---------------------------------------------------------------------------------


class FakeClient:
    """Stands in for OpenAICompatClient: canned assistant replies, records the messages."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.calls = []

    def chat(self, messages, *, tools=None, **params):
        self.calls.append(messages)
        return {"role": "assistant", "content": self.replies.pop(0)}


def _steps_json(verdicts):
    return json.dumps({"steps": [{"step": i, "analysis": "ok", "correct": v}
                                 for i, v in enumerate(verdicts)]})


def test_llm_right_answer_one_call():
    client = FakeClient(['{"analysis": "matches", "correct": true}'])
    out = LLMJudge(client).judge(QUESTION, GOLD, SOLUTION, "maybe 170.54.121.63")
    assert out["reward"] == 1.0 and out["answer_correct"] and out["step_correct"] == []
    assert out["fallback"] is False and out["fallback_items"] == []
    assert len(client.calls) == 1
    system, user = client.calls[0]
    assert system["role"] == "system" and user["role"] == "user"
    assert QUESTION in user["content"] and GOLD in user["content"]
    assert "maybe 170.54.121.63" in user["content"]


def test_llm_wrong_answer_step_credit():
    client = FakeClient(['```json\n{"correct": false}\n```', _steps_json([T, T, T, F])])
    out = LLMJudge(client).judge(QUESTION, GOLD, SOLUTION, "something else")
    assert out["answer_correct"] is False
    assert out["step_correct"] == [T, T, T, F]
    assert abs(out["reward"] - 0.624) < 1e-12
    assert out["fallback"] is False
    steps_user = client.calls[1][1]["content"]
    for i, step in enumerate(SOLUTION):
        assert f"Step {i}: {step}" in steps_user


def test_llm_official_reply_formats():
    steps = {f"step_{i}": {"analysis": "-", "is_step_correct": str(v)}
             for i, v in enumerate([F, F, T, F])}
    client = FakeClient(["Analysis: no.\nIs_Answer_Correct: False", json.dumps(steps)])
    out = LLMJudge(client, decay=0.4).judge(QUESTION, GOLD, SOLUTION, "something else")
    assert out["step_correct"] == [F, F, T, F]
    assert abs(out["reward"] - 0.4) < 1e-12
    assert out["fallback"] is False


def test_llm_unparseable_answer_falls_back():
    # the deterministic judge finds the gold answer: right, no step call
    client = FakeClient(["I would say it is probably fine"])
    out = LLMJudge(client).judge(QUESTION, GOLD, SOLUTION, "IP 170.54.121.63")
    assert out["reward"] == 1.0 and out["answer_correct"] is True
    assert out["fallback"] is True and out["fallback_items"] == ["answer"]
    assert len(client.calls) == 1


def test_llm_unparseable_steps_fall_back():
    sub = "account raphaelt@vnevado.alpineskihouse.co"
    client = FakeClient(['{"correct": false}', "Step 0 looks right, step 1 not"])
    out = LLMJudge(client).judge(QUESTION, GOLD, SOLUTION, sub)
    assert out["step_correct"] == judge(QUESTION, GOLD, SOLUTION, sub)["step_correct"]
    assert out["step_correct"] == [F, F, T, F]
    assert abs(out["reward"] - 0.4) < 1e-12
    assert out["fallback"] is True
    assert out["fallback_items"] == ["step 0", "step 1", "step 2", "step 3"]


def test_llm_missing_step_falls_back_alone():
    sub = "account raphaelt@vnevado.alpineskihouse.co"
    partial = json.dumps({"steps": [{"step": 0, "correct": True}, {"step": 1, "correct": True},
                                    {"step": 3, "correct": False}]})
    client = FakeClient(['{"correct": "False"}', partial])
    out = LLMJudge(client).judge(QUESTION, GOLD, SOLUTION, sub)
    assert out["step_correct"] == [T, T, T, F]  # step 2 from the deterministic rule
    assert out["fallback_items"] == ["step 2"]
    assert abs(out["reward"] - 0.624) < 1e-12


def test_llm_empty_submission_and_no_content():
    client = FakeClient([])
    out = LLMJudge(client).judge(QUESTION, GOLD, SOLUTION, None)
    assert out["reward"] == 0.0 and out["step_correct"] == [F] * 4 and not client.calls

    class NoneContent(FakeClient):
        def chat(self, messages, *, tools=None, **params):
            self.calls.append(messages)
            return {"role": "assistant", "content": None}

    out = LLMJudge(NoneContent([])).judge(QUESTION, GOLD, SOLUTION, "nothing useful")
    assert out["reward"] == 0.0 and out["fallback_items"][0] == "answer"
    with pytest.raises(TypeError):
        LLMJudge(object())

