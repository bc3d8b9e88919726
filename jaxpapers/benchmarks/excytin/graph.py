"""ExCyTIn-Bench investigation graphs: alerts and the entities they name, and question paths.

ExCyTIn-Bench (Microsoft SecRL) builds one graph per security incident: every alert of the
incident (a row of Sentinel's ``SecurityAlert`` table) is a node, every identifier its
``Entities`` JSON names (a host name, an account SID, a file hash, ...) is a node, and an edge
joins an alert to each identifier it names. Questions are drawn from paths between two alerts:
the agent is shown a few entities of the start alert and must find one entity of the end alert.
This module rebuilds, offline and without pandas, the rules of the official code
(``secgym/utils/utils.py::process_entity_identifiers`` and
``secgym/qagen/alert_graph.py::AlertGraph``); each public function says which rule it mirrors
and where this version differs on purpose.

Node keys (a choice of this module; the official code numbers nodes 0, 1, 2, ...):

* alert:  ``("alert", alert_id)`` with attributes ``type="alert"``, ``alert_id``, ``name``;
* entity: ``("entity", field, value)`` with attributes ``type="entity"``, ``node_type``,
  ``identifier_fields`` (= ``field``, e.g. ``"HostName"`` or ``"Algorithm__Value"``) and
  ``value``.

Determinism: randomness comes only from ``random.Random(seed)``, and everything iterates in
input order, graph insertion order or sorted order (never set order or salted string
hashing), so the output is the same across processes with different ``PYTHONHASHSEED``.
Plain Python: no JAX here.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Iterable, Mapping
from typing import Any

import networkx as nx

__all__ = ["alert_graph", "alert_paths", "entity_identifiers", "graph_stats",
           "select_alert_paths"]

# Account names that name no one in particular (compared with exact case, as the official code).
_GENERIC_ACCOUNT_NAMES = ("root", "system", "guest", "admin", "administrator", "user")
# The local-system SID: an account entity carrying it yields no Sid and no AadUserId identifier.
_LOCAL_SYSTEM_SID = "S-1-5-18"
# Addresses that connect everything to everything; dropped as IP (and mail SenderIP) identifiers.
_DROPPED_IPS = ("0.0.0.0", "127.0.0.1", "8.8.8.8")
# File names inside a lower-cased process command line: a run of characters that are not a
# path separator, white space or quote, ending in one of these extensions.
_FILE_IN_COMMAND = re.compile(
    r"""[^\\/\s"']*\.(?:exe|pdf|dll|xlsx|docx|zip|png|txt|ps1|html|tmp)""")
_SUBSCRIPTION = re.compile(r"(?<=subscriptions/)[0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12}")
_RESOURCE_GROUP = re.compile(r"resourcegroups/([^/]*)/")
# Entity types never used as the end entity of a question when another choice exists.
_AVOIDED_END_TYPES = ("host", "process")
_FIELD_JOIN = "__"


def _raw(entity: Mapping, field: str) -> str | None:
    """The field's value as a string, kept as written; None when absent, null or empty."""
    value = entity.get(field)
    if value is None:
        return None
    text = str(value)
    return text if text else None


def _lower(entity: Mapping, field: str) -> str | None:
    """The field's value lower-cased; None when absent, null or empty."""
    text = _raw(entity, field)
    return None if text is None else text.lower()


def _joined(entity: Mapping, fields: tuple[str, ...]) -> str | None:
    """The fields' lower-cased values joined with ``__``; None unless every one is present."""
    parts = [_lower(entity, field) for field in fields]
    if any(part is None for part in parts):
        return None
    return _FIELD_JOIN.join(parts)


