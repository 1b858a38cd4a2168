"""The three cloud plugins mirror each other down to names (issue 33).

Each module of ``plugins/{s3,gcs,azure}/flyte_checkpoint_<cloud>/`` (and each plugin test
package's ``server.py``) is read with :mod:`ast`, never imported (no SDK is needed). Its public
names are the module's top-level functions, classes and constants not starting with ``_``, and
the public methods, properties and fields of its classes (``S3Store.list``, a config's
settings), with the cloud's name replaced (``S3Store`` ~ ``GCSStore`` ~ ``AzureStore`` is
``{Cloud}Store``). A name that is not in all three plugins is a difference; each must be listed
in :data:`ACCEPTED` with its reason, and an accepted difference that is gone must leave the list
too, so the list stays the truth. A module's logger (``log = logging.getLogger(...)``) and type
variables are not API.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLOUDS = {"s3": "S3", "gcs": "GCS", "azure": "Azure"}
#: Modules compared: the twelve of each plugin, and the test packages' server helpers.
MODULES = (
    "client",
    "config",
    "copies",
    "errors",
    "integrity",
    "plugin",
    "reader",
    "redaction",
    "shards",
    "store",
    "uris",
    "writer",
    "tests/server",
)

#: Why a cloud has a name the others lack, by reason; each entry is ``"module:name"`` (with
#: ``{Cloud}`` for the cloud's name) and the clouds that have it.
REASONS: dict[str, dict[str, tuple[str, ...]]] = {
    # One SDK per cloud: the objects that hold its clients differ in what they hand out.
    "S3 hands out one boto3 client; GCS an authorized session and a storage client with their "
    "retries and upload URLs; Azure one service client per account and endpoint, and the "
    "blob and container clients of a location, with the credential for an account": {
        "client:{Cloud}Client.get": ("s3",),
        "client:{Cloud}Client.session": ("gcs",),
        "client:{Cloud}Client.storage": ("gcs",),
        "client:{Cloud}Client.endpoint": ("gcs",),
        "client:{Cloud}Client.retry": ("gcs",),
        "client:{Cloud}Client.upload_retry": ("gcs",),
        "client:{Cloud}Client.upload_url": ("gcs",),
        "client:PerRequestRetry": ("gcs",),
        "client:{Cloud}Client.service": ("azure",),
        "client:{Cloud}Client.blob": ("azure",),
        "client:{Cloud}Client.container": ("azure",),
        "client:{Cloud}Client.credential_for": ("azure",),
    },
    "facts of one cloud's service or SDK, used by more than one module of that plugin": {
        "client:FALLBACK_REGION": ("s3",),  # S3 needs a region; the others have none
        "client:SCOPES": ("gcs",),  # Google's OAuth scope
        "client:DEFAULT_ENDPOINT": ("gcs",),  # S3's and Azure's come from the region and account
        "client:SDK_GET_SIZE": ("azure",),  # azure-storage-blob holds each answer twice
        "client:DATA_BLOCK_SIZE": ("azure",),
        "config:EMULATOR_ENV": ("gcs",),  # STORAGE_EMULATOR_HOST
        "config:PROJECT_ENVS": ("gcs",),
        "config:IGNORE_ENDPOINTS": ("s3",),  # AWS_IGNORE_CONFIGURED_ENDPOINT_URLS
        "config:DEFAULT_SUFFIX": ("azure",),  # core.windows.net
        "config:DEV_ACCOUNT": ("azure",),  # UseDevelopmentStorage=true
        "config:DEV_KEY": ("azure",),
        "config:DEV_ENDPOINT": ("azure",),
        "config:IDENTITY_HINT": ("azure",),  # the [identity] extra
        "integrity:HINT": ("s3",),  # the [crt] extra
        "writer:CONTENT_TYPE": ("gcs",),
        "config:MAX_SOURCES": ("gcs",),  # a compose takes at most 32 sources
        # GCS's pieces are whole objects (no part numbers to share): its sharded saves are bound by
        # the largest object alone; S3's and Azure's by their parts' counts and sizes (SHARD_LIMITS)
        "config:MAX_OBJECT_SIZE": ("gcs",),
        "shards:{Cloud}ShardedWrites.compose_requests": ("gcs",),  # compose's rounds of 32 sources
        "tests/server:TEST_MIN_PART_SIZE": ("s3",),  # moto's S3_UPLOAD_PART_MIN_SIZE
        "tests/server:moto_auth": ("s3",),  # moto's switch for authentication
    },
    "Azure names an account (the URI's host or the configuration) and takes connection strings: "
    "S3 and GCS have one endpoint and no account": {
        "config:Auth": ("azure",),
        "config:account_from_endpoint": ("azure",),
        "config:parse_connection_string": ("azure",),
        "config:{Cloud}Config.account_for": ("azure",),
        "config:{Cloud}Config.auth": ("azure",),
        "config:{Cloud}Config.default_account": ("azure",),
        "config:{Cloud}Config.endpoint_for": ("azure",),
        "config:{Cloud}Config.secrets": ("azure",),
        "config:Auth.endpoint_suffix": ("azure",),
        "config:Auth.key": ("azure",),
        "config:Auth.kind": ("azure",),
        "config:Auth.principal": ("azure",),
        "config:Auth.protocol": ("azure",),
        "config:Auth.sas": ("azure",),
        "config:Auth.source": ("azure",),
        "tests/server:{Cloud}Server.account_key": ("azure",),
        "tests/server:{Cloud}Server.account_name": ("azure",),
        "tests/server:ACCOUNT_KEY": ("azure",),
        "tests/server:ACCOUNT_NAME": ("azure",),
        "tests/server:{Cloud}Server.connection_string": ("azure",),
        "tests/server:LOCAL_EXECUTABLE": ("azure",),  # Azurite is an npm package, not a Python one
        "tests/server:PLUGIN_DIR": ("azure",),
        "tests/server:find_executable": ("azure",),
    },
    "each cloud's own settings beyond the twelve every CloudConfig shares (its credentials, "
    "S3's region, profile, addressing style and checksum type, GCS's project and session; the "
    "README's Settings table lists them)": {
        "config:{Cloud}Config.access_key_id": ("s3",),
        "config:{Cloud}Config.secret_access_key": ("s3",),
        "config:{Cloud}Config.session_token": ("s3",),
        "config:{Cloud}Config.profile": ("s3",),
        "config:{Cloud}Config.region": ("s3",),
        "config:{Cloud}Config.addressing_style": ("s3",),
        "config:{Cloud}Config.checksum_type": ("s3",),
        "config:{Cloud}Config.credentials": ("gcs",),
        "config:{Cloud}Config.project": ("gcs",),
        "config:{Cloud}Config.session": ("gcs",),
        "config:{Cloud}Config.account_key": ("azure",),
        "config:{Cloud}Config.account_name": ("azure",),
        "config:{Cloud}Config.client_id": ("azure",),
        "config:{Cloud}Config.client_secret": ("azure",),
        "config:{Cloud}Config.connection_string": ("azure",),
        "config:{Cloud}Config.credential": ("azure",),
        "config:{Cloud}Config.sas_token": ("azure",),
        "config:{Cloud}Config.tenant_id": ("azure",),
    },
    "GCS redeclares two shared settings with its own default: max_concurrency 1 (a resumable "
    "session takes its chunks in order) and anonymous true when STORAGE_EMULATOR_HOST is set "
    "(as Google's libraries do)": {
        "config:{Cloud}Config.max_concurrency": ("gcs",),
        "config:{Cloud}Config.anonymous": ("gcs",),
    },
    "the configuration's extra rules of one cloud (S3's profile and endpoint sources, GCS's "
    "(connect, read) timeout pair of requests)": {
        "config:{Cloud}Config.resolve": ("s3",),
        "config:{Cloud}Config.describe_endpoint": ("s3",),
        "config:{Cloud}Config.timeout": ("gcs",),
    },
    "GCS copies nothing on the server (compose and rewrite take whole objects: plugins/gcs/"
    "README.md#incremental-saves), so it has no copy functions and declares LIMITS = None; "
    "S3 copies parts (UploadPartCopy, checked against the ETags before the commit), Azure "
    "blocks (Put Block From URL, with a SAS or token for the source)": {
        "copies:describe": ("s3", "azure"),
        "copies:read_source": ("s3", "azure"),
        "copies:copy_part": ("s3",),
        "copies:check_unchanged": ("s3",),
        "copies:part_crc": ("s3",),
        "copies:copy_block": ("azure",),
        "copies:source_access": ("azure",),
        "copies:SAS_LIFETIME": ("azure",),
        "copies:STORAGE_SCOPE": ("azure",),
        "store:{Cloud}Store.copy_source": ("s3", "azure"),
        "writer:{Cloud}Writer.upload_file": ("azure",),  # MD5 on: the file is read in order
    },
    "a whole-object copy (checkpoint generations, docs/history.md): S3 and Azure copy the whole "
    "object as one range with the core's default (their range copies); GCS, which copies no "
    "ranges, overrides it with objects.rewrite": {
        "store:{Cloud}Store.copy_object": ("gcs",),
    },
    "what each service is sent and answers with to check a checksum: S3 a CRC field per "
    "request (ChecksumCRC32...), GCS an object field or an X-Goog-Hash header, Azure a "
    "Content-MD5 header and ContentSettings; for_write and for_read are the shared roles": {
        "integrity:field": ("s3",),
        "integrity:request_args": ("s3",),
        "integrity:metadata": ("gcs",),
        "integrity:hash_header": ("gcs",),
        "integrity:ALGORITHM": ("azure",),
        "integrity:block_headers": ("azure",),
        "integrity:content_settings": ("azure",),
    },
    "a conditional create of a manifest (docs/history.md, several savers of one destination): "
    "S3 and Azure send If-None-Match: *; GCS keeps the core's default (a check, then a write): "
    "its uploads do not send ifGenerationMatch=0 yet": {
        "store:{Cloud}Store.write_bytes_if_absent": ("s3", "azure"),
    },
    "only S3 tries its abort more than once: the parts of an incomplete multipart upload stay "
    "stored, and billed, until it is aborted or a lifecycle rule removes it; a GCS session "
    "expires by itself (GCS cancels it once, best effort) and Azure's uncommitted blocks are "
    "discarded by the service (its abort has nothing to send)": {
        "writer:ABORT_TRIES": ("s3",),
    },
    "the error codes of S3 are strings in a table; GCS and Azure answer with statuses and "
    "exception classes": {
        "errors:DAMAGED_CODES": ("s3",),
        "errors:KEY_MISSING_CODES": ("s3",),
        "errors:PERMISSION_CODES": ("s3",),
        "errors:TRANSIENT_CODES": ("s3",),
        "errors:error_code": ("s3", "azure"),
        "errors:status_of": ("gcs", "azure"),
        "errors:detail_of": ("gcs",),
        "errors:is_transient": ("gcs",),
    },
}

ACCEPTED: dict[str, tuple[str, ...]] = {
    name: clouds for group in REASONS.values() for name, clouds in group.items()
}


def module_path(root: Path, cloud: str, module: str) -> Path:
    if module.startswith("tests/"):
        return root / "plugins" / cloud / f"flyte_checkpoint_{cloud}_tests" / f"{module[6:]}.py"
    return root / "plugins" / cloud / f"flyte_checkpoint_{cloud}" / f"{module}.py"


def _not_api(value: ast.expr | None) -> bool:
    """A logger or a type variable."""
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in ("getLogger", "TypeVar")


def public_names(path: Path, cloud: str) -> set[str]:
    """The module's public names, the cloud's name replaced by ``{Cloud}``/``{cloud}``."""
    upper = CLOUDS[cloud]

    def norm(name: str) -> str:
        return name.replace(upper, "{Cloud}").replace(cloud, "{cloud}")

    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name.startswith("_"):
                continue
            found.add(norm(node.name))
            if isinstance(node, ast.ClassDef):
                for member in node.body:
                    if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        names = [member.name]
                    elif isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name):
                        names = [member.target.id]  # a field: a setting, a server's endpoint
                    else:
                        names = []
                    found.update(f"{norm(node.name)}.{n}" for n in names if not n.startswith("_"))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if _not_api(node.value):
                continue
            for target in targets:
                if isinstance(target, ast.Name) and not target.id.startswith("_"):
                    found.add(norm(target.id))
    return found


def differences(root: Path) -> dict[str, tuple[str, ...]]:
    """Every ``"module:name"`` that is not in all three plugins, with the clouds that have it."""
    diffs: dict[str, tuple[str, ...]] = {}
    for module in MODULES:
        names = {cloud: public_names(module_path(root, cloud, module), cloud) for cloud in CLOUDS}
        for name in set().union(*names.values()):
            having = tuple(cloud for cloud in CLOUDS if name in names[cloud])
            if len(having) < len(CLOUDS):
                diffs[f"{module}:{name}"] = having
    return diffs


def unexplained(root: Path) -> list[str]:
    """What :func:`differences` finds that :data:`ACCEPTED` does not say, and what it says that
    is no longer so, one line each (empty: the plugins mirror)."""
    found = differences(root)
    lines = [
        f"{name}: only in {', '.join(clouds)}; give it one name in all three, or accept it with its reason"
        for name, clouds in sorted(found.items())
        if ACCEPTED.get(name) != clouds
    ]
    lines += [
        f"{name}: accepted as only in {', '.join(clouds)}, but it is not (any more): update ACCEPTED"
        for name, clouds in sorted(ACCEPTED.items())
        if found.get(name) != clouds
    ]
    return lines


def test_the_three_plugins_have_the_same_public_names_but_for_the_accepted_differences() -> None:
    problems = unexplained(ROOT)
    assert not problems, "\n".join(problems)


def test_the_twelve_modules_and_the_server_helpers_exist_in_every_plugin() -> None:
    for cloud in CLOUDS:
        package = ROOT / "plugins" / cloud / f"flyte_checkpoint_{cloud}"
        modules = {p.stem for p in package.glob("*.py")} - {"__init__"}
        assert modules == {m for m in MODULES if "/" not in m}, cloud
        assert module_path(ROOT, cloud, "tests/server").exists()


def new_problems(changed: Path) -> list[str]:
    """What :func:`unexplained` says of the changed copy and not of the repository."""
    before = set(unexplained(ROOT))
    return [line for line in unexplained(changed) if line not in before]


@pytest.fixture
def copy_of_plugins(tmp_path: Path) -> Path:
    """The three plugins' compared modules, copied under ``tmp_path`` to be changed."""
    for cloud in CLOUDS:
        for module in MODULES:
            src = module_path(ROOT, cloud, module)
            dest = module_path(tmp_path, cloud, module)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dest)
    return tmp_path


