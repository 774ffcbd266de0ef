"""The example configs of ``etc/``, rewritten for one machine.

The demo starts every component from the same files a user copies for a real
deployment, and changes only what must differ on a single machine: ports (free ones
on 127.0.0.1), directories (under the demo's workdir), the ZooKeeper connect string
(the demo's own server, one chroot per datacenter; metrics ports are free ones too), the
agent's host name, and a few
timings a five-minute demo needs shorter (the audit window, the loader's settle time).
Every such change is a visible line in :func:`agent_config`, :func:`mirror_config` or
:func:`loader_config`; everything else passes through untouched.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from broker.common.config import dumps, read
from broker.testing.jvm import spark_java_options_line

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = Path(__file__).resolve().parent


def find_examples(root: Path = ROOT, package_dir: Path = PACKAGE_DIR) -> Path:
    """Where the example configs are: the checkout's ``etc/`` or the wheel's copy.

    In a source checkout (``root`` holds ``pyproject.toml`` and ``etc/``) the demo
    reads ``etc/`` itself, so an edited example is what runs. An installed wheel
    carries the same files as package data in ``demo/etc`` (see pyproject.toml);
    ``root`` is then site-packages, whose ``etc`` (if any) is not ours.
    """
    checkout = root / "etc"
    if (root / "pyproject.toml").is_file() and (checkout / "agent.toml").is_file():
        return checkout
    return package_dir / "etc"


ETC = find_examples()

LIVE_CHROOT = "/logferry/live"
ANALYSIS_CHROOT = "/logferry/analysis"

# -- TOML in and out -----------------------------------------------------------------------------


def load(path: Path) -> dict[str, Any]:
    """A TOML file as a dict (unvalidated: the demo rewrites it; its loader checks it)."""
    return read(path)[0]


def write(path: Path, doc: Mapping[str, Any], source: Path) -> Path:
    """Write ``doc`` to ``path`` with a header naming the example it came from."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        origin = Path("etc") / source.relative_to(ETC)
    except ValueError:
        origin = source
    path.write_text(
        f"# Written by `logferry demo` from {origin}: ports, paths and the\n"
        f"# ZooKeeper address rewritten for this machine.\n" + dumps(doc)
    )
    return path


# -- brokers -------------------------------------------------------------------------------------

MACHINE_KEYS = ("id", "host", "port", "log_dirs", "zk_connect", "metrics_port")
"""Broker keys the demo sets itself (localrun's BrokerProcess writes them)."""


def broker_templates(datacenter: str) -> list[Path]:
    """``etc/<datacenter>/broker-*.toml``, in id order."""
    return sorted((ETC / datacenter).glob("broker-*.toml"))


def broker_settings(template: Path) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """(id, [broker] settings without the machine keys, [log] settings) of an example.

    The machine keys (ports included: several brokers share one machine) are the
    demo's :class:`~demo.processes.BrokerChild`'s to choose.
    """
    doc = load(template)
    broker = dict(doc.get("broker", {}))
    broker_id = int(broker["id"])
    for key in MACHINE_KEYS:
        broker.pop(key, None)
    return broker_id, broker, dict(doc.get("log", {}))


# -- agents --------------------------------------------------------------------------------------


def agent_template() -> Path:
    return ETC / "agent.toml"


def agent_topics(doc: Mapping[str, Any]) -> list[str]:
    """The topics an agent config publishes to, in source order."""
    topics: list[str] = []
    for source in doc.get("sources", []):
        if source["topic"] not in topics:
            topics.append(source["topic"])
    return topics


def agent_config(
    template: Mapping[str, Any],
    host: str,
    root: Path,
    state_dir: Path,
    zk: str,
    audit_window_s: float,
    metrics_port: int | None = None,
) -> dict[str, Any]:
    """One simulated host's agent: its name, state dir, and its files under ``root``.

    A host's files live under ``root`` as if it were the host's ``/``: the example's
    ``/var/log/app/**/*.log`` becomes ``<root>/var/log/app/**/*.log``. Its metrics
    endpoint listens on 127.0.0.1:``metrics_port`` (None: off).
    """
    doc = copy.deepcopy(dict(template))
    doc["host"] = host
    doc["state_dir"] = str(state_dir)
    doc["cluster"] = {"zk": zk}
    doc.pop("metrics", None)  # one fixed port for every host cannot work on one machine
    if metrics_port is not None:
        doc["metrics"] = {"port": metrics_port, "bind": "127.0.0.1"}
    doc.setdefault("audit", {})["window_s"] = audit_window_s
    for source in doc.get("sources", []):
        for key in ("pattern", "exclude"):
            if key in source:
                value = source[key]
                rebased = [str(root) + p for p in ([value] if isinstance(value, str) else value)]
                source[key] = rebased[0] if isinstance(value, str) else rebased
        source["start_at"] = "beginning"
    return doc


