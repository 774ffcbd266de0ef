"""The mirror: an embedded consumer group copying batches from one cluster to another.

See docs/mirror.md. Modules: :mod:`mirror.config` (TOML), :mod:`mirror.routing`
(target topics and partitions), :mod:`mirror.core` (the copy loop),
:mod:`mirror.status` (metrics and ``logferry mirror status``), :mod:`mirror.cli`.
"""

from mirror.errors import DeliveryFailedError, MirrorConfigError, MirrorError

__all__ = ["DeliveryFailedError", "MirrorConfigError", "MirrorError"]
