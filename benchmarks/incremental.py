"""Incremental folder saves (issue 18): a full save against one after one file changed.

    python -m benchmarks.incremental                  # 64 files of 16 MiB (1 GiB), file store
    python -m benchmarks.incremental --s3 --lightning # also on moto's S3 server, and Lightning
    python -m benchmarks.incremental --gcs            # also on the GCS emulator (no range copy)
    python -m benchmarks.incremental --azure          # also on Azurite (plugins/azure's npm install)
    python -m benchmarks.incremental --scale 0.05 --runs 1   # a quick check
    python -m benchmarks.incremental --content model  # float32 weights: the full save compresses
    python -m benchmarks.incremental --against main --runs 9   # file store: main's code against this one
    python -m benchmarks.incremental --links 5,10,25  # S3 through a simulated link: 64 x 4 MiB, 32 x 8 MiB

Each run saves the tree whole to a fresh object (no index to copy from: everything is sent),
then changes one file (new bytes, same size) and saves again over that object (the unchanged
files are copied by the store); each save starts after a ``sync``, so that neither pays for
writing back what came before it (on ext4 that made the incremental time vary from 1.2 s to
2.2 s). Bytes sent are counted by the writers (file) and at a
FaultProxy in front of the server (S3, GCS, Azure); times are the median of ``--runs``. GCS has no
server-side range copy (its store declares none, so the second save sends everything): its
extra row is what a range copy through the client would cost at the least, the previous object
downloaded and uploaded again as a temporary object (bytes both ways). The Lightning case
trains a small model with ``ModelCheckpoint(save_top_k=3)`` and ``CheckpointMirror`` and
reports the bytes each epoch's save sent against the size of one checkpoint file.

With ``--against REV`` it compares instead the file store's incremental saves of two versions of
this repository (REV checked out in a temporary worktree, and this checkout) on the same tree:
each round, each version (the order alternating) makes a full save to its own object with its own
code, one file is changed, and the version's incremental save over that object is timed in a
fresh process (wall and CPU time, after ``sync``); medians and their ratio. This is how the cost of
checking every copied range against the base's index (issue 32, item 5) is measured.

With ``--links RATE[,RATE...]`` (issue 36) the saves go to moto's S3 server through a simulated
link of each rate (benchmarks/links.py: a token-bucket proxy, validated against a raw upload
before each rate; a link more than 10% off refuses the run), for each tree of ``--trees``
(default 64 files of 4 MiB and 32 of 8 MiB) side by side: the time and the bytes up of the
incremental save as a fraction of the full save's, and the bytes it read (down).

The commit column is the time in the writers' commit step (the file store's fsync and rename,
a cloud writer's completion request), timed around those methods: it follows the object's
size, not the bytes sent (the file store writes the copied bytes to disk again; moto joins the
parts in Python), so the last column gives the ratio without it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import flyte_checkpoint as fc
from flyte_checkpoint.storage.stores.local import wait_for_freeing

from .links import TOLERANCE, load_line, parse_rates

ROOT = Path(__file__).resolve().parent
MiB = 1024 * 1024


class SentBytes(logging.Handler):
    """The bytes each save sent, from the core's one info line per save."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.sizes: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = re.match(r"saved checkpoint \S+: (\d+) bytes", record.getMessage())
        if found:
            self.sizes.append(int(found.group(1)))


