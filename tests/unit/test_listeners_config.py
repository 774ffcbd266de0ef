"""Named listeners in the broker's config: the rules of :mod:`broker.server.listeners`,
the errors that name the key, and today's configs unchanged."""

from __future__ import annotations

import socket
import ssl
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from broker.common.errors import ConfigError
from broker.common.metrics import Metrics
from broker.common.metrics_server import MetricsServer
from broker.common.tls import TlsConfig, server_context
from broker.coordination.registry import BrokerInfo
from broker.coordination.zk import registered_listeners
from broker.server.config import broker_config_from_dict
from tests.support.pki import Pki


def config(pki: Pki | None = None, listeners: Any = None, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "broker": {"id": 1, "zk_connect": "127.0.0.1:2181/lf", "log_dirs": ["/tmp/lf"], **extra.pop("broker", {})},
        **extra,
    }
    if listeners is not None:
        doc["listeners"] = listeners
    return doc


def tls(pki: Pki) -> dict[str, Any]:
    return {"enabled": True, "ca_file": str(pki.ca), "cert_file": str(pki.broker_cert), "key_file": str(pki.broker_key)}


def test_a_config_without_listeners_has_one_default_listener_as_before() -> None:
    built = broker_config_from_dict(config(broker={"host": "10.0.0.1", "port": 9099}, kafka={"listen": 9100}))
    assert [(lst.name, lst.host, lst.port, lst.protocol) for lst in built.listeners] == [
        ("default", "10.0.0.1", 9099, "logferry"),
        ("kafka", "10.0.0.1", 9100, "kafka"),
    ]
    assert built.inter_broker_listener == "default"
    assert (built.host, built.port, built.tls, built.auth) == ("10.0.0.1", 9099, None, None)


def test_listeners_carry_their_own_security_and_inherit_nothing(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGFERRY_TEST_PW", "secret")
    built = broker_config_from_dict(
        config(
            broker={"inter_broker_listener": "external"},
            listeners=[
                {"name": "local", "port": 9092},
                {"name": "external", "host": "0.0.0.0", "port": 9093, "tls": tls(pki), "auth": {"required": True}},
            ],
            sasl={"username": "broker", "password_env": "LOGFERRY_TEST_PW"},
        )
    )
    local, external = built.listeners
    assert (local.tls, local.auth) == (None, None)
    assert external.tls is not None and external.auth is not None and external.auth.required
    assert built.inter_broker_listener == "external"
    assert (built.host, built.port) == ("127.0.0.1", 9092)  # the default (first) listener


@pytest.mark.parametrize(
    "listeners, extra, key",
    [
        ([{"name": "a", "port": 1}, {"name": "a", "port": 2}], {}, "listeners[1].name"),
        ([{"name": "a", "port": 1}, {"name": "b", "port": 1}], {}, "listeners[1].port"),
        ([{"name": "a", "port": 1}], {"broker": {"inter_broker_listener": "b"}}, "broker.inter_broker_listener"),
        (
            [{"name": "a", "port": 1}, {"name": "k", "port": 2, "protocol": "kafka"}],
            {"broker": {"inter_broker_listener": "k"}},
            "broker.inter_broker_listener",
        ),
        ([{"name": "a", "port": 1}], {"broker": {"port": 2}}, "broker.port"),
        ([{"name": "a", "port": 1}], {"tls": {"enabled": False}}, "tls"),
        ([{"name": "a", "port": 1}], {"kafka": {"listen": 3}}, "kafka"),
        ([{"name": "a b", "port": 1}], {}, "listeners[0].name"),
        ([{"name": "a", "port": 1, "protocol": "http"}], {}, "listeners[0].protocol"),
        ([{"name": "k", "port": 1, "protocol": "kafka"}], {}, "listeners"),
        ([{"name": "a", "port": 1, "color": "red"}], {}, "listeners[0].color"),
        ([], {}, "listeners"),
        ([{"name": "a", "port": 1}], {"sasl": {"username": "b", "password_env": "X"}}, "sasl"),
    ],
    ids=[
        "duplicate-name",
        "shared-port",
        "unknown-inter",
        "kafka-inter",
        "broker-port",
        "top-tls",
        "top-kafka",
        "bad-name",
        "bad-protocol",
        "no-logferry",
        "unknown-key",
        "empty",
        "sasl-without-auth",
    ],
)
def test_config_errors_name_the_key(listeners: Any, extra: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        broker_config_from_dict(config(listeners=listeners, **extra))
    assert str(info.value).startswith(f"{key}:"), str(info.value)


def test_inter_broker_listener_needs_listeners() -> None:
    with pytest.raises(ConfigError, match="^broker.inter_broker_listener:"):
        broker_config_from_dict(config(broker={"inter_broker_listener": "x"}))


def test_a_listeners_tls_errors_name_it(pki: Pki) -> None:
    bad = {**tls(pki), "cert_file": "/nonexistent.pem"}
    with pytest.raises(ConfigError, match=r"^listeners\[1\]\.tls\.cert_file:"):
        broker_config_from_dict(config(listeners=[{"name": "a", "port": 1}, {"name": "b", "port": 2, "tls": bad}]))


def test_registered_listeners_and_addresses() -> None:
    data = {"host": "h", "port": 1, "listeners": {"local": ["h", 1], "external": ["e", 2], "junk": "x"}}
    assert registered_listeners(data) == {"local": ("h", 1), "external": ("e", 2)}
    info = BrokerInfo("h", 1, listeners=(("local", "h", 1), ("external", "e", 2)))
    assert info.address("external") == ("e", 2)
    assert info.address("default") == ("h", 1)
    assert info.address("nosuch") is None
    older = BrokerInfo("o", 5)  # registered by a broker without listeners: one address
    assert older.address("external") == ("o", 5) and older.address("default") == ("o", 5)


def test_metrics_over_tls(pki: Pki) -> None:
    context = server_context(TlsConfig(cert_file=pki.broker_cert, key_file=pki.broker_key))
    server = MetricsServer(Metrics(), "127.0.0.1", 0, ssl_context=context)
    try:
        assert server.url.startswith("https://")
        client = ssl.create_default_context(cafile=str(pki.ca))
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=5, context=client) as answer:
            assert answer.status == 200
        # a client that connects and never speaks does not hold up the next scrape
        with (
            socket.create_connection(("127.0.0.1", server.port)),
            urllib.request.urlopen(f"{server.url}/metrics", timeout=5, context=client) as answer,
        ):
            assert answer.status == 200
        with pytest.raises(OSError):  # plain HTTP on the HTTPS port
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5).read()
    finally:
        server.close()


def test_loading_from_a_file_keeps_relative_paths(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    path.write_text(
        '[broker]\nid = 1\nzk_connect = "127.0.0.1:2181/lf"\nlog_dirs = ["d"]\n\n'
        '[[listeners]]\nname = "local"\nport = 0\n'
    )
    from broker.server.config import load_broker_config

    built = load_broker_config(path)
    assert built.log_dirs == (tmp_path / "d",) and built.listeners[0].name == "local"
