"""The ``[tls]`` config section every component shares, and the ``ssl.SSLContext``s built
from it.

One table, the same keys in the broker, agent, mirror (one per cluster), loader and CLI:

.. code-block:: toml

    [tls]
    enabled = true
    ca_file = "certs/ca.pem"          # whom to trust (default: the system's CAs)
    cert_file = "certs/broker-1.pem"  # this process's certificate (a broker needs one;
    key_file = "certs/broker-1.key"   #   a client only for mutual TLS)
    verify_hostname = true            # check the server's name against its certificate
    server_hostname = ""              # the name to check instead of the address dialled
    client_auth = "none"              # broker only: "none", "optional", "required"
    handshake_timeout_s = 10.0        # broker only: drop a client that does not finish

:func:`tls_section` validates the table (through the component's
:class:`~broker.common.config.Validator`, so errors name the file and key, and an
unreadable file is an error naming that file) and returns a :class:`TlsConfig`, or
``None`` when TLS is off. :func:`server_context` and :func:`client_context` build the
contexts: TLS 1.2 or newer, certificates verified by default (host names included), a
client certificate demanded when the broker says ``client_auth = "required"``.

Why here, in broker.common: the agent, mirror and loader may import only
``broker.client`` and ``broker.common``, and each of them reads this section.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from broker.common.config import (
    BOOL,
    NONEMPTY_STR,
    POSITIVE_NUMBER,
    ErrorFactory,
    Validator,
    config_error,
    fields,
    one_of,
)

ClientAuth = Literal["none", "optional", "required"]

TLS_FIELDS = fields(
    enabled=BOOL,
    ca_file=NONEMPTY_STR,
    cert_file=NONEMPTY_STR,
    key_file=NONEMPTY_STR,
    verify_hostname=BOOL,
    server_hostname=NONEMPTY_STR,
    client_auth=one_of("none", "optional", "required"),
    handshake_timeout_s=POSITIVE_NUMBER,
)
"""The ``[tls]`` table (docs/configuration.md, "TLS")."""

SERVER_ONLY = ("client_auth", "handshake_timeout_s")
"""Keys only a broker's section may set (a listener's settings)."""

DEFAULT_HANDSHAKE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class TlsConfig:
    """TLS settings of one process toward one cluster; built, TLS is on.

    A client given ``TlsConfig()`` talks TLS and trusts the system's CAs; give
    ``ca_file`` for a private CA, ``cert_file`` and ``key_file`` for mutual TLS.
    ``where`` and ``file`` only say, in errors, which config section this came from.
    """

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    verify_hostname: bool = True
    server_hostname: str | None = None
    client_auth: ClientAuth = "none"
    handshake_timeout_s: float = DEFAULT_HANDSHAKE_TIMEOUT_S
    where: str = field(default="tls", compare=False)
    file: str = field(default="", compare=False)
    error: ErrorFactory = field(default=config_error, compare=False, repr=False)

    def _fail(self, key: str, problem: str) -> Exception:
        return self.error(f"{self.where}.{key}" if self.where else key, problem, self.file)


def tls_section(
    validator: Validator, parent: Mapping[str, Any], name: str = "tls", where: str = "", server: bool = False
) -> TlsConfig | None:
    """The checked ``[name]`` table of ``parent`` as a :class:`TlsConfig` (``None``: off).

    ``server`` is True for a broker (its listener needs ``cert_file`` and ``key_file``
    and may set :data:`SERVER_ONLY` keys). With TLS on, every file is read and the
    context built once, so a missing file, a bad PEM or a key that does not match its
    certificate stops the process at start with the key and the file named.
    """
    key = f"{where}.{name}" if where else name
    table = validator.table(parent, name, TLS_FIELDS, where)
    return tls_from_table(validator, table, key, server)


def tls_from_table(
    validator: Validator, table: Mapping[str, Any], where: str = "tls", server: bool = False
) -> TlsConfig | None:
    """A checked ``[tls]`` table (see :data:`TLS_FIELDS`) as a :class:`TlsConfig`."""

    def name(k: str) -> str:
        return f"{where}.{k}" if where else k

    if not server:
        for k in SERVER_ONLY:
            if k in table:
                validator.fail(name(k), "only a broker's [tls] takes this (it sets the broker's listener)")
    if not table.get("enabled", False):
        return None
    paths = {k: validator.path(table[k]) for k in ("ca_file", "cert_file", "key_file") if k in table}
    if ("cert_file" in paths) != ("key_file" in paths):
        missing = "key_file" if "cert_file" in paths else "cert_file"
        validator.fail(name(missing), "missing (cert_file and key_file go together)")
    if server and "cert_file" not in paths:
        validator.fail(
            name("cert_file"),
            "missing (a broker with TLS enabled needs its certificate and key: make them with `logferry certs issue`)",
        )
    client_auth = table.get("client_auth", "none")
    if client_auth != "none" and "ca_file" not in paths:
        validator.fail(
            name("ca_file"), f"missing (client_auth = {client_auth!r} verifies client certificates against this CA)"
        )
    for k, path in paths.items():
        _check_readable(validator, name(k), path)
    config = TlsConfig(
        ca_file=paths.get("ca_file"),
        cert_file=paths.get("cert_file"),
        key_file=paths.get("key_file"),
        verify_hostname=table.get("verify_hostname", True),
        server_hostname=table.get("server_hostname"),
        client_auth=client_auth,
        handshake_timeout_s=table.get("handshake_timeout_s", DEFAULT_HANDSHAKE_TIMEOUT_S),
        where=where,
        file=validator.file,
        error=validator.error,
    )
    if server:
        server_context(config)
    client_context(config)  # a broker's followers use it too: check it the same way
    return config


def _check_readable(validator: Validator, key: str, path: Path) -> None:
    try:
        with path.open("rb") as handle:
            handle.read(1)
    except FileNotFoundError:
        validator.fail(key, f"{path}: no such file")
    except IsADirectoryError:
        validator.fail(key, f"{path}: is a directory, not a PEM file")
    except OSError as exc:
        validator.fail(key, f"{path}: cannot read it ({exc.strerror})")


# -- contexts -----------------------------------------------------------------------------


def server_context(config: TlsConfig) -> ssl.SSLContext:
    """A broker listener's context: its certificate, TLS 1.2+, and client certificates
    checked against ``ca_file`` when ``client_auth`` asks for them."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if config.cert_file is None or config.key_file is None:
        raise config._fail("cert_file", "missing (a TLS listener needs a certificate and key)")
    _load_chain(context, config)
    if config.client_auth != "none":
        _load_ca(context, config)
        context.verify_mode = ssl.CERT_REQUIRED if config.client_auth == "required" else ssl.CERT_OPTIONAL
    return context


