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


def test_spark_reads_a_tls_cluster(spark, broker_cluster, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    cluster = broker_cluster(1, tls={"enabled": True, "cert_file": str(pki.broker_cert),
                                     "key_file": str(pki.broker_key)})
    tls = TlsConfig(ca_file=pki.ca)
    with Producer(zk=cluster.zk_connect, tls=tls, acks=1) as producer:
        for i in range(3000):
            producer.send("secure-src", f"v{i:05d}".encode())
        producer.flush()
    wait_visible(cluster.zk_connect, "secure-src", tls=tls)
    register(spark)
    df = (spark.read.format("logferry").option("zk", cluster.zk_connect)
          .option("topics", "secure-src").options(**tls_options(tls)).load())
    values = sorted(r["value"] for r in df.select("value").collect())
    assert values == sorted(f"v{i:05d}".encode() for i in range(3000))
