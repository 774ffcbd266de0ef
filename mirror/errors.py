"""The mirror's errors: one root class, so callers can catch everything the mirror raises."""

from __future__ import annotations

from broker.common.config import format_error
from broker.common.errors import LogferryError


class MirrorError(LogferryError):
    """Root of the mirror's errors."""


class MirrorConfigError(MirrorError):
    """The mirror's TOML config is missing, malformed or out of range; names the key.

    The message has the format of every logferry config error: ``<file>: <key>: <why>``.
    """

    def __init__(self, key: str, why: str, file: str = ""):
        super().__init__(format_error(file, key, why))
        self.key = key
        self.file = file


class DeliveryFailedError(MirrorError):
    """The target cluster refused a batch for good; its source position was not committed."""


__all__ = ["DeliveryFailedError", "MirrorConfigError", "MirrorError"]
