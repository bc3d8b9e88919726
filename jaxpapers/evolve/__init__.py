"""Quality-diversity search and template tuning for kernels (KernelFoundry, issue #30; partial).

Present: ``archive`` (the MAP-Elites archive: :func:`archive_init`, :func:`archive_insert`,
contract names) and ``tune`` (:func:`tune_template`, contract name: the template stage as a
budgeted search that never repeats a point; exhaustive when the budget covers the grid). Not
yet built: sampling, descriptors, tasks, sandboxed evaluation, cost model, mutators, prompts and
the experiment.
"""

from jaxpapers.evolve.archive import (Archive, InsertInfo, archive_init, archive_insert,
                                      archive_insert_with_info, best, cell_index, coverage)
from jaxpapers.evolve.tune import TuneResult, grid_size, random_search, tune_template

__all__ = ["Archive", "InsertInfo", "archive_init", "archive_insert", "archive_insert_with_info",
           "best", "cell_index", "coverage", "TuneResult", "grid_size", "random_search",
           "tune_template"]
