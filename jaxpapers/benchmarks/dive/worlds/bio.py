"""Biology world: a small gene catalogue, sequence motifs and restriction enzymes.

The world holds four organisms (drawn from seven model organisms), 30 genes (symbol, organism,
chromosome and a coding sequence of 60-240 nt that starts with ``ATG``, ends with a stop codon and
has no in-frame stop before it, so it translates cleanly), five regulatory motifs (TATA box, GC
box, ...) and six restriction enzymes with their recognition sites and cut offsets. Some genes
carry a planted motif or recognition site, so searches find something.

The tools mirror what DIVE's biological domain does with NCBI gene records and Biopython:
``Seq`` (``transcribe`` / ``back_transcribe`` / ``reverse_complement`` / ``translate`` with the
standard codon table, ``find``, ``count_overlap``), ``SeqUtils.gc_fraction``,
``CodonTable.standard_dna_table`` (synonymous codons), ``ProtParam.ProteinAnalysis``
(``molecular_weight`` with average masses), a pairwise identity, and ``Restriction`` (cut
positions of an enzyme, the enzymes that cut a sequence). Every table (codons, amino-acid masses,
enzymes, motifs) is written here, not imported.

Conventions: positions are 0-based; a cut position is the index of the first nucleotide after the
cut on the top strand; DNA / RNA / protein arguments are case-insensitive and returned upper-case.
"""

from __future__ import annotations

import math
import random

from jaxpapers.benchmarks.dive.worlds._core import ToolError, arg, register_world, tool

__all__ = ["CODON_TABLE", "RESIDUE_MASS", "WATER_MASS", "build"]

DOMAIN = "bio"

_BASES = "TCAG"
# The standard genetic code (NCBI table 1), codons in TCAG order; '*' is a stop.
_CODE = "FFLLSSSSYY**CC*WLLLLPPPPHHQQRRRRIIIMTTTTNNKKSSRRVVVVAAAADDEEGGGG"
CODON_TABLE: dict[str, str] = {a + b + c: _CODE[16 * i + 4 * j + k]
                               for i, a in enumerate(_BASES) for j, b in enumerate(_BASES)
                               for k, c in enumerate(_BASES)}
_STOPS = tuple(sorted(c for c, aa in CODON_TABLE.items() if aa == "*"))
_SENSE = tuple(sorted(c for c, aa in CODON_TABLE.items() if aa != "*"))
_AMINO = "".join(sorted(set(_CODE) - {"*"}))

# Average masses (Da) of the free amino acids; a peptide loses one water per peptide bond.
RESIDUE_MASS: dict[str, float] = {
    "A": 89.0932, "C": 121.1582, "D": 133.1027, "E": 147.1293, "F": 165.1891, "G": 75.0666,
    "H": 155.1546, "I": 131.1729, "K": 146.1876, "L": 131.1729, "M": 149.2113, "N": 132.1179,
    "P": 115.1305, "Q": 146.1445, "R": 174.2010, "S": 105.0926, "T": 119.1192, "V": 117.1463,
    "W": 204.2252, "Y": 181.1885}
WATER_MASS = 18.01528

_ORGANISMS = ("Arabidopsis thaliana", "Danio rerio", "Drosophila melanogaster",
              "Escherichia coli", "Homo sapiens", "Mus musculus", "Saccharomyces cerevisiae")
_STEMS = ("ABC", "CDK", "COL", "FOX", "GATA", "HOX", "KRT", "MYO", "PAX", "RPL", "SLC", "SOX",
          "TNF", "WNT", "ZNF")
_MOTIFS = ("AATAAA", "CAAT", "CACGTG", "GCCACC", "GGGCGG", "TATAAA", "TATAAT", "TTGACA")
# name -> (recognition site, cut offset from the site's first base on the top strand)
_ENZYMES = {"BamHI": ("GGATCC", 1), "EcoRI": ("GAATTC", 1), "EcoRV": ("GATATC", 3),
            "HindIII": ("AAGCTT", 1), "KpnI": ("GGTACC", 5), "NotI": ("GCGGCCGC", 2),
            "PstI": ("CTGCAG", 5), "SalI": ("GTCGAC", 1), "SmaI": ("CCCGGG", 3),
            "XhoI": ("CTCGAG", 1)}
_N_GENES = 30
_COMPLEMENT_DNA = str.maketrans("ACGT", "TGCA")
_COMPLEMENT_RNA = str.maketrans("ACGU", "UGCA")


def _clean_cds(dna: str) -> bool:
    body = [dna[i:i + 3] for i in range(3, len(dna) - 3, 3)]
    return all(c not in _STOPS for c in body)


