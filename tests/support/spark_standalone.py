"""A Spark standalone cluster on loopback for tests: one Master and N Workers, each its
own JVM started with pyspark's ``bin/spark-class``, as docs/deployment.md describes.

Every port is picked free (no fixed ports); web UIs bind to free ports too, since the
standalone daemons have no switch to turn them off. Each daemon runs in its own process
group so that a test can kill a worker together with the executor JVM it started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from broker.testing.jvm import spark_java_options_line
from broker.testing.localrun import free_port


def spark_home() -> Path:
    """pyspark's own distribution (it carries ``bin/spark-class`` and the jars)."""
    import pyspark

    return Path(pyspark.__file__).parent


def spark_env(work: Path) -> dict[str, str]:
    """The environment for spark-class and spark-submit: loopback, this interpreter
    for Python workers, logs and pid files inside ``work``."""
    home = spark_home()
    return dict(
        os.environ,
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(work / "logs"),
        SPARK_PID_DIR=str(work),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_NO_DAEMONIZE="1",
        SPARK_DAEMON_JAVA_OPTS=spark_java_options_line(),
    )


class Daemon:
    """One Master or Worker JVM, its output in ``log``."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path):
        self.name = name
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 - the process's output while it runs; closed in stop()
        self.proc = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            env=env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.text()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: no {needle!r} within {timeout:.0f}s:\n{self.text()[-3000:]}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL the daemon and every process of its group (a worker's executors)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
            except ProcessLookupError:
                pass
        else:  # the daemon is gone; its executors may not be
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self._out.close()


class StandaloneCluster:
    """``with StandaloneCluster(work, workers=2) as cluster: cluster.url``."""

    def __init__(self, work: Path, workers: int = 2, cores: int = 1, memory: str = "768m"):
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        (work / "logs").mkdir(exist_ok=True)
        self.env = spark_env(work)
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.master: Daemon | None = None
        self.workers: list[Daemon] = []
        self._count, self._cores, self._memory = workers, cores, memory

    def __enter__(self) -> StandaloneCluster:
        try:
            self.master = Daemon(
                "master",
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--webui-port",
                    str(free_port()),
                ],
                self.env,
                self.work / "master.out",
            )
            self.master.wait_for("I have been elected leader", 90)
            for i in range(self._count):
                work_dir = self.work / f"worker-{i}"
                work_dir.mkdir(exist_ok=True)
                self.workers.append(
                    Daemon(
                        f"worker {i}",
                        [
                            "org.apache.spark.deploy.worker.Worker",
                            self.url,
                            "--host",
                            "127.0.0.1",
                            "--cores",
                            str(self._cores),
                            "--memory",
                            self._memory,
                            "--webui-port",
                            str(free_port()),
                            "--work-dir",
                            str(work_dir),
                        ],
                        self.env,
                        self.work / f"worker-{i}.out",
                    )
                )
            for worker in self.workers:
                worker.wait_for("Successfully registered with master", 90)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        if self.master is not None:
            self.master.stop()

    def submit(
        self, args: list[str], log: Path, py_files: Path | None = None, timeout: float = 600
    ) -> subprocess.Popen:
        """Start ``spark-submit --master <this cluster> ...`` (the caller waits)."""
        command = [
            str(spark_home() / "bin" / "spark-submit"),
            "--master",
            self.url,
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.executor.memory=512m",
            "--conf",
            f"spark.driver.extraJavaOptions={spark_java_options_line()}",
            "--conf",
            f"spark.executor.extraJavaOptions={spark_java_options_line()}",
            "--conf",
            "spark.task.maxFailures=8",
            "--conf",
            f"spark.pyspark.python={sys.executable}",
        ]
        if py_files is not None:
            command += ["--py-files", str(py_files)]
        with open(log, "wb") as out:  # the child has its own copy of the descriptor
            return subprocess.Popen(
                command + args, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
