"""The few filesystem operations the commit protocol needs, for any Hadoop filesystem.

Paths are URIs throughout (``file:///data/wh``, ``hdfs://nn:8020/wh``). Two
implementations: :class:`LocalFileSystem` (plain Python, used for ``file://`` so the
protocol is testable without a JVM) and :class:`HadoopFileSystem` (Spark's Hadoop client
through the JVM gateway, for ``hdfs://``, ``s3a://``, ... and for ``file://`` when asked).

What the protocol relies on:

* ``create_new`` writes a whole small file and fails if the path exists: manifests are
  committed with it, so two runs can never both commit sequence N.
* ``rename`` moves a file or directory and fails if the destination exists. On HDFS a
  rename is atomic; on object stores (s3a) it is a copy: still correct here because the
  commit point is the manifest, and data moves are idempotent and replayed by recovery.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, TypeVar
from urllib.parse import unquote, urlparse

from hadoop_loader.errors import OutputUnavailableError, StateError


class FileInfo(NamedTuple):
    """A file below a listed directory."""

    uri: str
    size: int
    mtime_ns: int
    """Its last modification, in nanoseconds since the epoch, at the file system's
    resolution (nanoseconds on Linux file systems, milliseconds on HDFS): with the size,
    what tells verification a file is unchanged since its footer was read."""


class FileSystem(Protocol):
    """File operations on URIs."""

    def exists(self, uri: str) -> bool: ...

    def mkdirs(self, uri: str) -> None: ...

    def list_names(self, uri: str) -> list[str]:
        """Names of the entries directly in a directory ([] if it does not exist)."""
        ...

    def list_files(self, uri: str) -> list[FileInfo]:
        """Every file below a directory, recursively, with its size and modification
        time ([] if it does not exist)."""
        ...

    def size(self, uri: str) -> int | None:
        """A file's size, or None if it does not exist."""
        ...

    def read_bytes(self, uri: str) -> bytes: ...

    def read_range(self, uri: str, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (fewer at the end of the file): footers are
        read this way, never whole files."""
        ...

    def create_new(self, uri: str, data: bytes) -> None:
        """Write a new file; raise :class:`FileExistsError` if it exists."""
        ...

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``; raise :class:`FileExistsError` if ``dst`` exists."""
        ...

    def delete(self, uri: str) -> None:
        """Delete a file or a directory tree; no error if it does not exist."""
        ...


def join(base: str, *parts: str) -> str:
    """Join URI path segments with ``/``."""
    out = base.rstrip("/")
    for part in parts:
        out += "/" + part.strip("/")
    return out


def relative(base: str, uri: str) -> str:
    """``uri`` relative to ``base`` (which must be a prefix)."""
    prefix = base.rstrip("/") + "/"
    if not uri.startswith(prefix):
        raise StateError(f"{uri} is not below {base}")
    return uri[len(prefix) :]


class LocalFileSystem:
    """``file://`` URIs with the Python standard library."""

    @staticmethod
    def path(uri: str) -> str:
        parsed = urlparse(uri)
        if parsed.scheme not in ("", "file"):
            raise StateError(f"the local filesystem cannot open {uri!r}")
        return unquote(parsed.path)

    @staticmethod
    def uri(path: str) -> str:
        return "file://" + path

    def exists(self, uri: str) -> bool:
        return os.path.exists(self.path(uri))

    def mkdirs(self, uri: str) -> None:
        os.makedirs(self.path(uri), exist_ok=True)

    def list_names(self, uri: str) -> list[str]:
        try:
            return sorted(os.listdir(self.path(uri)))
        except FileNotFoundError:
            return []

    def list_files(self, uri: str) -> list[FileInfo]:
        root = self.path(uri)
        out = []
        for dirpath, _, files in os.walk(root):
            for name in files:
                full = os.path.join(dirpath, name)
                with contextlib.suppress(FileNotFoundError):
                    st = os.stat(full)
                    out.append(FileInfo(self.uri(full), st.st_size, st.st_mtime_ns))
        return sorted(out)

    def size(self, uri: str) -> int | None:
        try:
            return os.path.getsize(self.path(uri))
        except FileNotFoundError:
            return None

    def read_bytes(self, uri: str) -> bytes:
        with open(self.path(uri), "rb") as f:
            return f.read()

    def read_range(self, uri: str, offset: int, length: int) -> bytes:
        with open(self.path(uri), "rb") as f:
            f.seek(offset)
            return f.read(length)

    def create_new(self, uri: str, data: bytes) -> None:
        """Write to a temporary name, fsync, then link into place (fails if it exists)."""
        path = self.path(uri)
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # atomic, and never replaces an existing file
        finally:
            os.unlink(tmp)
        _fsync_dir(directory)

    def rename(self, src: str, dst: str) -> None:
        s, d = self.path(src), self.path(dst)
        if os.path.lexists(d):
            raise FileExistsError(d)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        os.rename(s, d)

    def delete(self, uri: str) -> None:
        path = self.path(uri)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_Method = TypeVar("_Method", bound=Callable[..., Any])


def hadoop_error(uri: str, exc: BaseException) -> OutputUnavailableError:
    """A Java exception of Hadoop's client (through py4j) as one line that says what
    happened to the output at ``uri`` and what to do."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    authority = urlparse(uri).netloc or uri
    if "safe mode" in text.lower() or "SafeModeException" in text:
        return OutputUnavailableError(
            f"{authority} is in safe mode (read-only), so nothing was written to {uri}; the next run "
            "lands it once the NameNode leaves safe mode (`hdfs dfsadmin -safemode get` says why it is on)"
        )
    if "ConnectException" in text or "UnknownHostException" in text or "NoRouteToHostException" in text:
        return OutputUnavailableError(
            f"cannot reach the NameNode at {authority} for {uri}: {_cause(first)}; nothing was written"
        )
    return OutputUnavailableError(f"the file system of {uri} failed: {_cause(first)}")


def _cause(line: str) -> str:
    """The end of Hadoop's ``Call From a to b failed on ...: java.net.X: reason; For more
    details see: <wiki>`` line: ``java.net.X: reason``."""
    line = line.split("; For more details see:")[0]
    return line.rsplit(" failed on connection exception: ", 1)[-1][:300]


def _mapped(method: _Method) -> _Method:
    """Hadoop's Java exceptions (py4j's ``Py4JJavaError``) leave as
    :class:`OutputUnavailableError`; Python's own (``FileExistsError``) pass."""

    @functools.wraps(method)
    def call(self: Any, uri: str, *args: Any) -> Any:
        try:
            return method(self, uri, *args)
        except Exception as exc:
            if type(exc).__name__ != "Py4JJavaError":
                raise
            raise hadoop_error(uri, exc) from None

    return call  # type: ignore[return-value]


