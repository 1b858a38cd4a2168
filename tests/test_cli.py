"""The ``flyte-checkpoint`` console script, run in a subprocess against real stores.

The file backend always; S3 (moto), GCS (gcp-storage-emulator) and Azure (Azurite) through
the servers the plugins' test packages start on 127.0.0.1. A pseudo-terminal test checks
that push and pull draw a progress bar on a terminal, and none when output is piped.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import pty
import select
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from conftest import require
from tests.helpers import file_member, link_member, snapshot, tar_bytes
from tests.uri_secrets import PIECES, SPECIAL, assert_absent, with_password

SCRIPT = Path(sys.executable).with_name("flyte-checkpoint")
SECRET = "s3cr3t-Pa55word"

#: Variables of the caller's environment that could point a store at a real cloud account.
FOREIGN_ENV = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "STORAGE_EMULATOR_HOST",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_CLIENT_SECRET",
)


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    env.update(extra)
    return env


def cli(
    *args: str,
    env: dict[str, str] | None = None,
    input: bytes | None = None,
    cwd: Path | None = None,
    ok: bool | None = True,
) -> subprocess.CompletedProcess[str]:
    """Run the installed console script; with ``ok=True`` it must exit 0."""
    require(SCRIPT.exists(), f"the console script {SCRIPT} is not installed (pip install -e .)")
    proc = subprocess.run(
        [str(SCRIPT), *args],
        input=input,
        capture_output=True,
        env=env if env is not None else base_env(),
        cwd=cwd,
        timeout=120,
    )
    out = subprocess.CompletedProcess(
        proc.args,
        proc.returncode,
        proc.stdout.decode("utf-8", "replace"),
        proc.stderr.decode("utf-8", "replace"),
    )
    if ok:
        assert out.returncode == 0, f"{args}: exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out


def cli_json(*args: str, **kw) -> dict:
    out = cli(*args, "--json", **kw)
    return json.loads(out.stdout)


def one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    """The failure's single stderr line, checked to be the only one and free of tracebacks."""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("flyte-checkpoint: error: "), out.stderr
    assert "Traceback" not in out.stderr
    return lines[0]


def make_tree(root: Path) -> Path:
    (root / "optim").mkdir(parents=True)
    (root / "model.bin").write_bytes(os.urandom(300_000))
    (root / "optim" / "adam.bin").write_bytes(b"a" * 5000)
    (root / "optim" / "empty").write_bytes(b"")
    (root / "meta.json").write_text('{"epoch": 7}')
    (root / "latest").symlink_to("model.bin")
    return root


def loaded_by_library(uri: str, tmp_path: Path) -> tuple[Path | None, dict[str, object]]:
    with fc.Checkpoint(str(tmp_path / "unused"), uri) as cp:
        path = cp.load_sync()
        if path is None:
            return None, {}
        return path.relative_to(cp.path) if path != cp.path else Path("."), snapshot(cp.path)


# --------------------------------------------------------------------------- the script itself


def test_console_script_runs_and_reports_its_version():
    out = cli("--version")
    assert out.stdout.strip() == f"flyte-checkpoint {fc.__version__}"


