"""Medical world: a drug formulary with indications, pharmacokinetics and interactions.

The world holds 30 drugs from eight of nine therapeutic classes (ACE inhibitors, beta blockers,
statins, SSRIs, NSAIDs, anticoagulants, opioids, benzodiazepines, proton pump inhibitors), each
with an RxCUI-like concept id, an elimination half-life (hours, a textbook value perturbed by up
to 15 %), a typical single dose and a maximum daily dose (mg), and one to three indications drawn
from the conditions its class treats (about 12 conditions in a world). A symmetric interaction
table gives a severity (``minor`` / ``moderate`` / ``major``) for interacting pairs; pairs known
to be risky (anticoagulant + NSAID, opioid + benzodiazepine, SSRI + NSAID, ...) and same-class
pairs interact more often. The names and classes are real; the numbers are illustrative only.

The tools mirror what DIVE's medical domain does with RxNav (RxCUI <-> name, drug class members
and a drug's class, the interaction list of a drug and the severity of a pair) and Clinical
Tables / label lookups (indications, half-life, doses), plus the small pharmacokinetic and dosing
calculations an agent does on the results (first-order elimination, weight-scaled doses).
"""

from __future__ import annotations

import math
import random

from jaxpapers.benchmarks.dive.worlds._core import ToolError, arg, register_world, tool

__all__ = ["SEVERITIES", "build"]

DOMAIN = "medical"

SEVERITIES = ("none", "minor", "moderate", "major")
_RANK = {s: i for i, s in enumerate(SEVERITIES)}
_REFERENCE_KG = 70.0

# class -> conditions its members may be indicated for
_CLASSES = {
    "ace inhibitor": ("heart failure", "hypertension"),
    "anticoagulant": ("atrial fibrillation", "thrombosis"),
    "benzodiazepine": ("anxiety", "insomnia"),
    "beta blocker": ("angina", "atrial fibrillation", "heart failure", "hypertension",
                     "migraine"),
    "nsaid": ("arthritis", "migraine", "pain"),
    "opioid": ("pain",),
    "proton pump inhibitor": ("peptic ulcer", "reflux"),
    "ssri": ("anxiety", "depression"),
    "statin": ("angina", "hyperlipidemia"),
}
# name -> (class, half-life h, typical single dose mg, maximum daily dose mg)
_DRUGS = {
    "alprazolam": ("benzodiazepine", 11.0, 0.5, 4.0),
    "apixaban": ("anticoagulant", 12.0, 5.0, 10.0),
    "atenolol": ("beta blocker", 7.0, 50.0, 100.0),
    "atorvastatin": ("statin", 14.0, 20.0, 80.0),
    "benazepril": ("ace inhibitor", 10.0, 10.0, 80.0),
    "bisoprolol": ("beta blocker", 11.0, 5.0, 20.0),
    "captopril": ("ace inhibitor", 2.0, 25.0, 450.0),
    "carvedilol": ("beta blocker", 8.0, 12.5, 50.0),
    "celecoxib": ("nsaid", 11.0, 200.0, 400.0),
    "citalopram": ("ssri", 35.0, 20.0, 40.0),
    "clonazepam": ("benzodiazepine", 30.0, 0.5, 20.0),
    "codeine": ("opioid", 3.0, 30.0, 360.0),
    "dabigatran": ("anticoagulant", 14.0, 150.0, 300.0),
    "diazepam": ("benzodiazepine", 43.0, 5.0, 40.0),
    "diclofenac": ("nsaid", 2.0, 50.0, 150.0),
    "edoxaban": ("anticoagulant", 10.0, 60.0, 60.0),
    "enalapril": ("ace inhibitor", 11.0, 10.0, 40.0),
    "escitalopram": ("ssri", 30.0, 10.0, 20.0),
    "esomeprazole": ("proton pump inhibitor", 1.5, 20.0, 40.0),
    "fluoxetine": ("ssri", 96.0, 20.0, 80.0),
    "hydromorphone": ("opioid", 2.5, 2.0, 32.0),
    "ibuprofen": ("nsaid", 2.0, 400.0, 3200.0),
    "lansoprazole": ("proton pump inhibitor", 1.5, 15.0, 60.0),
    "lisinopril": ("ace inhibitor", 12.0, 10.0, 80.0),
    "lorazepam": ("benzodiazepine", 12.0, 1.0, 10.0),
    "lovastatin": ("statin", 3.0, 20.0, 80.0),
    "meloxicam": ("nsaid", 20.0, 7.5, 15.0),
    "metoprolol": ("beta blocker", 4.0, 50.0, 400.0),
    "morphine": ("opioid", 2.5, 15.0, 120.0),
    "naproxen": ("nsaid", 14.0, 250.0, 1500.0),
    "omeprazole": ("proton pump inhibitor", 1.0, 20.0, 40.0),
    "oxycodone": ("opioid", 3.5, 5.0, 80.0),
    "pantoprazole": ("proton pump inhibitor", 1.0, 40.0, 80.0),
    "paroxetine": ("ssri", 21.0, 20.0, 50.0),
    "pravastatin": ("statin", 2.0, 40.0, 80.0),
    "propranolol": ("beta blocker", 5.0, 40.0, 640.0),
    "rabeprazole": ("proton pump inhibitor", 1.0, 20.0, 40.0),
    "ramipril": ("ace inhibitor", 13.0, 5.0, 20.0),
    "rivaroxaban": ("anticoagulant", 9.0, 20.0, 20.0),
    "rosuvastatin": ("statin", 19.0, 10.0, 40.0),
    "sertraline": ("ssri", 26.0, 50.0, 200.0),
    "simvastatin": ("statin", 3.0, 20.0, 80.0),
    "temazepam": ("benzodiazepine", 10.0, 15.0, 30.0),
    "tramadol": ("opioid", 6.0, 50.0, 400.0),
    "warfarin": ("anticoagulant", 40.0, 5.0, 10.0),
}
# unordered class pair -> (probability of an interaction, severities drawn from)
_RISKY = {
    ("anticoagulant", "nsaid"): (0.8, ("major",)),
    ("benzodiazepine", "opioid"): (0.8, ("major",)),
    ("nsaid", "ssri"): (0.5, ("moderate",)),
    ("anticoagulant", "ssri"): (0.5, ("moderate", "major")),
    ("ace inhibitor", "nsaid"): (0.5, ("moderate",)),
    ("opioid", "ssri"): (0.4, ("moderate", "major")),
    ("ace inhibitor", "beta blocker"): (0.2, ("minor",)),
}
_SAME_CLASS = (0.4, ("moderate", "major"))
_DEFAULT = (0.04, ("minor", "moderate"))
_N_DRUGS = 30
_BODY_WEIGHTS = (45, 55, 60, 70, 80, 90, 100, 120)


