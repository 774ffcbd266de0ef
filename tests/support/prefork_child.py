"""A child for tests/integration/test_prefork.py: ``python -m tests.support.prefork_child WHAT``.

``report``: prints its argv, working directory, one environment variable and whether
the broker is already imported, as JSON; ``sleep``: waits for a signal; ``raise``:
an uncaught exception; ``exit N``: ``sys.exit(N)``; ``interrupt``: KeyboardInterrupt.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    what = argv[0]
    if what == "report":
        print(
            json.dumps(
                {
                    "argv": sys.argv,
                    "cwd": os.getcwd(),
                    "marker": os.environ.get("PREFORK_MARKER"),
                    "preloaded": "broker.server.broker" in sys.modules,
                    "name": Path(f"/proc/{os.getpid()}/comm").read_text().strip(),
                    "netns": os.readlink(f"/proc/{os.getpid()}/ns/net"),
                }
            )
        )
        return 0
    if what == "sleep":
        print("sleeping", flush=True)
        time.sleep(60)
        return 0
    if what == "raise":
        raise RuntimeError("raised on purpose")
    if what == "exit":
        return int(argv[1])
    if what == "interrupt":
        raise KeyboardInterrupt
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
