"""Where the console reads a lake's files: a local (or mounted) folder, or HDFS over WebHDFS.

The landed tier's readers (:mod:`console.landed`, :mod:`console.iceberg_tables`) know
no file system: they list folders and read small files through :class:`LakeFiles`,
which this module makes for a lake's location (:func:`lake_files`):

- ``/data/lake`` or ``file:///data/lake``: the local file system (:class:`LocalFiles`);
- ``hdfs://namenode:8020/data/lake``: the NameNode's WebHDFS endpoint
  (:class:`HdfsFiles`, plain HTTP GETs through :class:`broker.common.webhdfs.WebHdfs`),
  ``http://namenode:9870`` unless the lake's ``webhdfs`` names another.

Locations are the lake's own and the URIs an Iceberg table's metadata names its files
by: Hadoop writes local ones as ``file:/data/...`` (one slash), HDFS ones as
``hdfs://namenode:8020/...``; both are read here, relative to nothing.

Errors are the standard library's, each one line naming the location: a missing file or
folder is :class:`FileNotFoundError`, anything else :class:`OSError`.
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path
from typing import NamedTuple, Protocol

from broker.common.webhdfs import DEFAULT_HTTP_PORT, WebHdfs


class Entry(NamedTuple):
    """One entry of a folder."""

    name: str
    directory: bool


class LakeFiles(Protocol):
    """Read-only access to a lake's files (locations: see the module's docstring)."""

    def list(self, location: str) -> list[Entry]:
        """The entries of the folder ``location``."""
        ...

    def read(self, location: str) -> bytes:
        """The bytes of the file ``location``."""
        ...


def join(location: str, *parts: str) -> str:
    """``location`` with ``parts`` appended, ``/``-separated."""
    return "/".join([location.rstrip("/"), *(p.strip("/") for p in parts)])


def local_path(location: str) -> Path:
    """A local location as a path: ``/x``, ``file:/x``, ``file:///x`` or ``file://localhost/x``."""
    if not location.startswith("file:"):
        return Path(location)
    parsed = urllib.parse.urlsplit(location)
    return Path(urllib.parse.unquote(parsed.path))


class LocalFiles:
    """The local file system (a mounted HDFS too)."""

    def list(self, location: str) -> list[Entry]:
        path = local_path(location)
        try:
            with os.scandir(path) as entries:
                return [Entry(e.name, e.is_dir()) for e in entries]
        except FileNotFoundError:
            raise FileNotFoundError(f"{location} does not exist") from None
        except OSError as exc:
            raise OSError(f"listing {location}: {exc.strerror or exc}") from None

    def read(self, location: str) -> bytes:
        try:
            return local_path(location).read_bytes()
        except FileNotFoundError:
            raise FileNotFoundError(f"{location} does not exist") from None
        except OSError as exc:
            raise OSError(f"reading {location}: {exc.strerror or exc}") from None


class HdfsFiles:
    """An HDFS through its NameNode's WebHDFS endpoint. Locations are ``hdfs://`` URIs
    or absolute paths; a URI's authority is not checked (a NameNode has several names:
    ``localhost``, its host name, its address), every one is read from this endpoint."""

    def __init__(self, webhdfs: WebHdfs):
        self.webhdfs = webhdfs

    @staticmethod
    def path(location: str) -> str:
        """The absolute HDFS path of ``location``."""
        if location.startswith("/"):
            return location
        parsed = urllib.parse.urlsplit(location)
        if parsed.scheme != "hdfs":
            raise OSError(f"{location} is not an hdfs:// location (this lake is read over WebHDFS)")
        return urllib.parse.unquote(parsed.path) or "/"

    def list(self, location: str) -> list[Entry]:
        return [Entry(s.name, s.directory) for s in self.webhdfs.list_status(self.path(location))]

    def read(self, location: str) -> bytes:
        return self.webhdfs.open(self.path(location))


def default_webhdfs(location: str) -> str:
    """The WebHDFS address of an ``hdfs://`` lake: its NameNode's host on port 9870."""
    host = urllib.parse.urlsplit(location).hostname or "localhost"
    return f"http://{host}:{DEFAULT_HTTP_PORT}"


def lake_files(location: str, webhdfs: str | None = None) -> LakeFiles:
    """The file access for a lake at ``location`` (``webhdfs``: an ``hdfs://`` lake's
    WebHDFS address, :func:`default_webhdfs` when None)."""
    if location.startswith("hdfs://"):
        return HdfsFiles(WebHdfs(webhdfs or default_webhdfs(location)))
    return LocalFiles()


__all__ = ["Entry", "HdfsFiles", "LakeFiles", "LocalFiles", "default_webhdfs", "join", "lake_files", "local_path"]
