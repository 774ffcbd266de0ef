"""The data source reads a TLS cluster: the driver plans over TLS and the executors fetch
over TLS with the settings passed as ``tls*`` options (Spark local mode, a real broker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.client import Producer
from broker.common.tls import TlsConfig
from hadoop_loader import register
from hadoop_loader.options import tls_options
from tests.loader.conftest import wait_visible
from tests.support.pki import make_pki

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_spark_reads_a_tls_cluster(spark, broker_cluster, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    cluster = broker_cluster(
        1, tls={"enabled": True, "cert_file": str(pki.broker_cert), "key_file": str(pki.broker_key)}
    )
    tls = TlsConfig(ca_file=pki.ca)
    with Producer(zk=cluster.zk_connect, tls=tls, acks=1) as producer:
        for i in range(3000):
            producer.send("secure-src", f"v{i:05d}".encode())
        producer.flush()
    wait_visible(cluster.zk_connect, "secure-src", tls=tls)
    register(spark)
    df = (
        spark.read.format("logferry")
        .option("zk", cluster.zk_connect)
        .option("topics", "secure-src")
        .options(**tls_options(tls))
        .load()
    )
    values = sorted(r["value"] for r in df.select("value").collect())
    assert values == sorted(f"v{i:05d}".encode() for i in range(3000))


@pytest.mark.slow
def test_the_loader_lands_from_a_scram_cluster(spark, broker_cluster, tmp_path: Path) -> None:
    """``[sasl]`` in loader.toml: the driver plans and the executors fetch as a SCRAM
    user, each reading the password from the file the config names (the password is in
    no data source option); a wrong password is one clear error. (An environment variable
    works the same way when it is set before Spark starts its Python workers.)"""
    from hadoop_loader.config import config_from_dict
    from hadoop_loader.errors import LoaderError
    from hadoop_loader.job import run_load
    from tests.integration.test_authentication import PASSWORD, create_user, secured_cluster
    from tests.loader.conftest import read_landed

    pki = make_pki(tmp_path / "pki")
    cluster = secured_cluster(broker_cluster, pki)
    create_user(cluster.zk_connect, tmp_path, "loader")
    tls = TlsConfig(ca_file=pki.ca)
    from broker.common.sasl import SaslCredentials

    with Producer(zk=cluster.zk_connect, tls=tls, sasl=SaslCredentials("loader", PASSWORD), acks=1) as producer:
        for i in range(2000):
            producer.send("scram-src", f"v{i:05d}".encode(), partition=i % 2)
        producer.flush()
    secret = tmp_path / "loader.password"
    secret.write_text(PASSWORD + "\n")
    secret.chmod(0o600)
    data = {
        "source": {"zk": cluster.zk_connect, "topics": ["scram-src"]},
        "output": {"uri": (tmp_path / "wh").as_uri()},
        "spark": {"master": "local[2]"},
        "tls": {"enabled": True, "ca_file": str(pki.ca)},
        "sasl": {"username": "loader", "password_file": str(secret)},
    }
    config = config_from_dict(data)
    assert PASSWORD not in repr(config)
    result = run_load(config, spark=spark)
    assert result.rows == 2000
    table = read_landed(tmp_path / "wh")
    assert sorted(table.column("value").to_pylist()) == [f"v{i:05d}".encode() for i in range(2000)]

    secret.write_text("not the password\n")
    with pytest.raises(LoaderError) as failed:
        run_load(config_from_dict({**data, "output": {"uri": (tmp_path / "wh2").as_uri()}}), spark=spark)
    assert "authentication failed" in str(failed.value).lower()
    assert "\n" not in str(failed.value) and "not the password" not in str(failed.value)
    with pytest.raises(LoaderError, match="sasl.password"):
        config_from_dict({**data, "sasl": {"username": "loader", "password": "x"}})
