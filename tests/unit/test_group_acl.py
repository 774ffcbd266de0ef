"""Per-group ZooKeeper ACLs derived from logferry's group ACLs, sans IO: the matrix
(allowed / denied x consume / describe x a named group / every group '*'), /consumers'
own ACL, the data members read them from, the policy a member creates znodes with, and
a client's check before it touches a group (against znodes held in a dict)."""

from __future__ import annotations

import pytest
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.security import Permissions

from broker.client.group.access import check_group_access
from broker.common.acl import Operation, group, make_acl, topic
from broker.common.errors import GroupAuthorizationFailedError
from broker.common.zk_security import digest_id
from broker.coordination.group_acl import (
    MEMBER,
    NEW_GROUP_KEY,
    READER,
    consumers_zk_acl,
    decode_acl,
    encode_acl,
    group_mode,
    group_zk_acl,
    named_groups,
    new_group_zk_acl,
    perms_of,
    principal_of,
)
from broker.coordination.zk_acl import AclKazooClient, AclPolicy, digest_acl

OWNER = digest_id("logferry", "owner")
MIRROR = digest_id("mirror", "m")
LOADER = digest_id("loader", "l")
IDS = (MIRROR, LOADER)


def _perms(acl, cid: str) -> int:
    return perms_of(acl, cid)


@pytest.mark.parametrize("name", ["dash", "*"])
@pytest.mark.parametrize("operation, granted", [("consume", MEMBER), ("describe", READER)])
@pytest.mark.parametrize("allow", [True, False])
def test_the_group_matrix(name: str, operation: str, granted: int, allow: bool) -> None:
    acls = [make_acl("User:mirror", operation, group(name), allow)]
    if not allow:  # a deny must beat an allow of the same operation
        acls.append(make_acl("User:mirror", operation, group(name), True))
    acl = group_zk_acl("dash", acls, OWNER, IDS)
    assert acl[0] == digest_acl(OWNER)  # the owner always, with ADMIN: it can re-derive
    mine = _perms(acl, MIRROR)
    if allow:
        assert mine == granted
    else:
        assert mine & Permissions.WRITE == 0
        if operation == "consume":  # a denied consume still allows describe
            assert mine == READER
        else:
            assert mine == 0
    assert _perms(acl, LOADER) == 0  # another login: nothing
    assert all(a.perms & Permissions.ADMIN == 0 for a in acl[1:])  # no member changes ACLs
    other = group_zk_acl("other", acls, OWNER, IDS)
    assert _perms(other, MIRROR) == (mine if name == "*" else 0)


def test_star_principal_counts_for_every_consumer_login() -> None:
    acls = [make_acl("*", "describe", group("dash"))]
    acl = group_zk_acl("dash", acls, OWNER, IDS)
    assert _perms(acl, MIRROR) == READER and _perms(acl, LOADER) == READER
    assert all(a.id.scheme == "digest" for a in acl)  # never the world


def test_consumers_node_lists_for_all_and_lets_only_every_group_consumers_create() -> None:
    acls = [make_acl("User:mirror", "consume", group("*")), make_acl("User:loader", "consume", group("land"))]
    top = consumers_zk_acl(acls, OWNER, IDS)
    assert _perms(top, OWNER) == Permissions.ALL
    assert _perms(top, MIRROR) == READER | Permissions.CREATE
    assert _perms(top, LOADER) == READER
    new = new_group_zk_acl(acls, OWNER, IDS)
    assert _perms(new, MIRROR) == MEMBER and _perms(new, LOADER) == 0
    assert named_groups(acls) == {"land"}


def test_group_mode_needs_a_group_acl() -> None:
    assert not group_mode([make_acl("User:x", "consume", topic("t"))])
    assert group_mode([make_acl("User:x", "describe", group("g"))])


def test_published_acl_reads_back_and_bad_data_is_none() -> None:
    acl = group_zk_acl("g", [make_acl("User:mirror", "consume", group("g"))], OWNER, IDS)
    assert decode_acl(encode_acl(acl)) == acl
    assert decode_acl(encode_acl(acl, NEW_GROUP_KEY), NEW_GROUP_KEY) == acl
    for raw in (None, b"", b"{", b"[]", b'{"zk_acl": 3}', encode_acl(acl, NEW_GROUP_KEY)):
        assert decode_acl(raw) is None


def test_a_member_creates_below_its_group_with_the_groups_acl() -> None:
    policy = AclPolicy(MIRROR)
    acl = tuple(group_zk_acl("g", [make_acl("User:mirror", "consume", group("g"))], OWNER, IDS))
    policy.group_acls["g"] = acl
    assert policy.acls_for("/consumers/g/offsets/web/0") == list(acl)
    assert policy.acls_for("/consumers/g") == list(acl)
    assert policy.acls_for("/consumers/gg/ids") == [digest_acl(MIRROR)]  # another group


def test_principal_of_a_digest_id() -> None:
    assert principal_of(MIRROR) == "User:mirror"


class _Client(AclKazooClient):
    """An AclKazooClient that never connects: ``get`` answers from a dict of znodes
    (data, or an exception to raise)."""

    def __init__(self, me: str, nodes: dict[str, object]):
        super().__init__(hosts="127.0.0.1:1", acl_policy=AclPolicy(me))
        self.nodes = nodes

    def get(self, path: str, watch: object = None) -> tuple[bytes, None]:
        value = self.nodes.get(path, NoNodeError())
        if isinstance(value, Exception):
            raise value
        assert isinstance(value, bytes)
        return value, None


def _published(*grants: tuple[str, str]) -> bytes:
    acls = [make_acl(f"User:{u}", op, group("g")) for u, op in grants]
    return encode_acl(group_zk_acl("g", acls, OWNER, IDS))


def test_access_without_published_acls_changes_nothing() -> None:
    client = _Client(MIRROR, {"/consumers": b"", "/consumers/g": b""})
    check_group_access(client, "g", Operation.CONSUME)
    assert client.acl_policy.group_acls == {}


def test_access_allowed_remembers_the_groups_acl_for_creates() -> None:
    client = _Client(MIRROR, {"/consumers/g": _published(("mirror", "consume"))})
    check_group_access(client, "g", Operation.CONSUME)
    assert perms_of(client.acl_policy.acls_for("/consumers/g/offsets/t/0"), MIRROR) == MEMBER


@pytest.mark.parametrize(
    "nodes, operation",
    [
        ({"/consumers/g": NoAuthError()}, Operation.DESCRIBE),
        ({"/consumers/g": _published(("mirror", "describe"))}, Operation.CONSUME),
        ({"/consumers": encode_acl(new_group_zk_acl([], OWNER, IDS), NEW_GROUP_KEY)}, Operation.CONSUME),
    ],
)
def test_access_refused_names_principal_operation_and_group(nodes, operation) -> None:
    with pytest.raises(GroupAuthorizationFailedError) as refused:
        check_group_access(_Client(MIRROR, nodes), "g", operation)
    text = str(refused.value)
    assert f"User:mirror may not {operation} group 'g'" in text
    assert f"logferry acl add --principal User:mirror --operation {operation} --group g" in text


def test_a_new_group_takes_the_every_group_acl_when_it_allows_this_login() -> None:
    template = new_group_zk_acl([make_acl("User:mirror", "consume", group("*"))], OWNER, IDS)
    client = _Client(MIRROR, {"/consumers": encode_acl(template, NEW_GROUP_KEY)})
    check_group_access(client, "fresh", Operation.CONSUME)
    assert client.acl_policy.acls_for("/consumers/fresh/ids/x") == template
