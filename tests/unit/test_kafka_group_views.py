"""The Kafka group coordinator's views for DescribeGroups and ListGroups (sans IO:
asyncio futures only)."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from broker.server.kafka import protocol
from broker.server.kafka.groups import GroupCoordinator


async def _two_members_stable(coordinator: GroupCoordinator) -> tuple[str, str]:
    async def join(client: str, host: str) -> str:
        result = await coordinator.join(
            "g",
            "",
            client,
            "consumer",
            [("range", b"meta-" + client.encode())],
            10.0,
            10.0,
            require_known_member=False,
            client_host=host,
        )
        assert result.error == ErrorCode.none
        return result.member_id

    a, b = await asyncio.gather(join("c1", "10.0.0.1"), join("c2", "10.0.0.2"))
    leader = coordinator.groups["g"].leader
    other = b if leader == a else a
    results = await asyncio.gather(
        coordinator.sync("g", 1, leader, {a: b"as-a", b: b"as-b"}), coordinator.sync("g", 1, other, {})
    )
    assert [r[0] for r in results] == [ErrorCode.none, ErrorCode.none]
    return a, b


def test_describe_shows_state_members_metadata_and_assignment() -> None:
    async def run() -> None:
        coordinator = GroupCoordinator()
        assert coordinator.describe("g") is None
        a, b = await _two_members_stable(coordinator)
        view = coordinator.describe("g")
        assert view is not None
        assert (view.state, view.protocol_type, view.protocol) == ("Stable", "consumer", "range")
        members = {m.member_id: m for m in view.members}
        assert set(members) == {a, b}
        assert members[a].client_id == "c1" and members[a].client_host == "10.0.0.1"
        assert members[a].metadata == b"meta-c1" and members[a].assignment == b"as-a"
        assert members[b].assignment == b"as-b"
        # one leaves: the group rebalances and says so
        assert coordinator.leave("g", a) == ErrorCode.none
        view = coordinator.describe("g")
        assert view is not None and view.state == "PreparingRebalance"
        assert [m.member_id for m in view.members] == [b]
        assert coordinator.leave("g", b) == ErrorCode.none
        view = coordinator.describe("g")
        assert view is not None and (view.state, view.members, view.protocol) == ("Empty", [], "")

    asyncio.run(run())


def test_listing_has_every_group_without_members() -> None:
    async def run() -> None:
        coordinator = GroupCoordinator()
        await _two_members_stable(coordinator)
        listing = coordinator.listing()
        assert [(g.group_id, g.state, g.protocol_type, g.members) for g in listing] == [("g", "Stable", "consumer", [])]
        # the listing is a copy: the group keeps its members
        view = coordinator.describe("g")
        assert view is not None and len(view.members) == 2

    asyncio.run(run())


def test_describe_and_list_groups_are_served() -> None:
    assert protocol.SUPPORTED[protocol.Api.DESCRIBE_GROUPS] == (0, 5)
    assert protocol.SUPPORTED[protocol.Api.LIST_GROUPS] == (0, 5)
    for key, (low, high) in [(15, (0, 5)), (16, (0, 5))]:
        for version in range(low, high + 1):
            protocol.response_schema(key, version)  # kio defines every version served
