"""The consumer recipe of docs/pinning.md ("The release image"), run exactly as written from an
empty temporary folder: the image's sha256 check and buf from PyPI, then TypeScript stubs
(protoc-gen-es from npm, tsc --strict; protoc --descriptor_set_in) and Go stubs (Debian's
google.golang.org/protobuf, GOPROXY=off), against this clone (no tag used). The versions it pins
are the ones this repository pins."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PINNING = (REPO_ROOT / "docs/pinning.md").read_text()
GO_PROTOBUF = Path("/usr/share/gocode/src/google.golang.org/protobuf")


def recipe(name: str) -> str:
    """The ``sh`` block right after ``<!-- recipe: NAME -->``."""
    match = re.search(rf"<!-- recipe: {name} -->\n```sh\n(.*?)\n```\n", PINNING, re.DOTALL)
    assert match is not None, f"no recipe {name} in docs/pinning.md"
    return match.group(1)


def _run(script: str, folder: Path) -> None:
    env = {**os.environ, "PROTOCOL_PY": str(REPO_ROOT)}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, f"{script}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"


def test_the_recipe_pins_what_this_repository_pins() -> None:
    lock = json.loads((REPO_ROOT / "interop/ts/package-lock.json").read_text())["packages"]
    for package in ("@bufbuild/protoc-gen-es", "@bufbuild/protobuf", "typescript"):
        version = lock[f"node_modules/{package}"]["version"]
        assert f"{package}@{version}" in recipe("typescript")
    buf_pin = re.search(r'"buf-bin==([0-9.]+)"', (REPO_ROOT / "pyproject.toml").read_text())
    assert buf_pin is not None and f"buf-bin=={buf_pin.group(1)}" in recipe("buf")
    releases = json.loads((REPO_ROOT / "proto-baseline/RELEASES.json").read_text())["releases"]
    sha = next(e["sha256"] for e in releases if e["version"] == "1.1.0")
    assert f"{sha}  $PROTOCOL_PY/proto-baseline/protocol-1.1.binpb" in recipe("buf")


def test_the_typescript_and_go_recipes_run_verbatim_from_an_empty_folder(tmp_path: Path) -> None:
    has_ts = all(shutil.which(tool) for tool in ("node", "npm", "protoc"))
    has_go = all(shutil.which(tool) for tool in ("go", "protoc-gen-go")) and GO_PROTOBUF.is_dir()
    if not (has_ts or has_go):
        pytest.skip("neither node/npm/protoc nor go/protoc-gen-go/golang-google-protobuf-dev here")
    _run(recipe("buf"), tmp_path)
    if has_ts:
        _run(recipe("typescript"), tmp_path)
        assert (tmp_path / "gen-ts/model/v1/service_pb.ts").is_file()
        assert (tmp_path / "gen-protoc/model/v1/types_pb.ts").is_file()
    if has_go:
        _run(recipe("go"), tmp_path)
        generated = tmp_path / "gen/model/v1/types.pb.go"
        assert "package modelv1" in generated.read_text()
    if not (has_ts and has_go):
        pytest.skip(f"ran only {'TypeScript' if has_ts else 'Go'}: the other toolchain is absent")
