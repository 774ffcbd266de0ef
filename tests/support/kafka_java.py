"""Kafka's own Java clients and tools in one JVM, driven by a test (KafkaJavaDriver.java).

A tool invocation as its own JVM (what ``kafka-topics.sh`` does) costs 1-3 s of CPU;
the driver runs every client and tool of a test module in one JVM, one JSON command per
line in, one JSON answer per line out. Its classes are compiled once per version of
its source (the JVM's own ``jdk.compiler`` module, so a JRE will do, into
:func:`broker.testing.jvm.cache_dir`); its classpath is Apache
Kafka's jars (:mod:`broker.testing.kafka_jars`); its JVM options are the suite's
(:data:`broker.testing.jvm.QUICK_JVM_OPTIONS`: C1 only, serial GC).
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

from broker.testing import kafka_jars
from broker.testing.jvm import QUICK_JVM_OPTIONS, cache_dir, java_executable, java_major

SOURCE = Path(__file__).with_name("KafkaJavaDriver.java")
MAIN_CLASS = "KafkaJavaDriver"
MIN_JAVA = 17
"""Kafka 4's clients need Java 11, its tools 17."""

COMPILE_TIMEOUT = 120.0
READY_TIMEOUT = 60.0


def unavailable_reason() -> str | None:
    """One line saying why the driver cannot run here (no Java 17, no jars), or None."""
    java = java_executable()
    if java is None:
        return "no java: run scripts/install-system-deps.sh"
    major = java_major(java)
    if major is None or major < MIN_JAVA:
        return f"{java} is Java {major or '?'}; Kafka {kafka_jars.KAFKA_VERSION}'s tools need {MIN_JAVA}+"
    if not kafka_jars.resolved():
        return kafka_jars.missing_reason()
    return None


def compiled_classes() -> Path:
    """The folder of the driver's classes, compiled now if this source never was."""
    java = java_executable()
    assert java is not None
    digest = hashlib.sha256(SOURCE.read_bytes() + kafka_jars.KAFKA_VERSION.encode()).hexdigest()[:16]
    out = cache_dir() / f"kafka-java-driver-{digest}"
    if (out / f"{MAIN_CLASS}.class").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))  # workers may compile at once
    # javac as a module of the JVM itself: Debian's JRE (no javac command) has it too.
    # It does not expand the launcher's "dir/*" classpath form: every jar by name.
    jars = ":".join(str(jar) for jar in sorted(kafka_jars.jar_dir().glob("*.jar")))
    javac = [str(java), *QUICK_JVM_OPTIONS, "-m", "jdk.compiler/com.sun.tools.javac.Main"]
    result = subprocess.run(
        [*javac, "-nowarn", "-d", str(partial), "-cp", jars, str(SOURCE)],
        capture_output=True,
        text=True,
        timeout=COMPILE_TIMEOUT,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"javac {SOURCE.name} failed:\n{result.stdout}{result.stderr}")
    try:
        partial.rename(out)
    except OSError:  # another worker's is there already
        shutil.rmtree(partial, ignore_errors=True)
    return out


class JavaError(AssertionError):
    """A command the Java side answered with an exception (``error``: its class)."""

    def __init__(self, op: str, args: dict[str, Any], answer: dict[str, Any]):
        self.error: str = answer.get("error", "")
        super().__init__(f"{op} {args}: {self.error}: {answer.get('message')}")


class NotServed(JavaError):
    """The client's UnsupportedVersionException: logferry does not serve the api (or
    version) the Java client needs; ``xfail(raises=NotServed)`` pins a gap to that."""


class JavaDriver:
    """One driver JVM talking to ``bootstrap`` (Kafka clients' ``bootstrap.servers``);
    its stderr (log4j, stack traces) goes to ``log``."""

    def __init__(self, bootstrap: str, log: Path):
        self.log = log
        self._stderr = log.open("ab")
        classpath = f"{compiled_classes()}:{kafka_jars.classpath()}"
        self.process = subprocess.Popen(
            [str(java_executable()), *QUICK_JVM_OPTIONS, "-cp", classpath, MAIN_CLASS, bootstrap],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.cpu_seconds = 0.0
        """The JVM's CPU (user and system) once closed."""
        self._lines: queue.Queue[str | None] = queue.Queue()
        assert self.process.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True)
        self._reader.start()
        ready = self._next(READY_TIMEOUT)
        assert ready.get("ready"), ready

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _next(self, timeout: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"the Java driver did not answer in {timeout:.0f} s; its log: {self.log}") from None
        if line is None:
            raise RuntimeError(f"the Java driver exited ({self.process.wait()}); its log: {self.log}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def call(self, op: str, timeout: float = 90.0, **args: Any) -> dict[str, Any]:
        """Run one command (see KafkaJavaDriver.java); its answer, ``ok`` false with the
        Java exception's ``error`` class and ``message`` when it failed."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.process.stdin.flush()
        return self._next(timeout)

    def ok(self, op: str, **args: Any) -> dict[str, Any]:
        """:meth:`call`, failing with the Java exception when it did not succeed."""
        answer = self.call(op, **args)
        if not answer["ok"]:
            unsupported = answer.get("error") == "org.apache.kafka.common.errors.UnsupportedVersionException"
            raise (NotServed if unsupported else JavaError)(op, args, answer)
        return answer

    def tool(self, main_class: str, *args: str, stdin: str = "") -> dict[str, Any]:
        """Run a tool's main class with ``args`` (``{bootstrap}`` replaced by the
        driver's); ``exit``, ``stdout``, ``stderr``."""
        return self.ok("tool", **{"class": main_class, "args": list(args), "stdin": stdin})

    def close(self) -> float:
        """Close stdin (the driver closes its clients and exits; killed after 15 s);
        returns the JVM's CPU seconds over its life, also written at the end of its log."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        deadline = time.monotonic() + 15
        while True:  # os.wait4, not Popen.wait: the exit and the JVM's own rusage at once
            pid, status, usage = os.wait4(self.process.pid, os.WNOHANG)
            if pid:
                self.process.returncode = os.waitstatus_to_exitcode(status)
                self.cpu_seconds = usage.ru_utime + usage.ru_stime
                break
            if time.monotonic() > deadline:
                self.process.kill()
                self.process.wait()
                break
            time.sleep(0.05)
        self._reader.join(timeout=5)  # it reads to the end the JVM's exit closed
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.write(f"\nkafka_java: the driver JVM used {self.cpu_seconds:.2f} s of CPU\n".encode())
        self._stderr.close()
        return self.cpu_seconds


__all__ = ["JavaDriver", "JavaError", "NotServed", "compiled_classes", "unavailable_reason"]
