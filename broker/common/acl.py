"""Access control lists: what a principal may do to a topic, a group or the cluster.

Sans IO: the types, their validation, their one-line text form (which is also the
name of the ZooKeeper node that stores each ACL, see
:mod:`broker.coordination.acl_store`) and the decision. The broker's
:mod:`broker.server.security.authorizer` asks :meth:`AclSet.authorize` for each request part.

The rules (Kafka's, reduced to what logferry serves):

- An :class:`Acl` is (principal or ``*``, operation, resource, allow or deny).
- A resource is a topic (``*``: every topic), a topic prefix, a consumer group
  (``*``: every group), a Kafka transactional id (``*``: every id) or the cluster.
- **Deny wins**: a matching deny ACL refuses, whatever allows it.
- Nothing allowed is denied (deny by default once the authorizer is on).
- Allowing any operation on a resource allows ``describe`` on it too (a producer
  needs the topic's metadata); only a deny of ``describe`` itself denies describe.
- Superusers (the broker config's ``super_users``) may do everything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import Enum
from typing import NamedTuple
from urllib.parse import quote, unquote

from broker.common.errors import ConfigError
from broker.common.names import NAME_RULE, is_valid_name
from broker.common.principal import Principal


class Operation(str, Enum):  # noqa: UP042 - StrEnum's str() and format() are the value, not Class.NAME
    """What a request does."""

    PRODUCE = "produce"
    CONSUME = "consume"
    DESCRIBE = "describe"
    CREATE = "create"
    DELETE = "delete"
    ALTER = "alter"

    def __str__(self) -> str:
        return self.value


class ResourceType(str, Enum):  # noqa: UP042 - StrEnum's str() and format() are the value, not Class.NAME
    """What an ACL names; a request's resource is a TOPIC, a GROUP or the CLUSTER."""

    TOPIC = "topic"
    TOPIC_PREFIX = "topic-prefix"
    GROUP = "group"
    TRANSACTIONAL_ID = "transactional-id"
    CLUSTER = "cluster"

    def __str__(self) -> str:
        return self.value


OPERATIONS_BY_RESOURCE: dict[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset(Operation),
    ResourceType.TOPIC_PREFIX: frozenset(Operation),
    ResourceType.GROUP: frozenset({Operation.CONSUME, Operation.DESCRIBE, Operation.DELETE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.PRODUCE, Operation.DESCRIBE}),
    ResourceType.CLUSTER: frozenset({Operation.ALTER, Operation.DESCRIBE}),
}
"""The operations that mean something on each kind of resource.

On the cluster: ``alter`` lets a broker replicate (follower fetches) and asks for
leader elections; ``describe`` is reserved for cluster-wide reads. On a topic,
``alter`` is reserved for changing a topic's settings. On a transactional id,
``produce`` is Kafka's WRITE (use the id in a transaction); ``describe`` is implied."""

WILDCARD = "*"
"""As a principal: everyone; as a topic or group name: every topic or group."""


class Resource(NamedTuple):
    """A topic, a topic prefix, a group or the cluster (``name`` is "" for the cluster)."""

    type: ResourceType
    name: str = ""

    def __str__(self) -> str:
        return str(self.type) if self.type is ResourceType.CLUSTER else f"{self.type} {self.name!r}"

    def matches(self, wanted: Resource) -> bool:
        """Whether an ACL on this resource applies to a request on ``wanted``."""
        kind = self.type
        if kind is ResourceType.TOPIC_PREFIX:
            return wanted.type is ResourceType.TOPIC and wanted.name.startswith(self.name)
        if kind is not wanted.type:
            return False
        return kind is ResourceType.CLUSTER or self.name in (wanted.name, WILDCARD)


CLUSTER = Resource(ResourceType.CLUSTER)


def topic(name: str) -> Resource:
    """The resource of one topic, as a request names it."""
    return Resource(ResourceType.TOPIC, name)


def transactional_id(name: str) -> Resource:
    """The resource of one Kafka transactional id, as a request names it."""
    return Resource(ResourceType.TRANSACTIONAL_ID, name)


def group(name: str) -> Resource:
    """The resource of one consumer group, as a request names it."""
    return Resource(ResourceType.GROUP, name)


_PREFIX_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")


def validate_resource(resource: Resource) -> Resource:
    """Return ``resource`` if its name suits its type; ConfigError says what is wrong."""
    kind, name = resource
    if kind is ResourceType.CLUSTER:
        if name:
            raise ConfigError(f"the cluster resource has no name (got {name!r})")
    elif kind is ResourceType.TOPIC_PREFIX:
        if not _PREFIX_RE.fullmatch(name):
            raise ConfigError(
                f"invalid topic prefix {name!r}: use 1-249 characters from "
                "A-Z a-z 0-9 . _ - (for every topic, use the topic '*')"
            )
    elif name != WILDCARD and not is_valid_name(name):
        raise ConfigError(f"invalid {kind} name {name!r}: use {NAME_RULE}, or '*' for every {kind}")
    return resource


