"""Inside a Flyte task, our log lines follow Flyte's: shown by Flyte's handlers, at Flyte's level.

``flyte.init(log_level=logging.INFO)`` (or ``flyte -vv run ...``) sets the level of Flyte's own
logger (``flyte.system_logger``, named ``flyte``) and gives it a handler. Our logger,
``flyte_checkpoint``, is not under it, so without this its INFO lines stay hidden whatever
Flyte's level. When our context is made for a Flyte task attempt (:func:`follow_flyte`, called
by ``fc.ctx()``) and logging has not been set up for us (``flyte_checkpoint`` has no level and
no handler of its own, and the root logger has no handler), our logger takes Flyte's level and
a handler that passes its records to Flyte's handlers. Logging set up any other way is left as
it is.
"""

from __future__ import annotations

import logging
import threading

from ..util.logs import ROOT

#: The logger ``flyte.init(log_level=...)`` configures (``flyte.system_logger``).
FLYTE_LOGGER = "flyte"

_lock = threading.Lock()
_level_we_set: int | None = None


class ToFlyteHandlers(logging.Handler):
    """Hands each record to the handlers of Flyte's logger, each at its own level.

    Once the root logger has a handler (logging was set up after we started following Flyte),
    records reach it by propagation and are not handed to Flyte's as well.
    """

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:
            return
        for handler in logging.getLogger(FLYTE_LOGGER).handlers:
            if record.levelno >= handler.level:
                handler.handle(record)


def follow_flyte() -> bool:
    """Show our log lines through Flyte's handlers at Flyte's level, unless logging is set up for us.

    Called once per Flyte task attempt; picks up a level Flyte was given since the last call,
    unless our level was changed in between. Returns whether our logger follows Flyte's.
    """
    global _level_we_set
    ours = logging.getLogger(ROOT)
    flyte_logger = logging.getLogger(FLYTE_LOGGER)
    with _lock:
        following = any(isinstance(h, ToFlyteHandlers) for h in ours.handlers)
        if following and ours.level != _level_we_set:  # set by someone else since: theirs to keep
            return False
        if not following:
            set_up = ours.handlers or ours.level != logging.NOTSET or logging.getLogger().handlers
            if set_up or not flyte_logger.handlers:  # ours is set up, or Flyte's is not
                return False
            ours.addHandler(ToFlyteHandlers())
        _level_we_set = flyte_logger.getEffectiveLevel()
        ours.setLevel(_level_we_set)
        return True


__all__ = ["FLYTE_LOGGER", "ToFlyteHandlers", "follow_flyte"]
