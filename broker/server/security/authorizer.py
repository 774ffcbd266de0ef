"""The broker's authorizer: which principal may do what, decided per request part.

Off (the default), everything is allowed, as before ACLs existed. On (``[authorizer]
enabled = true``), a request is allowed only by a superuser (``super_users``) or by an
ACL stored in ZooKeeper (:mod:`broker.coordination.acl_store`), deny winning
(:mod:`broker.common.acl` has the rules). The ACLs come from a ZooKeeper watch, so
``logferry acl add|remove`` applies within the watch's round trip, without a restart.

A refusal raises :class:`~broker.common.errors.TopicAuthorizationFailedError` (or the
group's or cluster's) naming the principal, operation and resource; it is counted in
``authorization_denied_total{operation,resource_type}`` and logged at most once per
principal and operation every :data:`LOG_INTERVAL_S` (an unauthorized client retrying
in a loop must not flood the log).

What each api needs (docs/security.md): produce ``produce`` on the topic; a consumer's
fetch ``consume``; a follower's fetch ``alter`` on the cluster (give the brokers'
principal that, or make it a superuser); offsets and metadata ``describe`` (any allowed
operation on a topic implies it; metadata lists only the topics the principal may
describe); create_topic (and metadata's auto-create) ``create``; delete_topic
``delete``; elect_leaders ``alter`` on the cluster.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from broker.common.acl import CLUSTER, Acl, AclSet, Operation, Resource, ResourceType, topic
from broker.common.config import BOOL, STR_LIST, Validator, fields
from broker.common.errors import (
    AuthorizationError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from broker.common.principal import Principal
from broker.common.ratelimit import RateLimitedLog

log = logging.getLogger("logferry.broker")

LOG_INTERVAL_S = 10.0
"""At most one denial line per principal and operation in this many seconds."""


@dataclass(frozen=True)
class AuthorizerConfig:
    """The broker's ``[authorizer]`` table."""

    enabled: bool = False
    """Off: every request is allowed (no ACL is read). On: deny unless allowed."""
    super_users: tuple[str, ...] = ()
    """Principals allowed everything (``User:admin``; the brokers' own principal)."""


AUTHORIZER_FIELDS = fields(enabled=BOOL, super_users=STR_LIST)
"""The ``[authorizer]`` table (docs/configuration.md, docs/security.md)."""


def authorizer_from_table(validator: Validator, table: Mapping[str, Any]) -> AuthorizerConfig:
    """A checked ``[authorizer]`` table as an :class:`AuthorizerConfig`."""
    users = []
    for i, text in enumerate(table.get("super_users", [])):
        try:
            principal = Principal.parse(text)
        except ValueError as exc:
            validator.fail(f"authorizer.super_users[{i}]", str(exc))
        if principal.kind != "User":
            validator.fail(f"authorizer.super_users[{i}]", f"principals are 'User:<name>', got {text!r}")
        users.append(str(principal))
    return AuthorizerConfig(enabled=table.get("enabled", False), super_users=tuple(users))


_ERRORS: dict[ResourceType, type[AuthorizationError]] = {
    ResourceType.TOPIC: TopicAuthorizationFailedError,
    ResourceType.GROUP: GroupAuthorizationFailedError,
    ResourceType.TRANSACTIONAL_ID: TransactionalIdAuthorizationFailedError,
    ResourceType.CLUSTER: ClusterAuthorizationFailedError,
}


class Authorizer:
    """Decides, counts and logs; the ACLs are replaced whole by :meth:`set_acls`.

    ``denied`` is the metric counter (labels ``operation``, ``resource_type``).
    """

    def __init__(
        self,
        config: AuthorizerConfig,
        broker_id: int = 0,
        denied: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.enabled = config.enabled
        self.super_users = frozenset(config.super_users)
        self.broker_id = broker_id
        self.acls = AclSet((), self.super_users)
        self.denied = denied if denied is not None else defaultdict(int)
        self._denials_log = RateLimitedLog(log, LOG_INTERVAL_S, "more denials of it since the last report", clock)

    def set_acls(self, acls: Iterable[Acl]) -> None:
        """Replace the ACLs (from the ZooKeeper watch's thread: one assignment, atomic)."""
        self.acls = AclSet(acls, self.super_users)
        log.info("authorizer: %d ACLs in force", len(self.acls))

    def allowed(self, principal: Principal, operation: Operation, resource: Resource) -> bool:
        """True if allowed; no log, no count (for listing what a principal may see)."""
        return not self.enabled or self.acls.authorize(principal, operation, resource).allowed

    def check(self, principal: Principal, operation: Operation, resource: Resource) -> None:
        """Return if allowed; otherwise count, log (rate-limited) and raise the
        resource's authorization error."""
        if not self.enabled:
            return
        decision = self.acls.authorize(principal, operation, resource)
        if decision.allowed:
            return
        self.denied[(("operation", operation.value), ("resource_type", resource.type.value))] += 1
        self._denials_log.warning(
            "authorizer: denied %s %s on %s: %s",
            principal,
            operation,
            resource,
            decision.reason,
            key=(str(principal), operation),
        )
        raise _ERRORS[resource.type](
            f"{principal} may not {operation} on {resource} (broker {self.broker_id}: "
            f"{decision.reason}; an operator can allow it with `logferry acl add`)"
        )

    def check_topic(self, principal: Principal, operation: Operation, name: str) -> None:
        """:meth:`check` on a topic."""
        if self.enabled:
            self.check(principal, operation, topic(name))

    def check_cluster(self, principal: Principal, operation: Operation) -> None:
        """:meth:`check` on the cluster."""
        if self.enabled:
            self.check(principal, operation, CLUSTER)


ALLOW_ALL = Authorizer(AuthorizerConfig())
"""The authorizer of a broker without ``[authorizer] enabled``: allows everything."""


__all__ = [
    "ALLOW_ALL",
    "AUTHORIZER_FIELDS",
    "Authorizer",
    "AuthorizerConfig",
    "LOG_INTERVAL_S",
    "authorizer_from_table",
]
