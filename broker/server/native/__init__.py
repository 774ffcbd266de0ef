"""The native front end: logferry's own msgpack framing (:mod:`broker.wire.protocol`).

A :class:`~.connection.BrokerConnection` reads frames, admits them through the
security room, and hands each request to the services through :mod:`.dispatch`; the
answers go back in order (``tls_send`` when the socket is TLS). It imports nothing of
the Kafka front end.
"""
