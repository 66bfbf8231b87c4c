"""The package's floors: each part of `specroll` imports only the parts this table allows, counting
imports inside functions, relative ones and `importlib.import_module("specroll....")`, and the
table has no cycle. A new import across parts is a decision: make it here, where it shows, or move
the code to the floor it belongs on. `docs/architecture.md` draws the same floors.

An entry is a part ("policies") or one module of a part ("engine.admission"): a torch-free part may
reuse a torch-free module of a part that imports torch, and no more of it. The torch-free parts are
checked as imported, in a fresh interpreter each.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import specroll

ROOT = Path(specroll.__file__).parent
ALLOWED = {  # part -> the parts, or single modules of parts, it may import (a part is a subpackage or a
    # top-level module)
    # the command line, the server, the adapters and side-by-side runs
    "__init__": {"cpu_env"},  # the package's first act: pin the CPU numerics
    "cli": {"commands"},  # each command's module, by name, at run time
    "commands": {"bench", "bench_presets", "bench_regret", "cluster", "cpu_env", "drafteval", "drafting",
                 "engine", "engine_config", "head", "model", "placement", "policies", "profiling",
                 "provenance", "rollout", "sampling_rules", "scheduling", "serve", "sim", "tasks",
                 "tokenizer", "train"},
    "serve": {"engine", "model", "sampling", "tokenizer", "train"},
    # verl's actor serves in process, built from `serve`'s flags
    "integrations": {"cli", "commands", "engine", "engine_config", "model", "placement", "policies",
                     "rollout", "serve", "tokenizer"},
    "bench": {"baselines", "bench_systems", "drafting", "engine", "policies", "rollout", "scheduling", "sim",
              "tail", "tokenizer"},
    "bench_presets": set(),  # bench's named workloads (torch-free)
    # an adaptive policy against the best fixed cap in a bench (torch-free)
    "bench_regret": {"bench_systems"},
    "bench_systems": {"baselines.vllm_peer", "scheduling"},  # bench's system names (torch-free)
    # training, one rollout, many workers
    "train": {"drafting", "engine", "engine_config", "head", "model", "placement", "rollout", "sampling",
              "tokenizer"},
    "rollout": {"cluster", "drafting", "engine", "engine_config", "model", "placement", "policies",
                "sampling_rules", "tail", "tasks", "tokenizer"},
    "cluster": {"engine", "scheduling"},
    "provenance": {"model"},
    "baselines": {"model"},
    # the engine, drafters, the draft head's training, timing forwards
    "engine": {"drafting", "engine_config", "model", "noise", "placement", "policies", "profiling",
               "sampling", "sampling_rules", "verification"},
    "head": {"drafting", "model", "sampling_rules"},
    "drafteval": {"drafting"},
    "drafting": {"cpu_kernels", "engine_config", "model", "noise", "placement", "sampling", "sampling_rules"},
    "profiling": {"model", "placement", "policies"},
    # the model and the pure math
    "model": {"cpu_env", "cpu_kernels", "kernels", "placement"},
    "verification": {"sampling"},
    # a GPU's vocabulary reductions; the CPU's inverse-CDF draw, where its kernels are built and wanted
    "sampling": {"cpu_kernels", "kernels", "placement"},
    "kernels": set(),  # a GPU's batch-invariant Triton kernels
    "cpu_kernels": {"cpu_env"},  # specroll's CPU kernels for exact bf16 (C++, compiled on first use)
    "sampling_rules": set(),
    "noise": set(),
    "tokenizer": set(),
    # torch-free: decisions, tasks, the simulator (which reuses the engine's admission rule, the model's
    # attention chunking and the engine's settings, not the engine or the model), the engine's settings
    "sim": {"engine.admission", "engine_config", "model.attention_chunks", "policies", "scheduling", "tail"},
    "scheduling": {"policies"},
    "policies": set(),
    "tasks": set(),
    "tail": set(),
    "placement": {"cpu_kernels.build"},  # whether the CPU kernels can run here (torch-free)
    "cpu_env": set(),
    "engine_config": {"placement", "sampling_rules"},
}  # fmt: skip
TORCH_FREE = ("policies", "scheduling", "sim")  # parts whose every module imports without torch


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
        elif _is_import_module(node) and node.args and isinstance(node.args[0], ast.Constant):
            found.add(str(node.args[0].value))
    return found


def _is_import_module(node: ast.AST) -> bool:
    """A call of `importlib.import_module` (or `import_module`) by that name."""
    if not isinstance(node, ast.Call):
        return False
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    return name == "import_module"


def part_of(module: str) -> str | None:
    """The part a `specroll.` module belongs to; None for anything else (or `specroll` itself)."""
    names = module.split(".")
    return names[1] if names[0] == "specroll" and len(names) > 1 else None


def is_allowed(module: str, allowed: set[str]) -> bool:
    """`module` ("specroll.engine.admission.plan_chunks") lies in an allowed part or module."""
    names = module.split(".")[1:]
    return any(".".join(names[:i]) in allowed for i in range(1, len(names) + 1))


def is_module(module: str) -> bool:
    """A `specroll.` name that is a module or package of the tree (not a name imported from one)."""
    path = ROOT.joinpath(*module.split(".")[1:])
    return path.is_dir() or path.with_suffix(".py").is_file()


def imports_by_part() -> dict[str, set[str]]:
    """Each part's imports of other parts, as the modules it names (the deepest that are modules)."""
    found: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        relative = path.relative_to(ROOT).with_suffix("")
        module = ".".join(["specroll", *relative.parts])
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        part = relative.parts[0]
        named = {m for m in imported_modules(path.read_text(), package) if part_of(m) not in (None, part)}
        found.setdefault(part, set()).update(m for m in named if is_module(m))
    return found


