"""Each log dir's high-watermark checkpoint: where a returning follower starts comparing.

``<log dir>/replication-offset-checkpoint`` holds ``{"<topic>-<p>": hw}`` as JSON,
replaced atomically (write, fsync, rename). A stale value is harmless: the follower
compares more bytes with its leader (see :mod:`.reconcile`); a missing one means it
compares from the log start.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from broker.storage.segment import fsync_dir

log = logging.getLogger("logferry.replication")

FILE_NAME = "replication-offset-checkpoint"


def read_checkpoint(log_dir: Path) -> dict[str, int]:
    """The checkpointed high watermarks of one log dir ({} if none or unreadable)."""
    path = Path(log_dir) / FILE_NAME
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable %s (%s): followers compare from the log start",
                    path, exc)
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): int(v) for k, v in data.items() if isinstance(v, int)}


def write_checkpoint(log_dir: Path, marks: dict[str, int]) -> None:
    """Replace one log dir's checkpoint (blocking: call from a worker thread)."""
    path = Path(log_dir) / FILE_NAME
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump(marks, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


__all__ = ["FILE_NAME", "read_checkpoint", "write_checkpoint"]
