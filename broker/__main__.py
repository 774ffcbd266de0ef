"""``python -m broker`` runs the ``logferry`` command line."""

import sys

from broker.cli.main import main

sys.exit(main())