def test_module_runs_like_the_script():
    out = subprocess.run(
        [sys.executable, "-m", "flyte_checkpoint.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    for command in ("backends", "inspect", "pull", "push", "ls", "rm"):
        assert command in out.stdout


# --------------------------------------------------------------------------- backends


def test_backends_lists_builtins_and_each_plugin_with_its_distribution():
    result = cli_json("backends")
    by_name = {b["name"]: b for b in result["backends"]}
    assert by_name["file"]["schemes"] == ["file"]
    assert by_name["file"]["distribution"] == "flyte-checkpoint"
    assert by_name["file"]["version"] == fc.__version__
    assert by_name["memory"]["source"] == "builtin"
    for name, dist, scheme in (
        ("s3", "flyte-checkpoint-s3", "s3"),
        ("gcs", "flyte-checkpoint-gcs", "gs"),
        ("azure", "flyte-checkpoint-azure", "az"),
    ):
        require(name in by_name, f"the {dist} plugin is not installed (pip install -e plugins/{name})")
        assert by_name[name]["distribution"] == dist
        assert by_name[name]["version"]
        assert scheme in by_name[name]["schemes"]
    assert result["not_installed"] == []
    text = cli("backends").stdout
    assert "file://" in text and "flyte-checkpoint 0.1.0 (built in)" in text


def test_backends_names_the_pip_install_for_each_missing_known_scheme():
    env = base_env(FLYTE_CHECKPOINT_DISABLE_PLUGIN_AUTOLOAD="1")
    result = cli_json("backends", env=env)
    assert [b["name"] for b in result["backends"]] == ["file", "memory"]
    missing = {m["extra"]: m for m in result["not_installed"]}
    assert missing["s3"]["schemes"] == ["s3", "s3a"]
    # make setup installs the core from this checkout: the hint is the plugin's folder there
    checkout = Path(__file__).resolve().parent.parent
    assert missing["s3"]["install"] == f"pip install -e {checkout}/plugins/s3"
    assert missing["gcs"]["install"] == f"pip install -e {checkout}/plugins/gcs"
    assert missing["azure"]["schemes"] == ["abfs", "abfss", "az"]
    text = cli("backends", env=env).stdout
    assert "not installed:" in text
    assert f"pip install -e {checkout}/plugins/azure" in text


def test_a_uri_of_a_missing_backend_fails_with_the_pip_install():
    env = base_env(FLYTE_CHECKPOINT_DISABLE_PLUGIN_AUTOLOAD="1")
    out = cli("inspect", "s3://bucket/run/ckpt", env=env, ok=False)
    assert out.returncode == 1
    checkout = Path(__file__).resolve().parent.parent
    assert f"Install it with: pip install -e {checkout}/plugins/s3 (" in one_line_error(out)
    # the plugin is installed here: the message says the variable kept it from loading
    assert "FLYTE_CHECKPOINT_DISABLE_PLUGIN_AUTOLOAD is set, so no installed plugin was loaded" in out.stderr


# --------------------------------------------------------------------------- push, inspect, pull: folders


def test_folder_push_inspect_pull_matches_load(tmp_path):
    tree = make_tree(tmp_path / "state")
    uri = str(tmp_path / "store" / "run" / "ckpt")
    pushed = cli_json("push", str(tree), uri)
    assert pushed["ok"] and pushed["kind"] == "tarball" and pushed["size"] == Path(uri).stat().st_size

    info = cli_json("inspect", uri)
    assert info["kind"] == "tarball" and info["format"] == "tar.gz"
    assert info["size"] == Path(uri).stat().st_size
    assert (info["files"], info["dirs"], info["links"]) == (4, 1, 1)
    assert info["members"] == 6
    assert info["unpacked_bytes"] == 300_000 + 5000 + len('{"epoch": 7}')
    assert [e["name"] for e in info["entries"]] == ["model.bin", "optim", "meta.json", "latest"]
    assert info["entries"][1] == {"name": "optim", "kind": "dir", "size": 5000, "members": 3}
    assert info["refused"] == []

    text = cli("inspect", uri).stdout
    assert "tarball (gzip-compressed tar)" in text
    assert "members:   6 (4 files, 1 folder, 1 link)" in text
    assert "optim/  (3 members)" in text and "latest@" in text

    pulled = cli_json("pull", uri, str(tmp_path / "out"))
    assert pulled["kind"] == "tarball" and pulled["path"] == str(tmp_path / "out")
    where, expected = loaded_by_library(uri, tmp_path)
    assert where == Path(".")
    assert snapshot(tmp_path / "out") == expected == snapshot(tree)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "state", "store"]  # no staging left


def test_pull_checks_each_file_against_the_index_as_load_does(tmp_path):
    """``pull`` restores as ``load()`` does: a file whose recorded hash does not match its bytes
    (every gzip CRC right) fails the pull naming it, and nothing is left behind."""
    from tests.test_index import _set, forge

    uri = str(tmp_path / "ckpt")
    cli("push", str(make_tree(tmp_path / "state")), uri)
    forge(Path(uri), _set(7, "0" * 64))  # the first file's recorded hash
    out = cli("pull", uri, str(tmp_path / "out"), ok=False)
    assert out.returncode == 1
    assert "does not match the BLAKE3 its index records" in one_line_error(out)
    # no staging, no out (the checkpoint's history is the save's: docs/history.md)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "ckpt.fcp-history", "state"]


def test_pull_into_an_existing_empty_folder_keeps_it_and_refuses_a_full_one(tmp_path):
    uri = str(tmp_path / "ckpt")
    cli("push", str(make_tree(tmp_path / "state")), uri)
    (tmp_path / "empty").mkdir()
    cli("pull", uri, str(tmp_path / "empty"))
    assert snapshot(tmp_path / "empty") == snapshot(tmp_path / "state")

    out = cli("pull", uri, str(tmp_path / "empty"), ok=False)
    assert out.returncode == 1
    assert "is not empty: pull into a new or empty folder" in one_line_error(out)
    out = cli("pull", uri, str(tmp_path / "state" / "meta.json"), ok=False)
    assert "is not a folder" in one_line_error(out)


def test_inspect_members_lists_every_member_and_limit_cuts_the_entries(tmp_path):
    uri = str(tmp_path / "ckpt")
    cli("push", str(make_tree(tmp_path / "state")), uri)
    info = cli_json("inspect", uri, "--members", "--limit", "2")
    assert [e["name"] for e in info["entries"]] == ["model.bin", "optim"]
    assert info["entries_total"] == 4
    names = {m["name"]: m for m in info["member_list"]}
    assert set(names) == {"model.bin", "optim/", "optim/adam.bin", "optim/empty", "meta.json", "latest"}
    assert names["latest"]["kind"] == "symlink" and names["latest"]["linkname"] == "model.bin"
    text = cli("inspect", uri, "--limit", "1").stdout
    assert "... and 3 more (--limit 0 shows all)" in text


def test_inspect_shows_ten_entries_by_default_and_limit_0_shows_all(tmp_path):
    tree = tmp_path / "state"
    tree.mkdir()
    for i in range(12):
        (tree / f"f{i:02d}.bin").write_bytes(b"x" * (1000 + i))  # f11 is the largest
    uri = str(tmp_path / "ckpt")
    cli("push", str(tree), uri)
    everything = [f"f{i:02d}.bin" for i in reversed(range(12))]
    assert [e["name"] for e in cli_json("inspect", uri)["entries"]] == everything[:10]
    assert "... and 2 more (--limit 0 shows all)" in cli("inspect", uri).stdout
    assert [e["name"] for e in cli_json("inspect", uri, "--limit", "0")["entries"]] == everything
    text = cli("inspect", uri, "--limit", "0").stdout
    assert all(name in text for name in everything) and "more (--limit 0" not in text


# --------------------------------------------------------------------------- payloads


def test_file_and_stdin_payloads_pull_to_dir_payload_as_load_does(tmp_path):
    src = tmp_path / "weights.bin"
    src.write_bytes(b"\x00weights\xff" * 1000)
    uri = str(tmp_path / "store" / "w")
    assert cli_json("push", str(src), uri)["kind"] == "payload"
    assert Path(uri).read_bytes() == src.read_bytes()
    info = cli_json("inspect", uri)
    assert (info["kind"], info["format"], info["size"], info["members"]) == ("payload", "raw", 9000, 0)

    pulled = cli_json("pull", uri, str(tmp_path / "out"))
    assert pulled["path"] == str(tmp_path / "out" / "payload")
    assert (tmp_path / "out" / "payload").read_bytes() == src.read_bytes()
    where, expected = loaded_by_library(uri, tmp_path)
    assert where == Path("payload") and snapshot(tmp_path / "out") == expected

    step = str(tmp_path / "store" / "step")
    cli("push", "-", step, input=b"41\n")
    assert Path(step).read_bytes() == b"41\n"
    cli("pull", step, str(tmp_path / "step"))
    assert (tmp_path / "step" / "payload").read_bytes() == b"41\n"


def test_inspect_tells_gzip_payloads_and_plain_tarballs_from_content(tmp_path):
    gz = tmp_path / "gz"
    gz.write_bytes(gzip.compress(b"not a tar, just text\n" * 100))
    info = cli_json("inspect", str(gz))
    assert (info["kind"], info["format"]) == ("payload", "gzip")

    plain = tmp_path / "plain"
    plain.write_bytes(tar_bytes([file_member("a/b.txt", b"hello")], gz=False))
    info = cli_json("inspect", str(plain))
    assert (info["kind"], info["format"], info["files"], info["unpacked_bytes"]) == ("tarball", "tar", 1, 5)
    assert info["entries"] == [{"name": "a", "kind": "dir", "size": 5, "members": 1}]
    cli("pull", str(plain), str(tmp_path / "out"))
    assert (tmp_path / "out" / "a" / "b.txt").read_bytes() == b"hello"


# --------------------------------------------------------------------------- bad objects


def test_hostile_tarball_is_flagged_by_inspect_and_refused_by_pull(tmp_path):
    uri = tmp_path / "evil"
    uri.write_bytes(
        tar_bytes(
            [
                file_member("ok.txt", b"fine"),
                file_member("../escape.txt", b"x"),
                link_member("up", "../../etc"),
            ]
        )
    )
    info = cli_json("inspect", str(uri))
    assert len(info["refused"]) == 2
    assert "'../escape.txt': the name leaves the folder" in info["refused"][0]
    assert "outside the folder" in info["refused"][1]
    assert "load() would refuse '../escape.txt'" in cli("inspect", str(uri)).stdout

    out = cli("pull", str(uri), str(tmp_path / "out"), ok=False)
    assert out.returncode == 1
    assert "'../escape.txt'" in one_line_error(out)
    assert not (tmp_path / "out").exists() and not (tmp_path / "escape.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil"]  # no staging folder left


def test_truncated_tarball_fails_inspect_and_pull_with_one_line(tmp_path):
    good = tmp_path / "good"
    cli("push", str(make_tree(tmp_path / "state")), str(good))
    bad = tmp_path / "bad"
    bad.write_bytes(good.read_bytes()[:-5000])
    for args in (("inspect", str(bad)), ("pull", str(bad), str(tmp_path / "out"))):
        out = cli(*args, ok=False)
        assert out.returncode == 1, args
        line = one_line_error(out)
        assert "truncated" in line or "damaged" in line, line
    assert not (tmp_path / "out").exists()


def test_missing_and_empty_objects_are_no_checkpoint_exit_3(tmp_path):
    missing = str(tmp_path / "nothing")
    out = cli("pull", missing, str(tmp_path / "out"), ok=False)
    assert out.returncode == 3
    assert f"no checkpoint at {missing}: there is no object there" in one_line_error(out)
    assert cli("inspect", missing, ok=False).returncode == 3

    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    out = cli("pull", str(empty), str(tmp_path / "out"), ok=False)
    assert out.returncode == 3 and "zero bytes" in one_line_error(out)
    assert not (tmp_path / "out").exists()
    info = cli_json("inspect", str(empty))
    assert (info["kind"], info["size"]) == ("empty", 0)


def test_a_folder_is_not_an_object(tmp_path):
    out = cli("inspect", str(tmp_path), ok=False)
    assert out.returncode == 1
    assert "is a directory, not a checkpoint object" in one_line_error(out)


# --------------------------------------------------------------------------- ls, rm


def test_ls_lists_a_prefix_and_rm_removes_one_object(tmp_path):
    for name in ("run/1/ckpt", "run/2/ckpt", "other/ckpt"):
        cli("push", "-", str(tmp_path / name), input=name.encode())
    prefix = str(tmp_path / "run") + "/"
    out = cli("ls", prefix).stdout.splitlines()
    assert out == [str(tmp_path / "run/1/ckpt"), str(tmp_path / "run/2/ckpt")]
    listed = cli_json("ls", "-l", prefix)
    assert listed["count"] == 2
    first = listed["objects"][0]
    assert (first["uri"], first["size"]) == (str(tmp_path / "run/1/ckpt"), len("run/1/ckpt"))
    assert first["modified"].endswith("+00:00")
    out = cli("ls", str(tmp_path / "nowhere/"), ok=False)
    assert out.returncode == 3 and "nothing under" in one_line_error(out), out.stderr

    removed = cli_json("rm", str(tmp_path / "run/1/ckpt"))
    assert removed["removed"] and removed["size"] == len("run/1/ckpt")
    assert not (tmp_path / "run/1/ckpt").exists()
    out = cli("rm", str(tmp_path / "run/1/ckpt"), ok=False)
    assert out.returncode == 3 and "nothing to remove at" in one_line_error(out)
    assert cli_json("rm", "-f", str(tmp_path / "run/1/ckpt"))["removed"] is False
    assert cli("ls", prefix).stdout.splitlines() == [str(tmp_path / "run/2/ckpt")]


def test_ls_of_a_prefix_with_nothing_under_it_says_so_with_exit_3(tmp_path):
    """Proves: ``ls`` of an empty folder, of a prefix nothing starts with, and of one holding only
    the library's own files exits 3 (as ``pull`` of no object) with one line that names the prefix,
    in --json too (its error document), instead of printing nothing with exit 0."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "only-markers").mkdir()
    (tmp_path / "only-markers" / ".train.lock").write_bytes(b"")
    for prefix in (tmp_path / "empty", tmp_path / "nowhere", tmp_path / "only-markers"):
        for args in ([], ["-l"], ["-l", "--no-recursive"]):
            out = cli("ls", *args, f"{prefix}/", ok=False)
            assert out.returncode == 3, (prefix, args, out.stderr)
            assert f"nothing under {prefix}/: " in one_line_error(out), out.stderr
        doc = json.loads(cli("ls", f"{prefix}/", "--json", ok=False).stdout)
        assert (doc["ok"], doc["type"], doc["exit"]) == (False, "NoCheckpointError", 3)
    out = cli("ls", f"{tmp_path / 'only-markers'}/", ok=False)
    assert "only 1 of the library's own files (--all lists them)" in one_line_error(out)
    assert cli("ls", "--all", f"{tmp_path / 'only-markers'}/").stdout.splitlines() == [
        str(tmp_path / "only-markers" / ".train.lock")
    ]


def test_ls_hides_the_librarys_own_files_unless_all(tmp_path):
    """Proves: a named run's lock (``.train.lock``) and attempt markers (``.attempt``) and a
    sharded save's ``NAME.fcp-shard/`` folder are left out of ``ls`` (recursive, -l, one level)
    and counted in --json's ``hidden``; ``--all`` (``-a``) lists them; a user's ``.lockfile`` or
    ``notes.lock`` is listed."""
    run = tmp_path / "run"
    for name in ("1/ckpt", "2/ckpt", "notes.lock", ".lockfile"):
        cli("push", "-", str(run / name), input=b"x")
    for name in (".train.lock", "1/.attempt", "2/.attempt", "2/ckpt.fcp-shard/rank-0"):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(b"")
    objects = [str(run / n) for n in (".lockfile", "1/ckpt", "2/ckpt", "notes.lock")]
    assert cli("ls", f"{run}/").stdout.splitlines() == objects
    assert [line.split()[-1] for line in cli("ls", "-l", f"{run}/").stdout.splitlines()] == objects
    one_level = [
        line.split()[-1] for line in cli("ls", "-l", "--no-recursive", f"{run}/").stdout.splitlines()
    ]
    assert one_level == [f"{run}/{n}" for n in (".lockfile", "1/", "2/", "notes.lock")]
    doc = cli_json("ls", f"{run}/")
    assert (doc["count"], doc["hidden"]) == (4, 4)
    every = sorted(
        objects
        + [str(run / n) for n in (".train.lock", "1/.attempt", "2/.attempt", "2/ckpt.fcp-shard/rank-0")]
    )
    assert sorted(cli("ls", "--all", f"{run}/").stdout.splitlines()) == every
    assert sorted(cli("ls", "-a", f"{run}/").stdout.splitlines()) == every
    assert cli_json("ls", "--all", f"{run}/")["hidden"] == 0


# --------------------------------------------------------------------------- errors, logging


def test_failures_are_one_line_with_credentials_removed_and_a_traceback_only_with_debug(tmp_path):
    uri = f"nosuch://user:{SECRET}@bucket/ckpt?sig={SECRET}"
    out = cli("inspect", uri, ok=False)
    assert out.returncode == 1
    line = one_line_error(out)
    assert "no backend serves the 'nosuch' scheme" in line
    assert SECRET not in out.stdout + out.stderr

    out = cli("inspect", uri, "--debug", ok=False)
    assert out.returncode == 1
    assert "Traceback (most recent call last)" in out.stderr
    assert out.stderr.splitlines()[-1].startswith("flyte-checkpoint: error: no backend serves")
    assert SECRET not in out.stdout + out.stderr


def test_json_failures_print_an_error_document(tmp_path):
    out = cli("pull", str(tmp_path / "none"), str(tmp_path / "out"), "--json", ok=False)
    doc = json.loads(out.stdout)
    assert doc["ok"] is False and doc["exit"] == 3 and doc["type"] == "NoCheckpointError"
    assert "no checkpoint at" in doc["error"]
    one_line_error(out)


def test_usage_errors_exit_2_with_one_line():
    out = cli("frobnicate", ok=False)
    assert out.returncode == 2
    assert "invalid choice: 'frobnicate'" in one_line_error(out)
    out = cli("pull", "only-one-arg", "--json", ok=False)
    assert out.returncode == 2
    assert json.loads(out.stdout)["type"] == "UsageError"
    assert "the following arguments are required: DIR" in one_line_error(out)
    out = cli("inspect", "anything", "--limit", "-1", ok=False)
    assert out.returncode == 2
    assert "argument --limit: -1 is negative: give 0 (all) or more" in one_line_error(out)
    out = cli("inspect", "anything", "--limit", "ten", ok=False)
    assert out.returncode == 2 and "argument --limit: 'ten' is not a whole number" in one_line_error(out)


def test_verbose_logs_one_info_line_per_transfer_and_debug_logs_store_calls(tmp_path):
    uri = str(tmp_path / "ckpt")
    out = cli("push", str(make_tree(tmp_path / "state")), uri, "-v")
    info = [line for line in out.stderr.splitlines() if "INFO" in line]
    assert len(info) == 1
    assert f"saved checkpoint {uri}: " in info[0] and " bytes in " in info[0] and "MB/s" in info[0]

    out = cli("pull", uri, str(tmp_path / "out"), "--debug")
    assert f"LocalStore.pin({uri}): " in out.stderr  # the version every read of the load is of
    assert f"INFO: loaded checkpoint {uri}: " in out.stderr
    out = cli("pull", uri, str(tmp_path / "out2"))
    assert out.stderr == ""


# --------------------------------------------------------------------------- progress on a terminal


def run_in_pty(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run the script with stdin, stdout and stderr on a pseudo-terminal; return (status, output)."""
    require(SCRIPT.exists(), f"the console script {SCRIPT} is not installed")
    primary, secondary = pty.openpty()
    env = base_env(TERM="xterm", COLUMNS="100")
    proc = subprocess.Popen(
        [str(SCRIPT), *args], stdin=secondary, stdout=secondary, stderr=secondary, cwd=cwd, env=env
    )
    os.close(secondary)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(primary, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(primary)
        status = proc.wait(timeout=60)
    return status, b"".join(chunks).decode("utf-8", "replace")


def test_push_and_pull_draw_a_progress_bar_on_a_terminal_and_none_when_piped(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "big.bin").write_bytes(os.urandom(12 * 1024 * 1024))
    status, screen = run_in_pty(["push", "state", "store/ckpt"], tmp_path)
    assert status == 0, screen
    assert "\rpush [" in screen and "100%" in screen and "MiB/s" in screen and " in 0:" in screen
    status, screen = run_in_pty(["pull", "store/ckpt", "out"], tmp_path)
    assert status == 0, screen
    assert "\rpull [" in screen and "100%" in screen and "/ 12 MiB" in screen
    assert (tmp_path / "out" / "big.bin").read_bytes() == (tmp_path / "state" / "big.bin").read_bytes()
    status, screen = run_in_pty(["pull", "store/ckpt", "out2", "--no-progress"], tmp_path)
    assert status == 0 and "\r" + "pull [" not in screen

    piped = cli("push", "state", "store/ckpt2", cwd=tmp_path)
    assert "\r" not in piped.stderr + piped.stdout and "%" not in piped.stderr
    piped = cli("pull", "store/ckpt2", "out3", cwd=tmp_path)
    assert piped.stderr == "" and "\r" not in piped.stdout
    forced = cli("pull", "store/ckpt2", "out4", "--progress", cwd=tmp_path)
    assert "pull [" in forced.stderr and "100%" in forced.stderr


# --------------------------------------------------------------------------- cloud stores


def s3_server(bucket: str = "cli-tests") -> Iterator[tuple[dict[str, str], str]]:
    """moto's S3 server with ``bucket`` made: (an environment pointing at it, ``s3://bucket``)."""
    try:
        from flyte_checkpoint_s3_tests import server
    except ImportError:
        require(False, "the S3 plugin's test package (flyte_checkpoint_s3_tests) is not installed")
        raise
    require(server.server_installed(), f"moto's S3 server is not installed: {server.INSTALL_HINT}")
    with server.run_server() as running:
        running.create_bucket(bucket)
        env = base_env(
            AWS_ENDPOINT_URL_S3=running.endpoint,
            AWS_ACCESS_KEY_ID="AKIATESTCLI000000000",
            AWS_SECRET_ACCESS_KEY=SECRET,
            AWS_DEFAULT_REGION="us-east-1",
            AWS_EC2_METADATA_DISABLED="true",
            AWS_CONFIG_FILE=os.devnull,
            AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        )
        yield env, f"s3://{bucket}"


def gcs_server() -> Iterator[tuple[dict[str, str], str]]:
    try:
        from flyte_checkpoint_gcs_tests import server
    except ImportError:
        require(False, "the GCS plugin's test package (flyte_checkpoint_gcs_tests) is not installed")
        raise
    require(server.server_installed(), f"gcp-storage-emulator is not installed: {server.INSTALL_HINT}")
    with server.run_server() as emu:
        emu.create_bucket("cli-tests")
        yield base_env(STORAGE_EMULATOR_HOST=emu.endpoint), "gs://cli-tests"


def azure_server() -> Iterator[tuple[dict[str, str], str]]:
    try:
        from flyte_checkpoint_azure_tests import server
    except ImportError:
        require(False, "the Azure plugin's test package (flyte_checkpoint_azure_tests) is not installed")
        raise
    require(server.server_installed(), f"azurite-blob is not installed: {server.INSTALL_HINT}")
    try:
        with server.run_server() as running:
            running.create_bucket("cli-tests")
            yield base_env(AZURE_STORAGE_CONNECTION_STRING=running.connection_string), "az://cli-tests"
    except server.ServerStartError as exc:  # installed but not started: a failure, CI or not
        pytest.fail(str(exc), pytrace=False)


SERVERS = {"s3": s3_server, "gcs": gcs_server, "azure": azure_server}


@pytest.fixture(scope="module", params=sorted(SERVERS))
def cloud(request: pytest.FixtureRequest) -> Iterator[tuple[dict[str, str], str]]:
    """(environment pointing the plugin at its test server, a fresh root URI in a bucket)."""
    gen = SERVERS[request.param]()
    env, bucket = next(gen)
    yield env, f"{bucket}/{uuid.uuid4().hex}"
    gen.close()


@pytest.mark.integration
def test_cloud_round_trip_through_the_script(cloud, tmp_path):
    env, root = cloud
    tree = make_tree(tmp_path / "state")
    ckpt, step = f"{root}/run/1/ckpt", f"{root}/run/1/step"

    pushed = cli_json("push", str(tree), ckpt, env=env)
    assert pushed["uri"] == ckpt and pushed["kind"] == "tarball" and pushed["size"] > 0
    cli("push", "-", step, input=b"7\n", env=env)

    listed = cli_json("ls", "-l", f"{root}/run/", env=env)
    assert [o["uri"] for o in listed["objects"]] == [ckpt, step]
    assert listed["objects"][0]["size"] == pushed["size"] and listed["objects"][1]["size"] == 2

    info = cli_json("inspect", ckpt, env=env)
    assert (info["kind"], info["files"], info["dirs"], info["links"]) == ("tarball", 4, 1, 1)
    assert cli_json("inspect", step, env=env)["kind"] == "payload"

    out = cli("pull", ckpt, str(tmp_path / "out"), "--debug", env=env)
    assert snapshot(tmp_path / "out") == snapshot(tree)
    assert "Store.pin(" in out.stderr  # a load reads through the pin it takes
    assert SECRET not in out.stdout + out.stderr
    cli("pull", step, str(tmp_path / "step"), env=env)
    assert (tmp_path / "step" / "payload").read_bytes() == b"7\n"

    cli("rm", step, env=env)
    assert cli("pull", step, str(tmp_path / "gone"), env=env, ok=False).returncode == 3
    assert [o["uri"] for o in cli_json("ls", f"{root}/run/", env=env)["objects"]] == [ckpt]


@pytest.mark.integration
def test_cloud_missing_object_is_exit_3_and_bad_tarball_is_exit_1(cloud, tmp_path):
    env, root = cloud
    out = cli("inspect", f"{root}/absent", env=env, ok=False)
    assert out.returncode == 3
    assert f"{root}/absent" in one_line_error(out)

    bad = tmp_path / "bad"
    good = io.BytesIO()
    with tarfile.open(fileobj=good, mode="w:gz") as tf:
        info = tarfile.TarInfo("x.bin")
        data = os.urandom(100_000)
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    bad.write_bytes(good.getvalue()[:-3000])
    cli("push", str(bad), f"{root}/bad", env=env)
    out = cli("pull", f"{root}/bad", str(tmp_path / "out"), env=env, ok=False)
    assert out.returncode == 1
    assert "truncated" in one_line_error(out)
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- credentials in URIs

KEY_ID = "AKIACLIUSERINFO00042"


def every_command_refuses(root: str, char: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> int:
    """Run inspect, pull, push, ls and rm (plain, --json, --debug) on URIs under ``root`` with a
    password holding ``char``: each must exit 1 naming the URI without its credentials.
    Runs ``main()`` in this process (the console script's entry point); returns the runs."""
    from flyte_checkpoint.cli import main

    uri = with_password(f"{root}/run/ckpt", char.join(PIECES), KEY_ID)
    payload = tmp_path / "payload.bin"
    payload.write_bytes(b"state")
    commands = {
        "inspect": ["inspect", uri],
        "pull": ["pull", uri, str(tmp_path / "out")],
        "push": ["push", str(payload), uri],
        "ls": ["ls", "-l", uri.rsplit("/", 1)[0] + "/"],
        "rm": ["rm", uri],
    }
    runs = 0
    for name, args in commands.items():
        for mode in ("", "--json", "--debug"):
            code = main([*args, mode] if mode else args)
            out = capsys.readouterr()
            where = f"{name} {mode}"
            assert code == 1, f"{where}: exit {code}\n{out.out}\n{out.err}"
            assert_absent([char.join(PIECES), KEY_ID, *PIECES], out.out + out.err, where)
            last = out.err.splitlines()[-1]
            assert last.startswith("flyte-checkpoint: error: ") and "credentials" in last, out.err
            assert root.rsplit("/", 1)[-1] in last, f"{where} does not name the URI: {last}"
            if mode == "--json":
                doc = json.loads(out.out)
                assert (doc["ok"], doc["type"], doc["exit"]) == (False, "InvalidURIError", 1)
                assert doc["error"] == last.removeprefix("flyte-checkpoint: error: ")
            elif mode == "--debug":
                assert "Traceback (most recent call last)" in out.err
            else:
                assert out.out == "" and len(out.err.splitlines()) == 1, out.err
            runs += 1
    assert not (tmp_path / "out").exists()
    return runs


def test_a_uri_that_lost_its_colon_is_refused_by_every_command_and_nothing_is_written(tmp_path):
    """Proves: ``push a.txt s3//bucket/key`` (a relative path whose first folder is a scheme's
    name) exits 1 with "did you mean s3://bucket/key?" and writes nothing under ./s3/ (it saved
    there with exit 0); push, pull, inspect, ls and rm say the same; ``./s3//bucket/key`` is
    still the local path."""
    (tmp_path / "a.txt").write_bytes(b"state")
    commands = [
        ["push", "a.txt", "s3//bucket/key"],
        ["pull", "s3//bucket/key", "out"],
        ["inspect", "s3//bucket/key"],
        ["ls", "s3//bucket/"],
        ["rm", "s3//bucket/key"],
    ]
    for args in commands:
        out = cli(*args, cwd=tmp_path, ok=False)
        assert out.returncode == 1, (args, out.stderr)
        assert "did you mean s3://bucket" in one_line_error(out), (args, out.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
    cli("push", "a.txt", "./s3//bucket/key", cwd=tmp_path)
    assert (tmp_path / "s3" / "bucket" / "key").read_bytes() == b"state"


@pytest.mark.parametrize("char", list(SPECIAL.values()), ids=list(SPECIAL))
def test_a_password_in_a_local_uri_never_shows_in_any_command(char, tmp_path, capsys):
    """Proves: ``file://KEY:SECRET@localhost/...`` with SECRET holding ``char`` is refused by
    inspect, pull, push, ls and rm with one message that says credentials are not taken and hides
    them, on stderr, in --json's document and in --debug's traceback."""
    root = str(tmp_path / f"store-{uuid.uuid4().hex}")
    assert every_command_refuses(root, char, tmp_path, capsys) == 15
    assert not Path(root).exists()


@pytest.mark.integration
@pytest.mark.parametrize("char", list(SPECIAL.values()), ids=list(SPECIAL))
def test_a_password_in_a_cloud_uri_never_shows_in_any_command(cloud, char, tmp_path, capsys, monkeypatch):
    """Proves: with each plugin pointed at its test server, ``s3://KEY:SECRET@bucket/...`` (and
    gs://, az://) with SECRET holding ``char`` is refused by every command (exit 1, one line that
    names the URI without its credentials), and neither stderr, --json's stdout nor --debug's
    traceback shows the secret, a piece of it or the key id; the console script too."""
    from flyte_checkpoint.storage.registry import get_registry

    env, root = cloud
    for name in FOREIGN_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_registry().close()  # stores are rebuilt from this environment
    try:
        assert every_command_refuses(root, char, tmp_path, capsys) == 15
    finally:
        get_registry().close()
    script_uri = with_password(f"{root}/script", char.join(PIECES), KEY_ID)
    out = cli("push", "-", script_uri, input=b"x", env=env, ok=False)
    assert out.returncode == 1 and "credentials" in one_line_error(out)
    assert_absent(
        [char.join(PIECES), KEY_ID, *PIECES], out.stdout + out.stderr, "the console script's output"
    )


# --------------------------------------------------------------------------- empty saves


def test_push_refuses_empty_stdin_or_file_and_keeps_the_checkpoint_unless_allow_empty(tmp_path):
    """Proves: ``push -`` with empty stdin (a writer that died, a broken pipe) and ``push`` of
    an empty file exit 1 with one line that says why and names --allow-empty, and leave the good
    checkpoint in place; with --allow-empty the empty object is saved (and loads as none)."""
    uri = str(tmp_path / "store" / "ckpt")
    cli("push", "-", uri, input=b"epoch-7")

    out = cli("push", "-", uri, input=b"", ok=False)
    assert out.returncode == 1 and out.stdout == ""
    line = one_line_error(out)
    assert f"stdin was empty: refusing to save zero bytes at {uri}" in line and "--allow-empty" in line
    doc = json.loads(cli("push", "-", uri, "--json", input=b"", ok=False).stdout)
    assert (doc["ok"], doc["type"], doc["exit"]) == (False, "EmptySaveError", 1)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    out = cli("push", str(empty), uri, ok=False)
    assert out.returncode == 1 and f"{empty} is empty" in one_line_error(out)
    assert Path(uri).read_bytes() == b"epoch-7"
    assert loaded_by_library(uri, tmp_path)[0] == Path("payload")

    assert "--allow-empty" in cli("push", "--help").stdout
    assert cli_json("push", "-", uri, "--allow-empty", input=b"")["size"] == 0
    assert loaded_by_library(uri, tmp_path) == (None, {})


# --------------------------------------------------------------------------- log lines and the bar


def test_a_log_line_during_a_transfer_blanks_the_bar_and_redraws_it_below(tmp_path, capsys):
    """Proves: with ``-v`` and a bar, the info line is written on a blanked line and the bar is
    drawn again below it (then ended by its final state), never on the bar's line."""
    from flyte_checkpoint.cli import main

    (tmp_path / "f.bin").write_bytes(os.urandom(100_000))
    assert main(["push", str(tmp_path / "f.bin"), str(tmp_path / "ckpt"), "-v", "--progress"]) == 0
    err = capsys.readouterr().err
    before, info, after = err.partition("flyte-checkpoint: INFO: saved checkpoint")
    assert info, err
    assert before.rstrip(" ").endswith("\r"), repr(before[-200:])  # the bar's line was blanked
    drawn_after = after.split("\n", 1)[1]
    assert drawn_after.startswith("\rpush ["), repr(after)  # redrawn at once, below the log line
    assert drawn_after.count("\rpush [") == 2 and " in 0:" in drawn_after  # then its final state


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("previous", [False, True], ids=["empty", "previous"])
def test_an_interrupted_push_says_nothing_was_saved_and_leaves_no_temporary_file(tmp_path, sig, previous):
    """Proves (issue 35): Ctrl-C or SIGTERM while ``push -`` streams stdin into a local object
    exits 130 or 143 saying that nothing was saved (and what the URI holds: still no checkpoint,
    or the one it held before), the previous object byte for byte, and no ``.fcp-tmp-*`` left
    (SIGTERM ended the process at once and left the temporary file; Ctrl-C said only
    'interrupted'). The signal is sent once the temporary file exists: the upload has begun."""
    import signal as signals

    from flyte_checkpoint.storage.blobstore import COPY_CHUNK
    from tests.reliability.gates import HANG

    store = tmp_path / "store"
    store.mkdir()
    dest = store / "ckpt"
    if previous:
        dest.write_bytes(b"the previous checkpoint")
    proc = subprocess.Popen(
        [str(SCRIPT), "push", "-", str(dest)],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=base_env(),
    )
    assert proc.stdin is not None and proc.stderr is not None
    try:
        # one chunk and a byte: the first chunk is written, and the push waits for the rest
        proc.stdin.write(os.urandom(COPY_CHUNK + 1))
        proc.stdin.flush()
        deadline = time.monotonic() + HANG
        while not [p for p in store.iterdir() if p.name.startswith(".fcp-tmp-")]:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the push never began its upload"
            time.sleep(0.01)
        proc.send_signal(getattr(signals, sig))
        status = proc.wait(HANG)
        stderr = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdin.close()
        proc.stderr.close()
    assert status == 128 + getattr(signals, sig), stderr
    said = "holds the checkpoint it held before" if previous else "there is still no checkpoint at"
    assert f"interrupted: nothing was saved: {'' if previous else said}" in stderr, stderr
    assert said in stderr and str(dest) in stderr, stderr
    assert sorted(p.name for p in store.iterdir()) == (["ckpt"] if previous else [])
    if previous:
        assert dest.read_bytes() == b"the previous checkpoint"


def test_what_an_interrupted_push_left_is_said_from_the_versions_before_and_after():
    """Proves: the message of an interrupted push follows what the object was before and is
    after: unchanged (nothing saved), a new version (it had committed), and unknown where the
    store gives no version or could not be asked."""
    from flyte_checkpoint.cli import interrupted_push
    from flyte_checkpoint.errors import TransientError

    uri = "s3://b/k"
    assert interrupted_push(uri, None, None) == "nothing was saved: there is still no checkpoint at s3://b/k"
    assert interrupted_push(uri, (5, "v1"), (5, "v1")).endswith("holds the checkpoint it held before")
    assert interrupted_push(uri, (5, "v1"), (9, "v2")).startswith("the push had committed")
    assert interrupted_push(uri, None, (9, "v2")).startswith("the push had committed")
    assert interrupted_push(uri, (5, None), (5, None)).startswith("whether the push committed is unknown")
    assert interrupted_push(uri, (5, "v1"), None).startswith("whether the push committed is unknown")
    failed = interrupted_push(uri, None, TransientError("the service is busy"))
    assert failed.startswith("whether the push committed is unknown (the service is busy)"), failed


@pytest.mark.parametrize("where", ["file", "memory"])
def test_pull_of_a_prefix_names_a_few_checkpoints_under_it(tmp_path, where, capsys):
    """Proves (issue 35): pull of a folder or prefix holding checkpoints exits 3 naming a few of
    them and one to pull (it said 'is a directory' locally and 'there is no object there' on a
    cloud store, naming none); the library's own files under it are not named; a text prefix
    of a name ('pr' of 'pre/') is no prefix."""
    from flyte_checkpoint.cli import EXIT_NO_CHECKPOINT, main

    root = str(tmp_path / "store") if where == "file" else f"memory://{uuid.uuid4().hex}"
    for name in ("pre/a/one", "pre/b", "pre/c", "pre/d"):
        fc.Checkpoint(f"{root}/{name}").save_sync(b"state")
    fc.Checkpoint(f"{root}/pre/.train.lock").save_sync(b"x")  # a named run's lock: not named
    out = tmp_path / "out"
    assert main(["pull", f"{root}/pre", str(out)]) == EXIT_NO_CHECKPOINT
    err = capsys.readouterr().err
    assert f"no checkpoint at {root}/pre: it is a prefix, not an object" in err, err
    assert "(a/one, b, c and more): pull one of them, as " + f"{root}/pre/a/one" in err, err
    assert ".train.lock" not in err and not out.exists()
    assert main(["pull", f"{root}/pr", str(out)]) == EXIT_NO_CHECKPOINT
    assert "there is no object there" in capsys.readouterr().err


def test_pull_into_a_dangling_link_and_push_under_an_object_say_what_is_in_the_way(tmp_path, capsys):
    """Proves (issue 35): pull into DIR that is a link leading nowhere names the link and its
    target (it printed '[Errno 20] Not a directory' naming the library's staging folder); a push
    to store/ckpt/x where store/ckpt is an object names ckpt as the file in the way (it said
    'File exists' of store/ckpt/x)."""
    from flyte_checkpoint.cli import EXIT_ERROR, main

    (tmp_path / "f").write_bytes(b"state")
    store = tmp_path / "store"
    assert main(["push", str(tmp_path / "f"), str(store / "ckpt")]) == 0
    link = tmp_path / "dl"
    link.symlink_to(tmp_path / "nowhere")
    capsys.readouterr()
    assert main(["pull", str(store / "ckpt"), str(link)]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert f"{link} is a link to {tmp_path / 'nowhere'}, which does not exist" in err, err
    assert "Errno" not in err and not (tmp_path / "nowhere").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".fcp-")] == []
    for target in ("x", "x/y/z"):
        assert main(["push", str(tmp_path / "f"), str(store / "ckpt" / target)]) == EXIT_ERROR
        err = capsys.readouterr().err
        assert f"{store / 'ckpt'} is a file (an object), not a folder: choose another URI" in err, err
    assert (store / "ckpt").is_file()