class Content:
    """The files' bytes: ``random`` (incompressible: the full save stores them, its cheapest
    case) or ``model`` (float32 normal values, as weights: the full save compresses them)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._tile = b""
        if kind == "model":
            from .datasets import _gauss_block

            self._tile = _gauss_block(8 * MiB, seed=1)

    def make(self, size: int) -> bytes:
        if self.kind == "random":
            return os.urandom(size)
        # The tile from a random place, repeated: other bytes each time, compressing as weights do.
        at = int.from_bytes(os.urandom(4), "big") % (len(self._tile) // 4) * 4
        rolled = self._tile[at:] + self._tile[:at]
        return (rolled * (size // len(rolled) + 1))[:size]


def make_tree(root: Path, files: int, size: int, content: Content) -> Path:
    root.mkdir(parents=True)
    for i in range(files):
        (root / f"part-{i:03d}.bin").write_bytes(content.make(size))
    (root / "meta.json").write_text('{"epoch": 0}')
    return root


class CommitTime:
    """Seconds spent in the writers' commit step (the file store's fsync and rename, a cloud
    writer's completion request): the part of a save that follows the object's size whatever
    was sent, so both saves pay it."""

    def __init__(self) -> None:
        self.seconds = 0.0
        from flyte_checkpoint.storage.stores.local import _LocalWriter

        self._patch(_LocalWriter, "_commit")
        for plugin in ("s3", "gcs", "azure"):
            try:
                module = __import__(f"flyte_checkpoint_{plugin}.writer", fromlist=["writer"])
            except ImportError:
                continue
            for cls in vars(module).values():
                if isinstance(cls, type) and "_complete" in vars(cls):
                    self._patch(cls, "_complete")

    def _patch(self, cls: type, name: str) -> None:
        real = getattr(cls, name)

        def timed(*args, **kwargs):
            started = time.monotonic()
            try:
                return real(*args, **kwargs)
            finally:
                self.seconds += time.monotonic() - started

        setattr(cls, name, timed)


def pair(
    dest: Callable[[int], str],
    src: Path,
    runs: int,
    size: int,
    sent: Callable[[], int],
    content: Content,
    commit: CommitTime,
    received: Callable[[], int] | None = None,
) -> dict:
    """``runs`` times: a full save to a fresh object, one file changed, an incremental save.
    With ``received`` (bytes come down so far), also the bytes each save read."""
    full_t, incr_t, full_b, incr_b, full_c, incr_c = [], [], [], [], [], []
    full_d: list[int] = []
    incr_d: list[int] = []
    down = received or (lambda: 0)
    files = sorted(src.glob("part-*.bin"))
    for run in range(runs):
        uri = dest(run)
        wait_for_freeing()  # the replaced object's freeing must not run into the next timed save
        os.sync()  # each save starts with no dirty pages of the tree or earlier objects to write back
        before, committed, read = sent(), commit.seconds, down()
        started = time.monotonic()
        fc.Checkpoint(uri).save_sync(str(src))
        full_t.append(time.monotonic() - started)
        full_b.append(sent() - before)
        full_c.append(commit.seconds - committed)
        full_d.append(down() - read)
        files[(7 * run + 3) % len(files)].write_bytes(content.make(size))
        wait_for_freeing()
        os.sync()
        before, committed, read = sent(), commit.seconds, down()
        started = time.monotonic()
        fc.Checkpoint(uri).save_sync(str(src))
        incr_t.append(time.monotonic() - started)
        incr_b.append(sent() - before)
        incr_c.append(commit.seconds - committed)
        incr_d.append(down() - read)
        from flyte_checkpoint.storage.registry import store_for

        store_for(uri).delete(uri)  # the S3 server holds objects in memory
    med = statistics.median
    return {
        "full_s": med(full_t),
        "incr_s": med(incr_t),
        "full_bytes": med(full_b),
        "incr_bytes": med(incr_b),
        "full_commit_s": med(full_c),
        "incr_commit_s": med(incr_c),
        "full_down_bytes": med(full_d),
        "incr_down_bytes": med(incr_d),
        "full_runs_s": full_t,
        "incr_runs_s": incr_t,
    }


def row(name: str, r: dict) -> str:
    return (
        f"| {name} | {r['full_s']:.2f} | {r['incr_s']:.2f} | {100 * r['incr_s'] / r['full_s']:.1f}% |"
        f" {r['full_bytes'] / MiB:.1f} | {r['incr_bytes'] / MiB:.2f} |"
        f" {100 * r['incr_bytes'] / r['full_bytes']:.2f}% |"
        f" {r['full_commit_s']:.2f} / {r['incr_commit_s']:.2f} |"
        f" {100 * (r['incr_s'] - r['incr_commit_s']) / (r['full_s'] - r['full_commit_s']):.1f}% |"
    )


def plugin_server(cloud: str, **options: object):
    """The test server of the plugin ``cloud`` (s3, gcs, azure), started as the plugin's tests
    start it: its test package's ``run_server(**options)``."""
    sys.path.insert(0, str(ROOT.parent / "plugins" / cloud))
    server = importlib.import_module(f"flyte_checkpoint_{cloud}_tests.server")
    return server.run_server(**options)


