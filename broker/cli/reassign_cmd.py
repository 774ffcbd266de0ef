"""``logferry reassign generate|execute|verify|cancel`` and ``logferry broker decommission``.

Reassignment moves partitions' replicas between brokers (docs/operations.md). These
commands only read the registries and write ``/admin/reassign_partitions`` in
ZooKeeper; the controller carries the job out (:mod:`broker.replication.reassigner`).
Every check runs before anything is written: a refused command changes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from broker.common.errors import ConfigError, ReassignmentError, ZooKeeperError
from broker.common.zk_connect import validate_zk_connect
from broker.coordination import zk
from broker.coordination.partition_state import PartitionState
from broker.coordination.reassignment import (
    Job,
    Plan,
    check_plan,
    check_throttle,
    decode_job,
    decommission,
    encode_job,
    generate,
    plan_from_json,
    plan_to_json,
)

DEFAULT_ZK = "127.0.0.1:2181/logferry/live"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``reassign generate|execute|verify|cancel``."""
    top = sub.add_parser(
        "reassign",
        help="move partitions' replicas between brokers",
        description="Plan, run, watch and cancel a partition reassignment (docs/operations.md).",
    )
    rsub = top.add_subparsers(dest="reassign_command", metavar="ACTION")
    rsub.required = True
    p = rsub.add_parser("generate", help="print a plan spreading topics over brokers (JSON)")
    _zk_arg(p)
    p.add_argument("--topics", required=True, help="comma-separated topic names")
    p.add_argument("--brokers", required=True, help="comma-separated broker ids to use")
    p.add_argument(
        "--replication-factor",
        type=int,
        default=None,
        metavar="N",
        help="replicas per partition (default: each partition's own)",
    )
    p.set_defaults(func=generate_cmd)
    p = rsub.add_parser("execute", help="start a plan (one reassignment at a time)")
    _zk_arg(p)
    p.add_argument("--plan", required=True, help="plan file (from `reassign generate`)")
    _throttle_args(p)
    p.set_defaults(func=execute_cmd)
    p = rsub.add_parser("verify", help="progress per partition; exit 0 once done")
    _zk_arg(p)
    p.add_argument("--plan", default=None, help="also check the result against this plan")
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="print progress every second until done, at most this long",
    )
    p.set_defaults(func=verify_cmd)
    p = rsub.add_parser("cancel", help="move the partitions not done back where they were")
    _zk_arg(p)
    p.set_defaults(func=cancel_cmd)


def _zk_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--zk", default=None, help=f"ZooKeeper connect string with chroot (default: $LOGFERRY_ZK or {DEFAULT_ZK})"
    )


def _throttle_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--throttle",
        type=int,
        required=True,
        metavar="BYTES_PER_S",
        help="bytes/s each broker may copy for the new replicas (all together)",
    )
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="then print progress every second until done, at most this long",
    )


def add_decommission_args(p: argparse.ArgumentParser) -> None:
    """``logferry broker decommission ID`` rides on the ``broker`` command's parser."""
    p.add_argument("action", nargs="?", choices=["decommission"], help="decommission: move every replica off broker ID")
    p.add_argument("broker_id", nargs="?", type=int, metavar="ID")
    _zk_arg(p)
    p.add_argument(
        "--throttle", type=int, default=None, metavar="BYTES_PER_S", help="(decommission) bytes/s each broker may copy"
    )
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="(decommission) print progress until done, at most this long",
    )


# -- reading the cluster -------------------------------------------------------------


def _connect(args: argparse.Namespace) -> Any:
    where = args.zk or os.environ.get("LOGFERRY_ZK", DEFAULT_ZK)
    try:
        validate_zk_connect(where)
    except ConfigError as exc:
        raise ConfigError(f"{'--zk' if args.zk else '$LOGFERRY_ZK'}: {exc}") from None
    return zk.connect(where, create=False)


def _brokers(client: Any) -> dict[int, str]:
    """Registered broker id -> rack."""
    out = {}
    for child in client.get_children(zk.BROKER_IDS):
        try:
            raw, _ = client.get(zk.broker_path(int(child)))
        except Exception:
            continue
        out[int(child)] = str(zk.decode(raw).get("rack", ""))
    return out


def _assignments(client: Any) -> dict[str, dict[int, list[int]]]:
    out = {}
    for topic in client.get_children(zk.BROKER_TOPICS):
        try:
            raw, _ = client.get(zk.topic_path(topic))
        except Exception:
            continue
        out[topic] = zk.read_assignment(raw)
    return out


def _states(client: Any, keys: Any) -> dict[tuple[str, int], PartitionState | None]:
    out: dict[tuple[str, int], PartitionState | None] = {}
    for topic, partition in keys:
        try:
            raw, _ = client.get(zk.partition_state_path(topic, partition))
            out[(topic, partition)] = PartitionState.decode(raw)
        except Exception:
            out[(topic, partition)] = None
    return out


