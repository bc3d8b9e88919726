"""ExCyTIn-Bench judging: the answer check, the per-step check and the decayed step-credit reward.

Mirrors ``secgym/evaluator.py`` of github.com/microsoft/SecRL (``LLMEvaluator``):

1. the final answer is judged against the gold answer (official: GPT-4o with the fuzzy answer-check
   prompt); a right answer earns reward 1 and the solution is not looked at;
2. otherwise every step of the gold solution is judged (does the submitted answer contain the
   step's indicator of compromise, one not already given in the question?), and the verdicts are
   turned into partial credit by :func:`step_credit_reward`.

Two judges are offered: :func:`judge`, deterministic string rules that approximate the official
prompt, and :class:`LLMJudge`, which asks a chat model (prompts written here, paraphrasing the
official rules) and falls back to the deterministic rules for any verdict it cannot parse.

The question text given to either judge should be the full question the agent saw: the official
evaluator uses ``context + " " + question`` of a question record.

>>> round(step_credit_reward(False, [True, True, True, False]), 6)
0.624
>>> answer_matches("The host is WS-01.", "ws-01"), answer_matches("10.0.0.50", "10.0.0.5")
(True, False)
>>> judge("Which IP?", "10.0.0.5", ["Host `ws-01` was hit.", "It called `10.0.0.5`."],
...       "ws-01")["reward"]
0.4
"""

from __future__ import annotations

import datetime as _dt
import json
import numbers
import re
from collections.abc import Sequence
from typing import Any

__all__ = [
    "step_credit_reward",
    "normalize_answer",
    "split_items",
    "answer_matches",
    "step_iocs",
    "step_is_correct",
    "judge",
    "LLMJudge",
]

DEFAULT_DECAY = 0.4  # official: discount_factor = 0.4 in LLMEvaluator.check_solution
TIME_TOLERANCE_S = 60.0  # "within a reasonable time frame" of a gold timestamp, read as 1 min

# characters peeled off both ends of an answer or a list item
_EDGE = " \t\r\n\"'`\u201c\u201d\u2018\u2019.,;:!?()[]{}<>*"
# characters that continue a token when a letter or digit lies on their far side
# ("10.0.0.5" inside "10.0.0.5.7", "win11" inside "win11-b", "bob" inside "bob@corp.com")
_CONNECTORS = ".-@"
_FILE_EXT = re.compile(
    r"(.{3,})\.(?:exe|dll|sys|ps1|psm1|bat|cmd|vbs|js|hta|msi|scr|lnk|jar|py|sh|zip|rar|7z|iso"
    r"|docx?|docm|xlsx?|xlsm|pptx?|pdf|txt|tmp|dat|bin|html?)"
)
_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[t ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?"
    r"\s*(z|utc|[+-]\d{2}:?\d{2})?"
)
# indicator shapes: when the gold answer has one of them, the size of a submitted enumeration is
# the number of distinct indicators of that shape (so commas in prose do not make a "list")
_KINDS = (
    re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)"),  # IPv4
    re.compile(r"(?<![\w-])[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}(?![\w-])"),  # GUID
    re.compile(r"(?<!\w)[0-9a-f]{32,128}(?!\w)"),  # MD5 / SHA-1 / SHA-256 hash
    re.compile(r"(?<![\w-])s-1-\d+(?:-\d+)+(?![\w-])"),  # Windows SID
    re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+(?![\w-])"),  # e-mail / UPN
)


# ---------------------------------------------------------------------------------------------
# reward


def _check_decay(decay: Any) -> float:
    if isinstance(decay, bool) or not isinstance(decay, numbers.Real):
        raise ValueError(f"decay must be a number in (0, 1], got {decay!r}")
    decay = float(decay)
    if not (0.0 < decay <= 1.0):  # also rejects nan
        raise ValueError(f"decay must be in (0, 1], got {decay!r}")
    return decay