def _plant(rng: random.Random, dna: str, site: str) -> str:
    """``dna`` with ``site`` written over a stretch of its body, keeping the frame stop-free."""
    for _ in range(30):
        p = rng.randint(3, len(dna) - 3 - len(site))
        cand = dna[:p] + site + dna[p + len(site):]
        if _clean_cds(cand):
            return cand
    return dna


@register_world(DOMAIN)
def build(rng: random.Random) -> tuple[dict, dict]:
    organisms = sorted(rng.sample(_ORGANISMS, 4))
    motifs = sorted(rng.sample(_MOTIFS, 5))
    enzymes = {n: {"site": _ENZYMES[n][0], "cut": _ENZYMES[n][1]}
               for n in sorted(rng.sample(sorted(_ENZYMES), 6))}
    sites = [enzymes[n]["site"] for n in enzymes]
    genes: dict[str, dict] = {}
    seen: set[str] = set()
    i = 0
    while len(genes) < _N_GENES:
        symbol = f"{rng.choice(_STEMS)}{rng.randint(1, 19)}"
        if symbol in genes:
            continue
        n_codons = rng.randint(20, 80)
        dna = "ATG" + "".join(rng.choice(_SENSE) for _ in range(n_codons - 2)) + rng.choice(_STOPS)
        if rng.random() < 0.5:
            dna = _plant(rng, dna, rng.choice(sites))
        if rng.random() < 0.4:
            dna = _plant(rng, dna, rng.choice(motifs))
        if dna in seen:
            continue
        seen.add(dna)
        organism = organisms[i] if i < len(organisms) else rng.choice(organisms)
        genes[symbol] = {"organism": organism, "chromosome": f"chr{rng.randint(1, 6)}",
                         "dna": dna}
        i += 1
    genes = {k: genes[k] for k in sorted(genes)}
    data = {"organisms": organisms, "genes": genes, "motifs": motifs, "enzymes": enzymes}
    lexicon = {"gene": sorted(genes), "organism": organisms,
               "chromosome": sorted({g["chromosome"] for g in genes.values()}),
               "motif": sorted(set(motifs) | set(sites)), "enzyme": sorted(enzymes),
               "residue": list(_AMINO), "codon": sorted(CODON_TABLE)}
    return data, lexicon


# ---------------------------------------------------------------- argument checks and helpers

def _gene(world, gene: str) -> dict:
    genes = world.data["genes"]
    if gene not in genes:
        raise ToolError(f"gene {gene!r} is not in the catalogue")
    return genes[gene]


def _organism(world, organism: str) -> str:
    if organism not in world.data["organisms"]:
        raise ToolError(f"organism {organism!r} is not in the catalogue")
    return organism


def _enzyme(world, enzyme: str) -> dict:
    enzymes = world.data["enzymes"]
    if enzyme not in enzymes:
        raise ToolError(f"enzyme {enzyme!r} is not in the enzyme list")
    return enzymes[enzyme]


def _seq(value: str, name: str, alphabet: str, kind: str) -> str:
    s = value.upper()
    if not value.isascii():
        raise ToolError(f"{name} is not a {kind} sequence (non-ASCII letters)")
    if not s:
        raise ToolError(f"{name} must be a non-empty {kind} sequence")
    bad = sorted(set(s) - set(alphabet))
    if bad:
        raise ToolError(f"{name} is not a {kind} sequence (letters {''.join(bad)!r})")
    return s


def _dna(value: str, name: str = "dna") -> str:
    return _seq(value, name, "ACGT", "DNA")


def _rna(value: str, name: str = "rna") -> str:
    return _seq(value, name, "ACGU", "RNA")


def _protein(value: str, name: str = "protein") -> str:
    return _seq(value, name, _AMINO, "protein")


def _codon(value: str) -> str:
    c = _dna(value, "codon")
    if len(c) != 3:
        raise ToolError(f"codon must be 3 nucleotides, got {len(c)}")
    return c


def _residue(value: str) -> str:
    r = value.upper()
    if len(r) != 1 or r not in _AMINO:
        raise ToolError(f"residue must be one of the 20 one-letter amino-acid codes, got {value!r}")
    return r


def _positions(seq: str, sub: str) -> list[int]:
    """Start of every (overlapping) occurrence of ``sub`` in ``seq``."""
    out, p = [], seq.find(sub)
    while p != -1:
        out.append(p)
        p = seq.find(sub, p + 1)
    return out


