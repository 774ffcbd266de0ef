"""Per-group ZooKeeper ACLs derived from logferry's group ACLs, sans IO: the matrix
(allowed / denied x consume / describe x a named group / every group '*'), /consumers'
own ACL, the data members read them from, and the policy a member creates znodes with."""

from __future__ import annotations

import pytest
from kazoo.security import Permissions

from broker.common.acl import group, make_acl, topic
from broker.common.zk_security import digest_id
from broker.coordination.group_acl import (
    MEMBER, NEW_GROUP_KEY, READER, consumers_zk_acl, decode_acl, encode_acl, group_mode,
    group_zk_acl, named_groups, new_group_zk_acl, perms_of, principal_of,
)
from broker.coordination.zk_acl import AclPolicy, digest_acl

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
    acls = [make_acl("User:mirror", "consume", group("*")), make_acl("User:loader", "consume",
                                                                      group("land"))]
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