def step_credit_reward(
    answer_correct: bool, step_correct: Sequence[bool], *, decay: float = DEFAULT_DECAY
) -> float:
    """Reward of one submission: 1 if the answer is right, else decayed credit for solution steps.

    Mirrors the reward loop of ``LLMEvaluator.check_solution``: the step verdicts (in solution
    order, the last step being the one that names the answer) are reversed, the first reversed
    verdict (the answer step itself) is skipped, and the ``k``-th step before the answer step
    earns ``decay**k`` when it is right (0.4, 0.16, 0.064, ... for the official 0.4); the total
    is capped at 1 (reachable only for ``decay > 0.5``).

    So ``[T, T, T, F] -> 0.4 + 0.16 + 0.064 = 0.624``, ``[F, F, T, F] -> 0.4`` and ``[]`` or
    ``[T]`` (no step before the answer step) ``-> 0``.

    Differences from the official code, none of which changes these numbers: there the factor is
    hard-coded to 0.4 (here ``decay``, any value in (0, 1]); there a verdict counts only if it is
    the string ``"True"`` from the LLM's JSON and the steps are taken in the JSON's key order;
    here verdicts are booleans in solution order. (A comment next to the official loop still
    quotes numbers for an older factor of 0.3.)

    Raises ValueError if ``decay`` is not in (0, 1] (nan included); TypeError if a verdict is a
    string (``"False"`` would otherwise count as true).
    """
    decay = _check_decay(decay)
    if answer_correct:
        return 1.0
    verdicts = list(step_correct)
    for v in verdicts:
        if isinstance(v, str):
            raise TypeError(f"step_correct must hold booleans, got the string {v!r}")
    total = 0.0
    weight = decay
    for right in reversed(verdicts[:-1]):  # reversed, the answer step skipped
        if right:
            total += weight
            if total >= 1.0:
                return 1.0
        weight *= decay
    return total


# ---------------------------------------------------------------------------------------------
# normalisation and matching


def normalize_answer(text: Any) -> str:
    """Canonical form used for every comparison: the official prompt's "ignore" rules.

    Lower-cases (ignore the case of the text), drops ``http://`` / ``https://`` and a ``www.``
    starting a token, and a ``/`` ending a token (ignore http/https, www and trailing slashes in
    URLs), peels quotes, backticks, brackets, ``*`` and punctuation off both ends, and collapses
    runs of whitespace to one space.

    >>> normalize_answer("  `HTTPS://www.Evil.com/`. ")
    'evil.com'
    """
    s = str(text).lower()
    s = re.sub(r"https?://", "", s)
    s = re.sub(r"(?<![\w.-])www\.(?=\w)", "", s)
    s = re.sub(r"/+(?=$|[\s,;)\]}>\"'`*])", "", s)
    s = " ".join(s.split())
    while True:
        stripped = s.strip(_EDGE).rstrip("/")
        if stripped == s:
            return s
        s = stripped


_BULLET = re.compile(r"^\s*(?:[-*\u2022+]|\d+[.)])\s+")
_SEPARATORS = re.compile(r"[,;\n]|\s+and\s+", re.IGNORECASE)


def split_items(text: str) -> list[str]:
    """The items of a submitted answer read as an enumeration (for the official list-size rule).

    Splits at newlines, commas, semicolons and the word ``and``, removes bullet markers (``-``,
    ``*``, ``\u2022``, ``1.``, ``1)``) starting a line, peels quotes, brackets and punctuation off
    each item and drops empty ones. Items keep their case and spelling.

    >>> split_items("Hosts: 'a', 'b' and 'c'.")
    ["Hosts: 'a", 'b', 'c']
    >>> split_items("- 1.2.3.4\\n- 5.6.7.8")
    ['1.2.3.4', '5.6.7.8']
    """
    lines = [_BULLET.sub("", line) for line in str(text).splitlines()]
    items = []
    for part in _SEPARATORS.split("\n".join(lines)):
        part = part.strip(_EDGE)
        if part:
            items.append(part)
    return items


