"""Tests of the bio world: one hand-checked case per tool on a small hand-built world, the
generated world's invariants (clean coding sequences) and the registry contract; determinism and
the shared checks are in test_worlds_common.py."""

from __future__ import annotations

import pytest

from jaxpapers.benchmarks.dive.worlds import World, call_tool, domain_tools, make_world

D = "bio"
HS, MM = "Homo sapiens", "Mus musculus"
DNA_A = "ATGGAATTCAAATAA"  # M E F K; EcoRI site at 3 (cut 4)
DNA_B = "ATGGCTTGGTATAAATGA"  # M A W Y K; TATAAA at 9
DNA_C = "ATGCCCGGGGAATTCGAATTCTAG"  # M P G E F E F; SmaI at 3 (cut 6), EcoRI at 9, 15
DNA_D = "ATGTTTTGA"  # M F

# The standard genetic code by amino acid, written out independently of the module's table.
STANDARD = {
    "A": "GCT GCC GCA GCG", "C": "TGT TGC", "D": "GAT GAC", "E": "GAA GAG", "F": "TTT TTC",
    "G": "GGT GGC GGA GGG", "H": "CAT CAC", "I": "ATT ATC ATA", "K": "AAA AAG",
    "L": "TTA TTG CTT CTC CTA CTG", "M": "ATG", "N": "AAT AAC", "P": "CCT CCC CCA CCG",
    "Q": "CAA CAG", "R": "CGT CGC CGA CGG AGA AGG", "S": "TCT TCC TCA TCG AGT AGC",
    "T": "ACT ACC ACA ACG", "V": "GTT GTC GTA GTG", "W": "TGG", "Y": "TAT TAC",
    "*": "TAA TAG TGA"}


@pytest.fixture(scope="module")
def w():
    genes = {"AAA1": {"organism": HS, "chromosome": "chr1", "dna": DNA_A},
             "BBB2": {"organism": HS, "chromosome": "chr1", "dna": DNA_B},
             "CCC3": {"organism": MM, "chromosome": "chr2", "dna": DNA_C},
             "DDD4": {"organism": MM, "chromosome": "chr1", "dna": DNA_D}}
    enzymes = {"EcoRI": {"site": "GAATTC", "cut": 1}, "PstI": {"site": "CTGCAG", "cut": 5},
               "SmaI": {"site": "CCCGGG", "cut": 3}}
    data = {"organisms": [HS, MM], "genes": genes, "motifs": ["GAAT", "TATAAA"],
            "enzymes": enzymes}
    lexicon = {"gene": tuple(genes), "organism": (HS, MM), "chromosome": ("chr1", "chr2"),
               "motif": ("CCCGGG", "CTGCAG", "GAAT", "GAATTC", "TATAAA"),
               "enzyme": tuple(enzymes), "residue": tuple("ACDEFGHIKLMNPQRSTVWY"),
               "codon": tuple(sorted(c for cs in STANDARD.values() for c in cs.split()))}
    return World(D, 0, data, lexicon)


def ok(world, name, **args):
    good, out = call_tool(world, f"{D}.{name}", args)
    assert good, out
    return out


def err(world, name, **args):
    good, out = call_tool(world, f"{D}.{name}", args)
    assert not good and isinstance(out, str) and out
    return out


# ------------------------------------------------------------------------------ catalogue

def test_get_sequence(w):
    assert ok(w, "get_sequence", gene="AAA1") == DNA_A
    assert "gene" in err(w, "get_sequence", gene="ZZZ9")


def test_get_organism(w):
    assert ok(w, "get_organism", gene="CCC3") == MM


def test_get_chromosome(w):
    assert ok(w, "get_chromosome", gene="BBB2") == "chr1"


def test_get_protein(w):
    assert ok(w, "get_protein", gene="CCC3") == "MPGEFEF"
    assert ok(w, "get_protein", gene="BBB2") == "MAWYK"


def test_get_length(w):
    assert ok(w, "get_length", gene="BBB2") == 18


def test_list_genes(w):
    assert ok(w, "list_genes", organism=HS) == ["AAA1", "BBB2"]
    assert ok(w, "list_genes", organism=MM) == ["CCC3", "DDD4"]
    assert "organism" in err(w, "list_genes", organism="Danio rerio")


