"""The paper registry: every paper the project covers, what implements it, and its status.

The registry is plain data. Published facts about each paper (citation, official code URL,
headline claims) live in ``third_party/papers/<id>.toml`` and are read by :func:`paper_facts`.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import pathlib
import tomllib
from typing import Any

__all__ = [
    "Status",
    "Paper",
    "PAPERS",
    "get",
    "ids",
    "paper_facts",
    "paper_says",
    "paper_statements",
    "third_party_dir",
    "UnknownPaperError",
]


class Status(str, enum.Enum):
    """How far a paper is implemented."""

    NOT_STARTED = "not implemented"  # no experiment: `reproduce` refuses it
    IN_PROGRESS = "in progress"  # an experiment runs, but its issue is still open
    # done (issue resolved; a claim that did not reproduce is reported as such, not left open);
    # included in `reproduce all`
    IMPLEMENTED = "implemented"


@dataclasses.dataclass(frozen=True)
class Paper:
    """One registry row.

    Attributes:
      id: short identifier used on the command line (``jaxpapers reproduce <id>``).
      title: the paper's title (from ``third_party/papers/<id>.toml`` when present).
      capability: the library module that implements the method, e.g. ``jaxpapers.linear_nets``.
      experiment: the importable experiment package, e.g. ``experiments.layer_balancing``.
      status: a :class:`Status`; ``IN_PROGRESS`` and ``IMPLEMENTED`` papers can be reproduced
        by id, ``reproduce all`` runs the ``IMPLEMENTED`` ones.
      issue: the tracker issue that builds it (0 when none yet).
    """

    id: str
    title: str
    capability: str
    experiment: str
    status: Status
    issue: int = 0

    @property
    def reproducible(self) -> bool:
        return self.status is not Status.NOT_STARTED

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "capability": self.capability,
            "experiment": self.experiment,
            "status": self.status.value,
            "issue": self.issue,
        }


class UnknownPaperError(KeyError):
    """Raised for an id that is not in the registry."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable.
        return str(self.args[0])


def _p(pid: str, title: str, capability: str, status: Status = Status.NOT_STARTED,
       issue: int = 0) -> Paper:
    return Paper(pid, title, f"jaxpapers.{capability}", f"experiments.{pid}", status, issue)


# Order follows the abstracts in the seed list. Titles are confirmed in third_party/papers/.
_NS, _IMPL = Status.NOT_STARTED, Status.IMPLEMENTED
PAPERS: tuple[Paper, ...] = (
    _p("qsched", "Q-Sched: few-step diffusion with scheduler-level post-training quantization",
       "diffusion", _IMPL, issue=5),
    _p("slate_glm", "Contextual slate GLM bandits under limited adaptivity", "bandits", _IMPL,
       issue=7),
    _p("codetracer", "CodeTracer: syntax-aware watermarking of LLM-generated code", "watermark",
       _IMPL, issue=20),
    _p("kernelfoundry", "KernelFoundry: quality-diversity search for GPU kernels", "evolve",
       _IMPL, issue=30),
    _p("tdm_r1", "TDM-R1: reinforcement learning for few-step generative models", "diffusion",
       _IMPL, issue=24),
    _p("layer_balancing", "Layer-wise learning-rate balancing in two- and three-layer linear networks",
       "linear_nets", _IMPL, issue=3),
    _p("fedpdg", "FedPDG: federated learning with diffusion-generated data", "federated",
       _IMPL, issue=22),
    _p("spon", "SPON: activation sparsity for LLM inference", "sparsity", _IMPL,
       issue=19),
    _p("fedgcm", "FedGCM: federated graph learning under homophily heterogeneity", "federated",
       _IMPL, issue=21),
    _p("dive", "DIVE: synthesized agentic tasks for robust tool use", "benchmarks", _IMPL,
       issue=27),
    _p("binarypc", "BinaryPC: binary-hash sparse attention for long contexts", "attention",
       _IMPL, issue=6),
    _p("rsa_cp", "RSA-CP: conformal prediction with optimal-transport score alignment", "conformal", _IMPL,
       issue=10),
    _p("cgpo", "CGPO: critic-guided diffusion policy optimisation", "rl", _IMPL, issue=25),
    _p("coupling_pinn", "Coupling layers for deep physics-informed neural networks", "pinn",
       _IMPL, issue=9),
    _p("excytin", "ExCyTIn-Bench: evaluating LLM agents on cyber threat investigation", "benchmarks",
       _IMPL, issue=26),
    _p("supermeshnet", "SuperMeshNet: mesh super-resolution for PDE simulation", "graph",
       _IMPL, issue=23),
    _p("riskzero", "RiskZero: risk-sensitive MuZero-style planning", "search", _IMPL, issue=8),
    _p("vtbench", "VT-Bench: visual-tabular multimodal learning benchmark", "benchmarks",
       _IMPL, issue=29),
    _p("rel", "REL: relational reasoning benchmark", "benchmarks", _IMPL, issue=28),
)

