"""Topic administration through any broker of the cluster."""

from __future__ import annotations

from typing import NamedTuple, Sequence

from broker import protocol
from broker.client.cluster import Cluster


class BrokerInfo(NamedTuple):
    """How to reach a live broker."""

    host: str
    port: int
    datacenter: str


class Admin:
    """Create, delete, list and describe topics; list brokers."""

    def __init__(self, zk: str | None = None, brokers: Sequence[str] | None = None,
                 request_timeout: float = 30.0):
        self.cluster = Cluster(zk, brokers, request_timeout)

    def create_topic(self, name: str, partitions: int = 0) -> dict[int, int]:
        """Create ``name`` with ``partitions`` (the broker's default when 0)."""
        frame = self.cluster.call_any(protocol.CREATE_TOPIC,
                                      {"topic": name, "partitions": partitions})
        return {int(p): int(b) for p, b in frame.header["partitions"].items()}

    def delete_topic(self, name: str) -> None:
        """Delete ``name`` and its data on every broker."""
        self.cluster.call_any(protocol.DELETE_TOPIC, {"topic": name})
        self.cluster.forget(name)

    def list_topics(self) -> list[str]:
        """Names of every topic."""
        return sorted(self.cluster.refresh(None)["topics"])

    def describe_topic(self, name: str) -> dict[int, int]:
        """Partition -> hosting broker id."""
        self.cluster.forget(name)
        return dict(sorted(self.cluster.partitions_for(name).items()))

    def brokers(self) -> dict[int, BrokerInfo]:
        """Live brokers by id."""
        header = self.cluster.refresh([])
        return {int(b): BrokerInfo(v[0], int(v[1]), v[2] if len(v) > 2 else "")
                for b, v in sorted(header["brokers"].items())}

    def close(self) -> None:
        """Close connections and the ZooKeeper session."""
        self.cluster.close()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
