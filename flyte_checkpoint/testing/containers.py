"""A missing bucket or container: ``ContainerNotFoundError`` from every operation.

A load from a mistyped bucket must fail, not return "no checkpoint" (the task would start over);
``ContainerNotFoundError`` is a ``NotFoundError``, so a backend that catches ``NotFoundError``
to mean "no object" turns it into ``None`` unless it catches ``ContainerNotFoundError`` first.
The recipe names a URI in a container that does not exist (``StoreRecipe.missing_container``).
:class:`ContainerSuite` needs the fixtures ``store_recipe`` and ``store_root``; it is part of
:class:`~flyte_checkpoint.testing.FaultSuite`, and a store with no server mixes it in alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ContainerNotFoundError
from ..uri import join
from .data import data, described, outcome, read_to_end, write_in_chunks
from .recipe import StoreRecipe, part_of
from .registered import load_through, save_through


class ContainerSuite:
    """A missing bucket or container (part of :class:`~flyte_checkpoint.testing.FaultSuite`)."""

    def test_a_missing_container_is_container_not_found_from_every_operation(
        self, store_recipe: StoreRecipe, store_root: str
    ) -> None:
        """``stat``, reads (``open_read``, ``read_bytes``, ``read_range``), writes (one request
        and several parts), ``list``, ``list_details``, ``delete``, and a ``Checkpoint`` load and
        save in a container that does not exist raise ``ContainerNotFoundError`` naming it: never
        ``None``, an empty listing, or a plain ``NotFoundError`` ("no checkpoint")."""
        missing = store_recipe.missing_container
        assert missing, (
            "setup: the StoreRecipe names no missing_container: give it a URI in a bucket (or"
            " container) that does not exist on the test server, such as 's3://no-such-bucket/x'"
        )
        store = store_recipe.direct()
        try:
            self._everything_fails(store, missing, store_root)
        finally:
            store.close()

    def _everything_fails(self, store: Any, missing: str, root: str) -> None:
        uri = join(missing, "object")
        several = data(2 * part_of(store) + 1, seed=3)
        operations: dict[str, Callable[[], Any]] = {
            "stat": lambda: store.stat(uri),
            "open_read": lambda: read_to_end(store, uri),
            "read_bytes": lambda: store.read_bytes(uri),
            "read_range": lambda: store.read_range(uri, 0, 10),
            "write": lambda: store.write_bytes(uri, b"state"),
            "write of several parts": lambda: write_in_chunks(store, uri, several),
            "delete": lambda: store.delete(uri),
            "Checkpoint.load_sync": lambda: load_through(store, uri, join(root, "restored")),
            "Checkpoint.save_sync": lambda: save_through(store, uri, b"state"),
        }
        if store.supports_list:
            operations["list"] = lambda: list(store.list(missing + "/"))
            operations["list_details"] = lambda: list(store.list_details(missing + "/"))
        name_of = container_name(missing)
        for name, operation in operations.items():
            got, error = outcome(operation)
            assert isinstance(error, ContainerNotFoundError), (
                f"promise broken: an operation in a missing container raises ContainerNotFoundError,"
                f" never None, an empty listing or a plain NotFoundError ('no checkpoint'); {name} in"
                f" {missing} {described(got, error)}"
            )
            assert name_of in str(error), (
                f"promise broken: a ContainerNotFoundError names the missing container ({name_of});"
                f" {name} raised: {error}"
            )


def container_name(uri: str) -> str:
    """The bucket or container of ``scheme://NAME[@account]/...``."""
    return uri.partition("://")[2].partition("/")[0].partition("@")[0]


__all__ = ["ContainerSuite", "container_name"]
