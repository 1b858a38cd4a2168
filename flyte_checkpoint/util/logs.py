"""The library's loggers, made on first use: ``logging`` costs more to import than the rest
of ``import flyte_checkpoint``, and a task that never saves never needs it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..uri import redact

if TYPE_CHECKING:
    import logging

    from .transfers import SaveFigures

ROOT = "flyte_checkpoint"


def logger(name: str = ROOT) -> logging.Logger:
    """``logging.getLogger(name)``, importing ``logging`` the first time."""
    import logging

    return logging.getLogger(name)


def log_transfer(verb: str, uri: str, size: int | SaveFigures, seconds: float) -> None:
    """The one info line per save or load: URI without credentials, size, time, throughput;
    for an incremental save, the bytes and files sent and copied too (see :mod:`.transfers`)."""
    from .transfers import SaveFigures, describe

    figures = size if isinstance(size, SaveFigures) else SaveFigures(size, size)
    logger().info("%s checkpoint %s: %s", verb, redact(uri), describe(figures, seconds))
