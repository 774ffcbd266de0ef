"""hadoop_loader.zipcache: a zip importer re-reads its archive only when it changed."""

from __future__ import annotations

import importlib
import sys
import zipfile
import zipimport
from pathlib import Path

import pytest

from hadoop_loader import zipcache

pytestmark = pytest.mark.skipif(sys.version_info >= (3, 12), reason="CPython 3.12 invalidates zip caches lazily")


def _archive(path: Path, modules: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in modules.items():
            zf.writestr(name, text)


def test_unchanged_archives_are_read_once_per_archive_and_changed_ones_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "pkgs.zip"
    _archive(archive, {"zc_pkg/__init__.py": "", "zc_pkg/sub/__init__.py": "", "zc_pkg/sub/mod.py": "X = 1\n"})
    monkeypatch.syspath_prepend(str(archive))
    monkeypatch.setattr(zipimport.zipimporter, "invalidate_caches", zipimport.zipimporter.invalidate_caches)
    monkeypatch.setattr(zipcache, "_stamps", {})
    importlib.import_module("zc_pkg.sub.mod")  # importers for the archive, zc_pkg/ and zc_pkg/sub/
    sys.modules.pop("zc_pkg.sub.mod")
    reads: list[str] = []
    real_read = zipimport._read_directory  # type: ignore[attr-defined]

    def counting_read(path: str) -> object:
        reads.append(path)
        return real_read(path)

    monkeypatch.setattr(zipimport, "_read_directory", counting_read)
    importers = [v for v in sys.path_importer_cache.values() if getattr(v, "archive", None) == str(archive)]
    assert len(importers) >= 3

    importlib.invalidate_caches()
    assert reads.count(str(archive)) == len(importers)  # CPython 3.11's eager re-read, per importer

    zipcache.install()
    zipcache.install()  # idempotent
    reads.clear()
    importlib.invalidate_caches()  # first time through the patch: one read for the archive
    importlib.invalidate_caches()
    importlib.invalidate_caches()
    assert reads.count(str(archive)) == 1

    _archive(archive, {"zc_pkg/__init__.py": "", "zc_pkg/sub/__init__.py": "", "zc_pkg/sub/mod.py": "X = 22\n"})
    reads.clear()
    importlib.invalidate_caches()
    assert reads.count(str(archive)) == 1
    assert importlib.import_module("zc_pkg.sub.mod").X == 22  # the new archive's content is what imports
    for name in ("zc_pkg.sub.mod", "zc_pkg.sub", "zc_pkg"):
        sys.modules.pop(name, None)
