#!/usr/bin/env python3
"""Make a release ``X.Y.Z`` of protocol-py (protocol ``X.Y``) in the working tree.

Steps, in order; the first failure stops the release with a non-zero exit:

1. Refuse a malformed version (``X.Y.Z``, digits only), a version below the current package
   version (the current one itself may be released: a tree prepared at ``X.Y.Z`` whose image
   is not written yet), a CHANGELOG.md without a ``## [X.Y.Z]`` section, a dirty git tree
   (``git status --porcelain`` not empty: tracked changes or untracked files), and a failing
   ``tools/check`` (run in full before anything is changed).
2. Set the version: ``// Protocol version: X.Y`` in the header of every ``.proto`` under
   ``proto/``, ``PROTOCOL_VERSION`` and ``PACKAGE_VERSION`` in ``src/protocol_py/version.py``,
   ``version`` in ``pyproject.toml``.
3. Regenerate (``tools/generate``).
4. Write the release image ``proto-baseline/protocol-X.Y.binpb`` (``buf build``). When it already
   exists (a patch release), it is kept, and it must equal a fresh build: a patch release
   cannot change the protocol.
5. Record the release in ``proto-baseline/RELEASES.json`` (:data:`RELEASES_FILE`): version,
   protocol, image and the image's sha256, with ``"commit": null`` (the release commit is the
   one that adds the entry; it does not exist yet). Earlier entries still null get their
   commit from git history (the first commit whose RELEASES.json names that version). The
   table between ``<!-- releases:begin -->`` and ``<!-- releases:end -->`` in
   ``docs/pinning.md`` is rewritten from the file (:func:`releases_table`). A clone without
   tags pins a release by that commit or that image.
6. Build the wheel and the sdist into ``dist/`` (``python -m build``, the ``build`` package of
   the dev extra; an isolated build environment with hatchling from the package index).
7. Print the commands that commit the release and create its tag ``vX.Y.Z``.

A refusal in step 1 changes nothing; a failure after it leaves the changes made so far in the
working tree (``git checkout -- . && git clean -fd proto-baseline`` undoes them).

Run with the interpreter that has the ``dev`` extra, for example
``.venv/bin/python tools/release 1.1.0``. Exit status: 0 on success, 1 when a step refused or
failed, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
VERSION_RE = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
HEADER_RE = re.compile(r"^// Protocol version: \d+\.\d+$", re.MULTILINE)
PROTOCOL_RE = re.compile(r'^PROTOCOL_VERSION: Final = "[^"]*"$', re.MULTILINE)
PACKAGE_RE = re.compile(r'^PACKAGE_VERSION: Final = "([^"]*)"$', re.MULTILINE)
PYPROJECT_RE = re.compile(r'^version = "[^"]*"$', re.MULTILINE)
VERSION_FILE = Path("src/protocol_py/version.py")
DIST_DIR = Path("dist")
RELEASES_FILE = Path("proto-baseline/RELEASES.json")
"""Every release: version, protocol, commit, image and the image's sha256 (docs/pinning.md)."""
PINNING_DOC = Path("docs/pinning.md")
TABLE_BEGIN = "<!-- releases:begin -->"
TABLE_END = "<!-- releases:end -->"


class ReleaseError(Exception):
    """A release step refused or failed; the message says which and why."""


def tool_env() -> dict[str, str]:
    """The environment for the tools: this interpreter's bin directory first on ``PATH``."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def run(cmd: list[str], cwd: Path) -> None:
    """Run one command, echoing it.

    Raises:
        ReleaseError: it exited non-zero or could not be started.
    """
    print("+ " + " ".join(cmd), flush=True)
    try:
        completed = subprocess.run(cmd, cwd=cwd, env=tool_env(), check=False)
    except FileNotFoundError as exc:
        raise ReleaseError(f"{cmd[0]}: {exc}") from None
    if completed.returncode != 0:
        raise ReleaseError(f"{' '.join(cmd)} exited {completed.returncode}")


def parse_version(text: str) -> tuple[int, int, int]:
    """``X.Y.Z`` as integers.

    Raises:
        ReleaseError: not three dot-separated decimal numbers without leading zeros.
    """
    match = VERSION_RE.match(text)
    if not match:
        raise ReleaseError(f"version {text[:40]!r} is not X.Y.Z (digits, no leading zeros)")
    return int(match[1]), int(match[2]), int(match[3])


def current_package_version(root: Path) -> tuple[int, int, int]:
    """``PACKAGE_VERSION`` of ``src/protocol_py/version.py``.

    Raises:
        ReleaseError: the file holds no such constant.
    """
    match = PACKAGE_RE.search((root / VERSION_FILE).read_text(encoding="utf-8"))
    if not match:
        raise ReleaseError(f"{VERSION_FILE}: no PACKAGE_VERSION constant")
    return parse_version(match[1])


def check_changelog(root: Path, version: str) -> None:
    """Raises ReleaseError when CHANGELOG.md has no ``## [version]`` section."""
    path = root / "CHANGELOG.md"
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    if not re.search(rf"^## \[{re.escape(version)}\]", text, re.MULTILINE):
        raise ReleaseError(f"CHANGELOG.md has no '## [{version}]' section: write it first")


