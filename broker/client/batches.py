"""Batches for the code that copies or inspects them (the mirror, the loader).

Most applications never see a batch: :class:`~broker.client.Producer` builds them and
the consumers hand out messages. Pipes of batches do: the mirror copies fetched
batches as they are and, only when a target topic has fewer partitions than its
source, decodes one and re-encodes its messages per target partition; the loader
reads decoded batches as columns. ``CODECS`` maps the codec names configs use to the
ids in batch headers. The format itself lives in :mod:`broker.wire.records`
(docs/protocol.md); these are the parts of it that are part of the client's face.
"""

from __future__ import annotations

from broker.common.errors import CorruptBatchError
from broker.wire.records import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_ZSTD,
    CODECS,
    MAX_BATCH_BYTES,
    Batch,
    compress_batch,
    decode_batches,
    encode_batch,
)


def decode_batch(raw: bytes | bytearray | memoryview, offset: int = 0) -> Batch:
    """Decode exactly one whole stored batch (its CRC checked), placed at ``offset``.

    Raises CorruptBatchError when ``raw`` is not one whole valid batch.
    """
    batches, used = decode_batches(raw, offset)
    if len(batches) != 1 or used != len(raw):
        raise CorruptBatchError(
            f"expected one whole batch at offset {offset}, got "
            f"{len(batches)} batch(es) covering {used} of {len(raw)} bytes"
        )
    return batches[0]


__all__ = [
    "Batch",
    "CODECS",
    "CODEC_GZIP",
    "CODEC_LZ4",
    "CODEC_NONE",
    "CODEC_ZSTD",
    "MAX_BATCH_BYTES",
    "compress_batch",
    "decode_batch",
    "encode_batch",
]