def _translate(dna: str, name: str) -> str:
    if len(dna) < 3:
        raise ToolError(f"{name} is shorter than one codon")
    protein = []
    for i in range(0, len(dna) - 2, 3):
        aa = CODON_TABLE[dna[i:i + 3]]
        if aa == "*":
            break
        protein.append(aa)
    if not protein:
        raise ToolError(f"{name} starts with a stop codon: no protein")
    return "".join(protein)


def _gc(dna: str) -> float:
    return (dna.count("G") + dna.count("C")) / len(dna)


def _weight(protein: str) -> float:
    return math.fsum(RESIDUE_MASS[a] for a in protein) - WATER_MASS * (len(protein) - 1)


def _identity(a: str, b: str) -> float:
    n = min(len(a), len(b))
    return sum(x == y for x, y in zip(a[:n], b[:n])) / n


def _cuts(dna: str, enzyme: dict) -> list[int]:
    return [p + enzyme["cut"] for p in _positions(dna, enzyme["site"])]


def _enzymes_cutting(world, dna: str) -> list[str]:
    return [n for n, e in sorted(world.data["enzymes"].items()) if e["site"] in dna]


_GENE = arg("gene", description="gene symbol, e.g. from list_genes")
_ORG = arg("organism", description="organism name (binomial)")
_DNA = arg("dna", description="DNA sequence (A, C, G, T)")
_RNA = arg("rna", description="RNA sequence (A, C, G, U)")
_PROT = arg("protein", description="protein sequence (one-letter amino-acid codes)")
_MOTIF = arg("motif", description="DNA motif, e.g. 'TATAAA'")
_ENZ = arg("enzyme", description="restriction enzyme name, e.g. 'EcoRI'")
_INT = arg("integer", "integer")
_NUM = arg("number", "number")
_POS = arg("integer", "array", "0-based positions, ascending", items="integer")


# ------------------------------------------------------------------------- catalogue (R)

@tool(DOMAIN, "get", "sequence", "Coding DNA sequence of a gene (ATG ... stop codon).",
      params={"gene": _GENE}, returns=_DNA, kind="R", group="catalog")
def get_sequence(world, gene):
    return _gene(world, gene)["dna"]


@tool(DOMAIN, "get", "organism", "Organism a gene belongs to.",
      params={"gene": _GENE}, returns=_ORG, kind="R", group="catalog")
def get_organism(world, gene):
    return _gene(world, gene)["organism"]


@tool(DOMAIN, "get", "chromosome", "Chromosome a gene lies on (e.g. 'chr3').",
      params={"gene": _GENE}, returns=arg("chromosome"), kind="R", group="catalog")
def get_chromosome(world, gene):
    return _gene(world, gene)["chromosome"]


@tool(DOMAIN, "get", "protein", "Protein product of a gene: its coding sequence translated "
      "with the standard codon table, up to the stop codon.",
      params={"gene": _GENE}, returns=_PROT, kind="R", group="catalog")
def get_protein(world, gene):
    return _translate(_gene(world, gene)["dna"], "gene sequence")


@tool(DOMAIN, "get", "length", "Length in nucleotides of a gene's coding sequence (stop "
      "codon included).", params={"gene": _GENE}, returns=_INT, kind="R", group="catalog")
def get_length(world, gene):
    return len(_gene(world, gene)["dna"])


@tool(DOMAIN, "list", "genes", "Gene symbols of an organism, sorted.",
      params={"organism": _ORG}, returns=arg("gene", "array", items="string"), kind="R",
      group="catalog")
def list_genes(world, organism):
    _organism(world, organism)
    return [g for g, r in world.data["genes"].items() if r["organism"] == organism]


@tool(DOMAIN, "count", "genes", "Number of genes of an organism in the catalogue.",
      params={"organism": _ORG}, returns=_INT, kind="R", group="catalog")
def count_genes(world, organism):
    return len(list_genes(world, organism))


@tool(DOMAIN, "find", "genes", "Genes (all organisms) whose coding sequence contains a motif, "
      "sorted.", params={"motif": _MOTIF}, returns=arg("gene", "array", items="string"),
      kind="R", group="catalog")
def find_genes(world, motif):
    m = _dna(motif, "motif")
    return [g for g, r in world.data["genes"].items() if m in r["dna"]]


@tool(DOMAIN, "find", "organism", "Organism whose catalogue holds a gene with exactly this "
      "coding sequence.", params={"dna": _DNA}, returns=_ORG, kind="R", group="catalog")
def find_organism(world, dna):
    s = _dna(dna)
    for r in world.data["genes"].values():
        if r["dna"] == s:
            return r["organism"]
    raise ToolError("dna matches no gene's coding sequence")


