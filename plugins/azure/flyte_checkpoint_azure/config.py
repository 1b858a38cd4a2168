"""The Azure store's settings, and the one credential, account and endpoint they choose (no SDK here).

Settings come from keyword arguments, ``FLYTE_CHECKPOINT_AZURE_<SETTING>`` and the Azure tools'
own variables (``flyte_checkpoint.storage.kit.settings``). Azure has five credential forms, so
which one is used follows a fixed order (:meth:`AzureConfig.auth`), first found wins:

1. arguments: ``credential``, ``connection_string``, ``account_key``, ``sas_token``,
   ``client_secret`` (with ``tenant_id`` and ``client_id``), ``anonymous=True``;
2. ``AZURE_STORAGE_CONNECTION_STRING``; 3. ``AZURE_STORAGE_ACCOUNT_KEY`` (``AZURE_STORAGE_KEY``);
4. ``AZURE_STORAGE_SAS_TOKEN``; 5. ``AZURE_STORAGE_CLIENT_SECRET`` with ``AZURE_STORAGE_TENANT_ID``
   and ``AZURE_STORAGE_CLIENT_ID`` (object_store's storage-scoped service principal);
6. ``anonymous`` from a variable; 7. ``DefaultAzureCredential`` when azure-identity is
   installed (it reads ``AZURE_CLIENT_ID``/``AZURE_TENANT_ID``/``AZURE_CLIENT_SECRET``, workload
   and managed identity itself); 8. none.

A connection string is a unit: its ``AccountName`` and ``BlobEndpoint`` go with its key, ahead of
``AZURE_STORAGE_ACCOUNT_NAME`` and ``AZURE_STORAGE_ENDPOINT`` (an argument still wins).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar
from urllib.parse import urlsplit

from flyte_checkpoint.errors import ConfigurationError
from flyte_checkpoint.storage.kit.locations import Location
from flyte_checkpoint.storage.kit.plans import PartLimits
from flyte_checkpoint.storage.kit.settings import CHOICE, OBJECT, SIZE, TEXT, URL, CloudConfig, MiB, setting
from flyte_checkpoint.uri import redact

#: Azure's rules for the blocks of one blob (the same four names in every plugin's config): no
#: smallest block, at most MAX_PART_SIZE (service versions since 2019-12-12), at most MAX_PARTS
#: of them; sizes any multiple of PART_MULTIPLE.
MIN_PART_SIZE = 1
MAX_PART_SIZE = 4000 * MiB
MAX_PARTS = 50_000
#: The blocks of a sharded save's one blob (``flyte_checkpoint.storage.kit.plans``): the ranks
#: share 49,999 of the 50,000 (the tail's is the last); no smallest block, so no padding. The
#: largest blob is 50,000 x 4,000 MiB (190.7 TiB).
SHARD_LIMITS = PartLimits(
    store="Azure",
    min_part=0,
    max_part=MAX_PART_SIZE,
    max_parts=MAX_PARTS,
    max_object=MAX_PARTS * MAX_PART_SIZE,
    described="50,000 blocks of at most 4,000 MiB",
)
PART_MULTIPLE = 1
DEFAULT_SUFFIX = "core.windows.net"
#: Azurite's published development account (``UseDevelopmentStorage=true``); not a secret.
DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
DEV_ENDPOINT = "http://127.0.0.1:10000/devstoreaccount1"
IDENTITY_HINT = "pip install 'flyte-checkpoint-azure[identity]'"
_MALFORMED = (
    "is malformed: give Key=Value pairs separated by ';' with AccountName and AccountKey,"
    " or SharedAccessSignature and BlobEndpoint (its content is not shown, it holds secrets)"
)
_VARIABLE = re.compile(r"[A-Z][A-Z0-9_]*")


@dataclass(frozen=True)
class Auth:
    """The credential chosen: ``kind`` is "credential", "key", "sas", "service-principal",
    "anonymous", "default" or "none"; ``source`` says where it came from (never its value)."""

    kind: str
    source: str
    key: str | None = None
    sas: str | None = None
    principal: tuple[str, str, str] | None = None  # tenant, client, secret
    protocol: str = "https"
    endpoint_suffix: str = DEFAULT_SUFFIX

    def __repr__(self) -> str:
        return f"Auth({self.kind!r} from {self.source})"


@dataclass(frozen=True, repr=False)
class AzureConfig(CloudConfig):
    """How the Azure store connects and moves bytes (see the module docstring for the credentials)."""

    BACKEND: ClassVar[str] = "azure"

    endpoint_url: str | None = setting(
        URL,
        None,
        doc="The blob endpoint, for Azurite or a private endpoint (a connection string's BlobEndpoint"
        " counts too); default: https://ACCOUNT.blob.core.windows.net.",
        env=("AZURE_STORAGE_ENDPOINT",),
    )
    part_size: int = setting(
        SIZE,
        8 * MiB,
        doc="Bytes a writer holds before it stages them as one block.",
        minimum=1,
        maximum=MAX_PART_SIZE,
        why="Azure's largest block is 4000MiB.",
    )
    checksum: str = setting(
        CHOICE,
        "MD5",
        doc="MD5 is sent with every block and stored with the object; NONE sends and checks none.",
        choices=("MD5", "NONE"),
        why="Azure stores a whole object's MD5; its CRC64 needs azure-storage-extensions.",
    )
    account_key: str | None = setting(
        TEXT,
        None,
        doc="The account's shared key.",
        env=("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY"),
        secret=True,
    )
    account_name: str | None = setting(
        TEXT,
        None,
        doc="The storage account of URIs that name none (az://CONTAINER/PATH).",
        env=("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT"),
    )
    client_id: str | None = setting(
        TEXT, None, doc="The service principal's application id.", env=("AZURE_STORAGE_CLIENT_ID",)
    )
    client_secret: str | None = setting(
        TEXT,
        None,
        doc="The service principal's secret (with tenant_id and client_id).",
        env=("AZURE_STORAGE_CLIENT_SECRET",),
        secret=True,
    )
    connection_string: str | None = setting(
        TEXT,
        None,
        doc="A storage connection string (AccountName, AccountKey or SharedAccessSignature, BlobEndpoint).",
        env=("AZURE_STORAGE_CONNECTION_STRING",),
        secret=True,
    )
    credential: Any = setting(OBJECT, None, doc="Any Azure SDK credential object; used for every account.")
    sas_token: str | None = setting(
        TEXT,
        None,
        doc="An account or container SAS token (a leading ? is fine).",
        env=("AZURE_STORAGE_SAS_TOKEN",),
        secret=True,
    )
    tenant_id: str | None = setting(
        TEXT, None, doc="The service principal's tenant.", env=("AZURE_STORAGE_TENANT_ID",)
    )

    @classmethod
    def _cloud_rules(cls, values: dict[str, Any], env: Mapping[str, str], sources: dict[str, str]) -> None:
        text = values.get("connection_string")
        if not text or not _chosen_connection_string(values, sources):
            return
        source = sources["connection_string"]
        parts = parse_connection_string(text, _shown("connection_string", source))
        account: str | None = DEV_ACCOUNT
        endpoint: str | None = DEV_ENDPOINT
        if parts.get("usedevelopmentstorage", "").lower() != "true":
            account, endpoint = parts.get("accountname"), parts.get("blobendpoint")
        for name, value in (("account_name", account), ("endpoint_url", endpoint)):
            if value and (name not in values or _is_variable(sources[name])):
                values[name], sources[name] = value, source

    def _check(self) -> None:
        self.auth  # noqa: B018 - chosen now, so a bad combination fails at construction

    @property
    def default_account(self) -> str | None:
        """The account of URIs that name none: ``account_name``, else the endpoint's."""
        return self.account_name or (account_from_endpoint(self.endpoint_url) if self.endpoint_url else None)

    def account_for(self, loc: Location) -> str:
        """The storage account serving ``loc``: the URI's own, else :attr:`default_account`.

        Raises:
            ConfigurationError: neither the URI nor the configuration names an account.
        """
        account = loc.account or self.default_account
        if not account:
            raise ConfigurationError(
                f"no storage account for {redact(loc.uri())}: set AZURE_STORAGE_ACCOUNT_NAME (or"
                " AZURE_STORAGE_CONNECTION_STRING), or name the account in the URI:"
                f" abfs://{loc.bucket}@ACCOUNT.dfs.core.windows.net/{loc.key}"
            )
        return account

    def endpoint_for(self, account: str, loc: Location) -> str:
        """The blob endpoint of ``account``: ``endpoint_url`` for the default account, else the
        public one in the URI's cloud (``x.dfs.core.chinacloudapi.cn`` -> ``x.blob.core...``)."""
        if self.endpoint_url and account == self.default_account:
            return self.endpoint_url.rstrip("/")
        suffix = loc.endpoint_suffix or self.auth.endpoint_suffix
        return f"{self.auth.protocol}://{account}.blob.{suffix}"

    @cached_property
    def auth(self) -> Auth:
        """The credential this configuration uses, chosen by the order of the module docstring.

        Raises:
            ConfigurationError: a malformed connection string, or a client secret without its
                tenant and client ids.
        """
        given = [n for n in _CHAIN if getattr(self, n) not in (None, False) and not self._from_env(n)]
        from_env = [n for n in _CHAIN if getattr(self, n) not in (None, False) and self._from_env(n)]
        for name in (*given, *(n for n in from_env if n != "anonymous")):
            if name == "anonymous":  # given in code: it wins over the variables' credentials
                return Auth("anonymous", _shown(name, self.sources[name]))
            return self._auth_from(name)
        if self.anonymous:  # from a variable: after every credential
            return Auth("anonymous", _shown("anonymous", self.sources["anonymous"]))
        if importlib.util.find_spec("azure.identity") is not None:
            return Auth("default", "DefaultAzureCredential")
        return Auth("none", "no credentials")

    def _auth_from(self, name: str) -> Auth:
        source = _shown(name, self.sources[name])
        if name == "credential":
            return Auth("credential", source)
        if name == "account_key":
            return Auth("key", source, key=self.account_key)
        if name == "sas_token":
            return Auth("sas", source, sas=_bare_sas(self.sas_token or ""))
        if name == "client_secret":
            if not self.tenant_id or not self.client_id:
                raise ConfigurationError(
                    f"{source} is set but tenant_id and client_id (AZURE_STORAGE_TENANT_ID and"
                    " AZURE_STORAGE_CLIENT_ID) are not: a service principal needs all three"
                )
            principal = (self.tenant_id, self.client_id, self.client_secret or "")
            return Auth("service-principal", source, principal=principal)
        parts = parse_connection_string(self.connection_string or "", source)
        if parts.get("usedevelopmentstorage", "").lower() == "true":
            return Auth("key", source, key=DEV_KEY, protocol="http")
        protocol = parts.get("defaultendpointsprotocol", "https").lower() or "https"
        suffix = parts.get("endpointsuffix") or DEFAULT_SUFFIX
        if not parts.get("blobendpoint") and not parts.get("accountname"):
            raise ConfigurationError(f"{source} {_MALFORMED}")
        if parts.get("accountkey"):
            return Auth("key", source, key=parts["accountkey"], protocol=protocol, endpoint_suffix=suffix)
        if parts.get("sharedaccesssignature"):
            sas = _bare_sas(parts["sharedaccesssignature"])
            return Auth("sas", source, sas=sas, protocol=protocol, endpoint_suffix=suffix)
        return Auth("anonymous", f"{source} (no key or SAS in it)", protocol=protocol, endpoint_suffix=suffix)

    def _from_env(self, name: str) -> bool:
        return _is_variable(self.sources.get(name, "default"))

    def secrets(self) -> tuple[str, ...]:
        """The secret values set, with a SAS token's signature on its own (it shows URL-encoded)."""
        auth = self.auth
        found = [*super().secrets(), *(v for v in (auth.key, auth.sas) if v)]
        for pair in _bare_sas(auth.sas or self.sas_token or "").split("&"):
            name, _, value = pair.partition("=")
            if name == "sig" and value:
                found.append(value)
        return tuple(dict.fromkeys(found))