def metrics_context(config: TlsConfig | None) -> ssl.SSLContext | None:
    """A metrics endpoint's server context from a ``[metrics.tls]`` table (None: HTTP)."""
    return server_context(config) if config is not None else None


def client_context(config: TlsConfig) -> ssl.SSLContext:
    """A client's context: server certificates verified against ``ca_file`` (the
    system's CAs without one), host names checked unless ``verify_hostname`` is false,
    TLS 1.2+, and this process's certificate offered when it has one (mutual TLS)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, check_hostname
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if config.ca_file is not None:
        _load_ca(context, config)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    context.check_hostname = config.verify_hostname
    if config.cert_file is not None and config.key_file is not None:
        _load_chain(context, config)
    return context


def client_tls(tls: TlsConfig | ssl.SSLContext | None) -> tuple[ssl.SSLContext | None, str | None]:
    """What a client's connections take: ``(ssl_context, server_hostname)``.

    ``tls`` is a :class:`TlsConfig`, a ready ``ssl.SSLContext`` (used as it is), or
    ``None`` for plaintext.
    """
    if tls is None:
        return None, None
    if isinstance(tls, ssl.SSLContext):
        return tls, None
    return client_context(tls), tls.server_hostname


def _load_ca(context: ssl.SSLContext, config: TlsConfig) -> None:
    try:
        context.load_verify_locations(cafile=config.ca_file)
    except (ssl.SSLError, OSError) as exc:
        raise config._fail("ca_file", f"{config.ca_file}: not a PEM CA certificate ({_reason(exc)})") from None


def _load_chain(context: ssl.SSLContext, config: TlsConfig) -> None:
    try:
        context.load_cert_chain(config.cert_file, config.key_file)  # type: ignore[arg-type]
    except (ssl.SSLError, OSError) as exc:
        raise config._fail(
            "cert_file",
            f"{config.cert_file} with key {config.key_file}: "
            f"not a PEM certificate and its unencrypted key, or they do not "
            f"match ({_reason(exc)})",
        ) from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


__all__ = [
    "DEFAULT_HANDSHAKE_TIMEOUT_S",
    "SERVER_ONLY",
    "TLS_FIELDS",
    "TlsConfig",
    "client_context",
    "client_tls",
    "metrics_context",
    "server_context",
    "tls_from_table",
    "tls_section",
]
