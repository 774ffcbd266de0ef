"""From a request frame to its handler: parse the typed request, run the handler,
turn what it raises into an error answer.

Produce runs synchronously (a connection's appends keep their order); every other
api runs as a task and may answer out of order. Whatever a handler raises becomes an
answer: a :class:`LogferryError` its own code, anything else error 1 plus a traceback
in the log (a bug must not take the broker down).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from broker.common.errors import LogferryError, UnknownError
from broker.server.services.admin import AdminService
from broker.server.services.append_at import AppendAtService
from broker.server.services.fetch import FetchService
from broker.server.services.produce import ProduceService
from broker.server.services.responder import Responder
from broker.wire import protocol
from broker.wire.apis import RequestHead, parse_request

log = logging.getLogger("logferry.broker")

Handler = Callable[[Any, Responder], Awaitable[None]]


class Dispatcher:
    """Routes each api to its service."""

    def __init__(self, produce: ProduceService, fetch: FetchService, admin: AdminService):
        self.produce = produce
        self.append_at = AppendAtService(produce)
        self._async: dict[int, Handler] = {
            protocol.FETCH: fetch.handle,
            protocol.OFFSETS: admin.offsets,
            protocol.METADATA: admin.metadata,
            protocol.CREATE_TOPIC: admin.create_topic,
            protocol.DELETE_TOPIC: admin.delete_topic,
            protocol.ELECT_LEADERS: admin.elect_leaders,
            protocol.ALTER_TOPIC: admin.alter_topic,
            protocol.CREATE_PARTITIONS: admin.create_partitions,
            protocol.INIT_PRODUCER_ID: admin.init_producer_id,
        }

    @staticmethod
    def is_synchronous(head: RequestHead) -> bool:
        """Produce and append-at are handled as they arrive; the rest run as tasks."""
        return head.api == protocol.PRODUCE or head.api == protocol.APPEND_AT

    def handle_produce(self, head: RequestHead, frame: protocol.Frame, responder: Responder) -> None:
        """Parse and run a produce (or append-at) request now."""
        try:
            request = parse_request(head, frame)
        except LogferryError as exc:
            responder.fail(exc)
            return
        if head.api == protocol.APPEND_AT:
            self.append_at.handle(request, responder)
        else:
            self.produce.handle(request, responder)

    async def handle(self, head: RequestHead, frame: protocol.Frame, responder: Responder) -> None:
        """Parse and run any other request; every outcome is answered."""
        responder.started = time.perf_counter()  # timed from when the task runs
        try:
            request = parse_request(head, frame)
            await self._async[head.api](request, responder)
        except LogferryError as exc:
            responder.fail(exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not take the broker down
            log.exception("%s request from %s failed", head.name, responder.peer)
            responder.fail(UnknownError(f"internal error: {exc}"))


__all__ = ["Dispatcher"]
