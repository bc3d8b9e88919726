"""An offline twin of VT-Bench's DVM-Car QA on scikit-learn's 8 x 8 handwritten digits.

VT-Bench's DVM-Car QA shows a car photo and a markdown table of 10, 20 or 50 nested rows in
which exactly one row is the pictured car, and asks for its Row ID (``loc``), one numeric
column of that row (``attr``), how many rows share its maker or colour and have a larger value
of a column (``count``), or their mean (``mean``). Here the "maker" is the DIGIT (0..9) and the
"colour" is the colour channel (red, green or blue) in which the digit is drawn: the query
image is ``[8, 8, 3]`` float32 with ``load_digits().images / 16`` in channel ``c`` and zeros
elsewhere.

Tables. Columns :data:`COLUMNS`: ``Row ID`` (distinct random integers 100..999), ``digit``,
``colour``, the numerics :data:`NUMERIC` (``price``, ``mileage``, ``year``; integers) and
irrelevant fillers (``body``, ``fuel``, ``gearbox``, ``doors``, ``seats``, ``engine_l``).
Exactly one row has the target's (digit, colour). Distractor rules per mode:

* ``digit``: every distractor has another digit and the target's colour;
* ``colour``: every distractor has another colour and the target's digit;
* ``digit_colour``: distractor ``j`` (0-based, in generation order) is of kind ``j % 3``:
  0 = same digit, other colour; 1 = same colour, other digit; 2 = both differ. With ``n``
  rows the ``n - 1`` distractors hold ``(n - 1) // 3`` of each kind plus one more of kinds
  ``0 .. (n - 1) % 3 - 1`` (so 10 rows: 3/3/3; 20 rows: 7/6/6; 50 rows: 17/16/16).

Other digits and colours are drawn uniformly. Nesting: per base sample one table of
``max(sizes)`` rows is generated (the target, then the distractors in generation order) with
a random display order; the ``n``-row table is the target plus the first ``n - 1``
distractors, shown in the same display order. So a smaller table's rows (with the same
Row IDs and values) are a subset of every larger table's, in the same relative order, with the
same target and the same image.

Tasks (the group of a row = the OTHER rows that share its digit OR its colour; in ``digit``
and ``colour`` modes that is every other row, in ``digit_colour`` it leaves out the rows of
kind 2):

* ``loc``: the target's Row ID;
* ``attr``: the target's value of one numeric column;
* ``count``: how many rows of the target's group have a strictly larger value of the column;
* ``mean``: the mean of those rows' values, rounded to 4 decimals; 0 when there is no such
  row (the question says so). The column is drawn among those whose set is non-empty in the
  smallest table size (then in every size, by nesting); if there is none, among all columns.

Gold answers are ``{"answer": [value]}``. Scoring (:func:`score`) follows the official scorer:
the FIRST number in the reply text (regular expression ``-?\\d+(?:\\.\\d+)?``, so the JSON is
not parsed: ``"Row 3 has ID 417"`` reads as 3, and ``"12,345"`` as 12); exact match for
``loc``/``attr``/``count`` and relative tolerance 1e-4 for ``mean`` (a gold mean of 0 needs an
exact 0).

Solvers map a sample to a reply string: :func:`oracle` (the true row), :func:`tool_solver`
(an injected image classifier, then table operations), :func:`blind` (a random row);
:func:`evaluate` scores them and :func:`evaluate_client` asks a chat model through
``jaxpapers.agents.OpenAICompatClient``. Plain numpy and Python: nothing here needs JAX.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxpapers.agents import LLMError

__all__ = ["COLOURS", "COLUMNS", "MODES", "NUMERIC", "SIZES", "TASKS", "blind", "chat_messages",
           "evaluate", "evaluate_client", "first_number", "generate_qa", "image_data_url",
           "make_sample", "oracle", "prompt", "score", "table_markdown", "tool_solver"]

MODES = ("digit", "colour", "digit_colour")
TASKS = ("loc", "attr", "count", "mean")
SIZES = (10, 20, 50)
COLOURS = ("red", "green", "blue")
NUMERIC = ("price", "mileage", "year")
_NUMERIC_RANGE = {"price": (1000, 60000), "mileage": (1000, 200000), "year": (1998, 2024)}
_FILLERS = {"body": ("hatchback", "saloon", "estate", "suv", "coupe", "convertible"),
            "fuel": ("petrol", "diesel", "hybrid", "electric"),
            "gearbox": ("manual", "automatic"),
            "doors": (2, 3, 4, 5),
            "seats": (2, 4, 5, 7),
            "engine_l": tuple(round(0.1 * k, 1) for k in range(10, 41))}
COLUMNS = ("Row ID", "digit", "colour", "body", "price", "fuel", "mileage", "gearbox", "year",
           "doors", "seats", "engine_l")
_ID_LOW, _ID_COUNT = 100, 900  # Row IDs are distinct integers in [100, 999]
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_MEAN_RTOL = 1e-4
_JSON_INSTRUCTION = ('Answer with JSON only, in the form {"answer": [<number>]}, '
                     "with no other text.")


# ------------------------------------------------------------------ data and validation


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits (bundled, no network): images [1797, 8, 8] in [0, 1], labels."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = np.asarray(data.images, np.float32) / 16.0
    labels = np.asarray(data.target, np.int64)
    images.flags.writeable = False
    labels.flags.writeable = False
    return images, labels


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return int(value)


def _check_choice(name: str, value: Any, allowed: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {tuple(allowed)}, got {value!r}")
    return value


def _check_sizes(sizes: Any) -> tuple[int, ...]:
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence) or not sizes:
        raise ValueError(f"sizes must be a non-empty sequence of ints, got {sizes!r}")
    out = tuple(_check_int("sizes", s, 2, _ID_COUNT) for s in sizes)
    if len(set(out)) != len(out):
        raise ValueError(f"sizes must be distinct, got {sizes!r}")
    return out


def _check_tasks(tasks: Any) -> tuple[str, ...]:
    if isinstance(tasks, str) or not isinstance(tasks, Sequence) or not tasks:
        raise ValueError(f"tasks must be a non-empty sequence of {TASKS}, got {tasks!r}")
    out = tuple(_check_choice("tasks", t, TASKS) for t in tasks)
    if len(set(out)) != len(out):
        raise ValueError(f"tasks must be distinct, got {tasks!r}")
    return out


def _check_images(images: Any) -> np.ndarray:
    num = len(_digits()[1])
    if images is None:
        return np.arange(num)
    pool = np.asarray(images)
    if pool.ndim != 1 or pool.size == 0 or not np.issubdtype(pool.dtype, np.integer):
        raise ValueError("images must be a non-empty 1-D sequence of int indices into "
                         f"load_digits(), got shape {pool.shape} dtype {pool.dtype}")
    if pool.min() < 0 or pool.max() >= num:
        raise ValueError(f"images must index load_digits()'s {num} images (0..{num - 1}), "
                         f"got values in [{pool.min()}, {pool.max()}]")
    return pool.astype(np.int64)


# ------------------------------------------------------------------ answers from a table


def _group_values(table: Sequence[Mapping], row: Mapping, attr: str) -> list:
    """Values of ``attr`` in the rows sharing ``row``'s digit or colour with a larger value."""
    return [r[attr] for r in table
            if r["Row ID"] != row["Row ID"]
            and (r["digit"] == row["digit"] or r["colour"] == row["colour"])
            and r[attr] > row[attr]]