def check_clean_tree(root: Path) -> None:
    """Raises ReleaseError when the git tree has tracked changes or untracked files."""
    try:
        status = subprocess.run(
            ["git", "status", "--porcelain"],
            cwd=root,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ReleaseError(f"git status failed: {exc}") from None
    if status.strip():
        shown = "\n".join(status.splitlines()[:20])
        raise ReleaseError(f"the working tree is not clean; commit or stash first:\n{shown}")


def run_check(root: Path) -> None:
    """Run ``tools/check`` in full; raises ReleaseError when it fails."""
    try:
        run([sys.executable, str(root / "tools" / "check.py")], root)
    except ReleaseError as exc:
        raise ReleaseError(f"tools/check failed, nothing was changed ({exc})") from None


def set_versions(root: Path, version: str) -> list[Path]:
    """Write ``version`` (``X.Y.Z``) and its protocol ``X.Y`` into every place that holds them.

    Returns:
        The files written, relative to ``root``.

    Raises:
        ReleaseError: a file lacks the line to replace (a proto without its header, ...).
    """
    protocol = ".".join(version.split(".")[:2])
    written: list[Path] = []

    def replace(rel: Path, pattern: re.Pattern[str], line: str) -> None:
        path = root / rel
        text = path.read_text(encoding="utf-8")
        new, count = pattern.subn(line, text, count=1)
        if count != 1:
            raise ReleaseError(f"{rel}: no line matching {pattern.pattern!r}")
        path.write_text(new, encoding="utf-8")
        if rel not in written:
            written.append(rel)

    protos = sorted((root / "proto").rglob("*.proto"))
    if not protos:
        raise ReleaseError("proto/ holds no .proto file")
    for proto in protos:
        replace(proto.relative_to(root), HEADER_RE, f"// Protocol version: {protocol}")
    replace(VERSION_FILE, PROTOCOL_RE, f'PROTOCOL_VERSION: Final = "{protocol}"')
    replace(VERSION_FILE, PACKAGE_RE, f'PACKAGE_VERSION: Final = "{version}"')
    replace(Path("pyproject.toml"), PYPROJECT_RE, f'version = "{version}"')
    return written


def write_baseline(root: Path, protocol: str) -> Path:
    """Build ``proto-baseline/protocol-<protocol>.binpb``; keep an existing one that matches.

    Raises:
        ReleaseError: buf failed, or an existing image differs from a fresh build.
    """
    target = root / "proto-baseline" / f"protocol-{protocol}.binpb"
    buf = shutil.which("buf", path=tool_env()["PATH"]) or "buf"
    with tempfile.TemporaryDirectory(prefix="protocol-py-release-") as scratch:
        fresh = Path(scratch) / target.name
        run([buf, "build", "-o", str(fresh)], root)
        if target.exists():
            if target.read_bytes() != fresh.read_bytes():
                raise ReleaseError(
                    f"{target.relative_to(root)} exists and differs from the protos: protocol "
                    f"{protocol} is released already, so a change to the protos needs a new "
                    "minor version"
                )
            print(f"{target.relative_to(root)} exists and matches the protos (patch release)")
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(fresh, target)
            print(f"wrote {target.relative_to(root)}")
    return target


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file's bytes, lowercase hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_releases(root: Path) -> list[dict[str, str | None]]:
    """The entries of :data:`RELEASES_FILE` (none when it does not exist)."""
    path = root / RELEASES_FILE
    if not path.is_file():
        return []
    releases = json.loads(path.read_text(encoding="utf-8"))["releases"]
    return list(releases)


def release_commit(root: Path, version: str) -> str | None:
    """The first commit whose :data:`RELEASES_FILE` names ``version``, or None (not committed
    yet, or no git history)."""
    try:
        found = subprocess.run(
            [
                "git",
                "log",
                "--format=%H",
                "-S",
                f'"version": "{version}"',
                "--",
                str(RELEASES_FILE),
            ],
            cwd=root,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    return found[-1] if found else None


def releases_table(releases: list[dict[str, str | None]]) -> str:
    """The Markdown table of docs/pinning.md: one row per release, oldest first."""
    rows = [
        "| version | protocol | commit | image | sha256 of the image |",
        "|---|---|---|---|---|",
    ]
    for entry in releases:
        commit = entry["commit"] or "the commit that adds this row"
        rows.append(
            f"| {entry['version']} | {entry['protocol']} | `{commit}` | `{entry['image']}` | "
            f"`{entry['sha256']}` |"
        )
    return "\n".join(rows) + "\n"


def write_table(root: Path, releases: list[dict[str, str | None]]) -> None:
    """Rewrite the table between :data:`TABLE_BEGIN` and :data:`TABLE_END` of
    :data:`PINNING_DOC` (skipped when the file does not exist).

    Raises:
        ReleaseError: the file lacks the markers.
    """
    path = root / PINNING_DOC
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8")
    begin, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if begin < 0 or end < begin:
        raise ReleaseError(f"{PINNING_DOC}: no {TABLE_BEGIN} ... {TABLE_END} block")
    table = releases_table(releases)
    path.write_text(text[: begin + len(TABLE_BEGIN)] + "\n" + table + text[end:], encoding="utf-8")


def record_release(root: Path, version: str, image: Path) -> list[dict[str, str | None]]:
    """Step 5: add (or refresh) ``version``'s entry in :data:`RELEASES_FILE` with ``commit``
    null, fill the null commits of earlier entries from git, rewrite the docs table.

    Returns:
        The entries written.
    """
    protocol = ".".join(version.split(".")[:2])
    releases = [entry for entry in read_releases(root) if entry["version"] != version]
    for entry in releases:
        if entry["commit"] is None:
            entry["commit"] = release_commit(root, str(entry["version"]))
    releases.append(
        {
            "version": version,
            "protocol": protocol,
            "commit": None,
            "image": image.relative_to(root).as_posix(),
            "sha256": sha256_of(image),
        }
    )
    releases.sort(key=lambda entry: parse_version(str(entry["version"])))
    path = root / RELEASES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"releases": releases}, indent=2) + "\n", encoding="utf-8")
    print(f"recorded {version} in {RELEASES_FILE}")
    write_table(root, releases)
    return releases


