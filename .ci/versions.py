"""Check that the core and every plugin move in lockstep; print the version, or what differs.

Usage: python .ci/versions.py [REPOSITORY]   (``make dist`` runs it before building)

One version for all: the core's ``pyproject.toml`` and ``__version__``, each plugin's
``pyproject.toml``, the core's extras' pins on the plugins (``flyte-checkpoint-s3==V``), and
each plugin's requirement on the core (``flyte-checkpoint>=V,...``). Exit status 1 lists every
difference.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: the copy pip carries
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]


def problems(root: Path) -> tuple[str, list[str]]:
    """(the core's version, each way in which the distributions under ``root`` disagree with it)."""
    core = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    version = core["version"]
    found: list[str] = []
    init = (root / "flyte_checkpoint" / "__init__.py").read_text()
    declared = re.search(r'^__version__ = "([^"]+)"', init, re.M)
    if not declared or declared.group(1) != version:
        found.append(f"flyte_checkpoint/__init__.py: __version__ is not {version!r}")
    pins: dict[str, set[str]] = {}
    for extra, reqs in core.get("optional-dependencies", {}).items():
        for req in reqs:
            m = re.fullmatch(r"(flyte-checkpoint-[\w-]+)(.*)", req.replace(" ", ""))
            if m:
                pins.setdefault(m.group(1), set()).add(m.group(2))
                if m.group(2) != f"=={version}":
                    found.append(f"pyproject.toml: extra [{extra}] asks {req!r}, not =={version}")
    for pyproject in sorted(root.glob("plugins/*/pyproject.toml")):
        plugin = tomllib.loads(pyproject.read_text())["project"]
        where = pyproject.relative_to(root)
        if plugin["version"] != version:
            found.append(f"{where}: version {plugin['version']!r}, the core's is {version!r}")
        if plugin["name"] not in pins:
            found.append(f"pyproject.toml: no extra installs {plugin['name']}")
        cores = [r for r in plugin.get("dependencies", []) if re.match(r"flyte-checkpoint\s*[><=~!]", r)]
        if not any(f">={version}" in r.replace(" ", "") for r in cores):
            needs = cores or "no flyte-checkpoint"
            found.append(f"{where}: requires {needs}, not flyte-checkpoint>={version}")
    return version, found


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else Path(__file__).resolve().parent.parent)
    version, found = problems(root)
    if found:
        print(f"versions are not in lockstep with the core's {version}:", file=sys.stderr)
        for line in found:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(version)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