def disallowed_imports(found: dict[str, set[str]], allowed: dict[str, set[str]]) -> dict[str, list[str]]:
    """Per part, the modules it imports outside its floor (as "engine.scheduler"), sorted."""
    extra = {
        part: sorted(
            m.removeprefix("specroll.") for m in modules if not is_allowed(m, allowed.get(part, set()))
        )
        for part, modules in found.items()
    }
    return {part: names for part, names in extra.items() if names}


def test_the_check_sees_imports_inside_functions_relative_ones_and_by_name():
    source = (
        "def build():\n    from specroll.rollout import build_engine\n"
        "def other():\n    from .. import rollout\n"
        "def by_name():\n    return importlib.import_module('specroll.train')\n"
    )
    parts = {part_of(m) for m in imported_modules(source, "specroll.cluster")}
    assert parts >= {"rollout", "train"}


def test_a_module_entry_allows_that_module_and_no_other_of_its_part():
    found = {"sim": {"specroll.engine.admission", "specroll.engine.scheduler", "specroll.policies.auto"}}
    allowed = {"sim": {"engine.admission", "policies"}}
    assert disallowed_imports(found, allowed) == {"sim": ["engine.scheduler"]}
    assert disallowed_imports(found, {"sim": {"engine", "policies"}}) == {}


def test_every_part_imports_only_what_its_floor_allows():
    found = imports_by_part()
    assert set(found) <= set(ALLOWED), "a new part: give it a row in ALLOWED"
    assert disallowed_imports(found, ALLOWED) == {}


def test_the_floors_have_no_cycle():
    def reaches(start: str, seen: set[str]) -> set[str]:
        for part in {entry.split(".")[0] for entry in ALLOWED[start]} - seen:
            seen.add(part)
            reaches(part, seen)
        return seen

    assert [part for part in ALLOWED if part in reaches(part, set())] == []


def torch_free_modules() -> list[str]:
    return sorted(
        ".".join(["specroll", *path.relative_to(ROOT).with_suffix("").parts]).removesuffix(".__init__")
        for part in TORCH_FREE
        for path in (ROOT / part).rglob("*.py")
    )


@pytest.mark.parametrize("module", torch_free_modules())
def test_the_torch_free_parts_import_without_torch(module: str):
    """Imported alone in a fresh interpreter, the module leaves torch unloaded (a module that reaches
    torch through any import, however deep, fails here though its own imports name no torch)."""
    code = f"import sys, {module}; print('torch' in sys.modules)"
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "False", f"{module} imports torch"
