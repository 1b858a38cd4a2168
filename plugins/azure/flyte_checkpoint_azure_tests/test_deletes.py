"""``AzureStore.delete_many``: Blob Batch, 256 deletes a request per container; a blob the
service did not delete (its sub-response's status) is named by the error raised after every
batch was sent."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from flyte_checkpoint.errors import CheckpointPermissionError, TransientError

from .helpers import BUCKET


def watched(store: Any, answer: Any = None) -> list[int]:
    """The number of blobs of each batch the store sends from now on; ``answer(names, real)``
    may replace the service's sub-responses."""
    sent: list[int] = []
    real_container = store.client.container

    def container(loc: Any) -> Any:
        client = real_container(loc)
        real = client.delete_blobs

        def delete_blobs(*names: str, **kwargs: Any) -> Any:
            sent.append(len(names))
            return answer(names, real, kwargs) if answer else real(*names, **kwargs)

        client.delete_blobs = delete_blobs
        return client

    store.client.container = container
    return sent


def test_blobs_are_deleted_256_a_request(make_store: Any) -> None:
    store = make_store()
    root = f"az://{BUCKET}/{uuid.uuid4().hex}"
    uris = [f"{root}/m/{i:04d}" for i in range(600)]
    for uri in uris[:3] + uris[-3:]:
        store.write_bytes(uri, b"x")
    sent = watched(store)
    store.delete_many(uris)
    assert sent == [256, 256, 88]
    assert list(store.list(f"{root}/m/")) == []


@pytest.mark.parametrize(("status", "kind"), [(403, CheckpointPermissionError), (503, TransientError)])
def test_blobs_the_service_did_not_delete_are_named(make_store: Any, status: int, kind: type) -> None:
    """Two sub-responses fail (Azurite never fails one: the test makes them): the error names
    both blobs, of their kind, and the other blobs were deleted."""
    store = make_store()
    root = f"az://{BUCKET}/{uuid.uuid4().hex}"
    uris = [f"{root}/e/k{i}" for i in range(5)]
    for uri in uris:
        store.write_bytes(uri, b"x")
    refused = {uris[1].split("/", 3)[3], uris[3].split("/", 3)[3]}

    def answer(names: tuple[str, ...], real: Any, kwargs: Any) -> Any:
        answers = iter(real(*[n for n in names if n not in refused], **kwargs))
        failed = SimpleNamespace(status_code=status, headers={"x-ms-error-code": "Refused"})
        return [failed if n in refused else next(answers) for n in names]

    watched(store, answer)
    with pytest.raises(kind) as raised:
        store.delete_many(uris)
    assert set(raised.value.failed) == {uris[1], uris[3]}
    assert uris[1] in str(raised.value) and uris[3] in str(raised.value)
    assert [u for u in uris if store.stat(u) is not None] == [uris[1], uris[3]]


def test_a_missing_container_raises(make_store: Any) -> None:
    from flyte_checkpoint.errors import ContainerNotFoundError

    from .helpers import MISSING_BUCKET

    store = make_store()
    with pytest.raises(ContainerNotFoundError):
        store.delete_many([f"az://{MISSING_BUCKET}/a", f"az://{MISSING_BUCKET}/b"])
