"""Move the core's loose modules to their floors and rewrite every import of them (issue 34).

Run from the repository's root, on a clean tree: ``python tools/relayer.py``. It

- ``git mv``-s each module of ``MOVES`` into its package (``lifecycle/``, ``util/``), making the
  package with the docstring of ``PACKAGES``;
- rewrites the relative imports of every module of ``flyte_checkpoint/`` (from where it was to
  where it is, a ``from . import a, b`` split by the packages its names went to);
- rewrites ``from flyte_checkpoint import <moved module>`` in every Python file, and every
  dotted name ``flyte_checkpoint.<moved module>`` (imports, ``mock.patch`` targets,
  ``sys.modules`` keys, ``:mod:`` references, prose) and every path
  ``flyte_checkpoint/<moved module>.py`` in every tracked text file;
- then ``ruff check --fix --select I`` and ``ruff format`` on the Python files it changed.

``README.md`` and ``RELIABILITY.md`` are left as they are (``UNTOUCHED``): it prints the mentions
of moved modules it left there.

It is written to be run again on a newer ``main`` (the moves commit dropped first), so the moves
never have to be merged by hand: a module already moved is left where it is.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

PKG = "flyte_checkpoint"

#: Where each loose module goes.
MOVES: dict[str, str] = {
    # the life of a save: its turn, background saves, snapshots, SIGTERM, named runs
    "background": "lifecycle",
    "handlerchain": "lifecycle",
    "preemption": "lifecycle",
    "runs": "lifecycle",
    "saveorder": "lifecycle",
    "signalrelay": "lifecycle",
    "snapshot": "lifecycle",
    # small pieces everything above may use (a backend's own code reaches forksafe's, sources' and
    # cancellation's names through flyte_checkpoint.storage.kit, which re-exports them)
    "cancellation": "util",  # retry, the format and the stores check it: below them all
    "forksafe": "util",
    "heldfolders": "util",  # a partial restore's staging (format) holds one too
    "install": "util",
    "interrupts": "util",
    "limits": "util",
    "logs": "util",
    "paths": "util",
    "retry": "util",
    "sources": "util",
    "sparse": "util",
    "transfers": "util",  # a save's figures and their log line (logs' log_transfer says them)
    "workfiles": "util",
}

PACKAGES: dict[str, str] = {
    "lifecycle": '''"""The life of a save, between ``Checkpoint`` and the bytes: its turn among saves to one
destination (:mod:`.saveorder`), background saves (:mod:`.background`) of a snapshot of the
data (:mod:`.snapshot`), the final save on SIGTERM (:mod:`.preemption`,
:mod:`.signalrelay`, :mod:`.handlerchain`) and the local runner's named runs (:mod:`.runs`).

It imports ``format``, ``storage``, ``util`` and the public base modules, never the API above it
(``checkpoint``, ``context``): see CONTRIBUTING.md, "The layers".
"""
''',
    "util": '''"""Small pieces every floor above may use, importing only the public base modules (``errors``,
``uri``...): paths and attempt numbers (:mod:`.paths`), load limits (:mod:`.limits`), the retry
policy (:mod:`.retry`), the loggers (:mod:`.logs`), sparse files (:mod:`.sparse`), the library's
working-file names (:mod:`.workfiles`), folders held by a live process
(:mod:`.heldfolders`), install hints (:mod:`.install`), interrupts in worker
threads (:mod:`.interrupts`), cancelled operations (:mod:`.cancellation`), what a forked child
makes afresh (:mod:`.forksafe`), the files a save reads, checked unchanged (:mod:`.sources`),
what a save did in figures (:mod:`.transfers`).
A backend's own code takes the last three's names from :mod:`flyte_checkpoint.storage.kit`.
See CONTRIBUTING.md, "The layers".
"""
''',
}

TEXT_SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".cfg", ".ini", ".txt", ".json", ""}
#: Left as they are: the project's rules keep them out of a work package's hands (their paths are
#: for the lead to update); the relayer prints the mentions it left in them.
UNTOUCHED = {"README.md", "RELIABILITY.md"}
ROOT = Path.cwd()


def new_name(old: str) -> str:
    """The module path ``old`` (absolute, dotted) has after the moves."""
    parts = old.split(".")
    if len(parts) >= 2 and parts[0] == PKG and parts[1] in MOVES:
        return ".".join([PKG, MOVES[parts[1]], *parts[1:]])
    return old


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def move_files() -> dict[Path, str]:
    """``git mv`` the modules; returns each core module's new path -> its old dotted name."""
    for package, doc in PACKAGES.items():
        init = ROOT / PKG / package / "__init__.py"
        if not init.exists():
            init.parent.mkdir(exist_ok=True)
            init.write_text(doc)
            git("add", str(init))
    moved_now: set[Path] = set()
    for module, package in MOVES.items():
        src = ROOT / PKG / f"{module}.py"
        if src.exists():
            dest = ROOT / PKG / package / f"{module}.py"
            git("mv", str(src), str(dest))
            moved_now.add(dest)
    old_names: dict[Path, str] = {}
    for path in sorted((ROOT / PKG).rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(parts)
        if path in moved_now:  # moved by this run: its relative imports are from where it was
            name = f"{PKG}.{parts[2]}"
        old_names[path] = name
    return old_names


def relative(target: str, here_pkg: str) -> str:
    """``target`` (dotted) as a relative import from inside the package ``here_pkg``."""
    here = here_pkg.split(".")
    there = target.split(".")
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    dots = "." * (len(here) - common + 1)
    return dots + ".".join(there[common:])


def render(module: str, names: list[ast.alias], indent: str) -> str:
    items = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in names)
    return f"{indent}from {module} import {items}"


