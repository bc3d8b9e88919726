"""Tests of the ExCyTIn-Bench investigation graph: identifier rules, graph, question paths."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import networkx as nx
import pytest

from jaxpapers.benchmarks.excytin.graph import (alert_graph, alert_paths, entity_identifiers,
                                                graph_stats, select_alert_paths)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]


def _alert(alert_id, *entities, name=None, as_json=True):
    """A SecurityAlert row whose Entities hold ``entities`` (JSON text unless told otherwise)."""
    items = [dict(e, **{"$id": str(i + 1)}) for i, e in enumerate(entities)]
    return {"SystemAlertId": alert_id, "AlertName": name or f"alert {alert_id}",
            "Entities": json.dumps(items) if as_json else items}


def host(name):
    return {"Type": "host", "HostName": name}


def url(value):
    return {"Type": "url", "Url": value}


def file(name):
    return {"Type": "file", "Name": name}


def ip(address):
    return {"Type": "ip", "Address": address}


def ent(node_type, field, value):
    return {"node_type": node_type, "field": field, "value": value}


# ---------------------------------------------------------------------------- identifier rules


def test_account_identifiers_in_official_order():
    entity = {"Type": "account", "Name": "jdoe", "UPNSuffix": "Contoso.com",
              "Sid": "S-1-5-21-7", "AadUserId": "AB-Cd", "$id": "2"}
    assert entity_identifiers(entity) == [
        ("account", "Name", "jdoe"), ("account", "Email", "jdoe@Contoso.com"),
        ("account", "Sid", "S-1-5-21-7"), ("account", "AadUserId", "ab-cd")]


def test_account_generic_name_skipped_with_exact_case():
    entity = {"Type": "account", "Name": "admin", "UPNSuffix": "c.com", "Sid": "S-1-5-21-2"}
    assert entity_identifiers(entity) == [("account", "Sid", "S-1-5-21-2")]
    # the official list is compared with exact case: "Administrator" is kept
    capital = {"Type": "account", "Name": "Administrator"}
    assert entity_identifiers(capital) == [("account", "Name", "Administrator")]


def test_local_system_sid_ends_the_account_entity():
    entity = {"Type": "account", "Name": "svc", "UPNSuffix": "c.com", "Sid": "S-1-5-18",
              "AadUserId": "u-1"}
    # Name and Email come first and stay; Sid and AadUserId are never reached
    assert entity_identifiers(entity) == [("account", "Name", "svc"),
                                          ("account", "Email", "svc@c.com")]


def test_host_raw_fields_then_lower_cased_device_id():
    entity = {"Type": "host", "AzureID": "/Sub/VM", "HostName": "WS-01", "OMSAgentID": "Ag-1",
              "AadDeviceId": "DEV-9", "OSFamily": "Windows"}
    assert entity_identifiers(entity) == [
        ("host", "AzureID", "/Sub/VM"), ("host", "HostName", "WS-01"),
        ("host", "OMSAgentID", "Ag-1"), ("host", "AadDeviceId", "dev-9")]


@pytest.mark.parametrize("address", ["0.0.0.0", "127.0.0.1", "8.8.8.8"])
def test_dropped_ip_addresses(address):
    assert entity_identifiers(ip(address)) == []


def test_private_and_upper_case_ips_kept_lower_cased():
    assert entity_identifiers(ip("10.0.0.5")) == [("ip", "Address", "10.0.0.5")]
    assert entity_identifiers(ip("FE80::1")) == [("ip", "Address", "fe80::1")]


def test_lower_cased_single_field_types():
    assert entity_identifiers(url("HTTP://Evil.Example/X")) == [
        ("url", "Url", "http://evil.example/x")]
    assert entity_identifiers({"Type": "file", "Name": "Payload.EXE", "Directory": "C:\\T"}) == [
        ("file", "Name", "payload.exe")]
    assert entity_identifiers({"Type": "filehash", "Algorithm": "SHA256", "Value": "AbC"}) == [
        ("filehash", "Algorithm__Value", "sha256__abc")]
    assert entity_identifiers({"Type": "mailbox", "MailboxPrimaryAddress": "Bob@C.com"}) == [
        ("mailbox", "MailboxPrimaryAddress", "bob@c.com")]


def test_mail_message_type_is_case_insensitive_and_drops_sender_ip():
    entity = {"Type": "mailMessage", "Recipient": "Bob@Contoso.com", "Sender": "Eve@Evil.com",
              "SenderIP": "8.8.8.8", "Subject": "hi"}
    assert entity_identifiers(entity) == [
        ("mailmessage", "Recipient", "Bob@Contoso.com"),
        ("mailmessage", "Sender", "eve@evil.com")]
    entity["SenderIP"] = "203.0.113.9"
    assert ("mailmessage", "SenderIP", "203.0.113.9") in entity_identifiers(entity)


def test_process_identifier_and_extracted_file_names():
    command = ('"C:\\Tools\\Mimikatz.EXE" privilege::debug & powershell -f c:/x/Run.PS1 '
               "> report.txt.bak 'notes.pdf' archive.zipx")
    entity = {"Type": "process", "ProcessId": "4242", "CreationTimeUtc": "2024-06-20T09:00:16Z",
              "CommandLine": command, "ImageFile": {"$ref": "3"}, "Host": {"$ref": "2"}}
    out = entity_identifiers(entity)
    assert out[0] == ("process", "ProcessId__CreatedTimeUtc__CommandLine",
                      "4242__2024-06-20t09:00:16z__" + command.lower())
    # the extension is not anchored at a word end (official regex): archive.zipx -> archive.zip
    assert [v for _, f, v in out[1:] if f == "ExtractedFileName"] == [
        "mimikatz.exe", "run.ps1", "report.txt", "notes.pdf", "archive.zip"]
    assert len(out) == 6


def test_process_prefers_created_time_and_needs_all_three_fields():
    entity = {"Type": "process", "ProcessId": "7", "CreatedTimeUtc": "T1",
              "CreationTimeUtc": "T2", "CommandLine": "cmd"}
    assert entity_identifiers(entity) == [
        ("process", "ProcessId__CreatedTimeUtc__CommandLine", "7__t1__cmd")]
    assert entity_identifiers({"Type": "process", "ProcessId": "7", "CreationTimeUtc": "T"}) == []
    # a repeated file name is listed once
    twice = {"Type": "process", "CommandLine": "a.exe a.exe"}
    assert entity_identifiers(twice) == [("process", "ExtractedFileName", "a.exe")]


def test_other_official_types():
    assert entity_identifiers({"Type": "cloud-application", "AppId": "APP-1", "Name": "X"}) == [
        ("cloud-application", "AppId", "app-1")]
    both = {"Type": "cloud-application", "AppId": "1", "Name": "Teams", "InstanceName": "Ins"}
    assert entity_identifiers(both)[0] == ("cloud-application", "Name__InstanceName",
                                           "teams__ins")
    resource = ("/subscriptions/0123abcd-0000-1111-2222-333344445555/resourceGroups/RG-1/"
                "providers/x/vm")
    assert entity_identifiers({"Type": "azure-resource", "ResourceId": resource}) == [
        ("azure-resource", "SubscriptionId", "0123abcd-0000-1111-2222-333344445555"),
        ("azure-resource", "ResourceGroup", "rg-1"),
        ("azure-resource", "ResourceId", resource.lower())]
    assert entity_identifiers({"Type": "mailCluster", "Source": "S", "Query": "Q"}) == [
        ("mailcluster", "Source__Query", "s__q")]


def test_refs_unknown_types_and_empty_values_give_nothing():
    assert entity_identifiers({"$ref": "2"}) == []
    assert entity_identifiers({"Type": "registry-key", "Key": "HKLM"}) == []
    assert entity_identifiers({"Type": "url", "Url": ""}) == []
    assert entity_identifiers({"Type": "host", "HostName": None, "AadDeviceId": None}) == []
    with pytest.raises(ValueError, match="dict"):
        entity_identifiers(["not", "an", "entity"])


# ---------------------------------------------------------------------------------- the graph


def test_graph_nodes_attributes_merging_and_refs():
    alerts = [
        _alert("a1", host("WS-01"), {"Type": "account", "Name": "jdoe"}, {"$ref": "1"}),
        # the file Name "JDOE" lower-cases to the account's (Name, jdoe): one node, typed account
        _alert("a2", host("WS-01"), file("JDOE"), as_json=False),
    ]
    g = alert_graph(alerts)
    assert list(g.nodes) == [("alert", "a1"), ("entity", "HostName", "WS-01"),
                             ("entity", "Name", "jdoe"), ("alert", "a2")]
    assert g.nodes[("alert", "a2")] == {"type": "alert", "alert_id": "a2", "name": "alert a2"}
    assert g.nodes[("entity", "Name", "jdoe")] == {
        "type": "entity", "node_type": "account", "identifier_fields": "Name", "value": "jdoe"}
    assert sorted(g.adj[("alert", "a2")]) == [("entity", "HostName", "WS-01"),
                                             ("entity", "Name", "jdoe")]
    assert g.number_of_edges() == 4


def test_graph_keeps_largest_component():
    alerts = [_alert("lone", url("http://x.example")),
              _alert("a1", host("h1"), ip("10.0.0.1")), _alert("a2", host("h1"), ip("10.0.0.2")),
              _alert("a3", ip("10.0.0.2"))]
    g = alert_graph(alerts)
    assert [n for n in g if n[0] == "alert"] == [("alert", "a1"), ("alert", "a2"),
                                                 ("alert", "a3")]
    assert ("entity", "Url", "http://x.example") not in g
    # a tie goes to the component holding the earliest node
    tie = alert_graph([_alert("b1", url("u1")), _alert("b2", url("u2"))])
    assert list(tie) == [("alert", "b1"), ("entity", "Url", "u1")]


def _chain():
    """A -[host]- B -[ip]- C, each end alert with two private entities (see the tests)."""
    return [
        _alert("A", url("http://one.example/a"), file("alpha.dll"), host("hostab")),
        _alert("B", host("hostab"), ip("10.1.1.1")),
        _alert("C", ip("10.1.1.1"), url("http://two.example/c"), host("hostc")),
    ]


def test_chain_stats_and_diameter():
    stats = graph_stats(alert_graph(_chain()))
    # a leaf of A to a leaf of C: leaf-A-host-B-ip-C-leaf is 6 edges
    assert stats == {"nodes": 9, "alerts": 3, "entities": 6, "diameter": 6,
                     "entity_types": ["file", "host", "ip", "url"]}


def test_start_and_end_entities_on_a_chain():
    paths = alert_paths(alert_graph(_chain()), k=10, seed=3)
    by_pair = {(p["start_alert"], p["end_alert"]): p for p in paths}
    assert len(paths) == 9
    leaves_a = [ent("url", "Url", "http://one.example/a"), ent("file", "Name", "alpha.dll")]
    a_to_c = by_pair["A", "C"]
    # A's entities farthest from C are its two leaves (5 edges; the shared host is 3)
    assert a_to_c["start_entities"] == leaves_a
    # C's farthest from A are its url and host (5 edges): the host is avoided
    assert a_to_c["end_entities"] == [ent("url", "Url", "http://two.example/c")]
    assert a_to_c["path_length"] == 3
    assert a_to_c["shortest_alert_path"] == [
        {"type": "alert", "alert_id": "A", "name": "alert A"},
        {"type": "entity", **ent("host", "HostName", "hostab")},
        {"type": "alert", "alert_id": "B", "name": "alert B"},
        {"type": "entity", **ent("ip", "Address", "10.1.1.1")},
        {"type": "alert", "alert_id": "C", "name": "alert C"}]
    a_to_b = by_pair["A", "B"]
    assert a_to_b["start_entities"] == leaves_a
    assert a_to_b["end_entities"] == [ent("ip", "Address", "10.1.1.1")]
    assert a_to_b["path_length"] == 2
    b_to_a = by_pair["B", "A"]
    assert b_to_a["start_entities"] == [ent("ip", "Address", "10.1.1.1")]
    assert b_to_a["end_entities"][0] in leaves_a
    # k=1 keeps one of the two farthest leaves
    for p in alert_paths(alert_graph(_chain()), k=1, seed=0):
        if (p["start_alert"], p["end_alert"]) == ("A", "C"):
            assert len(p["start_entities"]) == 1 and p["start_entities"][0] in leaves_a


def test_same_alert_questions():
    paths = alert_paths(alert_graph(_chain()), k=10, seed=1)
    same = next(p for p in paths if p["start_alert"] == p["end_alert"] == "A")
    everything = [ent("url", "Url", "http://one.example/a"), ent("file", "Name", "alpha.dll"),
                  ent("host", "HostName", "hostab")]
    # min(k, 3 - 1) = 2 start entities and the third one as the end
    assert len(same["start_entities"]) == 2 and len(same["end_entities"]) == 1
    assert sorted(map(json.dumps, same["start_entities"] + same["end_entities"])) == sorted(
        map(json.dumps, everything))
    assert same["path_length"] == 1 and len(same["shortest_alert_path"]) == 1
    # an alert with a single entity makes no same-alert question
    g = alert_graph([_alert("one", host("ws9")),
                     _alert("two", host("ws9"), url("http://u.example"))])
    pairs = [(p["start_alert"], p["end_alert"]) for p in alert_paths(g)]
    assert ("one", "one") not in pairs and ("two", "two") in pairs


def test_every_containing_start_entity_is_dropped():
    alerts = [
        _alert("A1", host("hshared"), url("http://evil.example/a"),
               url("http://evil.example/ab"), file("c.exe")),
        _alert("A2", host("hshared"), url("evil.example/a")),
    ]
    paths = alert_paths(alert_graph(alerts), k=10, seed=0)
    one_two = next(p for p in paths if (p["start_alert"], p["end_alert"]) == ("A1", "A2"))
    assert one_two["end_entities"] == [ent("url", "Url", "evil.example/a")]
    # both urls contain the end value; the official code would have dropped only the first
    assert one_two["start_entities"] == [ent("file", "Name", "c.exe")]


def test_pair_without_start_entities_left_is_skipped():
    alerts = [_alert("A1", host("hshared"), url("http://evil.example/a")),
              _alert("A2", host("hshared"), url("evil.example/a"))]
    paths = alert_paths(alert_graph(alerts), k=10, seed=0)
    assert sorted((p["start_alert"], p["end_alert"]) for p in paths) == [("A1", "A1"),
                                                                         ("A2", "A2")]


def test_random_shortest_path_is_valid_and_varies():
    # A and C meet through B1 or B2: two shortest paths of 5 nodes
    alerts = [_alert("A", host("ha"), url("http://a.example")),
              _alert("B1", host("ha"), ip("10.9.9.9")), _alert("B2", host("ha"), ip("10.9.9.9")),
              _alert("C", ip("10.9.9.9"), url("http://c.example"))]
    g = alert_graph(alerts)
    middles = set()
    for seed in range(12):
        for p in alert_paths(g, seed=seed):
            nodes = p["shortest_alert_path"]
            keys = [("alert", n["alert_id"]) if n["type"] == "alert"
                    else ("entity", n["field"], n["value"]) for n in nodes]
            assert keys[0] == ("alert", p["start_alert"]) and keys[-1] == ("alert", p["end_alert"])
            assert all(g.has_edge(u, v) for u, v in zip(keys, keys[1:]))
            assert len(keys) - 1 == nx.shortest_path_length(g, keys[0], keys[-1])
            assert [n["type"] for n in nodes] == ["alert", "entity"] * (len(nodes) // 2) + ["alert"]
            assert p["path_length"] == (len(nodes) + 1) // 2
            if (p["start_alert"], p["end_alert"]) == ("A", "C"):
                middles.add(nodes[2]["alert_id"])
    assert middles == {"B1", "B2"}


# ---------------------------------------------------------------------------------- selection


def _fake_paths(counts):
    """Hand-made paths: ``counts[length]`` paths of ``length`` alerts each."""
    out = []
    for length, count in counts.items():
        for i in range(count):
            nodes = [{"type": "alert", "alert_id": f"x{j}"} for j in range(2 * length - 1)]
            out.append({"id": f"{length}-{i}", "shortest_alert_path": nodes,
                        "path_length": length})
    return out


@pytest.mark.parametrize("counts, m, expected", [
    # sqrt weights .193/.334/.473 of 20: 3, 6, 9 (18); two left: longest group, then the next
    ({1: 10, 2: 30, 3: 60}, 20, {1: 3, 2: 7, 3: 10}),
    # quotas 5, 5, 38 capped to 2, 2, 38; the 8 left all go to the only group with room
    ({1: 2, 2: 2, 3: 96}, 50, {1: 2, 2: 2, 3: 46}),
    # 1.28, 0.57, 1.15 of 3 -> 1, 0, 1; the one left goes to the longest, not the largest rest
    ({1: 5, 2: 1, 3: 4}, 3, {1: 1, 2: 0, 3: 2}),
])
def test_selection_allocation(counts, m, expected):
    paths = _fake_paths(counts)
    chosen = select_alert_paths(paths, m, seed=4)
    assert len(chosen) == m and len({p["id"] for p in chosen}) == m
    got = {length: sum(p["path_length"] == length for p in chosen) for length in counts}
    assert got == expected
    assert [p["path_length"] for p in chosen] == sorted(p["path_length"] for p in chosen)
    assert select_alert_paths(paths, m, seed=4) == chosen


def test_selection_of_everything_returns_all():
    paths = _fake_paths({1: 2, 2: 1})
    assert select_alert_paths(paths, 3) == paths
    assert select_alert_paths(paths, 30) == paths


# ------------------------------------------------------------------------------- determinism


def _rich_alerts():
    """Eight alerts over shared hosts, IPs and accounts: many ties and equal shortest paths."""
    alerts = []
    for i in range(8):
        alerts.append(_alert(
            f"al-{i}", host(f"h{i % 3}"), ip(f"10.0.0.{i % 2}"), url(f"http://site{i}.example"),
            file(f"f{i}.exe"), {"Type": "account", "Name": f"user{i % 4}", "UPNSuffix": "c.com"},
            {"$ref": "1"}))
    return alerts


_CHILD = (
    "import json, sys\n"
    "from jaxpapers.benchmarks.excytin.graph import alert_graph, alert_paths, "
    "select_alert_paths\n"
    "paths = alert_paths(alert_graph(json.load(sys.stdin)), k=2, seed=5)\n"
    "print(json.dumps([paths, select_alert_paths(paths, 10, seed=5)]))\n")


def test_determinism_across_hash_seeds():
    alerts = _rich_alerts()
    paths = alert_paths(alert_graph(alerts), k=2, seed=5)
    here = json.loads(json.dumps([paths, select_alert_paths(paths, 10, seed=5)]))
    assert alert_paths(alert_graph(alerts), k=2, seed=5) == paths
    assert alert_paths(alert_graph(alerts), k=2, seed=6) != paths
    assert len(paths) == 64
    for hash_seed in ("1", "987"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(alerts),
                              capture_output=True, text=True, env=env, cwd=REPO_ROOT,
                              timeout=60, check=True)
        assert json.loads(done.stdout) == here


# -------------------------------------------------------------------------------- bad inputs


def test_bad_inputs():
    with pytest.raises(ValueError, match="'bad-7'"):
        alert_graph([_alert("ok", host("h")),
                     {"SystemAlertId": "bad-7", "AlertName": "x", "Entities": "[{oops"}])
    with pytest.raises(ValueError, match="'obj-1'.*list"):
        alert_graph([{"SystemAlertId": "obj-1", "AlertName": "x", "Entities": '{"Type": "ip"}'}])
    with pytest.raises(ValueError, match="SystemAlertId"):
        alert_graph([{"AlertName": "x", "Entities": "[]"}])
    g = alert_graph(_chain())
    with pytest.raises(ValueError, match="k must"):
        alert_paths(g, k=0)
    with pytest.raises(ValueError, match="m must"):
        select_alert_paths(alert_paths(g), 0)
    # null or empty Entities mean no entities; no alerts give an empty graph
    lone = alert_graph([{"SystemAlertId": "n", "AlertName": "x", "Entities": None}])
    assert list(lone) == [("alert", "n")] and alert_paths(lone) == []
    assert graph_stats(alert_graph([]))["nodes"] == 0
