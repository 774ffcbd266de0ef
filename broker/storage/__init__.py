"""The broker's log storage: partition logs made of segment files, by byte offset.

Modules, from the bottom up: :mod:`~broker.storage.config` (settings),
:mod:`~broker.storage.offset_index` (message offsets: a sparse index per segment, sans
IO), :mod:`~broker.storage.segment` (one file), :mod:`~broker.storage.loader` (opening
and crash recovery), :mod:`~broker.storage.message_offsets` (index files: load,
rebuild, save, lookups), :mod:`~broker.storage.partition_log` (one partition: append,
flush, fetch slices, retention) and :mod:`~broker.storage.log_manager` (all partitions
of a broker across its log dirs).
"""

from broker.storage.config import LogConfig
from broker.storage.log_manager import LogManager
from broker.storage.partition_log import FileSlice, PartitionLog, PendingFlush

__all__ = ["FileSlice", "LogConfig", "LogManager", "PartitionLog", "PendingFlush"]
