"""CONTRIBUTING.md's one fault table and the three plugin READMEs' tables say the same thing.

Row by row (each README lists the same faults in the same order, with its SDK's signals), the
error type and whether the core retries agree, and each README links to the one table.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ANCHOR = "CONTRIBUTING.md#faults-one-behaviour-per-fault-class"


def table_after(text: str, heading: str) -> list[list[str]]:
    """The rows (cells stripped) of the first table after ``heading``, header and rule left out."""
    rest = text[text.index(heading) :]
    rows = []
    for line in rest.splitlines():
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    return rows[2:]


def outcome(error_cell: str, retried_cell: str) -> tuple[str, str]:
    """The first error type a cell names, and the retried column."""
    found = re.search(r"`(\w+(?:Error))`", error_cell)
    assert found, error_cell
    return found.group(1), retried_cell


def contributing_rows() -> list[tuple[str, str]]:
    rows = table_after((ROOT / "CONTRIBUTING.md").read_text(), "### Faults: one behaviour per fault class")
    return [outcome(error, retried) for _fault, error, retried in rows]


@pytest.mark.parametrize("plugin", ["s3", "gcs", "azure"])
def test_each_plugin_readme_agrees_with_the_one_fault_table(plugin: str) -> None:
    readme = (ROOT / "plugins" / plugin / "README.md").read_text()
    assert ANCHOR in readme, f"{plugin}'s README does not link to the fault table"
    rows = table_after(readme, "## Errors")
    assert rows[0][-1] in ("yes", "no")
    theirs = [outcome(error, retried) for *_fault_and_signal, error, retried in rows]
    ours = contributing_rows()
    assert len(theirs) == len(ours), f"{plugin}: {len(theirs)} rows, the fault table {len(ours)}"
    for i, (mine, readme_row) in enumerate(zip(ours, theirs, strict=True)):
        assert mine == readme_row, (
            f"{plugin}, row {i + 1} ({rows[i][0]}): README says {readme_row}, the table {mine}"
        )
