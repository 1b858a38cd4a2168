"""Secrets: no credential shows in a log line, an error, a traceback or a repr, on any backend.

Every logger (root, ``flyte_checkpoint``, urllib3, botocore/boto3, azure, google) is captured
at DEBUG while a checkpoint is saved (bytes and a directory), loaded, inspected through the
objects' ``repr`` (``Checkpoint``, the store, a writer, a reader, ``TaskContext``) and while
errors are provoked (a missing bucket, a damaged object, URIs carrying a token in their
user-info or query string). The text searched is every formatted log record (with its
traceback), and every error's message, ``repr`` and whole chained traceback. Each provoked
error must happen (a call that does not raise fails the test), and a password in a URI's
user-info is tried holding each of ``/ + # ? @ :`` (real AWS secret keys hold ``/`` and ``+``).

Secrets in use: fake S3 keys (moto accepts any), Azurite's well-known account key, a SAS
token made with it (its signature), a wrong account key, fake Google OAuth client secret /
refresh token / access token served by a token endpoint on 127.0.0.1, and tokens put in
URIs. Each is searched as written and percent-encoded.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.context import CheckpointPaths, TaskContext
from flyte_checkpoint.errors import InvalidURIError
from flyte_checkpoint.storage.registry import store_for
from tests.reliability import backends
from tests.reliability.backends import Backend
from tests.uri_secrets import PIECES, SPECIAL, assert_absent, with_password

#: The backends' fixtures (see backends.py), visible to pytest in this module.
backend = backends.backend
backend_pool = backends.backend_pool

URI_TOKEN = "UriTok3n-7f3a9c1e-never-shown"
URI_PASSWORD = "UriPassw0rd-b81d-never-shown"
LOGGERS = (
    "",
    "flyte_checkpoint",
    "urllib3",
    "botocore",
    "boto3",
    "s3transfer",
    "azure",
    "google",
    "requests",
)


class Capture(logging.Handler):
    """Every record of every logger, formatted with its traceback, at DEBUG."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@contextlib.contextmanager
def capture_logs() -> Iterator[Capture]:
    handler = Capture()
    root = logging.getLogger()
    saved = {name: logging.getLogger(name).level for name in LOGGERS}
    root.addHandler(handler)
    for name in LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def describe(exc: BaseException) -> str:
    """Message, repr and the whole chained traceback of an error."""
    return "\n".join([str(exc), repr(exc), *traceback.format_exception(type(exc), exc, exc.__traceback__)])


def with_signed_query(uri: str) -> str:
    """``uri`` (or a local path) with a signed query string."""
    if "://" not in uri:
        return f"file://{uri}?sig={URI_TOKEN}"
    return f"{uri}?sv=2024-01-01&sig={URI_TOKEN}&X-Amz-Signature={URI_TOKEN}"


def refused_everywhere(uri: str, backend_name: str, tmp_path: Path, texts: list[str]) -> int:
    """Use ``uri`` (credentials in its user-info) every way a task or an operator would;
    each use must raise ``InvalidURIError``. The reprs and errors go to ``texts``; returns
    the number of errors raised."""
    errors = []

    def refused(fn: Callable[[], object]) -> None:
        with pytest.raises(InvalidURIError) as info:
            fn()
        assert "credentials" in str(info.value), str(info.value)
        errors.append(info.value)
        texts.append(describe(info.value))

    paths = CheckpointPaths(uri, uri)
    tctx = TaskContext(1, paths, "run", "action")
    texts.extend([repr(paths), str(paths), repr(tctx), str(tctx)])
    if backend_name == "file":  # a local path is checked when the Checkpoint is made
        refused(lambda: fc.Checkpoint(uri, uri))
        refused(lambda: fc.Checkpoint(str(tmp_path / "unused"), uri))
        refused(lambda: tctx.checkpoint)
    else:
        cp = fc.Checkpoint(uri, uri)
        texts.extend([repr(cp), str(cp), repr(tctx.checkpoint)])
        refused(lambda: cp.save_sync(b"x"))
        refused(lambda: cp.load_sync())
        tctx.close()
        cp.close()
    store = store_for(uri)
    refused(lambda: store.stat(uri))
    refused(lambda: store.open_write(uri))
    refused(lambda: store.open_read(uri))
    refused(lambda: list(store.list(uri.rsplit("/", 1)[0] + "/")))
    return len(errors)


