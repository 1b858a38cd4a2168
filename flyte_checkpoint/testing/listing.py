"""Listings that keep siblings sharing a name prefix apart, and keys with odd characters.

``list(prefix)`` is a string prefix, not a folder: ``.../ckpt-1`` lists ``.../ckpt-1``,
``.../ckpt-1/x``, ``.../ckpt-10`` and ``.../ckpt-1x``, never ``.../ckpt-2``; ``.../ckpt-1/``
lists only what is inside. The core relies on it (a sharded save's cleanup lists one session's
markers; ``flyte-checkpoint ls`` lists one checkpoint). Keys keep their spaces, unicode and
``%`` (``a%2Fb`` is not ``a/b``), ``?`` and ``#``, and ``list_details`` lists the same URIs in the
same order.
"""

from __future__ import annotations

from ..storage.blobstore import BlobStore
from ..uri import join
from .data import described, outcome

#: Two families of siblings: a file store cannot hold ``ckpt-1`` beside ``ckpt-1/x``.
SIBLINGS = {
    "a": ("ckpt-1", "ckpt-10", "ckpt-1x", "ckpt-2"),
    "b": ("ckpt-1/x", "ckpt-10", "ckpt-1x", "ckpt-2"),
}
#: Keys that a store must keep as they are.
ODD_NAMES = ("dir with space/ckpt 1", "é ü 文字.bin", "50% done", "a%2Fb", "a+b=c&d", "q?x=1#frag")


class ListingTests:
    """Prefixes that are strings, and odd keys (mixed into
    :class:`~flyte_checkpoint.testing.BlobStoreSuite`, which gives the fixtures)."""

    def test_list_keeps_siblings_that_share_a_name_prefix_apart(self, store: BlobStore, root: str) -> None:
        """``list(".../ckpt-1")`` yields ``ckpt-1``, ``ckpt-1/x``, ``ckpt-10`` and ``ckpt-1x``
        (sorted), never ``ckpt-2``; ``".../ckpt-1/"`` only ``ckpt-1/x``; ``list_details`` the same
        URIs in the same order, and one level of them with ``ckpt-1/`` as a folder."""
        every = []
        for family, names in SIBLINGS.items():
            for name in names:
                uri = join(root, family, name)
                store.write_bytes(uri, name.encode())
                every.append(uri)
        every.sort()
        for prefix, want in (
            (join(root, "a", "ckpt-1"), ["a/ckpt-1", "a/ckpt-10", "a/ckpt-1x"]),
            (join(root, "b", "ckpt-1"), ["b/ckpt-1/x", "b/ckpt-10", "b/ckpt-1x"]),
            (join(root, "b", "ckpt-1") + "/", ["b/ckpt-1/x"]),
            (join(root, "a", "ckpt-10"), ["a/ckpt-10"]),
            (join(root, "a", "ckpt-3"), []),
            (root + "/", [u[len(root) + 1 :] for u in every]),
        ):
            listed = list(store.list(prefix))
            expected = [join(root, name) for name in want]
            assert listed == expected, (
                f"promise broken: list(prefix) yields the objects whose URI starts with the prefix (a"
                f" string, not a folder), sorted; list({prefix!r}) yielded {_short(listed, root)},"
                f" not {_short(expected, root)}"
            )
            details = [info.uri for info in store.list_details(prefix)]
            assert details == listed, (
                f"promise broken: list_details lists what list lists, in the same order;"
                f" list_details({prefix!r}) yielded {_short(details, root)}, list {_short(listed, root)}"
            )
        level = [(i.uri, i.is_folder) for i in store.list_details(join(root, "b", "ckpt-1"), recursive=False)]
        want_level = [
            (join(root, "b", "ckpt-1") + "/", True),
            (join(root, "b", "ckpt-10"), False),
            (join(root, "b", "ckpt-1x"), False),
        ]
        assert level == want_level, (
            f"promise broken: list_details(prefix, recursive=False) lists one level, deeper objects as"
            f" one folder each, sorted; for .../b/ckpt-1 it yielded {level}"
        )

    def test_keys_with_spaces_unicode_and_percent_are_kept(self, store: BlobStore, root: str) -> None:
        """Keys with spaces, unicode, ``%`` (``a%2Fb`` is not ``a/b``), ``+``, ``=``, ``&``,
        ``?`` and ``#`` are stored, stat'ed, read and listed as they were written, each under its
        own prefix."""
        uris = sorted(join(root, "odd", name) for name in ODD_NAMES)
        for uri in uris:
            _, error = outcome(lambda: store.write_bytes(uri, uri.encode()))  # noqa: B023 - called at once
            assert error is None, (
                f"promise broken: a key is kept as written; writing {uri!r} {described(None, error)}"
            )
        for uri in uris:
            size = store.stat(uri)
            assert size == len(uri.encode()), (
                f"promise broken: a key is kept as written; stat({uri!r}) says {size}"
            )
            got = store.read_bytes(uri)
            assert got == uri.encode(), (
                f"promise broken: a key is kept as written; {uri!r} read back {got[:80]!r}"
            )
            if not getattr(self, "supports_list", True):
                continue
            mine = list(store.list(uri))
            assert mine == [uri], f"promise broken: a key is listed as written; list({uri!r}) yielded {mine}"
        if getattr(self, "supports_list", True):
            listed = list(store.list(join(root, "odd") + "/"))
            assert listed == uris, f"promise broken: keys are listed as written, sorted; listed {listed}"


def _short(uris: list[str], root: str) -> list[str]:
    return [u[len(root) + 1 :] if u.startswith(root + "/") else u for u in uris]


__all__ = ["ODD_NAMES", "SIBLINGS", "ListingTests"]
