"""Scripted investigators (no LLM): an oracle, two graph walkers and a random baseline.

They use only what an LLM agent gets: the question (its public fields arrive structured in
``Observation.data``), the tools and the query results; the oracle alone also holds the stored
path. All SQL is portable between SQLite and DuckDB: ``lower(x) LIKE lower(pattern)`` because
DuckDB's ``LIKE`` is case-sensitive and SQLite's is not, single quotes doubled, no
engine-specific functions.

* :class:`OracleAgent` (alert layer): reads every alert of the stored path by id, checks that
  the last one names the answer, submits it. Tests the environment, not an investigator: its
  reward must be 1.
* :class:`GraphWalkAgent` (alert layer): breadth-first search over the alert-entity graph by
  SQL: the alerts whose ``Entities`` mention a frontier value, their identifiers the next
  frontier, until an alert with the question's end-alert name appears; answers the identifier
  of the asked kind on that alert that the question does not already name.
* :class:`LogWalkAgent` (log layer, no alert tables): from the start values, finds the log rows
  that mention them in an entity column, collects values of the asked kind from those rows (and
  one hop further), and answers the rarest such value in the tenant (attack indicators are rare;
  benign ones repeat).
* :class:`RandomSQLAgent`: looks at a few random tables and submits a random cell.
"""

from __future__ import annotations

import json
import random
import zlib

from jaxpapers.agents import Observation, ToolCall
from jaxpapers.benchmarks.excytin.db import tables_for_layer
from jaxpapers.benchmarks.excytin.graph import entity_identifiers
from jaxpapers.benchmarks.excytin.questions import display_value
from jaxpapers.benchmarks.excytin.schema import ENTITY_COLUMNS, SCHEMA

__all__ = ["OracleAgent", "GraphWalkAgent", "LogWalkAgent", "RandomSQLAgent", "sql_literal"]


def sql_literal(value: str) -> str:
    """A SQL string literal (single quotes doubled)."""
    return "'" + str(value).replace("'", "''") + "'"


def _json_fragment(value: str) -> str:
    """``value`` as it appears inside a JSON string (backslashes and quotes escaped)."""
    return json.dumps(str(value))[1:-1].lower()


def _submit(answer: str) -> ToolCall:
    return ToolCall("submit", {"answer": str(answer)})


def _sql(query: str) -> ToolCall:
    return ToolCall("execute_sql", {"query": query})


def _identifiers(entities_json: str) -> list[tuple[str, str, str]]:
    try:
        items = json.loads(entities_json)
    except (TypeError, ValueError):
        return []
    out = []
    for e in items if isinstance(items, list) else []:
        if isinstance(e, dict) and "$ref" not in e:
            for triple in entity_identifiers(e):
                if triple not in out:
                    out.append(triple)
    return out


class OracleAgent:
    """Walks the stored path (needs the tasks: ``{question id: task}``)."""

    def __init__(self, tasks: dict[str, dict]):
        self.tasks = tasks

    def reset(self, observation: Observation, tools) -> None:
        self.task = self.tasks[observation.data["question_id"]]
        self.todo = list(self.task["path"])
        self.seen_answer = False

    def act(self, observation: Observation) -> ToolCall:
        rows = observation.data.get("rows") or []
        if rows and not self.todo:  # the result of the last alert on the path
            named = {display_value(*t).lower() for t in _identifiers(rows[0][-1])}
            self.seen_answer = self.task["answer"].lower() in named
        if self.todo:
            alert = self.todo.pop(0)
            return _sql("SELECT AlertName, Entities FROM SecurityAlert WHERE SystemAlertId = "
                        f"{sql_literal(alert)}")
        return _submit(self.task["answer"] if self.seen_answer else "")


