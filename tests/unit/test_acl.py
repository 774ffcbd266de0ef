"""The ACL matcher (broker.common.acl): each operation x allowed/denied x topic, prefix,
group and cluster; the '*' principal; superusers; deny wins; describe implied; the
znode-name form; bad input."""

from __future__ import annotations

import pytest

from broker.common.acl import (
    CLUSTER,
    OPERATIONS_BY_RESOURCE,
    Acl,
    AclSet,
    Operation,
    Resource,
    ResourceType,
    acl_from_key,
    group,
    make_acl,
    topic,
    transactional_id,
)
from broker.common.errors import ConfigError
from broker.common.principal import ANONYMOUS, Principal

ALICE = Principal("User", "alice")
BOB = Principal("User", "bob")

# (the ACL's resource, a request resource it covers, one it does not cover)
RESOURCES = [
    (Resource(ResourceType.TOPIC, "web-logs"), topic("web-logs"), topic("web-logs2")),
    (Resource(ResourceType.TOPIC, "*"), topic("anything"), group("anything")),
    (Resource(ResourceType.TOPIC_PREFIX, "web-"), topic("web-access"), topic("app-web-")),
    (Resource(ResourceType.GROUP, "dashboards"), group("dashboards"), group("dashboards-2")),
    (Resource(ResourceType.GROUP, "*"), group("any"), topic("any")),
    (transactional_id("etl-1"), transactional_id("etl-1"), transactional_id("etl-2")),
    (Resource(ResourceType.TRANSACTIONAL_ID, "*"), transactional_id("any"), group("any")),
    (CLUSTER, CLUSTER, topic("cluster")),
]
MATRIX = [
    (op, acl_resource, covered, other)
    for acl_resource, covered, other in RESOURCES
    for op in sorted(OPERATIONS_BY_RESOURCE[acl_resource.type], key=lambda o: o.value)
]


def _id(case) -> str:
    op, resource, _, _ = case
    return f"{op}-{resource.type}-{resource.name or 'cluster'}"


@pytest.mark.parametrize("case", MATRIX, ids=_id)
def test_allow_grants_exactly_that_operation_on_what_the_resource_covers(case) -> None:
    op, resource, covered, other = case
    acls = AclSet([make_acl("User:alice", op, resource)])
    assert acls.authorize(ALICE, op, covered).allowed
    assert not acls.authorize(ALICE, op, other).allowed  # another resource
    assert not acls.authorize(BOB, op, covered).allowed  # another principal
    for different in Operation:  # another operation
        if different not in (op, Operation.DESCRIBE):
            assert not acls.authorize(ALICE, different, covered).allowed
    # allowing anything on a resource allows describing it
    assert acls.authorize(ALICE, Operation.DESCRIBE, covered).allowed


@pytest.mark.parametrize("case", MATRIX, ids=_id)
def test_deny_wins_over_allow(case) -> None:
    op, resource, covered, _ = case
    acls = AclSet([make_acl("User:alice", op, resource), make_acl("*", op, resource, allow=False)])
    decision = acls.authorize(ALICE, op, covered)
    assert not decision.allowed and "denied by ACL" in decision.reason
    assert f"deny * {op}" in decision.reason
    # a deny of one operation leaves the others (and describe) alone
    if op is not Operation.DESCRIBE:
        assert acls.authorize(ALICE, Operation.DESCRIBE, covered).allowed


@pytest.mark.parametrize("case", MATRIX, ids=_id)
def test_star_principal_allows_everyone_and_superuser_needs_no_acl(case) -> None:
    op, resource, covered, other = case
    acls = AclSet([make_acl("*", op, resource)], super_users=["User:admin"])
    assert acls.authorize(ALICE, op, covered).allowed
    assert acls.authorize(ANONYMOUS, op, covered).allowed
    assert not acls.authorize(ANONYMOUS, op, other).allowed
    admin = Principal("User", "admin")
    assert acls.authorize(admin, op, other).allowed
    assert acls.authorize(admin, op, other).reason == "superuser"


