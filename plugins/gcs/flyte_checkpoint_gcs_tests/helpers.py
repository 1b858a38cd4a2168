"""Shared test helpers: the sizes and bucket of the tests, a store on the emulator, and a real
authorized HTTP session that records each request and can inject faults."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flyte_checkpoint_gcs.store import GCSStore
from google.auth.credentials import AnonymousCredentials
from google.auth.transport.requests import AuthorizedSession
from requests.structures import CaseInsensitiveDict

#: The bucket every test writes under (each test under its own unique prefix).
BUCKET = "fcp-tests"
#: A bucket the test server does not have (the recipes' ``missing_container``).
MISSING_BUCKET = "fcp-no-such-bucket"
#: Small sizes so that a few MiB cross many chunk and range boundaries.
CHUNK = 256 * 1024
RANGE = 384 * 1024


def make_store(endpoint: str, **settings: Any) -> GCSStore:
    """A store on the emulator at ``endpoint``: anonymous, small chunks and ranges, one SDK try
    per request (the tests count requests), unless ``settings`` say otherwise."""
    defaults: dict[str, Any] = {
        "endpoint_url": endpoint,
        "anonymous": True,
        "part_size": CHUNK,
        "read_range_size": RANGE,
        "read_concurrency": 4,
        "request_attempts": 1,
    }
    return GCSStore(**{**defaults, **settings})


@dataclass
class Call:
    method: str
    url: str
    headers: CaseInsensitiveDict[str]
    body_size: int


#: ``fault(call, data) -> data``: may raise (a failed request) or return other bytes.
Fault = Callable[[Call, Any], Any]


class RecordingSession(AuthorizedSession):
    """Sends every request for real; keeps a list of them (thread-safe)."""

    def __init__(self, credentials: Any = None, fault: Fault | None = None) -> None:
        super().__init__(credentials or AnonymousCredentials())
        self.calls: list[Call] = []
        #: The headers as they left, authorization included.
        self.sent_headers: list[CaseInsensitiveDict[str]] = []
        self.fault = fault
        self._calls_lock = threading.Lock()

    def request(self, method: str, url: str, data: Any = None, headers: Any = None, **kwargs: Any) -> Any:
        size = len(data) if isinstance(data, (bytes, bytearray, memoryview)) else 0
        call = Call(method.upper(), url, CaseInsensitiveDict(headers or {}), size)
        with self._calls_lock:
            self.calls.append(call)
        if self.fault is not None:
            data = self.fault(call, data)
        return super().request(method, url, data=data, headers=headers, **kwargs)

    def send(self, request: Any, **kwargs: Any) -> Any:
        with self._calls_lock:
            self.sent_headers.append(CaseInsensitiveDict(request.headers))
        return super().send(request, **kwargs)

    def find(self, method: str, contains: str = "") -> list[Call]:
        with self._calls_lock:
            return [c for c in self.calls if c.method == method and contains in c.url]

    def chunk_puts(self) -> list[Call]:
        """The resumable-upload chunk requests."""
        return [c for c in self.find("PUT", "upload_id=") if "Content-Range" in c.headers]


def fault_store(endpoint: str) -> GCSStore:
    """The store of the fault and crash suites' recipe: :func:`make_store` with the suites'
    ``RECIPE_SETTINGS``, one chunk in flight (a resumable session takes them in order). Module
    level: a crash test's child imports it."""
    from flyte_checkpoint.testing import RECIPE_SETTINGS

    return make_store(endpoint, **{**RECIPE_SETTINGS, "max_concurrency": 1})
