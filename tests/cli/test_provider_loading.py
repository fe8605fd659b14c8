"""``protocol-py serve --provider``: module:Class, path/to/file.py:Class and installed entry
points (group ``protocol_py.providers``) load third-party providers; every loading failure is
exit 2 with one line naming what was wrong; ``--help`` lists what is available; a vendor
provider started without its API key warns once."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from protocol_py.cli import main
from protocol_py.client.client import ModelClient
from protocol_py.providers import (
    ENTRY_POINT_GROUP,
    ProviderLoadError,
    installed_providers,
    load_provider_class,
)
from protocol_py.providers.reference.provider import ReferenceProvider

from ..support.servers import CONSOLE_SCRIPT, REPO, Subprocess, spawn_server

RECORDING = "tests/cli/recording_provider.py"


def describe_name(address: str) -> str:
    async def run() -> str:
        async with ModelClient.connect(address) as client:
            return (await client.describe(timeout=10)).name

    return asyncio.run(run())


def stop(sub: Subprocess) -> str:
    sub.proc.terminate()
    _, err = sub.proc.communicate(timeout=15)
    assert sub.proc.returncode == 0, err
    return err


def make_distribution(root: Path, name: str = "acme") -> Path:
    """A tiny installed distribution without pip: a module and a dist-info whose
    entry_points.txt registers it under ``protocol_py.providers``."""
    (root / "acme_models.py").write_text(
        textwrap.dedent(
            """
            from protocol_py.providers.reference.provider import ReferenceProvider

            class AcmeProvider(ReferenceProvider):
                name = "acme"
            """
        )
    )
    info = root / "acme_models-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-models\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n{name} = acme_models:AcmeProvider\n"
    )
    return root


def test_file_path_provider_is_served_and_named_in_describe() -> None:
    sub = spawn_server("--provider", f"{REPO / RECORDING}:RecordingProvider")
    try:
        assert describe_name(sub.address) == "recording"
    finally:
        stop(sub)


def test_module_class_provider_loads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    make_distribution(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    cls = load_provider_class("acme_models:AcmeProvider")
    assert cls.name == "acme" and issubclass(cls, ReferenceProvider)
    assert load_provider_class("reference") is ReferenceProvider


def test_entry_point_provider_is_found_listed_in_help_and_served(tmp_path: Path) -> None:
    make_distribution(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    helped = subprocess.run(
        [str(CONSOLE_SCRIPT), "serve", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert helped.returncode == 0
    text = " ".join(helped.stdout.split())
    assert "built-in: reference, openai, deepseek, anthropic" in text
    assert "installed (entry points): acme" in text
    proc = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "serve", "--provider", "acme", "--port", "0", "--handshake"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("1|tcp|127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
        assert describe_name(line.split("|")[2]) == "acme"
    finally:
        proc.terminate()
        proc.communicate(timeout=15)
    assert proc.returncode == 0


def test_entry_point_found_in_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    make_distribution(tmp_path, name="acme-in-process")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed_providers()["acme-in-process"] == "acme_models:AcmeProvider"
    assert load_provider_class("acme-in-process").name == "acme"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            "nope",
            "unknown provider 'nope'; built-in providers: anthropic, deepseek, gemini, openai, "
            "reference, vertex",
        ),
        ("no_such_module_xyz:Thing", "no module named 'no_such_module_xyz'"),
        ("json:NoSuchClass", "'json' has no attribute 'NoSuchClass'"),
        ("json:JSONDecoder", "JSONDecoder is not a protocol_py.Provider subclass"),
        (f"{RECORDING}:NotAProvider", "NotAProvider is not a protocol_py.Provider subclass"),
        ("missing/file.py:X", "provider file 'missing/file.py' not found"),
        (
            f"{RECORDING}:BrokenProvider",
            "constructing BrokenProvider failed: RuntimeError: cannot reach the license server",
        ),
    ],
)
def test_provider_that_cannot_be_loaded_is_a_usage_error_naming_why(
    spec: str, expected: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    assert main(["serve", "--provider", spec, "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("protocol-py serve: "), err
    assert expected in err


def test_load_errors_are_typed() -> None:
    with pytest.raises(ProviderLoadError, match="expected module:Class"):
        load_provider_class("module:")
    with pytest.raises(ProviderLoadError, match="unknown provider"):
        load_provider_class("x" * 1000)


@pytest.mark.parametrize(("provider", "env_var"), [("openai", "OPENAI_API_KEY")])
def test_vendor_provider_without_api_key_warns_once_and_serves(
    provider: str, env_var: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(env_var, raising=False)
    sub = spawn_server("--provider", provider)
    try:
        assert describe_name(sub.address) == provider  # still serving
    finally:
        err = stop(sub)
    warnings = [line for line in err.splitlines() if " WARNING " in line]
    assert len(warnings) == 1, err
    assert env_var in warnings[0] and "no API key" in warnings[0]


def test_vendor_provider_with_api_key_does_not_warn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    sub = spawn_server("--provider", "anthropic")
    try:
        assert describe_name(sub.address) == "anthropic"
    finally:
        err = stop(sub)
    assert "ANTHROPIC_API_KEY" not in err and " WARNING " not in err


def test_serve_help_shows_provider_forms_and_defaults() -> None:
    helped = subprocess.run(
        [sys.executable, "-m", "protocol_py.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    text = " ".join(helped.stdout.split())
    assert "module:Class or path/to/file.py:Class (default: reference)" in text


def test_module_that_is_not_importable_says_sys_path_and_the_file_form(tmp_path: Path) -> None:
    (tmp_path / "slowecho.py").write_text("x = 1\n")
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), "serve", "--provider", "slowecho:SlowEcho"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "protocol-py serve: provider 'slowecho:SlowEcho': no module named 'slowecho': the module "
        "must be importable (on sys.path, e.g. via PYTHONPATH, or installed); for a source file "
        "give path/to/file.py:Class (e.g. ./slowecho.py:SlowEcho)\n"
    )


@pytest.mark.parametrize(
    "spec", ["no_such_module_xyz:Thing", "json:NoSuchClass", "json:dumps", "missing/file.py:X"]
)
def test_provider_load_errors_share_one_prefix(
    spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ProviderLoadError) as info:
        load_provider_class(spec)
    assert str(info.value).startswith((f"provider {spec!r}: ", "provider file "))
    assert main(["serve", "--provider", spec]) == 2
    assert capsys.readouterr().err.startswith("protocol-py serve: provider ")
