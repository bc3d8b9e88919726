"""Quality-diversity search and template tuning for kernels (KernelFoundry, issue #30).

Modules:

* ``archive``: the MAP-Elites archive (:func:`archive_init`, :func:`archive_insert`: contract);
* ``sampling``: the official parent / inspiration / island / migration rules, pure in a key;
* ``synthetic``: the synthetic landscape and the three searches as one ``lax.scan`` each;
* ``descriptors``: the official level scoring re-targeted to Pallas idioms, on code tokens;
* ``tasks``: our two Pallas ops as candidate problems (inputs, references, shapes, spaces);
* ``evaluate``: :func:`evaluate_source` (contract): the correctness ladder in the sandbox, the
  ``jax.export`` boundary, the roofline speed term;
* ``cost``: the roofline proxy read from exported cuda programs (a CPU proxy, flagged as such);
* ``mutators`` / ``prompts``: scripted, template and LLM mutators; prompt regions, SEARCH /
  REPLACE edits and the prompt database;
* ``search``: :func:`kernel_search`, the outer loop; ``tune``: :func:`tune_template` (contract);
* ``exploits``: planted escape attempts against the evaluator.
"""

from jaxpapers.evolve.archive import (Archive, InsertInfo, archive_init, archive_insert,
                                      archive_insert_with_info, best, cell_index, coverage)
from jaxpapers.evolve.evaluate import Evaluation, evaluate_source
from jaxpapers.evolve.mutators import (Candidate, LLMMutator, ScriptedMutator, TemplateMutator,
                                       load_variants)
from jaxpapers.evolve.sampling import SamplerState, SamplingConfig
from jaxpapers.evolve.search import KernelSearchResult, kernel_search
from jaxpapers.evolve.tune import TuneResult, grid_size, random_search, tune_template

__all__ = ["Archive", "InsertInfo", "archive_init", "archive_insert", "archive_insert_with_info",
           "best", "cell_index", "coverage", "Evaluation", "evaluate_source", "Candidate",
           "LLMMutator", "ScriptedMutator", "TemplateMutator", "load_variants", "SamplerState",
           "SamplingConfig", "KernelSearchResult", "kernel_search", "TuneResult", "grid_size",
           "random_search", "tune_template"]
