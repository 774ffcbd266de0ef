"""Consumer groups (the paper, section 3.2): members, rebalancing, offsets, administration.

- :mod:`.consumer`: :class:`GroupConsumer`, a member of a group (the public face);
- :mod:`.rebalance`: the coordinator that claims and releases partitions in ZooKeeper;
- :mod:`.assignment`: the sans-IO partition assignment (range, round robin);
- :mod:`.fetcher` and :mod:`.streams`: pulling owned partitions and handing them out;
- :mod:`.offsets`: the group's znodes (members, owners, committed positions).

Import what applications need from :mod:`broker.client`; these modules are its parts.
"""

from broker.client.group.consumer import GroupConsumer, PartitionNotOwnedError
from broker.client.group.offsets import Committed
from broker.client.group.streams import ConsumerClosedError, MessageStream, RawBatch

__all__ = ["Committed", "ConsumerClosedError", "GroupConsumer", "MessageStream",
           "PartitionNotOwnedError", "RawBatch"]
