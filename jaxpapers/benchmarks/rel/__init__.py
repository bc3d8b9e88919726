"""REL offline: relational-complexity generators, exact and bounded solvers, fixed scorers.

Contract names: :func:`generate_rc`, :func:`bounded_solver`, :func:`simulate_alignment`,
:func:`count_isomers`, :func:`score_response`. The transformer (JAX) is
:mod:`jaxpapers.benchmarks.rel.model`, imported on its own.
"""

from jaxpapers.benchmarks.rel.algebra import (bounded_solver, generate_rc, official_items,
                                              our_items, panel_shortcuts, reference_solver,
                                              sample_rc, shortcut_answers)
from jaxpapers.benchmarks.rel.bio import (detect_convergence, generate_b1, random_tree,
                                          simulate_alignment)
from jaxpapers.benchmarks.rel.chem import count_isomers, isomer_universe
from jaxpapers.benchmarks.rel.score import score_response

__all__ = ["generate_rc", "sample_rc", "bounded_solver", "reference_solver",
           "shortcut_answers", "official_items", "our_items", "panel_shortcuts",
           "random_tree", "simulate_alignment", "generate_b1", "detect_convergence",
           "count_isomers", "isomer_universe", "score_response"]
