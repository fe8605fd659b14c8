"""tools/check and tools/generate, exercised on a scratch copy of the repository.

Each test copies proto/, gen/, buf.yaml, buf.gen.yaml, proto-baseline/ and tools/ into a
temporary directory and runs the tools there with this interpreter, so an edit made to prove a
failure can never touch the working tree. Proves: a breaking proto change fails tools/check, a
hand edit (or an added or removed file) under gen/ fails it naming the file, badly formatted or
badly named protos fail it, and regeneration is byte-reproducible.
"""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
COPIED = ("proto", "gen", "buf.yaml", "buf.gen.yaml", "proto-baseline", "tools")
BUF_STEPS = ("lint", "format", "breaking", "drift")
COMMON_PROTO = Path("proto/common/v1/types.proto")
MODEL_PROTO = Path("proto/model/v1/types.proto")
MODEL_STUB = Path("gen/python/protocol_py_gen/model/v1/__init__.py")


def copy_repo(dest: Path, names: tuple[str, ...] = COPIED) -> Path:
    """Copy ``names`` (files or folders of the repository) into the new folder ``dest``."""
    dest.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in names:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=ignore)
        else:
            shutil.copy2(source, dest / name)
    return dest


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return copy_repo(tmp_path / "repo")


def run_tool(repo: Path, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(repo / "tools" / tool), *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def check(repo: Path, *steps: str) -> subprocess.CompletedProcess[str]:
    return run_tool(repo, "check", *(arg for step in steps for arg in ("--step", step)))


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} not found exactly once in {path}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def tree(base: Path) -> dict[str, bytes]:
    return {
        p.relative_to(base).as_posix(): p.read_bytes()
        for p in sorted(base.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_pristine_copy_passes_the_buf_and_drift_steps(repo: Path) -> None:
    result = check(repo, *BUF_STEPS)
    assert result.returncode == 0, result.stdout + result.stderr
    for step in BUF_STEPS:
        assert f"== {step}: ok" in result.stdout
    assert "tools/check: all 4 steps passed" in result.stdout


@pytest.mark.parametrize(
    ("path", "old", "new", "message"),
    [
        # Renumbering a field.
        (
            COMMON_PROTO,
            "string session_id = 1;",
            "string session_id = 4;",
            'Previously present field "1" with name "session_id"',
        ),
        # Changing a field's type.
        (
            MODEL_PROTO,
            "int64 input_tokens = 1;",
            "int32 input_tokens = 1;",
            'changed type from "int64" to "int32"',
        ),
        # Renaming a field (its JSON name changes too).
        (
            MODEL_PROTO,
            "string provider_request_id = 1;",
            "string upstream_request_id = 1;",
            'changed name from "provider_request_id" to "upstream_request_id"',
        ),
    ],
)
def test_breaking_proto_edit_fails_check(
    repo: Path, path: Path, old: str, new: str, message: str
) -> None:
    edit(repo / path, old, new)
    result = check(repo, "breaking")
    assert result.returncode == 1, result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert message in output
    assert "== breaking: FAILED" in result.stdout
    assert "tools/check: FAILED: breaking" in result.stdout


def test_compatible_addition_passes_breaking(repo: Path) -> None:
    edit(
        repo / COMMON_PROTO,
        "  string working_directory = 3;\n",
        "  string working_directory = 3;\n  // A new field.\n  string locale = 4;\n",
    )
    result = check(repo, "breaking")
    assert result.returncode == 0, result.stdout + result.stderr
    # ...but the committed stubs are now stale, which the drift step reports.
    drift = check(repo, "drift")
    assert drift.returncode == 1
    assert "gen/python/protocol_py_gen/common/v1/__init__.py: differs" in drift.stdout
    assert "gen/descriptor/protocol.binpb: differs" in drift.stdout


def test_hand_edit_of_generated_file_fails_check_naming_it(repo: Path) -> None:
    stub = repo / MODEL_STUB
    stub.write_text(stub.read_text(encoding="utf-8") + "\n# patched by hand\n", encoding="utf-8")
    result = check(repo, "drift")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{MODEL_STUB.as_posix()}: differs from a fresh generation" in result.stdout
    assert "tools/check: FAILED: drift" in result.stdout
    # Only the edited file is reported.
    assert result.stdout.count(": differs from a fresh generation") == 1


def test_extra_missing_and_descriptor_edits_fail_check(repo: Path) -> None:
    (repo / "gen/python/protocol_py_gen/extra.py").write_text("x = 1\n", encoding="utf-8")
    (repo / "gen/python/protocol_py_gen/py.typed").unlink()
    image = repo / "gen/descriptor/protocol.json"
    image.write_text(image.read_text(encoding="utf-8").replace("CallContext", "CallKontext", 1))
    result = check(repo, "drift")
    assert result.returncode == 1
    assert "gen/python/protocol_py_gen/extra.py: not produced by generation" in result.stdout
    assert "gen/python/protocol_py_gen/py.typed: missing from the committed tree" in result.stdout
    assert "gen/descriptor/protocol.json: differs from a fresh generation" in result.stdout


def test_badly_formatted_proto_fails_format_step(repo: Path) -> None:
    edit(repo / COMMON_PROTO, "string turn_id = 2;", "string   turn_id=2 ;")
    result = check(repo, "format", "breaking")
    assert result.returncode == 1
    assert "== format: FAILED" in result.stdout
    assert "== breaking: ok" in result.stdout
    assert "turn_id" in result.stdout + result.stderr


def test_lint_violation_fails_lint_step(repo: Path) -> None:
    with (repo / COMMON_PROTO).open("a", encoding="utf-8") as handle:
        handle.write("\n// Bad name.\nmessage bad_name {}\n")
    result = check(repo, "lint")
    assert result.returncode == 1
    assert "bad_name" in result.stdout + result.stderr
    assert "PascalCase" in result.stdout + result.stderr


def test_missing_baseline_fails_breaking(repo: Path) -> None:
    shutil.rmtree(repo / "proto-baseline")
    result = check(repo, "breaking")
    assert result.returncode == 1
    assert "no proto-baseline/protocol-X.Y.binpb release image" in result.stdout


def test_generate_is_byte_reproducible_and_matches_the_committed_tree(repo: Path) -> None:
    shutil.rmtree(repo / "gen")
    first = run_tool(repo, "generate")
    assert first.returncode == 0, first.stdout + first.stderr
    once = tree(repo / "gen")
    second = run_tool(repo, "generate")
    assert second.returncode == 0, second.stdout + second.stderr
    assert tree(repo / "gen") == once
    committed = tree(REPO_ROOT / "gen")
    assert set(once) == set(committed)
    different = [
        rel
        for rel in once
        if not filecmp.cmp(repo / "gen" / rel, REPO_ROOT / "gen" / rel, shallow=False)
    ]
    assert different == []
    assert "gen/descriptor/protocol.binpb" in {f"gen/{rel}" for rel in once}


def test_generate_does_not_depend_on_project_ruff_settings(repo: Path) -> None:
    # The plugin formats with whatever ruff config it finds from its working directory;
    # tools/generate runs it from a scratch directory with a pinned ruff.toml.
    (repo / "pyproject.toml").write_text("[tool.ruff]\nline-length = 120\n", encoding="utf-8")
    (repo / "ruff.toml").write_text("line-length = 60\n", encoding="utf-8")
    result = run_tool(repo, "generate")
    assert result.returncode == 0, result.stdout + result.stderr
    assert tree(repo / "gen") == tree(REPO_ROOT / "gen")


def test_unknown_step_is_a_usage_error(repo: Path) -> None:
    result = check(repo, "nonsense")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


def test_generation_failure_fails_drift_and_shows_the_error(repo: Path) -> None:
    edit(repo / COMMON_PROTO, "string turn_id = 2;", "string turn_id = ;")
    result = check(repo, "drift")
    assert result.returncode == 1
    assert "== drift: FAILED" in result.stdout
    assert "common/v1/types.proto" in result.stdout
