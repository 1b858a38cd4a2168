"""CONTRIBUTING.md's backend-author reference stays true to the code it describes.

The settings table lists ``CloudConfig``'s fields with their kinds and defaults; the error tree
gives each class its real parent; the kit's signatures name the real parameters; the test
module example parses and imports only what ``flyte_checkpoint.testing`` exports.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import inspect
import re
from pathlib import Path

import flyte_checkpoint.errors as errors
import flyte_checkpoint.testing as testing
from flyte_checkpoint.storage.kit import CloudConfig, PartWriter, RangedReader
from flyte_checkpoint.storage.kit.settings import format_value

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "CONTRIBUTING.md").read_text()


def _table(heading_words: str) -> list[list[str]]:
    """The rows of the first table whose header line holds ``heading_words`` (``\\|`` kept)."""
    lines = TEXT.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|") and heading_words in line)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
        rows.append([c.strip().replace("\\|", "|") for c in cells])
    return rows


def _block_after(marker: str) -> str:
    rest = TEXT[TEXT.index(marker) :]
    return rest.split("```", 2)[1].split("\n", 1)[1]


def test_the_shared_settings_table_is_cloud_configs() -> None:
    rows = _table("| setting | type | kind | default |")
    fields = dataclasses.fields(CloudConfig)  # type: ignore[arg-type]
    assert [r[0].strip("`") for r in rows] == [f.name for f in fields]
    for row, field in zip(rows, fields, strict=True):
        spec = field.metadata["flyte_checkpoint.setting"]
        assert row[1].strip("`") == str(field.type), (field.name, row[1])
        assert row[2].split()[0].strip("`") == spec.kind.name, (field.name, row[2])
        default = (
            spec.default.__doc__.strip() if callable(spec.default) else format_value(spec.kind, spec.default)
        )
        shown = re.match(r"`([^`]*)`", row[3])
        assert shown and shown.group(1) == (default or "None"), (field.name, row[3])
    assert len(rows) == 12


def test_the_error_tree_gives_each_class_its_parent() -> None:
    tree = _block_after("### Errors: the hierarchy, and its traps")
    parents: list[tuple[int, str]] = []
    seen = 0
    for line in tree.splitlines():
        m = re.match(r"^([│ ]*)(?:[├└]── )?(\w+Error)\b(?: \((\w+)\))?", line)
        if not m:
            continue
        depth = len(m.group(1)) // 4 + (1 if "──" in line else 0)
        name, builtin = m.group(2), m.group(3)
        cls = getattr(errors, name)
        parents = [p for p in parents if p[0] < depth]
        if parents:
            assert cls.__bases__[0] is getattr(errors, parents[-1][1]), (name, parents[-1][1])
        if builtin:
            assert issubclass(cls, getattr(builtins, builtin)), (name, builtin)
        parents.append((depth, name))
        seen += 1
    assert seen >= 10


def test_the_kit_signatures_name_the_real_parameters() -> None:
    for cls in (PartWriter, RangedReader):
        block = re.sub(r"#.*", "", _block_after(f"**`{cls.__name__}`**"))  # not the comments
        documented = re.findall(r"^\s+(\w+): ", block, re.MULTILINE)
        documented += re.findall(r", (\w+): ", block)
        real = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
        assert sorted(set(documented)) == sorted(real), (cls.__name__, documented, real)


def test_the_test_module_example_parses_and_imports_what_testing_exports() -> None:
    example = _block_after("### 4. Prove it with the conformance suite")
    tree = ast.parse(example)
    imported = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "flyte_checkpoint.testing"
        for alias in node.names
    ]
    assert imported and all(name in testing.__all__ for name in imported), imported
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    fixtures = {f.name for c in classes for f in c.body if isinstance(f, ast.FunctionDef)}
    assert {"store", "store_root", "store_recipe"} <= fixtures
    recipe = next(
        n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "StoreRecipe"
    )
    assert {k.arg for k in recipe.keywords} <= {f.name for f in dataclasses.fields(testing.StoreRecipe)}
