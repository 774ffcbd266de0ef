"""The demo's security: TLS on every broker, SCRAM users per component, ACLs.

By default ``logferry demo`` runs secured, as etc/secured/ shows for a real
deployment: a private CA and a certificate for 127.0.0.1 (``security/certs`` in the
workdir), one SCRAM user per component with a random password in a 0600 file
(``security/secrets``), brokers requiring TLS + SCRAM with the authorizer on, and ACLs
that give each principal only what it needs:

================  ========  =============================================================
principal         cluster   may
================  ========  =============================================================
User:broker       both      everything (super user: replication between brokers)
User:admin        both      everything (super user: the demo creates the live topics)
User:agent        live      produce to the agents' topics, the audit topic and _agents
User:mirror       live      consume them
User:mirror       analysis  create, produce to (and grow) them, and its _audit.mirror
User:mirror       live      consume its group
User:dashboard    live      consume them (and the dashboard group)
User:reader       both      consume them, _agents and _audit.mirror, describe every group
                            (counting, the console)
User:loader       analysis  consume them
================  ========  =============================================================

ZooKeeper has logins too (digest, ``[zookeeper]`` in every config; docs/security.md
"ZooKeeper"): the brokers and the demo's admin work are the cluster's owner
(``logferry``), every other component logs in under its principal's name with its own
random password (``zk-<user>-<cluster>.password``), and the znodes carry ZooKeeper ACLs
(what ``logferry zk secure`` sets), so each group's offsets are writable only by the
principal its group ACL allows: the mirror's by User:mirror, the dashboard's by
User:dashboard; User:reader may read every group's, nobody else any.

``--insecure`` keeps the plaintext demo. The web console reads both clusters as
User:reader (its config's ``[cluster.tls]``/``[cluster.sasl]``/``[cluster.zookeeper]``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker.client import AGENTS_TOPIC
from broker.common.sasl import SaslCredentials
from broker.common.tls import TlsConfig
from broker.common.zk_security import ZkSecurity, ZkTarget, digest_id
from broker.testing.security import Pki, add_acls, create_users, make_chroot, make_pki, password_file, secure_zookeeper

MECHANISM = "SCRAM-SHA-512"
LIVE_USERS = ("broker", "admin", "agent", "mirror", "dashboard", "reader")
ANALYSIS_USERS = ("broker", "admin", "mirror", "loader", "reader")
MIRROR_AUDIT_TOPIC = "_audit.mirror"
"""The mirror's default ``audit_topic`` (mirror/config.py)."""
SUPER_USERS = ["User:broker", "User:admin"]
ZK_OWNER = "logferry"
"""The ZooKeeper login of the brokers and of the demo's admin work (the cluster's owner)."""
ZK_LOGINS = {"live": ("agent", "mirror", "dashboard", "reader"), "analysis": ("mirror", "loader", "reader")}
"""The other ZooKeeper logins per cluster: each component under its principal's name."""
ZK_CONSUMERS = {"live": ("mirror", "dashboard", "reader"), "analysis": ("reader",)}
"""The logins that touch consumer groups (the brokers' ``consumer_ids``); the group ACLs
decide which group each may read or write."""


def grants(topics: list[str]) -> dict[str, list[tuple[str, str, str]]]:
    """The topic ACLs of each cluster (datacenter -> (principal, operation, topic))."""
    live, analysis = [], []
    for topic in topics:
        live += [
            ("User:agent", "produce", topic),
            ("User:mirror", "consume", topic),
            ("User:dashboard", "consume", topic),
            ("User:reader", "consume", topic),
        ]
        analysis += [("User:mirror", op, topic) for op in ("produce", "create", "alter")]
        analysis += [("User:loader", "consume", topic), ("User:reader", "consume", topic)]
    # the agents' heartbeats (the console's agents view) and the mirror's own audit counts
    # (the console's and the loader's mirror tier)
    live += [
        ("User:agent", "produce", AGENTS_TOPIC),
        ("User:agent", "create", AGENTS_TOPIC),
        ("User:dashboard", "consume", AGENTS_TOPIC),
        ("User:reader", "consume", AGENTS_TOPIC),
    ]
    analysis += [
        ("User:mirror", "produce", MIRROR_AUDIT_TOPIC),
        ("User:mirror", "create", MIRROR_AUDIT_TOPIC),
        ("User:loader", "consume", MIRROR_AUDIT_TOPIC),
        ("User:reader", "consume", MIRROR_AUDIT_TOPIC),
    ]
    return {"live": live, "analysis": analysis}


def group_grants(datacenter: str, dashboard_group: str, mirror_group: str) -> list[tuple[str, str, str]]:
    """The group ACLs of one cluster (principal, operation, group): each consumer its own
    group, the read-only reader (the console's group views) describes them all."""
    grants = [("User:reader", "describe", "*")]
    if datacenter == "live":
        grants += [("User:dashboard", "consume", dashboard_group), ("User:mirror", "consume", mirror_group)]
    return grants


