"""The README and docs/ stay a map of the repository that is true: the README is a landing page
that links every docs page, every relative link and anchor resolves, every cited decision
(``docs/decisions.md#dN``, in code or docs) exists, and every module, object, constant and file
the pages name is there."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

from protocol_py._moved import MOVED

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, REPO / "DEVELOPMENT.md", *DOCS]
DECISIONS = REPO / "docs" / "decisions.md"

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
HEADING = re.compile(r"^#{1,6} (.+)$", re.MULTILINE)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^ *```.*?^ *```", re.MULTILINE | re.DOTALL)
CITATION = re.compile(r"docs/decisions\.md#(d\d+)")
DOTTED = re.compile(r"\b(protocol_py(?:_gen)?(?:\.[A-Za-z_]\w*)+)")
PATH = re.compile(r"^(?:\.\./)?[\w.-]+(?:/[\w.-]+)+/?$")
TOP_LEVEL = ("src", "tests", "benchmarks", "examples", "tools", "testdata", "proto", "docs", "gen")


def prose(text: str) -> str:
    """``text`` without its fenced code blocks (their content is code, not references)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"`|\*", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    return set(ANCHOR.findall(text)) | {slug(h) for h in HEADING.findall(prose(text))}


def resolve(dotted: str) -> object:
    """The module or object ``dotted`` names, walked from its top package: an attribute where
    there is one (the package root's lazy names included), else the submodule. Raises
    ``LookupError`` naming what is missing, or naming a deprecated path (docs use the layout of
    this release, not the paths kept for 1.x compatibility)."""
    parts = dotted.split(".")
    found: object = importlib.import_module(parts[0])
    path = parts[0]
    for name in parts[1:]:
        path = f"{path}.{name}"
        if hasattr(found, name):
            found = getattr(found, name)
            continue
        if path in MOVED:
            raise LookupError(f"{dotted}: {path} is a deprecated path")
        if not isinstance(found, ModuleType):
            raise LookupError(f"{dotted}: {path} does not exist")
        try:
            found = importlib.import_module(path)
        except ModuleNotFoundError as error:
            raise LookupError(f"{dotted}: {path} does not exist") from error
    return found


def test_readme_is_a_landing_page_that_links_every_docs_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 250
    linked = {target.split("#", 1)[0] for target in LINK.findall(text)}
    assert {f"docs/{page.name}" for page in DOCS} <= linked
    assert {"DEVELOPMENT.md", "CHANGELOG.md"} <= linked