class GraphWalkAgent:
    """Breadth-first search over alerts and their entities, by SQL (alert layer).

    First reads the incident's alert ids (``SecurityIncident.AlertIds``; the question names the
    incident), then searches only among them: a tenant holds several incidents that share users
    and hosts, and the paper serves one incident per database.
    """

    max_values = 24  # frontier values per query (the rest wait for the next query)

    def reset(self, observation: Observation, tools) -> None:
        d = observation.data
        self.target = d["end_alert_name"]
        self.target_time = d.get("end_alert_time")
        self.kind = (d["answer_type"], d["answer_field"])
        self.known = {str(v).lower() for v in d["start_values"]}
        self.frontier = [str(v) for v in d["start_values"]]
        self.used: set[str] = set()
        self.seen_alerts: list[str] = []
        self.answer: str | None = None
        self._batch: list[str] = []
        self.incident = d.get("incident")
        self.scope: list[str] | None = None  # the incident's alert ids, read first
        self._asked_scope = False

    def _query(self) -> ToolCall | None:
        values = [v for v in self.frontier if v.lower() not in self.used][: self.max_values]
        self._batch = values
        if not values:
            return None
        self.used.update(v.lower() for v in values)
        self.frontier = [v for v in self.frontier if v.lower() not in self.used]
        likes = " OR ".join(f"lower(Entities) LIKE {sql_literal('%' + _json_fragment(v) + '%')}"
                            for v in values)
        seen = ", ".join(sql_literal(a) for a in self.seen_alerts)
        not_seen = f" AND SystemAlertId NOT IN ({seen})" if seen else ""
        scope = ", ".join(sql_literal(a) for a in self.scope or ())
        in_scope = f" AND SystemAlertId IN ({scope})" if scope else ""
        return _sql("SELECT SystemAlertId, AlertName, Entities, TimeGenerated FROM SecurityAlert "
                    f"WHERE ({likes})"
                    f"{not_seen}{in_scope} ORDER BY TimeGenerated, SystemAlertId")

    def act(self, observation: Observation) -> ToolCall:
        if self.answer is not None:
            return _submit(self.answer)
        cols = observation.data.get("columns") or []
        if self.incident is not None and not self._asked_scope:
            self._asked_scope = True
            return _sql("SELECT AlertIds FROM SecurityIncident WHERE IncidentNumber = "
                        f"{int(self.incident)}")
        if self.scope is None and cols == ["AlertIds"]:
            rows = observation.data.get("rows") or []
            try:
                self.scope = [str(a) for a in json.loads(rows[0][0])] if rows else []
            except (TypeError, ValueError):
                self.scope = []
        if "Entities" in cols:
            ia, iname, ient, itime = (cols.index(c) for c in ("SystemAlertId", "AlertName",
                                                               "Entities", "TimeGenerated"))
            for row in observation.data.get("rows") or []:
                if row[ia] in self.seen_alerts:
                    continue
                self.seen_alerts.append(row[ia])
                ids = _identifiers(row[ient])
                if row[iname] == self.target and self.target_time in (None, row[itime]):
                    choice = [display_value(*t) for t in ids if (t[0], t[1]) == self.kind
                              and display_value(*t).lower() not in self.known]
                    if choice:
                        self.answer = choice[0]
                        return _submit(self.answer)
                for t in ids:
                    v = display_value(*t)
                    if v.lower() not in self.used and v not in self.frontier:
                        self.frontier.append(v)
            if observation.data.get("truncated"):
                # more alerts match the last batch: ask again (the seen ones are excluded)
                self.used.difference_update(v.lower() for v in self._batch)
                self.frontier = list(self._batch) + self.frontier
        call = self._query()
        return call if call is not None else _submit("unknown")


# Entity kind of a question's answer -> the kind names of log columns that may hold it.
_ANSWER_KINDS = {"ip": ("ip",), "url": ("url",), "file": ("file",), "filehash": ("filehash",),
                 "host": ("host",), "account": ("account",), "mailbox": ("mailbox", "account"),
                 "mailmessage": ("mailbox", "ip"), "process": ("process", "file"),
                 "cloud-application": ()}


