"""A test server that is installed but does not start fails its tests, CI or not.

(Not installed: the test skips, which CI=true turns into a failure; see tests/test_ci_guard.py.)
Each server is made to fail for real: the module or executable it runs is replaced by one that
prints a marker and exits, and the failure must carry that output.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.reliability.backends import BackendPool

ROOT_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
MARKER = "fake-server-cannot-start-7f3a"


def broken_python_module(root: Path, package: str, main: str) -> Path:
    """A folder for PYTHONPATH holding ``package`` whose ``main`` module, run with ``-m``,
    prints :data:`MARKER` and exits 3 (imported normally, it does nothing)."""
    pkg = root / "shadow" / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    body = f"import sys\nif __name__ == '__main__':\n    print({MARKER!r}, flush=True)\n    sys.exit(3)\n"
    (pkg / f"{main}.py").write_text(body)
    return root / "shadow"


def broken_executable(root: Path) -> Path:
    script = root / "azurite-blob"
    script.write_text(f"#!/bin/sh\necho {MARKER}\nexit 3\n")
    script.chmod(0o755)
    return script


def run_plugin_fixture(pytester: pytest.Pytester, fixture: str, conftest_module: str, patch: str = ""):
    """Run one test that uses the plugin conftest's ``fixture``, without CI."""
    pytester.makeconftest(
        ROOT_CONFTEST.read_text()
        + f"\n\npytest_plugins = ('pytester', {conftest_module!r})\n"
        + textwrap.dedent(patch)
    )
    pytester.makepyfile(test_uses_server=f"def test_server({fixture}):\n    pass\n")
    return pytester.runpytest_subprocess("-p", "no:cacheprovider")


def assert_start_failed(result: pytest.RunResult, server: str) -> None:
    """The one test errored with the same message in every plugin: the server named, its tries,
    how the last one ended and its output."""
    result.assert_outcomes(errors=1)
    out = result.stdout.str()
    assert f"{server}" in out and "did not start after 3 tries" in out, out
    assert "exited with 3" in out and MARKER in out, out


@pytest.fixture
def no_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)


def test_gcs_emulator_that_does_not_start_fails_its_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, no_ci: None
):
    monkeypatch.setenv(
        "PYTHONPATH", str(broken_python_module(pytester.path, "gcp_storage_emulator", "__main__"))
    )
    result = run_plugin_fixture(pytester, "gcs_server", "flyte_checkpoint_gcs_tests.conftest")
    assert_start_failed(result, "the GCS emulator")


def test_azurite_that_does_not_start_fails_its_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, no_ci: None
):
    script = broken_executable(pytester.path)
    patch = f"""
        import pathlib
        import flyte_checkpoint_azure_tests.server as _server
        _server.LOCAL_EXECUTABLE = pathlib.Path({str(script)!r})
    """
    result = run_plugin_fixture(pytester, "azure_server", "flyte_checkpoint_azure_tests.conftest", patch)
    assert_start_failed(result, "Azurite")


def test_moto_that_does_not_start_fails_its_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, no_ci: None
):
    monkeypatch.setenv("PYTHONPATH", str(broken_python_module(pytester.path, "moto", "server")))
    result = run_plugin_fixture(pytester, "s3_server", "flyte_checkpoint_s3_tests.conftest")
    assert_start_failed(result, "moto's S3 server")


@pytest.mark.parametrize("name", ["s3", "gcs", "azure"])
def test_reliability_backend_that_does_not_start_fails_every_request(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_ci: None
):
    if name == "azure":
        import flyte_checkpoint_azure_tests.server as azure_server

        monkeypatch.setattr(azure_server, "LOCAL_EXECUTABLE", broken_executable(tmp_path))
    else:
        module, main = {"s3": ("moto", "server"), "gcs": ("gcp_storage_emulator", "__main__")}[name]
        monkeypatch.setenv("PYTHONPATH", str(broken_python_module(tmp_path, module, main)))
    pool = BackendPool()
    try:
        for _ in range(2):  # the first request starts the server, the second remembers it failed
            with pytest.raises(pytest.fail.Exception, match=MARKER):
                pool.get(name)
    finally:
        pool.close()