def s3_setup(endpoint: str):
    import boto3

    from flyte_checkpoint.testing import FaultProxy

    os.environ.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        FLYTE_CHECKPOINT_S3_READ_RANGE_SIZE=str(8 * 2**30),
    )
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket="bench")
    proxy = FaultProxy(endpoint)
    proxy.__enter__()
    fc.configure_store("s3", endpoint_url=proxy.url)
    return client, proxy


def gcs_setup(endpoint: str):
    """The emulator's bucket ``bench`` and a FaultProxy in front of it for every ``gs://`` URI."""
    from flyte_checkpoint.testing import FaultProxy

    proxy = FaultProxy(endpoint)
    proxy.__enter__()
    fc.configure_store("gcs", endpoint_url=proxy.url, anonymous=True)
    return proxy


def copy_through_client(uri: str, src: Path, proxy) -> dict:
    """A full save to ``uri``, then the least a range copy through the client costs: the whole
    object downloaded and uploaded again to a temporary object (time, bytes up and down)."""
    from flyte_checkpoint.storage.registry import store_for

    fc.Checkpoint(uri).save_sync(str(src))
    store = store_for(uri)
    tmp = f"{uri}.tmp-{uuid.uuid4().hex}"
    up = sum(r.up for r in proxy.records)
    down = sum(r.down for r in proxy.records)
    started = time.monotonic()
    with store.open_read(uri) as r, store.open_write(tmp) as w:
        shutil.copyfileobj(r, w, 8 * MiB)
    took = time.monotonic() - started
    up = sum(r.up for r in proxy.records) - up
    down = sum(r.down for r in proxy.records) - down
    store.delete(tmp)
    store.delete(uri)
    return {"s": took, "up": up, "down": down}


def azure_setup(server):
    """The container ``bench``, and a FaultProxy in front of Azurite for every ``az://`` URI."""
    from flyte_checkpoint.testing import FaultProxy

    server.create_bucket("bench")
    os.environ["AZURE_STORAGE_CONNECTION_STRING"] = server.connection_string
    proxy = FaultProxy(server.endpoint)
    proxy.__enter__()
    fc.configure_store("azure", endpoint_url=proxy.url)
    return proxy


def lightning_case(work: Path, epochs: int, width: int, dest: str, sent_bytes: SentBytes) -> dict:
    """Train ``epochs`` epochs with ``save_top_k=3`` mirrored to ``dest``; bytes each save sent."""
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint

    from flyte_checkpoint.integrations.lightning import CheckpointMirror

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(width, width)

        def training_step(self, batch, _i):
            (x,) = batch
            loss = self.layer(x).pow(2).mean()
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    folder = work / f"lightning-{uuid.uuid4().hex}"
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, width)), batch_size=8)
    first = len(sent_bytes.sizes)
    with fc.Checkpoint(dest) as cp:
        trainer = pl.Trainer(
            max_epochs=epochs,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[
                ModelCheckpoint(dirpath=folder, save_top_k=3, monitor="epoch", mode="max", every_n_epochs=1),
                CheckpointMirror(cp, background=False),
            ],
        )
        trainer.fit(Model(), data)
    one = max(p.stat().st_size for p in folder.glob("*.ckpt"))
    return {"file_bytes": one, "sent": sent_bytes.sizes[first:], "kept": len(list(folder.glob("*.ckpt")))}


