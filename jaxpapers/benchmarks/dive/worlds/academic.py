"""The academic world: a seeded citation graph and the lookups DIVE's scholarly tools answer.

DIVE's academic domain calls live bibliographic APIs: arXiv search (by author, category, date
range), Crossref works / journals / members, OpenAlex works / authors / institutions / sources /
topics, and Semantic Scholar papers, authors, citations and references. Offline, one world holds

* ``papers``: 60 papers ``"P0001"``..``"P0060"`` with a unique title (drawn from word lists), a
  year in 2010-2025, a venue, a field of study, 1-4 authors and a sorted reference list. Ids are
  assigned in publication order (ids sort like publication dates, ties within a year broken by
  id), and a paper only references papers of a strictly earlier year, so the citation graph is
  a DAG;
* ``authors``: 30 author names, each with an affiliation (every author has at least one paper);
* ``affiliations``: 8 institutions, each with a country (every institution has a member, every
  country an institution);
* ``venues`` (8), ``fields`` (5), ``countries`` (4) and ``year_range`` ([2010, 2025]).

Tools mirror what those APIs return: paper metadata (Semantic Scholar ``get_paper`` / Crossref
``get_work``: title, year, venue, field, authors, search by title), the citation graph
(Semantic Scholar references / citations, OpenAlex ``cited_by_count``, a shortest citation
chain), authors (Semantic Scholar ``author_papers``, OpenAlex h-index, citation totals,
co-authors, affiliation), institutions (OpenAlex institutions: members, works, country),
sources and topics (Crossref ``journal_works``, OpenAlex sources / topics, arXiv date ranges:
papers of a venue, field or year). The ``"P"`` tools work on lists other tools return (paper
or author lists: count, merge, intersect, the oldest / newest paper, which is the smallest /
largest id because ids follow publication order). Every list is sorted by id (papers) or name.
"""

from __future__ import annotations

import random
import re
from collections import deque

from jaxpapers.benchmarks.dive.worlds._core import ToolError, arg, register_world, tool

__all__ = ["build"]

_D = "academic"
N_PAPERS = 60
N_AUTHORS = 30
N_AFFILIATIONS = 8
N_COUNTRIES = 4
N_VENUES = 8
N_FIELDS = 5
YEAR_RANGE = (2010, 2025)
MAX_AUTHORS = 4
MAX_REFERENCES = 5
_PAPER_ID = re.compile(r"P\d{4}")

_ADJECTIVES = ("Scalable", "Robust", "Sparse", "Efficient", "Adaptive", "Neural", "Bayesian",
               "Causal", "Federated", "Contrastive", "Hierarchical", "Differentiable")
_NOUNS = ("Transformers", "Graph Networks", "Embeddings", "Kernels", "Solvers", "Priors",
          "Policies", "Autoencoders", "Indexes", "Sketches")
_TASKS = ("Code Search", "Protein Folding", "Image Retrieval", "Theorem Proving",
          "Robot Control", "Query Planning", "Speech Recognition", "Weather Forecasting",
          "Drug Discovery", "Text Summarization", "Link Prediction", "Anomaly Detection")
_FIRST = ("Ada", "Bruno", "Chen", "Dana", "Emil", "Farah", "Goran", "Hana", "Ivan", "Jia",
          "Kofi", "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa")
_LAST = ("Abe", "Brandt", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Haddad", "Ito",
         "Jensen", "Kowalski", "Lindqvist", "Moreau", "Novak", "Okafor", "Petrov", "Rossi",
         "Sato")
_INSTITUTIONS = ("Northgate University", "Lakeside Institute of Technology",
                 "Harborview College", "Summit Research Lab", "Riverbend University",
                 "Eastfield Polytechnic", "Pinecrest Institute", "Westmoor University",
                 "Crescent Academy of Sciences", "Highland Tech", "Bayshore University",
                 "Meridian Research Center")
