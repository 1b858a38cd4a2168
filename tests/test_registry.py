"""Scheme resolution, plugins through the hook, clashes, and the error messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import (
    BackendLoadError,
    BackendNotInstalledError,
    ConfigurationError,
    UnknownSchemeError,
)
from flyte_checkpoint.storage.hookspecs import hookimpl
from flyte_checkpoint.storage.registry import Registry, StoreSpec, get_registry, install_hint
from flyte_checkpoint.storage.stores.memory import MemoryStore
from flyte_checkpoint.util.install import install_command


@pytest.fixture
def reg() -> Registry:
    return Registry(autoload=False)


def plugin(*specs: StoreSpec) -> types.SimpleNamespace:
    @hookimpl
    def register_stores(register):
        for s in specs:
            register(s)

    return types.SimpleNamespace(register_stores=register_stores)


class Fake(MemoryStore):
    pass


class Other(MemoryStore):
    pass


def test_builtins_resolve(reg):
    assert reg.backend_for("/tmp/x").name == "file"
    assert reg.backend_for("file:///tmp/x").name == "file"
    assert reg.backend_for("memory://a/b").name == "memory"
    assert {b.source for b in reg.backends()} == {"builtin"}


@pytest.mark.parametrize(
    ("scheme", "extra"),
    [
        ("s3", "s3"),
        ("s3a", "s3"),
        ("gs", "gcs"),
        ("gcs", "gcs"),
        ("abfs", "azure"),
        ("abfss", "azure"),
        ("az", "azure"),
    ],
)
def test_known_scheme_without_plugin_says_exactly_what_to_install(reg, scheme, extra):
    with pytest.raises(BackendNotInstalledError) as info:
        reg.store_for(f"{scheme}://bucket/key")
    msg = str(info.value)
    assert f"Install it with: {install_command(extra)} (installed" in msg
    assert f"{scheme}://bucket/key" in msg
    assert "file (file://)" in msg and "memory (memory://)" in msg
    assert isinstance(info.value, ImportError) and isinstance(info.value, ValueError)


def test_unknown_scheme_names_installed_backends(reg):
    with pytest.raises(UnknownSchemeError) as info:
        reg.store_for("weird://x/y")
    msg = str(info.value)
    assert "no backend serves the 'weird' scheme of weird://x/y" in msg
    assert "Installed backends: file (file://), memory (memory://)" in msg
    assert "register_store" in msg
    assert not isinstance(info.value, BackendNotInstalledError)


def test_error_message_hides_credentials(reg):
    with pytest.raises(UnknownSchemeError) as info:
        reg.store_for("weird://user:hunter2@host/key?sig=SECRETSIG&sv=1")
    assert "hunter2" not in str(info.value) and "SECRETSIG" not in str(info.value)


def test_install_hint():
    assert install_hint("S3") == install_command("s3")
    assert install_hint("ftp") is None


ROOT = Path(__file__).resolve().parent.parent


def test_install_command_is_the_plugin_folder_from_a_checkout_and_the_extra_from_another_url(tmp_path):
    """Proves: installed from a checkout (pip records the folder) the hint is that checkout's
    plugin folder, with -e when the core is editable, as the extra names a distribution no index
    holds; installed from a URL that is no checkout and no local wheel, it is the extra."""
    checkout = json.dumps({"url": ROOT.as_uri(), "dir_info": {"editable": True}})
    assert install_command("s3", direct_url=checkout) == f"pip install -e {ROOT}/plugins/s3"
    plain = json.dumps({"url": ROOT.as_uri(), "dir_info": {}})
    assert install_command("azure", direct_url=plain) == f"pip install {ROOT}/plugins/azure"
    spaced = tmp_path / "my clone"
    (spaced / "plugins" / "gcs").mkdir(parents=True)
    (spaced / "plugins" / "gcs" / "pyproject.toml").write_text("")
    spaced_url = json.dumps({"url": spaced.as_uri(), "dir_info": {}})
    assert install_command("gcs", direct_url=spaced_url) == f"pip install '{spaced}/plugins/gcs'"
    for other in (
        json.dumps({"url": "https://example.com/x.whl", "archive_info": {}}),
        json.dumps({"url": tmp_path.as_uri(), "dir_info": {}}),  # a folder that is no checkout
    ):
        assert install_command("s3", direct_url=other, read=False) == "pip install 'flyte-checkpoint[s3]'"


def test_install_command_from_a_wheel_file_names_its_folder_with_find_links(tmp_path):
    """Proves: installed from a wheel file (``pip install dist/flyte_checkpoint-....whl``: pip
    records its file URL), the hint is ``pip install --find-links FOLDER 'flyte-checkpoint[gcs]'``
    (the extra alone fails where no index holds the plugin), with an odd folder name quoted."""
    wheels = tmp_path / "my wheels"
    wheels.mkdir()
    record = json.dumps(
        {"url": (wheels / "flyte_checkpoint-1.0-py3-none-any.whl").as_uri(), "archive_info": {}}
    )
    assert (
        install_command("gcs", direct_url=record)
        == f"pip install --find-links '{wheels}' 'flyte-checkpoint[gcs]'"
    )
    plain = tmp_path / "dist"
    record = json.dumps(
        {"url": (plain / "flyte_checkpoint-1.0-py3-none-any.whl").as_uri(), "archive_info": {"hashes": {}}}
    )
    assert (
        install_command("s3", direct_url=record) == f"pip install --find-links {plain} 'flyte-checkpoint[s3]'"
    )


def test_install_command_without_a_record_gives_the_extra_and_its_find_links_form():
    """Proves: installed from an index or with ``--find-links DIR`` (pip records no URL, so
    the two cannot be told apart), the hint is the extra, then the ``--find-links`` command that
    works for a folder of wheels (the quick start's way)."""
    for none in (None, "", "not json", "[]"):
        assert install_command("gcs", direct_url=none, read=False) == (
            "pip install 'flyte-checkpoint[gcs]' (installed from a folder of wheels:"
            " pip install --find-links DIR 'flyte-checkpoint[gcs]', DIR that folder)"
        )


def test_this_test_environment_gets_the_checkout_hint():
    """``make setup`` installs the core editable from this checkout: its hint is the plugin folder."""
    assert install_command("s3") == f"pip install -e {ROOT}/plugins/s3"


@pytest.fixture(scope="module")
def core_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of this checkout's core, alone in a folder with a space in its name."""
    folder = tmp_path_factory.mktemp("wheels") / "my wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(folder),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = folder.glob("flyte_checkpoint-*.whl")
    return wheel


def hint_when_installed(target: Path, *pip_args: str) -> str:
    """The message of a gs:// URI with no backend, from the core as ``pip install --target
    TARGET PIP_ARGS`` installs it (imported from there: its own install record)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            *pip_args,
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    code = (
        "import flyte_checkpoint as fc, flyte_checkpoint.util.install as i\n"
        f"assert i.__file__.startswith({str(target)!r}), i.__file__\n"
        "from flyte_checkpoint.storage.registry import Registry\n"
        "try:\n    Registry(autoload=False).store_for('gs://b/k')\n"
        "except fc.errors.BackendNotInstalledError as e:\n    print(e)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    # run from elsewhere: ``python -c`` puts the working folder (this checkout) first on sys.path
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=target, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.slow
def test_the_missing_backend_hint_of_a_core_installed_from_a_wheel_works_for_that_install(
    core_wheel, tmp_path
):
    """Proves, with the core really installed: from its wheel file, the hint is ``pip install
    --find-links FOLDER 'flyte-checkpoint[gcs]'`` (the folder quoted); with ``--find-links
    FOLDER flyte-checkpoint`` (the quick start's way: pip records nothing) it gives that form too,
    after the extra."""
    folder = core_wheel.parent
    from_file = hint_when_installed(tmp_path / "a", str(core_wheel))
    assert (
        f"Install it with: pip install --find-links '{folder}' 'flyte-checkpoint[gcs]' (installed"
        in from_file
    )
    from_folder = hint_when_installed(tmp_path / "b", "--find-links", str(folder), "flyte-checkpoint")
    assert (
        "Install it with: pip install 'flyte-checkpoint[gcs]' (installed from a folder of wheels:"
        " pip install --find-links DIR 'flyte-checkpoint[gcs]', DIR that folder)"
    ) in from_folder


def test_plugin_object_registers_stores_lazily(reg):
    imported = []

    def factory():
        imported.append(1)
        return Fake()

    reg.register_plugin(plugin(StoreSpec("fake", ("fake",), factory, "a fake")), name="fakeplugin")
    backend = reg.backend_for("fake://b/k")
    assert (backend.name, backend.source, backend.plugin) == ("fake", "plugin", "fakeplugin")
    assert imported == []  # listing and resolving build nothing
    store = reg.store_for("fake://b/k")
    assert isinstance(store, Fake) and reg.store_for("fake://x") is store and imported == [1]
    reg.unregister_plugin("fakeplugin")
    with pytest.raises(UnknownSchemeError):
        reg.store_for("fake://b/k")


def test_dotted_factory_is_imported_on_first_use(reg):
    reg.register(StoreSpec("dotted", ("dotted",), "flyte_checkpoint.storage.stores.memory:MemoryStore"))
    assert isinstance(reg.store_for("dotted://a"), MemoryStore)


def test_factory_that_fails_to_import_names_the_backend(reg):
    reg.register_plugin(plugin(StoreSpec("s3x", ("s3",), "no_such_module_xyz:Store")), name="brokenplug")
    with pytest.raises(BackendLoadError) as info:
        reg.store_for("s3://b/k")
    msg = str(info.value)
    assert "'s3x' backend (plugin 'brokenplug')" in msg and "no_such_module_xyz" in msg
    assert f"Reinstall it with: {install_command('s3')}" in msg


def test_factory_with_bad_configuration_says_so_not_reinstall(reg):
    def factory():
        raise ValueError("FLYTE_CHECKPOINT_S3_PART_SIZE='abc' is not a size")

    reg.register_plugin(plugin(StoreSpec("s3y", ("s3",), factory)), name="cfgplug")
    with pytest.raises(BackendLoadError) as info:
        reg.store_for("s3://b/k")
    msg = str(info.value)
    assert "'s3y' backend (plugin 'cfgplug') could not be set up: ValueError:" in msg
    assert "Check the backend's configuration" in msg and "pip install" not in msg


def test_factory_configuration_error_passes_through_unwrapped(reg):
    """A ConfigurationError already names the setting, its source and the fix: wrapping it in
    BackendLoadError ("could not be set up ... see its README") would only bury that."""
    raised = ConfigurationError("FLYTE_CHECKPOINT_S3_PART_SIZE='8 megs' is not a size: give bytes")

    def factory():
        raise raised

    reg.register_plugin(plugin(StoreSpec("s3z", ("s3",), factory)), name="cfgplug")
    with pytest.raises(ConfigurationError) as info:
        reg.store_for("s3://b/k")
    assert info.value is raised and not isinstance(info.value, BackendLoadError)


def test_factory_must_return_a_blobstore(reg):
    reg.register(StoreSpec("bad", ("bad",), lambda: object()))
    with pytest.raises(BackendLoadError, match="not a BlobStore"):
        reg.store_for("bad://x")


def test_runtime_registration_beats_plugins_and_builtins(reg):
    reg.register_plugin(plugin(StoreSpec("p", ("memory",), Fake, priority=100)), name="p")
    assert reg.backend_for("memory://x").name == "p"  # a plugin beats a built-in
    reg.register(StoreSpec("rt", ("memory",), Other))
    assert reg.backend_for("memory://x").name == "rt"
    reg.unregister("rt")
    assert reg.backend_for("memory://x").name == "p"


def test_the_level_decides_before_the_priority(reg):
    """A plugin beats a built-in and a runtime registration beats a plugin, even with a lower
    priority: priority only orders claims of one level."""
    reg.register_plugin(plugin(StoreSpec("low-plugin", ("memory",), Fake, priority=-5)), name="lp")
    assert reg.backend_for("memory://x").name == "low-plugin"
    reg.register_plugin(plugin(StoreSpec("high-plugin", ("rt",), Fake, priority=100)), name="hp")
    reg.register(StoreSpec("low-runtime", ("rt",), Other, priority=-5))
    assert reg.backend_for("rt://x").name == "low-runtime"


def test_higher_priority_wins_between_plugins(reg):
    reg.register_plugin(plugin(StoreSpec("low", ("dup",), Fake, priority=1)), name="a")
    reg.register_plugin(plugin(StoreSpec("high", ("dup",), Other, priority=5)), name="b")
    assert reg.backend_for("dup://x").name == "high"


def test_equal_priority_clash_resolves_by_name_with_a_warning(reg):
    reg.register_plugin(plugin(StoreSpec("zeta", ("dup",), Fake)), name="pz")
    reg.register_plugin(plugin(StoreSpec("alpha", ("dup",), Other)), name="pa")
    with pytest.warns(RuntimeWarning, match=r"'alpha' \(plugin 'pa'\) and 'zeta' \(plugin 'pz'\)"):
        assert reg.backend_for("dup://x").name == "alpha"


@pytest.mark.parametrize("order", [("pz", "pa"), ("pa", "pz")])
def test_duplicate_backend_name_keeps_the_first_plugin_by_name_and_warns(order):
    """Two plugins registering one backend name: the plugin whose name sorts first ('pa') is
    kept, whichever registered first, with a warning naming both."""
    reg = Registry(autoload=False)
    schemes = {"pa": "aye", "pz": "zed"}
    for name in order:
        reg.register_plugin(plugin(StoreSpec("same", (schemes[name],), Fake)), name=name)
    match = r"two plugins register a backend named 'same': 'pa' and 'pz'; the one from 'pz' is ignored"
    with pytest.warns(RuntimeWarning, match=match):
        kept = [b for b in reg.backends() if b.name == "same"]
    assert [(b.plugin, b.schemes) for b in kept] == [("pa", ("aye",))]
    assert reg.backend_for("aye://x").plugin == "pa"
    with pytest.raises(UnknownSchemeError):
        reg.backend_for("zed://x")


def test_a_plugin_backend_named_like_a_builtin_replaces_it(reg):
    reg.register_plugin(plugin(StoreSpec("memory", ("memory", "mem2"), Fake)), name="zzz-memory")
    # The rule of CONTRIBUTING.md ("a plugin's backend named like a built-in replaces it"),
    # said as such: not "the first plugin by name is kept", which is another rule.
    match = (
        r"the plugin 'zzz-memory' registers a backend named 'memory', like the built-in one:"
        r" the plugin's replaces"
    )
    with pytest.warns(RuntimeWarning, match=match) as caught:
        memory = [b for b in reg.backends() if b.name == "memory"]
    assert [(b.plugin, b.source) for b in memory] == [("zzz-memory", "plugin")]
    assert not any("first plugin by name" in str(w.message) for w in caught)
    assert isinstance(reg.store_for("memory://x"), Fake)


def test_a_hook_that_raises_is_reported_and_the_rest_still_load(reg):
    @hookimpl
    def register_stores(register):
        raise RuntimeError("plugin bug")

    reg.register_plugin(types.SimpleNamespace(register_stores=register_stores), name="buggy")
    reg.register_plugin(plugin(StoreSpec("good", ("good",), Fake)), name="good")
    with pytest.warns(RuntimeWarning, match="'buggy' failed to load"):
        assert reg.backend_for("good://x").name == "good"
    with pytest.raises(UnknownSchemeError, match="buggy: RuntimeError: plugin bug"):
        reg.store_for("nothing://x")


def test_module_level_register_store():
    fc.register_store("tmpmem", "tmpmem", Fake, "temporary")
    try:
        assert isinstance(get_registry().store_for("tmpmem://x"), Fake)
    finally:
        fc.unregister_store("tmpmem")
    with pytest.raises(UnknownSchemeError):
        get_registry().store_for("tmpmem://x")


ENTRY_POINT_SCRIPT = r"""
import sys, warnings
from importlib import metadata

class EP:
    def __init__(self, name, target):
        self.name, self.target, self.dist = name, target, None
    def load(self):
        LOADS.append(self.name)
        if self.target == "boom":
            raise ImportError("cannot import boom")
        import types
        from flyte_checkpoint.storage.hookspecs import hookimpl
        from flyte_checkpoint.storage.registry import StoreSpec
        @hookimpl
        def register_stores(register):
            register(StoreSpec(self.name, (self.name,), "flyte_checkpoint.storage.stores.memory:MemoryStore"))
        return types.SimpleNamespace(register_stores=register_stores)

LOADS = []
eps = [EP("aaa-broken", "boom"), EP("good", "ok")]
metadata.entry_points = lambda **kw: eps if kw.get("group") == "flyte_checkpoint" else []

from flyte_checkpoint.storage.registry import Registry
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    reg = Registry()
    print(reg.backend_for("good://x").name)
print(any("'aaa-broken' failed to load" in str(w.message) for w in caught))
print([b.name for b in reg.broken_plugins])
print(Registry(autoload=False).backends()[-1].name)
for uri in ("nothing://x", "s3://bucket/key"):
    try:
        reg.store_for(uri)
    except Exception as exc:
        print(type(exc).__name__, exc)
reg.store_for("good://y"); reg.backends(); reg.broken_plugins
print(sorted(LOADS))
"""


def test_entry_points_load_each_on_its_own():
    out = subprocess.run([sys.executable, "-c", ENTRY_POINT_SCRIPT], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[:4] == ["good", "True", "['aaa-broken']", "memory"]
    # "no backend" errors name the plugin that failed to import, and why
    note = "Plugins that failed to load: aaa-broken: ImportError: cannot import boom."
    assert (
        lines[4].startswith("UnknownSchemeError no backend serves the 'nothing' scheme") and note in lines[4]
    )
    assert lines[5].startswith("BackendNotInstalledError no backend for 's3://'") and note in lines[5]
    assert lines[6] == "['aaa-broken', 'good']"  # each entry point loaded once, however often used


def test_disable_autoload_env(monkeypatch):
    monkeypatch.setenv("FLYTE_CHECKPOINT_DISABLE_PLUGIN_AUTOLOAD", "1")
    reg = Registry()
    reg.load_entry_points()
    assert {b.source for b in reg.backends()} == {"builtin"}
    monkeypatch.setenv("FLYTE_CHECKPOINT_DISABLE_PLUGIN_AUTOLOAD", "0")
    assert Registry()._autoload is True


def test_no_warnings_on_the_common_path(reg):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reg.store_for("/tmp/x")
