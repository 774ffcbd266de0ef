"""Named listeners: the addresses a broker listens on, each with its own security.

A broker config may list ``[[listeners]]`` tables (``name``, ``host``, ``port``,
``protocol`` = ``"logferry"`` or ``"kafka"``, and per listener ``tls`` and ``auth``
sub-tables with the keys of ``[tls]`` and ``[auth]``). A listener has exactly the
security its own tables give it and inherits nothing: a listener without ``tls`` is
plaintext, one without ``auth`` offers no SASL. With ``[[listeners]]`` the top-level
``[tls]``, ``[auth]``, ``[kafka]`` and ``[broker] host``/``port`` are refused (they
would be a second, contradicting way to say the same thing).

A config without ``[[listeners]]`` has one listener named ``default`` made of
``[broker] host``/``port``, ``[tls]`` and ``[auth]`` (and one named ``kafka`` for
``[kafka] listen``), so today's configs behave exactly as before.

The first ``logferry`` listener is the *default* one: its address is registered in
ZooKeeper under the old ``host``/``port`` fields, which older clients and clients that
name no listener use. ``[broker] inter_broker_listener`` names the one followers fetch
from leaders on (default: the default listener).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from broker.common.config import NONEMPTY_STR, PORT, Validator, fields, one_of
from broker.common.tls import TLS_FIELDS, TlsConfig, tls_from_table
from broker.server.security.authentication import AUTH_FIELDS, AuthConfig, auth_from_table

LOGFERRY = "logferry"
KAFKA = "kafka"
DEFAULT_LISTENER = "default"
"""The name of the one listener of a config without ``[[listeners]]``."""

LISTENER_FIELDS = fields(
    ("name", "port"),
    name=NONEMPTY_STR,
    host=NONEMPTY_STR,
    port=PORT,
    protocol=one_of(LOGFERRY, KAFKA),
)
"""One ``[[listeners]]`` table (its ``tls`` and ``auth`` sub-tables apart)."""

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class ListenerConfig:
    """One address the broker listens on and how connections there are secured."""

    name: str
    host: str
    port: int
    protocol: str = LOGFERRY
    tls: TlsConfig | None = None
    auth: AuthConfig | None = None


def listeners_from_list(validator: Validator, tables: Any) -> tuple[ListenerConfig, ...]:
    """The checked ``[[listeners]]`` array: names unique and valid, ports not shared,
    at least one ``logferry`` listener and at most one ``kafka`` one."""
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        validator.fail("listeners", "must be a non-empty array of tables ([[listeners]])")
    listeners: list[ListenerConfig] = []
    seen: dict[str, int] = {}
    ports: dict[int, str] = {}
    for index, raw in enumerate(tables):
        where = f"listeners[{index}]"
        table = dict(raw)
        tls_table = table.pop("tls", {})
        auth_table = table.pop("auth", {})
        for key, sub in (("tls", tls_table), ("auth", auth_table)):
            if not isinstance(sub, dict):
                validator.fail(f"{where}.{key}", f"must be a table ([listeners.{key}])")
        checked = validator.check(table, LISTENER_FIELDS, where)
        name = checked["name"]
        if not _NAME.fullmatch(name):
            validator.fail(
                f"{where}.name",
                f"{name!r} is not a listener name: use letters, "
                "digits, '_' and '-' (like external, local, replication)",
            )
        if name in seen:
            validator.fail(
                f"{where}.name",
                f"duplicate listener name {name!r} (also listeners[{seen[name]}]); each listener needs its own name",
            )
        seen[name] = index
        port = checked["port"]
        if port and port in ports:
            validator.fail(
                f"{where}.port", f"port {port} is already listener {ports[port]!r}'s; give each listener its own port"
            )
        ports[port] = name
        tls = tls_from_table(
            validator, validator.check(tls_table, TLS_FIELDS, f"{where}.tls"), f"{where}.tls", server=True
        )
        protocol = checked.get("protocol", LOGFERRY)
        auth = auth_from_table(
            validator,
            validator.check(auth_table, AUTH_FIELDS, f"{where}.auth"),
            tls is not None,
            tls.client_auth if tls else "none",
        )
        listeners.append(ListenerConfig(name, checked.get("host", "127.0.0.1"), port, protocol, tls, auth))
    if not any(listener.protocol == LOGFERRY for listener in listeners):
        validator.fail("listeners", 'needs at least one listener with protocol = "logferry"')
    kafka = [i for i, listener in enumerate(listeners) if listener.protocol == KAFKA]
    if len(kafka) > 1:
        validator.fail(f"listeners[{kafka[1]}].protocol", "only one kafka listener is supported")
    return tuple(listeners)


def check_inter_broker(validator: Validator, listeners: tuple[ListenerConfig, ...], name: str | None) -> str:
    """The inter-broker listener's name: ``name`` if it is a logferry listener, else
    the default listener's."""
    if name is None:
        return default_listener(listeners).name
    for listener in listeners:
        if listener.name == name:
            if listener.protocol != LOGFERRY:
                validator.fail(
                    "broker.inter_broker_listener",
                    f"listener {name!r} speaks {listener.protocol}; followers fetch over a logferry listener",
                )
            return name
    known = ", ".join(repr(listener.name) for listener in listeners)
    validator.fail("broker.inter_broker_listener", f"no listener is named {name!r} (listeners: {known})")


def default_listener(listeners: tuple[ListenerConfig, ...]) -> ListenerConfig:
    """The first logferry listener: registered under the old host/port fields."""
    return next(listener for listener in listeners if listener.protocol == LOGFERRY)