class HadoopFileSystem:
    """Any Hadoop filesystem through Spark's JVM (``org.apache.hadoop.fs.FileSystem``).

    Every operation turns the client's Java exceptions into one-line
    :class:`OutputUnavailableError`: an unreachable NameNode, safe mode.
    """

    def __init__(self, spark: Any):
        self._jvm = spark._jvm
        self._conf = spark._jsc.hadoopConfiguration()

    def _fs(self, uri: str) -> tuple[Any, Any]:
        path = self._jvm.org.apache.hadoop.fs.Path(uri)
        return path.getFileSystem(self._conf), path

    @_mapped
    def exists(self, uri: str) -> bool:
        fs, path = self._fs(uri)
        return bool(fs.exists(path))

    @_mapped
    def mkdirs(self, uri: str) -> None:
        fs, path = self._fs(uri)
        if not fs.mkdirs(path):
            raise StateError(f"could not create directory {uri}")

    @_mapped
    def list_names(self, uri: str) -> list[str]:
        fs, path = self._fs(uri)
        if not fs.exists(path):
            return []
        return sorted(str(s.getPath().getName()) for s in fs.listStatus(path))

    @_mapped
    def list_files(self, uri: str) -> list[FileInfo]:
        fs, path = self._fs(uri)
        if not fs.exists(path):
            return []
        out = []
        it = fs.listFiles(path, True)
        while it.hasNext():
            status = it.next()
            out.append(
                FileInfo(
                    _qualified_to(uri, str(status.getPath().toString())),
                    int(status.getLen()),
                    int(status.getModificationTime()) * 1_000_000,  # milliseconds
                )
            )
        return sorted(out)

    @_mapped
    def size(self, uri: str) -> int | None:
        fs, path = self._fs(uri)
        if not fs.exists(path):
            return None
        return int(fs.getFileStatus(path).getLen())

    @_mapped
    def read_bytes(self, uri: str) -> bytes:
        fs, path = self._fs(uri)
        stream = fs.open(path)
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    @_mapped
    def read_range(self, uri: str, offset: int, length: int) -> bytes:
        fs, path = self._fs(uri)
        stream = fs.open(path)
        try:
            stream.seek(offset)
            available = max(0, int(fs.getFileStatus(path).getLen()) - offset)
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream, min(length, available)))
        finally:
            stream.close()

    @_mapped
    def create_new(self, uri: str, data: bytes) -> None:
        fs, path = self._fs(uri)
        tmp = self._jvm.org.apache.hadoop.fs.Path(path.getParent(), f".{path.getName()}.tmp")
        fs.delete(tmp, False)
        out = fs.create(tmp, False)
        try:
            out.write(bytearray(data))
            out.hsync()
        finally:
            out.close()
        if fs.exists(path) or not fs.rename(tmp, path):
            fs.delete(tmp, False)
            raise FileExistsError(uri)

    @_mapped
    def rename(self, src: str, dst: str) -> None:
        fs, s = self._fs(src)
        _, d = self._fs(dst)
        if fs.exists(d):
            raise FileExistsError(dst)
        parent = d.getParent()
        if parent is not None:
            fs.mkdirs(parent)
        if not fs.rename(s, d):
            raise StateError(f"rename {src} -> {dst} failed (source missing or destination exists)")

    @_mapped
    def delete(self, uri: str) -> None:
        fs, path = self._fs(uri)
        fs.delete(path, True)


def _qualified_to(listed_root: str, qualified: str) -> str:
    """Hadoop qualifies listed paths (``file:/x`` for ``file:///x``); map them back to the
    form of the URI that was listed so :func:`relative` works."""
    if qualified.startswith("file:/") and not qualified.startswith("file:///") and listed_root.startswith("file:///"):
        return "file://" + qualified[len("file:") :]
    return qualified


def filesystem_for(uri: str, kind: str = "auto", spark: Any = None) -> FileSystem:
    """The filesystem for an output URI: ``local`` for file:// (auto), Hadoop otherwise."""
    scheme = urlparse(uri).scheme
    if kind == "local" or (kind == "auto" and scheme == "file"):
        return LocalFileSystem()
    if spark is None:
        raise StateError(f"{uri}: a {scheme}:// output needs Spark's Hadoop client")
    return HadoopFileSystem(spark)
