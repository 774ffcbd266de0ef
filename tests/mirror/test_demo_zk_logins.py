"""The secured demo's ZooKeeper logins enforce its group ACLs (demo/security.py).

Real ZooKeeper, real brokers (two clusters, TLS + SCRAM + authorizer, each logged in to
ZooKeeper as the cluster's owner), set up by the demo's own code (DemoSecurity: users,
topic and group ACLs, ZooKeeper logins, ``zk secure``). The demo's consumers still
commit: its dashboard (demo.dashboard.Dashboard) as User:dashboard and its mirror (a real
mirror process with the demo's ``[source.zookeeper]``) as User:mirror. Every other login
(and an anonymous client) is refused by ZooKeeper when it writes either group's offsets
directly, and by the client library before it writes anything; nothing changes.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from broker.client import Admin, GroupConsumer, Producer
from broker.common.config import dumps
from broker.common.errors import GroupAuthorizationFailedError
from demo.counting import ClusterCounter
from demo.dashboard import GROUP, Dashboard
from demo.security import ZK_OWNER, DemoSecurity
from tests.mirror.conftest import wait_for

pytestmark = pytest.mark.integration

MIRROR_GROUP = "logferry-mirror"
N = 300
OFFSETS = "/consumers/{}/offsets/web"


def _broker(cluster, security: DemoSecurity, datacenter: str):
    sections = security.broker_sections(datacenter)
    broker = cluster.add({"num_partitions": 2}, tls=sections.pop("tls"), start=False)
    broker.config_file.write_text(broker.config_file.read_text() + "\n" + dumps(sections))
    return broker.start()


def _kazoo(zk: str, security: DemoSecurity | None, login: str = "", dc: str = "live") -> KazooClient:
    auth = [] if security is None else [("digest", f"{login}:{security.zk_passwords[(login, dc)][1]}")]
    client = KazooClient(hosts=zk, timeout=10.0, auth_data=auth)
    client.start(timeout=15)
    return client


def _offsets(owner: KazooClient, group: str) -> dict[str, bytes]:
    path = OFFSETS.format(group)
    return {p: owner.get(f"{path}/{p}")[0] for p in sorted(owner.get_children(path))}


def test_demo_groups_offsets_are_writable_only_by_their_principal(
    broker_cluster, zookeeper, mirrors, tmp_path: Path
) -> None:
    base = zookeeper.new_chroot()  # both clusters under one parent, as in the demo
    live_zk, analysis_zk = base + "/live", base + "/analysis"
    security = DemoSecurity(tmp_path / "demo")
    security.setup({"live": live_zk, "analysis": analysis_zk}, ["web", "_audit"], GROUP, MIRROR_GROUP)
    live = broker_cluster(0, zk=live_zk)
    target = broker_cluster(0, zk=analysis_zk)
    _broker(live, security, "live")
    _broker(target, security, "analysis")
    assert security.secure_zookeeper() >= 0
    with Admin(zk=security.zk_owner("live"), **security.client("admin", "live")) as admin:
        admin.create_topic("web", 2)
    with Producer(
        zk=security.zk_as("agent", "live"), acks=1, linger_ms=5, **security.client("agent", "live")
    ) as producer:
        for future in [producer.send("web", b"m%d" % i) for i in range(N)]:
            future.wait(30)

    # the demo's dashboard (User:dashboard) reads everything and commits its group
    dashboard = Dashboard(security.zk_as("dashboard", "live"), ["web"], security.client("dashboard", "live"))
    dashboard.start()
    wait_for(lambda: dashboard.counts.get("web", 0) >= N, 60, "the dashboard to read all")
    dashboard.stop()
    assert dashboard.error is None and dashboard.counts["web"] == N

    # the demo's mirror (User:mirror, its [source.zookeeper]) copies and commits its group
    mirror = mirrors("m", live, target, start=False, topics=["web"], group=MIRROR_GROUP)
    config = tomllib.loads(mirror.config_file.read_text())
    config["source"].update(security.client_sections("mirror", "live"))
    config["target"].update(security.client_sections("mirror", "analysis"))
    mirror.config_file.write_text(dumps(config))
    mirror.start()
    counter = ClusterCounter(security.zk_as("reader", "analysis"), ["web"], security.client("reader", "analysis"))
    try:
        wait_for(lambda: counter.update()["web"] >= N, 90, "the mirror to copy all")
        assert counter.update()["web"] == N
    finally:
        counter.close()
    assert mirror.terminate() == 0

    owner = _kazoo(live_zk, security, ZK_OWNER)
    try:
        committed = {g: _offsets(owner, g) for g in (GROUP, MIRROR_GROUP)}
        assert all(len(v) == 2 and all(json.loads(o)["offset"] > 0 for o in v.values()) for v in committed.values()), (
            committed
        )

        # nobody else may write a group's offsets, even straight into ZooKeeper
        refused = [
            ("mirror", GROUP),
            ("dashboard", MIRROR_GROUP),
            ("reader", GROUP),
            ("reader", MIRROR_GROUP),
            ("agent", GROUP),
            ("agent", MIRROR_GROUP),
        ]
        for login, group in refused:
            intruder = _kazoo(live_zk, security, login)
            try:
                with pytest.raises(NoAuthError):
                    intruder.set(f"{OFFSETS.format(group)}/0", b"0")
                with pytest.raises(NoAuthError):
                    intruder.create(f"{OFFSETS.format(group)}/9", b"0")
                with pytest.raises(NoAuthError):
                    intruder.delete(f"{OFFSETS.format(group)}/0")
            finally:
                intruder.stop()
                intruder.close()
        anonymous = _kazoo(live_zk, None)
        try:
            with pytest.raises(NoAuthError):
                anonymous.set(f"{OFFSETS.format(GROUP)}/0", b"0")
            with pytest.raises(NoAuthError):
                anonymous.get(f"{OFFSETS.format(MIRROR_GROUP)}/0")
        finally:
            anonymous.stop()
            anonymous.close()
        # the read-only reader reads them (describe), the library refuses the others first
        reader = _kazoo(live_zk, security, "reader")
        try:
            assert reader.get(f"{OFFSETS.format(GROUP)}/0")[0] == committed[GROUP]["0"]
        finally:
            reader.stop()
            reader.close()
        with pytest.raises(GroupAuthorizationFailedError, match="User:mirror may not consume"):
            GroupConsumer(
                GROUP,
                ["web"],
                zk=security.zk_as("mirror", "live"),
                auto_commit_ms=0,
                **security.client("mirror", "live"),
            )
        assert {g: _offsets(owner, g) for g in (GROUP, MIRROR_GROUP)} == committed
    finally:
        owner.stop()
        owner.close()