class DemoSecurity:
    """Certificates, users and ACLs of one demo run, and the config sections that use them."""

    def __init__(self, workdir: Path):
        self.root = workdir / "security"
        self.pki: Pki = make_pki(self.root / "certs")
        self.secrets = self.root / "secrets"
        self.passwords: dict[tuple[str, str], tuple[Path, str]] = {}
        self.zk_passwords: dict[tuple[str, str], tuple[Path, str]] = {}
        """(login, cluster) -> ZooKeeper password file and password (the owner's included)."""
        self.acl_count = 0
        self.zk_clusters: dict[str, str] = {}

    def setup(
        self, clusters: dict[str, str], topics: list[str], group: str, mirror_group: str = "logferry-mirror"
    ) -> None:
        """Create every user (random passwords, one file per user and cluster) and every
        ACL in each cluster (datacenter -> ZooKeeper connect string with chroot)."""
        users = {"live": LIVE_USERS, "analysis": ANALYSIS_USERS}
        self.zk_clusters = dict(clusters)
        for dc, zk in clusters.items():
            for login in (ZK_OWNER, *ZK_LOGINS[dc]):
                self.zk_passwords[(login, dc)] = password_file(self.secrets, f"zk-{login}-{dc}")
            # as the ZooKeeper operator: both chroots exist before either owner logs in,
            # so their shared parent (/logferry) stays the operator's, not one owner's
            make_chroot(zk)
        for dc in clusters:
            secure_zookeeper(self.zk_owner(dc))  # the owner's from here on
        for dc in clusters:
            made = {}
            for user in users[dc]:
                path, password = password_file(self.secrets, f"{user}-{dc}")
                self.passwords[(user, dc)] = (path, password)
                made[user] = password
            owner = self.zk_owner(dc)  # what it creates carries ZooKeeper ACLs from the start
            create_users(owner, made)
            groups = group_grants(dc, group, mirror_group)
            self.acl_count += add_acls(owner, grants(topics)[dc], groups)

    def secure_zookeeper(self) -> int:
        """As each cluster's owner, the ZooKeeper ACLs on every znode (the group ACLs'
        per group), as ``logferry zk secure``: run once the brokers are up. Returns the
        znodes changed."""
        return sum(secure_zookeeper(self.zk_owner(dc)) for dc in self.zk_clusters)

    def consumer_ids(self, datacenter: str) -> list[str]:
        """The digest ids of the cluster's group logins (the brokers' ``consumer_ids``)."""
        return [digest_id(login, self.zk_passwords[(login, datacenter)][1]) for login in ZK_CONSUMERS[datacenter]]

    def zk_owner(self, datacenter: str) -> ZkTarget:
        """The cluster's connect string logged in as its owner (admin work)."""
        _, password = self.zk_passwords[(ZK_OWNER, datacenter)]
        return ZkTarget(
            self.zk_clusters[datacenter],
            ZkSecurity(user=ZK_OWNER, password=password, consumer_ids=tuple(self.consumer_ids(datacenter))),
        )

    def zk_as(self, user: str, datacenter: str) -> ZkTarget:
        """The cluster's connect string logged in as ``user`` (a client of the demo's own)."""
        _, password = self.zk_passwords[(user, datacenter)]
        return ZkTarget(self.zk_clusters[datacenter], ZkSecurity(user=user, password=password))

    def zookeeper_table(self, user: str, datacenter: str) -> dict[str, Any]:
        """``[zookeeper]`` of a component's config: its login, the password from its file."""
        path, _ = self.zk_passwords[(user, datacenter)]
        return {"user": user, "password_file": str(path)}

    def summary(self) -> str:
        """One line for the demo's output."""
        users = len(self.passwords)
        logins = len(self.zk_passwords)
        return (
            f"TLS+SCRAM ({MECHANISM}) with ACLs: CA {self.pki.ca}; {users} users with random "
            f"passwords in {self.secrets} (mode 600); {self.acl_count} ACLs; brokers require "
            f"authentication, super users {', '.join(SUPER_USERS)}; ZooKeeper: {logins} "
            f"digest logins (owner {ZK_OWNER!r}, one per component), group offsets "
            "writable only by the group's principal"
        )

    # -- config sections ---------------------------------------------------------------

    def broker_sections(self, datacenter: str) -> dict[str, Any]:
        """``[tls]``, ``[auth]``, ``[sasl]`` (toward leaders) and ``[authorizer]``."""
        return {
            "tls": {
                "enabled": True,
                "ca_file": str(self.pki.ca),
                "cert_file": str(self.pki.broker_cert),
                "key_file": str(self.pki.broker_key),
            },
            "auth": {"required": True},
            "sasl": self.sasl_table("broker", datacenter),
            "authorizer": {"enabled": True, "super_users": list(SUPER_USERS)},
            "zookeeper": {**self.zookeeper_table(ZK_OWNER, datacenter), "consumer_ids": self.consumer_ids(datacenter)},
        }

    def tls_table(self) -> dict[str, Any]:
        return {"enabled": True, "ca_file": str(self.pki.ca)}

    def sasl_table(self, user: str, datacenter: str) -> dict[str, Any]:
        path, _ = self.passwords[(user, datacenter)]
        return {"username": user, "mechanism": MECHANISM, "password_file": str(path)}

    def client_sections(self, user: str, datacenter: str) -> dict[str, Any]:
        """``[tls]``, ``[sasl]`` and ``[zookeeper]`` of a component's config."""
        return {
            "tls": self.tls_table(),
            "sasl": self.sasl_table(user, datacenter),
            "zookeeper": self.zookeeper_table(user, datacenter),
        }

    def client(self, user: str, datacenter: str) -> dict[str, Any]:
        """``tls=`` and ``sasl=`` for a client the demo runs in its own process."""
        _, password = self.passwords[(user, datacenter)]
        return {"tls": TlsConfig(ca_file=self.pki.ca), "sasl": SaslCredentials(user, password, MECHANISM)}


__all__ = ["DemoSecurity", "ZK_CONSUMERS", "ZK_LOGINS", "ZK_OWNER", "grants", "group_grants"]
