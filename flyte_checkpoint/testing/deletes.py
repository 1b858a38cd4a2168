"""Deleting many objects at once (:meth:`BlobStore.delete_many`).

The promises: every object named is removed, whatever its key (spaces, unicode, ``%``, ``?``,
``#``), and more than one request's worth of keys (S3's ``DeleteObjects`` takes 1,000); an
absent key is not an error, nor is a key named twice; a failure names the keys that may remain
(the error's ``failed``), after every other key was deleted. A sharded save removes its
markers so (one request per 1,000 on S3 instead of one per marker).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ..errors import CheckpointError, CheckpointPermissionError
from ..storage.blobstore import BlobStore
from ..uri import join
from .data import described, outcome
from .listing import ODD_NAMES


class DeleteManyTests:
    """:meth:`BlobStore.delete_many` (mixed into :class:`~flyte_checkpoint.testing.BlobStoreSuite`,
    which gives the fixtures). ``delete_many_count``: the keys of the large test (default 1,003:
    more than one S3 request's 1,000)."""

    delete_many_count: int = 1003

    def test_delete_many_removes_every_key_and_absent_keys_are_no_error(
        self, store: BlobStore, root: str
    ) -> None:
        """``delete_many`` of ``delete_many_count`` objects, odd keys among them, with absent
        keys and a key named twice: every object is gone, and nothing was raised; the same call
        again (every key absent now) raises nothing either; an object not named stays."""
        uris = [join(root, "many", f"marker-{i:05d}") for i in range(self.delete_many_count)]
        uris += [join(root, "many", "odd", name) for name in ODD_NAMES]
        kept = join(root, "many-kept")
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda uri: store.write_bytes(uri, b"x"), [*uris, kept]))
        absent = [join(root, "many", "never-written"), join(root, "elsewhere", "never-written")]
        named = [*uris, *absent, uris[0]]
        _, error = outcome(lambda: store.delete_many(named))
        assert error is None, (
            f"promise broken: delete_many removes every object named, an absent one is no error;"
            f" it {described(None, error)}"
        )
        left = [uri for uri in uris if store.stat(uri) is not None]
        assert not left, (
            f"promise broken: delete_many removes every object named; {len(left)} remain: {left[:5]}"
        )
        if getattr(self, "supports_list", True):
            listed = list(store.list(join(root, "many") + "/"))
            assert listed == [], f"promise broken: deleted objects are not listed; listed {listed[:5]}"
        _, error = outcome(lambda: store.delete_many(named))
        assert error is None, (
            f"promise broken: delete_many of objects already deleted is no error; it {described(None, error)}"
        )
        assert store.stat(kept) == 1, "promise broken: delete_many removes only the objects named"
        store.delete_many([])  # nothing to do

    def test_delete_many_names_the_keys_it_could_not_delete(self, store: BlobStore, root: str) -> None:
        """Where the store keeps the default ``delete_many`` (one ``delete`` a key): two keys whose
        deletes fail (here, denied) are named by the error, whose ``failed`` holds them, and
        every other key was deleted. A store with its own ``delete_many`` tests its failures
        itself (S3: the ``Errors`` of ``DeleteObjects``), since no request of the suite can make
        one key of a batch fail on any server."""
        if type(store).delete_many is not BlobStore.delete_many:
            return
        uris = [join(root, "denied", f"m{i}") for i in range(6)]
        for uri in uris:
            store.write_bytes(uri, b"x")
        denied = {uris[1], uris[4]}
        real = store.delete

        def delete(uri: str) -> None:
            if uri in denied:
                raise CheckpointPermissionError(f"denied: {uri}")
            real(uri)

        store.delete = delete  # type: ignore[method-assign]
        try:
            _, error = outcome(lambda: store.delete_many(uris))
        finally:
            del store.delete
        assert isinstance(error, CheckpointError), (
            f"promise broken: delete_many raises when a key could not be deleted; it {described(None, error)}"
        )
        assert isinstance(error, CheckpointPermissionError), (
            f"promise broken: the failures' own kind is kept where they share it; got {type(error).__name__}"
        )
        assert set(getattr(error, "failed", ())) == denied and all(u in str(error) for u in denied), (
            f"promise broken: the error names the keys that remain; it says {error} (failed:"
            f" {getattr(error, 'failed', None)})"
        )
        left = {uri for uri in uris if store.stat(uri) is not None}
        assert left == denied, f"promise broken: every other key is deleted; these remain: {sorted(left)}"


__all__ = ["DeleteManyTests"]