def exercise(backend: Backend, tmp_path: Path) -> tuple[str, int, int]:
    """Use the backend every way a task or an operator would; return (all text, ops, errors)."""
    texts: list[str] = []
    errors = 0
    ops = 0

    def expect_error(fn: Callable[[], object]) -> None:
        nonlocal errors
        with pytest.raises(Exception) as info:
            fn()
        errors += 1
        texts.append(describe(info.value))

    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True, exist_ok=True)
    (tree / "sub" / "w.bin").write_bytes(os.urandom(700_000))  # several parts/blocks/chunks
    (tree / "meta.json").write_text("{}")
    dest = backend.fresh("secrets")
    blob = backend.fresh("blob")

    with fc.Checkpoint(dest) as cp:
        cp.save_sync(tree)
        texts.append(repr(cp))
    fc.Checkpoint(blob).save_sync(b"payload")
    with fc.Checkpoint(str(tmp_path / "unused"), dest) as cp:
        assert cp.load_sync() is not None
        texts.append(repr(cp))
    ops += 3
    store = store_for(dest)
    texts += [repr(store), str(store), repr(getattr(store, "_store", store))]
    writer = store.open_write(backend.fresh("aborted"))
    writer.write(b"x")
    texts.append(repr(writer))
    writer.abort()
    reader = store.open_read(blob)
    texts.append(repr(reader))
    reader.close()
    ops += 2

    # A password in the user-info: every use is refused, and nothing shows it.
    errors += refused_everywhere(with_password(dest, URI_PASSWORD, "user"), backend.name, tmp_path, texts)
    # A token in the query string is part of the object's name on every backend: it works.
    signed = with_signed_query(dest)
    texts.append(repr(TaskContext(1, CheckpointPaths(signed, signed), "run", "action")))
    fc.Checkpoint(signed).save_sync(b"signed")
    with fc.Checkpoint(str(tmp_path / "unused"), signed) as cp:
        loaded = cp.load_sync()
        assert loaded is not None and loaded.read_bytes() == b"signed"
        texts.append(repr(cp))
    ops += 2

    missing_container = dest.replace(backend.root.split("/")[2], "no-such-bucket-fcp", 1)
    if backend.name != "file":
        expect_error(lambda: fc.Checkpoint(str(tmp_path / "unused"), missing_container).load_sync())
        expect_error(lambda: fc.Checkpoint(missing_container).save_sync(b"x"))
    else:
        expect_error(lambda: fc.Checkpoint("/proc/no-such-dir/ckpt").save_sync(b"x"))
    damaged = backend.fresh("damaged")
    good = tmp_path / "good.tgz"
    fc.Checkpoint(str(good)).save_sync(tree)
    store.write_bytes(damaged, good.read_bytes()[:300_000])
    expect_error(lambda: fc.Checkpoint(str(tmp_path / "unused"), damaged).load_sync())
    return "\n".join(texts), ops, errors


#: What other loggers' DEBUG lines show in place of a backend's own secret (so their check can fail).
REDACTED_IN_OTHERS = {"s3": ("Credential=<redacted>",)}


def run_and_check(
    backend: Backend, tmp_path: Path, extra_secrets: list[str], redacted_in_others: tuple[str, ...] = ()
) -> None:
    """Exercise ``backend`` and check that no secret shows; the URI tokens must show redacted
    in the project's logs and in the texts, and ``redacted_in_others`` in the other loggers'."""
    secrets = [*backend.secrets, *extra_secrets, URI_TOKEN, URI_PASSWORD]
    with capture_logs() as logs:
        text, ops, errors = exercise(backend, tmp_path)
    own = "\n".join(line for line in logs.lines if line.startswith("flyte_checkpoint"))
    others = "\n".join(line for line in logs.lines if not line.startswith("flyte_checkpoint"))
    assert len(logs.lines) > 10, "the DEBUG capture saw almost nothing: is logging wired?"
    assert "sig=<redacted>" in own and "<redacted>@" in own and "<redacted>@" in text
    for marker in redacted_in_others:
        assert marker in others, f"no other logger's line shows {marker}: its check proves nothing"
    assert_absent(secrets, own, "a log line of flyte_checkpoint")
    # In s3://, gs:// and az:// URIs a "?..." is part of the object's name (the plugins take names
    # literally), so the HTTP libraries' DEBUG request lines show it as a name: there the
    # query-string token is not a credential. Everything else is checked in every logger.
    names_literal = backend.name in ("s3", "gcs", "azure")
    assert_absent([x for x in secrets if not (names_literal and x == URI_TOKEN)], others, "a log line")
    assert_absent(secrets, text, "an error, traceback or repr")
    print(
        f"\nsecrets[{backend.name}]: {len(secrets)} secrets x 3 spellings absent from {len(logs.lines)}"
        f" DEBUG log lines, {errors} provoked errors (message, repr, chained traceback) and the reprs"
        f" of {ops} operations' objects"
    )


