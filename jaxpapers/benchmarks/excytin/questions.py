"""Questions from investigation-graph paths: templates instead of the paper's LLM writer.

The paper gives each selected path to an LLM (o1), which writes a context from the start alert
and its start entities, a question about the end alert whose answer is the end entity, and one
solution sentence per alert on the path with the indicators (IOCs) in backticks; it redoes a
question while its answer is a substring of the context or question. Offline, templates do the
writing:

* context: the start alert's name and time and the start entities, each as "<kind> `value`";
* question: the end alert's name and the kind of the answer ("What is the IP address ...");
* solution: one step per alert on the path, each naming (in backticks) the entity that leads to
  the next alert; the last names the answer;
* leak check: a question whose answer occurs in its own context or question (a substring, or
  a mention the judge accepts, such as the file stem ``lsass`` of ``lsass.exe``) is dropped and
  counted (``leaks_dropped``); :func:`find_leaks` checks an emitted set again, and the
  experiment also submits each question's own text to the judge (``questions/echo_correct``).

A question dict (JSON-ready): ``id``, ``incident``, ``context``, ``question``, ``answer``,
``answer_type`` (entity type), ``answer_field`` (identifier field), ``solution`` (list of step
strings), ``start_alert``, ``end_alert``, ``start_alert_name``, ``end_alert_name``,
``end_alert_time``,
``start_values``, ``path`` (alert ids along the path), ``path_length`` (alerts on it, = steps),
``ambiguous`` (other values of the answer's field on the end alert, not in the question).
"""

from __future__ import annotations

import json

from jaxpapers.benchmarks.excytin.graph import (alert_graph, alert_paths, entity_identifiers,
                                                select_alert_paths)
from jaxpapers.benchmarks.excytin.judge import _mentions, normalize_answer
from jaxpapers.benchmarks.excytin.world import Tenant

__all__ = ["KIND_PHRASES", "display_value", "kind_phrase", "render_question",
           "make_questions", "find_leaks"]

# (node_type, identifier field) -> how a question names it.
KIND_PHRASES = {
    ("account", "Name"): "account name", ("account", "Email"): "user principal name",
    ("account", "Sid"): "account SID", ("account", "AadUserId"): "Entra ID user object id",
    ("host", "HostName"): "host name", ("host", "AadDeviceId"): "Entra ID device id",
    ("host", "AzureID"): "Azure resource id", ("host", "OMSAgentID"): "OMS agent id",
    ("ip", "Address"): "IP address", ("url", "Url"): "URL", ("file", "Name"): "file name",
    ("filehash", "Algorithm__Value"): "file hash", ("mailbox", "MailboxPrimaryAddress"):
    "mailbox address", ("mailmessage", "Recipient"): "email recipient",
    ("mailmessage", "Sender"): "email sender address", ("mailmessage", "SenderIP"):
    "email sender IP address", ("process", "ProcessId__CreatedTimeUtc__CommandLine"):
    "process command line", ("cloud-application", "AppId"): "cloud application id",
    ("cloud-application", "Name__InstanceName"): "cloud application",
    ("process", "ExtractedFileName"): "executable or file name in the command line",
}


def kind_phrase(node_type: str, field: str) -> str:
    """How a question names an identifier of ``node_type`` / ``field``."""
    return KIND_PHRASES.get((node_type, field), f"{node_type} {field}")


def display_value(node_type: str, field: str, value: str) -> str:
    """The answer as an analyst writes it: a joined identifier keeps its last part.

    ``Algorithm__Value`` -> the hash; ``ProcessId__CreatedTimeUtc__CommandLine`` -> the command
    line; single fields are returned as they are.
    """
    if "__" in field:
        return value.split("__", field.count("__"))[-1]
    return value


def _alert_rows(tenant: Tenant) -> dict[str, dict]:
    return {row["SystemAlertId"]: row for row in tenant.tables["SecurityAlert"]}