def test_nothing_allowed_is_denied() -> None:
    acls = AclSet()
    for op in Operation:
        for resource in (topic("t"), group("g"), CLUSTER):
            decision = acls.authorize(ANONYMOUS, op, resource)
            assert not decision.allowed and decision.reason == "no ACL allows it"


def test_a_deny_of_describe_hides_the_topic_even_from_a_producer() -> None:
    acls = AclSet(
        [
            make_acl("User:alice", "produce", topic("t")),
            make_acl("User:alice", "describe", Resource(ResourceType.TOPIC_PREFIX, "t"), allow=False),
        ]
    )
    assert acls.authorize(ALICE, Operation.PRODUCE, topic("t")).allowed
    assert not acls.authorize(ALICE, Operation.DESCRIBE, topic("t")).allowed


def test_a_superuser_is_allowed_even_what_a_deny_names() -> None:
    acls = AclSet([make_acl("*", "delete", topic("*"), allow=False)], super_users=["User:root"])
    assert acls.authorize(Principal("User", "root"), Operation.DELETE, topic("x")).allowed
    assert not acls.authorize(ALICE, Operation.DELETE, topic("x")).allowed


def test_decisions_are_cached_per_set_and_a_new_set_decides_afresh() -> None:
    acls = AclSet([make_acl("User:alice", "consume", topic("t"))])
    first = acls.authorize(ALICE, Operation.CONSUME, topic("t"))
    assert acls.authorize(ALICE, Operation.CONSUME, topic("t")) is first
    assert not AclSet([]).authorize(ALICE, Operation.CONSUME, topic("t")).allowed


@pytest.mark.parametrize(
    "acl",
    [
        make_acl("User:mirror", "consume", Resource(ResourceType.TOPIC_PREFIX, "web-")),
        make_acl("*", "produce", topic("*"), allow=False),
        make_acl("User:CN=agent-1,O=logferry/x y", "describe", group("dash.boards")),
        make_acl("User:admin", "alter", CLUSTER),
        make_acl("User:etl", "produce", transactional_id("etl.loader-1")),
    ],
    ids=str,
)
def test_the_znode_name_form_reads_back_and_is_a_legal_znode_name(acl: Acl) -> None:
    key = acl.key()
    assert "/" not in key and key not in (".", "..")
    assert acl_from_key(key) == acl


@pytest.mark.parametrize(
    "principal, operation, resource, message",
    [
        ("alice", "produce", topic("t"), "User:<name>"),
        ("Group:x", "produce", topic("t"), "unknown principal type"),
        ("User:alice", "write", topic("t"), "unknown operation 'write'"),
        ("User:alice", "produce", topic("a/b"), "invalid topic name"),
        ("User:alice", "produce", Resource(ResourceType.TOPIC_PREFIX, ""), "invalid topic prefix"),
        ("User:alice", "produce", group("g"), "does not apply to the group"),
        ("User:alice", "consume", transactional_id("t"), "does not apply to the transactional-id"),
        ("User:alice", "create", CLUSTER, "does not apply to the cluster"),
        ("User:alice", "alter", Resource(ResourceType.CLUSTER, "x"), "has no name"),
    ],
)
def test_bad_input_is_a_config_error_that_says_what_is_wrong(principal, operation, resource, message) -> None:
    with pytest.raises(ConfigError, match=message):
        make_acl(principal, operation, resource)


@pytest.mark.parametrize(
    "key",
    [
        "",
        "allow,User%3Aa,produce,topic",
        "maybe,User%3Aa,produce,topic,t",
        "allow,User%3Aa,produce,table,t",
        "allow,User%3Aa,fly,topic,t",
    ],
)
def test_a_znode_that_is_not_an_acl_is_refused(key: str) -> None:
    with pytest.raises(ConfigError):
        acl_from_key(key)
