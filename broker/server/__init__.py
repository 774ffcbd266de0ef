"""The broker server: lifecycle and wiring, connections, the request handlers."""

from broker.server.broker import Broker

__all__ = ["Broker"]
