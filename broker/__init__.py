"""logferry's broker: log storage, the wire protocol, the server and the client library."""

__version__ = "0.1.0"