@register_world(DOMAIN)
def build(rng: random.Random) -> tuple[dict, dict]:
    classes = sorted(rng.sample(sorted(_CLASSES), 8))
    pool = {c: sorted(d for d, v in _DRUGS.items() if v[0] == c) for c in classes}
    chosen = [d for c in classes for d in rng.sample(pool[c], 3)]
    rest = sorted(d for c in classes for d in pool[c] if d not in chosen)
    chosen = sorted(chosen + rng.sample(rest, _N_DRUGS - len(chosen)))
    ids = rng.sample(range(10_000, 100_000), len(chosen))
    drugs = {}
    for d, rxcui in zip(chosen, ids):
        cls, halflife, dose, limit = _DRUGS[d]
        plausible = _CLASSES[cls]
        k = rng.randint(1, min(3, len(plausible)))
        drugs[d] = {"class": cls, "rxcui": rxcui,
                    "halflife": round(halflife * rng.uniform(0.85, 1.15), 1),
                    "dose": dose, "limit": limit,
                    "conditions": sorted(rng.sample(plausible, k))}
    interactions: dict[str, dict[str, str]] = {d: {} for d in chosen}
    for i, a in enumerate(chosen):
        for b in chosen[i + 1:]:
            ca, cb = drugs[a]["class"], drugs[b]["class"]
            if ca == cb:
                p, sev = _SAME_CLASS
            else:
                p, sev = _RISKY.get((ca, cb)) or _RISKY.get((cb, ca)) or _DEFAULT
            u, s = rng.random(), rng.choice(sev)
            if u < p:
                interactions[a][b] = interactions[b][a] = s
    interactions = {d: {k: v[k] for k in sorted(v)} for d, v in interactions.items()}
    conditions = sorted({c for r in drugs.values() for c in r["conditions"]})
    data = {"drugs": drugs, "classes": classes, "conditions": conditions,
            "interactions": interactions}
    lexicon = {"drug": chosen, "drug_class": classes, "condition": conditions,
               "severity": sorted(SEVERITIES), "rxcui": sorted(ids),
               "body_weight": list(_BODY_WEIGHTS)}
    return data, lexicon


