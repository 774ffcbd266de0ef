"""The console's web server (aiohttp): one static page, a JSON snapshot, server-sent events.

Routes:

- ``GET /``: the page (``static/index.html``, plain JS, no build step);
- ``GET /api/snapshot``: every cluster's latest view as JSON;
- (the snapshot's ``landed``: each configured lake's landed tier, :mod:`console.landed`)
- ``GET /api/events``: server-sent events, one ``snapshot`` event per cluster reading
  and at least one per interval, so the page shows a change within 2 s and a cluster
  that stopped answering as stale;
- ``GET /api/messages?cluster=&topic=&partition=&offset=[&skip=]|message=|time_ms=&limit=[&q=]``:
  a page of messages from a byte offset (``skip`` messages into its batch: the ``next``
  and ``next_skip`` of the page before), a message offset (Kafka's numbering) or a time;
  with ``q`` only those whose key or text contains it, out of a bounded read;
- ``GET /api/tail?cluster=&topic=&partition=``: server-sent events, one ``messages``
  event per batch of new messages from the end of the partition;
- ``GET /metrics``: the console's Prometheus metrics (:mod:`console.metrics`).

The client library blocks, so each cluster's reading runs in a worker thread, each
cluster in a loop of its own: a cluster slow to answer never holds another's card. The
event loop only serves. Everything is read-only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from broker.client import LogferryError
from broker.common.metrics import Metrics
from console.audit import pipeline_rows
from console.collector import ClusterPoller
from console.config import ConsoleConfig
from console.landed import LakeReader, merge_tiers
from console.messages import browse, parse_start, tail
from console.metrics import console_metrics

log = logging.getLogger("logferry.console")

STATIC = Path(__file__).parent / "static"
TAIL_INTERVAL_S = 0.5
KEEPALIVE_S = 15.0
STALE_INTERVALS = 2
"""A cluster that has not answered for more than this many intervals is shown stale."""

POLLERS = web.AppKey("pollers", dict)
LAKES = web.AppKey("lakes", list)
CONFIG = web.AppKey("config", ConsoleConfig)
STATE = web.AppKey("state", dict)
METRICS = web.AppKey("metrics", Metrics)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), default=str)


def snapshot(app: web.Application) -> dict[str, Any]:
    """The latest reading of every cluster, in config order."""
    state = app[STATE]
    now_ms = int(time.time() * 1000)
    stale_ms = STALE_INTERVALS * app[CONFIG].interval_s * 1000
    clusters = [p.view(now_ms, stale_ms) for p in app[POLLERS].values()]
    return {
        "time_ms": state["time_ms"],
        "seq": state["seq"],
        "poll_ms": state["poll_ms"],
        "interval_s": app[CONFIG].interval_s,
        "clusters": clusters,
        "pipeline": pipeline_rows(
            [(c["name"], c.get("audit")) for c in clusters if c], now_ms, app[CONFIG].audit_settle_s
        ),
        "audit_settle_s": app[CONFIG].audit_settle_s,
        "landed": state.get("landed", []),
        # agents publish to the live cluster (a mirror's copies elsewhere come later)
        "agents": next(
            (
                {**c["agents"], "cluster": c["name"]}
                for c in clusters
                if c and c.get("agents") and c["agents"]["agents"]
            ),
            None,
        ),
    }


async def _poll_loop(app: web.Application) -> None:
    """One loop per cluster (:func:`_cluster_loop`), one for the lakes, and a tick that
    re-sends the snapshot when no cluster answered for an interval, so the page sees a
    cluster turn stale even when none answers."""
    pollers: dict[str, ClusterPoller] = app[POLLERS]
    tasks = [asyncio.create_task(_cluster_loop(app, p)) for p in pollers.values()]
    if app[LAKES]:
        tasks.append(asyncio.create_task(_lakes_loop(app)))
    interval = app[CONFIG].interval_s
    state = app[STATE]
    try:
        while True:
            await asyncio.sleep(interval)
            if time.time() * 1000 - state["time_ms"] >= interval * 1000 * 0.9:
                await _changed(app)  # no cluster answered for an interval: the ages still grow
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _cluster_loop(app: web.Application, poller: ClusterPoller) -> None:
    """Read one cluster every interval, on its own: a cluster that is slow to answer (a
    hung broker, a request left to time out) delays only its own card."""
    interval = app[CONFIG].interval_s
    while True:
        started = time.monotonic()
        await asyncio.to_thread(_poll_one, poller)
        app[STATE]["poll_ms"] = round((time.monotonic() - started) * 1000, 1)
        await _changed(app)
        await asyncio.sleep(max(interval - (time.monotonic() - started), 0.05))


async def _lakes_loop(app: web.Application) -> None:
    interval = app[CONFIG].interval_s
    while True:
        started = time.monotonic()
        try:
            app[STATE]["landed"] = await asyncio.to_thread(_read_lakes, app)
        except Exception:  # the next reading tries again; the loop must go on
            log.exception("reading the lakes failed")
        await asyncio.sleep(max(interval - (time.monotonic() - started), 0.05))


async def _changed(app: web.Application) -> None:
    """A new snapshot is due: count it and wake the event streams."""
    state = app[STATE]
    state["seq"] += 1
    state["time_ms"] = int(time.time() * 1000)
    async with state["changed"]:
        state["changed"].notify_all()


def _poll_one(poller: ClusterPoller) -> None:
    """One cluster's reading; whatever it raises is logged, never ends the poll loop
    (which would freeze the page on its last reading)."""
    try:
        poller.poll()
    except Exception:
        log.exception("reading cluster %s failed", poller.config.name)


def _read_lakes(app: web.Application) -> list[dict[str, Any]]:
    """Each lake's landed tier against the tiers the clusters' audit topics hold."""
    pollers = list(app[POLLERS].items())
    views = []
    for lake in app[LAKES]:
        # the clusters up to the one the loader reads: its tier is the one before "landed"
        upto = next(i for i, (name, _) in enumerate(pollers) if name == lake.cluster)
        try:
            lake.poll()  # its own errors (a lake unreachable, a table unreadable) are in lake.error
        except Exception as exc:  # anything else: this lake's error, not the other lakes'
            log.exception("reading lake %s (%s) failed", lake.name, lake.path)
            lake.error = f"reading {lake.path}: {type(exc).__name__}: {exc}".splitlines()[0]
        tiers = merge_tiers((n, p.audit_totals) for n, p in pollers[: upto + 1])
        views.append(lake.view(tiers, app[CONFIG].audit_settle_s))
    return views


async def _start_polling(app: web.Application) -> Any:
    app[STATE]["changed"] = asyncio.Condition()
    task = asyncio.create_task(_poll_loop(app))
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await asyncio.gather(*(asyncio.to_thread(p.stop) for p in app[POLLERS].values()))


# -- handlers ----------------------------------------------------------------------------------


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


async def api_snapshot(request: web.Request) -> web.Response:
    return web.Response(text=_dumps(snapshot(request.app)), content_type="application/json")


async def _sse_start(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    return response


async def api_events(request: web.Request) -> web.StreamResponse:
    app = request.app
    state = app[STATE]
    response = await _sse_start(request)
    seen = -1
    try:
        while True:
            if state["seq"] != seen:
                seen = state["seq"]
                await response.write(f"event: snapshot\ndata: {_dumps(snapshot(app))}\n\n".encode())
            async with state["changed"]:
                try:
                    await asyncio.wait_for(state["changed"].wait(), KEEPALIVE_S)
                except TimeoutError:
                    await response.write(b": keepalive\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    return response


def _partition_args(request: web.Request) -> tuple[ClusterPoller, str, int]:
    query = request.query
    poller = request.app[POLLERS].get(query.get("cluster", ""))
    if poller is None:
        raise web.HTTPBadRequest(text=f"no cluster {query.get('cluster')!r}")
    topic = query.get("topic", "")
    try:
        partition = int(query.get("partition", "0"))
    except ValueError:
        raise web.HTTPBadRequest(text="partition must be a number") from None
    if not topic:
        raise web.HTTPBadRequest(text="topic is required")
    return poller, topic, partition


def _missing(poller: ClusterPoller, topic: str, partition: int) -> str | None:
    """What is missing, named, when the cluster's latest reading has no such topic or
    partition (the broker's own answer cannot tell a missing topic from one the console
    may not describe); None when it is there, or nothing was read yet."""
    good = poller.good
    if good is None:
        return None
    topics = {t["name"]: t for t in good["topics"]}
    found = topics.get(topic)
    if found is None:
        return f"topic {topic!r} does not exist in cluster {poller.config.name!r} (it has {len(topics)} topics)"
    partitions = sorted(p["partition"] for p in found["partitions"])
    if partition not in partitions:
        return f"topic {topic!r} has no partition {partition}: its partitions are 0-{partitions[-1]}"
    return None


async def api_messages(request: web.Request) -> web.Response:
    poller, topic, partition = _partition_args(request)
    try:
        start = parse_start(request.query.get("offset"), request.query.get("time_ms"), request.query.get("message"))
        limit = int(request.query.get("limit", "50"))
        skip = int(request.query.get("skip", "0"))
        if skip < 0:
            raise ValueError("skip must be 0 or more")
    except ValueError as exc:
        raise web.HTTPBadRequest(text=str(exc)) from None
    missing = _missing(poller, topic, partition)
    if missing:
        return web.Response(status=404, text=_dumps({"error": missing}), content_type="application/json")
    try:
        query = request.query.get("q") or None
        page = await asyncio.to_thread(browse, poller.consumer, topic, partition, start, limit, skip, query)
    except ValueError as exc:  # a message offset asked of a broker without them
        return web.Response(status=400, text=_dumps({"error": str(exc)}), content_type="application/json")
    except LogferryError as exc:
        return web.Response(status=502, text=_dumps({"error": str(exc)}), content_type="application/json")
    return web.Response(text=_dumps(page), content_type="application/json")


async def api_tail(request: web.Request) -> web.StreamResponse:
    poller, topic, partition = _partition_args(request)
    consumer = poller.consumer
    try:
        offset = (await asyncio.to_thread(consumer.offsets, topic, partition)).end
        message = await asyncio.to_thread(consumer.message_offset_at, topic, partition, offset)
    except LogferryError as exc:
        raise web.HTTPBadGateway(text=str(exc)) from None
    response = await _sse_start(request)
    try:
        while True:
            try:
                rows, offset, message = await asyncio.to_thread(tail, consumer, topic, partition, offset, message)
            except LogferryError as exc:
                await response.write(f"event: failure\ndata: {_dumps({'error': str(exc)})}\n\n".encode())
                rows = []
            if rows:
                await response.write(f"event: messages\ndata: {_dumps(rows)}\n\n".encode())
            await asyncio.sleep(TAIL_INTERVAL_S)
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    return response


async def metrics(request: web.Request) -> web.Response:
    registry = request.app[METRICS]
    return web.Response(
        body=registry.render().encode(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
    )


def make_app(config: ConsoleConfig) -> web.Application:
    """The aiohttp application for ``config`` (polling starts with the app)."""
    app = web.Application()
    app[CONFIG] = config
    app[POLLERS] = {
        c.name: ClusterPoller(c, audit_topic=config.audit_topic, settle_s=config.audit_settle_s)
        for c in config.clusters
    }
    app[LAKES] = [
        LakeReader(lake.name, lake.path, lake.cluster, lake.timezone, lake.format, lake.namespace, lake.webhdfs)
        for lake in config.lakes
    ]
    app[STATE] = {"seq": 0, "time_ms": 0, "poll_ms": 0.0, "landed": []}
    app[METRICS] = console_metrics(lambda: [p.last for p in app[POLLERS].values()])
    app.cleanup_ctx.append(_start_polling)
    app.router.add_get("/", index)
    app.router.add_get("/api/snapshot", api_snapshot)
    app.router.add_get("/api/events", api_events)
    app.router.add_get("/api/messages", api_messages)
    app.router.add_get("/api/tail", api_tail)
    app.router.add_get("/metrics", metrics)
    app.router.add_static("/static/", STATIC)
    return app


async def serve(config: ConsoleConfig, stop: asyncio.Event, started: Any = None) -> None:
    """Serve until ``stop`` is set; ``started(url)`` is called once listening."""
    app = make_app(config)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    sockets = getattr(site._server, "sockets", None) or []
    port = int(sockets[0].getsockname()[1]) if sockets else config.port
    url = f"http://{config.host}:{port}/"
    log.info(
        "console serving %s at %s (clusters: %s)",
        url,
        config.host,
        ", ".join(f"{c.name}={c.zk_connect}" for c in config.clusters),
    )
    if started is not None:
        started(url)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


__all__ = ["make_app", "serve", "snapshot"]