@tool(DOMAIN, "compare", "chromosome", "Whether two genes lie on the same chromosome of the same "
      "organism (are linked).", params={"gene_a": _GENE, "gene_b": _GENE},
      returns=arg("boolean", "boolean"), kind="R", group="catalog")
def compare_chromosome(world, gene_a, gene_b):
    a, b = _gene(world, gene_a), _gene(world, gene_b)
    return a["organism"] == b["organism"] and a["chromosome"] == b["chromosome"]


# ---------------------------------------------------------------- restriction and motifs

@tool(DOMAIN, "get", "motif", "Recognition site (a DNA motif) of a restriction enzyme.",
      params={"enzyme": _ENZ}, returns=_MOTIF, kind="R", group="restriction")
def get_motif(world, enzyme):
    return _enzyme(world, enzyme)["site"]


@tool(DOMAIN, "find", "sites", "Cut positions of a restriction enzyme in a DNA sequence: for "
      "each recognition site, the 0-based index of the first nucleotide after the top-strand "
      "cut.", params={"dna": _DNA, "enzyme": _ENZ}, returns=_POS, kind="R", group="restriction")
def find_sites(world, dna, enzyme):
    e = _enzyme(world, enzyme)
    return _cuts(_dna(dna), e)


@tool(DOMAIN, "count", "sites", "Number of recognition sites of a restriction enzyme in a DNA "
      "sequence.", params={"dna": _DNA, "enzyme": _ENZ}, returns=_INT, kind="R",
      group="restriction")
def count_sites(world, dna, enzyme):
    return len(find_sites(world, dna, enzyme))


@tool(DOMAIN, "list", "enzymes", "Restriction enzymes (of the enzyme list) that cut a DNA "
      "sequence at least once, sorted.", params={"dna": _DNA},
      returns=arg("enzyme", "array", items="string"), kind="R", group="restriction")
def list_enzymes(world, dna):
    return _enzymes_cutting(world, _dna(dna))


@tool(DOMAIN, "count", "enzymes", "Number of restriction enzymes (of the enzyme list) that cut "
      "a DNA sequence at least once.", params={"dna": _DNA}, returns=_INT, kind="R",
      group="restriction")
def count_enzymes(world, dna):
    return len(_enzymes_cutting(world, _dna(dna)))


@tool(DOMAIN, "find", "motif", "0-based start positions of every occurrence of a motif in a DNA "
      "sequence (overlaps included).", params={"dna": _DNA, "motif": _MOTIF}, returns=_POS,
      kind="P", group="restriction")
def find_motif(world, dna, motif):
    return _positions(_dna(dna), _dna(motif, "motif"))


@tool(DOMAIN, "count", "motif", "Number of occurrences of a motif in a DNA sequence (overlaps "
      "included).", params={"dna": _DNA, "motif": _MOTIF}, returns=_INT, kind="P",
      group="restriction")
def count_motif(world, dna, motif):
    return len(find_motif(world, dna, motif))


# ------------------------------------------------------------------------ transcription (P)

@tool(DOMAIN, "convert", "dna", "Transcribe DNA into RNA (T becomes U).",
      params={"dna": _DNA}, returns=_RNA, kind="P", group="transcription")
def convert_dna(world, dna):
    return _dna(dna).replace("T", "U")


@tool(DOMAIN, "convert", "rna", "Back-transcribe RNA into DNA (U becomes T).",
      params={"rna": _RNA}, returns=_DNA, kind="P", group="transcription")
def convert_rna(world, rna):
    return _rna(rna).replace("U", "T")


@tool(DOMAIN, "reverse", "dna", "Reverse complement of a DNA sequence.",
      params={"dna": _DNA}, returns=_DNA, kind="P", group="transcription")
def reverse_dna(world, dna):
    return _dna(dna).translate(_COMPLEMENT_DNA)[::-1]


@tool(DOMAIN, "reverse", "rna", "Reverse complement of an RNA sequence.",
      params={"rna": _RNA}, returns=_RNA, kind="P", group="transcription")
def reverse_rna(world, rna):
    return _rna(rna).translate(_COMPLEMENT_RNA)[::-1]


@tool(DOMAIN, "translate", "dna", "Translate DNA (reading frame 0, standard codon table) up to "
      "the first stop codon; a trailing partial codon is ignored.",
      params={"dna": _DNA}, returns=_PROT, kind="P", group="transcription")
def translate_dna(world, dna):
    return _translate(_dna(dna), "dna")


