"""Socket and TLS failures turned into :mod:`broker.common.errors`, in one place.

Every way of opening a connection (blocking client, asyncio client stream, asyncio
listener) meets the same ``OSError`` family: refused, timed out, reset, unresolvable
host, no route, a failed TLS verification. Each is mapped here to an error whose
message names the peer's ``host:port`` and says what to check, so a user reading a log
line or a traceback knows where to look without knowing errno values.
"""

from __future__ import annotations

import errno
import socket
import ssl

from broker.common.errors import BrokerNotAvailableError, ListenError, TlsHandshakeError

_UNREACHABLE = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EHOSTDOWN}


def _reason(exc: BaseException) -> str:
    """The short human text of an OSError (without the ``[Errno n]`` prefix)."""
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def tls_error(
    exc: ssl.SSLError, address: str, peer: str = "broker", server_hostname: str | None = None
) -> TlsHandshakeError:
    """A failed TLS handshake with ``address``, saying what to check."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = exc.verify_message or _reason(exc)
        name = f" and that it is issued for {server_hostname!r}" if server_hostname else ""
        return TlsHandshakeError(
            f"TLS handshake with {peer} {address} failed: its certificate did not verify "
            f"({detail}); check that the client's CA file holds the CA that signed the "
            f"{peer}'s certificate{name}"
        )
    return TlsHandshakeError(
        f"TLS handshake with {peer} {address} failed: {_reason(exc)}; check that both ends "
        f"have TLS enabled and share a protocol version and cipher"
    )


def looks_like_tls(data: bytes | bytearray | memoryview) -> bool:
    """True if ``data`` starts like a TLS record (a handshake or an alert, TLS 1.x).

    The first bytes of a plaintext frame are its 4-byte length: a frame starting
    ``16 03`` or ``15 03`` would be over 350 MB, which no first request or response is.
    So a broker seeing this on a plaintext port met a TLS client, and a plaintext
    client seeing it met a TLS port.
    """
    return len(data) >= 2 and data[0] in (0x15, 0x16) and data[1] == 0x03


def tls_expected_error(address: str, peer: str = "broker", answered: bool = True) -> BrokerNotAvailableError:
    """A plaintext client that got a TLS answer (``answered``), or whose connection was
    closed before any answer (what a TLS port does to a plaintext client)."""
    what = (
        "answered with TLS: that port expects TLS"
        if answered
        else "closed the connection before answering: if that port expects TLS"
    )
    return BrokerNotAvailableError(
        f"{peer} {address} {what}, give the client TLS settings (tls= in the client "
        f"library, --tls-ca on the command line, a [tls] section in a config file)"
    )


def tls_rejected_error(address: str, peer: str = "broker") -> BrokerNotAvailableError:
    """A TLS connection closed before its first answer: with TLS 1.3 the server checks a
    client certificate after the client's side of the handshake is done, so this is how
    a refused (missing, untrusted or expired) client certificate shows."""
    return BrokerNotAvailableError(
        f"{peer} {address} closed the TLS connection before answering: it may require a "
        f"client certificate (mutual TLS) that it did not get or does not trust; give the "
        f"client a certificate signed by a CA the {peer} trusts (cert_file and key_file, "
        f"--tls-cert and --tls-key)"
    )


def connect_error(
    exc: BaseException,
    host: str,
    port: int,
    timeout: float | None = None,
    peer: str = "broker",
    server_hostname: str | None = None,
) -> BrokerNotAvailableError:
    """The error for a connection to ``host:port`` that could not be opened.

    ``exc`` is what ``connect``, name resolution or the TLS handshake raised (an
    ``OSError``, ``ssl.SSLError`` or ``TimeoutError``).
    """
    address = f"{host}:{port}"
    if isinstance(exc, ssl.SSLError):
        return tls_error(exc, address, peer, server_hostname)
    prefix = f"cannot connect to {peer} {address}"
    if isinstance(exc, socket.gaierror):
        return BrokerNotAvailableError(
            f"{prefix}: host {host!r} not found ({_reason(exc)}); check the host name in "
            f"the configuration or in the {peer}'s registration"
        )
    if isinstance(exc, TimeoutError):  # socket.timeout is TimeoutError since 3.10
        within = f" within {timeout:g}s" if timeout is not None else ""
        return BrokerNotAvailableError(
            f"{prefix}: no answer{within}; check that the host is up and that no firewall drops the packets"
        )
    if isinstance(exc, ConnectionRefusedError):
        return BrokerNotAvailableError(
            f"{prefix}: connection refused; is the {peer} running and listening on port {port}?"
        )
    if isinstance(exc, ConnectionResetError):
        return BrokerNotAvailableError(
            f"{prefix}: the connection was reset while opening it; the {peer} may be "
            f"stopping, or expects TLS where the client speaks plaintext (or the reverse)"
        )
    if isinstance(exc, OSError) and exc.errno in _UNREACHABLE:
        return BrokerNotAvailableError(f"{prefix}: {_reason(exc)}; check the network route to {host}")
    return BrokerNotAvailableError(f"{prefix}: {_reason(exc)}")


def lost_error(exc: BaseException, address: str, peer: str = "broker", during: str = "lost") -> BrokerNotAvailableError:
    """The error for an open connection that broke (reset, closed, a TLS alert).

    ``during`` completes "connection to broker host:port ...": ``"lost"`` while
    reading, ``"failed"`` while sending.
    """
    return BrokerNotAvailableError(f"connection to {peer} {address} {during}: {_reason(exc)}")


def listen_error(exc: OSError, host: str, port: int) -> ListenError:
    """The error for a listening socket that could not be opened on ``host:port``."""
    prefix = f"cannot listen on {host}:{port}"
    if isinstance(exc, socket.gaierror):
        return ListenError(
            f"{prefix}: host {host!r} not found ({_reason(exc)}); set `host` to a name or address of this machine"
        )
    if exc.errno == errno.EADDRINUSE:
        return ListenError(
            f"{prefix}: the address is already in use; another process (a "
            f"second broker?) holds the port: stop it or change `port`"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return ListenError(f"{prefix}: {host} is not an address of this machine; change `host`")
    if exc.errno == errno.EACCES:
        return ListenError(f"{prefix}: permission denied; ports below 1024 need privileges, choose a higher `port`")
    return ListenError(f"{prefix}: {_reason(exc)}")


__all__ = [
    "connect_error",
    "listen_error",
    "looks_like_tls",
    "lost_error",
    "tls_error",
    "tls_expected_error",
    "tls_rejected_error",
]
