"""The protocol version (docs/decisions.md#d1) is written once per proto file header and once in
Python."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import protocol_py
from protocol_py.version import PACKAGE_VERSION, PROTOCOL_MAJOR, PROTOCOL_VERSION

REPO_ROOT = Path(__file__).resolve().parents[2]
HEADER = re.compile(r"^// Protocol version: (\d+\.\d+)$")


def proto_files() -> list[Path]:
    return sorted((REPO_ROOT / "proto").rglob("*.proto"))


def test_every_proto_header_states_the_python_protocol_version() -> None:
    files = proto_files()
    assert len(files) >= 4
    for path in files:
        lines = path.read_text(encoding="utf-8").splitlines()
        match = HEADER.match(lines[0])
        assert match, f"{path}: first line must be '// Protocol version: X.Y'"
        assert match[1] == PROTOCOL_VERSION, path
        others = [line for line in lines[1:] if "Protocol version:" in line]
        assert others == [], f"{path}: the version is written once"


def test_version_constants_agree() -> None:
    assert protocol_py.PROTOCOL_VERSION == PROTOCOL_VERSION
    assert re.fullmatch(r"\d+\.\d+", PROTOCOL_VERSION)
    assert int(PROTOCOL_VERSION.split(".")[0]) == PROTOCOL_MAJOR
    # The package's semver major follows the protocol major it carries.
    assert int(PACKAGE_VERSION.split(".")[0]) == PROTOCOL_MAJOR
    # Package X.Y.Z carries protocol X.Y (tools/release sets both from X.Y.Z).
    assert PACKAGE_VERSION.rsplit(".", 1)[0] == PROTOCOL_VERSION


def test_package_version_matches_pyproject_and_installed_metadata() -> None:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["version"] == PACKAGE_VERSION
    assert metadata.version("protocol-py") == PACKAGE_VERSION


def test_breaking_baseline_is_a_release_of_this_major() -> None:
    versions = []
    for path in (REPO_ROOT / "proto-baseline").glob("protocol-*.binpb"):
        match = re.fullmatch(r"protocol-(\d+)\.(\d+)\.binpb", path.name)
        assert match, path.name
        versions.append((int(match[1]), int(match[2])))
    assert versions, "tools/check needs a committed release image"
    newest = max(versions)
    current = tuple(int(part) for part in PROTOCOL_VERSION.split("."))
    assert newest[0] == PROTOCOL_MAJOR
    assert newest <= current
