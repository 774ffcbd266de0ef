"""JVM options for the short-lived JVMs of tests, benchmarks and the demo.

ZooKeeper test servers and Spark jobs of a few seconds to a few minutes spend much of
their CPU compiling: C2, the optimising JIT, compiles hot methods again after C1 did,
and the parallel GC keeps a thread per core. On a 2-core machine running a test suite
that is CPU taken from everything else. Measured with ``tests/loader/test_load_
integration.py`` (7 tests, one Spark session): the session JVM used 72 s of CPU with
the defaults, 36 s with these options, and the tests took 65 s instead of 75 s; the
ZooKeeper of ``tests/groups/test_group_api.py`` 2.6 s instead of 4.0 s.

A long-running production JVM wants the defaults: C2's code pays off over hours.
"""

from __future__ import annotations

QUICK_JVM_OPTIONS: tuple[str, ...] = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
"""C1 only, and the serial garbage collector."""

QUICK_JVM_OPTIONS_LINE = " ".join(QUICK_JVM_OPTIONS)
"""The same, as one ``extraJavaOptions`` value."""

__all__ = ["QUICK_JVM_OPTIONS", "QUICK_JVM_OPTIONS_LINE"]
