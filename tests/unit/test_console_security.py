"""The console's per-cluster ``[cluster.tls]``/``[cluster.sasl]`` and ``--tls-*``/``--sasl-*``:
the shared loaders (broker.common.tls/sasl) check them, errors name the key."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from broker.common.config import dumps
from broker.common.errors import ConfigError
from broker.testing.security import make_pki, password_file
from console.cli import config_from_args
from console.config import load_config, parse_config
from demo.console_check import console_status

ZK = "zk:2181/logferry/live"


def _cluster(**sections: object) -> dict[str, object]:
    return {"cluster": [{"name": "live", "zk_connect": ZK, **sections}]}


def test_each_cluster_takes_its_own_tls_and_sasl(tmp_path: Path):
    pki = make_pki(tmp_path / "certs")
    secret, password = password_file(tmp_path / "secrets", "reader-live")
    path = tmp_path / "console.toml"
    path.write_text(
        dumps(
            {
                "cluster": [
                    {
                        "name": "live",
                        "zk_connect": ZK,
                        "tls": {"enabled": True, "ca_file": str(pki.ca)},
                        "sasl": {"username": "reader", "password_file": str(secret)},
                    },
                    {"name": "analysis", "zk_connect": "zk:2181/logferry/analysis"},
                ]
            }
        )
    )
    live, analysis = load_config(path).clusters
    assert live.tls is not None and live.tls.ca_file == pki.ca
    assert live.sasl is not None and (live.sasl.username, live.sasl.password) == ("reader", password)
    assert analysis.tls is None and analysis.sasl is None
    assert password not in repr(live)


@pytest.mark.parametrize(
    "sections, error",
    [
        (
            {"tls": {"enabled": True, "ca_file": "/nonexistent/ca.pem"}},
            "cluster[0].tls.ca_file: /nonexistent/ca.pem: no such file",
        ),
        ({"tls": {"enabled": True, "cafile": "x"}}, "cluster[0].tls.cafile: unknown key"),
        ({"tls": {"enabled": True, "client_auth": "required"}}, "cluster[0].tls.client_auth: only a broker"),
        ({"tls": "yes"}, "cluster[0].tls: must be a table"),
        ({"sasl": {"password_env": "X"}}, "cluster[0].sasl.username: missing"),
        ({"sasl": {"username": "reader"}}, "cluster[0].sasl.password_file: give exactly one"),
        ({"sasl": {"username": "r", "password": "p", "mechanism": "PLAIN"}}, "cluster[0].sasl.mechanism"),
    ],
)
def test_tls_and_sasl_errors_name_the_key(sections, error):
    with pytest.raises(ConfigError, match=error.replace("[", r"\[").replace("]", r"\]")):
        parse_config(_cluster(**sections))


def _args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = dict(config=None, zk=None, host=None, port=None, interval=None)
    return argparse.Namespace(**{**base, **kw})


def test_cli_options_reach_every_zk_cluster(tmp_path: Path):
    pki = make_pki(tmp_path / "certs")
    secret, _ = password_file(tmp_path / "secrets", "reader")
    config = config_from_args(
        _args(zk=[ZK, "dc2=zk:2181/x"], tls_ca=str(pki.ca), sasl_user="reader", sasl_password_file=str(secret))
    )
    assert all(c.tls is not None and c.tls.ca_file == pki.ca for c in config.clusters)
    assert all(c.sasl is not None and c.sasl.username == "reader" for c in config.clusters)
    with pytest.raises(ConfigError, match="--tls-ca: .*no such file"):
        config_from_args(_args(zk=[ZK], tls_ca=str(tmp_path / "missing.pem")))
    with pytest.raises(ConfigError, match=r"--sasl-user: missing"):
        config_from_args(_args(zk=[ZK], sasl_password_file=str(secret)))
    with pytest.raises(ConfigError, match=r"with --config give each \[\[cluster\]\]"):
        config_from_args(_args(config="c.toml", tls_ca=str(pki.ca)))


def test_the_demos_console_check_says_when_nothing_serves():
    line = console_status("http://127.0.0.1:9/", timeout_s=0)
    assert line.startswith("console: NOT serving http://127.0.0.1:9/")
