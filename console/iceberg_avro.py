"""Iceberg's Avro files, decoded by pyiceberg: the one module of the console that imports it.

An Iceberg table's manifest list and manifests are Avro container files; pyiceberg (the
``console`` extra, without its pyarrow extra) decodes them with its own reader (a
compiled decoder in its wheels). Its file access is replaced by the lake's
(:mod:`console.lake_files`): pyiceberg gets the bytes, never a path to open itself.

:mod:`console.iceberg_tables` imports this module the first time it reads a table (the
import costs about a second of CPU; a console without an Iceberg lake never pays it).
What it decodes comes back as plain tuples; pyiceberg's errors become ValueError with a
line naming the file, IO errors stay OSError.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile
from pyiceberg.manifest import ManifestFile, read_manifest_list


class _Bytes(InputFile):
    """A file already read."""

    def __init__(self, location: str, data: bytes):
        super().__init__(location)
        self._data = data

    def __len__(self) -> int:
        return len(self._data)

    def exists(self) -> bool:
        return True

    def open(self, seekable: bool = True) -> InputStream:
        return io.BytesIO(self._data)


class _LakeIO(FileIO):
    """pyiceberg's file access over the lake's (read-only)."""

    def __init__(self, read: Callable[[str], bytes]):
        super().__init__({})
        self._read = read

    def new_input(self, location: str) -> InputFile:
        return _Bytes(location, self._read(location))

    def new_output(self, location: str) -> OutputFile:
        raise OSError(f"the console writes nothing ({location})")

    def delete(self, location: str | InputFile | OutputFile) -> None:
        raise OSError("the console deletes nothing")


def manifest_list(location: str, data: bytes) -> list[tuple[str, int, int, Any]]:
    """The manifests of a manifest list: ``(location, content, partition spec id, handle)``
    (``content`` 0 for data files, 1 for delete files; ``handle`` for :func:`manifest_entries`)."""
    try:
        return [
            (m.manifest_path, int(m.content), int(m.partition_spec_id), m)
            for m in read_manifest_list(_Bytes(location, data))
        ]
    except OSError:
        raise
    except Exception as exc:  # pyiceberg's, whatever the bytes made it raise: one line naming the file
        raise ValueError(f"manifest list {location} is not readable: {type(exc).__name__}: {exc}") from None


def manifest_entries(handle: Any, read: Callable[[str], bytes]) -> list[tuple[int, int, tuple[Any, ...]]]:
    """Every entry of a manifest (``handle`` from :func:`manifest_list`), DELETED ones too:
    ``(status, record_count, partition tuple)``."""
    manifest: ManifestFile = handle
    try:
        entries = manifest.fetch_manifest_entry(_LakeIO(read), discard_deleted=False)
        return [(int(e.status), int(e.data_file.record_count), _values(e.data_file.partition)) for e in entries]
    except OSError:
        raise
    except Exception as exc:  # as above
        raise ValueError(f"manifest {manifest.manifest_path} is not readable: {type(exc).__name__}: {exc}") from None


def _values(record: Any) -> tuple[Any, ...]:
    """A partition ``Record``'s values in the spec's order."""
    return tuple(record[i] for i in range(len(record)))


__all__ = ["manifest_entries", "manifest_list"]
