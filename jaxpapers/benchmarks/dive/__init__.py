"""DIVE offline: typed tool worlds, reproducible task synthesis verified by replay.

Contract names: :func:`synthesize`, :func:`replay`, :func:`call_graph_hash`. The next-tool
policy (JAX) is :mod:`jaxpapers.benchmarks.dive.policy`, imported on its own.
"""

from jaxpapers.benchmarks.dive.splits import heldout_split, narrow_toolsets
from jaxpapers.benchmarks.dive.stats import call_graph_hash, diversity, topology_hash
from jaxpapers.benchmarks.dive.synth import (LLMExplorer, TypeDirectedExplorer, answer_text,
                                             question_leaks, synthesize, synthesize_one)
from jaxpapers.benchmarks.dive.verify import check_task, replay, solve, solver_verified

__all__ = ["synthesize", "synthesize_one", "TypeDirectedExplorer", "LLMExplorer", "replay",
           "check_task", "solve", "solver_verified", "call_graph_hash", "topology_hash",
           "diversity", "heldout_split", "narrow_toolsets", "answer_text", "question_leaks"]
