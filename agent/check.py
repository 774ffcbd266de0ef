"""``logferry agent check``: what the agent would do with a config, without doing it.

Three looks, none of which ships a line or writes a file:

* :func:`plan_files`: the files each source matches now and where the agent would
  start reading each one, by the agent's own start rules (checkpointed files resumed
  by identity, found by inode where rotation moved them; ``start_at``; a file whose
  identity changed since the checkpoint read from 0). The checkpoint is only read,
  and the state directory's lock is not taken, so a check may run next to the agent.
* :func:`check_cluster`: reach the cluster as the agent's producer does (ZooKeeper
  within its connect timeout, then a broker), list the live brokers, and look up each
  topic without creating it. The agent's first send asks a broker to create a missing
  topic, which it does when its ``auto_create_topics`` is on (the default; brokers say
  so in their metadata answers): a missing topic the brokers will not create is the
  one finding that fails the check (:func:`cluster_problems`).
* :func:`format_report`: the human lines the command prints.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from agent.checkpoint import CheckpointStore, Entry
from agent.config import AgentConfig
from agent.discovery import Matcher, scan
from agent.fsutil import inodes_in, last_line_end
from agent.identity import Facts, FileKey, Verdict, judge

CLUSTER_TIMEOUT_S = 5.0
"""Request and connect timeout of the cluster check (ZooKeeper's connect timeout is the
client library's, 5 s): an unreachable cluster is reported within seconds."""


class FilePlan(NamedTuple):
    """One file the agent would tail, and from where."""

    source: str
    """The name of the source that owns it."""
    path: str
    """Where it is now."""
    size: int
    start: int
    """The offset the agent would read from."""
    why: str
    """How ``start`` was chosen (checkpoint, beginning, end, changed since ...)."""
    name: str
    """The name it was found under (differs from ``path`` for a rotated file)."""


def plan_files(config: AgentConfig) -> tuple[list[FilePlan], int]:
    """Every file the agent would tail if it started now, and the number of checkpoint
    entries; raises CheckpointError for an unreadable checkpoint (the agent would not
    start either)."""
    saved = CheckpointStore(config.state_dir, config.host).load()
    matcher = Matcher(config.sources)
    plans: list[FilePlan] = []
    seen: set[FileKey] = set()
    # Checkpointed files first, wherever rotation moved them (as the agent's start does).
    by_dir: dict[str, list[Entry]] = {}
    for entry in saved.values():
        by_dir.setdefault(os.path.dirname(entry.where), []).append(entry)
    for directory, entries in by_dir.items():
        inodes = inodes_in(directory)
        for entry in entries:
            where = inodes.get((entry.dev, entry.ino))
            index = matcher.source_of(entry.path)
            if where is None or index is None:
                continue
            seen.add(entry.key)
            plans.append(_resume(config.sources[index].name, where, entry))
    for path, index in scan(config.sources, matcher).items():
        try:
            st = os.stat(path)
        except OSError:
            continue
        key = FileKey(st.st_dev, st.st_ino)
        if key in seen:
            continue
        seen.add(key)
        source = config.sources[index]
        if key in saved:
            plans.append(_resume(source.name, path, saved[key]))
        elif source.start_at == "end":
            plans.append(
                FilePlan(source.name, path, st.st_size, last_line_end(path, st.st_size), "end (start_at)", path)
            )
        else:
            plans.append(FilePlan(source.name, path, st.st_size, 0, "beginning", path))
    order = {s.name: i for i, s in enumerate(config.sources)}
    plans.sort(key=lambda p: (order[p.source], p.path))
    return plans, len(saved)


def _resume(source: str, where: str, entry: Entry) -> FilePlan:
    """Where a checkpointed file resumes: its offset, or 0 when it is not the same file."""
    try:
        with open(where, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(max(entry.fp_len, 1))
    except OSError as exc:
        return FilePlan(source, where, 0, 0, f"unreadable ({exc.strerror})", entry.path)
    verdict = judge(entry.key, entry.fingerprint, entry.offset, Facts(entry.key, size, head))
    if verdict is Verdict.SAME:
        return FilePlan(source, where, size, entry.offset, "checkpoint", entry.path)
    return FilePlan(source, where, size, 0, f"beginning ({verdict.value} since the checkpoint)", entry.path)


class TopicCheck(NamedTuple):
    """A topic the agent publishes to, as the cluster knows it."""

    name: str
    partitions: int
    """0: the topic does not exist (yet)."""
    leaderless: list[int]
    """Partitions without a leader right now."""


class ClusterCheck(NamedTuple):
    """What the cluster looked like to the check."""

    brokers: dict[int, str]
    """Live broker id -> host:port."""
    topics: list[TopicCheck]
    auto_create: bool | None
    """Whether the brokers create missing topics (None: they do not say)."""


def topics_of(config: AgentConfig) -> list[str]:
    """The topics the agent publishes to: every source's, then the audit topic."""
    names = [s.topic for s in config.sources]
    if config.audit.enabled:
        names.append(config.audit.topic)
    return list(dict.fromkeys(names))


def check_cluster(config: AgentConfig, timeout: float = CLUSTER_TIMEOUT_S) -> ClusterCheck:
    """Reach the cluster and look up the topics (creating nothing).

    Raises ``broker.client.LogferryError`` (ZooKeeper or every broker unreachable)."""
    from broker.client import Admin, UnknownTopicOrPartitionError

    admin = Admin(
        zk=config.zk,
        brokers=list(config.brokers) if config.brokers else None,
        request_timeout=timeout,
        tls=config.tls,
        sasl=config.sasl,
        listener=config.listener,
    )
    try:
        brokers = {b: f"{i.host}:{i.port}" for b, i in admin.brokers().items()}
        auto_create = admin.auto_create_topics()
        topics = []
        for name in topics_of(config):
            try:
                parts = admin.describe_partitions(name)
            except UnknownTopicOrPartitionError:
                topics.append(TopicCheck(name, 0, []))
                continue
            topics.append(TopicCheck(name, len(parts), [p for p, info in parts.items() if info.leader < 0]))
        return ClusterCheck(brokers, topics, auto_create)
    finally:
        admin.close()


def human_bytes(size: int) -> str:
    """``1.5 MiB``, ``200 B``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def format_files(config: AgentConfig, plans: list[FilePlan], entries: int) -> list[str]:
    """Lines: the checkpoint, then each source and its files."""
    lines = [
        f"checkpoint {config.checkpoint_path}: "
        + (
            f"{entries} files"
            if entries
            else 'none yet (files are read from their start, or their end with start_at = "end")'
        )
    ]
    for source in config.sources:
        mine = [p for p in plans if p.source == source.name]
        patterns = ", ".join(source.patterns)
        excludes = f" excluding {', '.join(source.exclude)}" if source.exclude else ""
        what = "" if patterns == source.name and not excludes else f" ({patterns}{excludes})"
        lines.append(f"source {source.name} -> topic {source.topic}{what}: {_plural(len(mine), 'file')}")
        for plan in mine:
            rotated = f" (rotated from {plan.name})" if plan.name != plan.path else ""
            lines.append(
                f"  {plan.path}{rotated}: {human_bytes(plan.size)}, starts at offset {plan.start} ({plan.why})"
            )
    return lines


def format_cluster(config: AgentConfig, found: ClusterCheck) -> list[str]:
    """Lines: the brokers, then each topic."""
    where = f"ZooKeeper {config.zk}" if config.zk else "brokers " + ", ".join(config.brokers or ())
    lines = [
        f"cluster ({where}): {_plural(len(found.brokers), 'live broker')}: "
        + ", ".join(f"{b} at {a}" for b, a in sorted(found.brokers.items()))
    ]
    for topic in found.topics:
        if not topic.partitions:
            lines.append(f"  topic {topic.name}: does not exist yet; {_when_created(topic.name, found.auto_create)}")
        elif topic.leaderless:
            lines.append(
                f"  topic {topic.name}: {_plural(topic.partitions, 'partition')}; "
                f"no leader right "
                f"now for partition(s) {', '.join(map(str, topic.leaderless))} "
                f"(their messages wait for one)"
            )
        else:
            lines.append(f"  topic {topic.name}: {_plural(topic.partitions, 'partition')}, all with a leader")
    return lines


def _when_created(topic: str, auto_create: bool | None) -> str:
    if auto_create:
        return "the brokers create it at the agent's first send (auto_create_topics)"
    if auto_create is False:
        return (
            "the brokers do not create topics (auto_create_topics = false): create it "
            f"with `logferry topic create {topic}`"
        )
    return "the agent's first send creates it if the brokers allow auto_create_topics"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def cluster_problems(found: ClusterCheck) -> list[str]:
    """What would stop the agent from shipping: topics that are missing and that the
    brokers will not create."""
    if found.auto_create is not False:
        return []
    return [
        f"topic {t.name} does not exist and the brokers do not create topics "
        f"(auto_create_topics = false); create it with `logferry topic create {t.name}`"
        for t in found.topics
        if not t.partitions
    ]