def source_paths(template: Mapping[str, Any]) -> dict[str, str]:
    """Topic -> the first concrete file path a host should write for it.

    A pattern's wildcards are replaced by a plain name: ``/var/log/app/**/*.log`` ->
    ``/var/log/app/app.log``.
    """
    paths: dict[str, str] = {}
    for source in template.get("sources", []):
        pattern = source["pattern"]
        pattern = pattern if isinstance(pattern, str) else pattern[0]
        parts = [p for p in pattern.split("/") if p and p != "**"]
        name = source.get("name", source["topic"])
        parts = [p.replace("*", name) if "*" in p else p for p in parts]
        paths.setdefault(source["topic"], "/" + "/".join(parts))
    return paths


# -- mirror and loader -----------------------------------------------------------------------------


def mirror_template() -> Path:
    return ETC / "mirror.toml"


def _replace_zk(doc: dict[str, Any], chroot_to_connect: Mapping[str, str]) -> None:
    """Rewrite every ``zk`` value naming a known chroot to the demo's connect string."""
    for key, value in list(doc.items()):
        if isinstance(value, dict):
            _replace_zk(value, chroot_to_connect)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    _replace_zk(item, chroot_to_connect)
        elif isinstance(value, str) and key in ("zk", "zk_connect"):
            for chroot, connect in chroot_to_connect.items():
                if value.endswith(chroot):
                    doc[key] = connect


DEFAULT_MIRROR: dict[str, Any] = {
    "source": {"zk_connect": "127.0.0.1:2181" + LIVE_CHROOT},
    "target": {"zk_connect": "127.0.0.1:2181" + ANALYSIS_CHROOT},
    "mirror": {"group": "logferry-mirror", "pattern": ".*"},
}
"""Used only while etc/mirror.toml does not exist."""


def mirror_config(
    template: Mapping[str, Any], live_zk: str, analysis_zk: str, status_file: Path, metrics_port: int = 0
) -> dict[str, Any]:
    """The mirror from the live cluster to the analysis cluster on this machine
    (its metrics on 127.0.0.1:``metrics_port``; 0: off)."""
    doc = copy.deepcopy(dict(template))
    _replace_zk(doc, {LIVE_CHROOT: live_zk, ANALYSIS_CHROOT: analysis_zk})
    metrics = doc.setdefault("metrics", {})
    metrics["port"] = metrics_port
    metrics["host"] = "127.0.0.1"
    metrics["status_file"] = str(status_file)
    return doc


def loader_template() -> Path:
    return ETC / "loader.toml"


def loader_config(template: Mapping[str, Any], zk: str, output: Path, topics: list[str]) -> dict[str, Any]:
    """The landing job reading ``zk`` and writing Parquet under ``output``."""
    doc = copy.deepcopy(dict(template))
    source = doc.setdefault("source", {})
    source.pop("brokers", None)
    source["zk"] = zk
    source["topics"] = list(topics)
    decode = source.get("decode_agent_records")
    if isinstance(decode, list):
        source["decode_agent_records"] = list(topics)
    doc.setdefault("output", {})["uri"] = output.resolve().as_uri()
    doc.setdefault("dedup", {})["enabled"] = True  # copies of landed records are dropped
    audit = doc.setdefault("audit", {})
    audit["settle_minutes"] = 0  # the demo's hours have just happened
    audit["lookback_hours"] = 2
    spark = doc.setdefault("spark", {})
    spark["master"] = "local[2]"
    spark["driver_memory"] = "1g"
    conf = spark.setdefault("conf", {})
    conf["spark.sql.shuffle.partitions"] = "2"
    conf["spark.ui.enabled"] = "false"
    conf["spark.ui.showConsoleProgress"] = "false"
    conf["spark.driver.extraJavaOptions"] = spark_java_options_line()  # loads of seconds: C1, class archive
    return doc


def land_as_iceberg(doc: dict[str, Any], warehouse: str, runtime_jar: Path) -> dict[str, Any]:
    """``doc`` (from :func:`loader_config`) landing an Iceberg table per topic into the
    Hadoop catalog ``warehouse`` (the demo's HDFS), with Iceberg's Spark runtime on
    Spark's classpath; the Parquet-only output keys go (Iceberg's writer decides files)."""
    output = doc.setdefault("output", {})
    output["uri"] = warehouse
    output["format"] = "iceberg"
    for key in ("files_per_hour", "max_records_per_file"):
        output.pop(key, None)
    doc.setdefault("spark", {}).setdefault("conf", {})["spark.jars"] = str(runtime_jar)
    return doc
