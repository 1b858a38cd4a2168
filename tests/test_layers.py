"""The core's floors (issue 34): no import circle in the core or a plugin, and no upward import.

The floors are ``[tool.importlinter]`` in pyproject.toml (``make lint`` runs ``lint-imports`` on
them). This file checks the same table with a parser of its own, so that what it counts is
written down here: every ``import`` and ``from ... import`` anywhere in a module (inside
functions too: a lazy import that closes a circle hides it without removing it), except those
under ``if TYPE_CHECKING:``. Then it shows that both checks fail on an upward import, naming it.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli before 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "flyte_checkpoint"
PLUGINS = sorted(p for p in ROOT.glob("plugins/*/flyte_checkpoint_*") if (p / "__init__.py").exists())


def _module_name(package: Path, path: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
            ):
                for child in node.body:
                    skip.update(id(n) for n in ast.walk(child))
    return skip


def imports(package: Path) -> dict[str, list[tuple[str, str]]]:
    """Each module of ``package`` -> the modules of ``package`` it imports, each with where
    (``path:line``). ``from . import name`` imports the submodule ``name`` when there is one."""
    paths = {_module_name(package, p): p for p in sorted(package.rglob("*.py"))}
    found: dict[str, list[tuple[str, str]]] = {}
    for module, path in paths.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_nodes(tree)
        base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        edges: list[tuple[str, str]] = []
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    above = base[: len(base) - (node.level - 1)]
                    stem = ".".join(above + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                subs = [f"{stem}.{a.name}" for a in node.names if f"{stem}.{a.name}" in paths]
                targets = subs if len(subs) == len(node.names) else [stem, *subs]
            else:
                continue
            where = f"{path.relative_to(package.parent)}:{node.lineno}"
            for target in targets:
                while target and target not in paths:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    edges.append((target, where))
        found[module] = edges
    return found


def circles(graph: dict[str, list[tuple[str, str]]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target, _ in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        part.append(member)
                        if member == node:
                            break
                    if len(part) > 1:
                        out.append(sorted(part))
    return out


def floors(pyproject: Path = ROOT / "pyproject.toml") -> tuple[str, list[list[str]]]:
    """The container and its floors, top first, each a list of the modules on it."""
    config = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["id"] == "floors"]
    (container,) = contract["containers"]
    return container, [[m.strip() for m in layer.split("|")] for layer in contract["layers"]]


def upward_imports(package: Path, pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """Every import of a module from a floor above its own, or from another module of its own
    floor that it must not import (``|``), as a line naming both."""
    container, table = floors(pyproject)

    def place(module: str) -> tuple[int, str] | None:
        for level, names in enumerate(table):
            for name in names:
                full = f"{container}.{name}"
                if module == full or module.startswith(full + "."):
                    return level, name
        return None

    found = []
    for module, edges in imports(package).items():
        here = place(module)
        if here is None:
            continue
        for target, where in edges:
            there = place(target)
            if there is None:
                continue
            if there[0] < here[0]:
                found.append(f"{where}: {module} imports {target}, from a floor above its own ({there[1]})")
            elif there[0] == here[0] and there[1] != here[1]:
                found.append(f"{where}: {module} imports {target}, a sibling it must not import")
    return found


def test_no_circle_in_the_core():
    assert circles(imports(CORE)) == []


def test_no_circle_in_any_plugin():
    assert {p.name for p in PLUGINS} >= {
        "flyte_checkpoint_s3",
        "flyte_checkpoint_gcs",
        "flyte_checkpoint_azure",
    }
    for package in PLUGINS:
        assert circles(imports(package)) == [], package.name


def test_every_module_of_the_core_is_on_a_floor():
    """A new module goes on a floor (into a floor's package, or onto the table): the top of the
    package holds only ``__init__`` and what the table names."""
    _, table = floors()
    named = {name.split(".")[0] for layer in table for name in layer}
    top = {p.stem for p in CORE.glob("*.py")} | {p.parent.name for p in CORE.glob("*/__init__.py")}
    assert top - named == {"__init__"}


def test_no_import_goes_up_a_floor():
    assert upward_imports(CORE) == []


def _copy_with(tmp_path: Path, module: str, line: str) -> Path:
    """The core copied under ``tmp_path`` with ``line`` added to ``module`` (a relative path) inside a
    function, where a lazy import would hide it."""
    copy = tmp_path / "flyte_checkpoint"
    shutil.copytree(CORE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    target.write_text(target.read_text() + f"\n\ndef _late():\n    {line}\n")
    return copy


def test_an_upward_import_inside_a_function_fails_naming_it(tmp_path):
    copy = _copy_with(tmp_path, "util/paths.py", "from ..checkpoint import Checkpoint  # noqa")
    line = len((copy / "util/paths.py").read_text().splitlines())
    assert upward_imports(copy) == [
        f"flyte_checkpoint/util/paths.py:{line}: flyte_checkpoint.util.paths imports"
        " flyte_checkpoint.checkpoint, from a floor above its own (checkpoint)"
    ]
    # and it closes a circle: checkpoint imports util.paths
    assert any(
        {"flyte_checkpoint.checkpoint", "flyte_checkpoint.util.paths"} <= set(part)
        for part in circles(imports(copy))
    )


def test_storage_importing_the_format_and_siblings_importing_each_other_fail(tmp_path):
    """The format may read through storage, never the other way; ``checkpoint`` and ``sharded``
    share a floor and stay apart."""
    copy = _copy_with(tmp_path / "a", "storage/registry.py", "from ..format import index  # noqa")
    (found,) = upward_imports(copy)
    assert "flyte_checkpoint.storage.registry imports flyte_checkpoint.format.index, from a floor" in found
    copy = _copy_with(tmp_path / "b", "sharded/api.py", "from ..checkpoint import Checkpoint  # noqa")
    (found,) = upward_imports(copy)
    assert "flyte_checkpoint.sharded.api imports flyte_checkpoint.checkpoint, a sibling" in found


def test_lint_imports_fails_on_an_upward_import_inside_a_function(tmp_path):
    """``make lint``'s own check (import-linter) sees imports inside functions and names the chain."""
    _copy_with(tmp_path, "util/paths.py", "from ..checkpoint import Checkpoint  # noqa")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    lint = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    run = subprocess.run(
        [str(lint), "--no-cache"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode != 0, run.stdout
    assert "flyte_checkpoint.util.paths -> flyte_checkpoint.checkpoint" in run.stdout, run.stdout
    clean = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stdout
