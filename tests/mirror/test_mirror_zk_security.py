"""A mirror whose source cluster's ZooKeeper is secured: it logs in as a consumer id
(``[source.zookeeper]``) to commit its group's offsets, which nobody else can read or
change (docs/security.md, "ZooKeeper")."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from broker.common.config import dumps
from broker.common.zk_security import digest_id
from tests.mirror.conftest import create, mirrored, produce, wait_for

pytestmark = pytest.mark.integration


def test_mirror_commits_source_offsets_as_a_consumer_id(broker_cluster, zookeeper, mirrors, tmp_path: Path) -> None:
    owner_pw, consumers_pw = tmp_path / "owner.pw", tmp_path / "consumers.pw"
    owner_pw.write_text("owner-secret\n")
    consumers_pw.write_text("consumers-secret\n")
    source = broker_cluster(0, zk=zookeeper.new_chroot() + "/secured")
    broker = source.add(start=False)
    broker.config_file.write_text(
        broker.config_file.read_text()
        + "\n"
        + dumps(
            {
                "zookeeper": {
                    "user": "logferry",
                    "password_file": str(owner_pw),
                    "consumer_ids": [digest_id("consumers", "consumers-secret")],
                }
            }
        )
    )
    broker.start()
    target = broker_cluster(1, zk=zookeeper.new_chroot())
    create(source.zk_connect, "web", 2)
    produce(source.zk_connect, "web", 2_000, 2)

    mirror = mirrors("m1", source, target, start=False, topics=["web"])
    config = tomllib.loads(mirror.config_file.read_text())
    config["source"]["zookeeper"] = {"user": "consumers", "password_file": str(consumers_pw)}
    mirror.config_file.write_text(dumps(config))
    mirror.start()
    wait_for(lambda: mirrored(source.zk_connect, target.zk_connect, "web", exact=True), 60, "web to be mirrored")
    assert mirror.terminate() == 0

    anon = KazooClient(hosts=source.zk_connect)
    anon.start(15)
    try:
        with pytest.raises(NoAuthError):
            anon.get_children("/consumers/mirror/offsets/web")
        with pytest.raises(NoAuthError):
            anon.set("/consumers/mirror/offsets/web/0", b"0")
    finally:
        anon.stop()
        anon.close()
    member = KazooClient(hosts=source.zk_connect, auth_data=[("digest", "consumers:consumers-secret")])
    member.start(15)
    try:
        assert sorted(member.get_children("/consumers/mirror/offsets/web")) == ["0", "1"]
    finally:
        member.stop()
        member.close()