_COUNTRIES = ("Canada", "Japan", "Germany", "Brazil", "Kenya", "India", "France")
_VENUES = ("NeurIPS", "ICML", "ICLR", "CVPR", "ACL", "KDD", "SIGMOD", "STOC", "ICRA", "JMLR",
           "TPAMI", "VLDB")
_FIELDS = ("machine learning", "computer vision", "natural language processing", "databases",
           "theory", "robotics", "information retrieval", "systems")


@register_world(_D)
def build(rng: random.Random) -> tuple[dict, dict]:
    """Draw the citation graph, its authors and institutions from ``rng`` alone."""
    countries = sorted(rng.sample(_COUNTRIES, N_COUNTRIES))
    institutions = sorted(rng.sample(_INSTITUTIONS, N_AFFILIATIONS))
    venues = sorted(rng.sample(_VENUES, N_VENUES))
    fields = sorted(rng.sample(_FIELDS, N_FIELDS))
    # every country hosts an institution, every institution has a member
    inst_country = list(countries) + [rng.choice(countries)
                                      for _ in range(N_AFFILIATIONS - N_COUNTRIES)]
    rng.shuffle(inst_country)
    affiliations = {name: {"country": c} for name, c in zip(institutions, inst_country)}
    names = sorted(rng.sample([f"{f} {l}" for f in _FIRST for l in _LAST], N_AUTHORS))
    aff_of = list(institutions) + [rng.choice(institutions)
                                   for _ in range(N_AUTHORS - N_AFFILIATIONS)]
    rng.shuffle(aff_of)
    authors = {name: {"affiliation": a} for name, a in zip(names, aff_of)}

    years = sorted(rng.randint(*YEAR_RANGE) for _ in range(N_PAPERS))
    ids = [f"P{i + 1:04d}" for i in range(N_PAPERS)]
    titles: set[str] = set()
    papers: dict[str, dict] = {}
    for i, (pid, year) in enumerate(zip(ids, years)):
        while True:
            title = f"{rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} for {rng.choice(_TASKS)}"
            if title not in titles:
                titles.add(title)
                break
        older = [q for q, y in zip(ids[:i], years[:i]) if y < year]
        refs = rng.sample(older, rng.randint(0, min(MAX_REFERENCES, len(older))))
        papers[pid] = {"title": title, "year": year, "venue": rng.choice(venues),
                       "field": rng.choice(fields),
                       "authors": sorted(rng.sample(names, rng.randint(1, MAX_AUTHORS))),
                       "references": sorted(refs)}
    for name in names:  # an author without a paper joins a paper that still has room
        if not any(name in p["authors"] for p in papers.values()):
            room = [q for q in ids if len(papers[q]["authors"]) < MAX_AUTHORS]
            q = rng.choice(room)
            papers[q]["authors"] = sorted(papers[q]["authors"] + [name])

    data = {"papers": papers, "authors": authors, "affiliations": affiliations,
            "venues": venues, "fields": fields, "countries": countries,
            "year_range": list(YEAR_RANGE)}
    lexicon = {"paper": ids, "title": sorted(titles), "author": names,
               "affiliation": institutions, "country": countries, "venue": venues,
               "field": fields, "year": sorted(set(years))}
    return data, lexicon


# ------------------------------------------------------------------ argument checks / lookups
def _paper(world, name: str, pid: str) -> dict:
    papers = world.data["papers"]
    if pid not in papers:
        raise ToolError(f"argument {name!r}: unknown paper {pid!r}")
    return papers[pid]


def _author(world, name: str, who: str) -> dict:
    if who not in world.data["authors"]:
        raise ToolError(f"argument {name!r}: unknown author {who!r}")
    return world.data["authors"][who]


def _member_of(world, name: str, table: str, kind: str, value: str) -> str:
    if value not in world.data[table]:
        raise ToolError(f"argument {name!r}: unknown {kind} {value!r}")
    return value


def _year(world, name: str, year: int) -> int:
    lo, hi = world.data["year_range"]
    if not lo <= year <= hi:
        raise ToolError(f"argument {name!r}: year {year} is outside {lo}-{hi}")
    return year


