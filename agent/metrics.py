"""The agent's counters, their Prometheus text form, and the optional HTTP endpoint.

The main loop owns :class:`Metrics` and bumps plain ints (cheap, no locks); once a
second it also publishes a :class:`Snapshot` (counters, gauges, per-file lag) by
replacing one reference, which the HTTP thread and the status file read. A reader
may see a snapshot up to a second old, never a torn one.

Endpoints (``[metrics] port``): ``/metrics`` Prometheus text format 0.0.4,
``/status`` the snapshot as JSON (what ``logferry agent status`` prints).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("logferry.agent")

COUNTERS: dict[str, str] = {
    "lines_read": "Lines (and pieces of cut lines) split out of files.",
    "bytes_read": "Bytes read from files.",
    "messages_sent": "Messages handed to the producer (re-sends included).",
    "bytes_sent": "Encoded message bytes handed to the producer.",
    "messages_acked": "Messages acknowledged by a broker.",
    "messages_failed": "Messages whose batch failed; they are read and sent again.",
    "messages_dropped": "Messages given up on after repeated non-retriable errors.",
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


class Metrics:
    """Counters bumped by the main loop; gauges set by it."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.gauges: dict[str, int] = dict.fromkeys(GAUGES, 0)

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

    def to_json(self) -> dict[str, Any]:
        """The /status document (also the status file)."""
        return {"host": self.host, "pid": self.pid, "started": self.started,
                "updated": self.updated, "state": self.state, "counters": self.counters,
                "gauges": self.gauges, "files": self.files, "metrics_url": self.metrics_url}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prometheus_text(snapshot: Snapshot) -> str:
    """Render a snapshot in the Prometheus text exposition format."""
    host = _escape(snapshot.host)
    out: list[str] = []
    for name, help_text in COUNTERS.items():
        metric = f"logferry_agent_{name}_total"
        out += [f"# HELP {metric} {help_text}", f"# TYPE {metric} counter",
                f'{metric}{{host="{host}"}} {snapshot.counters.get(name, 0)}']
    for name, help_text in GAUGES.items():
        metric = f"logferry_agent_{name}"
        out += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge",
                f'{metric}{{host="{host}"}} {snapshot.gauges.get(name, 0)}']
    metric = "logferry_agent_file_lag_bytes"
    out += [f"# HELP {metric} Bytes of the file not yet acknowledged (size minus checkpoint).",
            f"# TYPE {metric} gauge"]
    for entry in snapshot.files:
        out.append(f'{metric}{{host="{host}",file="{_escape(entry["path"])}",'
                   f'inode="{entry["inode"]}"}} {entry["lag"]}')
    return "\n".join(out) + "\n"


class MetricsServer:
    """A tiny HTTP server on a daemon thread serving the latest snapshot."""

    def __init__(self, bind: str, port: int):
        self.snapshot = Snapshot()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.split("?")[0] == "/metrics":
                    body = prometheus_text(owner.snapshot).encode()
                    kind = "text/plain; version=0.0.4; charset=utf-8"
                elif self.path.split("?")[0] == "/status":
                    body = json.dumps(owner.snapshot.to_json()).encode()
                    kind = "application/json"
                else:
                    self.send_error(404, "try /metrics or /status")
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self._server = ThreadingHTTPServer((bind, port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://{bind}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="agent-metrics", daemon=True)

    def start(self) -> None:
        """Serve in the background."""
        self._thread.start()
        log.info("metrics at %s/metrics", self.url)

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