def _is_word(c: str) -> bool:
    return c.isalnum() or c == "_"


def _bounded_at(hay: str, start: int, end: int) -> bool:
    """Whether ``hay[start:end]`` is a whole token (see ``_CONNECTORS``)."""
    if start > 0:
        c = hay[start - 1]
        if _is_word(c) or (c in _CONNECTORS and start > 1 and _is_word(hay[start - 2])):
            return False
    if end < len(hay):
        c = hay[end]
        if _is_word(c) or (c in _CONNECTORS and end + 1 < len(hay) and _is_word(hay[end + 1])):
            return False
    return True


def _contains_token(hay: str, needle: str) -> bool:
    """Token-bounded substring test: ``10.0.0.5`` is not in ``10.0.0.50``, ``ws-01`` is in
    ``host ws-01``; a hash prefix is not its hash."""
    if not needle:
        return False
    pos = hay.find(needle)
    while pos >= 0:
        if _bounded_at(hay, pos, pos + len(needle)):
            return True
        pos = hay.find(needle, pos + 1)
    return False


def _parse_time(m: re.Match) -> _dt.datetime | None:
    year, month, day, hour, minute, sec, frac, zone = m.groups()
    try:
        tz = _dt.timezone.utc
        if zone and zone not in ("z", "utc"):
            sign = 1 if zone[0] == "+" else -1
            digits = zone[1:].replace(":", "")
            offset = _dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
            tz = _dt.timezone(sign * offset)
        micro = int((frac or "0")[:6].ljust(6, "0"))
        return _dt.datetime(int(year), int(month), int(day), int(hour), int(minute),
                            int(sec or 0), micro, tzinfo=tz)
    except ValueError:
        return None


def _mentions(hay: str, needle: str) -> bool:
    """Whether normalised ``hay`` states normalised ``needle`` (the official "key content").

    A token-bounded occurrence; or, for a file name, its stem as a token (official example:
    gold ``notepad.exe``, answer "notepad is running" is right); or, for a timestamp, any
    timestamp in ``hay`` within ``TIME_TOLERANCE_S`` in any ISO-like format (the official
    "reasonable time frame, format need not match").
    """
    if _contains_token(hay, needle):
        return True
    m = _FILE_EXT.fullmatch(needle)
    if m and _contains_token(hay, m.group(1)):
        return True
    m = _TIMESTAMP.fullmatch(needle)
    if m:
        gold_t = _parse_time(m)
        if gold_t is not None:
            for cand in _TIMESTAMP.finditer(hay):
                t = _parse_time(cand)
                if t is not None and abs((t - gold_t).total_seconds()) <= TIME_TOLERANCE_S:
                    return True
    return False


def _list_size(submitted_norm: str, gold_norm: str, items: list[str]) -> int:
    for kind in _KINDS:
        if kind.fullmatch(gold_norm):
            return max(1, len(set(kind.findall(submitted_norm))))
    return len(items)


def answer_matches(submitted: str, gold: str, *, max_list: int = 10) -> bool:
    """Deterministic stand-in for the official fuzzy answer check (``FUZZY_ANSWER_CHECK_PROMPT``).

    Right iff the normalised gold answer (:func:`normalize_answer`) is a whole item of the
    submission or a token-bounded substring of it (key content present, extra context allowed;
    ``10.0.0.5`` is not found in ``10.0.0.50``, ``ws-01`` is found in "The host is WS-01."),
    with the file-stem and timestamp leniencies of ``_mentions``, and the submission is not an
    overly long enumeration. The official list rule: fewer than 10 items holding the gold answer
    is right, more than 15 is wrong, 10 to 15 is left to the LLM's discretion; here a list of
    ``max_list`` or more items is wrong (default 10: the 10-15 band counts as wrong; pass 16 for
    the lenient reading). The list size is the number of distinct indicators of the gold
    answer's shape (IPv4, GUID, hash, SID, e-mail) when it has one, else the number of
    :func:`split_items`.

    Raises ValueError for an empty gold answer or ``max_list < 1``.
    """
    if isinstance(max_list, bool) or not isinstance(max_list, int) or max_list < 1:
        raise ValueError(f"max_list must be an int >= 1, got {max_list!r}")
    g = normalize_answer(gold) if gold is not None else ""
    if not g:
        raise ValueError(f"gold answer is empty: {gold!r}")
    if submitted is None:
        return False
    s = normalize_answer(submitted)
    if not s:
        return False
    raw_items = split_items(submitted)
    items = [normalize_answer(i) for i in raw_items]
    if g not in items and not _mentions(s, g):
        return False
    return _list_size(s, g, raw_items) < max_list


