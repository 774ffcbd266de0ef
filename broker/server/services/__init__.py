"""The request services: produce, fetch, admin, append-at. Each takes a typed request
(the parts of :mod:`broker.wire`) and answers through a :class:`~.responder.Responder`;
none reads a socket or frames bytes, so every front end calls the same ones."""