def draw_chart(args: argparse.Namespace, measured: list[tuple[str, dict]]) -> None:
    """This run's figures as the Performance page's chart (benchmarks/charts.py), into ``args.charts``."""
    from . import charts

    rows = [
        {
            "store": name,
            "content": "random" if args.content == "random" else "float32 weights",
            "full_s": r["full_s"],
            "incremental_s": r["incr_s"],
            "sent_mib": r["incr_bytes"] / MiB,
            "total_mib": r["full_bytes"] / MiB,
        }
        for name, r in measured
    ]
    section = charts.run_section(
        f"Incremental saves: {args.files} files, one changed",
        "python -m benchmarks.incremental",
        f"scale {args.scale}, median of {args.runs}, {os.cpu_count()} cores",
        rows,
    )
    for path in charts.draw({"incremental": section}, args.charts):
        print(f"chart: {path}", file=sys.stderr)


# One incremental save by the code of the checkout ``sys.argv[1]``, in a process of its own:
# a full save of the tree to a fresh object, one file rewritten, then the timed save over it.
_VERSION_CHILD = r"""
import os, resource, sys, time
sys.path.insert(0, sys.argv[1])
import flyte_checkpoint as fc
from flyte_checkpoint.storage.stores import local
obj, src, changed = sys.argv[2], sys.argv[3], sys.argv[4]
used = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
getattr(local, "wait_for_freeing", lambda: None)()
os.sync()
cpu, started = used(), time.perf_counter()
fc.Checkpoint(obj).save_sync(src)
full, full_cpu = time.perf_counter() - started, used() - cpu
size = os.path.getsize(changed)
with open(changed, "wb") as f:
    f.write(os.urandom(size))
getattr(local, "wait_for_freeing", lambda: None)()
os.sync()
cpu, started = used(), time.perf_counter()
fc.Checkpoint(obj).save_sync(src)
took = time.perf_counter() - started
getattr(local, "wait_for_freeing", lambda: None)()
print(took, used() - cpu, full, full_cpu)
os.unlink(obj)
"""


def versions(rev: str, files: int, size: int, runs: int, content: Content, work: Path) -> list[str]:
    """Markdown lines: the file store's incremental save by ``rev`` and by this checkout, on the
    same tree, interleaved (see the module docstring)."""
    import subprocess

    from .versions import _checkout, _env

    src = make_tree(work / "src", files, size, content)
    roots = {rev: _checkout(rev, work / "against"), "this checkout": ROOT.parent}
    kinds = ("incremental wall", "incremental CPU", "full wall", "full CPU")
    times: dict[str, dict[str, list[float]]] = {name: {k: [] for k in kinds} for name in roots}
    parts = sorted(src.glob("part-*.bin"))
    try:
        for run in range(runs + 1):  # the first round compiles each version's bytecode: not counted
            order = list(roots) if run % 2 else list(reversed(roots))
            for name in order:
                changed = parts[(7 * run + 3) % len(parts)]
                obj = work / f"obj-{run}-{name.replace(' ', '-')}.tgz"
                out = subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        _VERSION_CHILD,
                        str(roots[name]),
                        str(obj),
                        str(src),
                        str(changed),
                    ],
                    env=_env(),
                    capture_output=True,
                    text=True,
                )
                if out.returncode:
                    raise SystemExit(f"{name}: the save failed:\n{out.stderr[-2000:]}")
                if run:
                    for kind, value in zip(kinds, (float(x) for x in out.stdout.split()), strict=True):
                        times[name][kind].append(value)
                    print(f"{name}: " + out.stdout.strip(), file=sys.stderr, flush=True)
    finally:
        if roots[rev] != ROOT.parent:
            subprocess.run(["git", "-C", str(ROOT.parent), "worktree", "remove", "--force", str(roots[rev])])
    med = statistics.median
    lines = [
        f"| file store, {files} files of {size / MiB:.2f} MiB, one changed | {rev} | this checkout | ratio |",
        "|---|---|---|---|",
    ]
    for kind in kinds:
        old, new = (times[name][kind] for name in roots)
        save, clock = kind.split()
        lines.append(
            f"| {save} save, median {clock} s (min) | {med(old):.3f} ({min(old):.3f}) |"
            f" {med(new):.3f} ({min(new):.3f}) | {med(new) / med(old):.3f}x |"
        )
    return lines


