"""tools/release and the multi-baseline ``buf breaking`` step of tools/check, exercised on
scratch copies of the repository (the working tree is never touched)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from protocol_py.version import PACKAGE_VERSION

from ..schema.test_tools import copy_repo as copy_tree
from ..schema.test_tools import run_tool

REPO_ROOT = Path(__file__).resolve().parents[2]
COPIED = (
    "proto",
    "gen",
    "buf.yaml",
    "buf.gen.yaml",
    "proto-baseline",
    "tools",
    "src",
    "pyproject.toml",
    "README.md",
    "CHANGELOG.md",
)
BUF = str(Path(sys.executable).parent / "buf")
RECORDED = json.loads((REPO_ROOT / "proto-baseline/RELEASES.json").read_text())["releases"]
CHECK_FAILS = 'import sys\nprint("stub check: failing")\nsys.exit(1)\n'
CHECK_PASSES = 'print("stub check: passing")\n'
MAJOR, MINOR, _PATCH = (int(part) for part in PACKAGE_VERSION.split("."))
CURRENT = PACKAGE_VERSION
PROTOCOL = f"{MAJOR}.{MINOR}"
NEXT = f"{MAJOR}.{MINOR + 1}.0"  # the next minor release, made in scratch copies
NEXT_PROTOCOL = f"{MAJOR}.{MINOR + 1}"
PATCH = f"{MAJOR}.{MINOR}.1"  # a patch release of the current protocol
NEWEST_RELEASE = re.compile(r"^## \[\d", re.MULTILINE)


def copy_repo(dest: Path) -> Path:
    return copy_tree(dest, COPIED)


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A committed scratch copy whose CHANGELOG has a section for the next minor (NEXT)."""
    copy = copy_repo(tmp_path / "repo")
    changelog = copy / "CHANGELOG.md"
    text = changelog.read_text()
    newest = NEWEST_RELEASE.search(text)
    assert newest is not None
    section = f"## [{NEXT}]\n\n### Added\n\n- x\n\n"
    changelog.write_text(text[: newest.start()] + section + text[newest.start() :])
    git(copy, "init", "-q")
    git(copy, "add", "-A")
    git(copy, "commit", "-q", "-m", "scratch")
    return copy


def stub_check(repo: Path, body: str) -> None:
    """Replace tools/check.py by a stub with a fixed outcome and commit it (isolates release's
    handling of the check's exit status from the check's own cost)."""
    (repo / "tools" / "check.py").write_text(body)
    git(repo, "commit", "-q", "-am", "stub check")


def versions(repo: Path) -> tuple[str, str, str, set[str]]:
    version_py = (repo / "src/protocol_py/version.py").read_text()
    protocol = re.search(r'^PROTOCOL_VERSION: Final = "(.*)"$', version_py, re.M)
    package = re.search(r'^PACKAGE_VERSION: Final = "(.*)"$', version_py, re.M)
    pyproject = re.search(r'^version = "(.*)"$', (repo / "pyproject.toml").read_text(), re.M)
    assert protocol and package and pyproject
    headers = {p.read_text().splitlines()[0] for p in sorted((repo / "proto").rglob("*.proto"))}
    return protocol[1], package[1], pyproject[1], headers


# -- buf breaking against every baseline of the major ------------------------------------------


def test_breaking_checks_every_release_image_of_the_newest_major(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path / "repo")
    proto = repo / "proto/model/v1/types.proto"
    text = proto.read_text()
    field = "  optional string vendor_reason = 4;\n"
    assert text.count(field) == 1
    proto.write_text(text.replace(field, "  reserved 4;\n"))
    # A 1.1 image that already lacked the field: the edit passes against it, not against 1.0.
    subprocess.run([BUF, "build", "-o", "proto-baseline/protocol-1.1.binpb"], cwd=repo, check=True)
    result = run_tool(repo, "check", "--step", "breaking")
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "--against proto-baseline/protocol-1.1.binpb" in out
    assert "--against proto-baseline/protocol-1.0.binpb" in out
    assert "error: breaking change against proto-baseline/protocol-1.0.binpb" in out
    assert "error: breaking change against proto-baseline/protocol-1.1.binpb" not in out


def test_breaking_ignores_images_of_an_older_major(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path / "repo")
    (repo / "proto-baseline/protocol-0.9.binpb").write_bytes(b"not an image")
    result = run_tool(repo, "check", "--step", "breaking")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "protocol-0.9" not in result.stdout
    assert "--against proto-baseline/protocol-1.0.binpb" in result.stdout


# -- tools/release refusals ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("1.2", "is not X.Y.Z"),
        ("01.2.0", "is not X.Y.Z"),
        ("1.0.9", f"is below the current version {CURRENT}"),
        ("0.9.0", f"is below the current version {CURRENT}"),
        (f"{MAJOR}.{MINOR + 2}.0", f"CHANGELOG.md has no '## [{MAJOR}.{MINOR + 2}.0]' section"),
    ],
)
def test_release_refuses_a_bad_version_or_missing_changelog(
    repo: Path, version: str, message: str
) -> None:
    before = versions(repo)
    result = run_tool(repo, "release", version)
    assert result.returncode == 1
    assert message in result.stderr
    assert versions(repo) == before


