"""The library's loggers, made on first use: ``logging`` costs more to import than the rest
of ``import flyte_checkpoint``, and a task that never saves never needs it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging

ROOT = "flyte_checkpoint"


def logger(name: str = ROOT) -> logging.Logger:
    """``logging.getLogger(name)``, importing ``logging`` the first time."""
    import logging

    return logging.getLogger(name)
