"""Quality-diversity search and template tuning for kernels (KernelFoundry, issue #30; partial).

Present: ``archive`` (the MAP-Elites archive: :func:`archive_init`, :func:`archive_insert`,
contract names). Not yet built: sampling, descriptors, tasks, sandboxed evaluation, cost model,
mutators, prompts, tuning and the experiment.
"""

from jaxpapers.evolve.archive import (Archive, InsertInfo, archive_init, archive_insert,
                                      archive_insert_with_info, best, cell_index, coverage)

__all__ = ["Archive", "InsertInfo", "archive_init", "archive_insert", "archive_insert_with_info",
           "best", "cell_index", "coverage"]