@tool(DOMAIN, "translate", "rna", "Translate RNA (reading frame 0, standard codon table) up to "
      "the first stop codon; a trailing partial codon is ignored.",
      params={"rna": _RNA}, returns=_PROT, kind="P", group="transcription")
def translate_rna(world, rna):
    return _translate(_rna(rna).replace("U", "T"), "rna")


# -------------------------------------------------------------------------- composition (P)

@tool(DOMAIN, "compute", "gc", "GC content of a DNA sequence: fraction of G and C bases.",
      params={"dna": _DNA}, returns=_NUM, kind="P", group="composition")
def compute_gc(world, dna):
    return _gc(_dna(dna))


@tool(DOMAIN, "compare", "gc", "GC content of the first DNA sequence minus that of the second.",
      params={"dna_a": _DNA, "dna_b": _DNA}, returns=_NUM, kind="P", group="composition")
def compare_gc(world, dna_a, dna_b):
    return _gc(_dna(dna_a, "dna_a")) - _gc(_dna(dna_b, "dna_b"))


@tool(DOMAIN, "compute", "length", "Length of a DNA sequence in nucleotides.",
      params={"dna": _DNA}, returns=_INT, kind="P", group="composition")
def compute_length(world, dna):
    return len(_dna(dna))


@tool(DOMAIN, "compare", "sequence", "Identity of two DNA sequences: fraction of matching "
      "positions over the length of the shorter one (ungapped, aligned at the start).",
      params={"dna_a": _DNA, "dna_b": _DNA}, returns=_NUM, kind="P", group="composition")
def compare_sequence(world, dna_a, dna_b):
    return _identity(_dna(dna_a, "dna_a"), _dna(dna_b, "dna_b"))


# ------------------------------------------------------------------------------- codons (P)

@tool(DOMAIN, "list", "codons", "Codons of the standard table that encode an amino acid, sorted.",
      params={"residue": arg("residue", description="one-letter amino-acid code")},
      returns=arg("codon", "array", items="string"), kind="P", group="codons")
def list_codons(world, residue):
    r = _residue(residue)
    return [c for c, aa in sorted(CODON_TABLE.items()) if aa == r]


@tool(DOMAIN, "find", "codons", "0-based codon indices (reading frame 0) at which a codon occurs "
      "in a DNA sequence.", params={"dna": _DNA, "codon": arg("codon")}, returns=_POS,
      kind="P", group="codons")
def find_codons(world, dna, codon):
    s, c = _dna(dna), _codon(codon)
    return [i // 3 for i in range(0, len(s) - 2, 3) if s[i:i + 3] == c]


@tool(DOMAIN, "count", "codons", "Number of times a codon occurs in reading frame 0 of a DNA "
      "sequence.", params={"dna": _DNA, "codon": arg("codon")}, returns=_INT, kind="P",
      group="codons")
def count_codons(world, dna, codon):
    return len(find_codons(world, dna, codon))


# ------------------------------------------------------------------------------ protein (P)

@tool(DOMAIN, "compute", "weight", "Molecular weight (Da, average masses) of a protein.",
      params={"protein": _PROT}, returns=_NUM, kind="P", group="protein")
def compute_weight(world, protein):
    return _weight(_protein(protein))


@tool(DOMAIN, "compare", "weight", "Molecular weight of the first protein minus that of the "
      "second (Da).", params={"protein_a": _PROT, "protein_b": _PROT}, returns=_NUM, kind="P",
      group="protein")
def compare_weight(world, protein_a, protein_b):
    return _weight(_protein(protein_a, "protein_a")) - _weight(_protein(protein_b, "protein_b"))


@tool(DOMAIN, "count", "residues", "Number of residues (length) of a protein.",
      params={"protein": _PROT}, returns=_INT, kind="P", group="protein")
def count_residues(world, protein):
    return len(_protein(protein))


@tool(DOMAIN, "find", "residues", "0-based positions of an amino acid in a protein.",
      params={"protein": _PROT, "residue": arg("residue", description="one-letter code")},
      returns=_POS, kind="P", group="protein")
def find_residues(world, protein, residue):
    p, r = _protein(protein), _residue(residue)
    return [i for i, a in enumerate(p) if a == r]


@tool(DOMAIN, "compare", "protein", "Identity of two proteins: fraction of matching positions "
      "over the length of the shorter one (ungapped, aligned at the start).",
      params={"protein_a": _PROT, "protein_b": _PROT}, returns=_NUM, kind="P", group="protein")
def compare_protein(world, protein_a, protein_b):
    return _identity(_protein(protein_a, "protein_a"), _protein(protein_b, "protein_b"))