# ---------------------------------------------------------------- argument checks and helpers

def _drug(world, drug: str, name: str = "drug") -> dict:
    drugs = world.data["drugs"]
    if drug not in drugs:
        raise ToolError(f"{name} {drug!r} is not in the formulary")
    return drugs[drug]


def _class(world, drug_class: str) -> str:
    if drug_class not in world.data["classes"]:
        raise ToolError(f"drug_class {drug_class!r} is not in the formulary")
    return drug_class


def _condition(world, condition: str) -> str:
    if condition not in world.data["conditions"]:
        raise ToolError(f"condition {condition!r} is not treated by any drug in the formulary")
    return condition


def _severity(severity: str, name: str = "severity") -> int:
    if severity not in _RANK:
        raise ToolError(f"{name} must be one of {list(SEVERITIES)}, got {severity!r}")
    return _RANK[severity]


def _positive(value: float, name: str, upper: float | None = None) -> float:
    if value <= 0 or (upper is not None and value > upper):
        bound = f" and at most {upper:g}" if upper is not None else ""
        raise ToolError(f"{name} must be positive{bound}, got {value}")
    return float(value)


def _pair_severity(world, drug_a: str, drug_b: str) -> str:
    _drug(world, drug_a, "drug_a")
    _drug(world, drug_b, "drug_b")
    return world.data["interactions"][drug_a].get(drug_b, "none")


def _cleared(halflife: float) -> float:
    return 1.0 - 0.5 ** (24.0 / halflife)


_DRUG = arg("drug", description="drug name (generic, lower case), e.g. 'warfarin'")
_DRUGS_OUT = arg("drug", "array", items="string")
_CLASS = arg("drug_class", description="therapeutic class, e.g. 'statin'")
_COND = arg("condition", description="condition (indication), e.g. 'hypertension'")
_SEV = arg("severity", description=f"interaction severity: one of {', '.join(SEVERITIES)}")
_HALF = arg("halflife", "number", "elimination half-life in hours")
_DOSE = arg("dose", "number", "dose in mg")
_BODY = arg("body_weight", "number", "body weight in kg (0 < w <= 300)")
_INT = arg("integer", "integer")
_NUM = arg("number", "number")
_BOOL = arg("boolean", "boolean")


# ------------------------------------------------------------------------- formulary (R)

@tool(DOMAIN, "get", "class", "Therapeutic class of a drug.",
      params={"drug": _DRUG}, returns=_CLASS, kind="R", group="formulary")
def get_class(world, drug):
    return _drug(world, drug)["class"]


@tool(DOMAIN, "compare", "class", "Whether two drugs belong to the same therapeutic class "
      "(therapeutic duplication).", params={"drug_a": _DRUG, "drug_b": _DRUG}, returns=_BOOL,
      kind="R", group="formulary")
def compare_class(world, drug_a, drug_b):
    return _drug(world, drug_a, "drug_a")["class"] == _drug(world, drug_b, "drug_b")["class"]


@tool(DOMAIN, "list", "drugs", "Drugs of a therapeutic class in the formulary, sorted.",
      params={"drug_class": _CLASS}, returns=_DRUGS_OUT, kind="R", group="formulary")
def list_drugs(world, drug_class):
    _class(world, drug_class)
    return [d for d, r in world.data["drugs"].items() if r["class"] == drug_class]


@tool(DOMAIN, "count", "drugs", "Number of drugs of a therapeutic class in the formulary.",
      params={"drug_class": _CLASS}, returns=_INT, kind="R", group="formulary")
def count_drugs(world, drug_class):
    return len(list_drugs(world, drug_class))


@tool(DOMAIN, "find", "drugs", "Drugs indicated for a condition, sorted.",
      params={"condition": _COND}, returns=_DRUGS_OUT, kind="R", group="formulary")