def parse_principal(text: str) -> str:
    """``User:alice`` or ``*`` as an ACL holds it; ConfigError names the expected form."""
    if text == WILDCARD:
        return text
    try:
        principal = Principal.parse(text)
    except ValueError as exc:
        raise ConfigError(f"{exc}, or '*' for everyone") from None
    if principal.kind != "User":
        raise ConfigError(
            f"unknown principal type {principal.kind!r} in {text!r}: write "
            f"'User:{principal.name}' (principals are 'User:<name>' or '*')"
        )
    return str(principal)


def parse_operation(text: str) -> Operation:
    """An operation by name; ConfigError lists the names."""
    try:
        return Operation(text.lower())
    except ValueError:
        raise ConfigError(f"unknown operation {text!r}: use one of {', '.join(o.value for o in Operation)}") from None


class Acl(NamedTuple):
    """One rule: ``principal`` (``User:<name>`` or ``*``) may (``allow``) or may not do
    ``operation`` on ``resource``."""

    principal: str
    operation: Operation
    resource: Resource
    allow: bool = True

    def __str__(self) -> str:
        verb = "allow" if self.allow else "deny"
        return f"{verb} {self.principal} {self.operation} on {self.resource}"

    def key(self) -> str:
        """The ACL as one znode name: its four fields percent-encoded, joined by commas
        (``allow,User%3Aalice,produce,topic,web-logs``); :func:`acl_from_key` reads it."""
        fields = (
            "allow" if self.allow else "deny",
            self.principal,
            self.operation.value,
            self.resource.type.value,
            self.resource.name,
        )
        return ",".join(quote(f, safe="") for f in fields)


def make_acl(principal: str, operation: str | Operation, resource: Resource, allow: bool = True) -> Acl:
    """A validated ACL; ConfigError (naming the bad part) for nonsense."""
    op = operation if isinstance(operation, Operation) else parse_operation(operation)
    validate_resource(resource)
    allowed = OPERATIONS_BY_RESOURCE[resource.type]
    if op not in allowed:
        raise ConfigError(
            f"operation {op} does not apply to the {resource.type} (use one of "
            f"{', '.join(sorted(o.value for o in allowed))})"
        )
    return Acl(parse_principal(principal), op, resource, allow)


def acl_from_key(key: str) -> Acl:
    """Read a znode name written by :meth:`Acl.key`; ConfigError if it is not one."""
    parts = [unquote(p) for p in key.split(",")]
    if len(parts) != 5 or parts[0] not in ("allow", "deny"):
        raise ConfigError(f"not an ACL node name: {key!r}")
    verb, principal, operation, kind, name = parts
    try:
        resource = Resource(ResourceType(kind), name)
    except ValueError:
        raise ConfigError(f"unknown resource type {kind!r} in ACL node {key!r}") from None
    return make_acl(principal, operation, resource, verb == "allow")


class Decision(NamedTuple):
    """The answer to one question, with the reason (for the broker's denial log)."""

    allowed: bool
    reason: str


SUPERUSER = Decision(True, "superuser")
NO_ACL = Decision(False, "no ACL allows it")

_CACHE_LIMIT = 65_536
"""Decisions remembered per :class:`AclSet` (the cache is dropped when it fills)."""


class AclSet:
    """An immutable set of ACLs and the decisions taken on it (cached: a produce asks
    per part, so the same question comes again and again). A change of the ACLs makes
    a new set, so a cached answer never outlives the rules it came from."""

    def __init__(self, acls: Iterable[Acl] = (), super_users: Iterable[str] = ()):
        self.acls = tuple(sorted(set(acls), key=Acl.key))
        self.super_users = frozenset(super_users)
        self._by_principal: dict[str, tuple[Acl, ...]] = {}
        for acl in self.acls:
            self._by_principal[acl.principal] = self._by_principal.get(acl.principal, ()) + (acl,)
        self._cache: dict[tuple[str, Operation, Resource], Decision] = {}

    def __len__(self) -> int:
        return len(self.acls)

    def authorize(self, principal: Principal | str, operation: Operation, resource: Resource) -> Decision:
        """May ``principal`` do ``operation`` on ``resource`` (a topic, group or the cluster)?"""
        who = str(principal)
        key = (who, operation, resource)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._decide(who, operation, resource)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = decision
        return decision

    def _decide(self, who: str, operation: Operation, resource: Resource) -> Decision:
        if who in self.super_users:
            return SUPERUSER
        allowed_by: Acl | None = None
        for acl in (*self._by_principal.get(who, ()), *self._by_principal.get(WILDCARD, ())):
            if not acl.resource.matches(resource):
                continue
            if not acl.allow:
                if acl.operation is operation:
                    return Decision(False, f"denied by ACL '{acl}'")
            elif allowed_by is None and (acl.operation is operation or operation is Operation.DESCRIBE):
                allowed_by = acl
        if allowed_by is not None:
            return Decision(True, f"allowed by ACL '{allowed_by}'")
        return NO_ACL


__all__ = [
    "Acl",
    "AclSet",
    "CLUSTER",
    "Decision",
    "NO_ACL",
    "OPERATIONS_BY_RESOURCE",
    "Operation",
    "Resource",
    "ResourceType",
    "SUPERUSER",
    "WILDCARD",
    "acl_from_key",
    "group",
    "make_acl",
    "parse_operation",
    "parse_principal",
    "topic",
    "transactional_id",
    "validate_resource",
]
