"""The object sizes the suites test a store at: picked from the store's own parts and ranges.

A writer that drops its last part when the object is an exact multiple of the part size, or a
reader whose ``read(n)`` stops short at the end of a range, works at every size but a few; the
suite cannot leave those sizes to the backend author's ``large_object_size``. So it takes the
store's units (its declared ``part_size`` and ``read_range_size``, and the same settings of its
kit config when it has one) and tests around each: one byte less, exactly and one byte more than
one and two units, and exactly three, plus zero bytes and one byte. ``large_object_size`` adds a
size; it never removes one.

The cost is bounded: sizes are taken in order of what they catch (exactly one unit and the bytes
around it, then two units, then three) while their sum stays within :data:`SIZE_BUDGET`; the
smallest unit's one-byte-less, exact, one-byte-more and two-unit sizes are always taken. A store
with 8 MiB parts and ranges is tested at 7 sizes (0, 1 byte, 8 MiB and one byte less and one
more, 16 MiB and one byte more), 56 MiB in all; with 256 KiB parts and ranges of 64 KiB, at 16
(3.7 MiB); with 64 MiB parts, at 0, 1 byte, 64 MiB with one byte less and one more, and 128 MiB
(320 MiB: the always-taken sizes go over the budget). ``upload_file`` is tested at the sizes
around parts (its reads are parts); the read tests take an object of two units and one byte for
each unit whose object fits in the budget (the smallest always).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

from ..storage.blobstore import BlobStore
from ..uri import join
from .data import data, read_to_end, write_from_one_buffer

#: Most bytes, summed over the sizes, that one test writes (and reads back) at its sizes.
SIZE_BUDGET = 64 * 1024 * 1024
#: (units, bytes more) of each size taken around a unit, in the order they are taken.
STEPS = ((1, 0), (1, -1), (1, 1), (2, 0), (2, 1), (2, -1), (3, 0))


@dataclass(frozen=True, order=True)
class Size:
    """One size to test, and why (for the failure message)."""

    bytes: int
    why: str


def units(store: BlobStore) -> list[tuple[int, str]]:
    """The store's units, smallest first, each with its name: the declared ``part_size`` and
    ``read_range_size``, then the ``part_size`` and ``read_range_size`` of ``store.config``
    (the kit's settings) where they differ."""
    found: dict[int, str] = {}
    config: Any = getattr(store, "config", None)
    for owner, label in ((store, ""), (config, "config.")):
        for name in ("part_size", "read_range_size"):
            value = getattr(owner, name, None) if owner is not None else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 1:
                found.setdefault(value, f"{label}{name} {value}")
    return sorted((size, why) for size, why in found.items())


def boundary_sizes(store: BlobStore, extra: int | None = None, budget: int = SIZE_BUDGET) -> list[Size]:
    """The sizes to test ``store`` at, smallest first (see the module docstring); ``extra`` (the
    test class's ``large_object_size``) is added to them."""
    picked: dict[int, str] = {0: "zero bytes", 1: "one byte"}
    if extra is not None and extra >= 0:
        picked.setdefault(extra, "large_object_size")
    found = units(store)
    if found:  # the smallest unit's one byte less, exact, one byte more and two units: always
        unit, name = found[0]
        for times, off in ((1, 0), (1, -1), (1, 1), (2, 0)):
            picked.setdefault(times * unit + off, _why(times, off, name))
    spent = sum(picked)
    for times, off in STEPS:
        for unit, name in found:
            size = times * unit + off
            if size not in picked and spent + size <= budget:
                picked[size] = _why(times, off, name)
                spent += size
    return [Size(size, why) for size, why in sorted(picked.items())]


def _why(times: int, off: int, unit: str) -> str:
    """``"one byte more than 2 x part_size 262144"``."""
    multiple = unit if times == 1 else f"{times} x {unit}"
    return {
        0: f"exactly {multiple}",
        -1: f"one byte less than {multiple}",
        1: f"one byte more than {multiple}",
    }[off]


def size_label(size: Size) -> str:
    """``"524288 bytes (exactly 2 x part_size 262144)"``."""
    return f"{size.bytes} bytes ({size.why})"


class SizeTests:
    """Round trips and reads at the sizes :func:`boundary_sizes` picks (mixed into
    :class:`~flyte_checkpoint.testing.BlobStoreSuite`, which gives the fixtures)."""

    large_object_size: int

    def test_round_trip_at_the_sizes_around_parts_and_ranges(self, store: BlobStore, root: str) -> None:
        """At zero bytes, one byte, and one byte less than, exactly and one byte more than one
        and two of the store's parts and read ranges, exactly three (and ``large_object_size``):
        a chunked write from one buffer the caller refills after each ``write`` (as the core's
        does) stores the object whole (``stat``, then every byte read back); so does
        ``upload_file`` at the sizes around parts, the object read back with ``read_bytes``."""
        import tempfile

        parts = {u for u, name in units(store) if name.endswith(f"part_size {u}")}
        for size in boundary_sizes(store, self.large_object_size):
            uri = join(root, f"size-{size.bytes}")
            payload = data(size.bytes, seed=size.bytes)
            write_from_one_buffer(store, uri, payload)
            _check_stored(store, uri, payload, f"a write of {size_label(size)}", read_to_end)
            if not any(abs(size.bytes - k * unit) <= 1 for unit in parts for k in (1, 2, 3)):
                store.delete(uri)
                continue
            with tempfile.TemporaryDirectory() as tmp:
                src = os.path.join(tmp, "src")
                with open(src, "wb") as f:
                    f.write(payload)
                store.upload_file(src, uri)
            _check_stored(store, uri, payload, f"upload_file of {size_label(size)}", BlobStore.read_bytes)
            store.delete(uri)

    def test_read_n_returns_n_bytes_across_range_boundaries(self, store: BlobStore, root: str) -> None:
        """``open_read(uri).read(n)`` returns exactly ``n`` bytes until the object ends, then the
        rest, then ``b""``, whatever ranges or parts the store reads in: on an object of two of
        each of the store's units and one byte, reads that end one byte before a boundary, cross
        it by one byte, then by a whole unit; and ``read_range`` across the same boundaries."""
        found = units(store)
        objects = [
            (2 * unit + 1, unit, f"2 x {name} + 1 bytes")
            for unit, name in found
            if unit == found[0][0] or 2 * unit + 1 <= SIZE_BUDGET
        ]
        objects.append((self.large_object_size + 1, 1024 * 1024 + 3, "large_object_size + 1 bytes"))
        for size, unit, what in objects:
            uri = join(root, f"reads-{size}")
            payload = data(size, seed=size)
            store.write_bytes(uri, payload)
            pattern = [unit - 1, 2, unit] if unit > 1 else [1]
            offset = 0
            with store.open_read(uri) as r:
                for step in range(size + 2):
                    n = pattern[step % len(pattern)]
                    chunk = r.read(n)
                    want = min(n, size - offset)
                    assert len(chunk) == want, (
                        f"promise broken: open_read's read(n) returns n bytes unless at the end; on an"
                        f" object of {what} ({size}), read({n}) at offset {offset} returned {len(chunk)}"
                    )
                    assert chunk == payload[offset : offset + want], (
                        f"promise broken: read(n) returns the object's next bytes; read({n}) at offset"
                        f" {offset} of {what} returned other bytes"
                    )
                    offset += want
                    if offset >= size:
                        break
                tail = r.read(n)
                assert tail == b"", (
                    f"promise broken: read past the end returns b''; it returned {len(tail)} bytes ({what})"
                )
            for start, length in (
                (unit - 1, 2),
                (unit, unit),
                (unit - 1, unit + 2),
                (size - 1, 10),
                (size, 10),
            ):
                got = store.read_range(uri, start, length)
                assert got == payload[start : start + length], (
                    f"promise broken: read_range(uri, start, length) returns the object's bytes"
                    f" [start, start + length), fewer only at its end; read_range({start}, {length})"
                    f" of an object of {what} ({size}) returned {len(got)} bytes"
                    + (" (other bytes)" if len(got) == len(payload[start : start + length]) else "")
                )
            store.delete(uri)


def _check_stored(store: BlobStore, uri: str, payload: bytes, what: str, read: Any) -> None:
    size = store.stat(uri)
    assert size == len(payload), (
        f"promise broken: an object is stored whole; after {what}, stat says {size} bytes"
    )
    got = read(store, uri)
    assert len(got) == len(payload), (
        f"promise broken: an object is stored whole; after {what}, {len(got)} bytes were read back"
    )
    assert hashlib.sha256(got).digest() == hashlib.sha256(payload).digest(), (
        f"promise broken: an object reads back as written; after {what}, other bytes were read back"
    )


__all__ = ["SIZE_BUDGET", "Size", "SizeTests", "boundary_sizes", "size_label", "units"]
