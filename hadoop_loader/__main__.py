"""``python -m hadoop_loader load --config etc/loader.toml``."""

import sys

from hadoop_loader.cli import main

sys.exit(main())