def _ids(name: str, papers: list, *, nonempty: bool = False) -> list[str]:
    for p in papers:
        if not isinstance(p, str) or not _PAPER_ID.fullmatch(p):
            raise ToolError(f"argument {name!r}: {p!r} is not a paper id like 'P0001'")
    if nonempty and not papers:
        raise ToolError(f"argument {name!r}: the paper list is empty")
    return sorted(set(papers))


def _names(name: str, people: list) -> list[str]:
    for p in people:
        if not isinstance(p, str) or not p.strip():
            raise ToolError(f"argument {name!r}: {p!r} is not an author name")
    return sorted(set(people))


def _citations(world, pid: str) -> list[str]:
    papers = world.data["papers"]
    return [q for q in sorted(papers) if pid in papers[q]["references"]]


def _papers_of(world, who: str) -> list[str]:
    papers = world.data["papers"]
    return [q for q in sorted(papers) if who in papers[q]["authors"]]


def _hindex(world, who: str) -> int:
    counts = sorted((len(_citations(world, q)) for q in _papers_of(world, who)), reverse=True)
    return sum(1 for rank, c in enumerate(counts, start=1) if c >= rank)


def _chain(world, source: str, target: str) -> list[str]:
    """The lexicographically first shortest reference chain source -> ... -> target (BFS that
    expands references in id order)."""
    _paper(world, "source", source)
    _paper(world, "target", target)
    parent = {source: None}
    queue = deque([source])
    while queue:
        cur = queue.popleft()
        if cur == target:
            path = [cur]
            while parent[path[-1]] is not None:
                path.append(parent[path[-1]])
            return path[::-1]
        for ref in world.data["papers"][cur]["references"]:
            if ref not in parent:
                parent[ref] = cur
                queue.append(ref)
    raise ToolError(f"arguments 'source', 'target': no citation chain leads from {source!r} "
                    f"to {target!r}")


def _p() -> dict:
    return arg("paper", "string", "paper id, e.g. 'P0001'")


def _a() -> dict:
    return arg("author", "string", "author name")


def _aff() -> dict:
    return arg("affiliation", "string", "institution name")


def _n() -> dict:
    return arg("number", "integer")


def _pl() -> dict:
    return arg("paper", "array", "paper ids", items="string")


def _al() -> dict:
    return arg("author", "array", "author names", items="string")


# ------------------------------------------------------------------ paper metadata
@tool(_D, "get", "title", "Title of a paper (Semantic Scholar get_paper: title).",
      params={"paper": _p()}, returns=arg("title", "string"), kind="R", group="paper")
def get_title(world, paper):
    return _paper(world, "paper", paper)["title"]


@tool(_D, "get", "year", "Publication year of a paper.",
      params={"paper": _p()}, returns=arg("year", "integer"), kind="R", group="paper")
def get_year(world, paper):
    return _paper(world, "paper", paper)["year"]


@tool(_D, "get", "venue", "Venue (journal or conference) a paper appeared in.",
      params={"paper": _p()}, returns=arg("venue", "string"), kind="R", group="paper")
def get_venue(world, paper):
    return _paper(world, "paper", paper)["venue"]


@tool(_D, "get", "field", "Field of study of a paper (Semantic Scholar fieldsOfStudy).",
      params={"paper": _p()}, returns=arg("field", "string"), kind="R", group="paper")
def get_field(world, paper):
    return _paper(world, "paper", paper)["field"]


@tool(_D, "list", "authors", "Authors of a paper, sorted by name.",
      params={"paper": _p()}, returns=arg("author", "array", items="string"), kind="R",
      group="paper")
def list_authors(world, paper):
    return list(_paper(world, "paper", paper)["authors"])


@tool(_D, "count", "authors", "Number of authors of a paper.",
      params={"paper": _p()}, returns=_n(), kind="R", group="paper")
def count_authors(world, paper):
    return len(_paper(world, "paper", paper)["authors"])