def test_count_genes(w):
    assert ok(w, "count_genes", organism=MM) == 2


def test_find_genes(w):
    assert ok(w, "find_genes", motif="GAATTC") == ["AAA1", "CCC3"]
    assert ok(w, "find_genes", motif="tataaa") == ["BBB2"]
    assert ok(w, "find_genes", motif="CTGCAG") == []


def test_find_organism(w):
    assert ok(w, "find_organism", dna=DNA_C) == MM
    assert ok(w, "find_organism", dna=DNA_B.lower()) == HS
    assert "no gene" in err(w, "find_organism", dna="ATGTAA")


def test_compare_chromosome(w):
    assert ok(w, "compare_chromosome", gene_a="AAA1", gene_b="BBB2") is True
    assert ok(w, "compare_chromosome", gene_a="AAA1", gene_b="CCC3") is False
    # same chromosome name, different organism: not linked
    assert ok(w, "compare_chromosome", gene_a="AAA1", gene_b="DDD4") is False


# ------------------------------------------------------------------- restriction and motifs

def test_get_motif(w):
    assert ok(w, "get_motif", enzyme="SmaI") == "CCCGGG"
    assert "enzyme" in err(w, "get_motif", enzyme="BamHI")


def test_find_sites(w):
    assert ok(w, "find_sites", dna=DNA_C, enzyme="EcoRI") == [10, 16]
    assert ok(w, "find_sites", dna=DNA_C, enzyme="SmaI") == [6]
    assert ok(w, "find_sites", dna=DNA_A, enzyme="EcoRI") == [4]
    assert ok(w, "find_sites", dna=DNA_C, enzyme="PstI") == []


def test_count_sites(w):
    assert ok(w, "count_sites", dna=DNA_C, enzyme="EcoRI") == 2


def test_list_enzymes(w):
    assert ok(w, "list_enzymes", dna=DNA_C) == ["EcoRI", "SmaI"]
    assert ok(w, "list_enzymes", dna=DNA_B) == []


def test_count_enzymes(w):
    assert ok(w, "count_enzymes", dna=DNA_A) == 1
    assert ok(w, "count_enzymes", dna=DNA_C) == 2


def test_find_motif(w):
    assert ok(w, "find_motif", dna="AAAA", motif="AA") == [0, 1, 2]
    assert ok(w, "find_motif", dna=DNA_B, motif="TATAAA") == [9]
    assert "motif" in err(w, "find_motif", dna="AAAA", motif="")


def test_count_motif(w):
    assert ok(w, "count_motif", dna="AAAA", motif="AA") == 3
    assert ok(w, "count_motif", dna=DNA_C, motif="GAATTC") == 2


# --------------------------------------------------------------------------- transcription

def test_convert_dna(w):
    assert ok(w, "convert_dna", dna="ATGCtt") == "AUGCUU"


def test_convert_rna(w):
    assert ok(w, "convert_rna", rna="AUGCUU") == "ATGCTT"
    assert "rna" in err(w, "convert_rna", rna="ATGC")


def test_reverse_dna(w):
    assert ok(w, "reverse_dna", dna="ATGCC") == "GGCAT"


def test_reverse_rna(w):
    assert ok(w, "reverse_rna", rna="AUGCC") == "GGCAU"


def test_translate_dna(w):
    assert ok(w, "translate_dna", dna="ATGGCTTGGTAAGGG") == "MAW"  # stops at TAA
    assert ok(w, "translate_dna", dna="ATGGC") == "M"  # trailing partial codon ignored
    assert "stop" in err(w, "translate_dna", dna="TAAATG")
    assert "codon" in err(w, "translate_dna", dna="AT")


def test_translate_dna_whole_code(w):
    for aa, codons in STANDARD.items():
        if aa == "*":
            continue
        for c in codons.split():
            assert ok(w, "translate_dna", dna="ATG" + c + "TGA") == "M" + aa, c


def test_translate_rna(w):
    assert ok(w, "translate_rna", rna="AUGUUUUGA") == "MF"


# ----------------------------------------------------------------------------- composition

def test_compute_gc(w):
    assert ok(w, "compute_gc", dna="GGCA") == 0.75
    assert ok(w, "compute_gc", dna=DNA_D) == pytest.approx(2 / 9, abs=1e-6)


