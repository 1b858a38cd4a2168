"""The pinned-read suite: :meth:`BlobStore.pin <flyte_checkpoint.storage.blobstore.BlobStore.pin>`.

Mix :class:`PinnedReadSuite` into the test class of any store (with the ``store`` and
``store_root`` fixtures of :class:`~flyte_checkpoint.testing.BlobStoreSuite`). Every store is
checked for what the core relies on whether it pins or not: a pin of an absent object is
``None``, a pin describes and reads its object, and ``changed()`` tells an object replaced or
removed since the pin from one that was not. A store that declares ``supports_pinned_reads``
is also checked for the pin itself: once the object is replaced, reads through a pin taken
before give the old bytes or raise :class:`~flyte_checkpoint.errors.ObjectReplacedError`,
never the new bytes, never a mix.

Class attributes: ``pinned_object_size`` (default 3 MiB and a few bytes: several ranges of
the usual read sizes); ``server_honours_pins`` (default True): set it to False for a test
server that ignores the version a read asks for (gcp-storage-emulator serves the object there
now whatever generation is asked); the tests of the pin itself are then not part of the
class, and the core's check after a failed read (``changed()``) is what keeps loads right.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest

from ..errors import NotFoundError, ObjectReplacedError
from ..storage.blobstore import BlobStore
from ..storage.pinned import PinnedObject
from ..uri import join
from .suite import _data, check_empty_root

#: The tests of the pin itself (reads of the old version after a replacement): a class whose
#: store does not declare ``supports_pinned_reads``, or whose server does not honour what a
#: pinned read asks, does not have them.
PIN_TESTS = (
    "test_reads_through_a_pin_never_give_the_object_that_replaced_it",
    "test_a_stream_opened_before_a_replacement_never_mixes_two_versions",
)


def _outcome(read: Callable[[], bytes]) -> bytes | str:
    """What ``read()`` gave, or ``"replaced"`` for an ObjectReplacedError."""
    try:
        return read()
    except ObjectReplacedError:
        return "replaced"


def _shown(got: bytes | str, old: bytes, new: bytes) -> str:
    if isinstance(got, str):
        return got
    name = "the old bytes" if got == old else "the new bytes" if got == new else "neither version"
    return f"{len(got)} bytes ({name}, sha256 {hashlib.sha256(got).hexdigest()[:12]})"


class PinnedReadSuite:
    """A pin describes one version of an object and reads only it (see the module docstring)."""

    supports_list: bool = True
    pinned_object_size: int = 3 * 1024 * 1024 + 17
    server_honours_pins: bool = True

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        for name in PIN_TESTS:
            if not cls.server_honours_pins:
                setattr(cls, name, None)  # pytest collects only callables: not part of the class
            elif getattr(cls, name) is None:  # closed by a base class, opened again here
                setattr(cls, name, getattr(PinnedReadSuite, name))

    @pytest.fixture
    def pin_root(self, store: BlobStore, store_root: str) -> str:
        if self.supports_list:
            check_empty_root(store, store_root)
        return store_root

    def _pinned(self, store: BlobStore, uri: str, data: bytes) -> PinnedObject:
        store.write_bytes(uri, data)
        pinned = store.pin(uri)
        assert pinned is not None and pinned.uri == uri and pinned.size == len(data), (
            f"promise broken: pin describes the object there (its URI and size): {pinned!r}"
        )
        return pinned

    def test_a_pin_of_an_absent_object_is_none(self, store: BlobStore, pin_root: str) -> None:
        assert store.pin(join(pin_root, "absent")) is None, "promise broken: pin of an absent object is None"

    def test_a_pin_reads_the_object_it_describes(self, store: BlobStore, pin_root: str) -> None:
        uri = join(pin_root, "pinned")
        data = _data(self.pinned_object_size, seed=1)
        with self._pinned(store, uri, data) as pinned:
            assert pinned.read_range(0, 10) == data[:10], "promise broken: a pin reads its object's bytes"
            middle = len(data) // 2
            assert pinned.read_range(middle, 70_000) == data[middle : middle + 70_000]
            assert pinned.read_range(len(data) - 5, 100) == data[-5:], (
                "promise broken: a pinned read_range gives fewer bytes at the end of the object"
            )
            assert pinned.read_range(len(data), 10) == b"", "promise broken: a read past the end is empty"
            with pinned.open_read() as stream:
                assert stream.read() == data, "promise broken: a pin's stream gives the whole object"
            assert pinned.changed() is False, "promise broken: changed() of an unchanged object is False"
        assert store.supports_pinned_reads == (type(store).pin is not BlobStore.pin), (
            f"promise broken: supports_pinned_reads says whether pin is the store's own;"
            f" {type(store).__name__} says {store.supports_pinned_reads}"
        )

    def test_an_empty_object_pins_with_size_zero(self, store: BlobStore, pin_root: str) -> None:
        uri = join(pin_root, "empty")
        with self._pinned(store, uri, b"") as pinned:
            assert pinned.read_range(0, 10) == b""
            with pinned.open_read() as stream:
                assert stream.read() == b""

    def test_changed_tells_a_replaced_or_removed_object(self, store: BlobStore, pin_root: str) -> None:
        uri = join(pin_root, "moving")
        with self._pinned(store, uri, _data(1000, seed=1)) as pinned:
            store.write_bytes(uri, _data(1200, seed=2))
            assert pinned.changed() is True, "promise broken: changed() is True once the object is replaced"
        with self._pinned(store, uri, _data(1000, seed=3)) as pinned:
            store.write_bytes(uri, _data(1000, seed=4))  # the same size, other bytes
            assert pinned.changed() is True, (
                "promise broken: changed() is True for a replacement of the same size"
            )
        with self._pinned(store, uri, _data(1000, seed=5)) as pinned:
            store.delete(uri)
            assert pinned.changed() is True, "promise broken: changed() is True once the object is removed"
            try:
                got: bytes | str = pinned.read_range(0, 10)
            except (ObjectReplacedError, NotFoundError) as exc:
                got = type(exc).__name__
            assert got in (_data(1000, seed=5)[:10], "ObjectReplacedError", "NotFoundError"), (
                f"promise broken: a pinned read of a removed object gives its old bytes or raises;"
                f" got {got!r}"
            )

    def test_reads_through_a_pin_never_give_the_object_that_replaced_it(
        self, store: BlobStore, pin_root: str
    ) -> None:
        uri = join(pin_root, "replaced")
        old = _data(self.pinned_object_size, seed=1)
        new = _data(self.pinned_object_size + 1000, seed=2)
        with self._pinned(store, uri, old) as pinned:
            store.write_bytes(uri, new)
            for what, read in (
                ("read_range", lambda: pinned.read_range(1000, 50_000)),
                ("open_read", lambda: pinned.open_read().read()),
            ):
                got = _outcome(read)
                expected = old[1000:51_000] if what == "read_range" else old
                assert got in (expected, "replaced"), (
                    f"promise broken: a pinned {what} after the object was replaced gives the old"
                    f" bytes or raises ObjectReplacedError; got {_shown(got, expected, new)}"
                )

    def test_a_stream_opened_before_a_replacement_never_mixes_two_versions(
        self, store: BlobStore, pin_root: str
    ) -> None:
        uri = join(pin_root, "mixed")
        old = _data(self.pinned_object_size, seed=3)
        new = _data(self.pinned_object_size, seed=4)  # the same size: only the bytes tell
        with self._pinned(store, uri, old) as pinned, pinned.open_read() as stream:
            first = stream.read(1000)

            def rest() -> bytes:
                store.write_bytes(uri, new)
                return first + stream.read()

            got = _outcome(rest)
            assert got in (old, "replaced"), (
                "promise broken: a pinned stream gives its version whole or raises ObjectReplacedError;"
                f" got {_shown(got, old, new)}"
            )


__all__ = ["PIN_TESTS", "PinnedReadSuite"]
