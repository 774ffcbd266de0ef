"""Consumer groups (the paper, section 3.2): members, rebalancing, offsets, administration.

- :mod:`.consumer`: :class:`GroupConsumer`, a member of a group (the public face);
- :mod:`.rebalance`: the coordinator that claims and releases partitions in ZooKeeper;
- :mod:`.assignment`: the sans-IO partition assignment (range, round robin);
- :mod:`.fetcher` and :mod:`.streams`: pulling owned partitions and handing them out;
- :mod:`.offsets`: the group's znodes (members, owners, committed positions);
- :mod:`.admin`: :class:`GroupAdmin` (list, describe, lag, seek, delete);
- :mod:`.lag`: the one lag formula every view uses;
- :mod:`.status`: a group's health from a window of commits (Burrow's rules).

Import what applications need from :mod:`broker.client`; these modules are its parts.
"""

from broker.client.group.admin import GroupAdmin
from broker.client.group.consumer import GroupConsumer, PartitionNotOwnedError
from broker.client.group.lag import Lag, group_lag
from broker.client.group.offsets import Committed, Member
from broker.client.group.status import (
    Observation,
    PartitionStatus,
    StatusWindows,
    group_status,
    partition_status,
)
from broker.client.group.streams import ConsumerClosedError, MessageStream, RawBatch

__all__ = [
    "Committed",
    "ConsumerClosedError",
    "GroupAdmin",
    "GroupConsumer",
    "Lag",
    "Member",
    "MessageStream",
    "Observation",
    "PartitionNotOwnedError",
    "PartitionStatus",
    "RawBatch",
    "StatusWindows",
    "group_lag",
    "group_status",
    "partition_status",
]
