"""``python -m jaxpapers.lm --steps 200``: train a byte-LM preset (see ``jaxpapers.lm.training.main``).

Runs data-parallel over every process and device; under ``jaxpapers launch -n N`` each process
loads its own rows of the global batch.
"""

import sys

from jaxpapers.lm.training import main

if __name__ == "__main__":
    sys.exit(main())