def _answer(table: Sequence[Mapping], row: Mapping, task: str, attr: str | None):
    """The answer to ``task`` if ``row`` is the pictured item (one table operation)."""
    if task == "loc":
        return row["Row ID"]
    if task == "attr":
        return row[attr]
    values = _group_values(table, row, attr)
    if task == "count":
        return len(values)
    return round(sum(values) / len(values), 4) if values else 0.0


def _reply(value) -> str:
    return json.dumps({"answer": [value]})


def _question(task: str, attr: str | None) -> str:
    head = ("The image shows a handwritten digit drawn in one colour channel (red, green or "
            "blue). Exactly one row of the table below describes it: the row with the same "
            "digit and the same colour. Call it the pictured row.")
    group = ("the other rows that have the same digit or the same colour as the pictured row "
             f"and a strictly larger {attr} than it")
    ask = {"loc": "What is the Row ID of the pictured row?",
           "attr": f"What is the {attr} of the pictured row?",
           "count": f"How many rows are there among {group}?",
           "mean": (f"What is the mean {attr} of {group}? Give it to 4 decimal places; "
                    "answer 0 if there is no such row.")}[task]
    return f"{head} {ask}"


# ------------------------------------------------------------------ generation


def _kinds(mode: str, num: int) -> np.ndarray:
    """Distractor kinds in generation order: 0 same digit, 1 same colour, 2 both differ."""
    if mode == "digit":
        return np.ones(num, np.int64)
    if mode == "colour":
        return np.zeros(num, np.int64)
    return np.arange(num) % 3