def test_the_readme_keeps_the_two_set_up_commands() -> None:
    blocks = re.findall(r"^```sh\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)
    venv = "python3 -m venv .venv && "
    assert blocks[:2] == [
        f"{venv}.venv/bin/pip install -e . && .venv/bin/protocol-py serve\n",
        f'{venv}.venv/bin/pip install -e ".[dev]" && .venv/bin/python -m pytest -q\n',
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL
        path_text, _, anchor = target.partition("#")
        path = (page.parent / path_text).resolve() if path_text else page
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no such anchor")
    assert broken == []


def test_decisions_have_consecutive_anchors_each_with_its_section() -> None:
    text = DECISIONS.read_text(encoding="utf-8")
    ids = ANCHOR.findall(text)
    assert ids == [f"d{n}" for n in range(1, len(ids) + 1)] and len(ids) >= 16
    for n in range(1, len(ids) + 1):
        assert re.search(rf'<a id="d{n}"></a>\n## D{n}\. \S', text), f"d{n}"


def test_every_cited_decision_exists() -> None:
    known = set(ANCHOR.findall(DECISIONS.read_text(encoding="utf-8")))
    cited: dict[str, str] = {}
    for folder in ("src", "tests", "benchmarks", "tools", "examples", "docs", "testdata"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix in {".py", ".md"} and path.is_file():
                for anchor in CITATION.findall(path.read_text(encoding="utf-8")):
                    cited.setdefault(anchor, str(path.relative_to(REPO)))
    for page in (README, REPO / "DEVELOPMENT.md", REPO / "CHANGELOG.md"):
        for anchor in CITATION.findall(page.read_text(encoding="utf-8")):
            cited.setdefault(anchor, page.name)
    assert {a: where for a, where in cited.items() if a not in known} == {}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_module_and_object_a_page_names_exists(page: Path) -> None:
    missing = []
    for span in CODE_SPAN.findall(prose(page.read_text(encoding="utf-8"))):
        for dotted in DOTTED.findall(span):
            try:
                resolve(dotted)
            except LookupError as error:
                missing.append(str(error))
    assert missing == []


def file_candidates(page: Path, text: str) -> list[Path]:
    """Where a path named on ``page`` may live: the repository root, and for a module or proto
    path given relative to the package (decisions.md, adapters.md) the package or proto/."""
    candidates = [REPO / text, page.parent / text]
    if text.endswith(".py"):
        package = REPO / "src" / "protocol_py"
        candidates += [package / text, package / "providers" / text]
    if text.endswith(".proto"):
        candidates.append(REPO / "proto" / text)
    return candidates


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_file_a_page_names_exists(page: Path) -> None:
    missing = []
    for span in CODE_SPAN.findall(prose(page.read_text(encoding="utf-8"))):
        text = span.strip().split(" ", 1)[0]
        if not PATH.match(text) or any(mark in text for mark in ("...", "X.Y", "<")):
            continue
        top = text.split("/", 1)[0]
        relative = Path(text).suffix in {".py", ".proto"}
        if top not in TOP_LEVEL and not relative:
            continue
        if text.startswith("../shared/"):
            continue  # the shared fixtures live beside the repository, not in it
        if not any(candidate.exists() for candidate in file_candidates(page, text)):
            missing.append(text)
    assert missing == []


def server_limits() -> list[tuple[str, str]]:
    """(default, constant column) of each row of docs/server.md's limits table."""
    text = (REPO / "docs" / "server.md").read_text(encoding="utf-8")
    table = text.split("## Limits and timeouts", 1)[1].split("\n\n| bound |", 1)[1]
    rows = []
    for line in table.split("\n\n", 1)[0].splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        rows.append((cells[1], cells[2]))
    return rows


UNITS = {
    "s": 1,
    "bytes": 1,
    "KiB": 1024,
    "MiB": 1024**2,
    "Ki characters": 1024,
    "Mi characters": 1024**2,
}


def quantity(text: str) -> float | None:
    """``64 MiB`` -> 67108864, ``0.5 s`` -> 0.5, ``1,000`` -> 1000; None for anything else."""
    match = re.fullmatch(r"([\d,]+(?:\.\d+)?)(?: (.+))?", text)
    if match is None or (match.group(2) is not None and match.group(2) not in UNITS):
        return None
    return float(match.group(1).replace(",", "")) * UNITS.get(match.group(2) or "bytes", 1)


def test_every_server_limit_names_a_real_constant_with_the_documented_default() -> None:
    rows = server_limits()
    assert len(rows) >= 20
    checked = 0
    for default, column in rows:
        names = [
            span
            for span in CODE_SPAN.findall(column.split(";", 1)[0])
            if re.fullmatch(r"[a-z_]+(\.[a-z_]+)*\.[A-Z][A-Z0-9_]*", span)
        ]
        if not names:
            continue  # h2's own settings
        module = importlib.import_module("protocol_py." + names[0].rsplit(".", 1)[0])
        values = [getattr(module, name.rsplit(".", 1)[-1]) for name in names]
        for name in CODE_SPAN.findall(column):
            if re.fullmatch(r"[A-Z][A-Z0-9_]*", name):  # a sibling constant of the same module
                assert isinstance(module, ModuleType) and hasattr(module, name), (column, name)
        expected = quantity(default.split(";", 1)[0])
        if expected is not None and len(names) == 1:
            assert values[0] == expected, (default, names[0], values[0])
            checked += 1
    assert checked >= 10
