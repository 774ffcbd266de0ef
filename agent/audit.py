"""Sans-IO audit ledger (the paper, section 5): messages sent and acked per topic per window.

Window definition, chosen so that every later stage can recompute it from the
messages alone: a message belongs to the window that contains its **time read**, the
``time`` field of its value (also the message timestamp the agent gives the
producer). Windows are aligned to the epoch: ``window_start = time - time %
window_ms``, ``window_end = window_start + window_ms``.

A window's record is due when the window has ended *and* every chunk sent with a
time read in it has finished (acked or failed); only then are its counts final. The
record then says: ``sent`` messages were handed to the producer, ``acked`` of them
were acknowledged by a broker. A failed chunk is read and sent again later, with a
new time read, so it counts in a later window; the counts of a window never change
after its record is published. See docs/agent.md, "Audit". The record's schema and the
window rule are the client library's (:class:`broker.client.AuditRecord`,
:func:`broker.client.window_of`), shared with every stage that reads the audit topic, and
so is the ledger (:class:`broker.client.AuditLedger`, which the mirror counts with too).
"""

from __future__ import annotations

from broker.client import AuditLedger, AuditRecord, window_of

__all__ = ["AuditLedger", "AuditRecord", "window_of"]
