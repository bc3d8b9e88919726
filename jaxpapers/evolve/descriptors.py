"""Behaviour descriptors of a Pallas kernel source: (memory, compute, parallelism) levels 0..3.

KernelFoundry places each candidate kernel in a 4 x 4 x 4 MAP-Elites grid by static pattern
matching on its source (``OptimizationFeatureClassifier`` in the official
``evolve_database_optimization_aware.py``; the SYCL / CUDA / Triton tables are in
``map_elites_patterns.py``). The rule, implemented by :func:`score_level` and :func:`level_of`:

* each level l = 1..3 of an axis lists categories ``{weight, patterns}``; a category counts ONCE,
  when any of its regexes matches;
* ``score(l) = matched weight / total weight of level l``, raised to at least
  ``DEFINITIVE_FLOOR = 0.25`` when some matched category has weight ``>= DEFINITIVE_WEIGHT = 0.9``;
* the axis level is the HIGHEST l with ``score(l) >= 0.15 + 0.03 (l - 1)`` (0.15, 0.18, 0.21),
  else 0. Levels are not required to be cumulative: manual DMA without any ``BlockSpec`` still
  reaches memory 3.

These constants are the official ones (``threshold_base=0.15``, ``(level - 1) * 0.03``,
``max_single_weight >= 0.9`` -> ``max(score, 0.25)``). Differences from the official code:

* the official regexes run on the raw source, comments included, with ``re.IGNORECASE``; ours
  are case-sensitive and run on :func:`normalized` text, built from Python tokens with comments
  and docstrings removed (other string literals stay: ``"parallel"`` is evidence);
* the tables are re-targeted from SYCL / CUDA / Triton to Pallas idioms (:data:`TABLE`), and
  there is no fourth (ESIMD) axis.

Regexes cannot tell kernel bodies from wrapper code: an unpack or a ``sum(axis=0)`` outside the
kernel counts like one inside. A pattern built by ``_all(r1, r2, ...)`` matches when every
``ri`` matches somewhere in the text (a conjunction). This module is plain Python over strings
(nothing to ``jit``).

>>> describe("y = pl.pallas_call(k, grid=(4, 2), in_specs=[pl.BlockSpec((8, 128), f)])(x)")
(1, 1, 1)
"""

from __future__ import annotations

import dataclasses
import io
import math
import re
import tokenize as _tk
import types
from collections.abc import Mapping, Sequence

__all__ = ["AXES", "Category", "TABLE", "MEMORY_LEVELS", "COMPUTE_LEVELS", "PARALLELISM_LEVELS",
           "THRESHOLD_BASE", "THRESHOLD_STEP", "DEFINITIVE_WEIGHT", "DEFINITIVE_FLOOR",
           "tokenize", "normalized", "score_level", "threshold", "level_of", "level_scores",
           "describe", "explain"]

AXES = ("memory", "compute", "parallelism")
THRESHOLD_BASE = 0.15  # level 1 threshold
THRESHOLD_STEP = 0.03  # added per level above 1
DEFINITIVE_WEIGHT = 0.9  # a matched category this heavy ...
DEFINITIVE_FLOOR = 0.25  # ... lifts the level score to at least this


@dataclasses.dataclass(frozen=True)
class Category:
    """One category of a level: counts ``weight`` once if any regex in ``patterns`` matches.

    Attributes:
      name: identifier shown by :func:`explain`.
      weight: finite, > 0 (1.0: the level's defining idiom; 0.25-0.6: supporting evidence).
      patterns: regexes (``re.search`` on :func:`normalized` text); a single string is one regex.
    """

    name: str
    weight: float
    patterns: tuple[str, ...]
    _compiled: tuple = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.weight, (int, float)) or not (math.isfinite(self.weight)
                                                              and self.weight > 0):
            raise ValueError(f"weight must be a finite number > 0, got {self.weight!r}")
        pats = (self.patterns,) if isinstance(self.patterns, str) else tuple(self.patterns)
        if not pats or not all(isinstance(p, str) for p in pats):
            raise TypeError(f"patterns must be a non-empty sequence of str, got {self.patterns!r}")
        try:
            compiled = tuple(re.compile(p) for p in pats)
        except re.error as err:
            raise ValueError(f"patterns of {self.name!r} hold an invalid regex: {err}") from err
        object.__setattr__(self, "weight", float(self.weight))
        object.__setattr__(self, "patterns", pats)
        object.__setattr__(self, "_compiled", compiled)

    def matches(self, text: str) -> bool:
        """Whether any of the patterns matches somewhere in ``text``."""
        return any(c.search(text) for c in self._compiled)