# ---------------------------------------------------------------------------------------------
# solution steps


def step_iocs(step_text: str) -> list[str]:
    """The indicators of compromise of one solution step, in order, without repeats.

    The question files put them in backticks (``Sid `S-1-5-21-...` clicked ...``); the official
    step-check prompt speaks of indicators "usually enclosed in ``< >``", and some generated
    steps write ``(Field: Url, Value: http://...)``: those forms are read when a step has no
    backticked indicator.

    >>> step_iocs("Host `ws-01` called `10.0.0.5` and `ws-01` again.")
    ['ws-01', '10.0.0.5']
    """
    text = str(step_text)
    found = re.findall(r"`([^`]+)`", text)
    if not found:
        found = re.findall(r"<([^<>]+)>", text)
    if not found:
        found = re.findall(r"\bValue:\s*([^\s)]+)", text)
    out: list[str] = []
    for ioc in found:
        ioc = ioc.strip()
        if ioc and ioc not in out:
            out.append(ioc)
    return out


def step_is_correct(step_text: str, submitted: str, question: str) -> bool:
    """Deterministic stand-in for one verdict of the official ``STEP_CHECK_PROMPT``.

    Right iff one of the step's indicators (:func:`step_iocs`) that is not already in the
    question ("the key information should not be the ones already present in the question")
    appears in the submitted answer; both comparisons are normalised and token-bounded as in
    :func:`answer_matches` (no list-size rule: the official step check has none). A step with
    no indicator is never right.
    """
    if not submitted:
        return False
    sub = normalize_answer(submitted)
    q = normalize_answer(question or "")
    for ioc in step_iocs(step_text):
        n = normalize_answer(ioc)
        if n and not _mentions(q, n) and _mentions(sub, n):
            return True
    return False


def _check_solution(solution: Sequence[str]) -> list[str]:
    if isinstance(solution, str):
        raise TypeError("solution must be a sequence of step strings, got one string")
    steps = list(solution)
    for s in steps:
        if not isinstance(s, str):
            raise TypeError(f"solution steps must be strings, got {type(s).__name__}")
    return steps


def _empty_submission(submitted: Any) -> bool:
    return submitted is None or not normalize_answer(submitted)


def judge(
    question: str,
    gold: str,
    solution: Sequence[str],
    submitted: str | None,
    *,
    decay: float = DEFAULT_DECAY,
) -> dict:
    """Deterministic ExCyTIn judge of one submission (``LLMEvaluator.checking`` with steps on).

    Returns ``{"reward", "answer_correct", "step_correct"}``: the answer verdict of
    :func:`answer_matches`; if it is right, reward 1 and ``step_correct == []`` (the official
    evaluator does not check steps then); otherwise one :func:`step_is_correct` verdict per
    solution step (solution order) and the :func:`step_credit_reward` of them. A None or blank
    submission earns 0 with every step false. ``question`` should include the record's context.
    """
    decay = _check_decay(decay)
    steps = _check_solution(solution)
    if not normalize_answer(gold if gold is not None else ""):
        raise ValueError(f"gold answer is empty: {gold!r}")
    if _empty_submission(submitted):
        return {"reward": 0.0, "answer_correct": False, "step_correct": [False] * len(steps)}
    if answer_matches(submitted, gold):
        return {"reward": 1.0, "answer_correct": True, "step_correct": []}
    verdicts = [step_is_correct(s, submitted, question) for s in steps]
    reward = step_credit_reward(False, verdicts, decay=decay)
    return {"reward": reward, "answer_correct": False, "step_correct": verdicts}


