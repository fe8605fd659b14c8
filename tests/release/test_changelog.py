"""CHANGELOG.md in Keep a Changelog form: every release heading ``## [X.Y.Z] - YYYY-MM-DD``
(newest first), and a reference at the bottom for every heading that names its changes as a git
revision range of the ``vX.Y.Z`` release tags, with no host or placeholder in it."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

from protocol_py._moved import MOVED

CHANGELOG = (Path(__file__).resolve().parents[2] / "CHANGELOG.md").read_text(encoding="utf-8")

HEADING = re.compile(r"^## \[([^\]]+)\](?: - (\S+))?$", re.MULTILINE)
REFERENCE = re.compile(r"^\[([^\]]+)\]: (\S+)$", re.MULTILINE)


def test_every_release_heading_has_an_iso_date_newest_first() -> None:
    headings = HEADING.findall(CHANGELOG)
    assert headings[0] == ("Unreleased", "")
    releases = headings[1:]
    assert [version for version, _ in releases][-2:] == ["1.1.0", "1.0.0"]
    dates = [date.fromisoformat(day) for _, day in releases]  # raises on a missing date
    assert dates == sorted(dates, reverse=True)
    # 1.0.0 is the date of commit 54e7225 (`git log -1 --format=%cs 54e7225`)
    assert dict(releases)["1.0.0"] == "2026-11-29"
    assert dict(releases)["1.1.0"] == "2026-12-01"


def test_every_heading_has_a_tag_range_reference_without_a_host() -> None:
    versions = [version for version, _ in HEADING.findall(CHANGELOG)]
    references = dict(REFERENCE.findall(CHANGELOG.split("\n## [1.0.0]", 1)[1]))
    assert list(references) == versions
    tags = [f"v{v}" for v in versions[1:]]
    expected = {"Unreleased": f"{tags[0]}...HEAD", versions[-1]: tags[-1]}
    for newer, older in zip(versions[1:], tags[1:], strict=False):
        expected[newer] = f"{older}...v{newer}"
    assert references == expected
    assert not any("://" in target or "<" in target for target in references.values())


def test_the_deprecated_entry_lists_every_old_module_path_and_where_it_went() -> None:
    """The "Deprecated" entry of the release that moved the modules (1.2.0, or [Unreleased]
    before it is released) names each old path of ``protocol_py._moved.MOVED`` once, under the
    package that holds its new modules."""
    sections = [s.split("\n## [", 1)[0] for s in CHANGELOG.split("\n## [")[1:3]]
    (section,) = [s for s in sections if "### Deprecated\n" in s][:1]
    deprecated = section.split("### Deprecated\n", 1)[1].split("\n### ", 1)[0]
    listed: dict[str, str] = {}
    for package, paths in re.findall(
        r"^  - into `([\w.]+)`: (.*?)(?=^  - |\n\S|\Z)", deprecated, re.M | re.S
    ):
        for old in re.findall(r"`(protocol_py\.[\w.]+)`", paths.replace("\n", " ")):
            assert old not in listed, old
            listed[old] = package
    assert set(listed) == set(MOVED)
    for old, package in listed.items():
        assert all(new.startswith(package + ".") for new in MOVED[old]), (old, MOVED[old])
