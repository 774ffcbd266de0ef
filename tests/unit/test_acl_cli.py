"""``logferry acl``: arguments to ACLs, the list filter, and usage errors (no ZooKeeper)."""

from __future__ import annotations

import pytest

from broker.cli import acl_cmd
from broker.cli.main import build_parser, main
from broker.common.acl import CLUSTER, Resource, ResourceType, group, make_acl, topic


def _args(*argv: str):
    return build_parser().parse_args(["acl", *argv])


def test_add_makes_one_acl_per_operation() -> None:
    args = _args(
        "add",
        "--principal",
        "User:mirror",
        "--operation",
        "consume",
        "--operation",
        "describe",
        "--topic-prefix",
        "web-",
        "--allow",
    )
    prefix = Resource(ResourceType.TOPIC_PREFIX, "web-")
    assert acl_cmd.acls_from_args(args) == [
        make_acl("User:mirror", "consume", prefix),
        make_acl("User:mirror", "describe", prefix),
    ]
    args = _args("remove", "--principal", "*", "--operation", "alter", "--cluster", "--deny")
    assert acl_cmd.acls_from_args(args) == [make_acl("*", "alter", CLUSTER, allow=False)]


def test_list_filters_by_principal_and_by_what_applies_to_a_resource() -> None:
    acls = [
        make_acl("User:a", "consume", topic("web-x")),
        make_acl("*", "consume", Resource(ResourceType.TOPIC_PREFIX, "web-")),
        make_acl("User:b", "produce", topic("*")),
        make_acl("User:b", "consume", group("g")),
    ]
    assert list(acl_cmd._filtered(acls, "User:a", None)) == acls[:2]
    assert list(acl_cmd._filtered(acls, None, topic("web-x"))) == acls[:3]
    assert list(acl_cmd._filtered(acls, None, Resource(ResourceType.TOPIC_PREFIX, "web-"))) == [acls[1]]
    assert list(acl_cmd._filtered(acls, "User:b", group("g"))) == [acls[3]]
    assert acl_cmd.format_acl(acls[1]) == "allow  *  consume  topic-prefix 'web-'"


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["add", "--principal", "User:a", "--operation", "produce", "--topic", "t"],
            "one of the arguments --allow --deny is required",
        ),
        (
            ["add", "--principal", "User:a", "--operation", "produce", "--allow"],
            "one of the arguments --topic --topic-prefix --group --transactional-id --cluster is required",
        ),
        (
            ["add", "--principal", "User:a", "--operation", "consume", "--group", "a b", "--allow"],
            "invalid group name 'a b'",
        ),
        (["list", "--principal", "nobody"], "a principal is written 'User:<name>'"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(argv, message, capsys) -> None:
    try:
        code = main(["acl", *argv, "--zk", "127.0.0.1:1/nowhere"])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err
