"""The ``pip install`` command that adds a backend, right for how this copy was installed.

Installed from a package index, a backend is an extra of the core:
``pip install 'flyte-checkpoint[s3]'``. Installed from a wheel file named on the command line
(``pip install dist/flyte_checkpoint-1.0-py3-none-any.whl``, which pip records), the plugin's
wheel is in that folder, and no index need hold it: ``pip install --find-links dist
'flyte-checkpoint[s3]'``. Installed with ``pip install --find-links DIR flyte-checkpoint``
(what the quick start does), pip records nothing that tells an index from a folder, so the
command is the extra, followed by its ``--find-links`` form for a folder of wheels. Installed
from a checkout of the repository (``pip
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

__all__ = ["checkout_of", "install_command", "wheel_folder_of"]


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
    found = _local_record(direct_url, "dir_info")
    if found is None:
        return None
    root, dir_info = found
    if not (root / "plugins").is_dir():
        return None
    return root, bool(dir_info.get("editable"))


def wheel_folder_of(direct_url: str | None) -> Path | None:
    """The local folder of the wheel file a ``direct_url.json`` names; ``None`` for any other install."""
    found = _local_record(direct_url, "archive_info")
    if found is None or found[0].suffix != ".whl":
        return None
    return found[0].parent


def _local_record(direct_url: str | None, kind: str) -> tuple[Path, dict[str, object]] | None:
    """(the local path, the ``kind`` part: ``dir_info`` or ``archive_info``) of a
    ``direct_url.json`` naming a ``file:`` URL with that part; ``None`` for any other."""
    if not direct_url:
        return None
    try:
        info = json.loads(direct_url)
        url = urlparse(info["url"])
        part = info.get(kind)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if url.scheme != "file" or not isinstance(part, dict):
        return None
    return Path(unquote(url.path)), part


def install_command(extra: str, *, direct_url: str | None = None, read: bool = True) -> str:
    """The command that adds the backend of ``extra`` (``"s3"``, ``"gcs"``, ``"azure"``).

    See the module's docstring: from a checkout, ``pip install [-e] CHECKOUT/plugins/EXTRA``;
    from a wheel file, ``pip install --find-links ITS_FOLDER 'flyte-checkpoint[EXTRA]'``; from
    an index or a folder of wheels (pip recorded no URL), ``pip install
    'flyte-checkpoint[EXTRA]'`` with ``--find-links DIR`` named for the folder; from any other
    URL, the extra. ``direct_url`` is the install record to judge by (read from the installed
    distribution when ``read`` and it is not given).
    """
    record = direct_url if direct_url is not None or not read else _direct_url()
    found = checkout_of(record)
    requirement = shlex.quote(f"{DISTRIBUTION}[{extra}]")
    if found is not None:
        root, editable = found
        plugin = root / "plugins" / extra
        if (plugin / "pyproject.toml").is_file():
            return f"pip install {'-e ' if editable else ''}{shlex.quote(str(plugin))}"
    folder = wheel_folder_of(record)
    if folder is not None:
        return f"pip install --find-links {shlex.quote(str(folder))} {requirement}"
    if _recorded(record):
        return f"pip install {requirement}"
    return (
        f"pip install {requirement} (installed from a folder of wheels:"
        f" pip install --find-links DIR {requirement}, DIR that folder)"
    )


def _recorded(direct_url: str | None) -> bool:
    """Whether pip recorded a URL the core was installed from (it does not for an index or a
    folder of wheels given with ``--find-links``)."""
    try:
        return isinstance(json.loads(direct_url or "").get("url"), str)
    except (ValueError, AttributeError):
        return False
