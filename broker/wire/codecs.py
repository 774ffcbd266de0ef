"""Batch payload compression: the codecs a batch header may name, sans-IO.

A batch is compressed as a whole (its msgpack payload), by the producer, once; the
broker stores and serves it as it is and the mirror copies it as it is, so a codec
costs CPU only where batches are built and where messages are read. Ids (bits 0-2 of
a batch's attributes byte) follow Kafka's numbering, so they read the same to anyone
who knows Kafka's; id 2 (Kafka's snappy) is reserved and unsupported:

==  =====  =================================================================
id  name   payload format
==  =====  =================================================================
0   none   the msgpack payload as it is
1   gzip   gzip member (RFC 1952), zlib level 6
3   lz4    LZ4 frame (the ``lz4`` package's ``lz4.frame``), content size stored
4   zstd   Zstandard frame (the ``zstandard`` package), level 3, content size stored
==  =====  =================================================================

Decompressing is given bytes from the network: every failure, and a payload that
would grow past :data:`MAX_PAYLOAD_BYTES`, is a :class:`CorruptBatchError` naming the
batch, never another exception.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable

import lz4.frame
import zstandard

from broker.common.errors import CorruptBatchError

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_LZ4 = 3
CODEC_ZSTD = 4
CODECS = {"none": CODEC_NONE, "gzip": CODEC_GZIP, "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}
"""Codec name (as configs and the CLI spell it) to the id in a batch header."""
CODEC_NAMES = {codec: name for name, codec in CODECS.items()}
CODEC_MASK = 0x07
"""Bits of the attributes byte that hold the codec id."""
MAX_PAYLOAD_BYTES = 256 * 1024 * 1024
"""No payload may decompress to more than this (a small corrupt or hostile batch must
not make a consumer allocate gigabytes); the same bound as a whole stored batch."""

ZSTD_LEVEL = 3
"""zstd's own default: at log data, about gzip's ratio or better at several times its speed
(docs/benchmarks.md)."""
GZIP_LEVEL = 6

_per_thread = threading.local()
"""One zstd compressor and decompressor per thread: their contexts are reused across
calls (cheaper than one per batch) but must not be shared, as they run without the GIL."""


def _zstd_compressor() -> zstandard.ZstdCompressor:
    try:
        return _per_thread.compressor  # type: ignore[no-any-return]
    except AttributeError:
        _per_thread.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True)
        return _per_thread.compressor  # type: ignore[no-any-return]


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    try:
        return _per_thread.decompressor  # type: ignore[no-any-return]
    except AttributeError:
        _per_thread.decompressor = zstandard.ZstdDecompressor()
        return _per_thread.decompressor  # type: ignore[no-any-return]


def _gzip(data: bytes) -> bytes:
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
    return compressor.compress(data) + compressor.flush()


def _lz4(data: bytes) -> bytes:
    out: bytes = lz4.frame.compress(data, store_size=True)
    return out


def _zstd(data: bytes) -> bytes:
    return _zstd_compressor().compress(data)


_COMPRESS: dict[int, Callable[[bytes], bytes]] = {
    CODEC_GZIP: _gzip,
    CODEC_LZ4: _lz4,
    CODEC_ZSTD: _zstd,
}


def codec_name(codec: int) -> str:
    """The name of a codec id (``"codec 5"`` for one this version does not know)."""
    return CODEC_NAMES.get(codec, f"codec {codec}")


def compress(codec: int, payload: bytes) -> bytes:
    """Compress a batch payload with ``codec`` (ValueError for an unknown id)."""
    if codec == CODEC_NONE:
        return payload
    try:
        fn = _COMPRESS[codec]
    except KeyError:
        raise ValueError(f"unknown compression codec {codec}; known: {CODECS}") from None
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"batch payload of {len(payload)} bytes is over {MAX_PAYLOAD_BYTES}")
    return fn(payload)


def decompress(codec: int, payload: bytes | memoryview, at: int) -> bytes | memoryview:
    """The msgpack payload of the batch at offset ``at``; CorruptBatchError if it is not one."""
    if codec == CODEC_NONE:
        return payload
    try:
        if codec == CODEC_ZSTD:
            return _unzstd(payload, at)
        if codec == CODEC_LZ4:
            return _unlz4(payload, at)
        if codec == CODEC_GZIP:
            return _gunzip(payload, at)
    except CorruptBatchError:
        raise
    except Exception as exc:  # zstd.ZstdError, lz4's RuntimeError, zlib.error, ...
        raise CorruptBatchError(f"batch at offset {at} does not decompress ({codec_name(codec)}): {exc}") from None
    raise CorruptBatchError(
        f"unknown compression codec {codec} in batch at offset {at} (this version reads {', '.join(CODECS)})"
    )


def _too_big(at: int, codec: str, size: int) -> CorruptBatchError:
    return CorruptBatchError(
        f"batch at offset {at} would decompress ({codec}) to {size} bytes, over the {MAX_PAYLOAD_BYTES}-byte limit"
    )


def _unzstd(payload: bytes | memoryview, at: int) -> bytes:
    size = zstandard.frame_content_size(payload)
    if size > MAX_PAYLOAD_BYTES:
        raise _too_big(at, "zstd", size)
    # size -1: not stored (our producers always store it); bounded by max_output_size
    out: bytes = _zstd_decompressor().decompress(payload, max_output_size=MAX_PAYLOAD_BYTES)
    if size >= 0 and len(out) != size:
        raise CorruptBatchError(f"batch at offset {at} decompresses (zstd) to {len(out)} bytes, its frame says {size}")
    return out


def _unlz4(payload: bytes | memoryview, at: int) -> bytes:
    size = lz4.frame.get_frame_info(payload)["content_size"]
    if size > MAX_PAYLOAD_BYTES:
        raise _too_big(at, "lz4", size)
    # size 0: not stored (our producers always store it): bounded by max_length
    out = _bounded(lz4.frame.LZ4FrameDecompressor(), payload, at, "lz4") if size == 0 else lz4.frame.decompress(payload)
    if not isinstance(out, bytes):
        out = bytes(out)
    if size and len(out) != size:
        raise CorruptBatchError(f"batch at offset {at} decompresses (lz4) to {len(out)} bytes, its frame says {size}")
    return out


def _bounded(decompressor: lz4.frame.LZ4FrameDecompressor, payload: bytes | memoryview, at: int, codec: str) -> bytes:
    out = decompressor.decompress(payload, max_length=MAX_PAYLOAD_BYTES + 1)
    if len(out) > MAX_PAYLOAD_BYTES:
        raise _too_big(at, codec, len(out))
    if not decompressor.eof:
        raise CorruptBatchError(f"batch at offset {at} holds a truncated {codec} frame")
    return bytes(out)


def _gunzip(payload: bytes | memoryview, at: int) -> bytes:
    decompressor = zlib.decompressobj(31)
    out = decompressor.decompress(payload, MAX_PAYLOAD_BYTES + 1)
    if len(out) > MAX_PAYLOAD_BYTES:
        raise _too_big(at, "gzip", len(out))
    if not decompressor.eof:
        raise CorruptBatchError(f"batch at offset {at} holds a truncated gzip stream")
    return out


__all__ = [
    "CODECS",
    "CODEC_GZIP",
    "CODEC_LZ4",
    "CODEC_MASK",
    "CODEC_NAMES",
    "CODEC_NONE",
    "CODEC_ZSTD",
    "MAX_PAYLOAD_BYTES",
    "codec_name",
    "compress",
    "decompress",
]