def entity_identifiers(entity: dict) -> list[tuple[str, str, str]]:
    """The identifiers one Sentinel entity contributes to an investigation graph.

    Mirrors ``process_entity_identifiers`` of the official code (``secgym/utils/utils.py``),
    applied to one entity object, in the official order within each type:

    * ``account``: ``Name`` (raw; skipped when it is exactly root/system/guest/admin/
      administrator/user), ``Email`` = ``Name@UPNSuffix`` (raw, same condition), ``Sid`` (raw;
      ``S-1-5-18`` ends the entity: no Sid and no AadUserId), ``AadUserId`` (lower-cased);
    * ``cloud-application``: ``Name__InstanceName`` (lc, both needed), ``AppId`` (lc);
    * ``file``: ``Name`` (lc); ``filehash``: ``Algorithm__Value`` (lc);
    * ``host``: ``AzureID``, ``HostName``, ``OMSAgentID`` (raw), ``AadDeviceId`` (lc);
    * ``iotdevice``: ``DeviceId`` (lc);
    * ``ip``: ``Address`` (lc; 0.0.0.0, 127.0.0.1 and 8.8.8.8 dropped, private ranges kept);
    * ``mailbox`` and ``mailboxconfiguration``: ``MailboxPrimaryAddress`` (lc);
    * ``mailcluster``: ``Source__Query`` (lc);
    * ``mailmessage``: ``Recipient`` (raw), ``SenderIP`` (raw, not the three dropped IPs),
      ``Sender`` (lc);
    * ``oauth-application``: ``OAuthAppId`` (raw), ``OAuthObjectId`` (lc);
    * ``process``: ``ProcessId__CreatedTimeUtc__CommandLine`` (lc, all three needed), then one
      ``ExtractedFileName`` per match of ``[^\\\\/\\s"']*\\.(exe|pdf|dll|...|tmp)`` in the
      lower-cased command line;
    * ``security-group``: ``SID`` (raw), ``ObjectGuid`` (lc);
    * ``service-principal``: ``ServicePrincipalObjectId`` (lc); ``url``: ``Url`` (lc);
    * ``azure-resource``: ``SubscriptionId`` and ``ResourceGroup`` (parsed from the lc
      ``ResourceId``), ``ResourceId`` (lc).

    ``Type`` is compared lower-cased (Sentinel writes ``mailMessage``) and becomes the node
    type; other types and objects without ``Type`` (``{"$ref": ...}`` back-references) give
    nothing; nested objects (a process's ``ImageFile``, ``ParentProcess``, ``Host``) are not
    followed.

    Differences from the official code, on purpose: a field that is null or empty counts as
    absent (the official code keeps raw empty values, and turns a null lower-cased one into the
    string ``"none"``); every value is a string; a repeated (field, value) pair is listed once;
    the process identifier takes its time from ``CreatedTimeUtc`` as the official code does, or,
    when only the documented Sentinel field ``CreationTimeUtc`` is there, from that one (real
    Sentinel alerts carry both with the same value; the field name stays
    ``ProcessId__CreatedTimeUtc__CommandLine`` so nodes match the official graphs).

    Args:
      entity: one object of an alert's ``Entities`` list.

    Returns:
      ``(node_type, field, value)`` triples, in the official order.

    Raises:
      ValueError: ``entity`` is not a dict.
    """
    if not isinstance(entity, Mapping):
        raise ValueError(f"an entity must be a JSON object (dict), got {type(entity).__name__}")
    kind = entity.get("Type")
    if not isinstance(kind, str):
        return []  # a {"$ref": ...} back-reference or an untyped object
    kind = kind.lower()
    found: list[tuple[str, str | None]] = []

    if kind == "account":
        name = _raw(entity, "Name")
        if name is not None and name not in _GENERIC_ACCOUNT_NAMES:
            found.append(("Name", name))
            suffix = _raw(entity, "UPNSuffix")
            if suffix is not None:
                found.append(("Email", f"{name}@{suffix}"))
        sid = _raw(entity, "Sid")
        if sid == _LOCAL_SYSTEM_SID:
            return _triples(kind, found)  # the official code `continue`s: no Sid, no AadUserId
        found.append(("Sid", sid))
        found.append(("AadUserId", _lower(entity, "AadUserId")))
    elif kind == "cloud-application":
        found.append(("Name__InstanceName", _joined(entity, ("Name", "InstanceName"))))
        found.append(("AppId", _lower(entity, "AppId")))
    elif kind == "file":
        found.append(("Name", _lower(entity, "Name")))
    elif kind == "filehash":
        found.append(("Algorithm__Value", _joined(entity, ("Algorithm", "Value"))))
    elif kind == "host":
        for field in ("AzureID", "HostName", "OMSAgentID"):
            found.append((field, _raw(entity, field)))
        found.append(("AadDeviceId", _lower(entity, "AadDeviceId")))
    elif kind == "iotdevice":
        found.append(("DeviceId", _lower(entity, "DeviceId")))
    elif kind == "ip":
        address = _lower(entity, "Address")
        if address not in _DROPPED_IPS:
            found.append(("Address", address))
    elif kind in ("mailbox", "mailboxconfiguration"):
        found.append(("MailboxPrimaryAddress", _lower(entity, "MailboxPrimaryAddress")))
    elif kind == "mailcluster":
        found.append(("Source__Query", _joined(entity, ("Source", "Query"))))
    elif kind == "mailmessage":
        found.append(("Recipient", _raw(entity, "Recipient")))
        sender_ip = _raw(entity, "SenderIP")
        if sender_ip not in _DROPPED_IPS:
            found.append(("SenderIP", sender_ip))
        found.append(("Sender", _lower(entity, "Sender")))
    elif kind == "oauth-application":
        found.append(("OAuthAppId", _raw(entity, "OAuthAppId")))
        found.append(("OAuthObjectId", _lower(entity, "OAuthObjectId")))
    elif kind == "process":
        time_field = "CreatedTimeUtc" if _raw(entity, "CreatedTimeUtc") else "CreationTimeUtc"
        found.append(("ProcessId__CreatedTimeUtc__CommandLine",
                      _joined(entity, ("ProcessId", time_field, "CommandLine"))))
        command = _lower(entity, "CommandLine")
        if command is not None:
            for file_name in _FILE_IN_COMMAND.findall(command):
                found.append(("ExtractedFileName", file_name))
    elif kind == "security-group":
        found.append(("SID", _raw(entity, "SID")))
        found.append(("ObjectGuid", _lower(entity, "ObjectGuid")))
    elif kind == "service-principal":
        found.append(("ServicePrincipalObjectId", _lower(entity, "ServicePrincipalObjectId")))
    elif kind == "url":
        found.append(("Url", _lower(entity, "Url")))
    elif kind == "azure-resource":
        resource = _lower(entity, "ResourceId")
        if resource is not None:
            subscription = _SUBSCRIPTION.search(resource)
            if subscription:
                found.append(("SubscriptionId", subscription.group()))
            groups = _RESOURCE_GROUP.findall(resource)
            if groups:
                found.append(("ResourceGroup", groups[0]))
        found.append(("ResourceId", resource))
    return _triples(kind, found)


