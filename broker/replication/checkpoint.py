"""Each log dir's high-watermark checkpoint: where a returning follower starts comparing.

``<log dir>/replication-offset-checkpoint`` holds ``{"<topic>-<p>": hw}`` as JSON,
replaced atomically (write, fsync, rename). A stale value is harmless: the follower
compares more bytes with its leader (see :mod:`.reconcile`); a missing one means it
compares from the log start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterable
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.storage.segment import fsync_dir

if TYPE_CHECKING:
    from broker.replication.roles import Replica

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
        log.warning("ignoring unreadable %s (%s): followers compare from the log start", path, exc)
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


async def checkpoint_replicas(replicas: Iterable[Replica], pool: Executor) -> None:
    """Write the visible end of every replicated partition into its log dir's
    checkpoint, in ``pool`` (disk work: the fsync pool, never behind a ZooKeeper
    call). A log dir that cannot be written is logged and skipped."""
    by_dir: dict[Any, dict[str, int]] = {}
    for replica in replicas:
        if replica.replicated:
            plog = replica.plog
            by_dir.setdefault(plog.directory.parent, {})[plog.name] = plog.visible_end
    loop = asyncio.get_running_loop()
    for log_dir, marks in by_dir.items():
        try:
            await loop.run_in_executor(pool, write_checkpoint, log_dir, marks)
        except OSError as exc:
            log.warning("cannot write the high-watermark checkpoint in %s: %s", log_dir, exc)


__all__ = ["FILE_NAME", "checkpoint_replicas", "read_checkpoint", "write_checkpoint"]
