"""Delivery futures: how a producer tells its caller that a batch was acknowledged or failed.

:meth:`Producer.send <broker.client.Producer.send>` returns the :class:`DeliveryFuture`
of the batch holding its last message. The sender completes it exactly once, from
whichever thread learns the outcome (the sender thread, or a connection's reader
thread when the broker answers), so completion and callback registration may race:
every callback still runs exactly once.

A future is a lock held from birth and released on completion, so waiting costs no
polling and no per-future Condition; the unlocked ``_done`` flag makes ``done()`` and an
already-complete ``wait()`` free.
"""

from __future__ import annotations

import _thread
import logging
from typing import Callable

from broker.common.errors import LogferryError, RequestTimedOutError

log = logging.getLogger("logferry.producer")


class DeliveryFuture:
    """Completion of one batch: its base offset (None with acks=0) or its error."""

    __slots__ = ("_lock", "_done", "offset", "_error", "_callbacks", "_callbacks_lock")

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()
        self._callbacks_lock = _thread.allocate_lock()
        self._done = False
        self.offset: int | None = None
        self._error: LogferryError | None = None
        self._callbacks: list[Callable[["DeliveryFuture"], None]] | None = None

    def _complete(self, offset: int | None, error: LogferryError | None = None) -> None:
        """Record the outcome (first call wins) and run the callbacks, in this thread."""
        with self._callbacks_lock:
            if self._done:
                return
            self.offset = offset
            self._error = error
            self._done = True
            callbacks, self._callbacks = self._callbacks, None
        self._lock.release()
        for callback in callbacks or ():
            try:
                callback(self)
            except Exception:
                log.exception("delivery callback failed")

    def done(self) -> bool:
        """True once the batch was acknowledged or failed."""
        return self._done

    def exception(self) -> LogferryError | None:
        """The delivery error, or None (also while pending)."""
        return self._error

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until done; return the base offset or raise the delivery error."""
        if not self._done:
            if not self._lock.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
                raise RequestTimedOutError(f"message not acknowledged within {timeout}s")
            self._lock.release()
        if self._error is not None:
            raise self._error
        return self.offset

    def add_callback(self, fn: Callable[["DeliveryFuture"], None]) -> None:
        """Call ``fn(self)`` when done (at once if already done)."""
        with self._callbacks_lock:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn(self)  # already done: exactly once, here


__all__ = ["DeliveryFuture"]