def _triples(kind: str, found: list[tuple[str, str | None]]) -> list[tuple[str, str, str]]:
    """``(kind, field, value)`` for each non-empty value, first occurrence of a pair only."""
    out: list[tuple[str, str, str]] = []
    for field, value in found:
        if value and (kind, field, value) not in out:
            out.append((kind, field, value))
    return out


def _parse_entities(alert_id: Any, entities: Any) -> list:
    """An alert's ``Entities`` as a list; ValueError naming the alert when it is malformed."""
    if entities is None:
        return []
    if isinstance(entities, (str, bytes)):
        if not entities.strip():
            return []
        try:
            entities = json.loads(entities)
        except ValueError as err:
            raise ValueError(
                f"alert {alert_id!r}: Entities is not valid JSON ({err})") from None
    if not isinstance(entities, list):
        raise ValueError(
            f"alert {alert_id!r}: Entities must be a JSON list, got {type(entities).__name__}")
    for item in entities:
        if not isinstance(item, Mapping):
            raise ValueError(f"alert {alert_id!r}: an Entities item is not a JSON object: "
                             f"{item!r}")
    return entities


def alert_graph(alerts: Iterable[Mapping]) -> nx.Graph:
    """The investigation graph of one incident: alerts, their entity identifiers, largest part.

    Mirrors ``AlertGraph.build_graph_from_incident_alert`` of the official code
    (``secgym/qagen/alert_graph.py``): one node per alert; one node per identifier (see
    ``entity_identifiers``) keyed by ``(field, value)``, so alerts naming the same identifier
    share its node, whose ``node_type`` is that of its first sighting; an edge from each alert to
    every identifier its entities produce; then only the largest connected component is kept
    (on a tie, the one holding the earliest node, as the official ``max(...)`` picks).

    Node keys are ``("alert", alert_id)`` and ``("entity", field, value)`` (the official code
    numbers its nodes); see the module docstring for the attributes. Nodes and edges are added
    in input order, so the graph, including its iteration order, is deterministic. Rows that
    repeat a ``SystemAlertId`` (Sentinel logs an alert again when its status changes) share one
    alert node holding the union of their entities and the first row's name; the official code
    would make a node per row.

    Args:
      alerts: dicts with ``SystemAlertId``, ``AlertName`` and ``Entities`` (a JSON string in
        Sentinel's schema, or the already-parsed list; null or empty means no entities).

    Returns:
      an undirected ``networkx.Graph`` (empty when there are no alerts).

    Raises:
      ValueError: an alert is not a dict or lacks ``SystemAlertId``, or its ``Entities`` is not
        valid JSON or not a list of objects (the message names the alert id; the official code
        silently gives such an alert no entities).
    """
    full = nx.Graph()
    for position, alert in enumerate(alerts):
        if not isinstance(alert, Mapping):
            raise ValueError(f"alert #{position} must be a dict, got {type(alert).__name__}")
        if alert.get("SystemAlertId") is None:
            raise ValueError(f"alert #{position} has no SystemAlertId")
        alert_id = alert["SystemAlertId"]
        entities = _parse_entities(alert_id, alert.get("Entities"))
        alert_node = ("alert", alert_id)
        if alert_node not in full:
            name = alert.get("AlertName")
            full.add_node(alert_node, type="alert", alert_id=alert_id,
                          name="" if name is None else str(name))
        for entity in entities:
            for node_type, field, value in entity_identifiers(entity):
                entity_node = ("entity", field, value)
                if entity_node not in full:
                    full.add_node(entity_node, type="entity", node_type=node_type,
                                  identifier_fields=field, value=value)
                full.add_edge(alert_node, entity_node)
    return _largest_component(full)