class LogWalkAgent:
    """Joins log tables on entity columns from the start values (log layer).

    Step 1: the values of the asked kind in every log row that mentions a start value (one
    ``UNION ALL`` query over the entity columns of all log tables). If there are none, one more
    hop from the values co-occurring with the start values. Last: how often each candidate
    occurs anywhere in the logs; the rarest is submitted (ties: alphabetical).
    """

    def reset(self, observation: Observation, tools) -> None:
        d = observation.data
        self.kinds = _ANSWER_KINDS.get(d["answer_type"], ())
        self.known = sorted({str(v).lower() for v in d["start_values"]})
        self.phase = "hop1"
        self.candidates: list[str] = []

    max_values = 16  # values per IN list (keeps a statement under the sandbox's 100k chars)

    @classmethod
    def _count_query(cls, values, kinds, *, where: bool = True, having: str = "",
                     order: str = "n DESC, v") -> str:
        """``SELECT v, COUNT(*) AS n`` over the ``kinds`` columns of the log tables, from the
        rows whose entity columns hold one of ``values`` (all rows when ``where`` is False).

        One CTE per table holds its matching rows, so the match is written once per table;
        literal IN lists (DuckDB plans an ``IN (SELECT ...)`` per column as a hash join, which
        needed more than the sandbox's 256 MB for this union).
        """
        inlist = ", ".join(sql_literal(v) for v in list(values)[: cls.max_values]) or "NULL"
        ctes, parts = [], []
        for i, table in enumerate(tables_for_layer("log")):
            ent = [c for c in SCHEMA[table] if c in ENTITY_COLUMNS]
            outs = [c for c in ent if ENTITY_COLUMNS[c] in kinds]
            if not outs:
                continue
            match = " OR ".join(f'lower(CAST("{c}" AS VARCHAR)) IN ({inlist})' for c in ent)
            cond = f" WHERE {match}" if where else ""
            ctes.append(f'r{i} AS (SELECT {", ".join(chr(34) + c + chr(34) for c in outs)} '
                        f'FROM "{table}"{cond})')
            parts.extend(f'SELECT CAST("{c}" AS VARCHAR) AS v FROM r{i}' for c in outs)
        if not parts:
            return "SELECT NULL AS v, 0 AS n WHERE 1 = 0"
        filt = f" AND {having}" if having else ""
        return (f"WITH {', '.join(ctes)} SELECT v, COUNT(*) AS n FROM "
                f"({' UNION ALL '.join(parts)}) AS u WHERE v IS NOT NULL{filt} "
                f"GROUP BY v ORDER BY {order}")

    def _values(self, observation: Observation) -> list[str]:
        rows = observation.data.get("rows") or []
        return [str(r[0]) for r in rows if r and r[0] is not None
                and str(r[0]).lower() not in self.known]

    def act(self, observation: Observation) -> ToolCall:
        if not self.kinds:
            return _submit("unknown")
        if self.phase == "hop1":
            self.phase = "read1"
            return _sql(self._count_query(self.known, self.kinds))
        if self.phase == "read1":
            self.candidates = self._values(observation)
            if not self.candidates:
                self.phase = "read_hop2"
                all_kinds = tuple(sorted(set(ENTITY_COLUMNS.values())))
                return _sql(self._count_query(self.known, all_kinds))
            self.phase = "count"
        if self.phase == "read_hop2":
            nxt = [v.lower() for v in self._values(observation)]
            if not nxt:
                return _submit("unknown")
            self.known = sorted(set(self.known) | set(nxt))
            self.phase = "read1"
            return _sql(self._count_query(nxt, self.kinds))
        if self.phase == "count":
            self.phase = "answer"
            inlist = ", ".join(sql_literal(v.lower()) for v in self.candidates)
            return _sql(self._count_query((), self.kinds, where=False,
                                          having=f"lower(v) IN ({inlist})", order="n, v"))
        rows = observation.data.get("rows") or []
        return _submit(str(rows[0][0]) if rows else
                       (self.candidates[0] if self.candidates else "unknown"))


class RandomSQLAgent:
    """Random table peeks, then a random cell as the answer (seeded by the question id)."""

    def __init__(self, *, layer: str = "alert", peeks: int = 3, seed: int = 0):
        if isinstance(peeks, bool) or not isinstance(peeks, int) or peeks < 0:
            raise ValueError(f"peeks must be an int >= 0, got {peeks!r}")
        self.tables = tables_for_layer(layer)
        self.peeks, self.seed = peeks, seed

    def reset(self, observation: Observation, tools) -> None:
        qid = str(observation.data.get("question_id", ""))
        self.rng = random.Random(self.seed * 1_000_003 + zlib.crc32(qid.encode()))
        self.left = self.peeks
        self.cells: list[str] = []

    def act(self, observation: Observation) -> ToolCall:
        for row in observation.data.get("rows") or []:
            self.cells.extend(str(v) for v in row if v is not None)
        if self.left > 0:
            self.left -= 1
            table = self.rng.choice(self.tables)
            order = ", ".join(f'"{c}" NULLS FIRST' for c in SCHEMA[table])  # a total order
            return _sql(f'SELECT * FROM "{table}" ORDER BY {order} LIMIT 15 OFFSET '
                        f"{self.rng.randrange(40)}")
        return _submit(self.rng.choice(self.cells) if self.cells else "unknown")
