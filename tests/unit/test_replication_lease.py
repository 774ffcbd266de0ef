"""The leader's write lease is measured against the session ZooKeeper granted."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.coordination import zk
from broker.replication.manager import ReplicaManager
from broker.replication.services import ReplicationServices


def _manager(configured: float, granted: float | None) -> ReplicaManager:
    client = SimpleNamespace()
    if granted is not None:
        setattr(client, zk._GRANTED, granted)
    config = SimpleNamespace(broker_id=1, zk_session_timeout_s=configured)
    unused = SimpleNamespace()
    return ReplicaManager(
        ReplicationServices(
            config=config,
            zk=client,
            logs=unused,
            admin_pool=unused,  # type: ignore[arg-type]
            fsync_pool=unused,
            isr_changes={},
            truncated_bytes={},  # type: ignore[arg-type]
            wake_consumers=lambda key: None,
            wake_fetchers=lambda key: None,
            replicated_in=lambda *args: None,
        )
    )


@pytest.mark.parametrize(
    "configured, granted, lease_on",
    [
        (10.0, None, 10.0),  # nothing recorded: what was asked for
        (10.0, 10.0, 10.0),
        (30.0, 20.0, 20.0),  # the server's maximum was lower: a new leader comes sooner
        (0.5, 1.0, 0.5),  # a longer grant never lengthens the lease
    ],
)
def test_the_lease_follows_the_shorter_of_configured_and_granted(configured, granted, lease_on):
    assert _manager(configured, granted).lease.session_timeout() == lease_on
