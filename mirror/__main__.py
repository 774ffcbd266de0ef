"""``python -m mirror [status] --config FILE``: the mirror's commands standalone."""

import sys

from mirror.cli import main

sys.exit(main())
