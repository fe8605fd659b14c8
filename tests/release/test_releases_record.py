"""proto-baseline/RELEASES.json: every release's commit, image and sha256, as the table of
docs/pinning.md shows them; the commits are real (package version and image at that commit);
tools/release records a new release and fills an earlier null commit from git history."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from protocol_py.version import PACKAGE_VERSION

REPO_ROOT = Path(__file__).resolve().parents[2]
RELEASES = json.loads((REPO_ROOT / "proto-baseline/RELEASES.json").read_text())["releases"]


def _release_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("release_tool", REPO_ROOT / "tools/release.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


release_tool = _release_tool()


def _git(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=cwd,
        capture_output=True,
        check=False,
    )


def test_every_release_image_is_recorded_with_its_sha256() -> None:
    images = sorted(p.name for p in (REPO_ROOT / "proto-baseline").glob("protocol-*.binpb"))
    assert sorted(Path(entry["image"]).name for entry in RELEASES) == images
    assert [entry["version"] for entry in RELEASES][-1] == PACKAGE_VERSION
    for entry in RELEASES:
        image = REPO_ROOT / entry["image"]
        assert entry["protocol"] == ".".join(entry["version"].split(".")[:2])
        assert image.name == f"protocol-{entry['protocol']}.binpb"
        assert hashlib.sha256(image.read_bytes()).hexdigest() == entry["sha256"]


def test_the_pinning_table_is_the_record() -> None:
    text = (REPO_ROOT / "docs/pinning.md").read_text()
    begin = text.index(release_tool.TABLE_BEGIN) + len(release_tool.TABLE_BEGIN)
    end = text.index(release_tool.TABLE_END)
    assert text[begin:end] == "\n" + release_tool.releases_table(RELEASES)


@pytest.mark.parametrize("entry", RELEASES, ids=[e["version"] for e in RELEASES])
def test_each_release_commit_holds_that_package_version_and_image(entry: dict[str, str]) -> None:
    commit = entry["commit"]
    assert commit is not None and len(commit) == 40, entry
    if _git("rev-parse", "--is-shallow-repository").stdout.strip() == b"true":
        pytest.skip("a shallow clone lacks the release commits' history")
    assert _git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0, commit
    pyproject = _git("show", f"{commit}:pyproject.toml").stdout.decode()
    assert f'\nversion = "{entry["version"]}"\n' in pyproject
    image = _git("show", f"{commit}:gen/descriptor/protocol.binpb").stdout
    assert hashlib.sha256(image).hexdigest() == entry["sha256"]


def test_record_release_adds_a_null_entry_and_fills_the_earlier_one(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "proto-baseline").mkdir(parents=True)
    (repo / "docs").mkdir()
    (repo / "docs/pinning.md").write_text(
        f"# x\n\n{release_tool.TABLE_BEGIN}\nold\n{release_tool.TABLE_END}\n\nafter\n"
    )
    first = repo / "proto-baseline/protocol-7.0.binpb"
    first.write_bytes(b"image 7.0")
    assert _git("init", "-q", cwd=repo).returncode == 0
    written = release_tool.record_release(repo, "7.0.0", first)
    assert written == [
        {
            "version": "7.0.0",
            "protocol": "7.0",
            "commit": None,
            "image": "proto-baseline/protocol-7.0.binpb",
            "sha256": hashlib.sha256(b"image 7.0").hexdigest(),
        }
    ]
    _git("add", "-A", cwd=repo)
    assert _git("commit", "-q", "-m", "release 7.0.0", cwd=repo).returncode == 0
    head = _git("rev-parse", "HEAD", cwd=repo).stdout.decode().strip()
    second = repo / "proto-baseline/protocol-7.1.binpb"
    shutil.copyfile(first, second)
    written = release_tool.record_release(repo, "7.1.0", second)
    assert [(e["version"], e["commit"]) for e in written] == [("7.0.0", head), ("7.1.0", None)]
    doc = (repo / "docs/pinning.md").read_text()
    assert f"| 7.0.0 | 7.0 | `{head}` |" in doc
    assert "| 7.1.0 | 7.1 | `the commit that adds this row` |" in doc
    assert "old" not in doc and doc.endswith("\n\nafter\n")
