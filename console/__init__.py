"""``logferry console``: a live web console over one or more logferry clusters.

A plugin like agent and mirror (entry point ``logferry.commands``): it reads what the
client library reads (``broker.client``: metadata, log ranges, consumer groups,
messages) and never writes to ZooKeeper or the brokers. One poller per cluster
(:mod:`console.collector`) builds a snapshot about once a second; an aiohttp server
(:mod:`console.server`) serves one static page and pushes each snapshot to it with
server-sent events. docs/console.md describes the views.
"""