def _ids(text: str) -> list[int]:
    try:
        return sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ConfigError(f"--brokers {text!r}: give comma-separated broker ids, e.g. 1,2,3") from None


# -- the commands ----------------------------------------------------------------------


def generate_cmd(args: argparse.Namespace) -> int:
    topics = [t.strip() for t in args.topics.split(",") if t.strip()]
    wanted = _ids(args.brokers)
    client = _connect(args)
    try:
        racks = _brokers(client)
        assignments = _assignments(client)
    finally:
        zk.close(client)
    unknown = sorted(set(wanted) - set(racks))
    if unknown:
        raise ReassignmentError(
            f"--brokers names broker(s) {unknown}, which are not registered (registered: {sorted(racks)})"
        )
    missing = [t for t in topics if t not in assignments]
    if missing:
        raise ReassignmentError(f"no such topic(s): {', '.join(missing)}")
    current = {(t, p): r for t in topics for p, r in assignments[t].items()}
    load: dict[int, int] = {}
    for t, parts in assignments.items():
        if t not in topics:
            for reps in parts.values():
                for b in reps:
                    load[b] = load.get(b, 0) + 1
    plan = generate(current, {b: racks[b] for b in wanted}, args.replication_factor, load)
    moved = sum(len(set(r) - set(current[k])) for k, r in plan.items())
    print(plan_to_json(plan))
    print(
        f"# {len(plan)} partitions, {moved} replicas to copy; current assignment:\n{plan_to_json(current)}",
        file=sys.stderr,
    )
    return 0


def _start(client: Any, plan: Plan, throttle: int) -> None:
    """Check ``plan`` against the cluster and store it (atomically: refused if one runs)."""
    check_throttle(throttle)
    assignments = _assignments(client)
    check_plan(plan, assignments, _brokers(client))
    if client.exists(zk.REASSIGN_PARTITIONS) is not None:
        raise ReassignmentError(
            "a reassignment is already under way; wait for it (`logferry reassign verify`) or cancel it first"
        )
    for (topic, partition), replicas in sorted(plan.items()):
        raw, _ = client.get(zk.topic_path(topic))
        needed = zk.read_topic_config(raw).get("min_insync_replicas", 1)
        if len(replicas) < needed:
            raise ReassignmentError(
                f"the plan gives {topic}-{partition} {len(replicas)} replicas but the topic's "
                f"min_insync_replicas is {needed}: acks=all writes would all be refused; "
                "lower it first (topic alter)"
            )
    original = {k: assignments[k[0]][k[1]] for k in plan}
    try:
        client.create(zk.REASSIGN_PARTITIONS, encode_job(plan, original, throttle), makepath=True)
    except zk.NodeExistsError:
        raise ReassignmentError(
            "a reassignment is already under way; wait for it (`logferry reassign verify`) or cancel it first"
        ) from None


def execute_cmd(args: argparse.Namespace) -> int:
    check_throttle(args.throttle)
    try:
        with open(args.plan, encoding="utf-8") as f:
            plan = plan_from_json(f.read())
    except OSError as exc:
        raise ConfigError(f"--plan {args.plan}: {exc.strerror or exc}") from None
    client = _connect(args)
    try:
        _start(client, plan, args.throttle)
        print(f"started reassigning {len(plan)} partitions (throttle {args.throttle} bytes/s)")
        return _watch(client, args.wait, None) if args.wait > 0 else 0
    finally:
        zk.close(client)


def decommission_cmd(args: argparse.Namespace) -> int:
    if args.broker_id is None:
        raise ConfigError("usage: logferry broker decommission ID --throttle BYTES_PER_S")
    if args.throttle is None:
        raise ConfigError("broker decommission: give --throttle BYTES_PER_S")
    check_throttle(args.throttle)
    client = _connect(args)
    try:
        racks = _brokers(client)
        assignments = _assignments(client)
        if args.broker_id not in racks and not any(
            args.broker_id in r for parts in assignments.values() for r in parts.values()
        ):
            raise ReassignmentError(
                f"broker {args.broker_id} is not registered and holds no partition (registered: {sorted(racks)})"
            )
        current = {(t, p): r for t, parts in assignments.items() for p, r in parts.items()}
        plan = decommission(
            args.broker_id,
            current,
            _states(client, [k for k, r in current.items() if args.broker_id in r]),
            {b: rk for b, rk in racks.items()},
        )
        print(plan_to_json(plan))
        _start(client, plan, args.throttle)
        print(f"started moving {len(plan)} partitions off broker {args.broker_id} (throttle {args.throttle} bytes/s)")
        return _watch(client, args.wait, None) if args.wait > 0 else 0
    finally:
        zk.close(client)


