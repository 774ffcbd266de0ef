"""A process's resident memory, read from /proc, for tests that bound the broker's memory."""

from __future__ import annotations

import threading
from pathlib import Path


def rss_bytes(pid: int) -> int:
    """The process's resident set (VmRSS) in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


class RssSampler:
    """Samples a process's RSS every 50 ms in a thread; ``peak`` is the largest seen."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
            except (OSError, AssertionError):
                return

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.peak