@tool(_D, "find", "title", "The paper whose title is exactly this (arXiv / Crossref title "
      "search).", params={"title": arg("title", "string", "exact paper title")},
      returns=arg("paper", "string"), kind="R", group="paper")
def find_title(world, title):
    for pid in sorted(world.data["papers"]):
        if world.data["papers"][pid]["title"] == title:
            return pid
    raise ToolError(f"argument 'title': no paper is titled {title!r}")


@tool(_D, "compare", "year", "Publication year of the first paper minus that of the second.",
      params={"first": _p(), "second": _p()}, returns=_n(), kind="R", group="paper")
def compare_year(world, first, second):
    return _paper(world, "first", first)["year"] - _paper(world, "second", second)["year"]


@tool(_D, "find", "oldest", "The earliest-published paper of a list (ids follow publication "
      "order, so the smallest id).", params={"papers": _pl()},
      returns=arg("paper", "string"), kind="P", group="paper")
def find_oldest(world, papers):
    return _ids("papers", papers, nonempty=True)[0]


@tool(_D, "find", "newest", "The latest-published paper of a list (ids follow publication "
      "order, so the largest id).", params={"papers": _pl()},
      returns=arg("paper", "string"), kind="P", group="paper")
def find_newest(world, papers):
    return _ids("papers", papers, nonempty=True)[-1]


# ------------------------------------------------------------------ citation graph
@tool(_D, "list", "references", "Papers a paper cites (Semantic Scholar references), sorted.",
      params={"paper": _p()}, returns=arg("paper", "array", items="string"), kind="R",
      group="citation")
def list_references(world, paper):
    return list(_paper(world, "paper", paper)["references"])


@tool(_D, "list", "citations", "Papers that cite a paper (Semantic Scholar citations), sorted.",
      params={"paper": _p()}, returns=arg("paper", "array", items="string"), kind="R",
      group="citation")
def list_citations(world, paper):
    _paper(world, "paper", paper)
    return _citations(world, paper)


@tool(_D, "count", "references", "Number of papers a paper cites.",
      params={"paper": _p()}, returns=_n(), kind="R", group="citation")
def count_references(world, paper):
    return len(_paper(world, "paper", paper)["references"])


@tool(_D, "count", "citations", "Number of papers citing a paper (OpenAlex cited_by_count).",
      params={"paper": _p()}, returns=_n(), kind="R", group="citation")
def count_citations(world, paper):
    _paper(world, "paper", paper)
    return len(_citations(world, paper))


@tool(_D, "compare", "citations", "Citation count of the first paper minus that of the second.",
      params={"first": _p(), "second": _p()}, returns=_n(), kind="R", group="citation")
def compare_citations(world, first, second):
    _paper(world, "first", first)
    _paper(world, "second", second)
    return len(_citations(world, first)) - len(_citations(world, second))


@tool(_D, "find", "path", "Shortest citation chain from a citing paper down to a cited one "
      "(source, a paper source cites, ..., target); among equally short chains the first in id "
      "order.", params={"source": _p(), "target": _p()},
      returns=arg("paper", "array", items="string"), kind="R", group="citation")
def find_path(world, source, target):
    return _chain(world, source, target)


@tool(_D, "count", "path", "Number of citation hops on the shortest chain from a citing paper "
      "down to a cited one.", params={"source": _p(), "target": _p()}, returns=_n(), kind="R",
      group="citation")
def count_path(world, source, target):
    return len(_chain(world, source, target)) - 1


@tool(_D, "find", "common", "Papers present in both lists (e.g. shared references), sorted.",
      params={"first": _pl(), "second": _pl()}, returns=arg("paper", "array", items="string"),
      kind="P", group="citation")
def find_common(world, first, second):
    return sorted(set(_ids("first", first)) & set(_ids("second", second)))


@tool(_D, "count", "common", "Number of distinct papers present in both lists.",
      params={"first": _pl(), "second": _pl()}, returns=_n(), kind="P", group="citation")
def count_common(world, first, second):
    return len(set(_ids("first", first)) & set(_ids("second", second)))


