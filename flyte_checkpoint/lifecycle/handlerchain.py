"""The handlers our SIGTERM handler calls after the final saves, and handlers set after ours.

Our handler is installed in front of the one it found (:func:`flyte_checkpoint.lifecycle.preemption.install`)
and calls it after the saves. Code that runs later may set a handler of its own (Flyte's
tracked local runs, an asyncio loop's ``add_signal_handler``, a user's ``signal.signal``):
then SIGTERM no longer reaches ours, and the final saves would silently not run. Some such
handlers keep the one they found and call it (PyTorch Lightning composes the handlers it finds
into one object): those still reach ours, and nothing needs doing. For the others, ours is
installed again in front (from the main thread: only it may set a handler), and the handler
set after ours joins the chain: on SIGTERM the saves run, then that handler, as it would have
run alone. A handler set later that calls the one it found (ours) continues the chain from
where it is, so every handler runs once and the one found first comes last.

A handler set from outside Python (``signal.getsignal`` gives ``None``) cannot be called:
at its place in the chain the default action ends the process, as without a Python handler.
"""

from __future__ import annotations

import functools
import os
import signal
import types
from collections.abc import Callable
from typing import Any

#: How deep :func:`reaches` looks into a handler (closures, attributes, partials, sequences),
#: and how many items of each list, tuple, set or dict.
DEPTH = 3
ITEMS = 64


def reaches(handler: Any, target: Callable[..., Any]) -> bool:
    """Whether calling ``handler`` may call ``target``: it is ``target``, or holds it (in a
    closure cell, a default argument, a ``functools.partial``, a bound method's object or a
    callable object's attributes, and the lists, tuples and dicts among them, up to
    :data:`DEPTH` levels and :data:`ITEMS` items each). A handler that keeps the one it found
    to call it holds it so.
    """
    seen: set[int] = set()

    def look(obj: Any, depth: int) -> bool:
        if obj is target:
            return True
        if depth == 0 or id(obj) in seen or isinstance(obj, (str, bytes, int, float, type)):
            return False
        seen.add(id(obj))
        inner: list[Any] = []
        if isinstance(obj, functools.partial):
            inner += [obj.func, *obj.args, *obj.keywords.values()]
        elif isinstance(obj, (list, tuple, set, frozenset)):
            inner += list(obj)[:ITEMS]
        elif isinstance(obj, dict):
            inner += list(obj.values())[:ITEMS]
        else:
            func = getattr(obj, "__func__", obj)  # a bound method: its function and its object
            if func is not obj:
                inner += [func, getattr(obj, "__self__", None)]
            for cell in getattr(func, "__closure__", None) or ():
                try:
                    inner.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    pass
            inner += list(getattr(func, "__defaults__", None) or ())
            if not isinstance(obj, (types.FunctionType, types.MethodType, types.ModuleType)):
                inner += list(getattr(obj, "__dict__", {}).values())[:ITEMS]  # a callable object's
        return any(look(x, depth - 1) for x in inner)

    return look(handler, DEPTH)


def describe(handler: Any) -> str:
    """A handler as a message names it."""
    if handler is signal.SIG_DFL:
        return "SIG_DFL (the default action: end the process)"
    if handler is signal.SIG_IGN:
        return "SIG_IGN (ignore it)"
    if handler is None:
        return "a handler set outside Python"
    target = handler if hasattr(handler, "__qualname__") else type(handler)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(handler))}"


class Chain:
    """What our handler calls after the saves: the handlers set after it that it was installed
    again in front of (newest first), then the one it found when first installed."""

    def __init__(self, found: Any = signal.SIG_DFL, above: list[Any] | None = None) -> None:
        self.found = found
        self.above: list[Any] = list(above or [])
        #: The place being called, while the chain runs (a handler there may call ours again).
        self.at: int | None = None

    @property
    def handlers(self) -> list[Any]:
        return [*self.above, self.found]

    def put_above(self, handler: Any) -> None:
        """``handler`` was set after ours, which is now installed again in front of it."""
        if handler not in self.above:
            self.above.insert(0, handler)

    def below_ours(self) -> Any:
        """The handler to put back when ours is uninstalled: the one right below it."""
        return self.handlers[0]

    def call(self, signum: int, frame: Any) -> None:
        """End the process as the handlers below ours would have: the next one in the chain
        (the first, or the one after the handler that called ours again); a Python handler is
        called; ``SIG_IGN`` returns; ``SIG_DFL`` or a handler set outside Python: the default
        action, by the signal itself."""
        place = 0 if self.at is None else self.at + 1
        handlers = self.handlers
        if place >= len(handlers):
            return
        outer, self.at = self.at, place
        try:
            handler = handlers[place]
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_IGN:
                return
            else:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
        finally:
            self.at = outer


__all__ = ["DEPTH", "ITEMS", "Chain", "describe", "reaches"]
