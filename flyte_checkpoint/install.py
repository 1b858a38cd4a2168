"""The ``pip install`` command that adds a backend, right for how this copy was installed.

Installed from a package index (or a folder of wheels), a backend is an extra of the core:
``pip install 'flyte-checkpoint[s3]'``. Installed from a checkout of the repository (``pip
install .`` or ``pip install -e .``, which pip records in the distribution's
``direct_url.json``), the extra names a distribution no index holds, and the command that
works installs the plugin's folder of that checkout: ``pip install /path/to/checkout/plugins/s3``.
Read only when a message needs it: ``importlib.metadata`` is not imported by ``import
flyte_checkpoint``.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from urllib.parse import unquote, urlparse

DISTRIBUTION = "flyte-checkpoint"

__all__ = ["checkout_of", "install_command"]


def _direct_url() -> str | None:
    """The core distribution's ``direct_url.json`` (PEP 610), or ``None`` (index, wheel folder)."""
    from importlib import metadata

    try:
        return metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:  # imported from a source tree that is not installed
        return None


def checkout_of(direct_url: str | None) -> tuple[Path, bool] | None:
    """(the checkout's folder, whether installed editable) for a ``direct_url.json`` that names a
    local folder holding this repository's plugins; ``None`` for any other install."""
    if not direct_url:
        return None
    try:
        info = json.loads(direct_url)
        url = urlparse(info["url"])
        dir_info = info.get("dir_info")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if url.scheme != "file" or not isinstance(dir_info, dict):
        return None
    root = Path(unquote(url.path))
    if not (root / "plugins").is_dir():
        return None
    return root, bool(dir_info.get("editable"))


def install_command(extra: str, *, direct_url: str | None = None, read: bool = True) -> str:
    """The command that adds the backend of ``extra`` (``"s3"``, ``"gcs"``, ``"azure"``).

    From a checkout (see the module's docstring): ``pip install [-e] CHECKOUT/plugins/EXTRA``;
    otherwise ``pip install 'flyte-checkpoint[EXTRA]'``. ``direct_url`` is the install record
    to judge by (read from the installed distribution when ``read`` and it is not given).
    """
    found = checkout_of(direct_url if direct_url is not None or not read else _direct_url())
    if found is not None:
        root, editable = found
        plugin = root / "plugins" / extra
        if (plugin / "pyproject.toml").is_file():
            return f"pip install {'-e ' if editable else ''}{shlex.quote(str(plugin))}"
    return f"pip install '{DISTRIBUTION}[{extra}]'"