def test_no_credential_in_logs_errors_or_reprs(backend: Backend, tmp_path: Path):
    """Proves: with the backend's own credentials (fake S3 keys, Azurite's account key by
    connection string), no secret, and no token put in a URI, appears in any DEBUG log line of
    any logger, any error (message, repr, chained traceback) or any repr."""
    run_and_check(backend, tmp_path, [], REDACTED_IN_OTHERS.get(backend.name, ()))


def test_azure_sas_token_and_wrong_key_never_shown(backend_pool, tmp_path: Path):
    """Proves: on Azure with a SAS token (its signature) and with a wrong account key (a 403),
    neither the SAS signature nor either key appears in logs, errors or reprs."""
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    az = backend_pool.get("azure")
    d = az.details
    sas = generate_container_sas(
        d["account_name"],
        d["container"],
        account_key=d["account_key"],
        permission=ContainerSasPermissions(read=True, write=True, delete=True, list=True, create=True),
        expiry=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1),
    )
    signature = next(v for k, _, v in (p.partition("=") for p in sas.split("&")) if k == "sig")
    sas_env = {
        "AZURE_STORAGE_CONNECTION_STRING": "",
        "AZURE_STORAGE_SAS_TOKEN": sas,
        "AZURE_STORAGE_ACCOUNT_NAME": d["account_name"],
        "AZURE_STORAGE_ENDPOINT": d["blob_endpoint"],
    }
    sas_backend = Backend("azure", az.root, {**{k: v for k, v in az.env.items() if "CONNECTION" not in k}})
    with sas_backend.activated(**{k: v for k, v in sas_env.items() if v}):
        run_and_check(sas_backend, tmp_path / "sas", [signature, d["account_key"]], ("sig=<redacted>",))

    wrong_key = "V3JvbmdLZXktZmNwLXJlbGlhYmlsaXR5LW5ldmVyLXNob3duLTAxMjM0NTY3ODk="
    wrong = {
        "AZURE_STORAGE_ACCOUNT_NAME": d["account_name"],
        "AZURE_STORAGE_ACCOUNT_KEY": wrong_key,
        "AZURE_STORAGE_ENDPOINT": d["blob_endpoint"],
    }
    bad = Backend("azure", az.root, {k: v for k, v in az.env.items() if "CONNECTION" not in k})
    with bad.activated(**wrong), capture_logs() as logs:
        try:
            fc.Checkpoint(bad.fresh("denied")).save_sync(b"x")
        except PermissionError as exc:
            text = describe(exc)
        else:
            raise AssertionError("a wrong account key was accepted")
    assert "AZURE_STORAGE_ACCOUNT_KEY" in text, text  # the error names where the key came from instead
    assert_absent([wrong_key, d["account_key"]], text + "\n".join(logs.lines), "a 403's error or logs")