def test_compare_gc(w):
    assert ok(w, "compare_gc", dna_a="GGCA", dna_b="ATAT") == 0.75
    assert ok(w, "compare_gc", dna_a="ATAT", dna_b="GC") == -1.0


def test_compute_length(w):
    assert ok(w, "compute_length", dna="ACGTA") == 5


def test_compare_sequence(w):
    assert ok(w, "compare_sequence", dna_a="ACGTAC", dna_b="ACCT") == 0.75
    assert "dna_b" in err(w, "compare_sequence", dna_a="ACGT", dna_b="")


# ---------------------------------------------------------------------------------- codons

def test_list_codons(w):
    assert ok(w, "list_codons", residue="K") == ["AAA", "AAG"]
    for aa, codons in STANDARD.items():
        if aa != "*":
            assert ok(w, "list_codons", residue=aa.lower()) == sorted(codons.split())
    assert "residue" in err(w, "list_codons", residue="*")
    assert "residue" in err(w, "list_codons", residue="B")


def test_find_codons(w):
    # codons ATG AAA GAA AAA + trailing T; the out-of-frame AAA at 7/8 does not count
    assert ok(w, "find_codons", dna="ATGAAAGAAAAAT", codon="AAA") == [1, 3]
    assert "codon" in err(w, "find_codons", dna="ATGAAA", codon="AA")


def test_count_codons(w):
    assert ok(w, "count_codons", dna="ATGAAAGAAAAAT", codon="aaa") == 2


# --------------------------------------------------------------------------------- protein

def test_compute_weight(w):
    # Met 149.2113 + Ala 89.0932 - one water 18.01528
    assert ok(w, "compute_weight", protein="MA") == pytest.approx(220.28922, abs=1e-6)
    assert ok(w, "compute_weight", protein="G") == pytest.approx(75.0666, abs=1e-6)
    assert "protein" in err(w, "compute_weight", protein="MAX")


def test_compare_weight(w):
    assert ok(w, "compare_weight", protein_a="MA", protein_b="G") == pytest.approx(145.22262,
                                                                                   abs=1e-6)


def test_count_residues(w):
    assert ok(w, "count_residues", protein="MAWK") == 4


def test_find_residues(w):
    assert ok(w, "find_residues", protein="MAKAK", residue="A") == [1, 3]


def test_compare_protein(w):
    assert ok(w, "compare_protein", protein_a="MAWK", protein_b="MAWRS") == 0.75


# ---------------------------------------------------------------------------------- errors

def test_bad_calls(w):
    assert "JSON type string" in err(w, "get_sequence", gene=5)
    assert "JSON type string" in err(w, "find_motif", dna=["A"], motif="A")
    assert "missing" in err(w, "find_sites", dna=DNA_A)
    assert "letters" in err(w, "compute_gc", dna="ATGN")
    assert "non-ASCII" in err(w, "count_residues", protein="\u00df")  # upper() gives 'SS'


# ------------------------------------------------------------------ registry and generated world

def test_registry_size_and_kinds():
    """Names, words and argument types: test_worlds_common.py."""
    kinds = [t.spec.kind for t in domain_tools(D).values()]
    assert len(kinds) >= 21 and kinds.count("R") >= 5 and kinds.count("P") >= 5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_generated_world(seed):
    wd = make_world(D, seed)
    genes = wd.data["genes"]
    assert len(genes) == 30 and list(genes) == sorted(genes)
    assert len(wd.data["organisms"]) == 4
    assert {g["organism"] for g in genes.values()} == set(wd.data["organisms"])
    stops = set(STANDARD["*"].split())
    for g in genes.values():
        dna = g["dna"]
        assert 60 <= len(dna) <= 240 and len(dna) % 3 == 0
        assert dna.startswith("ATG") and dna[-3:] in stops
        assert not stops & {dna[i:i + 3] for i in range(0, len(dna) - 3, 3)}
    assert len({g["dna"] for g in genes.values()}) == 30
    for k, v in wd.lexicon.items():
        assert list(v) == sorted(v), k
    # something to find: planted sites and motifs
    assert sum(bool(ok(wd, "list_enzymes", dna=g["dna"])) for g in genes.values()) >= 5
    assert any(ok(wd, "find_genes", motif=m) for m in wd.data["motifs"])