def _base(rng: np.random.Generator, pool: np.ndarray, mode: str, max_rows: int) -> dict:
    """One image and its ``max_rows``-row table in generation order (target first)."""
    images, labels = _digits()
    index = int(pool[rng.integers(len(pool))])
    digit, colour = int(labels[index]), int(rng.integers(3))
    num = max_rows - 1
    kinds = _kinds(mode, num)
    other_digit = (digit + rng.integers(1, 10, size=num)) % 10
    other_colour = (colour + rng.integers(1, 3, size=num)) % 3
    digits = np.concatenate([[digit], np.where(kinds == 0, digit, other_digit)])
    colours = np.concatenate([[colour], np.where(kinds == 1, colour, other_colour)])
    numeric = {c: rng.integers(lo, hi + 1, size=max_rows) for c, (lo, hi) in
               _NUMERIC_RANGE.items()}
    filler = {c: rng.integers(len(v), size=max_rows) for c, v in _FILLERS.items()}
    ids = rng.choice(_ID_COUNT, size=max_rows, replace=False) + _ID_LOW
    display = rng.permutation(max_rows)  # display rank of each generated row
    rows = []
    for i in range(max_rows):
        values = {"Row ID": int(ids[i]), "digit": int(digits[i]),
                  "colour": COLOURS[int(colours[i])]}
        values.update({c: int(v[i]) for c, v in numeric.items()})
        values.update({c: _FILLERS[c][int(v[i])] for c, v in filler.items()})
        rows.append({c: values[c] for c in COLUMNS})
    image = np.zeros((8, 8, 3), np.float32)
    image[:, :, colour] = images[index]
    image.flags.writeable = False
    # attribute draws for every task, whatever tasks are asked (same seed, same tables)
    draws = {"attr": int(rng.integers(len(NUMERIC))), "count": int(rng.integers(len(NUMERIC))),
             "mean": float(rng.random())}
    return {"image": image, "image_index": index, "rows": rows, "display": display,
            "draws": draws}


def _table(base: dict, num_rows: int) -> list[dict]:
    """The target plus the first ``num_rows - 1`` distractors, in display order."""
    order = sorted(range(num_rows), key=lambda i: base["display"][i])
    return [dict(base["rows"][i]) for i in order]


def _attrs(base: dict, min_rows: int) -> dict[str, str | None]:
    """The numeric column of each task (None for loc); see the module docstring for mean."""
    draws, target = base["draws"], base["rows"][0]
    small = base["rows"][:min_rows]
    eligible = [a for a in NUMERIC if _group_values(small, target, a)] or list(NUMERIC)
    return {"loc": None, "attr": NUMERIC[draws["attr"]], "count": NUMERIC[draws["count"]],
            "mean": eligible[int(draws["mean"] * len(eligible))]}