def parse_trees(text: str) -> list[tuple[int, float]]:
    """``"64x4,32x8"``: trees of 64 files of 4 MiB and of 32 files of 8 MiB."""
    trees = []
    for part in filter(None, (t.strip() for t in text.split(","))):
        files, _, mib = part.partition("x")
        try:
            trees.append((int(files), float(mib)))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--trees takes FILESxMiB separated by commas (64x4,32x8), not {text!r}"
            )
    return trees


def links_suite(args: argparse.Namespace, content: Content, commit: CommitTime, work: Path) -> list[dict]:
    """On moto's S3 server through one simulated link (benchmarks/links.py), at each rate of
    ``args.links`` (validated first): each tree's full save and incremental save (one file
    changed), ``args.runs`` pairs; bytes up and down counted at the link."""
    from .links import LinkProcess, load_line, validated_rate

    rows = []
    trees = {
        (files, mib): make_tree(work / f"tree-{files}x{mib:g}", files, int(mib * MiB), content)
        for files, mib in args.trees
    }
    if args.copy_crc:  # moto answering copies with their CRC-32, as S3 does (benchmarks/motocrc.py)
        from .motocrc import run_server

        started = run_server()
    else:
        started = plugin_server("s3", min_part_size=None)  # AWS's 5 MiB minimum part
    with started as server:
        endpoint = server if isinstance(server, str) else server.endpoint
        os.environ.update(
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
            FLYTE_CHECKPOINT_S3_READ_RANGE_SIZE=str(8 * 2**30),  # moto copies the object per ranged GET
        )
        if not isinstance(server, str):
            server.create_bucket("bench")
        with LinkProcess(endpoint, args.links[0], nodes=1) as links:
            fc.configure_store("s3", endpoint_url=links.urls[0])
            up = lambda: links.stats()[0]["up"]  # noqa: E731
            down = lambda: links.stats()[0]["down"]  # noqa: E731
            key = uuid.uuid4().hex
            for rate in args.links:
                if (validated := validated_rate(links, rate, args, rows)) is None:
                    continue
                carried, before = validated
                for (files, mib), src in trees.items():
                    r = pair(
                        lambda run, files=files, mib=mib, rate=rate: (
                            f"s3://bench/{key}/{files}x{mib:g}-{rate:.0f}-{run}.tgz"
                        ),
                        src,
                        args.runs,
                        int(mib * MiB),
                        up,
                        content,
                        commit,
                        down,
                    )
                    r.update(
                        rate_mb_s=rate / 1e6,
                        carried_mb_s=carried[0] / 1e6,
                        files=files,
                        file_mib=mib,
                        load_before=before,
                        load_after=load_line(),
                    )
                    print(
                        f"  {files} x {mib:g} MiB: full {r['full_s']:.2f} s, incremental {r['incr_s']:.2f} s",
                        file=sys.stderr,
                        flush=True,
                    )
                    rows.append(r)
                    print("row: " + json.dumps(r), file=sys.stderr, flush=True)  # kept if stopped
    return rows