def rewrite_imports(path: Path, old_module: str, is_package: bool, modules: set[str]) -> bool:
    """Rewrite the relative imports of the core module at ``path`` (its old name ``old_module``)
    and every absolute ``from flyte_checkpoint import <moved>``; True if anything changed."""
    source = path.read_text()
    tree = ast.parse(source)
    new_module = new_name(old_module)
    old_pkg = old_module if is_package else old_module.rpartition(".")[0]
    new_pkg = new_module if is_package else new_module.rpartition(".")[0]
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            if not old_module:
                continue
            base = old_pkg.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        elif node.module == PKG:
            target = PKG
        else:
            continue
        groups: dict[str, list[ast.alias]] = {}
        if node.module is None or target == PKG:
            # names may be submodules: each goes to its own package
            for alias in node.names:
                full = f"{target}.{alias.name}"
                dest = new_name(full).rpartition(".")[0] if full in modules else target
                groups.setdefault(dest, []).append(alias)
        else:
            groups[new_name(target)] = list(node.names)
        if len(groups) == 1:
            (dest,) = groups
            spelled = relative(dest, new_pkg) if node.level else dest
            if spelled == "." * node.level + (node.module or ""):
                continue  # where it was
        rendered = []
        indent = " " * node.col_offset
        for dest, names in groups.items():
            spelled = relative(dest, new_pkg) if node.level else dest
            rendered.append(render(spelled, names, indent))
        text = "\n".join(rendered)
        start, end = node.lineno - 1, node.end_lineno or node.lineno
        old_text = "".join(lines[start:end])
        if "#" in old_text:
            comment = old_text[old_text.index("#") :].rstrip("\n")
            if "\n" not in comment:
                text += "  " + comment
            else:
                where = f"{path}:{node.lineno}"
                print(f"warning: {where}: comments inside an import were dropped", file=sys.stderr)
        if old_text.rstrip("\n").strip() != text.strip():
            edits.append((start, end, text + "\n"))
    for start, end, text in sorted(edits, reverse=True):
        lines[start:end] = [text]
    if edits:
        path.write_text("".join(lines))
    return bool(edits)


MOVED = "|".join(sorted(MOVES, key=len, reverse=True))
DOTTED = re.compile(rf"(?<![\w.]){PKG}\.({MOVED})(?![\w])")
SLASHED = re.compile(rf"(?<![\w/]){PKG}/({MOVED})\.py\b")
# in the code of child processes (strings), where the rewrite of the parsed imports does not reach
FROM_ROOT = re.compile(rf"(?<![\w.])from {PKG} import ({MOVED})\b(?!\s*,)")


def rewrite_text(path: Path) -> bool:
    try:
        text = path.read_text()
    except (UnicodeDecodeError, FileNotFoundError):
        return False
    new = DOTTED.sub(lambda m: f"{PKG}.{MOVES[m.group(1)]}.{m.group(1)}", text)
    new = SLASHED.sub(lambda m: f"{PKG}/{MOVES[m.group(1)]}/{m.group(1)}.py", new)
    new = FROM_ROOT.sub(lambda m: f"from {PKG}.{MOVES[m.group(1)]} import {m.group(1)}", new)
    if new != text:
        path.write_text(new)
        return True
    return False


#: Module attributes of the package users reach as documented (``fc.preemption.install()`` in
#: docs/flyte.md and docs/preemption.md), kept after the move.
KEPT_ATTRIBUTES = ("preemption",)


def keep_attributes() -> Path:
    init = ROOT / PKG / "__init__.py"
    text = init.read_text()
    for name in KEPT_ATTRIBUTES:
        line = f"from .{MOVES[name]} import {name} as {name}  # fc.{name}, as the docs spell it\n"
        if line not in text:
            anchor = f"from .{MOVES[name]}.{name} import "
            at = text.index(anchor)
            text = text[:at] + line + text[at:]
    init.write_text(text)
    return init


def main() -> None:
    if git("status", "--porcelain", "--untracked-files=no").strip():
        sys.exit("relayer: commit or stash your changes first")
    old_names = move_files()
    modules = set(old_names.values())
    changed: set[Path] = set()
    for path, old in old_names.items():
        if rewrite_imports(path, old, path.name == "__init__.py", modules):
            changed.add(path)
    tracked = [ROOT / p for p in git("ls-files").splitlines()]
    for path in tracked:
        if path.suffix not in TEXT_SUFFIXES or not path.is_file() or path.is_symlink():
            continue
        if str(path.relative_to(ROOT)) in UNTOUCHED:
            text = path.read_text()
            for m in (*DOTTED.finditer(text), *SLASHED.finditer(text)):
                line = text.count("\n", 0, m.start()) + 1
                print(f"relayer: left {path.relative_to(ROOT)}:{line}: {m.group(0)}", file=sys.stderr)
            continue
        if path.suffix == ".py" and path not in old_names and rewrite_imports(path, "", False, modules):
            changed.add(path)
        if rewrite_text(path):
            changed.add(path)
    changed.add(keep_attributes())
    py = sorted(str(p) for p in changed if p.suffix == ".py")
    ruff = [sys.executable, "-m", "ruff"]
    if py:
        subprocess.run([*ruff, "check", "--fix", "--select", "I", "--quiet", *py], check=False)
        subprocess.run([*ruff, "format", "--quiet", *py], check=True)
    git("add", "-A", PKG, *(str(p) for p in changed))
    print(f"relayer: {len(MOVES)} modules moved, {len(changed)} files rewritten")


if __name__ == "__main__":
    main()