def build_dists(root: Path, out_dir: Path) -> list[Path]:
    """Build the sdist and the wheel into ``out_dir`` (``python -m build``).

    Returns:
        The built files, sorted.

    Raises:
        ReleaseError: the build failed.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    before = set(out_dir.iterdir())
    run([sys.executable, "-m", "build", "--outdir", str(out_dir), str(root)], root)
    return sorted(set(out_dir.iterdir()) - before)


def release(root: Path, version: str, *, check: bool = True) -> list[Path]:
    """Steps 1-6 of the module docstring; returns the built distribution files.

    ``check=False`` skips only the ``tools/check`` run of step 1 (for tests of the other steps).

    Raises:
        ReleaseError: a step refused or failed.
    """
    wanted = parse_version(version)
    current = current_package_version(root)
    if wanted < current:
        shown = ".".join(map(str, current))
        raise ReleaseError(f"version {version} is below the current version {shown}")
    check_changelog(root, version)
    check_clean_tree(root)
    if check:
        run_check(root)
    for rel in set_versions(root, version):
        print(f"set {version} in {rel}")
    run([sys.executable, str(root / "tools" / "generate.py")], root)
    image = write_baseline(root, ".".join(version.split(".")[:2]))
    record_release(root, version, image)
    return build_dists(root, root / DIST_DIR)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("version", help="the release version, X.Y.Z (protocol X.Y)")
    args = parser.parse_args(argv)
    version: str = args.version
    try:
        built = release(REPO_ROOT, version)
    except ReleaseError as exc:
        print(f"tools/release: refused: {exc}", file=sys.stderr)
        return 1
    for path in built:
        print(f"built {path.relative_to(REPO_ROOT)}")
    protocol = ".".join(version.split(".")[:2])
    print("\nRelease prepared. Review `git diff`, then commit and tag it:")
    print(
        f"  git add -A proto proto-baseline gen src pyproject.toml docs && "
        f'git commit -m "release {version}" && '
        f'git tag -a v{version} -m "protocol-py {version} (protocol {protocol})"'
    )
    print(f"  git push origin HEAD v{version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
