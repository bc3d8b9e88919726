import sys

from jaxpapers.cli import main

sys.exit(main())