def _largest_component(graph: nx.Graph) -> nx.Graph:
    """The largest connected component as a new graph, nodes and edges in the original order.

    ``graph.subgraph`` is avoided on purpose: its node order follows a set, hence the hash seed.
    """
    best: set = set()
    seen: set = set()
    for node in graph:  # insertion order: a tie goes to the component found first
        if node in seen:
            continue
        component = nx.node_connected_component(graph, node)
        seen |= component
        if len(component) > len(best):
            best = component
    out = nx.Graph()
    out.add_nodes_from((node, graph.nodes[node]) for node in graph if node in best)
    out.add_edges_from((u, v) for u, v in graph.edges() if u in best)
    return out


def _entity_record(graph: nx.Graph, node: Any) -> dict:
    """``{node_type, field, value}`` of an entity node."""
    data = graph.nodes[node]
    return {"node_type": data["node_type"], "field": data["identifier_fields"],
            "value": data["value"]}


def _node_record(graph: nx.Graph, node: Any) -> dict:
    """A path entry: ``{type, alert_id, name}`` or ``{type, node_type, field, value}``."""
    data = graph.nodes[node]
    if data.get("type") == "alert":
        return {"type": "alert", "alert_id": data["alert_id"], "name": data.get("name", "")}
    return {"type": "entity", **_entity_record(graph, node)}


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def alert_paths(graph: nx.Graph, *, k: int = 10, seed: int = 0) -> list[dict]:
    """Every question path between two alerts of an investigation graph (no selection).

    Mirrors ``AlertGraph.get_alert_paths`` of the official code with ``num_select=-1``. For
    every ordered pair ``(a1, a2)`` of alerts, ``a1 = a2`` included, in graph order:

    * ``F(a, b)``: the entity neighbours of alert ``a`` at the largest graph distance from ``b``.
    * ``a1 != a2``: the start entities are ``F(a1, a2)`` when ``k > |F|``, else ``k`` of them
      drawn at random; the end entity is one random member of ``F(a2, a1)`` whose type is not
      host or process (any member when all are).
    * ``a1 = a2``: skipped when ``a1`` has at most one entity; else ``min(k, |F| - 1)`` random
      entities of ``a1`` start and one of the rest ends.
    * the path is one random shortest path from ``a1`` to ``a2`` (alert and entity nodes
      alternate; ``[a1]`` when ``a1 = a2``).
    * start entities whose value contains, or is contained in, the end entity's value are
      dropped, and the pair is skipped when none is left. Difference on purpose: the official
      code drops only the first such start entity; here every one is dropped, so no start
      entity gives the answer away.

    Random draws happen in the official order (start sample, end sample, path choice) from one
    ``random.Random(seed)``; candidate lists are in graph order and the path is the random one
    among all shortest paths sorted by graph order (found by counting, not listing, them), so the
    result does not depend on the hash seed.

    Args:
      graph: a graph from ``alert_graph``.
      k: the most start entities per question (official default 10).
      seed: seed of the ``random.Random`` that makes every choice.

    Returns:
      dicts with ``start_alert`` and ``end_alert`` (alert ids); ``start_entities`` and
      ``end_entities`` (lists of ``{node_type, field, value}``; ``end_entities`` has one
      element); ``shortest_alert_path`` (the nodes along the chosen path, alerts as
      ``{type: "alert", alert_id, name}``, entities as ``{type: "entity", node_type, field,
      value}``); and ``path_length``, the number of alerts on the path.

    Raises:
      ValueError: ``k`` is not an integer >= 1.
    """
    _positive_int("k", k)
    rng = random.Random(seed)
    rank = {node: i for i, node in enumerate(graph.nodes)}
    alerts = [node for node, data in graph.nodes(data=True) if data.get("type") == "alert"]
    entities_of = {
        alert: sorted((nbr for nbr in graph.adj[alert]
                       if graph.nodes[nbr].get("type") == "entity"), key=rank.__getitem__)
        for alert in alerts}
    distance = {alert: nx.single_source_shortest_path_length(graph, alert) for alert in alerts}

    def farthest(a: Any, b: Any) -> list:
        """Entity neighbours of ``a`` at the largest distance from ``b``, in graph order."""
        reach = distance[b]
        candidates = [e for e in entities_of[a] if e in reach]
        if not candidates:
            return []
        far = max(reach[e] for e in candidates)
        return [e for e in candidates if reach[e] == far]

    path_counts: dict = {}

    def shortest_path(a: Any, b: Any) -> list:
        """One uniformly random shortest path from ``a`` to ``b``.

        The same path as ``rng.choice`` over every shortest path sorted by graph order (the
        draw is the same ``_randbelow``), found by counting paths instead of listing them all.
        """
        reach = distance[b]
        if b not in path_counts:  # shortest paths from each node to b, in BFS order from b
            count: dict = {}
            for node in sorted(reach, key=reach.__getitem__):
                far = reach[node]
                count[node] = 1 if far == 0 else sum(
                    count[w] for w in graph.adj[node] if reach.get(w) == far - 1)
            path_counts[b] = count
        count = path_counts[b]
        index = rng.randrange(count[a])
        path = [a]
        while path[-1] != b:
            here = path[-1]
            for step in sorted((w for w in graph.adj[here] if reach.get(w) == reach[here] - 1),
                               key=rank.__getitem__):
                if index < count[step]:
                    break
                index -= count[step]
            path.append(step)
        return path

    out: list[dict] = []
    for a1 in alerts:
        for a2 in alerts:
            if a2 not in distance[a1]:
                continue  # not connected: never the case in a graph from alert_graph
            start_pool = farthest(a1, a2)
            if a1 != a2:
                end_pool = farthest(a2, a1)
                if not start_pool or not end_pool:
                    continue
                start = list(start_pool) if k > len(start_pool) else rng.sample(start_pool, k)
                preferred = [e for e in end_pool
                             if graph.nodes[e]["node_type"] not in _AVOIDED_END_TYPES]
                end = rng.choice(preferred or end_pool)
            else:
                if len(start_pool) <= 1:
                    continue
                start = rng.sample(start_pool, min(k, len(start_pool) - 1))
                end = rng.choice([e for e in start_pool if e not in start])
            path = shortest_path(a1, a2)
            end_value = graph.nodes[end]["value"]
            start = [e for e in start if not _overlaps(graph.nodes[e]["value"], end_value)]
            if not start:
                continue
            out.append({
                "start_alert": graph.nodes[a1]["alert_id"],
                "end_alert": graph.nodes[a2]["alert_id"],
                "start_entities": [_entity_record(graph, e) for e in start],
                "end_entities": [_entity_record(graph, end)],
                "shortest_alert_path": [_node_record(graph, node) for node in path],
                "path_length": (len(path) + 1) // 2,
            })
    return out


