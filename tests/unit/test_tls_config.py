"""The shared ``[tls]`` section: validation that names the key and the file, and the
contexts built from it (TLS 1.2+, verification on by default, mutual TLS on request)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from broker.common.config import Validator
from broker.common.errors import ConfigError
from broker.common.tls import TlsConfig, client_context, client_tls, server_context, tls_section
from broker.server.config import broker_config_from_dict
from tests.support.pki import Pki


def _section(table: dict, server: bool = False, file: str = "x.toml") -> TlsConfig | None:
    return tls_section(Validator(file=file), {"tls": table}, server=server)


def test_absent_or_disabled_is_plaintext(pki: Pki) -> None:
    assert tls_section(Validator(), {}) is None
    assert _section({"enabled": False, "ca_file": "/nowhere"}) is None


def test_a_client_section_builds_a_verifying_context(pki: Pki) -> None:
    config = _section({"enabled": True, "ca_file": str(pki.ca)})
    assert config is not None and config.verify_hostname
    context = client_context(config)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_verify_hostname_false_still_verifies_the_chain(pki: Pki) -> None:
    config = _section(
        {"enabled": True, "ca_file": str(pki.ca), "verify_hostname": False, "server_hostname": "broker.internal"}
    )
    assert config is not None
    context, hostname = client_tls(config)
    assert context is not None and not context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED and hostname == "broker.internal"


def test_a_broker_section_needs_its_certificate(pki: Pki) -> None:
    with pytest.raises(ConfigError, match=r"^x.toml: tls.cert_file: missing"):
        _section({"enabled": True}, server=True)
    config = _section(
        {
            "enabled": True,
            "cert_file": str(pki.broker_cert),
            "key_file": str(pki.broker_key),
            "ca_file": str(pki.ca),
            "client_auth": "required",
        },
        server=True,
    )
    assert config is not None
    assert server_context(config).verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize(
    "table, key, text",
    [
        ({"cert_file": "c.pem"}, "tls.key_file", "go together"),
        ({"client_auth": "required", "cert_file": "b", "key_file": "k"}, "tls.ca_file", "verifies"),
        ({"verify_hostname": "yes"}, "tls.verify_hostname", "must be true or false"),
        ({"client_auth": "maybe"}, "tls.client_auth", "must be 'none' or 'optional' or 'required'"),
        ({"cafile": "x"}, "tls.cafile", "did you mean 'ca_file'"),
    ],
)
def test_mistakes_name_the_key(table: dict, key: str, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        _section({"enabled": True, **table}, server=True)
    assert info.value.key == key and text in str(info.value)


def test_server_only_keys_are_refused_in_a_client_section() -> None:
    with pytest.raises(ConfigError, match="tls.client_auth: only a broker"):
        _section({"enabled": True, "client_auth": "required"})


def test_unreadable_and_bad_files_name_the_file(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"tls.ca_file: .*missing.pem: no such file"):
        _section({"enabled": True, "ca_file": str(tmp_path / "missing.pem")})
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(ConfigError, match=r"tls.ca_file: .*junk.pem: not a PEM CA"):
        _section({"enabled": True, "ca_file": str(junk)})
    with pytest.raises(ConfigError, match=r"tls.cert_file: .*do not match"):
        _section({"enabled": True, "cert_file": str(pki.broker_cert), "key_file": str(pki.client_key)}, server=True)


def test_relative_paths_are_relative_to_the_config_file(pki: Pki) -> None:
    validator = Validator(file="b.toml", base_dir=pki.ca.parent)
    config = tls_section(validator, {"tls": {"enabled": True, "ca_file": "ca.pem"}})
    assert config is not None and config.ca_file == pki.ca


def test_the_broker_config_takes_the_section(pki: Pki, tmp_path: Path) -> None:
    config = broker_config_from_dict(
        {
            "broker": {"id": 1, "zk_connect": "h:2181/c", "log_dirs": [str(tmp_path)]},
            "tls": {"enabled": True, "cert_file": str(pki.broker_cert), "key_file": str(pki.broker_key)},
        }
    )
    assert config.tls is not None and config.tls.cert_file == pki.broker_cert
    plain = broker_config_from_dict({"broker": {"id": 1, "zk_connect": "h:2181/c", "log_dirs": [str(tmp_path)]}})
    assert plain.tls is None


def test_client_tls_takes_a_context_as_it_is() -> None:
    context = ssl.create_default_context()
    assert client_tls(context) == (context, None)
    assert client_tls(None) == (None, None)


# -- every component takes the same section -----------------------------------------------


def test_the_agent_takes_the_section(pki: Pki, tmp_path: Path) -> None:
    from agent.config import parse_config as agent_config

    config = agent_config(
        {
            "state_dir": str(tmp_path),
            "cluster": {"zk": "h:2181/c"},
            "sources": [{"pattern": "/tmp/*.log", "topic": "t"}],
            "tls": {"enabled": True, "ca_file": str(pki.ca)},
        }
    )
    assert config.tls is not None and config.tls.ca_file == pki.ca


def test_the_mirror_takes_one_section_per_cluster(pki: Pki) -> None:
    from mirror.config import parse_config
    from mirror.errors import MirrorConfigError

    base = {
        "source": {"zk_connect": "h:2181/live", "tls": {"enabled": True, "ca_file": str(pki.ca)}},
        "target": {"zk_connect": "h:2181/analysis"},
        "mirror": {"topics": ["t"]},
    }
    config = parse_config(base)
    assert config.source_tls is not None and config.target_tls is None
    base["target"]["tls"] = {"enabled": True, "ca_file": "/nowhere.pem"}  # type: ignore[index]
    with pytest.raises(MirrorConfigError, match=r"target.tls.ca_file: /nowhere.pem: no such"):
        parse_config(base)


def test_the_loader_takes_the_section_and_passes_it_to_executors(pki: Pki) -> None:
    from hadoop_loader.config import config_from_dict as loader_config
    from hadoop_loader.options import parse_options, tls_options

    config = loader_config(
        {
            "source": {"zk": "h:2181/c", "topics": ["t"]},
            "output": {"uri": "file:///tmp/x"},
            "tls": {"enabled": True, "ca_file": str(pki.ca), "server_hostname": "localhost"},
        }
    )
    assert config.tls is not None
    options = parse_options({"brokers": "127.0.0.1:1", "topics": "t", **tls_options(config.tls)})
    assert options.endpoint.tls == config.tls
    import pickle

    assert pickle.loads(pickle.dumps(options.endpoint)) == options.endpoint  # Spark ships it
    assert parse_options({"brokers": "127.0.0.1:1", "topics": "t"}).endpoint.tls is None
    from hadoop_loader.errors import LoaderConfigError

    with pytest.raises(LoaderConfigError, match="option tlsCaFile: .*no such file"):
        parse_options({"brokers": "127.0.0.1:1", "topics": "t", "tlsCaFile": "/nowhere"})


def test_the_cli_options(pki: Pki) -> None:
    from broker.cli.client_cmds import cluster_kwargs
    from broker.cli.main import build_parser

    args = build_parser().parse_args(["topic", "list", "--tls-ca", str(pki.ca)])
    kwargs = cluster_kwargs(args)
    assert kwargs["tls"].ca_file == pki.ca
    assert "tls" not in cluster_kwargs(build_parser().parse_args(["topic", "list"]))
    args = build_parser().parse_args(["topic", "list", "--tls-cert", str(pki.client_cert)])
    with pytest.raises(ConfigError, match="--tls-key: missing"):
        cluster_kwargs(args)