def generate_qa(seed: int, *, mode: str, num_samples: int, sizes: Sequence[int] = SIZES,
                tasks: Sequence[str] = TASKS,
                images: Sequence[int] | None = None) -> list[dict]:
    """DVM-QA samples on digits: ``num_samples`` base samples x ``sizes`` x ``tasks``.

    Each base sample draws a query image (uniformly, with replacement, from ``images``), a
    colour, and one table of ``max(sizes)`` rows; its tables for the other sizes are nested
    prefixes of the same rows (see the module docstring). The random draws do not depend on
    ``tasks``, and base ``b`` does not depend on ``num_samples`` (a longer run extends a
    shorter one).

    Args:
      seed: int >= 0, the seed of ``np.random.default_rng``; same seed, same samples.
      mode: one of :data:`MODES`.
      num_samples: number of base samples (>= 1).
      sizes: table sizes (distinct ints in [2, 900]), in the order they are listed.
      tasks: distinct names among :data:`TASKS`, in the order they are listed.
      images: indices into ``load_digits()`` to draw query images from (e.g. a classifier's
        test split); None: all 1797.

    Returns:
      A list, base-major then size then task, of dicts: ``image`` (float32 [8, 8, 3],
      read-only, shared by a base's samples), ``image_index``, ``table`` (list of row dicts
      keyed by :data:`COLUMNS`), ``num_rows``, ``mode``, ``task``, ``attr`` (the numeric
      column, None for loc), ``question``, ``answer`` (``{"answer": [value]}``),
      ``target_row_id``, ``target_digit``, ``target_colour`` (a name in :data:`COLOURS`) and
      ``base`` (the base sample's index).

    >>> samples = generate_qa(0, mode="digit_colour", num_samples=2)
    >>> len(samples), samples[0]["image"].shape, samples[0]["num_rows"], samples[0]["task"]
    (24, (8, 8, 3), 10, 'loc')
    >>> evaluate(oracle, samples)[("digit_colour", "mean", 50)]
    1.0
    """
    seed = _check_int("seed", seed, 0)
    mode = _check_choice("mode", mode, MODES)
    num_samples = _check_int("num_samples", num_samples, 1)
    sizes = _check_sizes(sizes)
    tasks = _check_tasks(tasks)
    pool = _check_images(images)
    rng = np.random.default_rng(seed)
    samples = []
    for b in range(num_samples):
        base = _base(rng, pool, mode, max(sizes))
        attrs = _attrs(base, min(sizes))
        target = base["rows"][0]
        for num_rows in sizes:
            table = _table(base, num_rows)
            for task in tasks:
                attr = attrs[task]
                samples.append({
                    "image": base["image"], "image_index": base["image_index"],
                    "table": [dict(r) for r in table], "num_rows": num_rows, "mode": mode,
                    "task": task, "attr": attr, "question": _question(task, attr),
                    "answer": {"answer": [_answer(table, target, task, attr)]},
                    "target_row_id": target["Row ID"], "target_digit": target["digit"],
                    "target_colour": target["colour"], "base": b})
    return samples


def make_sample(seed: int, *, mode: str, num_rows: int, task: str,
                sizes: Sequence[int] = SIZES, images: Sequence[int] | None = None) -> dict:
    """The single sample of ``generate_qa(seed, mode=mode, num_samples=1, sizes=sizes)`` with
    ``num_rows`` rows and ``task`` (``num_rows`` must be one of ``sizes``).

    >>> s = make_sample(3, mode="colour", num_rows=20, task="count")
    >>> same = generate_qa(3, mode="colour", num_samples=1)[6]  # size 20 (second), count (3rd)
    >>> len(s["table"]), s["answer"] == same["answer"], s["table"] == same["table"]
    (20, True, True)
    """
    sizes = _check_sizes(sizes)
    num_rows = _check_int("num_rows", num_rows, 2)
    if num_rows not in sizes:
        raise ValueError(f"num_rows must be one of sizes {sizes}, got {num_rows}")
    task = _check_choice("task", task, TASKS)
    samples = generate_qa(seed, mode=mode, num_samples=1, sizes=sizes, tasks=(task,),
                          images=images)
    return samples[sizes.index(num_rows)]


# ------------------------------------------------------------------ rendering


