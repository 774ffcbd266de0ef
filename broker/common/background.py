"""Background tasks that fail loudly: started named, referenced, watched.

A long-lived asyncio task (the flusher, retention, a replica fetcher, the ISR
upkeep, the Kafka group expiry) that raises dies silently unless someone awaits it:
the event loop keeps only a weak reference to it, and ``gather(...,
return_exceptions=True)`` at shutdown turns its crash into a return value nobody reads.
A broker would go on serving with no flushing, or no replication, and say nothing.

:class:`BackgroundTasks` is the one way such tasks are started here, as aiokafka's
sender is: :meth:`~BackgroundTasks.start` names the task, keeps a reference until it
ends, and attaches a done-callback that, on a crash, logs one ERROR line that says what
died and what happens next (with the traceback attached, once), then calls
``on_crash`` (the broker stops and exits non-zero). A task cancelled at shutdown is
not an error; one that returns is simply forgotten.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("logferry.broker")

OnCrash = Callable[[str, BaseException], None]
"""``on_crash(task name, exception)``: what the owner does when a task crashed."""


class BackgroundTasks:
    """The long-lived tasks of one process (or one part of it)."""

    def __init__(self, on_crash: OnCrash | None = None, what: str = "the broker"):
        self.on_crash = on_crash
        """Called once per crashed task (None: the crash is only logged)."""
        self.what = what
        """Who stops on a crash, for the log line ("broker 3")."""
        self.tasks: set[asyncio.Task[Any]] = set()
        """The tasks running now (a strong reference: the loop keeps only weak ones)."""
        self.crashed: list[tuple[str, BaseException]] = []
        """Every crash so far: (task name, exception)."""

    def start(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` as the task ``name`` on the running loop; watch it."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if task.cancelled():
            return  # stopped on purpose
        exc = task.exception()
        if exc is None:
            return
        name = task.get_name()
        self.crashed.append((name, exc))
        stops = f"; {self.what} stops (exit code 1)" if self.on_crash is not None else ""
        log.error(
            "background task %r crashed: %s: %s%s. This is a bug: report it with this line and the traceback below",
            name,
            type(exc).__name__,
            exc,
            stops,
            exc_info=exc,
        )
        if self.on_crash is not None:
            self.on_crash(name, exc)

    async def cancel(self, tasks: list[asyncio.Task[Any]] | None = None) -> None:
        """Cancel ``tasks`` (default: all of them) and wait until they have ended. A
        crash among them has already been reported by the done-callback."""
        chosen = list(self.tasks if tasks is None else tasks)
        for task in chosen:
            task.cancel()
        if chosen:
            await asyncio.wait(chosen)


__all__ = ["BackgroundTasks", "OnCrash"]