def find_drugs(world, condition):
    _condition(world, condition)
    return [d for d, r in world.data["drugs"].items() if condition in r["conditions"]]


@tool(DOMAIN, "list", "conditions", "Conditions a drug is indicated for, sorted.",
      params={"drug": _DRUG}, returns=arg("condition", "array", items="string"), kind="R",
      group="formulary")
def list_conditions(world, drug):
    return list(_drug(world, drug)["conditions"])


@tool(DOMAIN, "count", "conditions", "Number of conditions a drug is indicated for.",
      params={"drug": _DRUG}, returns=_INT, kind="R", group="formulary")
def count_conditions(world, drug):
    return len(_drug(world, drug)["conditions"])


@tool(DOMAIN, "find", "conditions", "Conditions treated by at least one drug of a therapeutic "
      "class, sorted.", params={"drug_class": _CLASS},
      returns=arg("condition", "array", items="string"), kind="R", group="formulary")
def find_conditions(world, drug_class):
    _class(world, drug_class)
    return sorted({c for r in world.data["drugs"].values() if r["class"] == drug_class
                   for c in r["conditions"]})


@tool(DOMAIN, "get", "rxcui", "RxNorm concept id (RxCUI) of a drug.",
      params={"drug": _DRUG}, returns=arg("rxcui", "integer"), kind="R", group="formulary")
def get_rxcui(world, drug):
    return _drug(world, drug)["rxcui"]


@tool(DOMAIN, "convert", "rxcui", "Drug name of an RxNorm concept id (RxCUI).",
      params={"rxcui": arg("rxcui", "integer", "RxNorm concept id")}, returns=_DRUG, kind="R",
      group="formulary")
def convert_rxcui(world, rxcui):
    for d, r in world.data["drugs"].items():
        if r["rxcui"] == rxcui:
            return d
    raise ToolError(f"rxcui {rxcui} names no drug in the formulary")


# ---------------------------------------------------------------------- interactions (R, P)

@tool(DOMAIN, "list", "interactions", "Drugs that interact with a drug (any severity), sorted.",
      params={"drug": _DRUG}, returns=_DRUGS_OUT, kind="R", group="interactions")
def list_interactions(world, drug):
    _drug(world, drug)
    return list(world.data["interactions"][drug])


@tool(DOMAIN, "count", "interactions", "Number of drugs that interact with a drug.",
      params={"drug": _DRUG}, returns=_INT, kind="R", group="interactions")
def count_interactions(world, drug):
    return len(list_interactions(world, drug))


@tool(DOMAIN, "find", "interactions", "Drugs whose interaction with a drug is at least as severe "
      "as a given severity (minor, moderate or major), sorted.",
      params={"drug": _DRUG, "severity": _SEV}, returns=_DRUGS_OUT, kind="R",
      group="interactions")
def find_interactions(world, drug, severity):
    _drug(world, drug)
    floor = _severity(severity)
    if floor == 0:
        raise ToolError("severity must be minor, moderate or major, not 'none'")
    return [d for d, s in world.data["interactions"][drug].items() if _RANK[s] >= floor]


@tool(DOMAIN, "check", "interactions", "Whether two drugs interact.",
      params={"drug_a": _DRUG, "drug_b": _DRUG}, returns=_BOOL, kind="R", group="interactions")
def check_interactions(world, drug_a, drug_b):
    return _pair_severity(world, drug_a, drug_b) != "none"


@tool(DOMAIN, "get", "severity", "Severity of the interaction between two drugs: none, minor, "
      "moderate or major.", params={"drug_a": _DRUG, "drug_b": _DRUG}, returns=_SEV, kind="R",
      group="interactions")
def get_severity(world, drug_a, drug_b):
    return _pair_severity(world, drug_a, drug_b)


@tool(DOMAIN, "compare", "severity", "The more severe of two interaction severities.",
      params={"severity_a": _SEV, "severity_b": _SEV}, returns=_SEV, kind="P",
      group="interactions")
def compare_severity(world, severity_a, severity_b):
    ra, rb = _severity(severity_a, "severity_a"), _severity(severity_b, "severity_b")
    return SEVERITIES[max(ra, rb)]


@tool(DOMAIN, "convert", "severity", "Numeric rank of an interaction severity: none 0, minor 1, "
      "moderate 2, major 3.", params={"severity": _SEV}, returns=_INT, kind="P",
      group="interactions")
