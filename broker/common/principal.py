"""Who is on the other end of a connection: the principal that authorization decides on.

A connection starts as :data:`ANONYMOUS`. Authentication replaces it: a SASL SCRAM
exchange with ``User:<name>``, a client certificate on a mutual-TLS listener with the
certificate's subject. Handlers read it from their responder; the authorizer matches
ACLs against ``str(principal)`` (``User:alice``), the form users write in configs and
on the command line.
"""

from __future__ import annotations

from typing import NamedTuple


class Principal(NamedTuple):
    """An authenticated (or anonymous) identity."""

    kind: str
    """``User`` for every principal today (SCRAM users and certificate subjects)."""
    name: str
    """The user name, or the certificate subject (``CN=agent-1,O=logferry``)."""

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> Principal:
        """``User:alice`` -> Principal("User", "alice"); ValueError names the form."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"a principal is written 'User:<name>', got {text!r}")
        return cls(kind, name)


ANONYMOUS = Principal("User", "ANONYMOUS")
"""The principal of a connection that has not authenticated."""

__all__ = ["ANONYMOUS", "Principal"]
