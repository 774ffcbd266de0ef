"""Counters and gauges rendered as Prometheus text, plus a tiny HTTP endpoint for them.

A broker records per-partition traffic and per-api request counts and latencies; the
names are documented in ``docs/operations.md``. Metrics are plain dicts updated from
the event loop thread, so recording costs a dict lookup and an add.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Callable, Iterable

log = logging.getLogger("logferry.metrics")

Labels = tuple[tuple[str, str], ...]


class Metrics:
    """A registry of counters (monotonic) and gauges (sampled when rendered)."""

    def __init__(self, prefix: str = "logferry"):
        self.prefix = prefix
        self._counters: dict[str, defaultdict[Labels, float]] = {}
        self._help: dict[str, str] = {}
        self._gauges: list[Callable[[], Iterable[tuple[str, Labels, float]]]] = []

    def counter(self, name: str, help_text: str) -> defaultdict[Labels, float]:
        """Declare a counter; returns its label-tuple -> value dict for fast updates."""
        values = self._counters.setdefault(name, defaultdict(float))
        self._help[name] = help_text
        return values

    def gauge_source(self, fn: Callable[[], Iterable[tuple[str, Labels, float]]],
                     help_texts: dict[str, str]) -> None:
        """Register a function that yields ``(name, labels, value)`` gauges on render."""
        self._gauges.append(fn)
        self._help.update(help_texts)

    def snapshot(self) -> dict[str, dict[Labels, float]]:
        """Every counter and gauge value now (for status commands and tests)."""
        out: dict[str, dict[Labels, float]] = {n: dict(v) for n, v in self._counters.items()}
        for fn in self._gauges:
            for name, labels, value in fn():
                out.setdefault(name, {})[labels] = value
        return out

    def render(self) -> str:
        """Prometheus text exposition format."""
        lines: list[str] = []
        kinds = {name: "counter" for name in self._counters}
        for name, series in sorted(self.snapshot().items()):
            full = f"{self.prefix}_{name}"
            if name in self._help:
                lines.append(f"# HELP {full} {self._help[name]}")
            lines.append(f"# TYPE {full} {kinds.get(name, 'gauge')}")
            for labels, value in sorted(series.items()):
                label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
                lines.append(f"{full}{{{label_text}}} {value:g}" if label_text
                             else f"{full} {value:g}")
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


async def serve_metrics(metrics: Metrics, host: str, port: int) -> asyncio.AbstractServer:
    """Serve ``GET /metrics`` (any path, in fact) as Prometheus text on host:port."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(5):  # not wait_for: see replication/fetcher.py
                await reader.readuntil(b"\r\n\r\n")
            body = metrics.render().encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                         b"Content-Length: " + str(len(body)).encode() +
                         b"\r\nConnection: close\r\n\r\n" + body)
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError,
                asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, host, port)
    log.info("metrics served on http://%s:%d/metrics", host, port)
    return server