def _all(*regexes: str) -> str:
    """One regex that matches a text in which every one of ``regexes`` matches somewhere."""
    return r"\A" + "".join(rf"(?=[\s\S]*?(?:{r}))" for r in regexes)


# ------------------------------------------------------------------------------------ table
# Patterns see normalized() text: `pl.BlockSpec((8,128),f)`, `grid=(a,b//c)`, `x>>4`, `"parallel"`.
_ENTRY = r"(?:[^(),\n]|\([^()\n]*\))+"  # one grid-tuple entry, at most one level of parentheses
_SPLIT = r"\b\w*splits\b|\bsplit_k\b|\bk_split\b|\bsplit\w*=(?:pl\.)?program_id\("
_COMBINE = r"\blogsumexp\(|\bsum\((?:[^()\n]|\([^()\n]*\))*\baxis=0\b|\.sum\(0\)"

MEMORY_LEVELS: tuple[tuple[Category, ...], ...] = (
    (  # 1: blocked HBM <-> on-chip movement by BlockSpecs; in-kernel dynamic-slice gathers
        Category("block_spec", 1.0, (r"\bBlockSpec\(", r"\b(?:in|out)_specs=")),
        Category("dynamic_slice", 1.0, (r"\bpl\.d(?:s|slice)\(", r"\bdslice\(")),
        Category("ref_gather", 0.6, (r"\b\w+_ref\[[A-Za-z_]\w*\]", r"\b\w+_ref\.at\[")),
        Category("explicit_load_store", 0.5,
                 r"\b(?:pl|pl_triton|pltriton|plgpu)\.(?:load|store)\("),
    ),
    (  # 2: explicit on-chip scratch buffers
        Category("scratch_shapes", 1.0, r"\bscratch_shapes="),
        Category("scratch_alloc", 1.0, r"\b(?:VMEM|SMEM)\("),
        Category("run_scoped", 1.0, r"\brun_scoped\("),
        Category("resident_accumulator", 0.4, r"\bpl\.when\("),  # init / flush across steps
    ),
    (  # 3: scalar prefetch; manual DMA from operands left in HBM
        Category("scalar_prefetch", 1.0,
                 (r"\bnum_scalar_prefetch=", r"\bPrefetchScalarGridSpec\(")),
        Category("manual_dma", 1.0, (r"\bmake_async(?:_remote)?_copy\(", r"\basync_copy\(",
                                     r"\bemit_pipeline\(", r"\bcopy_gmem_to_smem\(")),
        Category("any_memory_space", 0.6, (r"\bmemory_space=[\w.]*\bANY\b",
                                           r"\b(?:pl|pltpu|plgpu)\.(?:[A-Za-z]\w*\.)?ANY\b")),
        Category("dma_semaphore", 0.6,
                 (r"\bSemaphoreType\.DMA\b", r"\bsemaphore_(?:wait|signal)\(")),
    ),
)

COMPUTE_LEVELS: tuple[tuple[Category, ...], ...] = (
    (  # 1: one fused pallas_call; in-kernel loop accumulation
        Category("pallas_call", 1.0, r"\bpallas_call\("),
        Category("fori_accumulation", 1.0, r"\bfori_loop\("),
        Category("ref_accumulate", 0.5, r"\b\w+_ref\[[^\]\n]*\]\+="),
    ),
    (  # 2: single-pass online softmax; exact int8 x int8 -> int32 dots
        Category("online_softmax", 1.0, (
            _all(r"\bmaximum\(", r"\bexp2?\(", r"\b(?:alpha|corr\w*|rescale\w*|m_prev|m_new)\b"),
            r"\bexp2?\((?:m|m_\w+)-m_\w+\)")),
        Category("running_statistics", 0.4,
                 r"\b(?:m_i|l_i|m_prev|l_prev|m_new|l_new|running_(?:max|sum))\b"),
        Category("int8_dot", 1.0, (
            r"\bpreferred_element_type=(?:jnp\.|np\.)?int32\b",
            _all(r"\b(?:jnp|np)\.int8\b", r"\b(?:jnp|np)\.int32\b", r"\bpreferred_element_type="))),
    ),
    (  # 3: in-kernel unpacking of packed (int4 / bit) data
        Category("bit_shift", 1.0,
                 (r">>", r"\bright_shift\(", r"\bshift_right_(?:logical|arithmetic)\(")),
        Category("bit_mask", 0.6, (r"&0[xX]0*[fF]{1,2}\b", r"&(?:15|255)\b",
                                   r"&(?:jnp|np)\.u?int\d+\(", r"\bbitwise_and\(")),
        Category("bitcast", 0.4, (r"\bbitcast_convert_type\(", r"\bbitcast\(")),
    ),
)

