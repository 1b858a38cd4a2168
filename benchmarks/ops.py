"""One measured operation, run in a child process: ``python -m benchmarks.ops OP ARGS...``.

Prints one JSON line: the operation's wall time in seconds and the child's peak RSS.
Running each operation in a fresh process keeps peak-RSS figures separate.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def ours_save(src: str, dest: str) -> None:
    import flyte_checkpoint as fc

    fc.Checkpoint(dest).save_sync(Path(src))


def ours_background(src: str, dest: str) -> dict[str, float]:
    """A background save of ``src``: how long the caller was blocked, and the whole save."""
    import flyte_checkpoint as fc

    with fc.Checkpoint(dest) as cp:
        start = time.perf_counter()
        handle = cp.save_background(Path(src))
        blocked = time.perf_counter() - start
        handle.result()
        total = time.perf_counter() - start
    return {"blocked_s": blocked, "total_s": total}


def training_loop(mode: str, dest: str, steps: str, step_mib: str, state_kib: str) -> dict[str, float]:
    """A training loop of ``steps`` steps, each hashing ``step_mib`` MiB (work that releases the
    GIL, as a framework's kernels do) and rewriting a state file of ``state_kib`` KiB; it saves
    that file every step with ``mode``: ``none``, ``sync`` (``save_sync``) or ``background``
    (``save_background``; the loop's time includes the wait at ``close()``)."""
    import hashlib

    import flyte_checkpoint as fc

    work = os.urandom(int(step_mib) * 2**20)
    state = tempfile.mkdtemp(prefix="fcp-loop-")
    _cleanup.append(state)
    state_file = Path(state) / "state.bin"
    payload = os.urandom(int(state_kib) * 1024)
    start = time.perf_counter()
    with fc.Checkpoint(dest) as cp:
        for step in range(int(steps)):
            hashlib.sha256(work).digest()
            state_file.write_bytes(payload[step % 64 :] + payload[: step % 64])
            if mode == "sync":
                cp.save_sync(state_file)
            elif mode == "background":
                cp.save_background(state_file)
    return {"loop_s": time.perf_counter() - start}


def ours_load(obj: str, _unused: str = "") -> None:
    import flyte_checkpoint as fc

    cp = fc.Checkpoint(tempfile.mktemp(), obj)
    assert cp.load_sync() is not None
    _keep.append(cp)  # cleaned after the clock stops


def ours_load_stream(obj: str, _unused: str = "") -> None:
    """``ours_load`` by the streamed path (one inflate thread), as before parallel inflate."""
    os.environ["FLYTE_CHECKPOINT_INFLATE_THREADS"] = "1"
    ours_load(obj)


def ours_load_parallel(obj: str, _unused: str = "") -> None:
    """``ours_load`` inflating on one thread per core (at least 2), whatever the default."""
    os.environ["FLYTE_CHECKPOINT_INFLATE_THREADS"] = str(max(2, os.cpu_count() or 1))
    ours_load(obj)


def ours_partial_load(obj: str, member: str) -> dict[str, float]:
    """``load(members=[member])``; the bytes it read from the store."""
    import flyte_checkpoint as fc

    seen: list[int] = [0]
    cp = fc.Checkpoint(tempfile.mktemp(), obj, progress=lambda done, total: seen.append(done))
    got = cp.load_sync(members=[member])
    assert got is not None and (got / member).stat().st_size > 0
    _keep.append(cp)
    return {"bytes_read": max(seen)}


def ours_counted_load(obj: str) -> dict[str, float]:
    """A full ``load()``; the bytes it read from the store."""
    import flyte_checkpoint as fc

    seen: list[int] = [0]
    cp = fc.Checkpoint(tempfile.mktemp(), obj, progress=lambda done, total: seen.append(done))
    assert cp.load_sync() is not None
    _keep.append(cp)
    return {"bytes_read": max(seen)}


def reference_save(src: str, dest: str) -> None:
    """Flyte 2.12.1's approach: tarfile, gzip level 9, into a temp file, then a copy."""
    import tarfile

    fd, tmp = tempfile.mkstemp(suffix=".tar.gz", dir=os.path.dirname(dest))
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for child in sorted(Path(src).iterdir()):
                tar.add(child, arcname=child.name, recursive=True)
        shutil.copyfile(tmp, dest)
    finally:
        os.unlink(tmp)


def reference_load(obj: str, _unused: str = "") -> None:
    import tarfile

    work = tempfile.mkdtemp(dir=os.path.dirname(obj))
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(obj))
    os.close(fd)
    shutil.copyfile(obj, tmp)
    with tarfile.open(tmp, "r:*") as tar:
        tar.extractall(work)
    os.unlink(tmp)
    _cleanup.append(work)


def flyte_save(src: str, dest: str) -> None:
    import flyte

    flyte.Checkpoint(dest).save_sync(Path(src))


def flyte_load(obj: str, _unused: str = "") -> None:
    import flyte

    cp = flyte.Checkpoint(tempfile.mktemp(), obj)
    assert cp.load_sync() is not None
    _keep.append(cp)


def in_flyte_saves(src: str, raw: str, order: str) -> dict[str, float]:
    """Ours and ``flyte.ctx().checkpoint`` saving ``src`` in one Flyte task (see in_flyte.py)."""
    from .in_flyte import save_both

    return save_both(src, raw, order)


def tar_save(src: str, dest: str) -> None:
    """The floor: ``tar cf - -C SRC . > DEST`` (no compression)."""
    with open(dest, "wb") as out:
        subprocess.run(["tar", "cf", "-", "-C", src, "."], stdout=out, check=True)


def tar_load(obj: str, _unused: str = "") -> None:
    work = tempfile.mkdtemp(dir=os.path.dirname(obj))
    subprocess.run(["tar", "xf", obj, "-C", work], check=True)
    _cleanup.append(work)


def boto3_upload(path: str, uri: str) -> None:
    _s3().upload_file(path, *_bucket_key(uri))


def boto3_upload_full_crc(path: str, uri: str) -> None:
    """``upload_file`` storing a full-object CRC32, as our save does (computed on the clock)."""
    import base64
    import zlib

    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(8 * 1024 * 1024):
            crc = zlib.crc32(chunk, crc)
    value = base64.b64encode(crc.to_bytes(4, "big")).decode()
    _s3().upload_file(path, *_bucket_key(uri), ExtraArgs={"ChecksumCRC32": value})


def boto3_download(uri: str, path: str) -> None:
    _s3().download_file(*_bucket_key(uri), path)


def plain_get(uri: str, path: str) -> None:
    body = _s3().get_object(Bucket=_bucket_key(uri)[0], Key=_bucket_key(uri)[1])["Body"]
    with open(path, "wb") as f:
        while chunk := body.read(8 * 1024 * 1024):
            f.write(chunk)


def _s3():
    import boto3

    return boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")


def _bucket_key(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    return bucket, key


_keep: list = []
_cleanup: list[str] = []


def _warm_up(op: str, args: list[str]) -> None:
    """Import what the operation uses, and build its clients, before the clock starts: a task
    that checkpoints every few minutes pays for those once, not per save (boto3's operations
    get the same)."""
    import importlib

    if op.startswith("ours") or op == "training_loop":
        for name in ("archive", "pipeline", "restore", "compression", "inflate", "index", "partial"):
            importlib.import_module(f"flyte_checkpoint.format.{name}")
        for name in (
            "flyte_checkpoint.lifecycle.background",
            "flyte_checkpoint.lifecycle.snapshot",
            "flyte_checkpoint.lifecycle.saveorder",
            "flyte_checkpoint.util.sources",
        ):
            importlib.import_module(name)
        from flyte_checkpoint.storage.registry import get_registry, store_for
        from flyte_checkpoint.uri import is_local

        get_registry().backends()
        remote = [a for a in args if not is_local(a)]
        if remote:
            store_for(remote[0]).stat(remote[0] + ".warm-up")  # the SDK, its client, a connection
    elif op.startswith("flyte"):
        importlib.import_module("flyte.io")
    elif op == "in_flyte_saves":  # both save in the task: both get their imports beforehand
        _warm_up("ours_save", [])
        _warm_up("flyte_save", [])
    elif op.startswith(("reference", "boto3", "plain")):
        import tarfile  # noqa: F401

        if not op.startswith("reference"):
            _s3()


def main(argv: list[str]) -> None:
    op = globals()[argv[0]]
    _warm_up(argv[0], argv[1:])
    before = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = before.ru_utime + before.ru_stime
    start = time.perf_counter()
    extra = op(*argv[1:]) or {}  # figures an operation measured itself
    seconds = time.perf_counter() - start
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    rss_kib = max(own.ru_maxrss, kids.ru_maxrss)
    cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime - cpu_before
    for cp in _keep:
        getattr(cp, "close", lambda: None)()
    _keep.clear()
    for path in _cleanup:
        shutil.rmtree(path, ignore_errors=True)
    print(json.dumps({"seconds": seconds, "rss_mib": rss_kib / 1024, "cpu_s": cpu, **extra}))


if __name__ == "__main__":
    main(sys.argv[1:])
