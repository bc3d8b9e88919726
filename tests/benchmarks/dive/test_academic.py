"""The academic world: hand-checked tool outputs on a tiny citation graph, seeded-world
invariants and determinism, cross-checks against networkx / numpy, typing and errors."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest

from jaxpapers.benchmarks.dive.worlds import (World, call_tool, domain_tools,
                                              make_world)

D = "academic"
ANN, BOB, CAL, DEE, EVE = "Ann Lee", "Bob Ray", "Cal Diaz", "Dee Fox", "Eve Kim"
ALPHA, BETA, GAMMA, OMEGA = ("Alpha Institute", "Beta University", "Gamma Lab",
                             "Omega College")
ML, DB = "machine learning", "databases"


def _paper(title, year, venue, field, authors, refs):
    return {"title": title, "year": year, "venue": venue, "field": field, "authors": authors,
            "references": refs}


# P0001 <- P0002, P0003, P0006;  P0002 <- P0004, P0005;  P0003 <- P0004;  P0004 <- P0005;
# P0005 <- P0006 (an arrow points from the cited paper to the citing one)
_PAPERS = {
    "P0001": _paper("Sparse Kernels for Code Search", 2010, "ICML", ML, [ANN], []),
    "P0002": _paper("Robust Solvers for Query Planning", 2012, "KDD", DB, [ANN, BOB],
                    ["P0001"]),
    "P0003": _paper("Neural Priors for Image Retrieval", 2012, "ICML", ML, [CAL], ["P0001"]),
    "P0004": _paper("Causal Embeddings for Drug Discovery", 2015, "ICML", ML, [ANN, CAL],
                    ["P0002", "P0003"]),
    "P0005": _paper("Adaptive Indexes for Link Prediction", 2018, "KDD", DB, [BOB, DEE],
                    ["P0002", "P0004"]),
    "P0006": _paper("Efficient Sketches for Anomaly Detection", 2020, "ICML", DB,
                    [ANN, DEE, EVE], ["P0001", "P0005"]),
}
_DATA = {
    "papers": _PAPERS,
    "authors": {ANN: {"affiliation": ALPHA}, BOB: {"affiliation": ALPHA},
                CAL: {"affiliation": BETA}, DEE: {"affiliation": GAMMA},
                EVE: {"affiliation": BETA}},
    "affiliations": {ALPHA: {"country": "Canada"}, BETA: {"country": "Canada"},
                     GAMMA: {"country": "Japan"}, OMEGA: {"country": "Japan"}},
    "venues": ["ICML", "KDD", "STOC"], "fields": [DB, ML], "countries": ["Canada", "Japan"],
    "year_range": [2010, 2025],
}
_LEXICON = {"paper": tuple(sorted(_PAPERS)),
            "title": tuple(sorted(p["title"] for p in _PAPERS.values())),
            "author": (ANN, BOB, CAL, DEE, EVE), "affiliation": (ALPHA, BETA, GAMMA, OMEGA),
            "country": ("Canada", "Japan"), "venue": ("ICML", "KDD", "STOC"),
            "field": (DB, ML), "year": (2010, 2012, 2015, 2018, 2020)}
TINY = World(D, 0, _DATA, _LEXICON)

# (tool, args, expected), all worked out by hand on TINY
CASES = [
    ("get_title", {"paper": "P0004"}, "Causal Embeddings for Drug Discovery"),
    ("get_year", {"paper": "P0003"}, 2012),
    ("get_venue", {"paper": "P0005"}, "KDD"),
    ("get_field", {"paper": "P0006"}, DB),
    ("list_authors", {"paper": "P0006"}, [ANN, DEE, EVE]),
    ("count_authors", {"paper": "P0006"}, 3),
    ("find_title", {"title": "Neural Priors for Image Retrieval"}, "P0003"),
    ("compare_year", {"first": "P0006", "second": "P0001"}, 10),
    ("compare_year", {"first": "P0002", "second": "P0005"}, -6),
    ("find_oldest", {"papers": ["P0005", "P0002", "P0004"]}, "P0002"),
    ("find_newest", {"papers": ["P0005", "P0002", "P0004"]}, "P0005"),
    ("list_references", {"paper": "P0005"}, ["P0002", "P0004"]),
    ("list_references", {"paper": "P0001"}, []),
    ("list_citations", {"paper": "P0001"}, ["P0002", "P0003", "P0006"]),
    ("list_citations", {"paper": "P0006"}, []),
    ("count_references", {"paper": "P0004"}, 2),
    ("count_citations", {"paper": "P0002"}, 2),
    ("compare_citations", {"first": "P0001", "second": "P0006"}, 3),
    ("find_path", {"source": "P0006", "target": "P0001"}, ["P0006", "P0001"]),
    ("find_path", {"source": "P0005", "target": "P0001"}, ["P0005", "P0002", "P0001"]),
    ("find_path", {"source": "P0005", "target": "P0003"}, ["P0005", "P0004", "P0003"]),
    ("find_path", {"source": "P0004", "target": "P0001"}, ["P0004", "P0002", "P0001"]),  # tie
    ("find_path", {"source": "P0003", "target": "P0003"}, ["P0003"]),
    ("count_path", {"source": "P0006", "target": "P0003"}, 3),
    ("count_path", {"source": "P0003", "target": "P0003"}, 0),
    ("find_common", {"first": ["P0001", "P0002", "P0004"], "second": ["P0004", "P0002",
                                                                      "P0006"]},
     ["P0002", "P0004"]),
    ("count_common", {"first": ["P0001", "P0002", "P0002"], "second": ["P0002", "P0001"]}, 2),
    ("list_papers", {"author": ANN}, ["P0001", "P0002", "P0004", "P0006"]),
    ("count_papers", {"author": BOB}, 2),
    ("compute_hindex", {"author": ANN}, 2),  # citation counts 3, 2, 1, 0
    ("compute_hindex", {"author": EVE}, 0),
    ("compare_hindex", {"first": ANN, "second": EVE}, 2),
    ("compute_citations", {"author": ANN}, 6),
    ("find_coauthors", {"author": ANN}, [BOB, CAL, DEE, EVE]),
    ("count_coauthors", {"author": BOB}, 2),
    ("get_affiliation", {"author": DEE}, GAMMA),
    ("get_oldest", {"author": DEE}, "P0005"),
    ("get_newest", {"author": BOB}, "P0005"),
    ("merge_authors", {"first": [EVE, ANN], "second": [ANN, BOB]}, [ANN, BOB, EVE]),
    ("list_members", {"affiliation": BETA}, [CAL, EVE]),
    ("list_members", {"affiliation": OMEGA}, []),
    ("count_members", {"affiliation": ALPHA}, 2),
    ("list_affiliation", {"affiliation": BETA}, ["P0003", "P0004", "P0006"]),
    ("count_affiliation", {"affiliation": ALPHA}, 5),
    ("count_affiliation", {"affiliation": OMEGA}, 0),
    ("get_country", {"affiliation": GAMMA}, "Japan"),
    ("list_country", {"country": "Canada"}, [ALPHA, BETA]),
    ("list_venue", {"venue": "ICML"}, ["P0001", "P0003", "P0004", "P0006"]),
    ("count_venue", {"venue": "STOC"}, 0),
    ("list_field", {"field": ML}, ["P0001", "P0003", "P0004"]),
    ("count_field", {"field": DB}, 3),
    ("list_year", {"year": 2012}, ["P0002", "P0003"]),
    ("count_year", {"year": 2011}, 0),
    ("count_items", {"papers": ["P0002", "P0002", "P0003"]}, 2),
    ("count_items", {"papers": []}, 0),
    ("merge_items", {"first": ["P0003", "P0001"], "second": ["P0001", "P0005"]},
     ["P0001", "P0003", "P0005"]),
]


@pytest.mark.parametrize("name,args,expected", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_tool_known_output(name, args, expected):
    assert call_tool(TINY, f"{D}.{name}", args) == (True, expected)


def test_every_tool_has_a_known_output_case():
    assert {f"{D}.{c[0]}" for c in CASES} == set(domain_tools(D))


def test_tool_inventory_and_naming():
    tools = domain_tools(D)
    assert len(tools) >= 22
    kinds = [t.spec.kind for t in tools.values()]
    assert kinds.count("P") >= 4 and kinds.count("R") >= 20
    for name, t in tools.items():
        assert name == f"{D}.{t.spec.verb}_{t.spec.obj}"
        assert t.spec.verb.isidentifier() and "_" not in t.spec.verb
        assert t.spec.obj.isidentifier() and "_" not in t.spec.obj
    assert any(len(t.spec.parameters["properties"]) == 2 for t in tools.values())


def test_verbs_and_objects_each_in_two_tools():
    tools = domain_tools(D).values()
    for attr in ("verb", "obj"):
        words = [getattr(t.spec, attr) for t in tools]
        rare = sorted(w for w in set(words) if words.count(w) < 2)
        assert not rare, f"{attr} words used by one tool only: {rare}"


def test_argument_types_chain():
    world = make_world(D, 0)
    tools = domain_tools(D).values()
    produced = {t.spec.return_type for t in tools}
    for t in tools:
        for pname, xtype in t.spec.arg_types().items():
            assert xtype in world.lexicon or xtype in produced, (t.spec.name, pname, xtype)
    # every non-count output type feeds some tool
    consumed = {x for t in tools for x in t.spec.arg_types().values()}
    assert produced - consumed <= {"number"}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_seeded_world_invariants(seed):
    w = make_world(D, seed)
    papers, authors, affs = w.data["papers"], w.data["authors"], w.data["affiliations"]
    json.dumps(w.data)  # JSON-able
    ids = sorted(papers)
    assert ids == [f"P{i:04d}" for i in range(1, 61)]
    years = [papers[p]["year"] for p in ids]
    assert years == sorted(years) and 2010 <= years[0] and years[-1] <= 2025
    assert len({p["title"] for p in papers.values()}) == 60
    assert len(authors) == 30 and len(affs) == 8
    assert len(w.data["venues"]) == 8 and len(w.data["fields"]) == 5
    for p in papers.values():
        assert 1 <= len(p["authors"]) <= 4 and p["authors"] == sorted(set(p["authors"]))
        assert p["references"] == sorted(set(p["references"]))
        assert all(papers[r]["year"] < p["year"] for r in p["references"])
        assert p["venue"] in w.data["venues"] and p["field"] in w.data["fields"]
        assert set(p["authors"]) <= set(authors)
    assert {a for p in papers.values() for a in p["authors"]} == set(authors)
    assert {a["affiliation"] for a in authors.values()} == set(affs)
    assert {a["country"] for a in affs.values()} == set(w.data["countries"])
    for key, values in w.lexicon.items():
        assert list(values) == sorted(values) and values, key
    assert w.lexicon["year"] == tuple(sorted(set(years)))
    graph = nx.DiGraph([(p, r) for p in ids for r in papers[p]["references"]])
    assert nx.is_directed_acyclic_graph(graph)


def _hindex_numpy(counts):
    c = np.sort(np.asarray(counts, dtype=np.int64))[::-1]
    return int(np.sum(c >= np.arange(1, len(c) + 1)))


def test_citation_tools_match_networkx_and_numpy():
    w = make_world(D, 5)
    papers = w.data["papers"]
    graph = nx.DiGraph()
    graph.add_nodes_from(papers)
    graph.add_edges_from((p, r) for p in papers for r in papers[p]["references"])
    for p in sorted(papers)[::7]:
        ok, cites = call_tool(w, f"{D}.list_citations", {"paper": p})
        assert ok and cites == sorted(graph.predecessors(p))
    for author in w.lexicon["author"]:
        mine = [p for p in papers if author in papers[p]["authors"]]
        counts = [graph.in_degree(p) for p in mine]
        assert call_tool(w, f"{D}.compute_hindex", {"author": author}) == (
            True, _hindex_numpy(counts))
        assert call_tool(w, f"{D}.compute_citations", {"author": author}) == (
            True, int(np.sum(counts)))
    found = 0
    for s in sorted(papers)[-15:]:
        for t in sorted(papers)[:30:3]:
            ok, out = call_tool(w, f"{D}.find_path", {"source": s, "target": t})
            assert ok == nx.has_path(graph, s, t)
            if ok:
                found += 1
                assert out == min(nx.all_shortest_paths(graph, s, t))
                assert call_tool(w, f"{D}.count_path", {"source": s, "target": t}) == (
                    True, len(out) - 1)
    assert found > 5


def test_chained_calls_on_seeded_world():
    w = make_world(D, 1)
    author = w.lexicon["author"][0]
    ok, mine = call_tool(w, f"{D}.list_papers", {"author": author})
    assert ok and mine
    ok, first = call_tool(w, f"{D}.find_oldest", {"papers": mine})
    assert (ok, first) == call_tool(w, f"{D}.get_oldest", {"author": author})
    ok, aff = call_tool(w, f"{D}.get_affiliation", {"author": author})
    assert ok and author in call_tool(w, f"{D}.list_members", {"affiliation": aff})[1]
    ok, title = call_tool(w, f"{D}.get_title", {"paper": first})
    assert call_tool(w, f"{D}.find_title", {"title": title}) == (True, first)


ERRORS = [
    ("get_title", {"paper": "P9999"}, "paper"),
    ("list_papers", {"author": "Nobody Known"}, "author"),
    ("list_members", {"affiliation": "Nowhere U"}, "affiliation"),
    ("list_country", {"country": "Atlantis"}, "country"),
    ("list_venue", {"venue": "SODA"}, "venue"),
    ("list_field", {"field": "alchemy"}, "field"),
    ("list_year", {"year": 2009}, "year"),
    ("count_year", {"year": 2026}, "year"),
    ("find_title", {"title": "No Such Title"}, "title"),
    ("compare_year", {"first": "P0001", "second": "P0100"}, "second"),
    ("compare_hindex", {"first": "Zed", "second": ANN}, "first"),
    ("find_path", {"source": "P0001", "target": "P0006"}, "no citation chain"),
    ("count_path", {"source": "P0003", "target": "P0002"}, "no citation chain"),
    ("find_path", {"source": "P0006", "target": "X1"}, "target"),
    ("find_oldest", {"papers": []}, "empty"),
    ("find_newest", {"papers": ["P0001", "paper two"]}, "papers"),
    ("merge_items", {"first": ["P0001"], "second": [3]}, "second"),
    ("merge_authors", {"first": [""], "second": [ANN]}, "first"),
    ("get_year", {"paper": 1}, "JSON type string"),
    ("list_year", {"year": "2012"}, "JSON type integer"),
    ("list_year", {"year": True}, "JSON type integer"),
    ("count_items", {"papers": "P0001"}, "JSON type array"),
    ("get_title", {}, "missing"),
    ("get_title", {"paper": "P0001", "extra": 1}, "unknown arguments"),
]


@pytest.mark.parametrize("name,args,needle", ERRORS,
                         ids=[f"{e[0]}-{i}" for i, e in enumerate(ERRORS)])
def test_bad_calls_fail_with_a_message(name, args, needle):
    ok, msg = call_tool(TINY, f"{D}.{name}", args)
    assert not ok and isinstance(msg, str) and needle in msg
