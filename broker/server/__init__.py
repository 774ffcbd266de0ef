"""The broker server, by room: wiring here; services/, native/ and kafka/ (the front
ends), security/, durability/ (docs/architecture.md, "Inside broker/server")."""

from broker.server.broker import Broker

__all__ = ["Broker"]