def render_question(path: dict, alerts: dict[str, dict], *, qid: str, incident: int) -> dict:
    """Write the context, question and solution for one path from :func:`alert_paths`."""
    end = path["end_entities"][0]
    answer = display_value(end["node_type"], end["field"], end["value"])
    start_row, end_row = alerts[path["start_alert"]], alerts[path["end_alert"]]
    starts = [display_value(e["node_type"], e["field"], e["value"])
              for e in path["start_entities"]]
    described = "; ".join(f"{kind_phrase(e['node_type'], e['field'])} `{v}`"
                          for e, v in zip(path["start_entities"], starts))
    context = (f"An alert \"{start_row['AlertName']}\" was raised at "
               f"{start_row['TimeGenerated']} in incident {incident}. It involved: {described}.")
    phrase = kind_phrase(end["node_type"], end["field"])
    same = path["start_alert"] == path["end_alert"]
    where = ("the same alert" if same else
             f"a related alert, \"{end_row['AlertName']}\" (raised at "
             f"{end_row['TimeGenerated']}), in the same investigation")
    question = f"Looking at {where}: what is the {phrase} involved?"
    nodes = path["shortest_alert_path"]
    solution = []
    for i in range(0, len(nodes), 2):
        alert = nodes[i]
        if i + 1 < len(nodes):
            link = nodes[i + 1]
            v = display_value(link["node_type"], link["field"], link["value"])
            solution.append(f"The alert \"{alert['name']}\" names the "
                            f"{kind_phrase(link['node_type'], link['field'])} `{v}`, which "
                            "leads to the next alert.")
        else:
            solution.append(f"The alert \"{alert['name']}\" involves the {phrase} `{answer}`.")
    ids_end = _field_values(end_row, end["node_type"], end["field"])
    in_question = {normalize_answer(v) for v in starts}
    ambiguous = sorted(v for v in ids_end
                       if normalize_answer(v) != normalize_answer(answer)
                       and normalize_answer(v) not in in_question)
    return {
        "id": qid, "incident": incident, "context": context, "question": question,
        "answer": answer, "answer_type": end["node_type"], "answer_field": end["field"],
        "solution": solution, "start_alert": path["start_alert"],
        "end_alert": path["end_alert"], "start_alert_name": start_row["AlertName"],
        "end_alert_name": end_row["AlertName"], "end_alert_time": end_row["TimeGenerated"],
        "start_values": starts,
        "path": [n["alert_id"] for n in nodes if n["type"] == "alert"],
        "path_length": path["path_length"], "ambiguous": ambiguous,
    }


def _field_values(alert_row: dict, node_type: str, field: str) -> list[str]:
    """Display values of every identifier of ``node_type``/``field`` on one alert."""
    out = []
    for entity in json.loads(alert_row["Entities"]):
        if not isinstance(entity, dict) or "$ref" in entity:
            continue
        for nt, f, v in entity_identifiers(entity):
            if nt == node_type and f == field:
                d = display_value(nt, f, v)
                if d not in out:
                    out.append(d)
    return out


def _leaks(q: dict) -> bool:
    """The answer is in the question's own text: as a normalised substring, or as the judge
    would find it there (token-bounded, file stem, nearby timestamp: ``judge._mentions``)."""
    a = normalize_answer(q["answer"])
    text = normalize_answer(q["context"] + " " + q["question"])
    return bool(a) and (a in text or _mentions(text, a))


def find_leaks(questions: list[dict]) -> list[str]:
    """Ids of questions whose answer occurs in their own context or question (see ``_leaks``:
    a substring, or what the judge's matcher accepts, e.g. ``lsass.exe`` in "LSASS")."""
    return [q["id"] for q in questions if _leaks(q)]


def make_questions(tenant: Tenant, *, per_incident: int = 100, k: int = 10,
                   seed: int = 0) -> tuple[list[dict], dict]:
    """All incidents' questions: graph, all paths, sqrt-stratified selection, templates.

    Args:
      tenant: from :func:`~jaxpapers.benchmarks.excytin.world.generate_tenant`.
      per_incident: paths selected per incident (the paper's 100; fewer when fewer exist).
      k: the most start entities per question (official 10).
      seed: seed of path sampling and selection (incident ``i`` uses ``seed + i``).

    Returns:
      ``(questions, info)``: the question dicts, and per-incident graph statistics plus the
      counts ``paths`` (all pairs), ``selected`` and ``leaks_dropped``.
    """
    from jaxpapers.benchmarks.excytin.graph import graph_stats

    if isinstance(per_incident, bool) or not isinstance(per_incident, int) or per_incident < 1:
        raise ValueError(f"per_incident must be an int >= 1, got {per_incident!r}")
    alerts = _alert_rows(tenant)
    out, info = [], {"incidents": [], "paths": 0, "selected": 0, "leaks_dropped": 0}
    for i, inc in enumerate(tenant.incidents):
        graph = alert_graph(tenant.alerts(inc.number))
        stats = graph_stats(graph)
        paths = alert_paths(graph, k=k, seed=seed + i)
        chosen = select_alert_paths(paths, per_incident, seed=seed + i)
        info["incidents"].append({"number": inc.number, "kind": inc.kind, **stats,
                                  "paths": len(paths)})
        info["paths"] += len(paths)
        info["selected"] += len(chosen)
        for j, path in enumerate(chosen):
            q = render_question(path, alerts, qid=f"{inc.number}-{j:03d}", incident=inc.number)
            if _leaks(q):
                info["leaks_dropped"] += 1
                continue
            out.append(q)
    return out, info