# ---------------------------------------------------------------------------------------------
# LLM judge

_ANSWER_SYSTEM = """\
You grade the final answer of a security analyst who investigated an incident in a log database.
Decide whether the submitted answer gives the golden answer.

Rules:
- The wording need not be identical, but the key content of the golden answer must be there.
  Extra context around it is fine. Letter case does not matter.
- A different format with the same meaning counts (for example a file name given without its
  extension).
- URLs and domains: http versus https, a leading "www." and a trailing "/" do not matter.
- Times: a time close to the golden one counts, in any timestamp format.
- Enumerations: a list of fewer than 10 candidates that includes the golden answer is correct;
  a list of more than 15 is incorrect; from 10 to 15, decide whether the list is still focused
  enough to be useful for the investigation.
- If the question and the golden answer seem to disagree, trust the golden answer.

Reply with one JSON object and nothing else:
{"analysis": "<one or two short sentences>", "correct": true or false}"""

_STEPS_SYSTEM = """\
You grade a security analyst's submitted answer against a reference solution. The solution is a
chain of investigation steps numbered from 0; each step names an indicator of compromise (an IP
address, host, account, file, hash, URL, ...), usually written in backticks.
For every step, decide whether the submitted answer contains that step's indicator.
- A different format with the same meaning counts; letter case does not matter.
- An indicator that already appears in the question earns nothing: that step is false unless
  the answer gives another indicator of the step that is not in the question.

Reply with one JSON object and nothing else, one entry per step:
{"steps": [{"step": 0, "analysis": "<short reason>", "correct": true or false}, ...]}"""


def _reply_text(reply: Any) -> str | None:
    if isinstance(reply, str):
        return reply
    if isinstance(reply, dict):
        content = reply.get("content")
    else:
        content = getattr(reply, "content", None)
    return content if isinstance(content, str) else None


def _json_object(text: str) -> dict | None:
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL | re.IGNORECASE)
    candidates = [fenced.group(1)] if fenced else []
    candidates.append(text)
    lo, hi = text.find("{"), text.rfind("}")
    if 0 <= lo < hi:
        candidates.append(text[lo:hi + 1])
    for cand in candidates:
        try:
            obj = json.loads(cand.strip())
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        v = value.strip().strip("\"'<>").lower()
        if v in ("true", "yes", "correct"):
            return True
        if v in ("false", "no", "incorrect"):
            return False
    return None


def _as_index(key: Any) -> int | None:
    if isinstance(key, bool):
        return None
    if isinstance(key, int):
        return key
    if isinstance(key, str):
        m = re.search(r"\d+", key)
        return int(m.group()) if m else None
    return None


def _verdict_of(entry: Any) -> bool | None:
    if isinstance(entry, dict):
        for key in ("correct", "is_step_correct", "is_correct"):
            if key in entry:
                return _as_bool(entry[key])
        return None
    return _as_bool(entry)


def _parse_answer_reply(text: str | None) -> bool | None:
    if text is None:
        return None
    obj = _json_object(text)
    if obj is not None:
        for key in ("correct", "is_answer_correct", "is_correct"):
            if key in obj:
                verdict = _as_bool(obj[key])
                if verdict is not None:
                    return verdict
    m = re.search(r"is_answer_correct\W*(true|false)", text, re.IGNORECASE)  # official format
    return None if m is None else m.group(1).lower() == "true"


