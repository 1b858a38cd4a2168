"""``GCSStore.delete_many``: JSON API batches of 100 deletes per bucket; an object whose
sub-request failed is named by the error raised after every batch was sent."""

from __future__ import annotations

from typing import Any

import pytest

from flyte_checkpoint.errors import CheckpointPermissionError, ContainerNotFoundError, TransientError


def batches(store: Any, monkeypatch: pytest.MonkeyPatch, refuse: dict[str, int] | None = None) -> list[int]:
    """The size of each batch the store sends; the keys of ``refuse`` get its status instead
    of the service's answer (the emulator never fails a sub-request)."""
    sent: list[int] = []
    real = type(store)._batch_delete

    def counted(self: Any, bucket: str, items: list[Any]) -> list[int]:
        sent.append(len(items))
        refused = refuse or {}
        answers = iter(real(self, bucket, [(u, loc) for u, loc in items if u not in refused]))
        return [refused[u] if u in refused else next(answers) for u, _ in items]

    monkeypatch.setattr(type(store), "_batch_delete", counted)
    return sent


def test_objects_are_deleted_100_a_request(
    store: Any, gcs_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    uris = [f"{gcs_root}/m/{i:04d}" for i in range(250)]
    for uri in uris[:3] + uris[-3:]:
        store.write_bytes(uri, b"x")
    sent = batches(store, monkeypatch)
    store.delete_many(uris)
    assert sent == [100, 100, 50]
    assert list(store.list(f"{gcs_root}/m/")) == []


@pytest.mark.parametrize(("status", "kind"), [(403, CheckpointPermissionError), (503, TransientError)])
def test_objects_the_service_did_not_delete_are_named(
    store: Any, gcs_root: str, monkeypatch: pytest.MonkeyPatch, status: int, kind: type
) -> None:
    uris = [f"{gcs_root}/e/k{i}" for i in range(5)]
    for uri in uris:
        store.write_bytes(uri, b"x")
    batches(store, monkeypatch, {uris[1]: status, uris[3]: status})
    with pytest.raises(kind) as raised:
        store.delete_many(uris)
    assert set(raised.value.failed) == {uris[1], uris[3]}
    assert uris[1] in str(raised.value) and uris[3] in str(raised.value)
    assert [u for u in uris if store.stat(u) is not None] == [uris[1], uris[3]]


def test_a_missing_bucket_raises(store: Any) -> None:
    with pytest.raises(ContainerNotFoundError):
        store.delete_many(["gs://fcp-no-such-bucket/a", "gs://fcp-no-such-bucket/b"])