_BY_ID = {p.id: p for p in PAPERS}


def ids() -> tuple[str, ...]:
    """All paper ids in registry order."""
    return tuple(_BY_ID)


def third_party_dir() -> pathlib.Path:
    """``third_party/`` of the checkout this package was installed from."""
    return pathlib.Path(__file__).resolve().parents[2] / "third_party"


@functools.cache
def paper_facts(pid: str) -> dict[str, Any]:
    """Published facts for paper ``pid`` from ``third_party/papers/<pid>.toml``.

    Returns an empty dict when the file is absent (e.g. a wheel install without the checkout).
    Raises:
      UnknownPaperError: ``pid`` is not a registered paper.
      ValueError: the TOML file exists but is malformed.
    """
    get(pid)
    path = third_party_dir() / "papers" / f"{pid}.toml"
    if not path.is_file():
        return {}
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"malformed paper facts file {path}: {e}") from e


def _statement(c: dict[str, Any]) -> str:
    """The paper's words of one ``[[claims]]`` entry: ``quote`` (verbatim from the paper) if
    present, else ``paper`` when it is text, else ``text`` (which carries the number)."""
    for field in ("quote", "paper", "text"):
        v = c.get(field)
        if isinstance(v, str) and v.strip():
            return v
    raise ValueError(f"claim {c.get('metric')!r} has no quote, paper or text")


def paper_says(pid: str, claim: str) -> str:
    """What paper ``pid`` says for its claim ``claim`` (a ``metric`` in its TOML's ``[[claims]]``).

    Experiments put this in a claim's ``paper`` field, so the report quotes the paper and never
    our own threshold (that goes in ``criterion``).

    Raises:
      UnknownPaperError: unknown ``pid``. KeyError: no such claim (the message lists them).
    """
    claims = paper_facts(pid).get("claims", [])
    for c in claims:
        if c.get("metric") == claim:
            return _statement(c)
    known = ", ".join(str(c.get("metric")) for c in claims) or "none"
    raise KeyError(f"third_party/papers/{pid}.toml has no claim {claim!r}; its claims: {known}")


def paper_statements(pid: str) -> tuple[str, ...]:
    """Every statement :func:`paper_says` can return for ``pid`` (for validating reports)."""
    return tuple(_statement(c) for c in paper_facts(pid).get("claims", []))


def get(pid: str) -> Paper:
    """The registry row for ``pid`` (see :func:`with_facts` for the confirmed title)."""
    try:
        paper = _BY_ID[pid]
    except KeyError:
        raise UnknownPaperError(
            f"unknown paper id {pid!r}; known ids: {', '.join(_BY_ID)}") from None
    return paper


def with_facts(paper: Paper) -> Paper:
    """``paper`` with its title replaced by the confirmed title from ``third_party``, if any."""
    facts = paper_facts(paper.id)
    title = facts.get("title")
    if title and facts.get("title_confirmed", False):
        return dataclasses.replace(paper, title=title)
    return paper
