"""Reading HDFS over WebHDFS: the NameNode's REST API, plain HTTP GETs (no JVM, no Hadoop client).

Read-only, four operations (``http://<namenode http address>/webhdfs/v1<path>?op=...``):

- ``LISTSTATUS``: a folder's entries (:meth:`WebHdfs.list_status`);
- ``GETFILESTATUS``: one path's (:meth:`WebHdfs.status`);
- ``GETCONTENTSUMMARY``: the files below a folder (:meth:`WebHdfs.file_count`);
- ``OPEN``: a file's bytes (:meth:`WebHdfs.open`); the NameNode redirects to a DataNode
  holding the blocks, which urllib follows.

For a Python process that reads a few small files on HDFS without Spark: the console's
landed tier (an Iceberg table's metadata), the demo and the tests
(:class:`broker.testing.hdfs.LocalHdfs`). The address is the NameNode's
``dfs.namenode.http-address`` (port 9870 unless configured otherwise), not the ``hdfs://``
RPC port.

Errors are the standard library's, each one line naming the path: a path that does not
exist is :class:`FileNotFoundError` (HTTP 404, WebHDFS's ``FileNotFoundException``);
a NameNode that does not answer, or answers anything else, :class:`OSError`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

DEFAULT_HTTP_PORT = 9870
"""Hadoop's default ``dfs.namenode.http-address`` port."""
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class FileStatus:
    """One entry of a folder, as WebHDFS's ``FileStatus`` tells it."""

    name: str
    """The entry's name in its folder (``pathSuffix``; empty for GETFILESTATUS)."""
    directory: bool
    length: int
    """Bytes (0 for a folder)."""
    modified_ms: int
    """Last modification, ms since the epoch."""

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> FileStatus:
        return cls(
            str(raw.get("pathSuffix", "")),
            raw.get("type") == "DIRECTORY",
            int(raw.get("length", 0)),
            int(raw.get("modificationTime", 0)),
        )


def http_base(address: str) -> str:
    """``http://host:port`` from ``host:port`` or a URL (trailing slash dropped)."""
    address = address.strip().rstrip("/")
    return address if "://" in address else f"http://{address}"


class WebHdfs:
    """The WebHDFS endpoint of one NameNode (``http://host:port`` or ``host:port``)."""

    def __init__(self, address: str, timeout: float = TIMEOUT_S):
        self.base = http_base(address)
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"WebHdfs({self.base!r})"

    def url(self, path: str, op: str, **params: Any) -> str:
        """The request URL of ``op`` on the absolute HDFS path ``path``."""
        query = urllib.parse.urlencode({"op": op, **params})
        return f"{self.base}/webhdfs/v1{urllib.parse.quote('/' + path.lstrip('/'))}?{query}"

    def _get(self, path: str, op: str, limit: int | None = None, **params: Any) -> bytes:
        url = self.url(path, op, **params)
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as answer:  # noqa: S310 (a configured http URL)
                return bytes(answer.read() if limit is None else answer.read(limit))
        except urllib.error.HTTPError as exc:
            kind, message = _remote_exception(exc)
            exc.close()
            if exc.code == 404 or kind == "FileNotFoundException":
                raise FileNotFoundError(f"{path} does not exist (WebHDFS {self.base})") from None
            what = f"HTTP {exc.code} {kind or exc.reason}"
            raise OSError(f"WebHDFS {op} {path} on {self.base}: {what}: {message}") from None
        except urllib.error.URLError as exc:
            raise OSError(f"cannot reach WebHDFS at {self.base} ({op} {path}): {exc.reason}") from None
        except (TimeoutError, ConnectionError) as exc:
            raise OSError(f"WebHDFS at {self.base} ({op} {path}): {exc}") from None

    def list_status(self, path: str) -> list[FileStatus]:
        """The entries of the folder ``path`` (a file's own status when ``path`` is a file)."""
        body = self._json(path, "LISTSTATUS")
        try:
            return [FileStatus.from_json(raw) for raw in body["FileStatuses"]["FileStatus"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise OSError(f"WebHDFS LISTSTATUS {path} on {self.base}: no FileStatuses ({exc})") from None

    def status(self, path: str) -> FileStatus:
        """``path``'s status (FileNotFoundError when there is none)."""
        body = self._json(path, "GETFILESTATUS")
        try:
            return FileStatus.from_json(body["FileStatus"])
        except (KeyError, TypeError, ValueError) as exc:
            raise OSError(f"WebHDFS GETFILESTATUS {path} on {self.base}: no FileStatus ({exc})") from None

    def file_count(self, path: str) -> int:
        """Files below the folder ``path``, counted recursively (FileNotFoundError when
        there is none)."""
        body = self._json(path, "GETCONTENTSUMMARY")
        try:
            return int(body["ContentSummary"]["fileCount"])
        except (KeyError, TypeError, ValueError) as exc:
            raise OSError(f"WebHDFS GETCONTENTSUMMARY {path} on {self.base}: no fileCount ({exc})") from None

    def open(self, path: str, limit: int | None = None) -> bytes:
        """The bytes of the file ``path`` (at most ``limit`` when given)."""
        return self._get(path, "OPEN", limit, **({} if limit is None else {"length": limit}))

    def _json(self, path: str, op: str) -> dict[str, Any]:
        raw = self._get(path, op)
        try:
            body = json.loads(raw)
        except ValueError:
            raise OSError(f"WebHDFS {op} {path} on {self.base}: not JSON: {raw[:80]!r}") from None
        if not isinstance(body, dict):
            raise OSError(f"WebHDFS {op} {path} on {self.base}: not a JSON object: {raw[:80]!r}")
        return body


def _remote_exception(exc: urllib.error.HTTPError) -> tuple[str, str]:
    """(exception class, message) of a WebHDFS error answer (``RemoteException``)."""
    try:
        remote = json.loads(exc.read() or b"{}").get("RemoteException", {})
        return str(remote.get("exception", "")), str(remote.get("message", "")).splitlines()[0]
    except (ValueError, AttributeError, OSError, IndexError):
        return "", ""


__all__ = ["DEFAULT_HTTP_PORT", "FileStatus", "WebHdfs", "http_base"]
