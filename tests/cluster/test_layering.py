"""The cluster sits above the engine and below the rollout: no module under `specroll/cluster`
imports `specroll.rollout`, at the top or inside a function (workers build their engines with
`specroll.engine.factory`)."""

from __future__ import annotations

import ast
from pathlib import Path

import specroll.cluster

CLUSTER = Path(specroll.cluster.__file__).parent
FORBIDDEN = "specroll.rollout"


def imported_modules(source: str, package: str) -> set[str]:
    """Every module an import anywhere in `source` names (relative ones resolved against `package`),
    and for `from X import name`, X.name too: it may be a module."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            found |= {base, *(f"{base}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):  # importlib.import_module(...)
            found.add(node.value)
    return found


def forbidden(modules: set[str]) -> set[str]:
    return {m for m in modules if m == FORBIDDEN or m.startswith(FORBIDDEN + ".")}


def test_the_check_sees_imports_inside_functions_and_relative_ones():
    source = (
        "def build():\n    from specroll.rollout import build_engine\n"
        "def other():\n    from .. import rollout\n"
        "def by_name():\n    return importlib.import_module('specroll.rollout')\n"
    )
    assert forbidden(imported_modules(source, "specroll.cluster")) == {FORBIDDEN, f"{FORBIDDEN}.build_engine"}
    assert forbidden(imported_modules("from specroll.cluster import rollout", "specroll.cluster")) == set()


def test_no_cluster_module_imports_the_rollout():
    modules = sorted(CLUSTER.glob("*.py"))
    assert {m.name for m in modules} >= {"coordinator.py", "engine_worker.py", "rollout.py", "ray_pool.py"}
    found = {m.name: forbidden(imported_modules(m.read_text(), "specroll.cluster")) for m in modules}
    assert {name: sorted(imports) for name, imports in found.items() if imports} == {}
