"""mirror.memory: the mirror asks glibc to keep large receive buffers in the heap.

Behaviour, not timing: on glibc the thresholds are accepted (and asking again is
harmless); afterwards a freed answer-sized buffer is reused rather than mapped afresh,
which shows as far fewer page faults for the next one.
"""

from __future__ import annotations

import ctypes
import resource

import pytest

from mirror.memory import keep_receive_buffers

ANSWER = 24 * 1024 * 1024


def _glibc() -> bool:
    try:
        return hasattr(ctypes.CDLL(None), "mallopt")
    except OSError:
        return False


@pytest.mark.skipif(not _glibc(), reason="mallopt is glibc's")
def test_large_buffers_are_kept_for_reuse_after_the_mirror_asked():
    assert keep_receive_buffers()
    assert keep_receive_buffers()  # idempotent
    first = bytearray(ANSWER)
    first[::4096] = b"x" * len(first[::4096])  # touch every page
    del first
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    second = bytearray(ANSWER)  # the heap memory just freed, already mapped
    second[::4096] = b"y" * len(second[::4096])
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < ANSWER // 4096 // 4  # a fresh mapping would fault on every page