def _overlaps(a: str, b: str) -> bool:
    return a in b or b in a


def select_alert_paths(paths: list[dict], m: int, *, seed: int = 0) -> list[dict]:
    """Pick ``m`` question paths, spread over path lengths with a square-root tilt.

    Mirrors ``AlertGraph.select_alert_paths`` of the official code: when ``m >= len(paths)``
    every path is returned (in input order). Else the paths are grouped by the number of nodes
    on ``shortest_alert_path`` (1, 3, 5, ...: one group per ``path_length``), group ``d`` of
    ``n_d`` paths gets weight ``r_d = sqrt(n_d / n)`` normalised to sum 1 and a quota
    ``min(int(r_d * m), n_d)``; the remaining paths are handed out one at a time from the
    longest group down, skipping full groups, pass after pass; then each group's quota is drawn
    at random (``random.Random(seed).sample``, groups in ascending length, group members in input
    order). The official code uses the global ``random`` module and numpy for the square roots.

    Args:
      paths: dicts from ``alert_paths`` (only ``shortest_alert_path`` is read).
      m: how many paths to select.
      seed: seed of the ``random.Random`` that draws within groups.

    Returns:
      the ``m`` selected path dicts (the same objects), shortest group first.

    Raises:
      ValueError: ``m`` is not an integer >= 1.
    """
    _positive_int("m", m)
    paths = list(paths)
    if m >= len(paths):
        return paths
    groups: dict[int, list[dict]] = {}
    for path in paths:
        groups.setdefault(len(path["shortest_alert_path"]), []).append(path)
    lengths = sorted(groups)
    sizes = [len(groups[d]) for d in lengths]
    roots = [math.sqrt(size / len(paths)) for size in sizes]
    weights = [root / sum(roots) for root in roots]
    quota = [min(int(w * m), size) for w, size in zip(weights, sizes)]
    leftover = m - sum(quota)
    while leftover > 0:
        for i in reversed(range(len(lengths))):
            if leftover == 0:
                break
            if quota[i] < sizes[i]:
                quota[i] += 1
                leftover -= 1
    rng = random.Random(seed)
    selected: list[dict] = []
    for d, count in zip(lengths, quota):
        selected.extend(rng.sample(groups[d], count))
    return selected


def graph_stats(graph: nx.Graph) -> dict:
    """Size and shape of an investigation graph, as the paper's dataset statistics count them.

    Args:
      graph: a graph from ``alert_graph``.

    Returns:
      ``{"nodes", "alerts", "entities", "diameter", "entity_types"}``: node counts (all, alert,
      entity), the diameter in edges over all nodes (0 for a graph of at most one node; alert to
      alert distances are even), and the sorted distinct ``node_type`` values of entity nodes.

    Raises:
      ValueError: the graph is not connected (a graph from ``alert_graph`` always is).
    """
    types = [data.get("type") for _, data in graph.nodes(data=True)]
    if graph.number_of_nodes() <= 1:
        diameter = 0
    elif not nx.is_connected(graph):
        raise ValueError("graph_stats needs a connected graph (use alert_graph's output)")
    else:
        diameter = nx.diameter(graph)
    return {
        "nodes": graph.number_of_nodes(),
        "alerts": types.count("alert"),
        "entities": types.count("entity"),
        "diameter": diameter,
        "entity_types": sorted({data["node_type"] for _, data in graph.nodes(data=True)
                                if data.get("type") == "entity"}),
    }
