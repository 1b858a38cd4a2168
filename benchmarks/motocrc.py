"""moto's S3 server answering ``UploadPartCopy`` with the CRC-32 of the bytes it copied, as S3
does (``CopyPartResult.ChecksumCRC32``) and moto does not: for ``benchmarks.incremental --links
--copy-crc``, so that an incremental save checks its copies from the answer, as on S3, instead
of reading every copied range back through the link (what it must do on moto and Azure).

    with run_server() as endpoint:      # "http://127.0.0.1:PORT", the bucket "bench" made
        ...
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from flyte_checkpoint.testing.servers import server_process

#: Run in the server's process: wraps moto's ``upload_part_copy`` to add the CRC-32 element.
_SHIM = r"""
import base64, sys, zlib
from urllib.parse import parse_qs, unquote, urlparse
from moto.s3 import responses

real = responses.S3Response.upload_part_copy

def upload_part_copy(self):
    status, headers, body = real(self)
    if status != 200 or not body:
        return status, headers, body
    source = self.headers.get("x-amz-copy-source")
    if isinstance(source, bytes):
        source = source.decode()
    parsed = urlparse(source)
    bucket, key = unquote(parsed.path).lstrip("/").split("/", 1)
    version = parse_qs(parsed.query).get("versionId", [None])[0]
    value = self.backend.get_object(bucket, key, version_id=version).value
    wanted = self.headers.get("x-amz-copy-source-range", "").split("bytes=")[-1]
    if wanted:
        start, end = (int(x) for x in wanted.split("-"))
        value = value[start : end + 1]
    crc = base64.b64encode(zlib.crc32(value).to_bytes(4, "big")).decode()
    text = body.decode() if isinstance(body, bytes) else body
    text = text.replace("</CopyPartResult>", f"<ChecksumCRC32>{crc}</ChecksumCRC32></CopyPartResult>")
    headers["content-length"] = str(len(text.encode()))
    return status, headers, text.encode()

responses.S3Response.upload_part_copy = upload_part_copy
from moto.server import main
main(sys.argv[1:])
"""


@contextlib.contextmanager
def run_server() -> Iterator[str]:
    """moto's server with the shim, on a free port of 127.0.0.1 (AWS's 5 MiB minimum part); its
    endpoint, with the bucket ``bench`` made."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "plugins" / "s3"))
    from flyte_checkpoint_s3_tests.server import S3Server, _answers

    with server_process(
        lambda port: [sys.executable, "-c", _SHIM, "-H", "127.0.0.1", "-p", str(port)],
        name="moto's S3 server (with CRC-32s in copy answers)",
        answers=_answers,
    ) as port:
        server = S3Server(f"http://127.0.0.1:{port}")
        server.create_bucket("bench")
        yield server.endpoint
