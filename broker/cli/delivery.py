"""What a sending command tells its user: how many messages were not delivered, and why.

A producer's ``flush``/``close`` returns once every batch is acknowledged *or failed*;
only the futures and the producer's counters say which. :class:`DeliveryTally` counts
what the command queued, keeps the first delivery error (from the futures' callbacks,
in whichever thread completes them) and, given the producer's count of delivered
messages at the end, builds the one-line failure, so a command never prints
"produced N messages" and exits 0 when some of them are not stored.
"""

from __future__ import annotations

import threading
from typing import Any

from broker.common.errors import LogferryError


class NotDeliveredError(LogferryError):
    """Some messages a command queued were not delivered (exit 1)."""


class DeliveryTally:
    """Messages queued by a command, and the first error any of their batches met."""

    def __init__(self) -> None:
        self.queued = 0
        self._lock = threading.Lock()
        self._first_error: BaseException | None = None

    @property
    def first_error(self) -> BaseException | None:
        """The first delivery error seen (a failed batch, or a send/flush that raised)."""
        return self._first_error

    def sent(self, count: int, future: Any) -> None:
        """``count`` messages were queued; ``future`` (a DeliveryFuture) completes their last batch."""
        self.queued += count
        future.add_callback(self._on_done)

    def failed(self, error: BaseException) -> None:
        """Record an error met outside a future (``send`` or ``close`` raised)."""
        with self._lock:
            if self._first_error is None:
                self._first_error = error

    def _on_done(self, future: Any) -> None:
        error = future.exception()
        if error is not None:
            self.failed(error)

    def outcome(self, delivered: int, topic: str) -> str:
        """The success line; raises :class:`NotDeliveredError` if any message is missing.

        ``delivered`` is the producer's count of acknowledged messages (all of them, with
        acks=0, once written to a socket). A send that raised before anything was queued
        re-raises that error as it is.
        """
        missing = max(self.queued - delivered, 0)
        error = self._first_error
        if missing == 0 and error is None:
            return f"produced {self.queued} messages to {topic}"
        if self.queued == 0 and isinstance(error, LogferryError):
            raise error
        why = f": {error}" if error is not None else ""
        if missing == 0:  # everything queued arrived, but reading or queueing more failed
            raise NotDeliveredError(f"stopped after {self.queued} messages to {topic}{why}")
        raise NotDeliveredError(f"{missing} of {self.queued} messages to {topic} were not delivered{why}")


__all__ = ["DeliveryTally", "NotDeliveredError"]