# ------------------------------------------------------------------ authors
@tool(_D, "list", "papers", "Papers an author wrote (Semantic Scholar author_papers), sorted.",
      params={"author": _a()}, returns=arg("paper", "array", items="string"), kind="R",
      group="author")
def list_papers(world, author):
    _author(world, "author", author)
    return _papers_of(world, author)


@tool(_D, "count", "papers", "Number of papers an author wrote (OpenAlex works_count).",
      params={"author": _a()}, returns=_n(), kind="R", group="author")
def count_papers(world, author):
    _author(world, "author", author)
    return len(_papers_of(world, author))


@tool(_D, "compute", "hindex", "h-index of an author: the largest h such that h of their "
      "papers have at least h citations each.", params={"author": _a()}, returns=_n(), kind="R",
      group="author")
def compute_hindex(world, author):
    _author(world, "author", author)
    return _hindex(world, author)


@tool(_D, "compare", "hindex", "h-index of the first author minus that of the second.",
      params={"first": _a(), "second": _a()}, returns=_n(), kind="R", group="author")
def compare_hindex(world, first, second):
    _author(world, "first", first)
    _author(world, "second", second)
    return _hindex(world, first) - _hindex(world, second)


@tool(_D, "compute", "citations", "Total citations of an author's papers (OpenAlex "
      "cited_by_count of an author).", params={"author": _a()}, returns=_n(), kind="R",
      group="author")
def compute_citations(world, author):
    _author(world, "author", author)
    return sum(len(_citations(world, q)) for q in _papers_of(world, author))


@tool(_D, "find", "coauthors", "Everyone who shares a paper with an author, sorted by name.",
      params={"author": _a()}, returns=arg("author", "array", items="string"), kind="R",
      group="author")
def find_coauthors(world, author):
    _author(world, "author", author)
    papers = world.data["papers"]
    return sorted({a for q in _papers_of(world, author) for a in papers[q]["authors"]}
                  - {author})


@tool(_D, "count", "coauthors", "Number of distinct co-authors of an author.",
      params={"author": _a()}, returns=_n(), kind="R", group="author")
def count_coauthors(world, author):
    return len(find_coauthors(world, author))


@tool(_D, "get", "affiliation", "Institution an author is affiliated with (OpenAlex "
      "last_known_institution).", params={"author": _a()}, returns=arg("affiliation", "string"),
      kind="R", group="author")
def get_affiliation(world, author):
    return _author(world, "author", author)["affiliation"]


@tool(_D, "get", "oldest", "An author's earliest-published paper.",
      params={"author": _a()}, returns=arg("paper", "string"), kind="R", group="author")
def get_oldest(world, author):
    _author(world, "author", author)
    return _papers_of(world, author)[0]


@tool(_D, "get", "newest", "An author's latest-published paper.",
      params={"author": _a()}, returns=arg("paper", "string"), kind="R", group="author")
def get_newest(world, author):
    _author(world, "author", author)
    return _papers_of(world, author)[-1]


@tool(_D, "merge", "authors", "Union of two author lists, sorted by name without repeats.",
      params={"first": _al(), "second": _al()}, returns=arg("author", "array", items="string"),
      kind="P", group="author")
def merge_authors(world, first, second):
    return sorted(set(_names("first", first)) | set(_names("second", second)))


# ------------------------------------------------------------------ institutions
@tool(_D, "list", "members", "Authors affiliated with an institution, sorted by name.",
      params={"affiliation": _aff()}, returns=arg("author", "array", items="string"), kind="R",
      group="institution")
def list_members(world, affiliation):
    _member_of(world, "affiliation", "affiliations", "affiliation", affiliation)
    authors = world.data["authors"]
    return [a for a in sorted(authors) if authors[a]["affiliation"] == affiliation]


@tool(_D, "count", "members", "Number of authors affiliated with an institution.",
      params={"affiliation": _aff()}, returns=_n(), kind="R", group="institution")
def count_members(world, affiliation):
    return len(list_members(world, affiliation))


