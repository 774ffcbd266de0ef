"""Delivery futures: how a producer tells its caller that a batch was acknowledged or failed.

:meth:`Producer.send <broker.client.Producer.send>` returns the :class:`DeliveryFuture`
of the batch holding its last message. The sender completes it exactly once, from
whichever thread learns the outcome (the sender thread, or a connection's reader
thread when the broker answers), so completion and callback registration may race:
every callback still runs exactly once.

A future costs no lock of its own until someone waits on it: most futures are never
waited on (a producer sending a million messages a second waits on a few), so a waiter
makes the lock it blocks on, and completion releases it. Registration and completion
are ordered by one module-wide lock, held for a few attribute assignments; the
unlocked ``_done`` flag makes ``done()`` and an already-complete ``wait()`` free.

A future starts as its class's defaults (no ``__init__``: one allocation, no
assignments), and :func:`complete_many` completes the futures of many batches under one
hold of that lock: a producer of one-message batches makes and completes one future per
message.
"""

from __future__ import annotations

import _thread
import logging
from collections.abc import Callable, Iterable

from broker.common.errors import LogferryError, RequestTimedOutError

log = logging.getLogger("logferry.producer")

_registry = _thread.allocate_lock()
"""Orders completion against waiters and callbacks arriving, for every future (held
only for a few assignments)."""


class DeliveryFuture:
    """Completion of one batch: its base offset (None with acks=0) or its error."""

    # Class defaults, no __slots__: a new future sets nothing (see the module docstring).
    _waiter: _thread.LockType | None = None
    """Held while a waiter blocks on it; made by the first waiter, released on completion."""
    _done: bool = False
    offset: int | None = None
    _error: LogferryError | None = None
    _callbacks: list[Callable[[DeliveryFuture], None]] | None = None

    def _complete(self, offset: int | None, error: LogferryError | None = None) -> None:
        """Record the outcome (first call wins) and run the callbacks, in this thread."""
        complete_many((self,), None if offset is None else (offset,), error)

    def done(self) -> bool:
        """True once the batch was acknowledged or failed."""
        return self._done

    def exception(self) -> LogferryError | None:
        """The delivery error, or None (also while pending)."""
        return self._error

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until done; return the base offset or raise the delivery error."""
        if not self._done:
            with _registry:
                waiter = None
                if not self._done:
                    waiter = self._waiter
                    if waiter is None:
                        waiter = self._waiter = _thread.allocate_lock()
                        waiter.acquire()
            if waiter is not None:
                if not waiter.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
                    raise RequestTimedOutError(f"message not acknowledged within {timeout}s")
                waiter.release()  # the next waiter on this future, if any, goes on
        if self._error is not None:
            raise self._error
        return self.offset

    def add_callback(self, fn: Callable[[DeliveryFuture], None]) -> None:
        """Call ``fn(self)`` when done (at once if already done)."""
        with _registry:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn(self)  # already done: exactly once, here


def complete_many(
    futures: Iterable[DeliveryFuture], offsets: Iterable[int] | None = None, error: LogferryError | None = None
) -> None:
    """Complete ``futures`` as :meth:`DeliveryFuture._complete` would, one by one, with
    ``offsets`` (one per future; None: no offsets) or ``error``, under one hold of the
    registry lock; waiters and callbacks run afterwards, in this thread."""
    woken: list[DeliveryFuture] = []
    with _registry:
        if offsets is None and error is None:  # acks=0: only the flag changes
            for future in futures:
                if not future._done:
                    future._done = True
                    if future._waiter is not None or future._callbacks is not None:
                        woken.append(future)
        else:
            # zip without strict=: one offset per future by construction; per batch on the delivery path
            pairs = zip(futures, offsets) if offsets is not None else ((f, None) for f in futures)  # noqa: B905
            for future, offset in pairs:
                if not future._done:
                    future.offset = offset
                    future._error = error
                    future._done = True
                    if future._waiter is not None or future._callbacks is not None:
                        woken.append(future)
        released = [(f, f._waiter, f._callbacks) for f in woken]
        for future in woken:
            future._waiter = future._callbacks = None
    for future, waiter, callbacks in released:
        if waiter is not None:
            waiter.release()
        for callback in callbacks or ():
            try:
                callback(future)
            except Exception:
                log.exception("delivery callback failed")


__all__ = ["DeliveryFuture", "complete_many"]
