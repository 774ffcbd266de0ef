"""Consumer-group lag: the one formula every view uses.

``logferry group describe``, ``logferry mirror status`` and
:meth:`GroupConsumer.metrics <broker.client.GroupConsumer.metrics>` all call
:func:`group_lag`, so the three show the same number for the same state::

    lag_bytes = max(visible_end - committed.offset, 0)

- **visible end**: the end a consumer may read up to (the flushed end, or the
  replicated high watermark), as the broker reports it in OFFSETS and FETCH answers.
- **committed position**: the group's committed ``(offset, skip)``. ``lag_bytes``
  counts from the committed batch, whole, because a resuming member fetches that batch
  whole (and drops its first ``skip`` messages).
- **a missing commit counts as the log start**: a partition the group never committed
  has consumed nothing of what the log retains. That is exactly what a member with
  ``start="earliest"`` (the default, and the mirror's) will read; a member with
  ``start="latest"`` commits its start position as soon as it resolves it, so the
  over-count lasts until that first commit. Lag is thus never under-reported.
- **clamped at 0**: a committed offset past the visible end (a replica that was behind
  became leader, or the log was truncated after a crash) is no lag.
- A committed offset below the log start (retention deleted unconsumed data) is not
  clamped: the deleted bytes were never consumed, and callers flag the gap.

``lag_messages`` is an estimate: ``round(lag_bytes / avg_message_bytes) - skip``,
clamped at 0, using the broker's average stored bytes per message; None when the
average is unknown (and 0 when there is no lag).
"""

from __future__ import annotations

from typing import NamedTuple

Position = tuple[int, int]
"""``(offset, skip)``, as committed (see :class:`broker.client.group.offsets.Committed`)."""


class Lag(NamedTuple):
    """How far a group's committed position is behind a partition's visible end."""

    bytes: int
    """Bytes from the committed batch (or the log start) to the visible end, >= 0."""
    messages: int | None
    """Estimated messages still to consume; None when no average size is known."""


def group_lag(
    visible_end: int, committed: Position | None, log_start: int | None = None, avg_message_bytes: float = 0.0
) -> Lag | None:
    """The lag of one partition (rules in the module docstring).

    Returns None when it cannot be known: no commit and no known log start, or an
    unknown (negative) visible end.
    """
    if visible_end is None or visible_end < 0:
        return None
    if committed is not None:
        offset, skip = committed[0], committed[1]
    elif log_start is not None and log_start >= 0:
        offset, skip = log_start, 0
    else:
        return None
    nbytes = max(visible_end - offset, 0)
    if nbytes == 0:
        return Lag(0, 0)
    if avg_message_bytes and avg_message_bytes > 0:
        return Lag(nbytes, max(round(nbytes / avg_message_bytes) - skip, 0))
    return Lag(nbytes, None)


__all__ = ["Lag", "group_lag"]
