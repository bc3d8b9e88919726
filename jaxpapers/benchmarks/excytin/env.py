"""``ExcytinEnv``: an investigation episode over a read-only tenant database.

Mirrors the paper's environment (``secgym``): ``reset`` shows the context and question, each
step runs one SQL query or submits an answer, an episode has at most ``max_steps`` steps (15;
the results table uses 25), long results are cut to ``max_rows`` rows (the official code cuts
only when the text passes 100,000 characters; a row cap is the same idea, stricter), a query has
``timeout_s`` seconds (30). The reward is the judge's (answer right: 1; else step credit
``0.4^k``). Differences: every episode has its own read-only connection in the SQL sandbox
(the official agent connects to a shared MySQL as root, with write rights); a query that fails
or times out costs a step and returns its error text, as in the paper.

Tools (OpenAI function specs, :meth:`ExcytinEnv.tools`): ``execute_sql(query)`` and
``submit(answer)``. The observation text is what an LLM sees; ``Observation.data`` carries the
structured result (``columns``, ``rows``, ``truncated``, ``total_rows``, ``error``) and,
at reset, the question's public fields (``question_id``, ``incident``, ``start_values``,
``start_alert_name``, ``end_alert_name``, ``end_alert_time``, ``answer_type``,
``answer_field``) for scripted agents; never the answer.
"""

from __future__ import annotations

import functools
import math
import time

from jaxpapers.agents import Observation, StepResult, ToolCall, tool_spec, validate_arguments
from jaxpapers.benchmarks.excytin.db import _check_backend, _check_layer, open_readonly
from jaxpapers.benchmarks.excytin.judge import _check_decay, judge

__all__ = ["ExcytinEnv", "PUBLIC_FIELDS"]

PUBLIC_FIELDS = ("id", "incident", "start_values", "start_alert_name", "end_alert_name",
                 "end_alert_time", "answer_type", "answer_field")

_TOOLS = (
    tool_spec("execute_sql",
              "Run one read-only SQL query (SQLite or DuckDB dialect) on the security logs and "
              "get the first rows of its result.",
              {"type": "object", "properties": {"query": {"type": "string"}},
               "required": ["query"], "additionalProperties": False}),
    tool_spec("submit", "Submit the final answer to the question; ends the episode.",
              {"type": "object", "properties": {"answer": {"type": "string"}},
               "required": ["answer"], "additionalProperties": False}),
)


class ExcytinEnv:
    """One tenant database, one question per episode (implements ``agents.Environment``).

    Args:
      db_path: a database written by :func:`~jaxpapers.benchmarks.excytin.db.write_database`
        for ``layer`` (the ``log`` file has no alert tables).
      layer: ``"alert"`` or ``"log"`` (recorded; the file decides what the agent sees).
      backend: ``"sqlite"`` or ``"duckdb"``.
      max_steps: steps per episode (>= 1); the last step that is not a submission ends it with
        reward 0.
      max_rows: rows shown per result (>= 1); timeout_s: seconds per query (> 0).
      decay: step-credit decay in (0, 1] of the default judge.
      judge_fn: ``judge_fn(question, gold, solution, submitted) -> dict`` with ``reward`` and
        ``answer_correct``; default the deterministic ``judge`` with ``decay``. An
        ``LLMJudge(client, decay=...).judge`` fits (it carries its own decay).

    ``query_log`` keeps ``(question_id, sql, result)`` of every query since construction (the
    experiment replays it on the other backend).
    """

    def __init__(self, db_path, *, layer: str = "alert", backend: str = "sqlite",
                 max_steps: int = 15, max_rows: int = 15, timeout_s: float = 30.0,
                 decay: float = 0.4, judge_fn=None):
        _check_layer(layer)
        _check_backend(backend)
        for name, value in (("max_steps", max_steps), ("max_rows", max_rows)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
                or not math.isfinite(timeout_s) or timeout_s <= 0):
            raise ValueError(f"timeout_s must be a finite number > 0, got {timeout_s!r}")
        self.decay = _check_decay(decay)
        self.db_path, self.layer, self.backend = db_path, layer, backend
        self.max_steps, self.max_rows, self.timeout_s = max_steps, max_rows, float(timeout_s)
        self.judge_fn = judge_fn or functools.partial(judge, decay=self.decay)
        self.query_log: list[tuple[str, str, object]] = []
        self._conn = None
        self._task = None
        self._steps = 0
        self._done = False
        # Open once now: a missing file fails here, not mid-episode, and the file must be of
        # this layer (an alert-layer file opened as "log" would show the alert tables).
        conn = open_readonly(db_path, backend=backend, timeout_s=self.timeout_s,
                             max_rows=max_rows)
        try:
            has_alerts = conn.execute("SELECT COUNT(*) AS n FROM SecurityAlert").error is None
        finally:
            conn.close()
        if has_alerts != (layer == "alert"):
            raise ValueError(f"layer={layer!r} does not match {db_path}: it "
                             f"{'has' if has_alerts else 'lacks'} the alert tables")

    def tools(self) -> list[dict]:
        return [dict(t) for t in _TOOLS]

    def reset(self, task: dict) -> Observation:
        """Start an episode on question ``task`` (a dict from ``make_questions``)."""
        missing = [k for k in ("id", "context", "question", "answer", "solution") if k not in task]
        if missing:
            raise ValueError(f"task is missing the keys {missing}")
        self.close()
        self._conn = open_readonly(self.db_path, backend=self.backend, timeout_s=self.timeout_s,
                                   max_rows=self.max_rows)
        self._task, self._steps, self._done = task, 0, False
        text = f"{task['context']} {task['question']}"
        data = {k: task[k] for k in PUBLIC_FIELDS if k in task}
        data["question_id"] = task["id"]
        return Observation(text, data)

    def step(self, call: ToolCall) -> StepResult:
        if self._task is None:
            raise RuntimeError("call reset(task) before step")
        if self._done:
            raise RuntimeError("the episode is over; call reset(task) for the next one")
        self._steps += 1
        last = self._steps >= self.max_steps
        spec = next((t for t in _TOOLS if t["function"]["name"] == call.name), None)
        problem = (f"unknown tool {call.name!r}; use execute_sql or submit" if spec is None
                   else validate_arguments(spec, call.arguments))
        if problem is not None:
            return self._result(Observation(f"Error: {problem}", {"error": problem}), last)
        if call.name == "submit":
            answer = call.arguments["answer"]
            verdict = self.judge_fn(self._task["context"] + " " + self._task["question"],
                                    self._task["answer"], self._task["solution"], answer)
            info = {"submitted": answer, **verdict, "steps": self._steps}
            obs = Observation(f"Submitted: {answer}", {"submitted": answer})
            self.close()
            self._done = True
            return StepResult(obs, float(verdict["reward"]), True, info)
        t0 = time.perf_counter()
        res = self._conn.execute(call.arguments["query"])
        self.query_log.append((self._task["id"], call.arguments["query"], res))
        data = {"columns": list(res.columns), "rows": [list(r) for r in res.rows],
                "truncated": res.truncated, "total_rows": res.total_rows, "error": res.error,
                "seconds": time.perf_counter() - t0}
        return self._result(Observation(res.text(), data), last)

    def _result(self, obs: Observation, last: bool) -> StepResult:
        if not last:
            return StepResult(obs, 0.0, False, {})
        self.close()
        self._done = True
        return StepResult(obs, 0.0, True, {"submitted": None, "reward": 0.0,
                                           "answer_correct": False, "steps": self._steps,
                                           "out_of_steps": True})

    def close(self) -> None:
        """Close the episode's connection (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