def test_release_refuses_a_dirty_tree_before_running_the_check(repo: Path) -> None:
    stub_check(repo, CHECK_FAILS)
    (repo / "stray.txt").write_text("x")
    before = versions(repo)
    result = run_tool(repo, "release", NEXT)
    assert result.returncode == 1
    assert "the working tree is not clean" in result.stderr and "stray.txt" in result.stderr
    assert "stub check" not in result.stdout
    assert versions(repo) == before


def test_release_refuses_when_tools_check_fails_and_changes_nothing(repo: Path) -> None:
    stub_check(repo, CHECK_FAILS)
    result = run_tool(repo, "release", NEXT)
    assert result.returncode == 1
    assert "stub check: failing" in result.stdout
    assert "tools/check failed, nothing was changed" in result.stderr
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, check=True
    )
    assert status.stdout == ""


# -- tools/release end to end -----------------------------------------------------------------


def test_release_sets_versions_regenerates_writes_baseline_builds_and_prints_tag(
    repo: Path,
) -> None:
    stub_check(repo, CHECK_PASSES)
    result = run_tool(repo, "release", NEXT)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "stub check: passing" in result.stdout  # the check ran before any change
    assert versions(repo) == (NEXT_PROTOCOL, NEXT, NEXT, {f"// Protocol version: {NEXT_PROTOCOL}"})
    baseline = repo / f"proto-baseline/protocol-{NEXT_PROTOCOL}.binpb"
    # The image is the fresh build of the released protos (the same bytes tools/generate writes).
    assert baseline.read_bytes() == (repo / "gen/descriptor/protocol.binpb").read_bytes()
    assert f"Protocol version: {NEXT_PROTOCOL}".encode() in baseline.read_bytes()
    # Recorded for pinning without tags: its commit is the one that will add the entry.
    recorded = json.loads((repo / "proto-baseline/RELEASES.json").read_text())["releases"]
    assert recorded[-1] == {
        "version": NEXT,
        "protocol": NEXT_PROTOCOL,
        "commit": None,
        "image": f"proto-baseline/protocol-{NEXT_PROTOCOL}.binpb",
        "sha256": hashlib.sha256(baseline.read_bytes()).hexdigest(),
    }
    assert [e["version"] for e in recorded[:-1]] == [e["version"] for e in RECORDED]
    stub = (repo / "gen/python/protocol_py_gen/model/v1/__init__.py").read_text()
    assert "PAUSE_TURN" in stub
    dist = sorted(p.name for p in (repo / "dist").iterdir())
    assert dist == [f"protocol_py-{NEXT}-py3-none-any.whl", f"protocol_py-{NEXT}.tar.gz"]
    tag = f'git tag -a v{NEXT} -m "protocol-py {NEXT} (protocol {NEXT_PROTOCOL})"'
    assert tag in result.stdout
    assert f"git push origin HEAD v{NEXT}" in result.stdout
    # The new image joins the (real) breaking check, with every older one of the major.
    shutil.copy2(REPO_ROOT / "tools" / "check.py", repo / "tools" / "check.py")
    check = run_tool(repo, "check", "--step", "breaking")
    assert check.returncode == 0, check.stdout + check.stderr
    images = sorted(p.name for p in (repo / "proto-baseline").glob("protocol-*.binpb"))
    assert f"protocol-{NEXT_PROTOCOL}.binpb" in images and "protocol-1.0.binpb" in images
    for image in images:
        assert f"--against proto-baseline/{image}" in check.stdout


def _patch_repo(repo: Path) -> None:
    """Prepare a PATCH release: CHANGELOG section and the current protocol's image of these
    protos."""
    stub_check(repo, CHECK_PASSES)
    changelog = repo / "CHANGELOG.md"
    changelog.write_text(changelog.read_text().replace(f"## [{NEXT}]", f"## [{PATCH}]"))
    image = repo / f"proto-baseline/protocol-{PROTOCOL}.binpb"
    if not image.exists():
        subprocess.run([BUF, "build", "-o", str(image)], cwd=repo, check=True)


def test_patch_release_keeps_the_matching_baseline(repo: Path) -> None:
    _patch_repo(repo)
    image = repo / f"proto-baseline/protocol-{PROTOCOL}.binpb"
    before = image.read_bytes()
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", PATCH)
    result = run_tool(repo, "release", PATCH)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        f"proto-baseline/protocol-{PROTOCOL}.binpb exists and matches the protos" in result.stdout
    )
    assert image.read_bytes() == before
    assert versions(repo) == (PROTOCOL, PATCH, PATCH, {f"// Protocol version: {PROTOCOL}"})


def test_patch_release_refuses_changed_protos(repo: Path) -> None:
    _patch_repo(repo)
    proto = repo / "proto/model/v1/types.proto"
    proto.write_text(
        proto.read_text().replace("// Stop ends a successful stream.", "// Stop ends.")
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"{PATCH} with a proto edit")
    result = run_tool(repo, "release", PATCH)
    assert result.returncode == 1
    assert f"protocol-{PROTOCOL}.binpb exists and differs from the protos" in result.stderr
    assert "a change to the protos needs a new minor version" in result.stderr
