"""Entering a network namespace from Python: one thread at a time.

A network namespace is a per-thread attribute in Linux: ``setns(fd, CLONE_NEWNET)``
moves only the calling thread. Everything that thread then creates lives in that
namespace: its sockets, the threads it starts (a client library's sender and fetcher
threads), and the processes it forks or execs (a ZooKeeper JVM, ``subprocess.Popen``).
:func:`inside` is that move as a context manager, undone on exit, so a test writes::

    with inside("lf123-b1"):          # a host of broker.testing.network
        broker.start()                # its process, and the readiness probe, in lf123-b1

A child forked by the fork server (:mod:`broker.testing.prefork`) is placed in the
namespace of the thread that asked for it (:func:`thread_namespace_fd`), so brokers,
mirrors and agents keep starting without exec inside a namespace too.
Linux only; entering a namespace needs root (CAP_SYS_ADMIN). Nothing here is used by a
deployed process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"
"""Where ``ip netns add NAME`` keeps a namespace's handle (a bind mount)."""
_libc = ctypes.CDLL(None, use_errno=True)


class NamespaceError(OSError):
    """A network namespace could not be entered (missing, or not root)."""


def setns(fd: int) -> None:
    """Move the calling thread into the network namespace open as ``fd``."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise NamespaceError(errno, f"setns into a network namespace: {os.strerror(errno)}")


def thread_namespace_fd() -> int:
    """A new descriptor of the calling thread's network namespace (the caller closes it)."""
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


def thread_namespace() -> str:
    """The calling thread's network namespace, as ``net:[inode]`` ("" on a system
    without network namespaces, where nothing here applies)."""
    return _readlink("/proc/thread-self/ns/net")


def process_namespace(pid: int) -> str:
    """Process ``pid``'s (its main thread's) network namespace, as ``net:[inode]``
    ("" if it cannot be read)."""
    return _readlink(f"/proc/{pid}/ns/net")


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


@contextlib.contextmanager
def inside(name: str) -> Iterator[None]:
    """Run the block with the calling thread in network namespace ``name`` (see the
    module); the thread's own namespace is restored on exit, even after an error.
    Threads and processes started in the block stay where they were started."""
    with _inside_path(os.path.join(NETNS_DIR, name), f"no network namespace {name!r}"):
        yield


@contextlib.contextmanager
def at_home() -> Iterator[None]:
    """Run the block in the namespace the process was in when this module was imported
    (nothing to do, and no root needed, when the calling thread is there already)."""
    if _HOME_FD is None or thread_namespace() == _HOME:
        yield
        return
    with _inside_path(f"/proc/self/fd/{_HOME_FD}", "the process's first network namespace is gone"):
        yield


@contextlib.contextmanager
def _inside_path(path: str, missing: str) -> Iterator[None]:
    try:
        target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NamespaceError(2, f"{missing} ({path} is missing)") from None
    home = thread_namespace_fd()
    try:
        setns(target)
        try:
            yield
        finally:
            setns(home)
    finally:
        os.close(target)
        os.close(home)


_HOME = thread_namespace()
"""The namespace of the thread that imported this module: the process's own, as the
suite imports it (through the fork server's module) before any test moves a thread."""
_HOME_FD = thread_namespace_fd() if _HOME else None
"""A descriptor of it, held open for the process's life (None: no namespaces here)."""

__all__ = [
    "NETNS_DIR",
    "NamespaceError",
    "at_home",
    "inside",
    "process_namespace",
    "setns",
    "thread_namespace",
    "thread_namespace_fd",
]