def _parse_steps_reply(text: str | None, n: int) -> dict[int, bool]:
    if text is None:
        return {}
    obj = _json_object(text)
    if obj is None:
        return {}
    entries = obj.get("steps", obj)
    pairs: list[tuple[Any, Any]] = []
    if isinstance(entries, list):
        for pos, entry in enumerate(entries):
            idx = entry.get("step", pos) if isinstance(entry, dict) else pos
            pairs.append((idx, entry))
    elif isinstance(entries, dict):  # {"0": {...}, "1": {...}}: the official layout
        pairs = list(entries.items())
    out: dict[int, bool] = {}
    for key, entry in pairs:
        idx, verdict = _as_index(key), _verdict_of(entry)
        if idx is not None and 0 <= idx < n and verdict is not None and idx not in out:
            out[idx] = verdict
    return out


class LLMJudge:
    """ExCyTIn judge backed by a chat model (the official evaluator's scheme, own prompts).

    ``client`` needs ``chat(messages, *, tools=None, **params) -> dict`` returning the assistant
    message (its ``content`` a string), e.g. ``jaxpapers.agents.OpenAICompatClient``. One call
    judges the answer (official: the fuzzy answer-check prompt; here a JSON reply
    ``{"correct": ...}``, the official ``Is_Answer_Correct: True`` line is also read); if the
    answer is wrong and the solution has steps, one more call judges all steps at once
    (official: the step-check prompt). Reflection passes and retries of the official evaluator
    are not reproduced; a client error propagates.

    A verdict that cannot be parsed (no JSON, no verdict, a step missing from the reply) is
    taken from the deterministic rules instead (:func:`answer_matches` or
    :func:`step_is_correct`) and recorded: ``"fallback": True`` and its item (``"answer"`` or
    ``"step i"``) in ``"fallback_items"``. (The official evaluator retries and, failing that,
    gives no step credit.)
    """

    def __init__(self, client: Any, *, decay: float = DEFAULT_DECAY):
        if not callable(getattr(client, "chat", None)):
            raise TypeError("client must have a chat(messages, ...) method")
        self.client = client
        self.decay = _check_decay(decay)

    def _ask(self, system: str, user: str) -> str | None:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return _reply_text(self.client.chat(messages))

    def judge(
        self, question: str, gold: str, solution: Sequence[str], submitted: str | None
    ) -> dict:
        """``{"reward", "answer_correct", "step_correct", "fallback", "fallback_items"}``.

        Same meaning as :func:`judge`; a None or blank submission earns 0 without a call.
        """
        steps = _check_solution(solution)
        if not normalize_answer(gold if gold is not None else ""):
            raise ValueError(f"gold answer is empty: {gold!r}")
        fallback_items: list[str] = []

        def result(reward: float, correct: bool, verdicts: list[bool]) -> dict:
            return {"reward": reward, "answer_correct": correct, "step_correct": verdicts,
                    "fallback": bool(fallback_items), "fallback_items": fallback_items}

        if _empty_submission(submitted):
            return result(0.0, False, [False] * len(steps))
        correct = _parse_answer_reply(self._ask(
            _ANSWER_SYSTEM,
            f"Question: {question}\n\nGolden answer: {gold}\n\nSubmitted answer: {submitted}",
        ))
        if correct is None:
            correct = answer_matches(submitted, gold)
            fallback_items.append("answer")
        if correct:
            return result(1.0, True, [])
        if not steps:
            return result(0.0, False, [])
        numbered = "\n".join(f"Step {i}: {s}" for i, s in enumerate(steps))
        parsed = _parse_steps_reply(self._ask(
            _STEPS_SYSTEM,
            f"Question: {question}\n\nReference solution:\n{numbered}\n\n"
            f"Submitted answer: {submitted}",
        ), len(steps))
        verdicts = []
        for i, step in enumerate(steps):
            if i in parsed:
                verdicts.append(parsed[i])
            else:
                verdicts.append(step_is_correct(step, submitted, question))
                fallback_items.append(f"step {i}")
        return result(step_credit_reward(False, verdicts, decay=self.decay), False, verdicts)
