"""``python -m clusterman``: the same command line as the ``clusterman`` script."""

import sys

from clusterman.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
