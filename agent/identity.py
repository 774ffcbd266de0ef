"""Sans-IO file identity: is the file at hand the one we know, a truncated one, or another?

A file is identified by device + inode + a fingerprint of its first bytes. Device and
inode alone are not enough: when a file is deleted, the file system hands its inode
to the next file created (ext4 does so at once), and a tailer that trusts the inode
resumes the new file at the old file's offset and silently skips its beginning. The
fingerprint is a hash of the first ``min(size, fingerprint_bytes)`` bytes; its length
is kept with it, so a file that was short when first seen is compared on the bytes it
had then, and the fingerprint grows with the file up to ``fingerprint_bytes``.

:func:`judge` takes what we know about a file and fresh facts (a stat result and the
file's first bytes, read by the caller) and returns a :class:`Verdict`. It does no IO.

Neither key nor fingerprint names a file in the records: the key is reused (inode
reuse, and copytruncate keeps the inode while the offsets start over) and the
fingerprint grows. Each *generation* of a file (its bytes from offset 0 until it is
truncated or replaced) gets a :func:`new_file_id` instead, kept in the checkpoint, and
every record carries it (``fid``): ``(host, fid, offset)`` names one line of one
generation, the same in every copy of the record and different for any other line.
"""

from __future__ import annotations

import enum
import hashlib
import secrets
from typing import NamedTuple

DEFAULT_FINGERPRINT_BYTES = 1024


class FileKey(NamedTuple):
    """Device and inode: which file a path or handle refers to right now."""

    dev: int
    ino: int


class Fingerprint(NamedTuple):
    """A hash of a file's first ``length`` bytes (``length`` 0: the file was empty)."""

    length: int
    digest: str


EMPTY = Fingerprint(0, "")


def fingerprint(head: bytes) -> Fingerprint:
    """Fingerprint the first bytes of a file (the caller reads at most the limit)."""
    if not head:
        return EMPTY
    return Fingerprint(len(head), hashlib.blake2b(head, digest_size=12).hexdigest())


def matches(known: Fingerprint, head: bytes) -> bool:
    """True when ``head`` (the file's first bytes now) starts like ``known`` says."""
    if known.length == 0:
        return True
    if len(head) < known.length:
        return False
    return fingerprint(head[: known.length]) == known


def new_file_id() -> int:
    """A fresh id for one generation of one file: 63 random bits (a positive int64).

    Random rather than counted, so that nothing has to be coordinated or survive for it
    to stay distinct: not a counter in a checkpoint that a crash can roll back, a
    deleted state directory or two agents configured with the same ``host``. Two
    generations of one host collide with probability about n²/2^64 (n = 10 million
    files: 5 in a million).
    """
    return secrets.randbits(63)


class Verdict(enum.Enum):
    """What a fresh look at a known file means for reading it."""

    SAME = "same"
    """The same file, at least as long as our offset: go on reading from the offset."""
    TRUNCATED = "truncated"
    """Same inode and beginning, but shorter than our offset (copytruncate): restart at 0."""
    REPLACED = "replaced"
    """Same inode, different first bytes: another file (inode reuse, or truncated and
    rewritten past our offset before we looked): read it from 0 as a new file."""
    OTHER = "other"
    """Another device or inode: the path now names a different file (rotation)."""


class Facts(NamedTuple):
    """What the caller observed about a file just now."""

    key: FileKey
    size: int
    head: bytes
    """The first ``min(size, known fingerprint length)`` bytes (or more)."""


def judge(known_key: FileKey, known_fp: Fingerprint, offset: int, facts: Facts) -> Verdict:
    """Decide how to treat a file we know (key, fingerprint, read offset) given fresh facts."""
    if facts.key != known_key:
        return Verdict.OTHER
    if not matches(known_fp, facts.head):
        # Shorter than the fingerprint yet same first bytes as far as it goes: a
        # truncation; different bytes: another file reusing the inode.
        head = facts.head
        if len(head) < known_fp.length and head == b"":
            return Verdict.TRUNCATED
        return Verdict.REPLACED
    if facts.size < offset:
        return Verdict.TRUNCATED
    return Verdict.SAME
