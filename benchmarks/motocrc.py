"""moto's S3 server answering ``UploadPartCopy`` with the CRC-32 of the bytes it copied, as S3
does (``CopyPartResult.ChecksumCRC32``) and moto does not: for ``benchmarks.incremental --links
--copy-crc``, so that an incremental save checks its copies from the answer, as on S3, instead
of reading every copied range back through the link (what it must do on moto and Azure).
The CRC-32 is computed of the bytes moto copied, as moto hands them to the part: the shim reads
nothing more (it read the whole source object again for each copy before, 256 MiB a copy in the
32 x 8 MiB tree, work that S3 does not add to a copy's time). For the same reason moto's copy
itself reads only the copied range of the source (moto reads the whole object and slices it:
0.2-0.5 s a copy of a 256 MiB object on this machine, in the incremental save's time and never in
the full save's); what moto stores and answers is unchanged.

    with run_server() as endpoint:      # "http://127.0.0.1:PORT", the bucket "bench" made
        ...
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from flyte_checkpoint.testing.servers import server_process

#: Run in the server's process: wraps moto's ``upload_part_copy`` to add the CRC-32 element (of
#: the bytes its ``set_part`` is given).
_SHIM = r"""
import base64, sys, threading, zlib
from urllib.parse import parse_qs, unquote, urlparse
from moto.s3 import models, responses

real = responses.S3Response.upload_part_copy
real_set_part = models.FakeMultipart.set_part
copying = threading.local()

def set_part(self, part_id, value):
    # moto's copy hands the copied bytes here: their CRC-32 costs no other read of the source
    if getattr(copying, "on", False) and isinstance(value, (bytes, bytearray)):
        copying.crc = zlib.crc32(value)
    return real_set_part(self, part_id, value)

def upload_part_copy(self):
    copying.on, copying.crc = True, None
    try:
        status, headers, body = real(self)
    finally:
        copying.on = False
    if status != 200 or not body:
        return status, headers, body
    crc = copying.crc
    if crc is None:  # not seen as it was set: read the source's range (the whole object, in moto)
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
        crc = zlib.crc32(value)
    crc = base64.b64encode(crc.to_bytes(4, "big")).decode()
    text = body.decode() if isinstance(body, bytes) else body
    text = text.replace("</CopyPartResult>", f"<ChecksumCRC32>{crc}</ChecksumCRC32></CopyPartResult>")
    headers["content-length"] = str(len(text.encode()))
    return status, headers, text.encode()

def copy_range(self, dest_bucket_name, multipart_id, part_id, src_bucket_name, src_key_name,
               src_version_id, start_byte, end_byte):
    # as moto's own, but reading only the range copied, as S3 does not read the whole source
    multipart = self.get_bucket(dest_bucket_name).multiparts[multipart_id]
    key = self.get_object(src_bucket_name, src_key_name, version_id=src_version_id)
    with key.lock:
        key._value_buffer.seek(0 if start_byte is None else start_byte)
        if start_byte is None:
            value = key._value_buffer.read()
        else:
            value = key._value_buffer.read(end_byte + 1 - start_byte)
    return multipart.set_part(part_id, value)

models.S3Backend.upload_part_copy = copy_range
models.FakeMultipart.set_part = set_part
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
