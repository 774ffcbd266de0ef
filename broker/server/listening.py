"""One bound listener of a running broker: its socket, TLS context and SASL side."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from broker.common.tls import server_context
from broker.net import transport
from broker.net.tls_accept import Admit
from broker.server.listeners import ListenerConfig
from broker.server.security.authentication import Authenticator


def security_of(config: ListenerConfig) -> str:
    """How connections to a listener are secured (``TLS, SASL required``, ``plaintext``):
    the start log's words, and what the broker registers for each listener."""
    parts = ["TLS" if config.tls else "plaintext"]
    if config.auth is not None:
        parts.append("SASL " + ("required" if config.auth.required else "offered"))
    return ", ".join(parts)


class Listening:
    """A :class:`~broker.server.listeners.ListenerConfig` bound to its address.

    Bound first (so a taken port fails the start before ZooKeeper hears of the
    broker), serving later; :attr:`address` is the bound one (port 0 resolved)."""

    def __init__(self, config: ListenerConfig, authenticator: Authenticator | None):
        self.config = config
        self.authenticator = authenticator
        self.ssl_context = server_context(config.tls) if config.tls else None
        self.server: asyncio.Server | None = None
        self.address: tuple[str, int] = (config.host, config.port)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def security(self) -> str:
        """How connections here are secured, for the start log."""
        return security_of(self.config)

    async def bind(self, factory: Callable[[], asyncio.BaseProtocol], backlog: int, admit: Admit | None = None) -> None:
        """Bind the address without accepting yet (``backlog``: the listen queue;
        ``admit``: asked before a TLS handshake, see :func:`broker.net.transport.start_server`)."""
        tls = self.config.tls
        self.server = await transport.start_server(
            factory,
            self.config.host,
            self.config.port,
            backlog=backlog,
            start_serving=False,
            ssl_context=self.ssl_context,
            ssl_handshake_timeout=tls.handshake_timeout_s if tls else None,
            admit=admit,
        )
        sockets = self.server.sockets
        if sockets:
            self.address = (self.config.host, sockets[0].getsockname()[1])

    async def start_serving(self) -> None:
        """Accept connections."""
        if self.server is not None:
            await transport.start_serving(self.server, *self.address)

    def close(self) -> None:
        """Stop accepting (open connections are the broker's to close)."""
        if self.server is not None:
            self.server.close()
