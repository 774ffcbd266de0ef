"""``python -m agent --config etc/agent.toml`` (or ``python -m agent status --config ...``)."""

import sys

from agent.cli import main

sys.exit(main())