def convert_severity(world, severity):
    return _severity(severity)


# ---------------------------------------------------------------- pharmacokinetics (R, P)

@tool(DOMAIN, "get", "halflife", "Elimination half-life of a drug (hours).",
      params={"drug": _DRUG}, returns=_HALF, kind="R", group="pharmacokinetics")
def get_halflife(world, drug):
    return _drug(world, drug)["halflife"]


@tool(DOMAIN, "compare", "halflife", "Half-life of the first drug minus that of the second "
      "(hours).", params={"drug_a": _DRUG, "drug_b": _DRUG}, returns=_NUM, kind="R",
      group="pharmacokinetics")
def compare_halflife(world, drug_a, drug_b):
    return _drug(world, drug_a, "drug_a")["halflife"] - _drug(world, drug_b, "drug_b")["halflife"]


@tool(DOMAIN, "convert", "halflife", "First-order elimination rate constant (per hour) of a "
      "half-life: ln 2 / half-life.", params={"halflife": _HALF}, returns=_NUM, kind="P",
      group="pharmacokinetics")
def convert_halflife(world, halflife):
    return math.log(2.0) / _positive(halflife, "halflife")


@tool(DOMAIN, "compute", "clearance", "Fraction of a dose eliminated within 24 hours under "
      "first-order kinetics: 1 - 0.5 ** (24 / half-life).", params={"halflife": _HALF},
      returns=_NUM, kind="P", group="pharmacokinetics")
def compute_clearance(world, halflife):
    return _cleared(_positive(halflife, "halflife"))


@tool(DOMAIN, "get", "clearance", "Fraction of a dose of a drug eliminated within 24 hours "
      "(first-order kinetics at the drug's half-life).", params={"drug": _DRUG}, returns=_NUM,
      kind="R", group="pharmacokinetics")
def get_clearance(world, drug):
    return _cleared(_drug(world, drug)["halflife"])


# ------------------------------------------------------------------------- dosing (R, P)

@tool(DOMAIN, "get", "dose", "Typical single adult dose of a drug (mg).",
      params={"drug": _DRUG}, returns=_DOSE, kind="R", group="dosing")
def get_dose(world, drug):
    return _drug(world, drug)["dose"]


@tool(DOMAIN, "get", "limit", "Maximum daily dose of a drug (mg).",
      params={"drug": _DRUG}, returns=_DOSE, kind="R", group="dosing")
def get_limit(world, drug):
    return _drug(world, drug)["limit"]


@tool(DOMAIN, "compute", "dose", "Weight-scaled single dose (mg): the typical dose times body "
      "weight / 70 kg, capped at the maximum daily dose.",
      params={"drug": _DRUG, "body_weight": _BODY}, returns=_DOSE, kind="R", group="dosing")
def compute_dose(world, drug, body_weight):
    r = _drug(world, drug)
    w = _positive(body_weight, "body_weight", 300.0)
    return min(r["dose"] * w / _REFERENCE_KG, r["limit"])


@tool(DOMAIN, "check", "dose", "Whether a total daily amount (mg) of a drug is within its "
      "maximum daily dose.", params={"drug": _DRUG, "dose": _DOSE}, returns=_BOOL, kind="R",
      group="dosing")
def check_dose(world, drug, dose):
    r = _drug(world, drug)
    return _positive(dose, "dose") <= r["limit"]


@tool(DOMAIN, "compute", "limit", "How many doses of a given size (mg) fit within a drug's "
      "maximum daily dose.", params={"drug": _DRUG, "dose": _DOSE}, returns=_INT, kind="R",
      group="dosing")
def compute_limit(world, drug, dose):
    r = _drug(world, drug)
    ratio = r["limit"] / _positive(dose, "dose")
    if not math.isfinite(ratio):
        raise ToolError(f"dose {dose} is too small")
    return math.floor(ratio + 1e-9)


@tool(DOMAIN, "convert", "dose", "A dose in mg per kg of body weight.",
      params={"dose": _DOSE, "body_weight": _BODY}, returns=_NUM, kind="P", group="dosing")
def convert_dose(world, dose, body_weight):
    return _positive(dose, "dose") / _positive(body_weight, "body_weight", 300.0)