def _cell(value) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def table_markdown(table: Sequence[Mapping]) -> str:
    """A markdown table (header, separator, one line per row) of the rows' columns.

    >>> print(table_markdown([{"Row ID": 412, "digit": 7, "engine_l": 2.0}]))
    | Row ID | digit | engine_l |
    | --- | --- | --- |
    | 412 | 7 | 2.0 |
    """
    if not table:
        raise ValueError("table must have at least one row, got none")
    columns = list(table[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(_cell(row[c]) for c in columns) + " |" for row in table]
    return "\n".join(lines)


def prompt(sample: Mapping) -> str:
    """The text prompt of a sample: question, markdown table, JSON answer instruction (the
    image is sent separately, see :func:`chat_messages`)."""
    return (f"{sample['question']}\n\n{table_markdown(sample['table'])}\n\n"
            f"{_JSON_INSTRUCTION}")


def image_data_url(image: Any, *, scale: int = 8) -> str:
    """A ``data:image/png;base64,...`` URL of an [H, W, 3] image in [0, 1], upscaled
    ``scale`` times with nearest-neighbour pixels (8 x 8 is too small for most VLMs).

    >>> image_data_url(np.zeros((8, 8, 3), np.float32)).startswith("data:image/png;base64,")
    True
    """
    from PIL import Image

    scale = _check_int("scale", scale, 1)
    array = np.asarray(image, np.float32)
    if array.ndim != 3 or array.shape[-1] != 3:
        raise ValueError(f"image must have shape [H, W, 3], got {array.shape}")
    pixels = np.round(np.clip(array, 0.0, 1.0) * 255.0).astype(np.uint8)
    pixels = np.repeat(np.repeat(pixels, scale, axis=0), scale, axis=1)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def chat_messages(sample: Mapping, *, with_image: bool = True, scale: int = 8) -> list[dict]:
    """One OpenAI user message: the prompt text, plus an ``image_url`` part (a PNG data URL)
    when ``with_image``; without the image the content is the plain prompt string."""
    text = prompt(sample)
    if not with_image:
        return [{"role": "user", "content": text}]
    url = image_data_url(sample["image"], scale=scale)
    return [{"role": "user", "content": [{"type": "text", "text": text},
                                         {"type": "image_url", "image_url": {"url": url}}]}]


# ------------------------------------------------------------------ scoring


def first_number(reply: str | None) -> float | None:
    """The first number (``-?\\d+(?:\\.\\d+)?``) in the reply, or None (the official parse).

    >>> first_number('{"answer": [417]}'), first_number("Row 3 has ID 417"), first_number("no")
    (417.0, 3.0, None)
    """
    if not isinstance(reply, str):
        return None
    found = _NUMBER.search(reply)
    return None if found is None else float(found.group())


def score(sample: Mapping, reply: str | None) -> bool:
    """Whether a reply is correct: its first number equals the gold answer (``mean``: relative
    tolerance 1e-4, ``|x - gold| <= 1e-4 |gold|``). A reply without a number, or None (a
    failed request), is wrong.

    >>> s = make_sample(0, mode="digit", num_rows=10, task="loc")
    >>> score(s, json.dumps(s["answer"])), score(s, "Row 1: " + json.dumps(s["answer"]))
    (True, False)
    """
    task = _check_choice("sample['task']", sample.get("task"), TASKS)
    value = first_number(reply)
    if value is None:
        return False
    gold = float(sample["answer"]["answer"][0])
    if task == "mean":
        return abs(value - gold) <= _MEAN_RTOL * abs(gold)
    return value == gold


# ------------------------------------------------------------------ solvers


def _row_by_id(table: Sequence[Mapping], row_id: int) -> Mapping:
    for row in table:
        if row["Row ID"] == row_id:
            return row
    raise ValueError(f"sample's table has no row with Row ID {row_id}")


def oracle(sample: Mapping) -> str:
    """The reply computed from the true target row (scores 100%).

    >>> s = make_sample(1, mode="colour", num_rows=10, task="attr")
    >>> json.loads(oracle(s)) == s["answer"]
    True
    """
    row = _row_by_id(sample["table"], sample["target_row_id"])
    return _reply(_answer(sample["table"], row, sample["task"], sample["attr"]))


def _colour_name(colour: Any) -> str:
    if isinstance(colour, str) and colour in COLOURS:
        return colour
    if not isinstance(colour, bool) and isinstance(colour, (int, np.integer)) and \
            0 <= colour < len(COLOURS):
        return COLOURS[int(colour)]
    raise ValueError(f"classify must return a colour in {COLOURS} or its index 0..2, "
                     f"got {colour!r}")


def tool_solver(classify: Callable[[np.ndarray], tuple[Any, Any]]) -> Callable[[Mapping], str]:
    """A solver that reads the image with ``classify`` and answers by table operations.

    The pictured row is the first row (in table order) whose digit and colour equal the
    prediction; if no row matches, the first row of the table. The answer is then the task's
    table operation from that row (its group is the other rows sharing ITS digit or colour).

    Args:
      classify: ``image [8, 8, 3] float32 -> (digit, colour)``; digit an int 0..9, colour a
        name in :data:`COLOURS` or its index (e.g. a trained JAX classifier).

    Returns:
      ``solve(sample) -> reply str``.

    >>> s = make_sample(2, mode="digit_colour", num_rows=50, task="mean")
    >>> solve = tool_solver(lambda image: (s["target_digit"], int(image.sum((0, 1)).argmax())))
    >>> score(s, solve(s))
    True
    """
    if not callable(classify):
        raise ValueError(f"classify must be callable, got {type(classify).__name__}")

    def solve(sample: Mapping) -> str:
        digit, colour = classify(sample["image"])
        if isinstance(digit, bool) or not isinstance(digit, (int, np.integer)) or \
                not 0 <= digit <= 9:
            raise ValueError(f"classify must return a digit int in 0..9, got {digit!r}")
        colour = _colour_name(colour)
        table = sample["table"]
        matches = [r for r in table if r["digit"] == digit and r["colour"] == colour]
        row = matches[0] if matches else table[0]
        return _reply(_answer(table, row, sample["task"], sample["attr"]))

    return solve


def blind(seed: int) -> Callable[[Mapping], str]:
    """A solver that ignores the image: a uniformly random row (one ``default_rng(seed)``
    draw per call, so the replies depend on the call order) is taken as the pictured row.

    >>> solve = blind(0)
    >>> json.loads(solve(make_sample(0, mode="digit", num_rows=10, task="loc")))["answer"][0] > 99
    True
    """
    rng = np.random.default_rng(_check_int("seed", seed, 0))

    def solve(sample: Mapping) -> str:
        table = sample["table"]
        row = table[int(rng.integers(len(table)))]
        return _reply(_answer(table, row, sample["task"], sample["attr"]))

    return solve


def _accuracy(samples: Sequence[Mapping], correct: Sequence[bool]) -> dict:
    cells: dict[tuple, list[bool]] = {}
    for sample, ok in zip(samples, correct):
        cells.setdefault((sample["mode"], sample["task"], sample["num_rows"]), []).append(ok)
    return {k: float(np.mean(v)) for k, v in sorted(cells.items())}


def evaluate(solver: Callable[[Mapping], Any], samples: Sequence[Mapping]) -> dict:
    """Accuracy of ``solver`` per ``(mode, task, num_rows)`` cell, keys sorted.

    Args:
      solver: ``sample -> reply``: a reply string, or an answer value (wrapped as
        ``{"answer": [value]}``).
      samples: from :func:`generate_qa` (any mix of modes, tasks and sizes).

    Returns:
      ``{(mode, task, num_rows): fraction of samples scored correct}``.
    """
    if not callable(solver):
        raise ValueError(f"solver must be callable, got {type(solver).__name__}")
    if not samples:
        raise ValueError("samples must be a non-empty sequence of samples, got none")
    correct = []
    for sample in samples:
        reply = solver(sample)
        correct.append(score(sample, reply if isinstance(reply, str) else _reply(reply)))
    return _accuracy(samples, correct)


def _content_text(message: Any) -> str:
    """The text of a chat reply's ``content`` (a string, or a list of text parts)."""
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content
                       if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return ""


def evaluate_client(client: Any, samples: Sequence[Mapping], *, with_image: bool = True,
                    scale: int = 8, **params) -> dict:
    """Asks a chat model every sample (one request each) and scores its replies.

    Args:
      client: a ``jaxpapers.agents.OpenAICompatClient`` or any object with its
        ``chat(messages, **params) -> message dict`` method.
      samples: from :func:`generate_qa`.
      with_image: send the image as an ``image_url`` part (False: text only, a blind
        baseline for the model).
      scale: the image's upscaling factor in the PNG.
      **params: request fields for every call (``temperature``, ``max_tokens``, ``seed``...).

    Returns:
      ``{"accuracy": {(mode, task, num_rows): fraction}, "correct": [bool], "replies":
      [str | None], "errors": {sample index: message}}``; a request that raises
      ``LLMError`` (after the client's retries) has reply None and is scored wrong.
    """
    if not callable(getattr(client, "chat", None)):
        raise ValueError("client must have a chat(messages, **params) method, got "
                         f"{type(client).__name__}")
    if not samples:
        raise ValueError("samples must be a non-empty sequence of samples, got none")
    replies: list[str | None] = []
    errors: dict[int, str] = {}
    for i, sample in enumerate(samples):
        messages = chat_messages(sample, with_image=with_image, scale=scale)
        try:
            replies.append(_content_text(client.chat(messages, **params)))
        except LLMError as err:
            replies.append(None)
            errors[i] = str(err)
    correct = [score(s, r) for s, r in zip(samples, replies)]
    return {"accuracy": _accuracy(samples, correct), "correct": correct, "replies": replies,
            "errors": errors}
