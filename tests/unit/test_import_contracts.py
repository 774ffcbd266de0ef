"""The ``face`` import-linter contract type (tests/support/import_contracts.py)."""

from __future__ import annotations

import grimp

import broker.client
from tests.support.import_contracts import FaceContract, behind_the_face, declared_all


def graph_of(imports: dict[str, list[str]]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for importer, imported in imports.items():
        graph.add_module(importer)
        for module in imported:
            graph.add_import(importer=importer, imported=module, line_number=1, line_contents=f"import {module}")
    return graph


def test_declared_all_reads_what_the_package_exports() -> None:
    assert declared_all("broker.client") == list(broker.client.__all__)


def test_every_submodule_is_behind_the_face_of_broker_client() -> None:
    graph = graph_of(
        {"broker.client": [], "broker.client.heartbeat": [], "broker.client.group": [], "broker.client.group.lag": []}
    )
    assert behind_the_face(graph, "broker.client") == {
        "broker.client.heartbeat",
        "broker.client.group",
        "broker.client.group.lag",
    }


def test_a_contract_names_each_import_past_the_face() -> None:
    graph = graph_of(
        {
            "broker.client": [],
            "broker.client.heartbeat": [],
            "agent": [],
            "agent.heartbeat": ["broker.client.heartbeat", "broker.client"],
            "mirror": ["broker.client"],
        }
    )
    contract = FaceContract("face", {}, {"face": "broker.client", "source_modules": ["agent", "mirror"]})
    check = contract.check(graph, verbose=False)
    assert not check.kept
    assert check.metadata["violations"] == [("agent.heartbeat", "broker.client.heartbeat", [1])]
    graph.remove_import(importer="agent.heartbeat", imported="broker.client.heartbeat")
    assert contract.check(graph, verbose=False).kept