def test_a_new_name_in_one_plugin_fails(copy_of_plugins: Path) -> None:
    path = module_path(copy_of_plugins, "gcs", "store")
    path.write_text(
        path.read_text() + "\n\ndef container_gone(uri: str) -> None:\n    pass\n"
        "\n\nclass Extra:\n    def call(self) -> None:\n        pass\n"
    )
    assert new_problems(copy_of_plugins) == [
        "store:Extra: only in gcs; give it one name in all three, or accept it with its reason",
        "store:Extra.call: only in gcs; give it one name in all three, or accept it with its reason",
        "store:container_gone: only in gcs; give it one name in all three, or accept it with its reason",
    ]


def test_a_renamed_method_fails_and_the_cloud_name_is_replaced(copy_of_plugins: Path) -> None:
    path = module_path(copy_of_plugins, "azure", "store")
    text = path.read_text()
    assert "    def list_details(" in text
    path.write_text(text.replace("    def list_details(", "    def list_detail("))
    assert new_problems(copy_of_plugins) == [
        "store:{Cloud}Store.list_detail: only in azure; give it one name in all three, or accept it"
        " with its reason",
        "store:{Cloud}Store.list_details: only in s3, gcs; give it one name in all three, or accept"
        " it with its reason",
    ]


def test_an_accepted_difference_that_is_gone_fails(copy_of_plugins: Path) -> None:
    path = module_path(copy_of_plugins, "gcs", "config")
    text = path.read_text()
    assert "\nMAX_SOURCES = " in text
    path.write_text(text.replace("\nMAX_SOURCES = ", "\n_MAX_SOURCES = "))
    assert new_problems(copy_of_plugins) == [
        "config:MAX_SOURCES: accepted as only in gcs, but it is not (any more): update ACCEPTED"
    ]
