"""``S3Store.delete_many``: ``DeleteObjects``, 1,000 keys a request; a key S3 could not delete
(named in the answer's ``Errors``) is named by the error raised after every batch was sent."""

from __future__ import annotations

from typing import Any

import pytest

from flyte_checkpoint.errors import CheckpointPermissionError, TransientError


def test_keys_are_deleted_a_thousand_a_request(make_s3_store: Any, s3_root: str) -> None:
    store = make_s3_store()
    uris = [f"{s3_root}/m/{i:05d}" for i in range(2005)]
    for uri in uris[:3] + uris[-3:]:
        store.write_bytes(uri, b"x")
    client = store.client.get()
    sent: list[int] = []
    real = client.delete_objects

    def counted(**kwargs: Any) -> Any:
        sent.append(len(kwargs["Delete"]["Objects"]))
        return real(**kwargs)

    client.delete_objects = counted
    try:
        store.delete_many(uris)
    finally:
        del client.delete_objects
    assert sent == [1000, 1000, 5]
    assert list(store.list(f"{s3_root}/m/")) == []


@pytest.mark.parametrize(
    ("codes", "kind"),
    [
        (("AccessDenied", "AccessDenied"), CheckpointPermissionError),
        (("InternalError", "SlowDown"), TransientError),
    ],
)
def test_keys_s3_did_not_delete_are_named(
    make_s3_store: Any, s3_root: str, codes: tuple[str, str], kind: type
) -> None:
    """The answer's ``Errors`` (moto never sends any: the test adds them) name two keys: the
    error raised names both, of their kind (a transient one is retried by the core), and the
    other keys were deleted; an error for an absent key (``NoSuchKey``) is no error."""
    store = make_s3_store()
    uris = [f"{s3_root}/e/k{i}" for i in range(5)]
    for uri in uris:
        store.write_bytes(uri, b"x")
    client = store.client.get()
    real = client.delete_objects
    refused = {f"{s3_root.split('/', 3)[3]}/e/k1": codes[0], f"{s3_root.split('/', 3)[3]}/e/k3": codes[1]}

    def partly(**kwargs: Any) -> Any:
        objects = kwargs["Delete"]["Objects"]
        answer = real(
            **{
                **kwargs,
                "Delete": {**kwargs["Delete"], "Objects": [o for o in objects if o["Key"] not in refused]},
            }
        )
        answer["Errors"] = [
            {"Key": k, "Code": c, "Message": "refused by the test"} for k, c in refused.items()
        ]
        answer["Errors"].append({"Key": "elsewhere/absent", "Code": "NoSuchKey", "Message": "absent"})
        return answer

    client.delete_objects = partly
    try:
        with pytest.raises(kind) as raised:
            store.delete_many(uris)
    finally:
        del client.delete_objects
    assert set(raised.value.failed) == {uris[1], uris[3]}
    assert uris[1] in str(raised.value) and uris[3] in str(raised.value)
    assert [u for u in uris if store.stat(u) is not None] == [uris[1], uris[3]]