def links_table(rows: list[dict], runs: int, content: str, copy_crc: str = "") -> str:
    lines = [
        f"## Incremental saves on a simulated link: one file changed, S3 (moto{copy_crc}), {content} content"
        f" (median of {runs})",
        "",
        "| link MB/s | tree | full save s | incremental s | time | full MiB up | incremental MiB up | bytes"
        " | incremental MiB down | link-bound s, full / incremental | load before -> after |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "refused" in r:
            lines.append(f"| {r['rate_mb_s']:g} | refused: {r['refused']} |")
            continue
        rate = r["rate_mb_s"] * 1e6
        lines.append(
            f"| {r['rate_mb_s']:g} ({r['carried_mb_s']:.2f}) | {r['files']} x {r['file_mib']:g} MiB"
            f" | {r['full_s']:.2f} | {r['incr_s']:.2f} | {100 * r['incr_s'] / r['full_s']:.1f}%"
            f" | {r['full_bytes'] / MiB:.1f} | {r['incr_bytes'] / MiB:.2f}"
            f" | {100 * r['incr_bytes'] / r['full_bytes']:.1f}% | {r['incr_down_bytes'] / MiB:.2f}"
            f" | {r['full_bytes'] / rate:.2f} / {(r['incr_bytes'] + r['incr_down_bytes']) / rate:.2f}"
            f" | {r['load_before'].split(' on ')[0].removeprefix('load average ')} ->"
            f" {r['load_after'].split(' on ')[0].removeprefix('load average ')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0, help="fraction of the 16 MiB file size")
    p.add_argument("--files", type=int, default=64)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--s3", action="store_true", help="also on moto's S3 server")
    p.add_argument("--gcs", action="store_true", help="also on the GCS emulator")
    p.add_argument("--azure", action="store_true", help="also on Azurite")
    p.add_argument("--lightning", action="store_true", help="also Lightning's save_top_k=3")
    p.add_argument("--work", type=Path, default=None, help="where the tree and objects go")
    p.add_argument("--charts", type=Path, default=None, help="also draw the figures as an SVG chart here")
    p.add_argument(
        "--content",
        choices=("random", "model"),
        default="random",
        help="random bytes (stored as they are) or float32 weights (compressed by the full save)",
    )
    p.add_argument(
        "--against",
        metavar="REV",
        default=None,
        help="compare the file store's incremental saves of REV (a commit) with this checkout's",
    )
    p.add_argument(
        "--links",
        type=parse_rates,
        default=None,
        metavar="MB/S[,MB/S...]",
        help="only on moto's S3 server through a simulated link of this rate (MB = 10^6 bytes; several"
        " rates in one run: 5,10,25), the trees of --trees side by side",
    )
    p.add_argument(
        "--trees",
        type=parse_trees,
        default=parse_trees("64x4,32x8"),
        metavar="FILESxMiB[,...]",
        help="with --links: the trees (default 64x4,32x8: 64 files of 4 MiB, 32 of 8 MiB)",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=TOLERANCE,
        help="with --links: refuse a link whose validated rate is this fraction off (default 0.10)",
    )
    p.add_argument("--probe-mib", type=int, default=0, help="with --links: MiB of the validating upload")
    p.add_argument(
        "--probe-tries",
        type=int,
        default=3,
        help="with --links: validations tried (10 s apart) before a rate is refused (default 3)",
    )
    p.add_argument("--json", type=Path, default=None, help="with --links: also write the figures here")
    p.add_argument(
        "--copy-crc",
        action="store_true",
        help="with --links: moto answers UploadPartCopy with the copied bytes' CRC-32, as S3 does"
        " (else the save reads every copied range back to check it, as on moto and Azure)",
    )
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="fcp-incr-", dir=args.work))
    if args.links:
        load = load_line()
        try:
            rows = links_suite(args, Content(args.content), CommitTime(), work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        crc = ", answering copies with their CRC-32" if args.copy_crc else ""
        print(f"\n{links_table(rows, args.runs, args.content, crc)}\n")
        print(f"{load} before, {load_line()} after")
        if args.json:
            args.json.write_text(json.dumps({"rows": rows}, indent=2) + "\n")
        if any("refused" in r for r in rows):
            sys.exit(3)  # a link missed its rate: those rates were not measured
        return
    if args.against is not None:
        size = max(int(16 * MiB * args.scale), 64 * 1024)
        load = os.getloadavg()
        try:
            lines = versions(args.against, args.files, size, args.runs, Content(args.content), work)
            print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cores)")
            print("\n".join(lines))
            load = os.getloadavg()
            print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    sent_bytes = SentBytes()
    log = logging.getLogger("flyte_checkpoint")
    log.addHandler(sent_bytes)
    log.setLevel(logging.INFO)
    size = max(int(16 * MiB * args.scale), 64 * 1024)
    load = os.getloadavg()
    try:
        content = Content(args.content)
        commit = CommitTime()
        src = make_tree(work / "src", args.files, size, content)
        print(
            f"# Incremental saves: {args.files} files of {size / MiB:.2f} MiB ({args.content}), one changed"
        )
        print()
        print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cores)")
        print()
        print(
            "| store | full save s | incremental s | time | full MiB sent | incremental MiB sent | bytes"
            " | commit s (full / incremental) | time without the commit |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        measured: list[tuple[str, dict]] = []

        def shown(name: str, r: dict) -> str:
            measured.append((name, r))
            return row(name, r)

        total = lambda: sum(sent_bytes.sizes)  # noqa: E731
        print(
            shown(
                "file",
                pair(lambda run: str(work / f"obj-{run}.tgz"), src, args.runs, size, total, content, commit),
            ),
            flush=True,
        )
        lightning_rows = []
        if args.lightning:
            width = max(64, int(2048 * args.scale**0.5))
            lightning_rows.append(
                ("file", lightning_case(work, 6, width, str(work / "lightning.tgz"), sent_bytes))
            )
        if args.s3:
            with plugin_server("s3", min_part_size=None) as server:  # AWS's 5 MiB minimum part
                _client, proxy = s3_setup(server.endpoint)
                up = lambda: sum(r.up for r in proxy.records)  # noqa: E731
                key = uuid.uuid4().hex
                r = pair(
                    lambda run: f"s3://bench/{key}/obj-{run}.tgz", src, args.runs, size, up, content, commit
                )
                print(shown("s3 (moto, bytes at a proxy)", r), flush=True)
                if args.lightning:
                    res = lightning_case(work, 6, width, f"s3://bench/{key}/lightning.tgz", sent_bytes)
                    lightning_rows.append(("s3 (moto)", res))
                proxy.__exit__(None, None, None)
        if args.gcs:
            with plugin_server("gcs") as emu:
                emu.create_bucket("bench")
                proxy = gcs_setup(emu.endpoint)
                up = lambda: sum(r.up for r in proxy.records)  # noqa: E731
                key = uuid.uuid4().hex
                r = pair(
                    lambda run: f"gs://bench/{key}/obj-{run}.tgz", src, args.runs, size, up, content, commit
                )
                print(shown("gcs (emulator, bytes at a proxy)", r), flush=True)
                c = copy_through_client(f"gs://bench/{key}/through-client.tgz", src, proxy)
                print(
                    f"| gcs: a copy through the client (download + upload of the old object) |"
                    f" {r['full_s']:.2f} | {c['s']:.2f} | {100 * c['s'] / r['full_s']:.1f}% |"
                    f" {r['full_bytes'] / MiB:.1f} | {c['up'] / MiB:.2f} up + {c['down'] / MiB:.2f} down |"
                    f" {100 * (c['up'] + c['down']) / r['full_bytes']:.2f}% |",
                    flush=True,
                )
                proxy.__exit__(None, None, None)
        if args.azure:
            with plugin_server("azure") as server:
                proxy = azure_setup(server)
                up = lambda: sum(r.up for r in proxy.records)  # noqa: E731
                key = uuid.uuid4().hex
                r = pair(
                    lambda run: f"az://bench/{key}/obj-{run}.tgz", src, args.runs, size, up, content, commit
                )
                print(shown("azure (Azurite, bytes at a proxy)", r), flush=True)
                proxy.__exit__(None, None, None)
        load = os.getloadavg()
        print()
        print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        if lightning_rows:
            print()
            print("## Lightning, ModelCheckpoint(save_top_k=3), 6 epochs")
            print()
            print("| store | one .ckpt MiB | files kept | MiB sent by each epoch's save | in .ckpt files |")
            print("|---|---|---|---|---|")
            for name, res in lightning_rows:
                one = res["file_bytes"]
                each = ", ".join(f"{s / MiB:.2f}" for s in res["sent"])
                ratio = ", ".join(f"{s / one:.2f}" for s in res["sent"])
                print(f"| {name} | {one / MiB:.2f} | {res['kept']} | {each} | {ratio} |")
        if args.charts:
            draw_chart(args, measured)
    finally:
        log.removeHandler(sent_bytes)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