PARALLELISM_LEVELS: tuple[tuple[Category, ...], ...] = (
    (  # 1: a multi-axis grid
        Category("multi_axis_grid", 1.0, rf"\bgrid=\({_ENTRY},{_ENTRY}"),
        Category("higher_program_axis", 1.0,
                 r"\b(?:program_id|num_programs)\((?:axis=)?[1-9]\)"),
    ),
    (  # 2: split-K / decode splits AND a combine step (either alone stays below 0.18)
        Category("split_and_combine", 1.0, _all(_SPLIT, _COMBINE)),
        Category("split_axis", 0.25, _SPLIT),
        Category("combine", 0.25, _COMBINE),
    ),
    (  # 3: scheduling compiler parameters
        Category("dimension_semantics", 1.0, (r"\bdimension_semantics=",
                                              r"\bGridDimensionSemantics\b",
                                              r"([\"'])(?:parallel|arbitrary|core_parallel)\1")),
        Category("warps_stages", 1.0, r"\bnum_(?:warps|stages)="),
        Category("compiler_params", 0.5, (r"\bcompiler_params=", r"\b\w*CompilerParams\(")),
    ),
)

TABLE: Mapping[str, tuple[tuple[Category, ...], ...]] = types.MappingProxyType(
    dict(zip(AXES, (MEMORY_LEVELS, COMPUTE_LEVELS, PARALLELISM_LEVELS))))

# ------------------------------------------------------------------------------- tokens
_LAYOUT = {_tk.COMMENT, _tk.NL, _tk.INDENT, _tk.DEDENT, _tk.ENCODING}
_WORDS = {_tk.NAME, _tk.NUMBER, _tk.STRING}


def _check_source(source) -> None:
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")


def _significant(source: str) -> list[tuple[int, str] | None]:
    """(type, text) of the kept tokens; ``None`` marks the end of a logical line."""
    out: list[tuple[int, str] | None] = []
    pending: list[str] = []  # strings that may turn out to be a bare string statement
    at_start = True  # the next token begins a statement
    try:
        for tok in _tk.generate_tokens(io.StringIO(source).readline):
            kind, text = tok.type, tok.string
            if kind in _LAYOUT or (kind == _tk.ERRORTOKEN and not text.strip()):
                continue
            if kind == _tk.STRING and (at_start or pending):
                pending.append(text)
                at_start = False
                continue
            ends = kind in (_tk.NEWLINE, _tk.ENDMARKER) or (kind == _tk.OP and text == ";")
            if not ends:  # the strings were part of an expression
                out.extend((_tk.STRING, s) for s in pending)
            pending = []  # else: a docstring / bare string statement, dropped
            at_start = ends
            out.append((kind, text) if kind == _tk.OP or not ends else None)
    except (_tk.TokenError, SyntaxError):  # IndentationError is a SyntaxError
        out.extend((_tk.STRING, s) for s in pending)
    return out


def tokenize(source: str) -> list[str]:
    """The significant Python tokens of ``source``, as source text.

    Dropped: comments, NL / NEWLINE / INDENT / DEDENT / ENCODING / ENDMARKER, whitespace error
    tokens, and every bare string expression statement (module, class and function docstrings,
    and any other statement made only of adjacent string literals, on its own logical line).
    Other string literals are kept with their quotes (``'"parallel"'``). A docstring on the
    same line as its ``def ...:`` header is kept.

    Candidate sources may not be valid Python: when the tokenizer fails (unterminated
    bracket or triple-quoted string, inconsistent dedent), the tokens read before the failure
    are returned and nothing is raised. A stray character (``$``, an unterminated ``'``) is kept
    as its own token.

    Args:
      source: Python source text.

    Returns:
      list of token strings, in source order.

    >>> tokenize("'doc.'\\nx = f(a, 's')  # note\\n")
    ['x', '=', 'f', '(', 'a', ',', "'s'", ')']
    """
    _check_source(source)
    return [t[1] for t in _significant(source) if t is not None]


