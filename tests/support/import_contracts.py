"""Import-linter contract types of our own, registered in pyproject.toml
(``[tool.importlinter] contract_types``); ``lint-imports`` imports this module from the
repository root.

``face``: a package's face is the names its ``__init__`` lists in ``__all__``. Its
importers may import the package itself, never its submodules (except a submodule that
``__all__`` names), so the set of forbidden modules is computed from the package, not
listed by hand: a module added to the package is behind the face the day it is written.
Which *names* importers take from the package is mypy's part: strict mode refuses a
name a package does not export (``implicit_reexport = false``).
"""

from __future__ import annotations

import ast
import importlib.util
from typing import cast

from grimp import ImportGraph
from importlinter.application import contract_utils, output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck
from importlinter.domain.helpers import module_expressions_to_modules
from importlinter.domain.imports import Module, ModuleExpression


def declared_all(package: str) -> list[str]:
    """The names ``package/__init__.py`` lists in ``__all__`` (read, not imported)."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None or not spec.submodule_search_locations:
        raise ValueError(f"{package} is not a package")
    with open(spec.origin, encoding="utf-8") as f:
        tree = ast.parse(f.read(), spec.origin)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return [str(name) for name in ast.literal_eval(node.value)]
    raise ValueError(f"{spec.origin} has no literal __all__")


def behind_the_face(graph: ImportGraph, package: str) -> set[str]:
    """Every submodule of ``package`` (at any depth) that its ``__all__`` does not name."""
    exported = {f"{package}.{name}" for name in declared_all(package)}
    behind = set()
    for module in graph.find_descendants(package):
        if not any(module == e or module.startswith(e + ".") for e in exported):
            behind.add(module)
    return behind


class FaceContract(Contract):
    """The ``source_modules`` import ``face`` only through the package itself.

    Options:
        - face: the package (``broker.client``).
        - source_modules: the packages that must keep to its face.
        - broken_contract_guidance: what to do instead (optional).

    Direct imports only: a source may use a module that uses the package's insides.
    """

    type_name = "face"

    face = fields.ModuleField()
    source_modules = fields.SetField(subfield=fields.ModuleExpressionField())
    broken_contract_guidance = fields.TextField(required=False)

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        face = cast(Module, self.face)
        expressions = cast(set[ModuleExpression], self.source_modules)
        importers = {m.name for m in module_expressions_to_modules(graph, expressions, as_packages=True)}
        behind = behind_the_face(graph, face.name)
        output.verbose_print(verbose, f"{face.name}: {len(behind)} modules behind its face")
        violations = []
        for importer in sorted(importers):
            for imported in sorted(graph.find_modules_directly_imported_by(importer) & behind):
                lines = [d["line_number"] for d in graph.get_import_details(importer=importer, imported=imported)]
                violations.append((importer, imported, lines))
        return ContractCheck(kept=not violations, warnings=None, metadata={"face": face.name, "violations": violations})

    def render_broken_contract(self, check: ContractCheck) -> None:
        face = check.metadata["face"]
        for importer, imported, lines in check.metadata["violations"]:
            where = ", ".join(f"l.{n}" for n in lines)
            output.print_error(f"{importer} imports {imported} ({where}), behind {face}'s face")
        output.new_line()
        guidance = cast("str | None", self.broken_contract_guidance)
        contract_utils.render_broken_contract_guidance(
            guidance
            or f"Import the name from {face}; if {face}.__all__ lacks it, export it there "
            "(documented) rather than reaching past the face."
        )
