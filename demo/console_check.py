"""The demo's check that its web console serves the page and reads every cluster.

Secured, the console reads as User:reader over TLS + SCRAM: a cluster it cannot
authenticate to or read shows ``ok: false`` in ``/api/snapshot`` with the error, so the
demo's line names which cluster failed and why instead of only printing a URL.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (our own loopback URL)
        return int(response.status), response.read()


def console_status(url: str, timeout_s: float = 20.0) -> str:
    """One line: whether ``url`` serves its page, and each cluster's reading (``ok``
    with its topic count, or the error), waiting up to ``timeout_s`` for all to be ok."""
    deadline = time.monotonic() + timeout_s
    clusters: list[dict[str, Any]] = []
    problem = "no answer yet"
    while True:
        try:
            status, page = _get(url)
            if status != 200 or b"<html" not in page.lower():
                problem = f"the page answered {status}"
            else:
                _, body = _get(url.rstrip("/") + "/api/snapshot")
                clusters = json.loads(body).get("clusters", [])
                if clusters and all(c.get("ok") for c in clusters):
                    break
                problem = "not every cluster read yet"
        except (OSError, ValueError, urllib.error.URLError) as exc:
            problem = str(exc)
        if time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    parts = [
        f"{c.get('name')} ok ({len(c.get('topics', []))} topics)"
        if c.get("ok")
        else f"{c.get('name')} FAILED ({c.get('error')})"
        for c in clusters
    ]
    if clusters and all(c.get("ok") for c in clusters):
        return f"console: serving {url}: {', '.join(parts)}"
    return f"console: NOT serving {url} properly: {', '.join(parts) or problem}"


def console_landed(url: str, runs: int = 1, timeout_s: float = 20.0) -> str:
    """One line: the landed tier the console shows once it read ``runs`` of the loader's
    committed runs (its manifests, or its Iceberg tables' snapshots): per topic, the rows
    landed and the completeness of each event hour against the tier before it, or why it
    shows none."""
    deadline = time.monotonic() + timeout_s
    lakes: list[dict[str, Any]] = []
    problem = "no answer yet"
    while True:
        try:
            _, body = _get(url.rstrip("/") + "/api/snapshot")
            lakes = json.loads(body).get("landed", [])
            if lakes and all(lake.get("runs", 0) >= runs and lake.get("rows") for lake in lakes):
                break
            problem = "; ".join(f"{lake.get('name')}: {lake.get('error') or 'nothing landed yet'}" for lake in lakes)
            problem = problem or "no lake configured"
        except (OSError, ValueError, urllib.error.URLError) as exc:
            problem = str(exc)
        if time.monotonic() >= deadline:
            return f"console: NO landed tier on {url}: {problem}"
        time.sleep(0.5)
    parts = []
    for lake in lakes:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for row in lake["rows"]:
            by_topic.setdefault(row["topic"], []).append(row)
        for topic, rows in sorted(by_topic.items()):
            pcts = sorted({"-" if r["complete_pct"] is None else f"{r['complete_pct']:.2f}%" for r in rows})
            parts.append(f"{topic} {sum(r['landed'] for r in rows):,} rows ({', '.join(pcts)} of {rows[0]['of']})")
    return f"console: landed tier shown, {lakes[0]['runs']} loader run(s): {'; '.join(parts)}"


__all__ = ["console_landed", "console_status"]