#: The credential settings, in the order the chain tries them.
_CHAIN = ("credential", "connection_string", "account_key", "sas_token", "client_secret", "anonymous")


def _chosen_connection_string(values: Mapping[str, Any], sources: Mapping[str, str]) -> bool:
    """Whether the connection string among the raw ``values`` is the credential the chain picks."""
    present = [n for n in _CHAIN if n != "anonymous" and values.get(n)]
    given = [n for n in present if not _is_variable(sources.get(n, ""))]
    return bool(given or present) and (given or present)[0] == "connection_string"


def _is_variable(source: str) -> bool:
    return bool(_VARIABLE.fullmatch(source))


def _shown(name: str, source: str) -> str:
    """Where setting ``name`` came from, as messages say it: a variable by its name, else
    "the account_key argument" or "account_key of configure_store('az://c/')"."""
    if _is_variable(source):
        return source
    return f"the {name} argument" if source == "argument" else f"{name} of {source}"


def _bare_sas(sas: str) -> str:
    return sas.strip().lstrip("?")


def parse_connection_string(text: str, source: str = "the connection string") -> dict[str, str]:
    """The ``Key=Value`` pairs of a storage connection string, keys lower-cased.

    Raises:
        ConfigurationError: not a connection string (the message never repeats its content).
    """
    parts: dict[str, str] = {}
    for item in text.split(";"):
        key, sep, value = item.strip().partition("=")
        if not item.strip():
            continue
        if not sep or not key.strip():
            raise ConfigurationError(f"{source} {_MALFORMED}")
        parts[key.strip().lower()] = value.strip()
    if not parts:
        raise ConfigurationError(f"{source} {_MALFORMED}")
    return parts


def account_from_endpoint(endpoint: str) -> str | None:
    """The account an endpoint URL serves: the first path segment of a path-style URL
    (an IP address or ``localhost``, as with Azurite), else the first label of the host."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if host == "localhost" or _is_ip(host):
        return parts.path.strip("/").split("/")[0] or None
    return host.split(".")[0] or None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