def _progress_lines(client: Any, job: Job) -> tuple[list[str], int]:
    from broker.replication.progress import read_progress

    assignments = _assignments(client)
    states = _states(client, job.targets)
    copied = read_progress(client)
    lines, pending = [], 0
    for key, target in sorted(job.targets.items()):
        current = assignments.get(key[0], {}).get(key[1])
        state = states.get(key)
        name = f"{key[0]}-{key[1]}"
        if current is None:
            lines.append(f"{name}: gone (topic deleted)")
            continue
        if current == target:
            lines.append(f"{name}: done, replicas {target}")
            continue
        pending += 1
        isr = list(state.isr) if state else []
        parts = []
        for b in target:
            if b in isr:
                parts.append(f"{b} in sync")
            elif (key[0], key[1], b) in copied:
                end, leader_end = copied[(key[0], key[1], b)]
                pct = 100.0 * end / leader_end if leader_end else 100.0
                parts.append(f"{b} {end}/{leader_end} bytes ({pct:.0f}%)")
            else:
                parts.append(f"{b} starting")
        lines.append(f"{name}: {current} -> {target}, leader {state.leader if state else -1}: {', '.join(parts)}")
    return lines, pending


def _watch(client: Any, wait: float, plan: Plan | None) -> int:
    """Print the progress; with ``wait``, every second until done or ``wait`` ends.
    Exit code 0 when nothing is under way (and ``plan``, if given, is in place)."""
    deadline = time.monotonic() + wait
    while True:
        raw = None
        try:
            raw, _ = client.get(zk.REASSIGN_PARTITIONS)
        except zk_no_node():
            pass
        job = decode_job(raw)
        if job is None:
            print("no reassignment under way")
            return _check_result(client, plan)
        lines, pending = _progress_lines(client, job)
        print(
            f"reassignment{' (cancelled)' if job.cancelled else ''}: {pending} of "
            f"{len(job.targets)} partitions moving, throttle {job.throttle} bytes/s"
        )
        for line in lines:
            print(f"  {line}")
        sys.stdout.flush()
        if time.monotonic() >= deadline:
            return 1
        time.sleep(1.0)


def zk_no_node() -> type[Exception]:
    from kazoo.exceptions import NoNodeError

    error: type[Exception] = NoNodeError  # kazoo is untyped: Any to mypy
    return error


def _check_result(client: Any, plan: Plan | None) -> int:
    if plan is None:
        return 0
    assignments = _assignments(client)
    wrong = {
        k: assignments.get(k[0], {}).get(k[1]) for k, r in plan.items() if assignments.get(k[0], {}).get(k[1]) != r
    }
    for (t, p), r in sorted(wrong.items()):
        print(f"  {t}-{p}: replicas {r}, the plan says {plan[(t, p)]}")
    if wrong:
        print(f"{len(wrong)} partitions differ from the plan (cancelled?)")
        return 1
    print(f"all {len(plan)} partitions are as the plan says")
    return 0


def verify_cmd(args: argparse.Namespace) -> int:
    plan = None
    if args.plan:
        try:
            with open(args.plan, encoding="utf-8") as f:
                plan = plan_from_json(f.read())
        except OSError as exc:
            raise ConfigError(f"--plan {args.plan}: {exc.strerror or exc}") from None
    client = _connect(args)
    try:
        return _watch(client, args.wait, plan)
    finally:
        zk.close(client)


def cancel_cmd(args: argparse.Namespace) -> int:
    from kazoo.exceptions import BadVersionError, NoNodeError

    client = _connect(args)
    try:
        for _ in range(20):
            try:
                raw, stat = client.get(zk.REASSIGN_PARTITIONS)
            except NoNodeError:
                print("no reassignment under way; nothing to cancel")
                return 0
            job = decode_job(raw)
            if job is None:
                raise ZooKeeperError(f"{zk.REASSIGN_PARTITIONS} is malformed")
            assignments = _assignments(client)
            back = {
                k: job.original[k]
                for k, t in job.targets.items()
                if assignments.get(k[0], {}).get(k[1]) not in (None, t)
            }
            if not back:
                print("every partition is already done; nothing to cancel")
                return 0
            try:
                client.set(
                    zk.REASSIGN_PARTITIONS,
                    encode_job(back, job.original, job.throttle, cancelled=True),
                    version=stat.version,
                )
            except (BadVersionError, NoNodeError):
                continue
            print(
                f"cancelled: {len(back)} partitions go back to their original replicas; "
                f"{len(job.targets) - len(back)} stay moved"
            )
            return 0
        raise ZooKeeperError("the reassignment kept changing; try again")
    finally:
        zk.close(client)


__all__ = ["add_decommission_args", "add_parser", "decommission_cmd"]
