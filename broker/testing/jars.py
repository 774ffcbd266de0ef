"""Where a set of Java jars resolved from Maven Central is, for whatever runs them.

``scripts/install-jars.sh <set>`` (run by ``make``) resolves one pom per set into
``benchmarks/.cache/<set>-<version>/`` in the checkout (git-ignored), or under
``$LOGFERRY_BENCH_CACHE``; it writes ``.resolved`` in the folder last, and when it
cannot get the jars (no Maven, no Maven Central) its one-line reason next to it,
``<set>-<version>.unavailable``, for the callers to show. The classpath of a set is
every jar of its folder. Sets: Apache Kafka (:mod:`broker.testing.kafka_jars`) and
Apache Hadoop (:mod:`broker.testing.hdfs`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO / "scripts" / "install-jars.sh"
RESOLVED = ".resolved"
"""Marker file the install script writes into the jar folder once every jar is there."""
CACHE_ENV = "LOGFERRY_BENCH_CACHE"


@dataclass(frozen=True)
class JarSet:
    """One folder of jars: ``name`` is the install script's argument (``apache-hadoop``)."""

    name: str
    label: str
    """How messages call it (``Apache Hadoop``)."""
    version: str

    def jar_dir(self) -> Path:
        """The folder of jars (complete when :meth:`resolved`)."""
        root = os.environ.get(CACHE_ENV) or str(REPO / "benchmarks" / ".cache")
        return Path(root) / f"{self.name}-{self.version}"

    def resolved(self) -> bool:
        """Every jar is in :meth:`jar_dir` (the install script finished)."""
        return (self.jar_dir() / RESOLVED).exists()

    def classpath(self) -> str:
        """Every jar of :meth:`jar_dir`, as one ``-cp`` entry (the JVM expands the ``*``)."""
        return str(self.jar_dir() / "*")

    def missing_reason(self) -> str:
        """Why the jars are not there, in one line: the install script's own reason when
        it ran and failed, else that it has not run."""
        folder = self.jar_dir()
        note = folder.with_name(folder.name + ".unavailable")
        if note.is_file():
            return f"no {self.label} {self.version} jars: {note.read_text().strip()}"
        return f"no {self.label} {self.version} jars in {folder}: run {INSTALL_SCRIPT} {self.name}"


__all__ = ["CACHE_ENV", "INSTALL_SCRIPT", "RESOLVED", "REPO", "JarSet"]
