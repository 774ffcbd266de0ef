"""Group ACLs protect each group's offsets and registry in ZooKeeper, per group.

A real ZooKeeper with digest logins and a real broker logged in as the cluster's owner.
Three consumer logins (``mirror``, ``loader``, ``intruder``) may all touch
``/consumers`` as before; once ``logferry acl add ... --group`` stores a group ACL, each
group's znodes carry the ZooKeeper ACL derived from the logferry ACLs
(broker.coordination.group_acl): a login without the group's ACL is refused through the
client library (GroupAuthorizationFailedError naming principal, operation and group)
and through a direct ZooKeeper write with its own login, and nothing changes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from broker.client import GroupAdmin, GroupConsumer, Producer
from broker.common.config import dumps
from broker.common.errors import GroupAuthorizationFailedError
from broker.common.zk_security import ZkSecurity, ZkTarget, digest_id
from broker.coordination.group_acl import MEMBER, READER, perms_of
from broker.coordination.zk_acl import digest_acl
from tests.support.cli import logferry

pytestmark = pytest.mark.integration

OWNER, OWNER_PW = "logferry", "owner-secret"
LOGINS = {
    "mirror": "mirror-secret",
    "loader": "loader-secret",
    "intruder": "intruder-secret",
    **{f"m{i}": f"m{i}-secret" for i in range(8)},
}
"""The three logins of the story test, and one per case of the matrix."""
OFFSET = "/consumers/{}/offsets/web/0"


@pytest.fixture
def secured(broker_cluster, zk_connect: str, tmp_path: Path):
    """A one-broker cluster whose ZooKeeper has the owner and three consumer logins."""
    owner_file = tmp_path / "zk-owner.password"
    owner_file.write_text(OWNER_PW + "\n")
    zk = zk_connect + "/groups"
    cluster = broker_cluster(0, zk=zk)
    process = cluster.add({"num_partitions": 1}, start=False)
    process.config_file.write_text(
        process.config_file.read_text()
        + "\n"
        + dumps(
            {
                "zookeeper": {
                    "user": OWNER,
                    "password_file": str(owner_file),
                    "consumer_ids": [digest_id(u, p) for u, p in LOGINS.items()],
                }
            }
        )
    )
    process.start()
    with Producer(zk=zk, acks=1, linger_ms=0) as producer:
        for future in [producer.send("web", v, partition=0) for v in (b"m1", b"m2", b"m3")]:
            future.wait(20)
    return zk, owner_file


def _as(zk: str, login: str) -> ZkTarget:
    return ZkTarget(zk, ZkSecurity(user=login, password=LOGINS[login]))


def _kazoo(zk: str, login: str, password: str | None = None) -> KazooClient:
    client = KazooClient(hosts=zk, timeout=10.0, auth_data=[("digest", f"{login}:{password or LOGINS[login]}")])
    client.start(timeout=15)
    return client


def _close(client: KazooClient) -> None:
    client.stop()
    client.close()


_cli = logferry


def _acl(zk: str, owner_file: Path, verb: str, principal: str, operation: str, group: str) -> str:
    done = _cli(
        "acl",
        verb,
        "--zk",
        zk,
        "--zk-user",
        OWNER,
        "--zk-password-file",
        str(owner_file),
        "--principal",
        principal,
        "--operation",
        operation,
        "--group",
        group,
        "--allow",
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _consume_and_commit(zk: str, login: str, group: str) -> list[bytes]:
    consumer = GroupConsumer(group, ["web"], zk=_as(zk, login), auto_commit_ms=0, iter_timeout=5.0)
    try:
        return [m.value for m in consumer]
    finally:
        consumer.close()  # commits what was processed


def test_group_acls_decide_who_reads_and_writes_each_groups_offsets(secured) -> None:
    zk, owner_file = secured
    # Before any group ACL: the shared /consumers ACL, every consumer login on every group.
    assert _consume_and_commit(zk, "intruder", "old") == [b"m1", b"m2", b"m3"]

    out = _acl(zk, owner_file, "add", "User:mirror", "consume", "dash")
    assert "group znodes" in out
    _acl(zk, owner_file, "add", "User:loader", "describe", "dash")

    # the allowed member commits; its znodes carry the derived ACL
    assert _consume_and_commit(zk, "mirror", "dash") == [b"m1", b"m2", b"m3"]
    owner = _kazoo(zk, OWNER, OWNER_PW)
    try:
        committed, _ = owner.get(OFFSET.format("dash"))
        acl, _ = owner.get_acls(OFFSET.format("dash"))
        assert perms_of(acl, digest_id("mirror", LOGINS["mirror"])) == MEMBER
        assert perms_of(acl, digest_id("loader", LOGINS["loader"])) == READER
        assert perms_of(acl, digest_id("intruder", LOGINS["intruder"])) == 0
        # the group made before the ACLs was fixed: now the owner's only
        old_acl, _ = owner.get_acls(OFFSET.format("old"))
        assert perms_of(old_acl, digest_id("intruder", LOGINS["intruder"])) == 0
        old_offset, _ = owner.get(OFFSET.format("old"))
    finally:
        _close(owner)

    # the intruder: refused by the client library, naming principal, operation and group
    with pytest.raises(GroupAuthorizationFailedError) as refused:
        GroupConsumer("dash", ["web"], zk=_as(zk, "intruder"), auto_commit_ms=0)
    message = str(refused.value)
    assert "User:intruder" in message and "consume" in message and "'dash'" in message
    with (
        GroupAdmin(_as(zk, "intruder"), brokers=False) as admin,
        pytest.raises(GroupAuthorizationFailedError, match="User:intruder may not describe"),
    ):
        admin.offsets("dash")
    with pytest.raises(GroupAuthorizationFailedError, match="User:intruder may not consume group 'old'"):
        GroupConsumer("old", ["web"], zk=_as(zk, "intruder"), auto_commit_ms=0)
    # ... and by ZooKeeper when it writes with its own login
    intruder = _kazoo(zk, "intruder")
    try:
        for group in ("dash", "old"):
            with pytest.raises(NoAuthError):
                intruder.set(OFFSET.format(group), b"0")
            with pytest.raises(NoAuthError):
                intruder.get(OFFSET.format(group))
            with pytest.raises(NoAuthError):
                intruder.create(f"/consumers/{group}/ids/evil", b"{}", ephemeral=True)
        with pytest.raises(NoAuthError):  # nor can it take a group no ACL names yet
            intruder.create("/consumers/fresh", b"")
    finally:
        _close(intruder)

    # `group list` as the intruder: every group listed, only what it may describe described
    listed = _cli(
        "group", "list", "--zk", zk, "--zk-user", "intruder", "--zk-password-env", "PW", env={"PW": LOGINS["intruder"]}
    )
    assert listed.returncode == 0, listed.stderr
    assert "(no describe ACL)" in listed.stdout and "dash" in listed.stdout
    seek = _cli(
        "group",
        "seek",
        "dash",
        "--topic",
        "web",
        "--to",
        "earliest",
        "--zk",
        zk,
        "--zk-user",
        "intruder",
        "--zk-password-env",
        "PW",
        env={"PW": LOGINS["intruder"]},
    )
    assert seek.returncode != 0 and "User:intruder may not consume group 'dash'" in seek.stderr
    assert len(seek.stderr.strip().splitlines()) == 1, seek.stderr

    # the reader: reads, may not commit or seek
    with GroupAdmin(_as(zk, "loader"), brokers=False) as admin:
        assert admin.offsets("dash")[("web", 0)].offset > 0
    with pytest.raises(GroupAuthorizationFailedError, match="User:loader may not consume"):
        GroupConsumer("dash", ["web"], zk=_as(zk, "loader"), auto_commit_ms=0)
    loader = _kazoo(zk, "loader")
    try:
        assert loader.get(OFFSET.format("dash"))[0] == committed
        with pytest.raises(NoAuthError):
            loader.set(OFFSET.format("dash"), b"0")
        with pytest.raises(NoAuthError):  # no member may change the group's ACL
            loader.set_acls(OFFSET.format("dash"), [digest_acl(digest_id("loader", LOGINS["loader"]))])
    finally:
        _close(loader)

    # nothing changed
    owner = _kazoo(zk, OWNER, OWNER_PW)
    try:
        assert owner.get(OFFSET.format("dash"))[0] == committed
        assert owner.get(OFFSET.format("old"))[0] == old_offset
    finally:
        _close(owner)

    # revoking takes effect on existing znodes, and on a member that is running
    running = GroupConsumer("dash", ["web"], zk=_as(zk, "mirror"), auto_commit_ms=0, iter_timeout=10.0)
    try:
        with Producer(zk=zk, acks=1, linger_ms=0) as producer:
            producer.send("web", b"m4", partition=0).wait(20)
        polled = running.poll(timeout=10.0)
        while not polled:
            polled = running.poll(timeout=10.0)
        assert [m.value for m in polled] == [b"m4"]
        assert running.poll(timeout=0.5) == []  # acknowledges m4: its position moved
        _acl(zk, owner_file, "remove", "User:mirror", "consume", "dash")
        with pytest.raises(GroupAuthorizationFailedError, match="User:mirror may not consume"):
            running.commit()
    finally:
        running.close(processed=False)
    mirror = _kazoo(zk, "mirror")
    try:
        with pytest.raises(NoAuthError):
            mirror.set(OFFSET.format("dash"), b"0")
    finally:
        _close(mirror)
    owner = _kazoo(zk, OWNER, OWNER_PW)
    try:
        assert owner.get(OFFSET.format("dash"))[0] == committed  # m4 was not committed
    finally:
        _close(owner)

    # every group ('*'): the login may start a group no ACL names, with the derived ACL
    _acl(zk, owner_file, "add", "User:mirror", "consume", "*")
    assert _consume_and_commit(zk, "mirror", "fresh") == [b"m1", b"m2", b"m3", b"m4"]
    loader = _kazoo(zk, "loader")
    try:
        with pytest.raises(NoAuthError):
            loader.get(OFFSET.format("fresh"))
    finally:
        _close(loader)


def test_zk_secure_derives_group_acls_and_is_idempotent(secured) -> None:
    zk, owner_file = secured
    assert _consume_and_commit(zk, "intruder", "dash") == [b"m1", b"m2", b"m3"]
    _acl(zk, owner_file, "add", "User:mirror", "consume", "dash")
    ids = [a for u, p in LOGINS.items() for a in ("--consumer-id", digest_id(u, p))]
    args = ("zk", "secure", "--zk", zk, "--zk-user", OWNER, "--zk-password-file", str(owner_file), *ids)
    first = _cli(*args)
    assert first.returncode == 0, first.stderr
    second = _cli(*args)
    assert second.returncode == 0 and " 0 changed" in second.stdout, second.stdout + second.stderr
    intruder = _kazoo(zk, "intruder")
    try:
        with pytest.raises(NoAuthError):
            intruder.set(OFFSET.format("dash"), b"0")
    finally:
        _close(intruder)
    assert _consume_and_commit(zk, "mirror", "dash") == []  # resumes after the intruder's commit

    # the last group ACL removed: back to the shared ACL of every consumer login
    _acl(zk, owner_file, "remove", "User:mirror", "consume", "dash")
    intruder = _kazoo(zk, "intruder")
    try:
        intruder.set(OFFSET.format("dash"), intruder.get(OFFSET.format("dash"))[0])
    finally:
        _close(intruder)


MATRIX = [
    (op, allowed, resource)
    for op in ("consume", "describe")
    for allowed in (True, False)
    for resource in ("group", "*")
]


def test_the_group_acl_matrix_holds_in_zookeeper(secured) -> None:
    """allowed / denied x consume / describe x the group / every group ('*'): through the
    client library and with a direct ZooKeeper read and write under the case's own login.
    Denied means a deny beating an allow of the same operation (deny wins)."""
    from broker.common.acl import Resource, ResourceType, make_acl
    from broker.coordination import zk as zkmod
    from broker.coordination.acl_store import AclStore
    from broker.coordination.group_acl import apply_group_acls

    zk, _ = secured
    owner_zk = ZkTarget(zk, ZkSecurity(user=OWNER, password=OWNER_PW))
    owner = zkmod.connect(owner_zk, create=False)
    try:
        store = AclStore(owner)
        for i, (op, allowed, resource) in enumerate(MATRIX):
            name, login = f"g{i}", f"User:m{i}"
            named, every = Resource(ResourceType.GROUP, name), Resource(ResourceType.GROUP, "*")
            target, other = (named, every) if resource == "group" else (every, named)
            store.add(make_acl(login, op, target, allow=allowed))
            if not allowed:
                store.add(make_acl(login, op, other, allow=True))
            owner.create(OFFSET.format(name), b'{"offset": 0, "skip": 0, "time": 7}', makepath=True)
        apply_group_acls(owner, owner.acl_policy.owner, store.all())
    finally:
        zkmod.close(owner)

    for i, (op, allowed, resource) in enumerate(MATRIX):
        name, login = f"g{i}", f"m{i}"
        case = f"{op} {'allowed' if allowed else 'denied'} on {resource}"
        may_consume = op == "consume" and allowed
        may_describe = allowed or op == "consume"  # a denied consume keeps the allow's describe
        if may_consume:
            assert _consume_and_commit(zk, login, name) == [b"m1", b"m2", b"m3"], case
        else:
            with pytest.raises(GroupAuthorizationFailedError, match=f"User:{login} may not consume group '{name}'"):
                GroupConsumer(name, ["web"], zk=_as(zk, login), auto_commit_ms=0)
        with GroupAdmin(_as(zk, login), brokers=False) as admin:
            if may_describe:
                assert ("web", 0) in admin.offsets(name), case
            else:
                with pytest.raises(
                    GroupAuthorizationFailedError, match=f"User:{login} may not describe group '{name}'"
                ):
                    admin.offsets(name)
        direct = _kazoo(zk, login)
        try:
            if may_describe:
                before, _ = direct.get(OFFSET.format(name))
            else:
                with pytest.raises(NoAuthError):
                    direct.get(OFFSET.format(name))
            if may_consume:
                direct.set(OFFSET.format(name), before)
            else:
                with pytest.raises(NoAuthError):
                    direct.set(OFFSET.format(name), b"0")
        finally:
            _close(direct)
    owner = _kazoo(zk, OWNER, OWNER_PW)
    try:  # nothing a refused case tried changed anything
        for i, (op, allowed, _) in enumerate(MATRIX):
            raw, _ = owner.get(OFFSET.format(f"g{i}"))
            assert (b'"time": 7' in raw) == (not (op == "consume" and allowed)), (i, raw)
    finally:
        _close(owner)
