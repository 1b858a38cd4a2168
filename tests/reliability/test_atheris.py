"""Coverage-guided fuzzing of ``restore.restore`` with atheris (libFuzzer), for a bounded run.

The harness runs in a child process (libFuzzer ends the process when it finishes), seeded with
real checkpoint objects (a directory tarball with links, a plain tar, a gzip payload, raw
bytes). For every input, ``restore`` must return or raise a ``CheckpointError``; anything else
is a crash. After each input the harness checks that nothing appeared beside the destination
(an escape), and libFuzzer's per-input timeout (a generous hang guard) turns a hang into a
failure. The child makes exactly ``FCP_ATHERIS_RUNS`` runs (default 20,000); the test kills it
only if it is still running after ``FCP_ATHERIS_SECONDS`` (default 900, a hang guard).

Needs ``atheris`` (``pip install 'atheris>=3.0'``; wheels for CPython 3.10-3.11 on Linux x86-64).
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import os
import re
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from conftest import require

RUNS = int(os.environ.get("FCP_ATHERIS_RUNS", "20000"))
HANG_GUARD = int(os.environ.get("FCP_ATHERIS_SECONDS", "900"))

HARNESS = textwrap.dedent(
    """
    import io, os, sys, tempfile
    import atheris

    with atheris.instrument_imports(include=["flyte_checkpoint"]):
        from flyte_checkpoint.format import restore as restore_mod
        from flyte_checkpoint.errors import CheckpointError

    SANDBOX = sys.argv[1]
    LIMIT = 4 * 1024 * 1024

    def one_input(data: bytes) -> None:
        with tempfile.TemporaryDirectory(dir=SANDBOX) as box:
            dest = os.path.join(box, "dest")
            os.mkdir(dest)
            try:
                restore_mod.restore(io.BytesIO(data), dest, len(data), max_bytes=LIMIT)
            except CheckpointError:
                pass
            beside = sorted(os.listdir(box))
            if beside != ["dest"]:
                raise RuntimeError(f"restore wrote beside its destination: {beside}")
            dest_real = os.path.realpath(dest)
            for root, dirs, files in os.walk(dest):
                for name in dirs + files:
                    real = os.path.realpath(os.path.join(root, name))
                    if real != dest_real and not real.startswith(dest_real + os.sep):
                        raise RuntimeError(f"a link leaves the destination: {name} -> {real}")
        if sorted(os.listdir(SANDBOX)):
            raise RuntimeError(f"something was left in the sandbox: {os.listdir(SANDBOX)}")

    atheris.Setup(sys.argv[:1] + sys.argv[2:], one_input)
    atheris.Fuzz()
    """
)


def _seeds(folder: Path) -> None:
    folder.mkdir()
    src = folder.parent / "seed-tree"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f.bin").write_bytes(bytes(range(256)) * 4)
    (src / "meta.json").write_text('{"epoch": 3}')
    os.symlink("d/f.bin", src / "last")
    os.link(src / "meta.json", src / "meta2.json")
    for name, mode in (("tree.tar.gz", "w:gz"), ("tree.tar", "w"), ("tree-gnu.tar", "w")):
        buf = io.BytesIO()
        fmt = tarfile.GNU_FORMAT if "gnu" in name else tarfile.PAX_FORMAT
        with tarfile.open(fileobj=buf, mode=mode, format=fmt) as tf:  # type: ignore[call-overload]
            for child in sorted(src.iterdir()):
                tf.add(child, arcname=child.name)
        (folder / name).write_bytes(buf.getvalue())
    (folder / "payload.gz").write_bytes(gzip.compress(b"state" * 100))
    (folder / "payload.raw").write_bytes(b"12345\n")


@pytest.mark.slow
@pytest.mark.timeout(HANG_GUARD + 120)
def test_atheris_fuzzes_restore_without_crash_hang_or_escape(tmp_path: Path):
    """An atheris run of exactly RUNS inputs over ``restore.restore`` finds no input that raises
    a non-project error, hangs (over 120 s for one input), or writes outside the destination."""
    require(importlib.util.find_spec("atheris") is not None, "atheris is not installed (pip install atheris)")
    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS)
    corpus, sandbox, artifacts = tmp_path / "corpus", tmp_path / "a" / "b" / "sandbox", tmp_path / "crash"
    _seeds(corpus)
    sandbox.mkdir(parents=True)
    artifacts.mkdir()
    cmd = [
        sys.executable,
        str(harness),
        str(sandbox),
        f"-runs={RUNS}",
        "-timeout=120",
        "-rss_limit_mb=2048",
        "-max_len=65536",
        f"-artifact_prefix={artifacts}/",
        "-print_final_stats=1",
        str(corpus),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_GUARD, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    crashes = sorted(p.name for p in artifacts.iterdir())
    assert proc.returncode == 0 and not crashes, f"exit {proc.returncode}, artifacts {crashes}\n{out[-6000:]}"
    done = re.search(r"Done (\d+) runs in (\d+) second", out)
    assert done, out[-3000:]
    runs = int(done.group(1))
    assert runs == RUNS, out[-3000:]  # every run made, as RELIABILITY.md states
    print(f"atheris: {runs} runs in {done.group(2)} s, no crash, hang or escape")
    # nothing escaped above the sandbox either
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["b"]
    assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == ["sandbox"]