def normalized(source: str) -> str:
    """The kept tokens of ``source`` (see :func:`tokenize`) as one canonical text for regexes.

    Joining rule: the tokens of one logical line are concatenated with a single space between
    two adjacent tokens only when both are names (keywords included), numbers or strings, and
    nothing otherwise; logical lines are joined by ``"\\n"`` (empty ones left out). So
    ``pl.BlockSpec( (8, 128), f )`` becomes ``pl.BlockSpec((8,128),f)``, ``x >> 4`` becomes
    ``x>>4`` and ``for i in range(n)`` keeps its spaces; a call spanning several physical
    lines is on one line.

    >>> normalized("o_ref[...] += jnp.dot(x, y)  # acc\\nfor i in range(n): pass\\n")
    'o_ref[...]+=jnp.dot(x,y)\\nfor i in range(n):pass'
    """
    _check_source(source)
    lines, parts, prev = [], [], None
    for tok in _significant(source) + [None]:
        if tok is None:
            if parts:
                lines.append("".join(parts))
            parts, prev = [], None
            continue
        if prev in _WORDS and tok[0] in _WORDS:
            parts.append(" ")
        parts.append(tok[1])
        prev = tok[0]
    return "\n".join(lines)


# ------------------------------------------------------------------------------- scoring
def score_level(text: str, categories: Sequence[Category]) -> float:
    """The score of one level on ``text``: matched / total weight, floored when definitive.

    ``score = sum(w_c : c matches) / sum(w_c)``, then ``max(score, DEFINITIVE_FLOOR)`` if a
    matched category has ``w_c >= DEFINITIVE_WEIGHT``; 0.0 for an empty level. ``text`` is
    searched as given (callers pass :func:`normalized` source).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    cats = tuple(categories)
    if not all(isinstance(c, Category) for c in cats):
        raise TypeError("categories must be a sequence of Category")
    if not cats:
        return 0.0
    matched = [c.weight for c in cats if c.matches(text)]
    score = sum(matched) / sum(c.weight for c in cats)
    if matched and max(matched) >= DEFINITIVE_WEIGHT:
        score = max(score, DEFINITIVE_FLOOR)
    return score


def threshold(level: int) -> float:
    """The score level ``level >= 1`` must reach: ``0.15 + 0.03 (level - 1)``."""
    if not isinstance(level, int) or level < 1:
        raise ValueError(f"level must be an int >= 1, got {level!r}")
    return THRESHOLD_BASE + THRESHOLD_STEP * (level - 1)


def level_of(scores: Sequence[float]) -> int:
    """The highest level l (1-based: ``scores[l - 1]``) with a score >= threshold(l), else 0."""
    scores = tuple(scores)
    for level in range(len(scores), 0, -1):
        if scores[level - 1] >= threshold(level):
            return level
    return 0


def _check_table(table) -> None:
    if not isinstance(table, Mapping) or not table:
        raise TypeError("table must be a non-empty mapping axis -> levels")
    for axis, levels in table.items():
        if (isinstance(levels, str) or not isinstance(levels, Sequence) or not levels
                or not all(isinstance(lv, Sequence) and all(isinstance(c, Category) for c in lv)
                           for lv in levels)):
            raise TypeError(f"table[{axis!r}] must be a non-empty sequence of levels, each a "
                            "sequence of Category")


def level_scores(source: str, *, table: Mapping = TABLE) -> dict[str, tuple[float, ...]]:
    """Scores of levels 1..L of every axis of ``table`` on ``normalized(source)``.

    Returns:
      ``{axis: (score(1), ..., score(L))}`` in the table's axis order (L = 3 for :data:`TABLE`).
    """
    _check_source(source)
    _check_table(table)
    text = normalized(source)
    return {axis: tuple(score_level(text, cats) for cats in levels)
            for axis, levels in table.items()}


def describe(source: str, *, table: Mapping = TABLE) -> tuple[int, ...]:
    """The descriptor of ``source``: one level per axis, ``(memory, compute, parallelism)``.

    >>> describe("def f(x):\\n    return x @ x.T\\n")
    (0, 0, 0)
    """
    return tuple(level_of(s) for s in level_scores(source, table=table).values())


def explain(source: str, *, table: Mapping = TABLE) -> dict[str, dict]:
    """Why ``source`` got its descriptor, for reports.

    Returns:
      ``{axis: {"level": int, "scores": (score(1), ...), "matched": {l: (names, ...)}}}`` with
      the names of the matched categories of every level l = 1..L, in table order.
    """
    scores = level_scores(source, table=table)
    text = normalized(source)
    return {axis: {"level": level_of(scores[axis]), "scores": scores[axis],
                   "matched": {lv: tuple(c.name for c in cats if c.matches(text))
                               for lv, cats in enumerate(levels, start=1)}}
            for axis, levels in table.items()}