def test_gcs_oauth_secrets_never_shown(backend_pool, tmp_path: Path):
    """Proves: on GCS with real (non-anonymous) OAuth credentials, an authorized-user file's
    client secret, refresh token and bearer token (sent with every request) never appear in logs,
    errors or reprs (the emulator ignores the token, the requests carry it)."""
    gcs = backend_pool.get("gcs")
    client_secret = "GcsClientSecret-4e1f-never-shown"
    refresh_token = "1//GcsRefreshToken-9a2b-never-shown"
    access_token = "ya29.GcsAccessToken-c3d4-never-shown"
    creds = tmp_path / "adc.json"
    creds.write_text(
        json.dumps(
            {
                "type": "authorized_user",
                "client_id": "fcp-reliability.apps.googleusercontent.com",
                "client_secret": client_secret,
                "refresh_token": refresh_token,
                "token": access_token,  # valid for years: no refresh (no network) is needed
                "expiry": "2099-01-01T00:00:00Z",
            }
        )
    )
    env = {k: v for k, v in gcs.env.items() if k != "STORAGE_EMULATOR_HOST"}
    env |= {
        "FLYTE_CHECKPOINT_GCS_ENDPOINT_URL": gcs.details["endpoint"],
        "FLYTE_CHECKPOINT_GCS_ANONYMOUS": "false",
        "GOOGLE_APPLICATION_CREDENTIALS": str(creds),
        "GOOGLE_CLOUD_PROJECT": "fcp-reliability",
    }
    authed = Backend("gcs", gcs.root, env)
    with authed.activated():
        run_and_check(authed, tmp_path / "oauth", [client_secret, refresh_token, access_token])


KEY_ID = "AKIAUSERINFOKEY00042"


@pytest.mark.parametrize("char", list(SPECIAL.values()), ids=list(SPECIAL))
def test_a_password_holding_any_special_character_never_shows(backend: Backend, tmp_path: Path, char: str):
    """Proves: with ``KEY:SECRET@`` in a URI, SECRET holding ``char`` twice (as
    ``s3://AKIA...:wJalr.../K7MD.../bPxR...@bucket/key``), every use of the URI is refused with
    ``InvalidURIError`` on every backend (file when the ``Checkpoint`` is made, the plugins at
    their first call, on their real servers), and neither the secret, nor any piece of it between
    the special characters, nor the key id shows in an error (message, repr, chained traceback), a
    ``repr``/``str`` of ``Checkpoint``, ``CheckpointPaths`` or ``TaskContext``, or a DEBUG log line.
    The store's DEBUG lines do name the URI (so the log check can fail)."""
    password = char.join(PIECES)
    dest = backend.fresh("special")
    uri = with_password(dest, password, user=KEY_ID)
    texts: list[str] = []
    with capture_logs() as logs:
        errors = refused_everywhere(uri, backend.name, tmp_path, texts)
    logged = "\n".join(logs.lines)
    assert errors >= 6
    assert dest.rsplit("/", 2)[-2] in logged, "no DEBUG line named the URI: the log check proves nothing"
    secrets = [password, KEY_ID, *PIECES]
    assert_absent(secrets, "\n".join(texts), "an error, traceback, repr or str")
    assert_absent(secrets, logged, "a DEBUG log line")


@pytest.mark.parametrize("scheme", ["s3", "gs", "az", "abfss", "file"])
def test_uri_tokens_are_redacted_in_task_context_and_checkpoint_reprs(scheme: str):
    """Proves: the reprs of a ``Checkpoint``, a ``CheckpointPaths`` and a ``TaskContext`` built
    from URIs with a password or a signed query string each name the URI without them (no server
    needed); a local URI with a password cannot make a ``Checkpoint``, and its error hides it."""
    base = "/tmp/fcp/ckpt" if scheme == "file" else f"{scheme}://bucket/run/ckpt"
    secrets = [URI_TOKEN, URI_PASSWORD]
    for uri in (with_password(base, URI_PASSWORD, "user"), with_signed_query(base)):
        paths = CheckpointPaths(uri, uri)
        shown = {"CheckpointPaths": repr(paths), "TaskContext": repr(TaskContext(1, paths, "r", "a"))}
        if scheme == "file" and URI_PASSWORD in uri:
            with pytest.raises(InvalidURIError) as info:
                fc.Checkpoint(uri, uri)
            shown["the error of Checkpoint()"] = describe(info.value)
        else:
            with fc.Checkpoint(uri, uri) as cp:
                shown["Checkpoint"] = repr(cp)
        for what, text in shown.items():
            assert text.count(base[-8:]) >= 2, f"{what} does not show both URIs: {text[:300]}"
            assert_absent(secrets, text, f"a {what} repr")
