"""The agent's counters, their Prometheus families, and the optional HTTP endpoint.

The main loop owns :class:`AgentCounters` and bumps plain ints (cheap, no locks); once a
second it also publishes a :class:`Snapshot` (counters, gauges, per-file lag) by
replacing one reference, which the HTTP thread and the status file read. A reader
may see a snapshot up to a second old, never a torn one.

Endpoints (``[metrics] port``, served by :class:`broker.common.metrics_server.MetricsServer`):
``/metrics`` Prometheus text, ``/status`` the snapshot as JSON (what ``logferry agent
status`` prints); other paths answer 404.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from broker.common.metrics import Labels, Metrics, Sample

COUNTERS: dict[str, str] = {
    "lines_read": "Lines (and pieces of cut lines) split out of files.",
    "bytes_read": "Bytes read from files.",
    "messages_sent": "Messages handed to the producer (re-sends included).",
    "bytes_sent": "Encoded message bytes handed to the producer.",
    "messages_acked": "Messages acknowledged by a broker.",
    "messages_failed": "Messages whose batch failed; they are read and sent again.",
    "messages_dropped": "Messages given up on after repeated non-retriable errors.",
    "resume_skipped": "Messages not sent again after a crash: the cluster already held them.",
    "lines_cut": "Lines longer than max_line_bytes, cut into several messages.",
    "utf8_replaced": "Lines with invalid UTF-8, replaced by U+FFFD.",
    "rewinds": "Times a file was read again from its checkpoint after a failed batch.",
    "truncations": "Files found shorter than the read position (copytruncate), re-read from 0.",
    "replaced_files": "Files whose inode was reused by another file, read from 0.",
    "rotations": "Files found rotated (their path now names another file).",
    "files_opened": "File opens.",
    "files_closed": "File closes.",
    "checkpoints_written": "Checkpoint files written.",
    "audit_records": "Audit records published.",
    "errors": "Errors (read errors, send errors, failed batches, checkpoint errors).",
    "backpressure_waits": "Read rounds stopped because max_inflight_bytes was reached.",
    "reloads": "Config reloads applied (SIGHUP).",
    "reload_failures": "Config reloads refused (invalid file); the previous config stays.",
}

GAUGES: dict[str, str] = {
    "inflight_bytes": "Bytes read and not yet acknowledged (encoded, plus held partial lines).",
    "inflight_bytes_max": "Highest inflight_bytes seen since start.",
    "inflight_bytes_cap": "max_inflight_bytes: reading stops at this many bytes in flight.",
    "open_files": "File handles open.",
    "tracked_files": "Files being tailed (open or closed while idle).",
    "held_deleted_files": "Deleted or rotated files kept open because they are not shipped yet.",
    "lag_bytes": "Sum over files of bytes not yet acknowledged.",
}

FILE_LAG = "Bytes of the file not yet acknowledged (size minus checkpoint)."
PARSE_FAILURES = (
    "Lines of a source with parse rules that did not parse, shipped whole with unparsed = true (re-reads count again)."
)


class AgentCounters:
    """Counters bumped by the main loop; gauges set by it (plain ints, no locks)."""

    def __init__(self, parsing_sources: tuple[str, ...] = ()) -> None:
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.gauges: dict[str, int] = dict.fromkeys(GAUGES, 0)
        self.parse_failures: dict[str, int] = dict.fromkeys(parsing_sources, 0)
        """Per source name (the sources with a ``parse`` rule): lines that did not parse."""

    def add(self, name: str, amount: int = 1) -> None:
        """Increase counter ``name``."""
        self.counters[name] += amount


@dataclass(frozen=True)
class Snapshot:
    """What the agent looked like at one moment, for status and scraping."""

    host: str = ""
    pid: int = 0
    started: float = 0.0
    updated: float = 0.0
    state: str = "starting"
    counters: dict[str, int] = field(default_factory=dict)
    gauges: dict[str, int] = field(default_factory=dict)
    files: list[dict[str, Any]] = field(default_factory=list)
    metrics_url: str | None = None
    parse_failures: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The /status document (also the status file)."""
        return {
            "host": self.host,
            "pid": self.pid,
            "started": self.started,
            "updated": self.updated,
            "state": self.state,
            "counters": self.counters,
            "gauges": self.gauges,
            "files": self.files,
            "metrics_url": self.metrics_url,
            "parse_failures": self.parse_failures,
        }


def registry(snapshot: Callable[[], Snapshot]) -> Metrics:
    """The agent's Prometheus families, read from the latest snapshot on each scrape.

    Every series carries the ``host`` label; counters are ``logferry_agent_<name>_total``,
    gauges ``logferry_agent_<name>``, plus ``logferry_agent_file_lag_bytes`` per file and
    ``logferry_agent_parse_failures_total`` per source that parses.
    """
    metrics = Metrics("logferry_agent")

    def sample() -> Iterator[Sample]:
        snap = snapshot()  # one snapshot per scrape: families never mix two moments
        host: Labels = (("host", snap.host),)
        for name in COUNTERS:
            yield f"{name}_total", host, snap.counters.get(name, 0)
        for name in GAUGES:
            yield name, host, snap.gauges.get(name, 0)
        for entry in snap.files:
            labels = (*host, ("file", entry["path"]), ("inode", str(entry["inode"])))
            yield "file_lag_bytes", labels, entry["lag"]
        for source, count in snap.parse_failures.items():
            yield "parse_failures_total", (*host, ("source", source)), count

    metrics.source(
        sample,
        counters={**{f"{name}_total": text for name, text in COUNTERS.items()}, "parse_failures_total": PARSE_FAILURES},
        gauges={**GAUGES, "file_lag_bytes": FILE_LAG},
    )
    return metrics


class StatusServer:
    """``/metrics`` (Prometheus text) and ``/status`` (the snapshot as JSON) on a daemon
    thread, serving whatever snapshot was last assigned to :attr:`snapshot`."""

    def __init__(self, bind: str, port: int, ssl_context: ssl.SSLContext | None = None):
        """``ssl_context``: serve HTTPS (``[metrics.tls]``); None: HTTP."""
        # prometheus_client and an HTTP server cost ~50 ms of start: only an agent with a metrics port imports them
        from broker.common.metrics_server import MetricsServer

        self.snapshot = Snapshot()
        self._server = MetricsServer(
            registry(lambda: self.snapshot),
            bind,
            port,
            name="agent-metrics",
            ssl_context=ssl_context,
            routes={"/status": lambda: ("application/json", json.dumps(self.snapshot.to_json()).encode())},
        )
        self.port = self._server.port
        self.url = self._server.url

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.close()