@tool(_D, "list", "affiliation", "Papers with at least one author from an institution "
      "(OpenAlex works filtered by institution), sorted.", params={"affiliation": _aff()},
      returns=arg("paper", "array", items="string"), kind="R", group="institution")
def list_affiliation(world, affiliation):
    members = set(list_members(world, affiliation))
    papers = world.data["papers"]
    return [q for q in sorted(papers) if members & set(papers[q]["authors"])]


@tool(_D, "count", "affiliation", "Number of papers with at least one author from an "
      "institution.", params={"affiliation": _aff()}, returns=_n(), kind="R", group="institution")
def count_affiliation(world, affiliation):
    return len(list_affiliation(world, affiliation))


@tool(_D, "get", "country", "Country an institution is located in (OpenAlex institution "
      "country_code).", params={"affiliation": _aff()}, returns=arg("country", "string"),
      kind="R", group="institution")
def get_country(world, affiliation):
    _member_of(world, "affiliation", "affiliations", "affiliation", affiliation)
    return world.data["affiliations"][affiliation]["country"]


@tool(_D, "list", "country", "Institutions located in a country, sorted by name.",
      params={"country": arg("country", "string", "country name")},
      returns=arg("affiliation", "array", items="string"), kind="R", group="institution")
def list_country(world, country):
    if country not in world.data["countries"]:
        raise ToolError(f"argument 'country': unknown country {country!r}")
    affs = world.data["affiliations"]
    return [a for a in sorted(affs) if affs[a]["country"] == country]


# ------------------------------------------------------------------ venues, fields, years
@tool(_D, "list", "venue", "Papers published in a venue (Crossref journal_works / OpenAlex "
      "source works), sorted.", params={"venue": arg("venue", "string", "venue name")},
      returns=arg("paper", "array", items="string"), kind="R", group="venue")
def list_venue(world, venue):
    _member_of(world, "venue", "venues", "venue", venue)
    papers = world.data["papers"]
    return [q for q in sorted(papers) if papers[q]["venue"] == venue]


@tool(_D, "count", "venue", "Number of papers published in a venue.",
      params={"venue": arg("venue", "string", "venue name")}, returns=_n(), kind="R",
      group="venue")
def count_venue(world, venue):
    return len(list_venue(world, venue))


@tool(_D, "list", "field", "Papers of a field of study (arXiv category / OpenAlex topic), "
      "sorted.", params={"field": arg("field", "string", "field of study")},
      returns=arg("paper", "array", items="string"), kind="R", group="venue")
def list_field(world, field):
    _member_of(world, "field", "fields", "field", field)
    papers = world.data["papers"]
    return [q for q in sorted(papers) if papers[q]["field"] == field]


@tool(_D, "count", "field", "Number of papers of a field of study.",
      params={"field": arg("field", "string", "field of study")}, returns=_n(), kind="R",
      group="venue")
def count_field(world, field):
    return len(list_field(world, field))


@tool(_D, "list", "year", "Papers published in a year (arXiv date-range search), sorted.",
      params={"year": arg("year", "integer", "publication year")},
      returns=arg("paper", "array", items="string"), kind="R", group="venue")
def list_year(world, year):
    _year(world, "year", year)
    papers = world.data["papers"]
    return [q for q in sorted(papers) if papers[q]["year"] == year]


@tool(_D, "count", "year", "Number of papers published in a year.",
      params={"year": arg("year", "integer", "publication year")}, returns=_n(), kind="R",
      group="venue")
def count_year(world, year):
    return len(list_year(world, year))


@tool(_D, "count", "items", "Number of distinct papers in a list.",
      params={"papers": _pl()}, returns=_n(), kind="P", group="venue")
def count_items(world, papers):
    return len(_ids("papers", papers))


@tool(_D, "merge", "items", "Union of two paper lists, sorted without repeats.",
      params={"first": _pl(), "second": _pl()}, returns=arg("paper", "array", items="string"),
      kind="P", group="venue")
def merge_items(world, first, second):
    return sorted(set(_ids("first", first)) | set(_ids("second", second)))
